//! The web page of `cairn serve`: HTML written on the server from the verbs' JSON answers, with
//! no build step and no framework (a few lines of script refresh the sources while indexing
//! runs). Every text that comes from a page or a request goes through [`esc`]: a note titled
//! `<script>` is shown, never run.

use serde_json::Value;
use std::fmt::Write;

/// Text made safe inside HTML elements and quoted attributes.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A value made safe inside a URL's query.
pub fn url_part(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn n(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or_default()
}

fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// A JSON value as short text (a string as itself).
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#222}\
nav{background:#2d3a3a;padding:.6em 1em}nav a{color:#fff;margin-right:1.2em;text-decoration:none}\
main{max-width:60em;margin:1em auto;padding:0 1em}input[type=search]{width:28em;font-size:1em;padding:.3em}\
.r{border-bottom:1px solid #ddd;padding:.6em 0}.r h3{margin:0 0 .2em}.meta{color:#666;font-size:.9em}\
.b{display:inline-block;border-radius:3px;padding:0 .4em;font-size:.85em;margin-right:.3em;background:#eee}\
.exists{background:#1f7a3a;color:#fff}.probable{background:#d9a400}.unknown{background:#ccc}\
pre{white-space:pre-wrap;background:#f6f6f6;padding:.6em}table{border-collapse:collapse}\
td,th{border-bottom:1px solid #ddd;padding:.3em .6em;text-align:left;vertical-align:top}\
.note{color:#8a4b00}progress{width:10em}";

/// A whole page: the navigation, `title` and `body` (already HTML).
pub fn layout(title: &str, body: &str) -> String {
    format!(
        "<!doctype html><html lang=en><head><meta charset=utf-8><meta name=viewport content=\"width=device-width\">\
<title>{} · cairn</title><style>{STYLE}</style></head><body><nav><a href=\"/\">Search</a><a href=\"/sources\">Sources</a>\
<a href=\"/telemetry\">Telemetry</a></nav><main>{body}</main></body></html>",
        esc(title)
    )
}

/// What the search form holds, as typed: the query, its mode, and its filters (lists are
/// comma-separated: `source`, `tag`, `path`, `type`; days are `YYYY-MM-DD`).
#[derive(Debug, Default, Clone, Copy)]
pub struct Form<'a> {
    pub query: &'a str,
    pub mode: &'a str,
    pub sources: &'a str,
    pub tags: &'a str,
    pub paths: &'a str,
    pub types: &'a str,
    pub after: &'a str,
    pub before: &'a str,
}

impl Form<'_> {
    /// The filters as the form names them, with what each holds.
    fn filters(&self) -> [(&'static str, &'static str, &str); 6] {
        [
            ("source", "sources", self.sources),
            ("tag", "tags", self.tags),
            ("path", "folders or globs", self.paths),
            ("type", "types", self.types),
            ("after", "modified on or after (YYYY-MM-DD)", self.after),
            ("before", "modified before (YYYY-MM-DD)", self.before),
        ]
    }
}

/// The search form, filled with the last query and its filters (open when any is set).
fn search_form(form: &Form<'_>) -> String {
    let option = |m: &str| format!("<option{}>{m}</option>", if m == form.mode { " selected" } else { "" });
    let filters = form.filters();
    let open = if filters.iter().any(|(_, _, v)| !v.is_empty()) { " open" } else { "" };
    let inputs: String = filters
        .iter()
        .map(|(name, what, value)| {
            format!(
                "<label>{name} <input name={name} value=\"{}\" placeholder=\"{what}\"></label> ",
                esc(value)
            )
        })
        .collect();
    format!(
        "<form action=\"/\" method=get><input type=search name=q autofocus value=\"{}\" placeholder=\"a page's name, or what it is about\"> \
<select name=mode>{}{}{}</select> <button>Search</button><details{open}><summary>Filters</summary>{inputs}</details></form>",
        esc(form.query),
        option("balanced"),
        option("fast"),
        option("thorough")
    )
}

/// The search page: the form, then the answer (or why there is none).
pub fn search(form: &Form<'_>, answer: Option<&Value>, error: Option<&str>) -> String {
    let query = form.query;
    let mut body = search_form(form);
    if let Some(e) = error {
        let _ = write!(body, "<p class=note>{}</p>", esc(e));
    }
    if let Some(a) = answer {
        let results = list(a, "results");
        let _ = write!(
            body,
            "<p class=meta>{} results in {:.0} ms{}</p>",
            results.len(),
            n(a, "latency_ms"),
            a.get("pending_changes").and_then(Value::as_u64).map_or_else(
                || " · pending changes unknown: not proof that a page is absent".to_string(),
                |p| format!(" · {p} changes pending")
            )
        );
        for r in results {
            body.push_str(&result(r, query));
        }
        for note in list(a, "notes").iter().chain(list(a, "degraded")) {
            let _ = write!(body, "<p class=note>{}</p>", esc(&text(note)));
        }
    }
    layout(if query.is_empty() { "Search" } else { query }, &body)
}

fn page_link(source: &str, slug: &str) -> String {
    format!("/page?source={}&slug={}", url_part(source), url_part(slug))
}

/// One result: its title (to its page), why it matched, whether it certainly exists, its best
/// chunk.
fn result(r: &Value, query: &str) -> String {
    let (source, slug) = (s(r, "source"), s(r, "slug"));
    let safety = s(r, "create_safety");
    let evidence: Vec<String> =
        list(r, "evidence").iter().map(|e| format!("<span class=b>{}</span>", esc(&text(e)))).collect();
    let chunk = r.get("chunk").map_or_else(String::new, |c| {
        format!("<pre>{}</pre><div class=meta>{}</div>", esc(s(c, "text")), esc(s(c, "heading_path")))
    });
    let why = format!("/diagnose?q={}&target={}", url_part(query), url_part(&format!("{source}:{slug}")));
    format!(
        "<div class=r><h3><a href=\"{}\">{}</a></h3><div class=meta><span class=\"b {}\">{}</span>{} \
{}:{} · score {:.3} · <a href=\"{}\">why</a></div>{chunk}</div>",
        page_link(source, slug),
        esc(s(r, "title")),
        esc(safety),
        esc(safety),
        evidence.join(""),
        esc(source),
        esc(slug),
        n(r, "score"),
        why
    )
}

/// A page with its body (as text), its links out and the pages that link to it.
pub fn page(p: &Value, links: Option<&Value>) -> String {
    let source = s(p, "source");
    let mut body = format!(
        "<h2>{}</h2><p class=meta>{}:{} · {}</p>",
        esc(s(p, "title")),
        esc(source),
        esc(s(p, "slug")),
        esc(s(p, "path"))
    );
    let names: Vec<String> = list(p, "aliases").iter().map(|a| esc(&text(a))).collect();
    if !names.is_empty() {
        let _ = write!(body, "<p>Also called: {}</p>", names.join(", "));
    }
    let tags: Vec<String> =
        list(p, "tags").iter().map(|t| format!("<span class=b>#{}</span>", esc(&text(t)))).collect();
    body.push_str(&tags.join(""));
    let _ = write!(body, "<pre>{}</pre>", esc(s(p, "body")));
    if let Some(l) = links {
        body.push_str("<h3>Links</h3><ul>");
        for o in list(l, "outgoing") {
            let target = esc(s(o, "target"));
            match o.get("resolved").and_then(Value::as_str) {
                Some(to) => {
                    let _ = write!(body, "<li><a href=\"{}\">{target}</a></li>", page_link(source, to));
                }
                None => {
                    let _ = write!(body, "<li>{target} <span class=meta>(no such page)</span></li>");
                }
            }
        }
        body.push_str("</ul><h3>Backlinks</h3><ul>");
        for b in list(l, "backlinks") {
            let _ = write!(
                body,
                "<li><a href=\"{}\">{}</a> <span class=meta>as “{}”</span></li>",
                page_link(source, s(b, "slug")),
                esc(s(b, "title")),
                esc(s(b, "target"))
            );
        }
        body.push_str("</ul>");
    }
    layout(s(p, "title"), &body)
}

/// Every source's state, as a table (also refreshed alone while indexing runs).
pub fn sources_table(status: &Value) -> String {
    let mut t = String::from(
        "<table><tr><th>source</th><th>state</th><th>pages</th><th>vectors</th><th>pending</th><th>lag</th><th>language</th><th>read by</th><th>problems</th></tr>",
    );
    let readers = list(status, "readers");
    for src in list(status, "sources") {
        let chunks = n(src, "chunks");
        let waiting = n(src, "vectors_pending");
        let done = (chunks - waiting).max(0.0);
        let rate = n(src, "embed_rate");
        let eta = if waiting > 0.0 && rate > 0.0 {
            format!(" · ~{:.0} s left", waiting / rate)
        } else {
            String::new()
        };
        let mut problems: Vec<String> = list(src, "failures")
            .iter()
            .map(|f| format!("{}: {}", esc(s(f, "path")), esc(&text(f.get("reason").unwrap_or(f)))))
            .collect();
        if let Some(e) = src.get("error").and_then(Value::as_str) {
            problems.push(esc(e));
        }
        let read_by: Vec<String> = readers
            .iter()
            .filter_map(|r| {
                let v = r["as_of"].get(s(src, "source"))?.as_f64()?;
                let behind = n(src, "version") - v;
                let behind = if behind > 0.0 { format!(", {behind:.0} behind") } else { String::new() };
                Some(format!("pid {} on {}: v{v:.0}{behind}", n(r, "pid"), esc(s(r, "host"))))
            })
            .collect();
        let _ = write!(
            t,
            "<tr><td>{}<div class=meta>{}</div></td><td>{}</td><td>{}</td><td><progress max=\"{chunks}\" value=\"{done}\"></progress> \
{done:.0}/{chunks:.0}{eta}</td><td>{}</td><td>{:.1} s</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(s(src, "source")),
            esc(s(src, "root")),
            esc(s(src, "state")),
            n(src, "pages"),
            n(src, "pending"),
            n(src, "lag_ms") / 1000.0,
            esc(s(src, "language")),
            read_by.join("<br>"),
            problems.join("<br>")
        );
    }
    t.push_str("</table>");
    t
}

/// The one script (served as a file: the pages allow no inline script, so a note's text can
/// never run even if it got past [`esc`]): the sources table refreshed from the event stream,
/// at most twice a second.
pub const SCRIPT: &str = "const box = document.getElementById('sources');
if (box) {
  let due = 0;
  new EventSource('/events').onmessage = () => {
    if (due) return;
    due = setTimeout(async () => {
      due = 0;
      const r = await fetch('/sources?part=table');
      if (r.ok) box.innerHTML = await r.text();
    }, 500);
  };
}
";

/// The sources page: who writes, and each source (refreshed from the event stream).
pub fn sources(status: &Value) -> String {
    let writer = status.get("writer").map_or_else(
        || "this machine's owner".to_string(),
        |w| format!("pid {} (cairn {}) on {}", n(w, "pid"), esc(s(w, "purpose")), esc(s(w, "host"))),
    );
    let body = format!(
        "<h2>Sources</h2><p class=meta>This server is the database's {} · written by {writer}</p><div id=sources>{}</div>\
<script src=\"/app.js\"></script>",
        esc(s(status, "role")),
        sources_table(status)
    );
    layout("Sources", &body)
}

/// Rank-1 scores by day as a line, the share of `exists` at rank 1 as bars, and latency.
pub fn telemetry(stats: &Value) -> String {
    let q = stats.get("queries").cloned().unwrap_or(Value::Null);
    let days = list(&q, "days");
    let mut body = format!(
        "<h2>Telemetry</h2><p>{} queries answered · latency p50 {:.0} ms, p99 {:.0} ms</p>",
        n(&q, "answered"),
        n(&q, "p50_latency_ms"),
        n(&q, "p99_latency_ms")
    );
    body.push_str(&chart(days));
    body.push_str("<table><tr><th>day</th><th>queries</th><th>mean rank-1 score</th><th>exists at rank 1</th><th>p50 ms</th></tr>");
    for d in days {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.0} %</td><td>{:.0}</td></tr>",
            esc(s(d, "day")),
            n(d, "queries"),
            n(d, "mean_top_base_score"),
            100.0 * n(d, "exists_at_rank_1"),
            n(d, "p50_latency_ms")
        );
    }
    body.push_str("</table>");
    if let Some(drift) = q.get("drift").filter(|d| !d.is_null()) {
        let _ = write!(body, "<p class=note>drift: {}</p>", esc(&drift.to_string()));
    }
    layout("Telemetry", &body)
}

/// An SVG chart of the days: the mean rank-1 score (line, left axis 0..max) and the share of
/// `exists` at rank 1 (bars, 0..100 %).
pub fn chart(days: &[Value]) -> String {
    const W: f64 = 640.0;
    const H: f64 = 200.0;
    // Room above the highest point, so its mark is drawn whole.
    const TOP: f64 = 12.0;
    const PH: f64 = H - TOP;
    if days.is_empty() {
        return "<p class=meta>No queries recorded yet.</p>".into();
    }
    let top = days.iter().map(|d| n(d, "mean_top_base_score")).fold(0.0_f64, f64::max).max(1e-9);
    let step = W / days.len() as f64;
    let mut svg = format!(
        "<svg id=chart role=img aria-label=\"rank-1 score per day\" width=\"{W}\" height=\"{}\" viewBox=\"0 0 {W} {}\">",
        H + 20.0,
        H + 20.0
    );
    let mut line = Vec::new();
    for (i, d) in days.iter().enumerate() {
        let x = step * i as f64;
        let share = n(d, "exists_at_rank_1").clamp(0.0, 1.0);
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#cfe8d6\"><title>{}: exists at rank 1 {:.0} %</title></rect>",
            x + step * 0.1,
            H - share * PH,
            step * 0.8,
            share * PH,
            esc(s(d, "day")),
            share * 100.0
        );
        let (cx, cy) = (x + step / 2.0, H - n(d, "mean_top_base_score") / top * PH);
        line.push(format!("{cx:.1},{cy:.1}"));
        let _ = write!(
            svg,
            "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=3 fill=\"#2d3a3a\"><title>{}: mean rank-1 score {:.3}</title></circle>",
            esc(s(d, "day")),
            n(d, "mean_top_base_score")
        );
    }
    let _ = write!(
        svg,
        "<polyline fill=none stroke=\"#2d3a3a\" stroke-width=2 points=\"{}\"/>\
<text x=0 y=\"{}\" font-size=12>{} … {} · line: mean rank-1 score (max {top:.3}) · bars: exists at rank 1</text></svg>",
        line.join(" "),
        H + 16.0,
        esc(s(&days[0], "day")),
        esc(s(&days[days.len() - 1], "day"))
    );
    svg
}

/// Why a page was or was not found for a query.
pub fn diagnose(query: &str, target: &str, answer: Option<&Value>, error: Option<&str>) -> String {
    let mut body = format!(
        "<h2>Why isn't it found?</h2><form action=\"/diagnose\" method=get><input type=search name=q value=\"{}\" placeholder=query> \
<input name=target value=\"{}\" placeholder=\"SOURCE:SLUG\"> <button>Diagnose</button></form>",
        esc(query),
        esc(target)
    );
    if let Some(e) = error {
        let _ = write!(body, "<p class=note>{}</p>", esc(e));
    }
    if let Some(d) = answer {
        let _ = write!(body, "<p><b>{}</b></p>", esc(&text(d.get("verdict").unwrap_or(&Value::Null))));
        body.push_str("<table>");
        if let Some(map) = d.as_object() {
            for (k, v) in map.iter().filter(|(k, _)| *k != "verdict") {
                let _ = write!(body, "<tr><th>{}</th><td><pre>{}</pre></td></tr>", esc(k), esc(&text(v)));
            }
        }
        body.push_str("</table>");
    }
    layout("Diagnose", &body)
}

/// The sign-in form (a browser cannot send a bearer header by itself).
pub fn login(error: Option<&str>) -> String {
    let body = format!(
        "<h2>Sign in</h2>{}<form action=\"/login\" method=post><input type=password name=token placeholder=token autofocus> <button>Sign in</button></form>",
        error.map_or_else(String::new, |e| format!("<p class=note>{}</p>", esc(e)))
    );
    layout("Sign in", &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_script_in_a_title_an_alias_a_body_or_a_query_is_text() {
        let evil = "<script>alert('x')</script>";
        let page = json!({"source": "v", "slug": "s", "title": evil, "path": "s.md", "aliases": [evil],
            "tags": [evil], "body": evil});
        let answer = json!({"results": [{"source": "v", "slug": "s", "title": evil, "create_safety": "exists",
            "evidence": [evil], "score": 1.0, "chunk": {"text": evil, "heading_path": evil}}], "notes": [evil]});
        for html in [
            page_html(&page),
            search(&Form { query: evil, mode: "balanced", ..Form::default() }, Some(&answer), Some(evil)),
        ] {
            assert!(!html.contains("<script>alert"), "{html}");
            assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), "{html}");
        }
        assert!(!diagnose(evil, evil, None, Some(evil)).contains("<script>alert"));
        // A slug cannot break out of its link either.
        assert!(page_link("v", "a\" onclick=\"x").contains("a%22%20onclick%3D%22x"));
    }

    fn page_html(p: &Value) -> String {
        page(
            p,
            Some(
                &json!({"outgoing": [{"target": "<b>", "resolved": "<b>"}], "backlinks": [{"slug": "<i>", "title": "<i>", "target": "<i>"}]}),
            ),
        )
    }

    #[test]
    fn the_chart_has_a_bar_per_day_and_a_point_per_day() {
        let days = [
            json!({"day": "2026-12-01", "mean_top_base_score": 0.8, "exists_at_rank_1": 0.5}),
            json!({"day": "2026-12-02", "mean_top_base_score": 0.4, "exists_at_rank_1": 0.25}),
        ];
        let svg = chart(&days);
        assert_eq!((svg.matches("<rect").count(), svg.matches("<circle").count()), (2, 2), "{svg}");
        // The best day's score is at the top (below a margin of 12), the other at half height; the
        // bars say the share.
        assert!(svg.contains("points=\"160.0,12.0 480.0,106.0\""), "{svg}");
        assert!(svg.contains("exists at rank 1 50 %"), "{svg}");
        assert!(chart(&[]).contains("No queries"));
    }

    #[test]
    fn the_vectors_bar_and_its_eta_come_from_the_status() {
        let status = json!({"sources": [{"source": "v", "root": "/n", "state": "indexing", "pages": 10,
            "chunks": 200, "vectors_pending": 50, "embed_rate": 25.0, "pending": 0, "lag_ms": 0, "failures": []}]});
        let t = sources_table(&status);
        assert!(t.contains("<progress max=\"200\" value=\"150\">"), "{t}");
        assert!(t.contains("150/200 · ~2 s left"), "{t}");
    }

    #[test]
    fn the_form_keeps_its_filters_as_text_and_opens_when_one_is_set() {
        let plain = search(&Form { query: "owls", mode: "fast", ..Form::default() }, None, None);
        assert!(plain.contains("<option selected>fast</option>") && plain.contains("<details>"), "{plain}");
        let form = Form { query: "owls", mode: "balanced", tags: "\"><b>x", ..Form::default() };
        let filtered = search(&form, None, None);
        assert!(filtered.contains("<details open>"), "{filtered}");
        assert!(filtered.contains("name=tag value=\"&quot;&gt;&lt;b&gt;x\""), "{filtered}");
    }

    #[test]
    fn each_reader_is_shown_with_how_far_behind_the_source_it_is() {
        let status = json!({"sources": [{"source": "v", "version": 12}, {"source": "w", "version": 4}],
            "readers": [{"host": "<b>lap</b>", "pid": 7, "machine": "m", "as_of": {"v": 10, "w": 4}, "said_unix_ms": 0}]});
        let t = sources_table(&status);
        assert!(t.contains("pid 7 on &lt;b&gt;lap&lt;/b&gt;: v10, 2 behind"), "{t}");
        assert!(t.contains("pid 7 on &lt;b&gt;lap&lt;/b&gt;: v4</td>"), "{t}");
    }
}

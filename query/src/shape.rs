//! Answers sized for an agent's context: how much of each result an answer carries (`detail`),
//! and a bound on the whole (`max_tokens`).
//!
//! Clients cut tool output (often at 25k tokens) and agents pay for every token they read, so a
//! list never carries page bodies: `ids` is what identifies a result and why it matched,
//! `snippets` adds the best chunk cut to [`SNIPPET_CHARS`], `full` is the whole answer. Under a
//! token bound, results are left out from the end (the worst first) until the answer fits, and
//! the answer says so (`truncated`, `left_out`).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// How much of each result an answer carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Detail {
    /// Source, slug, title, `create_safety` (or verdict) and evidence names.
    Ids,
    /// Plus path, score and the best chunk cut to [`SNIPPET_CHARS`].
    Snippets,
    /// Everything (the answer as `--json` prints it).
    #[default]
    Full,
}

impl std::str::FromStr for Detail {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ids" => Ok(Detail::Ids),
            "snippets" => Ok(Detail::Snippets),
            "full" => Ok(Detail::Full),
            other => Err(format!("detail `{other}`: expected ids, snippets or full")),
        }
    }
}

/// Characters of a snippet (a best chunk cut at a word, with `…`).
pub const SNIPPET_CHARS: usize = 300;

/// Bytes taken for one token when bounding an answer: JSON of English text averages about four
/// bytes a token with the tokenizers agents use, so the estimate errs on the safe side for prose
/// and is close for JSON punctuation.
pub const BYTES_PER_TOKEN: usize = 4;

/// Estimated tokens of a JSON value.
pub fn tokens_of(v: &Value) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len().div_ceil(BYTES_PER_TOKEN))
}

/// `text` cut to `max` characters at a word boundary, with `…` when cut.
pub fn snippet(text: &str, max: usize) -> String {
    let text = text.trim();
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    let at = cut.rfind(char::is_whitespace).filter(|&i| i > max / 2).unwrap_or(cut.len());
    format!("{}…", cut[..at].trim_end())
}

/// The keys of a search result kept at each detail (`full` keeps all).
const IDS: [&str; 5] = ["source", "slug", "title", "create_safety", "evidence"];
const SNIPPETS: [&str; 10] =
    ["path", "score", "cosine", "chunk", "learnt", "subject", "stale", "boosts", "verdict", "advice"];

/// One result (a search result or a check candidate, as JSON) at `detail`.
pub fn result_at(mut r: Value, detail: Detail) -> Value {
    let Some(obj) = r.as_object_mut() else { return r };
    if detail == Detail::Full {
        return r;
    }
    let keep =
        |k: &str| IDS.contains(&k) || k == "verdict" || (detail == Detail::Snippets && SNIPPETS.contains(&k));
    obj.retain(|k, _| keep(k));
    if let Some(text) = obj.get_mut("chunk").and_then(|c| c.get_mut("text"))
        && let Some(t) = text.as_str()
    {
        *text = Value::String(snippet(t, SNIPPET_CHARS));
    }
    r
}

/// An answer (`--json`'s document) with its list under `list_key` shaped to `detail`, then cut to
/// `max_tokens`: results left out from the end, `truncated: true` and `left_out` saying how many.
/// A bound too small for even the answer without results leaves out its notes too.
pub fn shape(answer: Value, list_key: &str, detail: Detail, max_tokens: Option<usize>) -> Value {
    let mut answer = answer;
    let Some(obj) = answer.as_object_mut() else { return answer };
    if detail != Detail::Full {
        obj.remove("explain");
        if let Some(Value::Array(list)) = obj.get_mut(list_key) {
            let shaped: Vec<Value> = list.drain(..).map(|r| result_at(r, detail)).collect();
            *list = shaped;
        }
    }
    let Some(max) = max_tokens else { return answer };
    let mut left_out = 0usize;
    let mut notes_left_out = 0usize;
    while tokens_of(&answer) > max {
        let obj = answer.as_object_mut().expect("an object");
        let popped = match obj.get_mut(list_key) {
            Some(Value::Array(list)) if !list.is_empty() => list.pop().is_some(),
            _ => false,
        };
        if popped {
            left_out += 1;
            continue;
        }
        match obj.get_mut("notes") {
            Some(Value::Array(notes)) if !notes.is_empty() => {
                notes.pop();
                notes_left_out += 1;
            }
            _ => break,
        }
    }
    if left_out + notes_left_out > 0 {
        let obj = answer.as_object_mut().expect("an object");
        obj.insert("truncated".into(), Value::Bool(true));
        obj.insert("left_out".into(), json!({ list_key: left_out, "notes": notes_left_out }));
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(n: usize) -> Value {
        let results: Vec<Value> = (0..n)
            .map(|i| {
                json!({
                    "source": "notes", "slug": format!("page-{i}"), "title": format!("Page {i}"),
                    "path": format!("page-{i}.md"), "score": 1.0, "base_score": 1.0, "cosine": 0.5,
                    "evidence": ["weak_semantic"], "create_safety": "unknown",
                    "chunk": {"text": "word ".repeat(400), "heading_path": "Page", "line_start": 1, "line_end": 9},
                    "boosts": [], "explain": {"why": "x".repeat(500)}
                })
            })
            .collect();
        json!({"query": "q", "results": results, "degraded": [], "notes": ["a note"], "pending_changes": 0})
    }

    #[test]
    fn each_detail_keeps_what_it_says_and_never_a_body() {
        let ids = shape(answer(3), "results", Detail::Ids, None);
        let r = &ids["results"][0];
        let keys: Vec<&str> = r.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 5, "{keys:?}");
        assert!(r.get("chunk").is_none() && r["create_safety"] == "unknown");
        let snip = shape(answer(3), "results", Detail::Snippets, None);
        let text = snip["results"][0]["chunk"]["text"].as_str().unwrap();
        assert!(text.chars().count() <= SNIPPET_CHARS + 1 && text.ends_with('…'), "{text}");
        assert!(snip["results"][0].get("explain").is_none());
        let full = shape(answer(3), "results", Detail::Full, None);
        assert_eq!(full, answer(3));
        // The answer's own fields stay at every detail.
        assert_eq!(ids["pending_changes"], 0);
    }

    #[test]
    fn a_token_bound_leaves_out_the_last_results_and_says_so() {
        let full = answer(20);
        assert!(tokens_of(&full) > 4000);
        let cut = shape(full, "results", Detail::Snippets, Some(1000));
        assert!(tokens_of(&cut) <= 1000, "{}", tokens_of(&cut));
        assert_eq!(cut["truncated"], true);
        let kept = cut["results"].as_array().unwrap().len();
        assert_eq!(cut["left_out"]["results"].as_u64().unwrap() as usize + kept, 20);
        assert_eq!(cut["results"][0]["slug"], "page-0", "the best are kept");
        // Under the bound: untouched, no `truncated`.
        let small = shape(answer(1), "results", Detail::Ids, Some(1000));
        assert!(small.get("truncated").is_none());
        // A bound under the bare answer: notes go too, and it says so.
        let tiny = shape(answer(2), "results", Detail::Ids, Some(10));
        assert_eq!(
            (tiny["left_out"]["results"].as_u64(), tiny["left_out"]["notes"].as_u64()),
            (Some(2), Some(1))
        );
    }

    #[test]
    fn a_snippet_is_cut_at_a_word() {
        assert_eq!(snippet("short text", 300), "short text");
        let s = snippet(&"alpha beta ".repeat(50), 30);
        assert!(s.ends_with('…') && !s.contains("alph…"), "{s}");
    }
}

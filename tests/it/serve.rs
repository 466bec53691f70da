//! `cairn serve`: the verbs as JSON, the web page and MCP over HTTP, asked as a client on another
//! host would (plain HTTP/1.1 over TCP; the official Python MCP SDK for /mcp), and what it must
//! refuse: a name it is not, another site's page, a missing token, a write while read-only.

use crate::machines::Reaped;
use crate::support::{Log, cairn_bin, three_notes, write};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// One answer: status, head (lower-cased), body.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) head: String,
    pub(crate) body: String,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One request on its own connection; `headers` may replace `Host`.
pub(crate) fn ask(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let (status, head, body) = crate::http::exchange(addr, method, path, headers, body);
    Answer { status, head: head.to_ascii_lowercase(), body }
}

/// `cairn serve` with `args`, once it listens: the process, its log, its address.
pub(crate) fn serve(db: &Path, args: &[&str]) -> (Reaped, Log, String) {
    serve_with(db, args, &[])
}

/// [`serve`] with more environment (fault points).
pub(crate) fn serve_with(db: &Path, args: &[&str], env: &[(&str, &str)]) -> (Reaped, Log, String) {
    let mut cmd = Command::new(cairn_bin());
    cmd.args(["serve", "--db", db.to_str().unwrap(), "--listen", "127.0.0.1:0"]).args(args);
    cmd.envs(env.iter().copied());
    listening(cmd)
}

/// A `cairn serve` command started, once it listens: the process, its log, its address.
pub(crate) fn listening(mut cmd: Command) -> (Reaped, Log, String) {
    let mut child = Reaped(cmd.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    let log = Log::of(child.0.stderr.take().unwrap());
    let line = log.first_of(&["listening on http://"]);
    let addr = line.split("http://").nth(1).unwrap().split_whitespace().next().unwrap().to_string();
    (child, log, addr)
}

pub(crate) fn stop(child: &mut Reaped, log: &Log) {
    assert!(Command::new("kill").args(["-TERM", &child.0.id().to_string()]).status().unwrap().success());
    assert!(child.0.wait().unwrap().success(), "stops cleanly:\n{}", log.text());
    // Said before it exited; the reader of its stderr may not have read it yet.
    log.wait_for("stopped cleanly");
}

const EVIL: &str = "<script>alert('owned')</script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_agents_and_people_over_http_and_refuses_what_it_must() {
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db) = three_notes(tmp.path()).await;
    // A page whose every part is markup, linking to the amphitheater by its alias.
    write(
        &vault,
        "evil.md",
        &format!(
            "---\ntitle: \"{EVIL}\"\naliases: [\"{EVIL} alias\"]\n---\n\n{EVIL} visits the [[Hall of Light]].\n"
        ),
    );
    // A: the owner, which may write; B: read-only, with a token, a client of A.
    let (mut a, a_log, a_addr) =
        serve(&db, &["--allow-writes", "--source", &format!("notes={}", vault.display())]);
    let flushed = ask(&a_addr, "POST", "/api/flush", &[], "{\"vectors\": true}");
    assert_eq!(flushed.status, 200, "{}", flushed.body);
    let token = "serve-test-token-0123456789";
    let token_file = tmp.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let (mut b, b_log, addr) = serve(&db, &["--token-file", token_file.to_str().unwrap()]);
    let bearer = format!("Bearer {token}");
    let auth = [("Authorization", bearer.as_str())];
    let api = |verb: &str, body: Value| ask(&addr, "POST", &format!("/api/{verb}"), &auth, &body.to_string());

    // The verbs, as JSON, with the socket's answers and errors.
    let found = api("search", json!({"request": {"query": "Hall of Light"}}));
    assert_eq!(found.status, 200, "{}", found.body);
    let top = &found.json()["results"][0];
    assert_eq!(
        (top["slug"].as_str(), top["create_safety"].as_str()),
        (Some("venues/amphitheater"), Some("exists"))
    );
    let checked = api("check", json!({"title": "Hall of Light", "body": "A venue."}));
    assert_eq!(checked.json()["verdict"], "exists", "{}", checked.body);
    let status = api("status", json!({}));
    assert_eq!(status.json()["role"], "client", "{}", status.body);
    let empty = api("search", json!({"request": {"query": "  "}}));
    assert_eq!(
        (empty.status, empty.json()["error"]["code"].as_str()),
        (400, Some("usage")),
        "{}",
        empty.body
    );
    let write_verb = api("reindex", json!({"id": "notes"}));
    assert_eq!(write_verb.status, 403, "{}", write_verb.body);
    assert!(write_verb.body.contains("--allow-writes"), "{}", write_verb.body);
    assert_eq!(api("no_such_verb", json!({})).status, 404);
    assert_eq!(ask(&addr, "POST", "/api/search", &auth, "{not json").status, 400);
    // A body said to be over the bound is refused before it is read.
    let huge = [("Authorization", bearer.as_str()), ("Content-Length", "2097152")];
    assert_eq!(ask(&addr, "POST", "/api/search", &huge, "{}").status, 413);

    // Refusals: no token, a name it is not (DNS rebinding), another site's page.
    let bare = ask(&addr, "POST", "/api/search", &[], &json!({"request": {"query": "owls"}}).to_string());
    assert_eq!(bare.status, 401, "{}", bare.body);
    let rebound = [("Authorization", bearer.as_str()), ("Host", "evil.example")];
    assert_eq!(ask(&addr, "GET", "/?q=owls", &rebound, "").status, 403);
    let cross = [("Authorization", bearer.as_str()), ("Origin", "https://evil.example")];
    let crossed =
        ask(&addr, "POST", "/api/search", &cross, &json!({"request": {"query": "owls"}}).to_string());
    assert_eq!(crossed.status, 403, "{}", crossed.body);

    // A person: signed in by the form, then the pages by cookie.
    let door = ask(&addr, "GET", "/", &[], "");
    assert_eq!(door.status, 401);
    assert!(door.body.contains("action=\"/login\""), "{}", door.body);
    let wrong = ask(&addr, "POST", "/login", &[], "token=nope");
    assert_eq!(wrong.status, 401);
    let signed = ask(&addr, "POST", "/login", &[], &format!("token={token}"));
    assert_eq!(signed.status, 303, "{}", signed.head);
    assert!(
        signed.head.contains("set-cookie: cairn_token=") && signed.head.contains("httponly"),
        "{}",
        signed.head
    );
    let cookie = format!("cairn_token={token}");
    let person = [("Cookie", cookie.as_str())];
    let results = ask(&addr, "GET", "/?q=hall+of+light", &person, "");
    assert_eq!(results.status, 200, "{}", results.body);
    assert!(
        results.body.contains("Indoor Greek Amphitheater") && results.body.contains(">exists<"),
        "{}",
        results.body
    );
    assert!(results.head.contains("content-security-policy: default-src 'self'"), "{}", results.head);
    // The form's filters restrict the search, and come back filled in.
    let within = ask(&addr, "GET", "/?q=hall+of+light&path=venues%2F&source=notes", &person, "");
    assert!(within.body.contains("Indoor Greek Amphitheater"), "{}", within.body);
    assert!(
        within.body.contains("<details open>") && within.body.contains("value=\"venues/\""),
        "{}",
        within.body
    );
    let outside = ask(&addr, "GET", "/?q=hall+of+light&path=elsewhere%2F", &person, "");
    assert!(!outside.body.contains("Indoor Greek Amphitheater"), "{}", outside.body);
    let bad_day = ask(&addr, "GET", "/?q=owls&after=yesterday", &person, "");
    assert!(bad_day.body.contains("class=note") && bad_day.body.contains("yesterday"), "{}", bad_day.body);
    let venue = ask(&addr, "GET", "/page?source=notes&slug=venues%2Famphitheater", &person, "");
    assert!(venue.body.contains("Four hundred seats"), "{}", venue.body);
    assert!(venue.body.contains("<a href=\"/page?source=notes&slug=evil\">"), "a backlink: {}", venue.body);
    // Markup in a page is shown as text, never run.
    for path in ["/page?source=notes&slug=evil", "/?q=alert+owned"] {
        let shown = ask(&addr, "GET", path, &person, "");
        assert_eq!(shown.status, 200, "{path}: {}", shown.body);
        assert!(!shown.body.contains("<script>alert"), "{path}: {}", shown.body);
        assert!(shown.body.contains("&lt;script&gt;alert(&#39;owned&#39;)"), "{path}: {}", shown.body);
    }
    let sources = ask(&addr, "GET", "/sources", &person, "");
    assert!(
        sources.body.contains("<progress") && sources.body.contains("src=\"/app.js\""),
        "{}",
        sources.body
    );
    let telemetry = ask(&addr, "GET", "/telemetry", &person, "");
    assert!(telemetry.body.contains("<svg id=chart"), "{}", telemetry.body);
    let why = ask(&addr, "GET", "/diagnose?q=owls&target=notes%3Aowls", &person, "");
    assert_eq!(why.status, 200, "{}", why.body);

    // MCP over streamable HTTP, by the official SDK.
    let script =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap()).join("tests/mcp_http_client.py");
    let out = Command::new(crate::mcp::python())
        .arg(&script)
        .args([&format!("http://{addr}/mcp"), token])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the MCP client failed:\n{}\n{}\nserver:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        b_log.text()
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("every check passed"));

    stop(&mut b, &b_log);
    stop(&mut a, &a_log);
}

#[test]
fn serve_refuses_to_listen_off_loopback_without_a_token() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("db");
    let out = Command::new(cairn_bin())
        .args(["serve", "--db", db.to_str().unwrap(), "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("--token-file"), "{said}");
    assert!(!db.exists(), "nothing was opened");
}

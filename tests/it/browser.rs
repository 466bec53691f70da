//! `cairn serve`'s web page in a real browser: Debian's Chromium, driven over WebDriver by its
//! ChromeDriver (both installed by scripts/test; `CAIRN_CHROMIUM` and `CAIRN_CHROMEDRIVER` name
//! others). Screenshots of each page go to `CAIRN_SCREENSHOTS` when it is set (the README's
//! come from there).

use crate::machines::Reaped;
use crate::serve::{ask, serve, serve_with, stop};
use crate::support::{fixture_dir, write};
use base64::Engine;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn program(var: &str, default: &str) -> PathBuf {
    let p = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        p.exists(),
        "{} is missing: scripts/test installs Debian's chromium and chromium-driver ({var})",
        p.display()
    );
    p
}

/// A headless Chromium under its ChromeDriver, in one WebDriver session.
struct Browser {
    _driver: Reaped,
    addr: String,
    session: String,
}

impl Browser {
    fn start(profile: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let driver = Reaped(
            Command::new(program("CAIRN_CHROMEDRIVER", "/usr/bin/chromedriver"))
                .arg(format!("--port={port}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut driver = driver;
        // ChromeDriver says when it listens.
        let said = crate::support::Log::of(driver.0.stdout.take().unwrap());
        said.wait_for("started successfully");
        let addr = format!("127.0.0.1:{port}");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1100,800",
            &format!("--user-data-dir={}", profile.display()),
        ];
        let chromium = program("CAIRN_CHROMIUM", "/usr/bin/chromium");
        let caps = json!({"capabilities": {"alwaysMatch": {"browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args}}}});
        let created =
            ask(&addr, "POST", "/session", &[("Content-Type", "application/json")], &caps.to_string());
        let session = created.json()["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("{}", created.body))
            .to_string();
        Self { _driver: driver, addr, session }
    }

    fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = if method == "GET" { String::new() } else { body.to_string() };
        let answer = ask(&self.addr, method, &path, &[("Content-Type", "application/json")], &body);
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.body);
        answer.json()["value"].clone()
    }

    fn go(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    fn find(&self, css: &str) -> String {
        let found = self.call("POST", "/element", json!({"using": "css selector", "value": css}));
        found["element-6066-11e4-a52e-4f735466cecf"]
            .as_str()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .to_string()
    }

    fn click(&self, css: &str) {
        let e = self.find(css);
        self.call("POST", &format!("/element/{e}/click"), json!({}));
    }

    fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.call("POST", &format!("/element/{e}/clear"), json!({}));
        self.call("POST", &format!("/element/{e}/value"), json!({ "text": text }));
    }

    fn text(&self, css: &str) -> String {
        let e = self.find(css);
        self.call("GET", &format!("/element/{e}/text"), json!({})).as_str().unwrap_or_default().to_string()
    }

    fn run(&self, script: &str) -> Value {
        self.call("POST", "/execute/sync", json!({"script": script, "args": []}))
    }

    /// The page as shown, into `CAIRN_SCREENSHOTS/NAME.png` when that is set.
    fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("CAIRN_SCREENSHOTS") else { return };
        let png = self.call("GET", "/screenshot", json!({}));
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ask(&self.addr, "DELETE", &format!("/session/{}", self.session), &[], "");
    }
}

const EVIL: &str = "<script>window.owned = 1</script>";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_searches_opens_a_page_follows_a_backlink_and_sees_the_telemetry() {
    let tmp = tempfile::tempdir().unwrap();
    let vault = tmp.path().join("foldoc");
    std::fs::create_dir_all(&vault).unwrap();
    for entry in std::fs::read_dir(fixture_dir("vaults/foldoc-stack")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), vault.join(entry.file_name())).unwrap();
    }
    write(
        &vault,
        "evil.md",
        &format!("---\ntitle: \"{EVIL}\"\naliases: [\"{EVIL}\"]\n---\n\n{EVIL} is a [[stack]].\n"),
    );
    let db = tmp.path().join("db");
    let spec = cairn::SourceSpec { id: "foldoc".into(), root: vault.clone() };
    cairn::index(cairn::Config::new(db.to_str().unwrap(), vec![spec.config()]), false, false).await.unwrap();
    let (mut server, log, addr) = serve(&db, &[]);
    let browser = Browser::start(&tmp.path().join("profile"));

    // Search by an exact title: the page certainly exists.
    browser.go(&format!("http://{addr}/"));
    browser.type_into("input[name=q]", "stack");
    browser.click("form button");
    assert_eq!(browser.text(".r h3 a"), "stack");
    assert_eq!(browser.text(".r .b.exists"), "exists");
    browser.screenshot("search");

    // Open it, then follow one of its backlinks to the page that links to it.
    browser.click(".r h3 a");
    assert_eq!(browser.text("h2"), "stack");
    let backlink = browser.text("ul:last-of-type li a");
    assert!(!backlink.is_empty(), "stack has backlinks");
    browser.screenshot("page");
    browser.click("ul:last-of-type li a");
    assert_eq!(browser.text("h2"), backlink);
    assert!(browser.text("pre").contains("stack"), "the backlinking page mentions the stack");

    // A page whose title, aliases and body are a script: shown as text, never run.
    browser.go(&format!("http://{addr}/?q=window+owned"));
    assert!(browser.text(".r h3 a").contains("<script>"), "the title is shown as text");
    browser.click(".r h3 a");
    assert_eq!(browser.text("h2"), EVIL);
    assert_eq!(browser.run("return window.owned === undefined"), json!(true), "a note's script ran");

    // Why a page was found, and the telemetry of the queries just made.
    browser.go(&format!("http://{addr}/diagnose?q=stack&target=foldoc%3Astack"));
    assert!(!browser.text("main p b").is_empty(), "a verdict");
    browser.screenshot("diagnose");
    browser.go(&format!("http://{addr}/telemetry"));
    let points = browser.run("return document.querySelectorAll('svg#chart circle').length");
    assert_eq!(points, json!(1), "one day of queries");
    assert!(browser.text("main p").contains("queries answered"));
    browser.screenshot("telemetry");
    drop(browser);
    stop(&mut server, &log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vectors_bar_moves_while_a_vault_indexes_without_a_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let vault = tmp.path().join("notes");
    for i in 0..400 {
        write(
            &vault,
            &format!("note-{i}.md"),
            &format!("# Note {i}\n\nA note about subject {i}, with words of its own: w{i}x.\n"),
        );
    }
    let db = tmp.path().join("db");
    // Vectors committed 40 chunks at a time, and each embedding pass (8 chunks) held 100 ms: the
    // bar has ten steps, over seconds the page can be watched in.
    let config = tmp.path().join("cairn.toml");
    std::fs::write(&config, format!("db = \"{}\"\ncommit_chunks = 40\n", db.display())).unwrap();
    let env = [("CAIRN_TEST_FAULTS", "embed.run"), ("CAIRN_TEST_FAULTS_DELAY_MS", "100")];
    let source = format!("notes={}", vault.display());
    let (mut server, log, addr) =
        serve_with(&db, &["--config", config.to_str().unwrap(), "--source", &source], &env);
    let browser = Browser::start(&tmp.path().join("profile"));
    browser.go(&format!("http://{addr}/sources"));
    browser.run("window.loadedOnce = true");
    browser.call("POST", "/timeouts", json!({"script": 120_000}));
    // Resolves when the bar differs from the one last seen: the page's own refresh (from the
    // server's events) is what is waited for.
    let changed = "const [last, done] = [arguments[0], arguments[arguments.length - 1]];
        const read = () => { const p = document.querySelector('progress'); return p ? [p.value, p.max] : null; };
        const differs = () => JSON.stringify(read()) !== JSON.stringify(last);
        if (differs()) return done(read());
        new MutationObserver((_, o) => { if (differs()) { o.disconnect(); done(read()); } })
            .observe(document.getElementById('sources'), {childList: true, subtree: true, attributes: true});";
    let mut seen: Vec<(f64, f64)> = Vec::new();
    loop {
        let last = seen.last().map_or(Value::Null, |(v, m)| json!([v, m]));
        let now = browser.call("POST", "/execute/async", json!({"script": changed, "args": [last]}));
        let Some([v, m]) = now.as_array().map(|a| [a[0].as_f64().unwrap(), a[1].as_f64().unwrap()]) else {
            continue;
        };
        if v > 0.0 && v < m && !seen.iter().any(|(v, m)| *v > 0.0 && v < m) {
            browser.screenshot("sources");
        }
        seen.push((v, m));
        if m >= 400.0 && v >= m {
            break;
        }
    }
    assert!(seen.iter().any(|(v, m)| *v > 0.0 && v < m), "the bar moved through the middle: {seen:?}");
    assert_eq!(browser.run("return window.loadedOnce === true"), json!(true), "updated without a reload");
    drop(browser);
    stop(&mut server, &log);
}

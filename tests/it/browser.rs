//! `cairn serve`'s web page in a real browser: Debian's Chromium, driven over WebDriver by its
//! ChromeDriver (`tests/webdriver.rs`). Screenshots of each page go to `CAIRN_SCREENSHOTS` when it is set (the README's
//! come from there).

use crate::serve::{serve, serve_with, stop};
use crate::support::{fixture_dir, write};
use crate::webdriver::Browser;
use serde_json::{Value, json};

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

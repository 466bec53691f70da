//! A headless Chromium under its ChromeDriver, in one WebDriver session (Debian's `chromium` and
//! `chromium-driver`, installed by scripts/test; `CAIRN_CHROMIUM` and `CAIRN_CHROMEDRIVER` name
//! others). Shared by the browser tests (`tests/it/browser.rs`) and the serve bench's paint
//! timing (`benches/processes.rs`), so both drive one browser with one set of flags. Its
//! includer includes `tests/shared/http.rs` as `crate::http` too.
#![allow(dead_code)]

use base64::Engine;
use serde_json::{Value, json};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub fn program(var: &str, default: &str) -> PathBuf {
    let p = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        p.exists(),
        "{} is missing: scripts/test installs Debian's chromium and chromium-driver ({var})",
        p.display()
    );
    p
}

/// One WebDriver request on its own connection: the status and the JSON answered.
fn request(addr: &str, method: &str, path: &str, body: &str) -> (u16, Value) {
    let (status, _, answer) =
        crate::http::exchange(addr, method, path, &[("Content-Type", "application/json")], body);
    let value =
        serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {answer}"));
    (status, value)
}

/// A headless Chromium under its ChromeDriver, in one WebDriver session; both end with it.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

impl Browser {
    pub fn start(profile: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut driver = Command::new(program("CAIRN_CHROMEDRIVER", "/usr/bin/chromedriver"))
            .arg(format!("--port={port}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // ChromeDriver says when it listens.
        let mut said = std::io::BufReader::new(driver.stdout.take().unwrap()).lines();
        loop {
            let line = said.next().expect("chromedriver said it started").unwrap();
            if line.contains("started successfully") {
                break;
            }
        }
        std::thread::spawn(move || said.for_each(drop));
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
        let (_, created) = request(&addr, "POST", "/session", &caps.to_string());
        let session =
            created["value"]["sessionId"].as_str().unwrap_or_else(|| panic!("{created}")).to_string();
        Self { driver, addr, session }
    }

    pub fn call(&self, method: &str, path: &str, body: Value) -> Value {
        let path = format!("/session/{}{path}", self.session);
        let body = if method == "GET" { String::new() } else { body.to_string() };
        let (status, answer) = request(&self.addr, method, &path, &body);
        assert_eq!(status, 200, "{method} {path}: {answer}");
        answer["value"].clone()
    }

    pub fn go(&self, url: &str) {
        self.call("POST", "/url", json!({ "url": url }));
    }

    pub fn find(&self, css: &str) -> String {
        let found = self.call("POST", "/element", json!({"using": "css selector", "value": css}));
        found["element-6066-11e4-a52e-4f735466cecf"]
            .as_str()
            .unwrap_or_else(|| panic!("{css}: {found}"))
            .to_string()
    }

    pub fn click(&self, css: &str) {
        let e = self.find(css);
        self.call("POST", &format!("/element/{e}/click"), json!({}));
    }

    pub fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css);
        self.call("POST", &format!("/element/{e}/clear"), json!({}));
        self.call("POST", &format!("/element/{e}/value"), json!({ "text": text }));
    }

    pub fn text(&self, css: &str) -> String {
        let e = self.find(css);
        self.call("GET", &format!("/element/{e}/text"), json!({})).as_str().unwrap_or_default().to_string()
    }

    pub fn run(&self, script: &str) -> Value {
        self.call("POST", "/execute/sync", json!({"script": script, "args": []}))
    }

    /// The page as shown, into `CAIRN_SCREENSHOTS/NAME.png` when that is set.
    pub fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("CAIRN_SCREENSHOTS") else { return };
        let png = self.call("GET", "/screenshot", json!({}));
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap()).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(Path::new(&dir).join(format!("{name}.png")), bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = request(&self.addr, "DELETE", &format!("/session/{}", self.session), "");
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

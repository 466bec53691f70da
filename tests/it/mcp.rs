//! `cairn mcp` driven as a child process by the official Python MCP SDK's stdio client
//! (installed by `scripts/test` into `~/.cache/cairn/mcp-venv`, or `CAIRN_MCP_PYTHON`).

use crate::support::three_notes;
use std::path::PathBuf;
use std::process::Command;

pub(crate) fn python() -> PathBuf {
    let p = std::env::var_os("CAIRN_MCP_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| cairn_index::provision::cache_dir().join("mcp-venv/bin/python"));
    assert!(
        p.exists(),
        "{} is missing: the MCP client is installed by scripts/test (python3 -m venv + pip install mcp)",
        p.display()
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_searches_gets_and_gets_errors_then_the_server_exits_cleanly() {
    let tmp = tempfile::tempdir().unwrap();
    // Indexed before the server starts, so its first answer needs no wait.
    let (vault, db) = three_notes(tmp.path()).await;

    let script = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("tests/mcp_client.py");
    let log = tmp.path().join("server.log");
    let out = Command::new(python())
        .arg(&script)
        .args([
            env!("CARGO_BIN_EXE_cairn"),
            db.to_str().unwrap(),
            vault.to_str().unwrap(),
            log.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let server_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        out.status.success(),
        "the MCP client failed:\n{}\n{}\nserver stderr:\n{server_log}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("every check passed"));
    // Nothing was written into the notes folder.
    let mut files: Vec<String> = walkdir::WalkDir::new(&vault)
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.path().strip_prefix(&vault).unwrap().to_string_lossy().replace('\\', "/"))
        .collect();
    files.sort();
    assert_eq!(files, ["owls.md", "tides.md", "venues/amphitheater.md"]);
}

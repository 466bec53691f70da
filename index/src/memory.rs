//! A process's memory as Linux reports it (`/proc/<pid>/status`): the one reader the product,
//! the tests and the benchmarks share.

use serde::{Deserialize, Serialize};

/// This process's memory: resident now and at its peak (`VmRSS`, `VmHWM`), in MiB (Linux; absent
/// elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub rss_mib: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    /// Of the resident memory, what LanceDB's caches hold (filled in by a process that has the
    /// database open: [`crate::Database::cache_mib`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_cache_mib: Option<f64>,
    /// Of those caches, the metadata cache (manifests, file footers), which an owner gives back
    /// when it goes idle; the rest is index pages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_metadata_cache_mib: Option<f64>,
}

impl Memory {
    /// This process's.
    pub fn now() -> Self {
        Self::read("/proc/self/status")
    }

    /// Another process's (a child that a test or a bench started); empty when it is gone.
    pub fn of(pid: u32) -> Self {
        Self::read(&format!("/proc/{pid}/status"))
    }

    fn read(path: &str) -> Self {
        let status = std::fs::read_to_string(path).unwrap_or_default();
        let field = |name: &str| -> Option<f64> {
            let kb: f64 =
                status.lines().find(|l| l.starts_with(name))?.split_whitespace().nth(1)?.parse().ok()?;
            Some(kb / 1024.0)
        };
        Self { rss_mib: field("VmRSS:"), peak_rss_mib: field("VmHWM:"), ..Self::default() }
    }
}

//! What the benches share: the shared eval data, the binary under test, a vault copied to work
//! on, sizes on disk, percentiles, and each bench's figures written as JSON and compared with
//! the stored baseline ([`Figures`]). Each bench uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A path under the shared eval data (`../shared/eval`); the bench fails when it is missing.
pub fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("..")
        .join("shared/eval")
        .join(rel);
    assert!(p.exists(), "bench: {} is missing (the shared eval data is required)", p.display());
    p
}

/// The `cairn` binary measured: this build's, or `CAIRN_BENCH_BIN` (another build, e.g. an
/// older one measured as a baseline).
pub fn bin() -> PathBuf {
    std::env::var_os("CAIRN_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cairn")))
}

/// Copy a folder's files (the shared data is never written).
pub fn copy_dir(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else if e.file_type().is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// The files under `path`, in MiB.
pub fn du_mib(path: &Path) -> f64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum::<u64>() as f64
        / (1024.0 * 1024.0)
}

/// The `p` quantile of `v` (nearest rank; NaN when `v` is empty).
pub fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Figure {
    pub value: f64,
    pub unit: String,
    pub better: Better,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Run {
    bench: String,
    binary: String,
    unix_ms: u64,
    figures: BTreeMap<String, Figure>,
}

/// A figure that moved the wrong way by more than this share of its baseline is called worse.
const WORSE_BY: f64 = 0.10;

/// One bench's figures. [`Figures::finish`] writes them as JSON to
/// `bench-results/<bench>.json` (or `$CAIRN_BENCH_OUT/<bench>.json`) and prints each one's ratio
/// to the stored baseline, `benches/baselines/<bench>.json`; `CAIRN_BENCH_SAVE_BASELINE=1`
/// stores this run as the baseline instead (commit it with the change that moved it).
pub struct Figures {
    run: Run,
}

impl Figures {
    pub fn new(bench: &str) -> Self {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self {
            run: Run {
                bench: bench.into(),
                binary: bin().display().to_string(),
                unix_ms,
                figures: BTreeMap::new(),
            },
        }
    }

    /// Record `name` (a figure's stable key, e.g. `owner.http_p50_ms`).
    pub fn add(&mut self, name: &str, value: f64, unit: &str, better: Better) {
        self.run.figures.insert(name.into(), Figure { value, unit: unit.into(), better });
    }

    fn baseline_path(bench: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("benches/baselines").join(format!("{bench}.json"))
    }

    /// Write the run, and print it against the baseline.
    pub fn finish(self) {
        let out = std::env::var_os("CAIRN_BENCH_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results"));
        std::fs::create_dir_all(&out).unwrap();
        let json = serde_json::to_string_pretty(&self.run).unwrap() + "\n";
        let file = out.join(format!("{}.json", self.run.bench));
        std::fs::write(&file, &json).unwrap();
        let baseline_file = Self::baseline_path(&self.run.bench);
        if std::env::var_os("CAIRN_BENCH_SAVE_BASELINE").is_some() {
            std::fs::create_dir_all(baseline_file.parent().unwrap()).unwrap();
            std::fs::write(&baseline_file, &json).unwrap();
            println!("\nfigures written to {} and stored as the baseline", file.display());
            return;
        }
        println!("\nfigures written to {}", file.display());
        let baseline: Option<Run> =
            std::fs::read(&baseline_file).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let Some(baseline) = baseline else {
            println!(
                "no baseline at {} (CAIRN_BENCH_SAVE_BASELINE=1 stores this run)",
                baseline_file.display()
            );
            return;
        };
        println!("\n| figure | this run | baseline | ratio | |\n|---|---|---|---|---|");
        for (name, f) in &self.run.figures {
            let Some(b) = baseline.figures.get(name) else {
                println!("| {name} | {:.2} {} | (none) | | |", f.value, f.unit);
                continue;
            };
            println!(
                "| {name} | {:.2} {} | {:.2} | {:.2} | {} |",
                f.value,
                f.unit,
                b.value,
                f.value / b.value,
                verdict(f.value, b.value, f.better)
            );
        }
    }
}

/// Whether `value` is worse than `baseline` by more than [`WORSE_BY`].
fn verdict(value: f64, baseline: f64, better: Better) -> &'static str {
    let ratio = value / baseline;
    match better {
        Better::Lower if ratio > 1.0 + WORSE_BY => "worse",
        Better::Higher if ratio < 1.0 - WORSE_BY => "worse",
        _ => "",
    }
}

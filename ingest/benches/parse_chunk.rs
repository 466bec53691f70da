//! parse + chunk throughput on the FOLDOC vault (11,870 real pages), one core.
//!
//! `cargo bench -p cairn-ingest --bench parse_chunk` (or `CAIRN_BENCH_VAULT=dir`). Files are
//! read into memory first; only `parse_page` (decode, frontmatter, markdown, links, hash,
//! chunking) is timed. Fails when the vault is missing: a benchmark never passes by skipping.

use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, parse_page, scan};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let vault = std::env::var_os("CAIRN_BENCH_VAULT").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
            .join("../../shared/eval/foldoc/vault")
    });
    let report = scan(&vault, &PathFilter::new(&ScanOptions::default()).unwrap())
        .unwrap_or_else(|e| panic!("benchmark vault missing: {e}"));
    assert!(!report.files.is_empty(), "no pages in {}", vault.display());
    let files: Vec<(PathBuf, Vec<u8>)> =
        report.files.iter().map(|f| (f.rel.clone(), std::fs::read(vault.join(&f.rel)).unwrap())).collect();
    let bytes: usize = files.iter().map(|(_, b)| b.len()).sum();
    let opts = ParseOptions::default();
    let mut runs = Vec::new();
    let (mut chunks, mut failures) = (0usize, BTreeMap::<&str, usize>::new());
    for _ in 0..5 {
        let start = Instant::now();
        chunks = 0;
        failures.clear();
        for (rel, data) in &files {
            match parse_page("foldoc", rel, data, &opts) {
                Ok(p) => chunks += p.chunks.len(),
                Err(e) => *failures.entry(e.kind()).or_default() += 1,
            }
        }
        runs.push(start.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    let median = runs[runs.len() / 2];
    println!(
        "vault: {} ({} pages, {:.1} MB, {} scan problems)",
        vault.display(),
        files.len(),
        bytes as f64 / 1e6,
        report.problems.len()
    );
    println!("chunks: {chunks}, parse failures: {failures:?}");
    println!(
        "parse+chunk, one core, median of {}: {:.3} s = {:.0} pages/s, {:.1} MB/s, {:.0} chunks/s (goal >= 2000 pages/s: {:.1}x)",
        runs.len(),
        median,
        files.len() as f64 / median,
        bytes as f64 / 1e6 / median,
        chunks as f64 / median,
        files.len() as f64 / median / 2000.0
    );
}

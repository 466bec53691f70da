//! Embedding throughput on chunks of the FOLDOC vault: chunks/s per batch size, the time inside
//! `Session::run` (the bound) against the whole `embed_documents`, and Rust against Python
//! `onnxruntime` with the same tokenizer and model files on the same chunks, in the same run.
//!
//! Run through `scripts/bench/embed` (installs the Python side, builds without LanceDB).
//! Env: `CAIRN_BENCH_VAULT` (default ../shared/eval/foldoc/vault), `CAIRN_BENCH_CHUNKS` (sample
//! size, default 600), `CAIRN_BENCH_BATCHES` (default 1,8,32,64), `CAIRN_BENCH_THREADS` (2).
//! Fails when the vault, the model or the Python side is missing.

use cairn_index::embed::{Embedder, OrtEmbedder, OrtOptions};
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, read_page, scan};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let vault = std::env::var_os("CAIRN_BENCH_VAULT").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
            .join("../../shared/eval/foldoc/vault")
    });
    let sample: usize = env_or("CAIRN_BENCH_CHUNKS", 600);
    let threads: usize = env_or("CAIRN_BENCH_THREADS", 2);
    let batches: Vec<usize> = std::env::var("CAIRN_BENCH_BATCHES")
        .unwrap_or_else(|_| "1,8,32,64".into())
        .split(',')
        .map(|b| b.trim().parse().expect("batch sizes are numbers"))
        .collect();

    let report = scan(&vault, &PathFilter::new(&ScanOptions::default()).unwrap())
        .unwrap_or_else(|e| panic!("benchmark vault missing: {e}"));
    let mut texts = Vec::new();
    for f in &report.files {
        if let Ok(p) = read_page("foldoc", &vault, &f.rel, &ParseOptions::default()) {
            texts.extend(p.chunks.iter().map(|c| c.embed_text()));
        }
    }
    let all = texts.len();
    let step = (all / sample).max(1);
    let texts: Vec<String> = texts.into_iter().step_by(step).take(sample).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let files = cairn_index::provision().expect("model and runtime must provision");
    let model_dir = files.model.parent().unwrap().to_path_buf();
    let texts_file = std::env::temp_dir().join(format!("cairn-bench-texts-{}.json", std::process::id()));
    std::fs::write(&texts_file, serde_json::to_string(&texts).unwrap()).unwrap();

    println!(
        "{} chunks sampled (every {step}th of {all}) from {}; ort intra-op threads {threads}",
        refs.len(),
        vault.display()
    );
    println!(
        "| batch | Rust chunks/s | Session::run share | overhead vs run | Python chunks/s | Rust/Python |"
    );
    println!("|---|---|---|---|---|---|");
    for batch in batches {
        let options = OrtOptions { intra_threads: threads, batch_size: batch, ..OrtOptions::default() };
        let e = OrtEmbedder::from_files(&files, options).expect("model loads");
        e.embed_documents(&refs[..refs.len().min(16)]).unwrap(); // warm-up
        let started = Instant::now();
        let out = e.embed_documents(&refs).unwrap();
        let wall = started.elapsed().as_secs_f64();
        assert_eq!(out.vectors.len(), refs.len());
        let run = e.last_run_times().session_run.as_secs_f64();
        let rust_rate = refs.len() as f64 / wall;

        let py = Command::new("python3")
            .arg(
                std::path::Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
                    .join("../scripts/bench/reference_embeddings.py"),
            )
            .arg(&model_dir)
            .arg("bench")
            .arg(&texts_file)
            .arg(batch.to_string())
            .output()
            .expect("python3 runs");
        assert!(py.status.success(), "python side failed: {}", String::from_utf8_lossy(&py.stderr));
        let py: serde_json::Value = serde_json::from_slice(&py.stdout).expect("python prints JSON");
        let py_rate = refs.len() as f64 / py["seconds"].as_f64().unwrap();
        println!(
            "| {batch} | {rust_rate:.1} | {:.1} % | +{:.1} % | {py_rate:.1} | {:.2}× |",
            100.0 * run / wall,
            100.0 * (wall / run - 1.0),
            rust_rate / py_rate
        );
    }
    let _ = std::fs::remove_file(texts_file);
}

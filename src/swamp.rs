//! The source-swamp generator: a bulk source of near-empty stub pages named after data models
//! that share the curated pages' common domain words (`fixtures/swamp/`). Deterministic.

use anyhow::{Context, Result};
use std::path::Path;

const DOMAINS: [&str; 16] = [
    "billing",
    "payments",
    "data",
    "platform",
    "events",
    "pipeline",
    "warehouse",
    "search",
    "ranking",
    "checkout",
    "orders",
    "shipping",
    "inventory",
    "customer",
    "support",
    "access",
];
const ENTITIES: [&str; 12] = [
    "team", "model", "metrics", "owner", "invoices", "retries", "schema", "loaders", "queries", "refunds",
    "labels", "sessions",
];
const SUFFIXES: [&str; 6] = ["daily", "v2", "snapshot", "staging", "agg", "raw"];

/// Write `n` stubs into `dir` (`models/<name>.md`); returns how many were written.
pub fn write_stubs(dir: &Path, n: usize) -> Result<usize> {
    let models = dir.join("models");
    std::fs::create_dir_all(&models).with_context(|| format!("creating {}", models.display()))?;
    // A fixed linear congruential sequence: the same stubs on every machine.
    let mut state: u64 = 0x5eed;
    let mut next = |m: usize| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % m
    };
    for i in 0..n {
        let name = format!(
            "{}_{}_{}_{}_{i}",
            DOMAINS[next(DOMAINS.len())],
            DOMAINS[next(DOMAINS.len())],
            ENTITIES[next(ENTITIES.len())],
            SUFFIXES[next(SUFFIXES.len())]
        );
        let text = format!("# {name}\n\nno documented columns\n");
        std::fs::write(models.join(format!("{name}.md")), text)?;
    }
    Ok(n)
}

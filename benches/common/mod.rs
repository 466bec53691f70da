//! What the pipeline and scale benches share: the shared eval data and percentiles.

use std::path::PathBuf;

/// A path under the shared eval data (`../shared/eval`); the bench fails when it is missing.
pub fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("..")
        .join("shared/eval")
        .join(rel);
    assert!(p.exists(), "bench: {} is missing (the shared eval data is required)", p.display());
    p
}

/// The `p` quantile of `v` (sorted in place).
pub fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

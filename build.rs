//! The `cairn` binary is linked as a position-dependent executable (`-no-pie`).
//!
//! Why: a 320 MB PIE carries ~375,000 relative relocations; applying them at every start writes
//! (copy-on-write) ~1,600 pages of `.data.rel.ro`, about 10 ms of page faults on this kind of
//! machine, which is most of what a `cairn search` through the owner costs (BENCHMARKS.md).
//! Linked at a fixed address those relocations are resolved by the linker. Only the executable's
//! own image loses address randomisation; shared libraries keep theirs. The code is still
//! compiled position-independent, so only the final link differs.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}

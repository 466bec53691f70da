//! The `cairn` executable: logging, the allocator and the async runtime around [`cli::run`].

// The CLI's verbs await the whole pipeline's start-up: their futures nest deeper than rustc's
// default layout depth (128).
#![recursion_limit = "256"]

mod cli;

use clap::Parser;
use std::process::ExitCode;

/// mimalloc gives back what a source's load frees, which glibc's allocator mostly keeps: an
/// owner holding a 110k-chunk source is 38% smaller with it (BENCHMARKS.md, "Reads that scale").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            // LanceDB says so when a compaction loses a commit race to one of our own commits;
            // the writer defers it and tries again (not a problem the user can act on).
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,lance::dataset::optimize=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // A bug outside one page's work ends the process, so its lock goes to a standby.
    cairn_index::fault::exit_on_panic();
    // Bad flags exit 2 (clap's own code for usage errors).
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = match runtime.block_on(cli::run(cli.command, cli.common)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(cli::exit_code(&e))
        }
    };
    // The model thread may be inside ONNX Runtime still (giving memory back after its last
    // batch); the runtime's exit handlers must not run under it.
    cairn_index::embed::close_runtime();
    code
}

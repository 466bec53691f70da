//! The `cairn` command line. Only wiring: each subcommand calls the library crates.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "cairn", version, about = "A live hybrid index of folders of markdown notes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Scan and parse folders, and print what cairn extracts from each page (nothing is stored).
    Scan {
        /// Folders to scan; each is a source named after the folder.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// One JSON document on stdout instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> Result<std::process::ExitCode> {
    match cli.command {
        Command::Scan { dirs, json } => {
            let mut sources = Vec::new();
            for dir in &dirs {
                let id = cairn::source_id_from_dir(dir)?;
                let summary = cairn::scan_source(&id, dir)
                    .with_context(|| format!("scanning source `{id}` at {}", dir.display()))?;
                sources.push(summary);
            }
            if json {
                println!("{}", serde_json::to_string(&sources)?);
            } else {
                for s in &sources {
                    s.print_table();
                }
            }
            let any_page = sources.iter().any(|s| !s.pages.is_empty());
            Ok(if any_page { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::from(1) })
        }
    }
}

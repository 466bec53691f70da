//! Replays of recorded file-system scenarios (`fixtures/events/*.jsonl`).
//!
//! A scenario is JSON lines, each a step at a logical time `t` (milliseconds): a change to the
//! folder (`write`, `write_bytes`, `remove`, `rename`, `mkdir`, `remove_dir`, `generate` for many files), a raw
//! event as notify reports it (`event`), `start` (start cairn: steps before it are the folder
//! as it was while cairn was not running), or `settle`. Paths are relative to the folder; file
//! contents are in the log, so a scenario is self-contained. The first line may be a header
//! `{"scenario": "...", "description": "..."}`.
//!
//! [`run`] applies the steps to a folder in tokio time (under paused time nothing sleeps), feeds
//! the events to the real actors, and settles. The events reach the watcher exactly as notify's
//! would; notify itself is off.

use crate::core::config::{Config, SourceConfig};
use crate::core::error::{Error, Result};
use crate::engine::system::{Embedders, Pipeline};
use cairn_ingest::RawEvent;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The source id scenarios are replayed into.
pub const SOURCE: &str = "notes";

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub t: u64,
    #[serde(flatten)]
    pub op: Op,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Write {
        path: PathBuf,
        text: String,
    },
    /// Bytes that are not text (hex), e.g. a file in Latin-1.
    WriteBytes {
        path: PathBuf,
        hex: String,
    },
    Remove {
        path: PathBuf,
    },
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    Mkdir {
        path: PathBuf,
    },
    RemoveDir {
        path: PathBuf,
    },
    /// `count` files at `path` with `text`, `{i}` replaced by 0…count-1 in both; with
    /// `events`, the create and modify events of each.
    Generate {
        count: usize,
        path: String,
        text: String,
        events: bool,
    },
    /// A raw event, as the watcher translates notify's.
    Event(RawEvent),
    Start,
    /// Wait until everything injected so far is searchable.
    Settle,
}

/// A scenario file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub steps: Vec<Step>,
}

#[derive(Deserialize)]
struct Header {
    scenario: String,
    #[serde(default)]
    description: String,
}

impl Scenario {
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let mut s = Scenario {
            name: path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            ..Scenario::default()
        };
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            if i == 0
                && let Ok(h) = serde_json::from_str::<Header>(line)
            {
                s.name = h.scenario;
                s.description = h.description;
                continue;
            }
            let step: Step = serde_json::from_str(line).map_err(|e| {
                Error::Config(format!("{}:{}: not a replay step: {e}", path.display(), i + 1))
            })?;
            s.steps.push(step);
        }
        Ok(s)
    }
}

fn expand(pattern: &str, i: usize) -> String {
    pattern.replace("{i}", &i.to_string())
}

/// The configuration a replay runs with: one source at `dir`, no notify, no periodic scan.
pub fn config(db: &str, dir: &Path) -> Config {
    let mut c = Config::new(
        db,
        vec![SourceConfig {
            id: SOURCE.into(),
            root: dir.to_path_buf(),
            include: vec![],
            exclude: vec![],
            language: None,
        }],
    );
    c.watch = false;
    c.reconcile_secs = 0;
    c
}

/// Replay `scenario` into the folder `dir` (created empty) and the database of `config`.
/// Returns the running system, settled; the caller flushes, inspects and shuts it down.
pub async fn run(scenario: &Scenario, dir: &Path, config: Config, embedders: Embedders) -> Result<Pipeline> {
    std::fs::create_dir_all(dir)?;
    let begin = tokio::time::Instant::now();
    let mut cairn: Option<Pipeline> = None;
    for step in &scenario.steps {
        tokio::time::sleep_until(begin + Duration::from_millis(step.t)).await;
        let abs = |p: &Path| dir.join(p);
        match &step.op {
            Op::Write { path, text } => {
                if let Some(parent) = abs(path).parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(abs(path), text)?;
            }
            Op::WriteBytes { path, hex } => {
                let bytes = (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16))
                    .collect::<std::result::Result<Vec<u8>, _>>()
                    .map_err(|e| Error::Config(format!("write_bytes {}: {e}", path.display())))?;
                std::fs::write(abs(path), bytes)?
            }
            Op::Remove { path } => std::fs::remove_file(abs(path))?,
            Op::Rename { from, to } => {
                if let Some(parent) = abs(to).parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::rename(abs(from), abs(to))?
            }
            Op::Mkdir { path } => std::fs::create_dir_all(abs(path))?,
            Op::RemoveDir { path } => std::fs::remove_dir_all(abs(path))?,
            Op::Generate { count, path, text, events } => {
                for i in 0..*count {
                    let rel = PathBuf::from(expand(path, i));
                    if let Some(parent) = abs(&rel).parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(abs(&rel), expand(text, i))?;
                    if *events {
                        let c = running(&cairn)?;
                        c.inject(SOURCE, RawEvent::Create { path: rel.clone() }).await?;
                        c.inject(SOURCE, RawEvent::Modify { path: rel }).await?;
                    }
                }
            }
            Op::Event(raw) => running(&cairn)?.inject(SOURCE, raw.clone()).await?,
            Op::Start => cairn = Some(Pipeline::start(config.clone(), embedders.clone()).await?),
            Op::Settle => running(&cairn)?.settle().await?,
        }
    }
    let cairn = match cairn {
        Some(c) => c,
        None => Pipeline::start(config, embedders).await?,
    };
    cairn.settle().await?;
    Ok(cairn)
}

fn running(c: &Option<Pipeline>) -> Result<&Pipeline> {
    c.as_ref().ok_or_else(|| Error::Config("a replay event comes before `start`".into()))
}

/// What `cairn replay` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    pub scenario: String,
    pub folder: PathBuf,
    pub db: String,
    pub steps: usize,
    pub status: Vec<crate::core::status::SourceStatus>,
}

/// Replay a scenario file into `dir` and `db` on an actix system of its own, under paused time
/// (a scenario's logical waits take no time), with the real model; flush and shut down.
pub fn replay_file(file: &Path, dir: &Path, db: &str) -> Result<Replayed> {
    let scenario = Scenario::load(file)?;
    let system = actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime")
    });
    let config = config(db, dir);
    system.block_on(async {
        let embedders = Embedders::load(&config).await?;
        let cairn = run(&scenario, dir, config, embedders).await?;
        cairn.flush().await?;
        let status = cairn.status();
        cairn.shutdown().await?;
        Ok(Replayed {
            scenario: scenario.name.clone(),
            folder: dir.to_path_buf(),
            db: db.to_string(),
            steps: scenario.steps.len(),
            status,
        })
    })
}

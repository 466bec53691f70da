//! The event log: every event as one JSON line, appended by one `SyncArbiter` thread (file writes
//! never run on an async thread), rotated by size, and broadcast to subscribers.
//!
//! Bound: `SyncArbiter`'s own queue is unbounded, so the bound is kept by the emitters: each
//! stage awaits its append before going on (one in flight per stage), and [`Emitter`] says when
//! an append waited long, i.e. when a slow disk is holding the pipeline back.

use crate::core::event::{Event, EventKind};
use crate::core::status::StatusBoard;
use actix::prelude::*;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;

/// Rotated files kept besides the current one (`events.1.jsonl` is the newest old one).
const KEEP_ROTATED: usize = 4;
/// An append that waits longer than this is reported: the disk is slowing the pipeline.
const SLOW_APPEND: Duration = Duration::from_secs(1);

/// The log writer.
#[derive(Debug)]
pub struct EventLog {
    dir: Option<PathBuf>,
    file: Option<BufWriter<File>>,
    bytes: u64,
    max_bytes: u64,
    seqs: HashMap<String, u64>,
    tx: broadcast::Sender<std::sync::Arc<Event>>,
    status: StatusBoard,
    failed: bool,
    /// On an object store: every line is shipped to the store too.
    outbox: Option<Box<dyn LineSink>>,
}

/// Where the log sends a copy of every line (on an object store, the machine's outbox).
pub trait LineSink: std::fmt::Debug + Send {
    /// One event line, newline included.
    fn push(&self, line: &[u8]);
}

impl EventLog {
    /// A log in `dir` (`events.jsonl`), or only broadcast when `dir` is `None`.
    pub fn open(
        dir: Option<&Path>,
        max_bytes: u64,
        tx: broadcast::Sender<std::sync::Arc<Event>>,
        status: StatusBoard,
    ) -> std::io::Result<Self> {
        let mut log = EventLog {
            dir: dir.map(Path::to_path_buf),
            file: None,
            bytes: 0,
            max_bytes,
            seqs: HashMap::new(),
            tx,
            status,
            failed: false,
            outbox: None,
        };
        if let Some(d) = dir {
            std::fs::create_dir_all(d)?;
            log.open_file()?;
        }
        Ok(log)
    }

    /// Ship every line to the store through `outbox` too.
    pub fn shipping(self, outbox: Option<Box<dyn LineSink>>) -> Self {
        Self { outbox, ..self }
    }

    /// The current log file of a log directory.
    pub fn current_file(dir: &Path) -> PathBuf {
        dir.join("events.jsonl")
    }

    fn open_file(&mut self) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let path = Self::current_file(dir);
        let f = OpenOptions::new().create(true).append(true).open(&path)?;
        self.bytes = f.metadata()?.len();
        self.file = Some(BufWriter::new(f));
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let Some(dir) = self.dir.clone() else { return Ok(()) };
        if let Some(mut f) = self.file.take() {
            f.flush()?;
        }
        let old = |n: usize| dir.join(format!("events.{n}.jsonl"));
        let _ = std::fs::remove_file(old(KEEP_ROTATED));
        for n in (1..KEEP_ROTATED).rev() {
            let _ = std::fs::rename(old(n), old(n + 1));
        }
        std::fs::rename(Self::current_file(&dir), old(1))?;
        self.open_file()
    }

    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        if let Some(o) = &self.outbox {
            o.push(line);
        }
        if self.file.is_none() {
            return Ok(());
        }
        if self.bytes + line.len() as u64 > self.max_bytes && self.bytes > 0 {
            self.rotate()?;
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(line)?;
            self.bytes += line.len() as u64;
        }
        Ok(())
    }
}

impl Actor for EventLog {
    type Context = SyncContext<Self>;
}

/// Events of one stream, in order, stamped with their logical time.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Append {
    pub source: String,
    pub ts: u64,
    pub kinds: Vec<EventKind>,
}

impl Handler<Append> for EventLog {
    type Result = ();

    fn handle(&mut self, msg: Append, _: &mut Self::Context) {
        let mut batch = Vec::with_capacity(msg.kinds.len());
        for kind in msg.kinds {
            let seq = self.seqs.entry(msg.source.clone()).or_insert(0);
            *seq += 1;
            let event = Event { seq: *seq, ts: msg.ts, source: msg.source.clone(), kind };
            self.status.event(&event.source, event.kind.name(), event.ts);
            let mut line = serde_json::to_vec(&event).expect("events serialize");
            line.push(b'\n');
            let written = self.write(&line);
            self.check(written);
            batch.push(event);
        }
        // Handed to the OS per batch (not fsynced) before anyone hears of it: readers in other
        // processes (`cairn stats`, `cairn diagnose`) and this process's `diagnose` see it.
        let flushed = self.file.as_mut().map_or(Ok(()), |f| f.flush());
        self.check(flushed);
        for event in batch {
            // No subscriber is not an error.
            let _ = self.tx.send(std::sync::Arc::new(event));
        }
    }
}

impl EventLog {
    /// The pipeline goes on without a journal rather than stopping; said once, loudly.
    fn check(&mut self, r: std::io::Result<()>) {
        if let Err(e) = r {
            if !self.failed {
                tracing::error!("event log: cannot write ({e}); events are no longer journaled");
                self.failed = true;
            }
            self.file = None;
        }
    }
}

/// Write out what is buffered (and fsync), e.g. before shutdown or after a flush.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SyncLog;

impl Handler<SyncLog> for EventLog {
    type Result = ();

    fn handle(&mut self, _: SyncLog, _: &mut Self::Context) {
        if let Some(f) = self.file.as_mut() {
            let r = f.flush().and_then(|_| f.get_ref().sync_data());
            if let Err(e) = r {
                tracing::error!("event log: cannot flush: {e}");
            }
        }
    }
}

/// How stages emit events: stamps logical time, awaits the append (backpressure), and says so
/// when the log is slow.
#[derive(Debug, Clone)]
pub struct Emitter {
    log: Addr<EventLog>,
    epoch: Instant,
}

impl Emitter {
    pub fn new(log: Addr<EventLog>, epoch: Instant) -> Self {
        Self { log, epoch }
    }

    /// Logical time now: milliseconds since the pipeline started.
    pub fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    pub async fn emit(&self, source: &str, kinds: Vec<EventKind>) {
        if kinds.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let msg = Append { source: source.to_string(), ts: self.now(), kinds };
        if self.log.send(msg).await.is_err() {
            tracing::warn!("event log is closed; event of `{source}` not journaled");
        }
        let waited = started.elapsed();
        if waited > SLOW_APPEND {
            tracing::warn!(
                "event log append waited {:.1} s: the disk is slowing the pipeline",
                waited.as_secs_f64()
            );
        }
    }

    pub fn log(&self) -> &Addr<EventLog> {
        &self.log
    }
}

/// Append one event from a process that runs no pipeline (a one-shot `cairn search`): `seq` 0
/// and `ts` 0 mark it as outside any pipeline's sequence and clock. One `write` of one whole line
/// to a file opened for appending, so it never interleaves with a running system's lines.
pub fn append_from_outside(dir: &Path, source: &str, kind: EventKind) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let event = Event { seq: 0, ts: 0, source: source.to_string(), kind };
    let mut line = serde_json::to_vec(&event).map_err(std::io::Error::other)?;
    line.push(b'\n');
    OpenOptions::new().create(true).append(true).open(EventLog::current_file(dir))?.write_all(&line)
}

/// Read a log file back. A line that is not an event (torn by a crash mid-write, or damaged) is
/// skipped with a warning naming it: one bad line never hides the rest of the history.
pub fn read_log(path: &Path) -> std::io::Result<Vec<Event>> {
    let bytes = std::fs::read(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        match serde_json::from_str(line) {
            Ok(e) => events.push(e),
            Err(e) => tracing::warn!("{}:{}: not an event, skipped: {e}", path.display(), i + 1),
        }
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_line_costs_that_line_only() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [
            EventKind::SystemStarted { unix_ms: 1, sources: vec![] },
            EventKind::SystemStopped { clean: true },
        ] {
            append_from_outside(dir.path(), "nt", kind).unwrap();
        }
        let file = EventLog::current_file(dir.path());
        let mut text = std::fs::read(&file).unwrap();
        // A crash mid-write: half a line, and bytes that are not even UTF-8.
        let half = text.len() / 3;
        let torn: Vec<u8> = text[..half].iter().copied().chain([0xff, 0xfe, b'\n']).collect();
        text.splice(0..0, torn);
        std::fs::write(&file, &text).unwrap();
        let events = read_log(&file).unwrap();
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[1].kind, EventKind::SystemStopped { clean: true });
    }
}

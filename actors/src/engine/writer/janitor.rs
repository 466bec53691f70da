//! The writer's upkeep, run in its own sequence (as its commits are): compaction or key
//! indexes, old versions and stray files, the chunk file, the resident index's snapshot. When
//! it falls due and what it does is [`super::upkeep`]'s policy.

use super::upkeep::{self, Work};
use super::{KEEP_VERSIONS, KEEP_VERSIONS_SHARED, SourceWriter, UPKEEP_DELAY};
use crate::core::event::EventKind;
use crate::core::log::Emitter;
use crate::replication::journal::Change;
use actix::prelude::*;
use cairn_index::{PruneStats, Resident, ResidentIndex, SourceStore};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

impl SourceWriter {
    /// Count a commit towards upkeep, and schedule it when it falls due (once: a steady stream
    /// of commits must not postpone it for ever). Every commit also moves the idle upkeep: once
    /// the writer has been idle past the keep window, one more run compacts what the last
    /// commits left and removes every version but the current one, so a watch at rest takes
    /// the room of a fresh index.
    pub(super) fn note_commit(&mut self, chunks: usize, rewritten: usize, ctx: &mut Context<Self>) {
        let due = self.upkeep_due.committed(chunks, rewritten);
        if let Some(idle) = self.idle_upkeep.take() {
            ctx.cancel_future(idle);
        }
        self.idle_upkeep = Some(ctx.run_later(KEEP_VERSIONS + UPKEEP_DELAY, |act, ctx| {
            act.idle_upkeep = None;
            act.run_upkeep(true, ctx);
        }));
        if self.upkeep.is_some() || !due {
            return;
        }
        self.upkeep = Some(ctx.run_later(UPKEEP_DELAY, |act, ctx| {
            act.upkeep = None;
            act.run_upkeep(false, ctx);
        }));
    }

    /// Compaction, then old versions and stray files removed, in the writer's own sequence (as
    /// its commits are): no commit of this writer runs meanwhile, so a compaction never loses a
    /// commit race (LanceDB would refuse it and its rewritten files would stay behind, unused),
    /// and files no version references are strays of a crash or of an older build, safe to
    /// remove. The run goes in steps ([`Phase`]), and the writer's messages are handled between
    /// them: an edit arriving meanwhile waits for one step, not for the whole run (the first
    /// compaction after a backfill merges the whole first index: 5.2 s on GCIDE's 150,000
    /// chunks). The compaction's steps are bounded in rows, sized by the time the steps take
    /// ([`upkeep::next_step_rows`]). The run once the writer is `idle` also compacts the chunk
    /// file and saves the resident index's snapshot, when it no longer matches the tables, and at
    /// its end gives back LanceDB's metadata cache ([`SourceStore::release_metadata_cache`]).
    fn run_upkeep(&mut self, idle: bool, ctx: &mut Context<Self>) {
        // A writer that may not commit may not compact or prune either (a lease not valid now).
        if self.refused().is_some() {
            return;
        }
        let Some(store) = self.store.clone() else { return };
        // While vectors are being written, every vector commit rewrites rows of the chunks
        // table: a compaction now would redo work the next commits undo, so it waits for the
        // commit after the backfill; the key indexes follow the table meanwhile (see
        // [`super::upkeep::Upkeep::run`]). (Queued or in flight: a chunk the model refused
        // stays without a vector for good and must not hold compaction off for ever.)
        let work = self.upkeep_due.run(self.vectors.busy());
        let run = Run {
            phase: match work {
                Work::Compact => Phase::Compact,
                Work::IndexKeys => Phase::Key(0),
                Work::PruneOnly => Phase::Prune,
            },
            work,
            rows: upkeep::FIRST_STEP_ROWS,
            store,
            resident: self.resident.clone().filter(|_| idle),
            snapshot: self.snapshot(),
            exact_up_to: self.opts.exact_vectors_up_to,
            journal: self.opts.publishing.as_ref().map(|p| p.journal.clone()),
            from: None,
            started: Instant::now(),
            done: Done::default(),
        };
        self.step_upkeep(run, ctx);
    }

    /// One step of `run`; the next is queued behind the messages that came meanwhile.
    fn step_upkeep(&mut self, run: Run, ctx: &mut Context<Self>) {
        // Checked before every step: the lease may have been lost since the run began.
        if let Some(refused) = self.refused() {
            tracing::info!("source `{}`: upkeep stops: {refused}", self.id);
            return;
        }
        let (emit, id) = (self.emit.clone(), self.id.clone());
        ctx.wait(actix::fut::wrap_future::<_, Self>(run.step(emit, id)).map(|res, act, ctx| match res {
            Ok(Some(next)) => {
                ctx.run_later(Duration::ZERO, move |act, ctx| act.step_upkeep(next, ctx));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "source `{}`: upkeep failed (searches stay correct; the tables grow): {e}",
                act.id
            ),
        }));
    }

    /// Where this source's resident-index snapshot is kept, if snapshots are.
    pub(super) fn snapshot(&self) -> Option<PathBuf> {
        self.opts.snapshots.as_ref().map(|dir| snapshot_path(dir, &self.id))
    }
}

/// The steps of an upkeep run, in order; each holds the writer once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A step of compaction, bounded in rows; again while one compacts rows.
    Compact,
    /// The last compaction without a budget (for a task larger than a step's, which LanceDB's
    /// budget would put off for ever).
    Finish,
    /// The `n`-th key index brought up to date (of [`cairn_index::KEY_INDEXES`]), one a step:
    /// each rewrites its B-tree over the whole table (up to 0.7 s a step at a million chunks,
    /// 1.2 s for the four at once). During a backfill, the run is these steps and the pruning.
    Key(usize),
    /// Old versions (and, alone on the tables, stray files) removed.
    Prune,
    /// The chunk file copied without its dead records, once the writer is idle.
    ChunkFile,
    /// The snapshot saved, once the writer is idle, when it no longer matches the tables.
    Snapshot,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Compact => "compact",
            Phase::Finish => "finish",
            Phase::Key(_) => "key_index",
            Phase::Prune => "prune",
            Phase::ChunkFile => "chunk_file",
            Phase::Snapshot => "snapshot",
        }
    }
}

/// What the steps of a run did so far.
#[derive(Default)]
struct Done {
    pruned: PruneStats,
    /// The chunk file was compacted: the snapshot must name the copy, though the tables did not
    /// move.
    chunk_file: bool,
    steps: u32,
    longest: Option<(Phase, Duration)>,
}

/// One upkeep run, with what it needs cloned out of the writer.
struct Run {
    phase: Phase,
    work: Work,
    /// The next compaction step's budget, in source rows of each table.
    rows: usize,
    store: SourceStore,
    /// The resident index, on the run once the writer is idle.
    resident: Option<Resident>,
    /// Where its snapshot is saved, when the source keeps one.
    snapshot: Option<PathBuf>,
    exact_up_to: usize,
    /// On an object store (readers elsewhere): versions are kept longer, strays are kept, and
    /// the version the run ends at is told to readers.
    journal: Option<crate::replication::journal::Journal>,
    /// The chunks table's version when the run began.
    from: Option<u64>,
    started: Instant,
    done: Done,
}

impl Run {
    /// The step of the current phase; the run with the next one, or `None` once it is over (its
    /// `optimized` event emitted).
    async fn step(mut self, emit: Emitter, id: String) -> Result<Option<Run>, cairn_index::Error> {
        let started = Instant::now();
        if self.journal.is_some() && self.from.is_none() {
            self.from = Some(self.store.version().await?);
        }
        let phase = self.phase;
        let next = self.step_phase(&id).await?;
        let took = started.elapsed();
        self.done.steps += 1;
        if self.done.longest.is_none_or(|(_, longest)| took > longest) {
            self.done.longest = Some((phase, took));
        }
        match next {
            Some(next) => {
                if phase == Phase::Compact {
                    self.rows = upkeep::next_step_rows(self.rows, took);
                }
                self.phase = next;
                Ok(Some(self))
            }
            None => {
                // Readers follow the table's versions: the ones compaction and the key indexes
                // made are told as a change of no page, so that the next writer finds the
                // journal at the table's version (see `Journal::opened`).
                if let (Some(journal), Some(from)) = (&self.journal, self.from) {
                    let version = self.store.version().await?;
                    if version > from {
                        let committed_unix_ms = crate::core::event::unix_ms();
                        // Taken over from meanwhile: the next writer's open tells its own version.
                        let _ = journal
                            .record(&id, Change { version, committed_unix_ms, ..Change::default() })
                            .await;
                    }
                }
                // The run once the writer is idle: what it read is not needed again soon.
                if self.resident.is_some() {
                    self.store.release_metadata_cache().await;
                }
                let (longest, longest_ms) =
                    self.done.longest.map_or(("", 0), |(p, t)| (p.name(), t.as_millis()));
                let ev = EventKind::Optimized {
                    ms: self.started.elapsed().as_millis() as u64,
                    versions_removed: self.done.pruned.old_versions,
                    bytes_removed: self.done.pruned.bytes_removed,
                    compacted: self.work == Work::Compact,
                    steps: self.done.steps,
                    longest_step: longest.to_string(),
                    longest_step_ms: longest_ms as u64,
                };
                emit.emit(&id, vec![ev]).await;
                Ok(None)
            }
        }
    }

    /// Run the current phase; the phase that follows, if any.
    async fn step_phase(&mut self, id: &str) -> Result<Option<Phase>, cairn_index::Error> {
        let store = &self.store;
        let idle = self.resident.is_some();
        Ok(match self.phase {
            Phase::Compact if store.compact(Some(self.rows)).await? => Some(Phase::Compact),
            Phase::Compact => Some(Phase::Finish),
            Phase::Finish => {
                store.compact(None).await?;
                Some(Phase::Key(0))
            }
            Phase::Key(n) => {
                store.index_key(n).await?;
                Some(if n + 1 < cairn_index::KEY_INDEXES { Phase::Key(n + 1) } else { Phase::Prune })
            }
            Phase::Prune => {
                self.done.pruned = match self.journal.is_some() {
                    false => store.prune(KEEP_VERSIONS, true).await?,
                    true => store.prune(KEEP_VERSIONS_SHARED, false).await?,
                };
                idle.then_some(Phase::ChunkFile)
            }
            Phase::ChunkFile => {
                let compacted = match &self.resident {
                    Some(r) => r.compact_chunk_file().await?,
                    None => None,
                };
                if let Some((before, after)) = compacted {
                    tracing::info!("source `{id}`: chunk file compacted from {before} to {after} bytes");
                    self.done.chunk_file = true;
                }
                self.snapshot.is_some().then_some(Phase::Snapshot)
            }
            Phase::Snapshot => {
                if let (Some(path), Some(resident)) = (&self.snapshot, &self.resident) {
                    save_snapshot(store, resident, path, self.exact_up_to, self.done.chunk_file).await?;
                }
                None
            }
        })
    }
}

/// Save `resident`'s snapshot at `path` when it no longer matches the tables, or when `moved`
/// (its chunk file was copied, though the tables did not move).
pub(super) async fn save_snapshot(
    store: &SourceStore,
    resident: &Resident,
    path: &Path,
    exact_up_to: usize,
    moved: bool,
) -> Result<(), cairn_index::Error> {
    let stamp = store.stamp(exact_up_to).await?;
    if moved || ResidentIndex::stamp_of(path) != Some(stamp) {
        resident.save(path, stamp).await;
    }
    Ok(())
}

/// The file of source `id`'s resident-index snapshot in the folder `dir`.
pub(crate) fn snapshot_path(dir: &Path, id: &str) -> PathBuf {
    let name: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '~' }).collect();
    dir.join(format!("{name}.snapshot"))
}

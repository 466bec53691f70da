//! The writer's upkeep, run in its own sequence (as its commits are): compaction or key
//! indexes, old versions and stray files, the chunk file, the resident index's snapshot. When
//! it falls due and what it does is [`super::upkeep`]'s policy.

use super::upkeep::Work;
use super::{KEEP_VERSIONS, KEEP_VERSIONS_SHARED, SourceWriter, UPKEEP_DELAY};
use crate::event::EventKind;
use crate::ops::log::Emitter;
use actix::prelude::*;
use cairn_index::{Resident, ResidentIndex, SourceStore};
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
    /// remove. The compaction goes in steps of at most [`COMPACT_STEP_ROWS`] rows a table, and
    /// the writer's messages are handled between steps: an edit arriving meanwhile waits for
    /// one step, not for the whole compaction (the first after a backfill merges the whole
    /// first index: 5.2 s on GCIDE's 150,000 chunks). The run once the writer is `idle` also
    /// saves the resident index's snapshot, when it no longer matches the tables.
    fn run_upkeep(&mut self, idle: bool, ctx: &mut Context<Self>) {
        if self.retired {
            return;
        }
        let Some(store) = self.store.clone() else { return };
        // While vectors are being written, every vector commit rewrites rows of the chunks
        // table: a compaction now would redo work the next commits undo, so it waits for the
        // commit after the backfill; the key indexes follow the table meanwhile (see
        // [`super::upkeep::Upkeep::run`]). (Queued or in flight: a chunk the model refused
        // stays without a vector for good and must not hold compaction off for ever.)
        let vectors_busy = self.vectors.out > 0
            || self.vectors.committing > 0
            || !self.vectors.edits.is_empty()
            || !self.vectors.bulk.is_empty();
        let run = Run {
            work: self.upkeep_due.run(vectors_busy),
            store,
            resident: self.resident.clone().filter(|_| idle),
            snapshot: self.snapshot(),
            exact_up_to: self.opts.exact_vectors_up_to,
            shared: self.opts.publishing.is_some(),
            started: Instant::now(),
        };
        self.step_upkeep(run, ctx);
    }

    /// One step of `run`; the next is queued behind the messages that came meanwhile.
    fn step_upkeep(&mut self, run: Run, ctx: &mut Context<Self>) {
        if self.retired {
            return;
        }
        let (emit, id, next) = (self.emit.clone(), self.id.clone(), run.clone());
        ctx.wait(actix::fut::wrap_future::<_, Self>(run.step(emit, id)).map(|res, act, ctx| match res {
            Ok(Step::Compacted) => {
                ctx.run_later(Duration::ZERO, move |act, ctx| act.step_upkeep(next, ctx));
            }
            Ok(Step::Done) => {}
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

/// Source rows (of each table) one step of the upkeep's compaction reads at most: 16 fragments
/// of [`cairn_index::FRAGMENT_ROWS`]. The first compaction after GCIDE's backfill merged 285,000
/// rows (chunks and pages) in 5.2 s, ~18 µs a row (release, 2 cores): a step should take ~0.3 s,
/// which leaves an edit that waits behind one inside its second for searchable. Measured on
/// GCIDE, edits made during that compaction were searchable within 0.84 s in one run, but
/// within 3.2 s in the next, whose steps took up to 3 s each (BENCHMARKS.md, "int8 codes past
/// 8,000 chunks"): the rows do not bound a step's time, and the cause is not isolated.
pub const COMPACT_STEP_ROWS: usize = 16 * cairn_index::FRAGMENT_ROWS;

/// What one step of an upkeep run did.
enum Step {
    /// It compacted rows: the next step may find more.
    Compacted,
    /// The run is over.
    Done,
}

/// One upkeep run, cloned out of the writer.
#[derive(Clone)]
struct Run {
    work: Work,
    store: SourceStore,
    /// The resident index, on the run once the writer is idle.
    resident: Option<Resident>,
    /// Where its snapshot is saved, when the source keeps one.
    snapshot: Option<PathBuf>,
    exact_up_to: usize,
    /// On an object store (readers elsewhere): versions are kept longer, strays are kept.
    shared: bool,
    started: Instant,
}

impl Run {
    /// A step of compaction while one compacts rows; then (a last compaction without a budget,
    /// for a task larger than a step's, which LanceDB's budget would put off for ever) the key
    /// indexes, old versions, the chunk file and the snapshot.
    async fn step(self, emit: Emitter, id: String) -> Result<Step, cairn_index::Error> {
        let (store, work) = (&self.store, self.work);
        match work {
            Work::Compact if store.compact(Some(COMPACT_STEP_ROWS)).await? => return Ok(Step::Compacted),
            Work::Compact => store.optimize().await?,
            Work::IndexKeys => store.index_keys().await?,
            Work::PruneOnly => {}
        }
        let pruned = match self.shared {
            false => store.prune(KEEP_VERSIONS, true).await?,
            true => store.prune(KEEP_VERSIONS_SHARED, false).await?,
        };
        // The chunk file copied without its dead records (the snapshot must then name the
        // copy, though the tables did not move).
        let compacted = match &self.resident {
            Some(r) => r.compact_chunk_file().await?,
            None => None,
        };
        if let Some((before, after)) = compacted {
            tracing::info!("source `{id}`: chunk file compacted from {before} to {after} bytes");
        }
        if let (Some(path), Some(resident)) = (&self.snapshot, &self.resident) {
            let stamp = store.stamp(self.exact_up_to).await?;
            if compacted.is_some() || ResidentIndex::stamp_of(path) != Some(stamp) {
                resident.save(path, stamp).await;
            }
        }
        let ev = EventKind::Optimized {
            ms: self.started.elapsed().as_millis() as u64,
            versions_removed: pruned.old_versions,
            bytes_removed: pruned.bytes_removed,
            compacted: work == Work::Compact,
        };
        emit.emit(&id, vec![ev]).await;
        Ok(Step::Done)
    }
}

/// The file of source `id`'s resident-index snapshot in the folder `dir`.
pub(crate) fn snapshot_path(dir: &Path, id: &str) -> PathBuf {
    let name: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '~' }).collect();
    dir.join(format!("{name}.snapshot"))
}

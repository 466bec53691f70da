//! The upkeep policy: when the writer's upkeep falls due, and what it does. Pure counting, with
//! its own tests; the writer runs the work it names in its own sequence.

/// Commits, or chunks written, between upkeep runs.
pub const UPKEEP_EVERY: usize = 32;
pub const UPKEEP_CHUNKS: usize = 1000;

/// What one upkeep run does besides removing old versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Compact small fragments, then bring the key indexes up to date.
    Compact,
    /// Vectors are being written (each vector commit rewrites chunk rows, so a compaction would
    /// be undone): only bring the key indexes up to date, without compacting.
    IndexKeys,
    /// Vectors are being written and no row was written since the indexes were brought up to
    /// date: old versions only.
    PruneOnly,
}

/// The counts the policy decides on.
#[derive(Debug, Default)]
pub struct Upkeep {
    commits: usize,
    chunks: usize,
    /// Rows written since (new chunk rows, and rows a vector commit rewrote).
    unindexed: usize,
    /// Compaction was put off for the backfill: the next commit makes the upkeep due again.
    postponed: bool,
}

impl Upkeep {
    /// Start from a source holding `rows` chunk rows, which the key indexes may not cover (a
    /// first index stopped before its backfill ended): the first run during a backfill brings
    /// them up to date.
    pub fn new(rows: usize) -> Self {
        Self { unindexed: rows, ..Self::default() }
    }

    /// A commit wrote `chunks` new chunk rows and rewrote `rewritten` (vectors attached); whether
    /// the upkeep is now due.
    pub fn committed(&mut self, chunks: usize, rewritten: usize) -> bool {
        self.commits += 1;
        self.chunks += chunks;
        self.unindexed += chunks + rewritten;
        self.postponed || self.commits >= UPKEEP_EVERY || self.chunks >= UPKEEP_CHUNKS
    }

    /// The run starts: what it does, with vectors being written (`vectors_busy`) or not.
    ///
    /// A commit's upserts and deletes read every row the key indexes do not cover, and bringing
    /// them up to date reads every row they do. Updating them at every run while the backfill
    /// keeps compaction off (about every other commit) was measured against updating them only
    /// once the rows written since reach a quarter of those covered (geometric, so the updates'
    /// total cost is linear in the table): on 47,209 pages the lazy rule saved 5 s of updates
    /// and cost 18 s of slower commits, so every run updates them.
    pub fn run(&mut self, vectors_busy: bool) -> Work {
        self.commits = 0;
        self.chunks = 0;
        self.postponed = vectors_busy;
        let work = match vectors_busy {
            false => Work::Compact,
            true if self.unindexed > 0 => Work::IndexKeys,
            true => Work::PruneOnly,
        };
        if work != Work::PruneOnly {
            self.unindexed = 0;
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_after_enough_commits_or_chunks() {
        let mut u = Upkeep::new(0);
        assert!((1..UPKEEP_EVERY).all(|_| !u.committed(1, 0)));
        assert!(u.committed(1, 0), "the 32nd commit");
        assert_eq!(u.run(false), Work::Compact);
        assert!(!u.committed(UPKEEP_CHUNKS - 1, 0));
        assert!(u.committed(1, 0), "a thousand chunks");
        assert_eq!(u.run(false), Work::Compact);
        assert!(!u.committed(0, 5000), "rewritten rows are not new chunks");
    }

    #[test]
    fn during_a_backfill_the_indexes_follow_every_write_without_compaction() {
        let mut u = Upkeep::new(40_000);
        assert!(!u.committed(512, 0));
        assert!(u.committed(512, 0), "a thousand chunks");
        assert_eq!(u.run(true), Work::IndexKeys, "rows written (and those found at the start)");
        assert_eq!(u.run(true), Work::PruneOnly, "nothing written since");
        // Every commit makes the upkeep due while compaction waits for the backfill's end.
        assert!(u.committed(0, 512), "due again at once: compaction was put off");
        assert_eq!(u.run(true), Work::IndexKeys, "rows a vector commit rewrote");
        assert!(u.committed(0, 512));
        assert_eq!(u.run(false), Work::Compact, "the backfill over: compaction");
        assert_eq!(u.unindexed, 0);
        assert!(!u.committed(1, 0), "no longer put off");
    }
}

//! The upkeep policy: when the writer's upkeep falls due, and what it does. Pure counting, with
//! its own tests; the writer runs the work it names in its own sequence.

use cairn_index::FRAGMENT_ROWS;
use std::time::Duration;

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

/// How long one step of the upkeep's compaction should hold the writer. An edit that arrives
/// meanwhile waits for the step, and must be searchable within a second (issue 30); an edit
/// alone takes ~0.2 s from the write to searchable (the debounce, parsing, the commit), so a
/// step may take what is left, with room for a slower machine: 0.4 s.
pub const STEP_TARGET: Duration = Duration::from_millis(400);

/// The first step's budget, in source rows of each table: 8 fragments. Alone on the machine
/// (release, 2 cores) a GCIDE step (150,000 chunks) of 16 fragments took ~0.55 s and one of 4
/// took ~0.2 s: ~20 µs a row, plus ~0.15 s remapping the key indexes, a cost that grows with
/// the table, not the step. 8 is near the target there; the next steps follow what the steps
/// take, on the machine and under the load they meet.
pub const FIRST_STEP_ROWS: usize = 8 * FRAGMENT_ROWS;

/// The budget of the next compaction step, after one of `rows` took `took`: scaled towards
/// [`STEP_TARGET`], at most doubled or halved at once (a step that found little to do is no
/// measure of a full one), and within 4 to 64 fragments. Below 4, a step's time is mostly the
/// key indexes' remap, which smaller steps only repeat more often.
pub fn next_step_rows(rows: usize, took: Duration) -> usize {
    let scaled = rows as f64 * STEP_TARGET.as_secs_f64() / took.as_secs_f64().max(1e-3);
    (scaled as usize).clamp(rows / 2, rows * 2).clamp(4 * FRAGMENT_ROWS, 64 * FRAGMENT_ROWS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_steps_follow_their_time() {
        let ms = Duration::from_millis;
        assert_eq!(next_step_rows(FIRST_STEP_ROWS, STEP_TARGET), FIRST_STEP_ROWS, "on target: kept");
        assert_eq!(
            next_step_rows(FIRST_STEP_ROWS, STEP_TARGET * 2),
            FIRST_STEP_ROWS / 2,
            "twice as long: halved"
        );
        assert_eq!(next_step_rows(FIRST_STEP_ROWS, ms(3000)), FIRST_STEP_ROWS / 2, "halved at most at once");
        assert_eq!(next_step_rows(4 * FRAGMENT_ROWS, ms(3000)), 4 * FRAGMENT_ROWS, "never below 4 fragments");
        assert_eq!(next_step_rows(FIRST_STEP_ROWS, ms(1)), 2 * FIRST_STEP_ROWS, "doubled at most at once");
        assert_eq!(next_step_rows(64 * FRAGMENT_ROWS, ms(10)), 64 * FRAGMENT_ROWS, "never past 64 fragments");
        let mut rows = 64 * FRAGMENT_ROWS;
        for _ in 0..8 {
            // A machine where a row costs 20 µs: the steps settle where one takes the target.
            rows = next_step_rows(rows, Duration::from_micros(20 * rows as u64));
        }
        assert!((rows as f64 * 20e-6 - STEP_TARGET.as_secs_f64()).abs() < 0.05, "{rows} rows");
    }

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

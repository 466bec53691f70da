//! The embedding backlog: the chunks waiting for vectors (an edit's ahead of bulk work), the
//! requests out to the model, and the vectors on their way to the tables. Pure bookkeeping, with
//! its own tests; the writer sends the requests and commits the answers, through the methods
//! below only.

use crate::core::error::PipelineError;
use crate::core::event::EventKind;
use crate::engine::embedding::Priority;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Embedding requests out at once: one being embedded, one queued behind it, so the model never
/// waits for a commit.
pub const MAX_EMBEDS_OUT: usize = 2;
/// Vectors remembered by text hash after they are embedded, for chunks queued meanwhile with the
/// same text (committed vectors are found in the resident index).
const FRESH_VECTORS: usize = 4096;
/// The embedding rate is measured over this window.
const RATE_WINDOW: Duration = Duration::from_secs(30);

/// What a vector commit writes: the vectors (chunk id, vector), how many texts the model embedded
/// for them and its time, and the warnings told with it.
pub(super) struct Ready {
    pub(super) vectors: Vec<(String, Vec<f32>)>,
    pub(super) embedded: usize,
    pub(super) model: Duration,
    pub(super) warnings: Vec<EventKind>,
}

/// The chunks waiting for vectors, and the vectors on their way to the tables.
#[derive(Debug, Default)]
pub(super) struct Backlog {
    edits: VecDeque<String>,
    bulk: VecDeque<String>,
    queued: HashSet<String>,
    /// Requests out to the model.
    out: usize,
    /// Of those, requests of edits (one may go out beyond [`MAX_EMBEDS_OUT`]).
    edits_out: usize,
    /// Vector commits under way.
    committing: usize,
    /// Embedded (or found by text hash) and not yet committed: (chunk id, vector).
    ready: Vec<(String, Vec<f32>)>,
    /// Of those, the texts the model embedded, and its time for them.
    embedded: usize,
    model: Duration,
    /// Warnings about those (chunks longer than the model's window), told with their commit.
    warnings: Vec<EventKind>,
    fresh: HashMap<String, Vec<f32>>,
    /// Chunks still waiting, per page (for `page_embedded`).
    left: HashMap<String, usize>,
    /// `flush` callers waiting for every vector (told a failure that lasts, too).
    waiters: Vec<oneshot::Sender<Result<(), PipelineError>>>,
    /// Recent vector commits: (when, chunks).
    recent: VecDeque<(Instant, usize)>,
    /// A commit of `ready` is due again (the writer lease lapsed: it waits for a renewal).
    retry_due: bool,
}

impl Backlog {
    /// Chunks queued for the model.
    pub(super) fn waiting(&self) -> usize {
        self.queued.len()
    }

    /// A `flush` caller, answered once nothing waits for a vector (or told a failure that lasts).
    pub(super) fn wait(&mut self, tx: oneshot::Sender<Result<(), PipelineError>>) {
        self.waiters.push(tx);
    }

    /// Answer every waiting caller with `result`.
    pub(super) fn tell_waiters(&mut self, result: Result<(), PipelineError>) {
        for w in self.waiters.drain(..) {
            let _ = w.send(result.clone());
        }
    }

    /// The source opened again (a start, or a restart after a failure): what was queued, out or
    /// ready is known again from the tables; only the callers waiting stay.
    pub(super) fn reopened(&mut self) {
        *self = Backlog { waiters: std::mem::take(&mut self.waiters), ..Backlog::default() };
    }

    /// The actor restarted: the requests it had out were cancelled with its old context.
    pub(super) fn restarted(&mut self) {
        (self.out, self.edits_out) = (0, 0);
    }

    /// The vector of a text embedded moments ago.
    pub(super) fn fresh(&self, hash: &str) -> Option<Vec<f32>> {
        self.fresh.get(hash).cloned()
    }

    /// A chunk's vector, known without the model: ready for the next vector commit.
    pub(super) fn ready(&mut self, chunk_id: String, vector: Vec<f32>) {
        self.ready.push((chunk_id, vector));
    }

    /// The model's answer for one text (`made`: embedded now, not reused): every chunk of that
    /// text gets the vector, and it is remembered for chunks of the same text queued meanwhile.
    pub(super) fn embedded(&mut self, hash: String, vector: &[f32], chunk_ids: Vec<String>, made: bool) {
        self.embedded += usize::from(made);
        self.remember(hash, vector.to_vec());
        self.ready.extend(chunk_ids.into_iter().map(|id| (id, vector.to_vec())));
    }

    /// The model's time for a request.
    pub(super) fn model_time(&mut self, took: Duration) {
        self.model += took;
    }

    /// Warnings told with the next vector commit.
    pub(super) fn warn(&mut self, warnings: impl IntoIterator<Item = EventKind>) {
        self.warnings.extend(warnings);
    }

    /// Vectors wait to be committed.
    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Vectors wait and no request is out: their commit is due now.
    pub(super) fn commit_due(&self) -> bool {
        !self.ready.is_empty() && self.out == 0
    }

    /// What is ready, for a vector commit counted as under way from now.
    pub(super) fn take_ready(&mut self) -> Ready {
        self.committing += 1;
        Ready {
            vectors: std::mem::take(&mut self.ready),
            embedded: std::mem::take(&mut self.embedded),
            model: std::mem::take(&mut self.model),
            warnings: std::mem::take(&mut self.warnings),
        }
    }

    /// A vector commit ended: `Some(n)` when it wrote `n` chunks' vectors.
    pub(super) fn committed(&mut self, chunks: Option<usize>) {
        self.committing -= 1;
        if let Some(n) = chunks {
            self.recent.push_back((Instant::now(), n));
        }
    }

    /// A refused vector commit is to be tried again: `true` for the caller that must schedule it
    /// (one retry at a time).
    pub(super) fn retry_once(&mut self) -> bool {
        !std::mem::replace(&mut self.retry_due, true)
    }

    /// The scheduled retry runs.
    pub(super) fn retrying(&mut self) {
        self.retry_due = false;
    }

    /// A page committed with `chunks` of its chunks still waiting for vectors (0: none).
    pub(super) fn page_waits(&mut self, slug: &str, chunks: usize) {
        if chunks == 0 {
            self.left.remove(slug);
        } else {
            self.left.insert(slug.to_string(), chunks);
        }
    }

    /// One more chunk of a page waits (counted as the source opens).
    pub(super) fn chunk_waits(&mut self, slug: String) {
        *self.left.entry(slug).or_default() += 1;
    }

    /// A page removed: nothing of it waits.
    pub(super) fn forget_page(&mut self, slug: &str) {
        self.left.remove(slug);
    }

    /// `n` more of a page's chunks have their vectors: whether that was its last.
    pub(super) fn page_embedded(&mut self, slug: &str, n: usize) -> bool {
        let Some(left) = self.left.get_mut(slug) else { return false };
        *left = left.saturating_sub(n);
        if *left > 0 {
            return false;
        }
        self.left.remove(slug);
        true
    }

    /// Vectors are queued, out to the model or being committed (upkeep that rewrites the chunks
    /// table waits).
    pub(super) fn busy(&self) -> bool {
        self.out > 0 || self.committing > 0 || !self.edits.is_empty() || !self.bulk.is_empty()
    }

    /// Queue a chunk for its vector; an edit's chunk already queued as bulk work moves up.
    pub(super) fn queue(&mut self, chunk_id: String, priority: Priority) {
        if self.queued.insert(chunk_id.clone()) {
            match priority {
                Priority::Edit => self.edits.push_back(chunk_id),
                Priority::Bulk => self.bulk.push_back(chunk_id),
            }
        } else if priority == Priority::Edit
            && let Some(at) = self.bulk.iter().position(|c| *c == chunk_id)
        {
            // A page edited while its first index waits: its unchanged chunks, queued by the
            // scan, go with the edit, or the page would have its vectors only at the end.
            self.bulk.remove(at);
            self.edits.push_back(chunk_id);
        }
    }

    /// Nothing waits, is out, or is being committed.
    pub(super) fn idle(&self) -> bool {
        self.edits.is_empty()
            && self.bulk.is_empty()
            && self.out == 0
            && self.ready.is_empty()
            && self.committing == 0
    }

    /// A vector just embedded, for chunks of the same text queued meanwhile.
    fn remember(&mut self, hash: String, v: Vec<f32>) {
        if self.fresh.len() >= FRESH_VECTORS {
            self.fresh.clear();
        }
        self.fresh.insert(hash, v);
    }

    /// The next embedding request, if one may go out now: every edit's chunk waiting (an edit
    /// never waits for the bulk requests already out: it may be one more, and the scheduler
    /// embeds it at its next model batch), else up to `bulk_size` bulk chunks while fewer than
    /// [`MAX_EMBEDS_OUT`] requests are out. The chunks leave the queue; the caller counts the
    /// request out ([`Backlog::sent`]).
    pub(super) fn next_request(&mut self, bulk_size: usize) -> Option<(Vec<String>, Priority)> {
        let edit_turn = !self.edits.is_empty() && self.edits_out == 0;
        if self.out >= MAX_EMBEDS_OUT && !edit_turn {
            return None;
        }
        let (q, limit, priority) = match self.edits.is_empty() {
            true => (&mut self.bulk, bulk_size.max(1), Priority::Bulk),
            false => (&mut self.edits, usize::MAX, Priority::Edit),
        };
        let ids: Vec<String> = std::iter::from_fn(|| q.pop_front()).take(limit).collect();
        for id in &ids {
            self.queued.remove(id);
        }
        (!ids.is_empty()).then_some((ids, priority))
    }

    /// A request of `priority` went out to the model.
    pub(super) fn sent(&mut self, priority: Priority) {
        self.out += 1;
        self.edits_out += usize::from(priority == Priority::Edit);
    }

    /// The model answered a request of `priority` (or its scheduler stopped).
    pub(super) fn answered(&mut self, priority: Priority) {
        self.out -= 1;
        self.edits_out -= usize::from(priority == Priority::Edit);
    }

    /// Chunks committed per second over the last [`RATE_WINDOW`].
    pub(super) fn rate(&mut self, now: Instant) -> f64 {
        while self.recent.front().is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW) {
            self.recent.pop_front();
        }
        let chunks: usize = self.recent.iter().map(|(_, n)| n).sum();
        match self.recent.front() {
            Some((first, _)) if chunks > 0 => {
                chunks as f64 / now.duration_since(*first).as_secs_f64().max(1.0)
            }
            _ => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(ids: &[&str], p: Priority) -> Option<(Vec<String>, Priority)> {
        Some((ids.iter().map(|s| s.to_string()).collect(), p))
    }

    #[test]
    fn bulk_goes_in_requests_of_its_size_at_most_two_out() {
        let mut b = Backlog::default();
        for c in ["a", "b", "c", "d", "e"] {
            b.queue(c.into(), Priority::Bulk);
        }
        let first = b.next_request(2);
        assert_eq!(first, req(&["a", "b"], Priority::Bulk));
        b.sent(Priority::Bulk);
        assert_eq!(b.next_request(2), req(&["c", "d"], Priority::Bulk));
        b.sent(Priority::Bulk);
        assert_eq!(b.next_request(2), None, "two requests out");
        b.answered(Priority::Bulk);
        assert_eq!(b.next_request(2), req(&["e"], Priority::Bulk));
        b.sent(Priority::Bulk);
        assert_eq!(b.next_request(2), None);
        assert!(b.queued.is_empty() && !b.idle(), "nothing queued, two out");
        b.answered(Priority::Bulk);
        b.answered(Priority::Bulk);
        assert!(b.idle());
    }

    #[test]
    fn an_edit_never_waits_for_bulk_work_but_one_edit_request_is_out_at_a_time() {
        let mut b = Backlog::default();
        for c in ["a", "b", "c", "d"] {
            b.queue(c.into(), Priority::Bulk);
        }
        for _ in 0..2 {
            let (_, p) = b.next_request(1).unwrap();
            b.sent(p);
        }
        assert_eq!(b.next_request(1), None, "bulk waits: two out");
        // An edited page whose chunk "d" was still queued as bulk work: it moves up.
        b.queue("d".into(), Priority::Edit);
        b.queue("x".into(), Priority::Edit);
        assert_eq!(b.bulk, ["c"], "d left the bulk queue");
        assert_eq!(b.next_request(1), req(&["d", "x"], Priority::Edit), "every edit's chunk at once");
        b.sent(Priority::Edit);
        b.queue("y".into(), Priority::Edit);
        assert_eq!(b.next_request(1), None, "one edit request out, and the bulk limit reached");
        b.answered(Priority::Edit);
        assert_eq!(b.next_request(1), req(&["y"], Priority::Edit));
    }

    #[test]
    fn a_chunk_is_queued_once() {
        let mut b = Backlog::default();
        b.queue("a".into(), Priority::Edit);
        b.queue("a".into(), Priority::Bulk);
        b.queue("a".into(), Priority::Edit);
        assert_eq!(b.next_request(8), req(&["a"], Priority::Edit));
        assert_eq!(b.next_request(8), None);
    }

    #[test]
    fn the_rate_counts_the_commits_of_the_window() {
        let mut b = Backlog::default();
        let t0 = Instant::now();
        assert_eq!(b.rate(t0), 0.0);
        b.recent.push_back((t0, 100));
        b.recent.push_back((t0 + Duration::from_secs(10), 100));
        assert_eq!(b.rate(t0 + Duration::from_secs(20)), 10.0, "200 chunks over 20 s");
        assert_eq!(b.rate(t0 + Duration::from_secs(35)), 4.0, "the first left the window: 100 over 25 s");
        assert_eq!(b.rate(t0 + Duration::from_secs(100)), 0.0);
    }
}

//! The embedding scheduler: one model, every source. Requests wait in per-source queues, in two
//! classes (edits ahead of bulk work: first indexes and backfills), and the model takes them a
//! slice at a time (one model batch), round-robin across the sources of the class it serves. An
//! edit in one source therefore waits for at most one slice of another source's first index
//! (about a third of a second), not for that index.
//!
//! Each request's texts are sorted by length before they are sliced, so a slice pads to texts of
//! similar length, as one large sorted request would.
//!
//! A scan that found pages to index holds bulk work back ([`EmbedScheduler::hold_bulk`]) until
//! its pages are committed: on a fresh vault the names and keywords of every page then become
//! searchable in the time parsing and writing take, instead of sharing the cores with the model
//! from the first committed batch on. The model starts as soon as the last such scan is done
//! (it was waiting for those pages' chunks anyway); edits are never held.
//!
//! Bound: a source's writer keeps at most two requests out ([`crate::engine::writer`]), so the queues
//! hold at most two requests per source; the thread is the only consumer.

use cairn_index::Embedder;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Which queue a request waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Priority {
    /// Pages just edited: served before any bulk work.
    Edit,
    /// First indexes, catch-up scans, backfills.
    Bulk,
}

/// What the model made of a request.
#[derive(Debug, Default)]
pub struct EmbedReply {
    /// One vector per text, in request order (`None` where the text failed).
    pub vectors: Vec<Option<Vec<f32>>>,
    /// Texts the model could not embed (by index), with why.
    pub failed: Vec<(usize, String)>,
    /// Texts longer than the model reads (their tail is not embedded), by index.
    pub truncated: Vec<usize>,
    /// Time inside the model for this request's slices.
    pub model: Duration,
    /// Texts answered with a vector the store already held (not by the model), by index.
    pub reused: Vec<usize>,
}

/// The scheduler stopped (the system is shutting down).
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the embedding scheduler has stopped")]
pub struct Stopped;

struct Request {
    /// Texts sorted by length, with each one's index in the request.
    texts: Vec<(usize, String)>,
    next: usize,
    reply: EmbedReply,
    done: oneshot::Sender<EmbedReply>,
}

#[derive(Default)]
struct Class {
    /// Sources with work, in round-robin order.
    order: VecDeque<String>,
    queues: HashMap<String, VecDeque<Request>>,
}

impl Class {
    /// A source is in the round at most once. (A source whose request is out with the model is
    /// not in it: a request it sends meanwhile puts it back, and so does [`Class::put_back`];
    /// twice would leave a stale turn behind, and a stale turn taken for a source with nothing
    /// queued stalled the model with other sources' work waiting.)
    fn enter(&mut self, source: &str) {
        if !self.order.iter().any(|s| s == source) {
            self.order.push_back(source.to_string());
        }
    }

    fn push(&mut self, source: &str, r: Request) {
        self.queues.entry(source.to_string()).or_default().push_back(r);
        self.enter(source);
    }

    /// The next source's first request, taken out (it goes back with [`Class::put_back`]).
    fn take(&mut self) -> Option<(String, Request)> {
        while let Some(source) = self.order.pop_front() {
            if let Some(r) = self.queues.get_mut(&source).and_then(VecDeque::pop_front) {
                return Some((source, r));
            }
        }
        None
    }

    /// A request with slices left goes back in front of its source's queue; the source goes to
    /// the back of the round.
    fn put_back(&mut self, source: String, r: Option<Request>) {
        let q = self.queues.entry(source.clone()).or_default();
        if let Some(r) = r {
            q.push_front(r);
        }
        if q.is_empty() {
            self.queues.remove(&source);
        } else {
            self.enter(&source);
        }
    }

    fn waiting(&self) -> usize {
        self.queues.values().map(VecDeque::len).sum()
    }
}

#[derive(Default)]
struct State {
    edit: Class,
    bulk: Class,
    /// Scans committing pages: bulk work waits while there are any.
    holds: usize,
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
}

/// The scheduler; dropping the last handle stops its thread once the queued work is done.
#[derive(Clone)]
pub struct EmbedScheduler {
    shared: Arc<Shared>,
    _stop: Arc<StopOnDrop>,
}

impl std::fmt::Debug for EmbedScheduler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("EmbedScheduler")
            .field("edits", &s.edit.waiting())
            .field("bulk", &s.bulk.waiting())
            .finish()
    }
}

struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.state.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        self.0.wake.notify_all();
    }
}

impl EmbedScheduler {
    /// Start the model thread; `slice` texts go to the model at a time (its batch size).
    pub fn start(embedder: Arc<dyn Embedder>, slice: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), wake: Condvar::new() });
        let worker = shared.clone();
        std::thread::Builder::new()
            .name("cairn-embed".into())
            .spawn(move || run(&worker, embedder.as_ref(), slice.max(1)))?;
        Ok(Self { _stop: Arc::new(StopOnDrop(shared.clone())), shared })
    }

    /// Hold bulk work back until the returned guard is dropped (edits still go through).
    pub fn hold_bulk(&self) -> BulkHold {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner()).holds += 1;
        BulkHold(self.shared.clone())
    }

    /// Vectors for `texts`, in order.
    pub async fn embed(
        &self,
        source: &str,
        priority: Priority,
        texts: Vec<String>,
    ) -> Result<EmbedReply, Stopped> {
        let (done, rx) = oneshot::channel();
        if texts.is_empty() {
            return Ok(EmbedReply::default());
        }
        let n = texts.len();
        let mut sorted: Vec<(usize, String)> = texts.into_iter().enumerate().collect();
        sorted.sort_by_key(|(_, t)| t.len());
        let reply = EmbedReply { vectors: vec![None; n], ..EmbedReply::default() };
        let request = Request { texts: sorted, next: 0, reply, done };
        {
            let mut s = self.shared.state.lock().unwrap_or_else(|p| p.into_inner());
            if s.closed {
                return Err(Stopped);
            }
            match priority {
                Priority::Edit => s.edit.push(source, request),
                Priority::Bulk => s.bulk.push(source, request),
            }
        }
        self.shared.wake.notify_one();
        rx.await.map_err(|_| Stopped)
    }
}

/// Bulk work is held back while this lives ([`EmbedScheduler::hold_bulk`]).
#[must_use = "bulk work is held only while the guard lives"]
pub struct BulkHold(Arc<Shared>);

impl std::fmt::Debug for BulkHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BulkHold")
    }
}

impl Drop for BulkHold {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        s.holds = s.holds.saturating_sub(1);
        drop(s);
        self.0.wake.notify_all();
    }
}

/// How long the model thread waits without work, after bulk work, before the model gives back
/// what its batches held ([`Embedder::release`]): a queue that drains for a moment between two
/// requests of a backfill does not count as its end.
const RELEASE_AFTER_IDLE: Duration = Duration::from_secs(2);

/// The model thread: take a slice, embed it outside the lock, put the request back. Once bulk
/// work is over (nothing to do for [`RELEASE_AFTER_IDLE`]), the model gives its memory back.
fn run(shared: &Shared, embedder: &dyn Embedder, slice: usize) {
    let mut bulk_ran = false;
    loop {
        let next = {
            let mut s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some((src, r)) = s.edit.take() {
                    break Some((Priority::Edit, src, r));
                }
                if (s.holds == 0 || s.closed)
                    && let Some((src, r)) = s.bulk.take()
                {
                    break Some((Priority::Bulk, src, r));
                }
                if s.closed {
                    return;
                }
                if !bulk_ran {
                    s = shared.wake.wait(s).unwrap_or_else(|p| p.into_inner());
                    continue;
                }
                let (guard, waited) =
                    shared.wake.wait_timeout(s, RELEASE_AFTER_IDLE).unwrap_or_else(|p| p.into_inner());
                s = guard;
                if waited.timed_out() && s.edit.waiting() == 0 && s.bulk.waiting() == 0 {
                    break None;
                }
            }
        };
        let Some((priority, source, mut request)) = next else {
            embedder.release();
            bulk_ran = false;
            continue;
        };
        bulk_ran |= priority == Priority::Bulk;
        // A caller that gave up (its future dropped) gets nothing more.
        let finished = if request.done.is_closed() {
            true
        } else {
            let end = (request.next + slice).min(request.texts.len());
            embed_slice(embedder, &mut request, end);
            request.next = end;
            request.next >= request.texts.len()
        };
        let back = if finished {
            if !request.done.is_closed() {
                let _ = request.done.send(std::mem::take(&mut request.reply));
            }
            None
        } else {
            Some(request)
        };
        let mut s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        match priority {
            Priority::Edit => s.edit.put_back(source, back),
            Priority::Bulk => s.bulk.put_back(source, back),
        }
    }
}

/// Embed texts `next..end` of a request into its reply. A panic (a bug, or a text the tokenizer
/// chokes on) is caught, and the slice's texts are retried one by one so only the culprit fails.
fn embed_slice(embedder: &dyn Embedder, r: &mut Request, end: usize) {
    let started = Instant::now();
    let items: Vec<(usize, &str)> = r.texts[r.next..end].iter().map(|(i, t)| (*i, t.as_str())).collect();
    let run = |texts: &[&str]| match cairn_index::fault::contained(|| embedder.embed_documents(texts)) {
        Ok(Ok(e)) => Ok(e),
        Ok(Err(e)) => Err(e.to_string()),
        Err(p) => Err(format!("the model crashed: {p}")),
    };
    let texts: Vec<&str> = items.iter().map(|(_, t)| *t).collect();
    match run(&texts) {
        Ok(e) => {
            for (k, v) in e.vectors.into_iter().enumerate() {
                r.reply.vectors[items[k].0] = Some(v);
            }
            r.reply.truncated.extend(e.truncated.iter().map(|&k| items[k].0));
        }
        Err(_) if items.len() > 1 => {
            for (i, t) in &items {
                match run(&[t]) {
                    Ok(mut e) => {
                        r.reply.vectors[*i] = e.vectors.pop();
                        if !e.truncated.is_empty() {
                            r.reply.truncated.push(*i);
                        }
                    }
                    Err(why) => r.reply.failed.push((*i, why)),
                }
            }
        }
        Err(why) => r.reply.failed.push((items[0].0, why)),
    }
    r.reply.model += started.elapsed();
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_index::embed::testing::HashEmbedder;

    fn request(texts: &[&str]) -> (Request, oneshot::Receiver<EmbedReply>) {
        let (done, rx) = oneshot::channel();
        let texts = texts.iter().enumerate().map(|(i, t)| (i, t.to_string())).collect();
        (Request { texts, next: 0, reply: EmbedReply::default(), done }, rx)
    }

    /// A source that sends a request while its previous one is with the model must not get two
    /// turns: the stale one, taken once its queue is empty, used to end the round with another
    /// source's work still queued (the model thread then slept, and every writer waited on it).
    #[test]
    fn a_request_sent_while_one_is_out_leaves_no_stale_turn() {
        let mut class = Class::default();
        let (a1, _ra1) = request(&["a1"]);
        let (b1, _rb1) = request(&["b1"]);
        class.push("a", a1);
        class.push("b", b1);
        let (src, taken) = class.take().unwrap();
        assert_eq!(src, "a");
        let (a2, _ra2) = request(&["a2"]);
        class.push("a", a2);
        class.put_back(src, Some(taken));
        let mut served = Vec::new();
        for _ in 0..3 {
            let (src, r) = class.take().expect("work is queued");
            served.push(format!("{src}:{}", r.texts[0].1));
            class.put_back(src, None);
        }
        assert_eq!(served, ["b:b1", "a:a1", "a:a2"], "every request served, no turn lost");
        assert_eq!(class.waiting(), 0);
        // Work that comes next is taken, not hidden behind a turn of a source with nothing.
        let (b2, _rb2) = request(&["b2"]);
        class.push("b", b2);
        assert_eq!(class.take().map(|(src, r)| format!("{src}:{}", r.texts[0].1)).as_deref(), Some("b:b2"));
    }

    /// Records the order texts reach the model; blocks on a gate so tests can queue work first.
    #[derive(Debug)]
    struct Recorder {
        inner: HashEmbedder,
        seen: Mutex<Vec<String>>,
        entered: std::sync::atomic::AtomicUsize,
        gate: Mutex<bool>,
        open: Condvar,
        released: tokio::sync::watch::Sender<usize>,
    }

    fn recorder(open: bool) -> Arc<Recorder> {
        Arc::new(Recorder {
            inner: HashEmbedder::default(),
            seen: Mutex::new(Vec::new()),
            entered: Default::default(),
            gate: Mutex::new(open),
            open: Condvar::new(),
            released: tokio::sync::watch::Sender::new(0),
        })
    }

    impl Embedder for Recorder {
        fn embed_documents(&self, texts: &[&str]) -> cairn_index::Result<cairn_index::Embedded> {
            self.entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut g = self.gate.lock().unwrap();
            while !*g {
                g = self.open.wait(g).unwrap();
            }
            drop(g);
            if texts.iter().any(|t| t.contains("PANIC")) {
                panic!("boom");
            }
            self.seen.lock().unwrap().extend(texts.iter().map(|t| t.to_string()));
            self.inner.embed_documents(texts)
        }
        fn embed_query(&self, text: &str) -> cairn_index::Result<Vec<f32>> {
            self.inner.embed_query(text)
        }
        fn dim(&self) -> usize {
            self.inner.dim()
        }
        fn release(&self) {
            self.released.send_modify(|n| *n += 1);
        }
        fn model_id(&self) -> &str {
            "recorder"
        }
    }

    /// Once bulk work is over, the model gives its memory back, once, and embeds as before after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_model_gives_its_memory_back_once_bulk_work_is_over() {
        let rec = recorder(true);
        let s = EmbedScheduler::start(rec.clone(), 8).unwrap();
        let mut released = rec.released.subscribe();
        let edit = s.embed("a", Priority::Edit, vec!["edit".into()]).await.unwrap();
        assert!(edit.vectors[0].is_some());
        let bulk = s.embed("a", Priority::Bulk, vec!["one".into(), "two".into()]).await.unwrap();
        assert!(bulk.vectors.iter().all(Option::is_some));
        let wait = released.wait_for(|n| *n > 0);
        tokio::time::timeout(RELEASE_AFTER_IDLE * 10, wait)
            .await
            .expect("released after the bulk work")
            .unwrap();
        assert_eq!(*rec.released.borrow(), 1);
        let after = s.embed("a", Priority::Edit, vec!["after".into()]).await.unwrap();
        assert!(after.vectors[0].is_some());
        assert_eq!(*rec.seen.lock().unwrap(), ["edit", "one", "two", "after"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn edits_go_first_and_sources_take_turns_by_slice() {
        let rec = recorder(false);
        let s = EmbedScheduler::start(rec.clone(), 2).unwrap();
        let texts = |p: &str, n: usize| (0..n).map(|i| format!("{p}{i:02}")).collect::<Vec<_>>();
        let ask = |source: &'static str, priority: Priority, t: Vec<String>| {
            let s = s.clone();
            tokio::spawn(async move { s.embed(source, priority, t).await })
        };
        // The thread takes a's first slice and waits at the gate; the rest queues behind it.
        let a = ask("a", Priority::Bulk, texts("a", 6));
        while rec.entered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        let b = ask("b", Priority::Bulk, texts("b", 4));
        let c = ask("c", Priority::Edit, texts("c", 2));
        let queued = |s: &EmbedScheduler| {
            let st = s.shared.state.lock().unwrap();
            (st.edit.waiting(), st.bulk.waiting())
        };
        while queued(&s) != (1, 1) {
            tokio::task::yield_now().await;
        }
        *rec.gate.lock().unwrap() = true;
        rec.open.notify_all();
        let (a, b, c) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap(), c.await.unwrap().unwrap());
        assert!(a.vectors.iter().chain(&b.vectors).chain(&c.vectors).all(Option::is_some));
        let seen = rec.seen.lock().unwrap().clone();
        // The edit goes as soon as a's slice is done; then a and b alternate slice by slice.
        assert_eq!(
            seen,
            ["a00", "a01", "c00", "c01", "b00", "b01", "a02", "a03", "b02", "b03", "a04", "a05"]
        );
    }

    /// While a scan holds bulk work back, an edit is embedded and bulk work waits; when the hold
    /// goes, the bulk work is done.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hold_keeps_bulk_work_back_but_not_edits() {
        let rec = recorder(true);
        let s = EmbedScheduler::start(rec.clone(), 8).unwrap();
        let hold = s.hold_bulk();
        let bulk = {
            let s = s.clone();
            tokio::spawn(async move { s.embed("a", Priority::Bulk, vec!["bulk".into()]).await })
        };
        while s.shared.state.lock().unwrap().bulk.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        let edit = s.embed("b", Priority::Edit, vec!["edit".into()]).await.unwrap();
        assert!(edit.vectors[0].is_some());
        assert_eq!(*rec.seen.lock().unwrap(), ["edit"], "the held bulk request did not reach the model");
        assert!(!bulk.is_finished());
        drop(hold);
        assert!(bulk.await.unwrap().unwrap().vectors[0].is_some());
        assert_eq!(*rec.seen.lock().unwrap(), ["edit", "bulk"]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_text_that_crashes_the_model_fails_alone() {
        let s = EmbedScheduler::start(recorder(true), 8).unwrap();
        let r = s
            .embed("a", Priority::Bulk, vec!["ok one".into(), "PANIC here".into(), "ok two".into()])
            .await
            .unwrap();
        assert_eq!(r.failed.iter().map(|(i, _)| *i).collect::<Vec<_>>(), [1]);
        assert!(r.failed[0].1.contains("crashed"), "{:?}", r.failed);
        assert!(r.vectors[0].is_some() && r.vectors[1].is_none() && r.vectors[2].is_some());
    }
}

//! The writer alone, in memory: LanceDB's `memory://` tables, the deterministic test embedder,
//! an event log that only broadcasts. What it decides (when to commit, what it refuses, what
//! waits for vectors, what a reader of the served sources sees) is tested here, below the
//! process tests that run the whole pipeline with the real model.

use super::*;
use crate::core::event::Event;
use crate::core::log::EventLog;
use crate::engine::embedding::EmbedScheduler;
use crate::engine::host::{HostCell, QueryHost};
use cairn_index::Embedder;
use cairn_index::embed::testing::HashEmbedder;
use std::sync::Arc;
use tokio::sync::broadcast;

/// One source's writer with everything it talks to.
struct Rig {
    writer: Addr<SourceWriter>,
    /// The model's queue, to hold bulk work back (a backfill still running).
    model: EmbedScheduler,
    served: Arc<HostCell>,
    status: StatusBoard,
    events: broadcast::Receiver<Arc<Event>>,
}

const SOURCE: &str = "notes";

impl Rig {
    /// A writer of a new source `notes` in its own in-memory database.
    async fn new(db: &str, opts: WriterOptions) -> Self {
        let db = Database::open(&format!("memory://{db}")).await.unwrap();
        let embedder: Arc<dyn Embedder> = Arc::new(HashEmbedder::default());
        let manifest = Manifest::current(embedder.model_id(), embedder.dim());
        let served = Arc::new(HostCell::new(QueryHost::new(Some(embedder.clone()), None)));
        let status = StatusBoard::default();
        let (tx, events) = broadcast::channel(4096);
        let st = status.clone();
        let log = SyncArbiter::start(1, move || {
            EventLog::open(None, u64::MAX, tx.clone(), st.clone()).expect("a log without a file")
        });
        let model = EmbedScheduler::start(embedder, 16).unwrap();
        let parts = WriterParts {
            db,
            manifest,
            embedder: model.clone(),
            query: crate::engine::query::QueryActor::new(served.clone()).start(),
            emit: Emitter::new(log, tokio::time::Instant::now()),
            status: status.clone(),
            opts,
        };
        // No folder: the source's language is not told from its text (English).
        let root = PathBuf::from("/nonexistent/cairn-writer-test");
        status.register(SOURCE, &root.display().to_string());
        let info = SourceInfo { id: SOURCE.into(), ..SourceInfo::default() };
        // Supervised, as in the pipeline: a writer that fails is restarted.
        let writer = actix::Supervisor::start(move |_| SourceWriter::new(info, root, parts));
        let mut rig = Self { writer, model, served, status, events };
        rig.wait_for("the source to start", |k| matches!(k, EventKind::SourceStarted { .. })).await;
        rig
    }

    /// The next event of the source matching `want`, skipping the others.
    async fn wait_for(&mut self, what: &str, want: impl Fn(&EventKind) -> bool) -> EventKind {
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let e = self.events.recv().await.expect("the event log is open");
                if e.source == SOURCE && want(&e.kind) {
                    return e.kind.clone();
                }
            }
        });
        found.await.unwrap_or_else(|_| panic!("no event for {what} within 30 s"))
    }

    /// Whatever was emitted so far, without waiting.
    fn emitted(&mut self) -> Vec<EventKind> {
        std::iter::from_fn(|| self.events.try_recv().ok()).map(|e| e.kind.clone()).collect()
    }

    async fn ingest(&self, parsed: Vec<Parsed>, removed: Vec<&str>, origin: Origin) {
        let removed = removed.into_iter().map(|r| (PathBuf::from(r), false)).collect();
        self.writer.send(Ingest { parsed, removed, renamed: vec![], origin }).await.unwrap();
    }

    /// The slugs the served sources hold now (what an answer reads).
    fn served_slugs(&self) -> Vec<String> {
        let host = self.served.now();
        let Some(live) = host.live(SOURCE) else { return vec![] };
        let mut slugs: Vec<String> = live.resident.read().records().map(|p| p.slug.clone()).collect();
        slugs.sort();
        slugs
    }
}

/// A page at `rel` with `paragraphs` paragraphs of distinct text (a chunk or more each).
fn page(rel: &str, paragraphs: usize) -> Parsed {
    let mut text = format!("# {rel}\n\n");
    for i in 0..paragraphs {
        text.push_str(&format!("Paragraph {i} of {rel} speaks of marble halls, number {i}.\n\n"));
    }
    let opts = cairn_ingest::ParseOptions::default();
    let page = cairn_ingest::parse_page(SOURCE, std::path::Path::new(rel), text.as_bytes(), &opts).unwrap();
    Parsed::Page { page: Box::new(page), mtime_ms: 1 }
}

fn committed(k: &EventKind) -> bool {
    matches!(k, EventKind::Committed { .. })
}

#[actix::test]
async fn an_edit_is_committed_within_its_deadline_and_served_at_once() {
    let mut rig = Rig::new("edit", WriterOptions::default()).await;
    rig.ingest(vec![page("hall.md", 1)], vec![], Origin::Edit).await;
    // Below the batch size: nothing is written until the deadline (50 ms) fires.
    assert!(!rig.emitted().iter().any(committed), "an edit below the batch size waits for its deadline");
    let EventKind::Committed { pages, version, .. } = rig.wait_for("the commit", committed).await else {
        unreachable!()
    };
    assert_eq!(pages, 1);
    // The page is in the served sources before anyone hears of the commit.
    assert_eq!(rig.served_slugs(), ["hall"]);
    // A commit holds the writer: the next message is handled once its status is set.
    assert_eq!(rig.writer.send(Commit).await.unwrap().unwrap(), version);
    let st = rig.status.get(SOURCE).unwrap();
    assert_eq!((st.pages, st.version), (1, version));
}

#[actix::test]
async fn a_batch_that_reaches_its_size_is_committed_before_the_ingest_is_answered() {
    let opts =
        WriterOptions { commit_chunks: 4, commit_after: Duration::from_secs(3600), ..Default::default() };
    let mut rig = Rig::new("batch", opts).await;
    rig.ingest(vec![page("a.md", 1)], vec![], Origin::Scan).await;
    assert!(!rig.emitted().iter().any(committed), "one page of four chunks' room waits");
    let big: Vec<Parsed> = (0..4).map(|i| page(&format!("p{i}.md"), 1)).collect();
    rig.ingest(big, vec![], Origin::Scan).await;
    // The ingest's reply came after its commit: no deadline was waited for.
    let events = rig.emitted();
    let commits: Vec<&EventKind> = events.iter().filter(|k| committed(k)).collect();
    assert_eq!(commits.len(), 1, "{events:?}");
    assert!(matches!(commits[0], EventKind::Committed { pages: 5, .. }), "{commits:?}");
    assert_eq!(rig.served_slugs(), ["a", "p0", "p1", "p2", "p3"]);
}

#[actix::test]
async fn vectors_follow_the_pages_and_a_waiter_is_answered_once_every_chunk_has_one() {
    let mut rig = Rig::new("vectors", WriterOptions::default()).await;
    rig.ingest(vec![page("hall.md", 3), page("yard.md", 2)], vec![], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    rig.writer.send(AwaitVectors).await.unwrap().unwrap();
    let host = rig.served.now();
    let index = host.live(SOURCE).unwrap().resident.read();
    assert!(index.chunk_count() >= 2, "a page is a chunk at least");
    assert_eq!(index.unembedded_count(), 0, "AwaitVectors answered before every vector was in");
    drop(index);
    let embedded: Vec<String> = rig
        .emitted()
        .into_iter()
        .filter_map(|k| match k {
            EventKind::PageEmbedded { slug, .. } => Some(slug),
            _ => None,
        })
        .collect();
    assert!(embedded.contains(&"hall".to_string()) && embedded.contains(&"yard".to_string()), "{embedded:?}");
    assert_eq!(rig.status.get(SOURCE).unwrap().vectors_pending, 0);
}

#[actix::test]
async fn a_removal_leaves_the_served_sources_and_a_bad_page_is_reported_while_the_others_go_in() {
    let mut rig = Rig::new("removal", WriterOptions::default()).await;
    rig.ingest(vec![page("hall.md", 1), page("yard.md", 1)], vec![], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    let bad = Parsed::Failed {
        rel: PathBuf::from("bad.md"),
        error: cairn_ingest::Error::UnclosedFrontmatter { path: PathBuf::from("bad.md") },
    };
    rig.ingest(vec![bad, page("tower.md", 1)], vec!["yard.md"], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    assert_eq!(rig.served_slugs(), ["hall", "tower"]);
    let st = rig.status.get(SOURCE).unwrap();
    assert_eq!(st.pages, 2);
    assert_eq!(st.failures.len(), 1, "{:?}", st.failures);
    assert!(st.failures[0].path.ends_with("bad.md"), "{:?}", st.failures);
    rig.wait_for("the removal", |k| matches!(k, EventKind::PageRemoved { slug, .. } if slug == "yard")).await;
}

#[actix::test]
async fn a_retired_writer_refuses_to_commit() {
    let rig = Rig::new("retired", WriterOptions::default()).await;
    rig.ingest(vec![page("hall.md", 1)], vec![], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    rig.writer.send(AwaitVectors).await.unwrap().unwrap();
    let before = rig.writer.send(Commit).await.unwrap().unwrap();
    rig.writer.send(Retire).await.unwrap();
    rig.ingest(vec![page("yard.md", 1)], vec![], Origin::Edit).await;
    let refused = rig.writer.send(Commit).await.unwrap();
    assert!(matches!(refused, Err(PipelineError::Refused { why: Refusal::Retired, .. })), "{refused:?}");
    assert_eq!(rig.served_slugs(), ["hall"]);
    assert_eq!(rig.status.get(SOURCE).unwrap().version, before, "nothing was written after the retirement");
}

/// A writer lease on an in-memory object store, taken by this process, and the journal written
/// under it; the store, for another process to take the lease over.
async fn publishing() -> (crate::replication::journal::Publishing, crate::replication::lease::LeaseStore) {
    use crate::replication::lease::{LeaseStore, Taken, Watching};
    let remote = crate::replication::remote::Remote::in_memory();
    let store = LeaseStore::of(&remote);
    let me = crate::replication::lease::me("test", std::path::Path::new("/state/a/cairn.lock"));
    let Taken::Mine(lease) = store.try_take(&me, &mut Watching::default()).await.unwrap() else {
        panic!("a free lease is taken")
    };
    let journal = crate::replication::journal::Journal::start(remote, lease.clone()).await;
    (crate::replication::journal::Publishing { lease, journal }, store)
}

#[actix::test]
async fn a_commit_while_the_lease_is_lapsed_is_kept_and_lands_after_the_renewal() {
    let (publishing, _) = publishing().await;
    let lease = publishing.lease.clone();
    let mut rig =
        Rig::new("lapsed", WriterOptions { publishing: Some(publishing), ..Default::default() }).await;
    lease.lapse();
    rig.ingest(vec![page("hall.md", 1)], vec![], Origin::Edit).await;
    let refused = rig.writer.send(Commit).await.unwrap();
    assert!(matches!(refused, Err(PipelineError::Refused { why: Refusal::LeaseLapsed, .. })), "{refused:?}");
    rig.wait_for("the held commit", |k| matches!(k, EventKind::CommitHeld { .. })).await;
    assert!(rig.served_slugs().is_empty(), "nothing is written under a lapsed lease");
    // The store answers again: the renewal lands, and the page the writer kept goes in.
    assert!(lease.renew().await.unwrap());
    rig.wait_for("the commit after the renewal", committed).await;
    assert_eq!(rig.served_slugs(), ["hall"]);
}

/// A vector commit refused while the lease is lapsed keeps its vectors: said once
/// (`commit_held`), no failure (the source is not reloaded, nothing is embedded again), and
/// committed once the lease is renewed.
#[actix::test]
async fn vectors_refused_while_the_lease_is_lapsed_are_kept_and_committed_after_the_renewal() {
    let (publishing, _) = publishing().await;
    let lease = publishing.lease.clone();
    let mut rig =
        Rig::new("lapsed-vectors", WriterOptions { publishing: Some(publishing), ..Default::default() })
            .await;
    // The pages go in; their vectors wait behind the held bulk work until the lease lapsed.
    let hold = rig.model.hold_bulk();
    rig.ingest(vec![page("hall.md", 2)], vec![], Origin::Scan).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    let chunks = rig.status.get(SOURCE).unwrap().vectors_pending;
    assert!(chunks > 0, "the page's chunks wait for vectors");
    lease.lapse();
    drop(hold);
    let no_failure = |k: &EventKind| {
        assert!(
            !matches!(
                k,
                EventKind::StageFailed { .. }
                    | EventKind::SourceStarted { .. }
                    | EventKind::HandedOver { .. }
            ),
            "a lapsed lease is no failure: {k:?}"
        );
    };
    rig.wait_for("the vectors' commit held", |k| {
        no_failure(k);
        matches!(k, EventKind::CommitHeld { .. })
    })
    .await;
    assert_eq!(rig.status.get(SOURCE).unwrap().vectors_pending, chunks, "nothing was written meanwhile");
    assert!(lease.renew().await.unwrap());
    let landed = rig
        .wait_for("the vectors committed after the renewal", |k| {
            no_failure(k);
            matches!(k, EventKind::Committed { chunks_embedded, .. } if *chunks_embedded > 0)
        })
        .await;
    let EventKind::Committed { chunks_embedded, chunks_pending, .. } = landed else { unreachable!() };
    assert_eq!((chunks_embedded, chunks_pending), (chunks, 0), "every vector kept, in one commit");
    assert_eq!(rig.status.get(SOURCE).unwrap().state, SourceState::Watching);
}

/// A lease taken over is a handover, not a failure: said once (`handed_over`), the source
/// `stopped` (not `retrying`, which a watch's exit reports as a failure), and later commits are
/// refused the same way.
#[actix::test]
async fn a_writer_whose_lease_was_taken_over_commits_nothing_more() {
    use crate::replication::lease::{Taken, Watching};
    let (publishing, store) = publishing().await;
    let lease = publishing.lease.clone();
    let mut rig =
        Rig::new("taken", WriterOptions { publishing: Some(publishing), ..Default::default() }).await;
    rig.ingest(vec![page("hall.md", 1)], vec![], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    rig.writer.send(AwaitVectors).await.unwrap().unwrap();
    let before = rig.writer.send(Commit).await.unwrap().unwrap();
    // Not renewed for its TTL, and another machine's standby took it over.
    lease.lapse();
    let (etag, _) = store.look().await.unwrap();
    let other = crate::replication::lease::me("test", std::path::Path::new("/state/b/cairn.lock"));
    assert!(matches!(
        store.try_take(&other, &mut Watching::stood_still(&etag)).await.unwrap(),
        Taken::Mine(_)
    ));
    assert!(!lease.renew().await.unwrap(), "its renewal finds the lease gone");
    rig.ingest(vec![page("yard.md", 1)], vec![], Origin::Edit).await;
    let refused = rig.writer.send(Commit).await.unwrap();
    assert!(matches!(refused, Err(PipelineError::Refused { why: Refusal::LeaseLost, .. })), "{refused:?}");
    rig.wait_for("the handover", |k| matches!(k, EventKind::HandedOver { .. })).await;
    let state = rig.status.get(SOURCE).unwrap();
    assert_eq!(state.state, SourceState::Stopped, "{:?}", state.error);
    assert!(state.error.as_deref().is_some_and(|e| e.contains("writer lease")), "{:?}", state.error);
    rig.ingest(vec![page("gate.md", 1)], vec![], Origin::Edit).await;
    let again = rig.writer.send(Commit).await.unwrap();
    assert!(matches!(again, Err(PipelineError::Refused { why: Refusal::LeaseLost, .. })), "{again:?}");
    // A failure would have said `retrying` before the refusal was answered.
    assert_eq!(rig.status.get(SOURCE).unwrap().state, SourceState::Stopped);
    assert_eq!(rig.served_slugs(), ["hall"]);
    assert_eq!(rig.status.get(SOURCE).unwrap().version, before);
}

/// Upkeep runs in the writer's own sequence: due after its commits (a run while vectors are
/// still being written only brings the key indexes up to date), and once the writer is idle a
/// run compacts. Waits for that run's event (the idle run comes `KEEP_VERSIONS` after the last
/// commit: about 12 s).
#[actix::test]
async fn once_the_writer_is_idle_its_upkeep_compacts_and_keeps_what_is_served() {
    let mut rig = Rig::new("upkeep", WriterOptions::default()).await;
    for i in 0..super::upkeep::UPKEEP_EVERY {
        rig.ingest(vec![page(&format!("p{i}.md"), 1)], vec![], Origin::Edit).await;
        rig.writer.send(Commit).await.unwrap().unwrap();
        rig.writer.send(AwaitVectors).await.unwrap().unwrap();
    }
    let compacting = |k: &EventKind| matches!(k, EventKind::Optimized { compacted: true, .. });
    rig.wait_for("a compacting upkeep", compacting).await;
    // The writer still answers, and what it serves is what was committed.
    rig.ingest(vec![page("after.md", 1)], vec![], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    assert_eq!(rig.served_slugs().len(), super::upkeep::UPKEEP_EVERY + 1);
}

/// During a backfill (bulk vectors still to come) every vector commit rewrites chunk rows, so
/// the upkeep that falls due only brings the key indexes up to date; once the vectors are in,
/// the next commit's upkeep compacts.
#[actix::test]
async fn upkeep_during_a_backfill_does_not_compact_and_the_commit_after_it_does() {
    let mut rig = Rig::new("backfill", WriterOptions::default()).await;
    let hold = rig.model.hold_bulk();
    for i in 0..super::upkeep::UPKEEP_EVERY {
        rig.ingest(vec![page(&format!("p{i}.md"), 1)], vec![], Origin::Scan).await;
        rig.writer.send(Commit).await.unwrap().unwrap();
    }
    let optimized = |k: &EventKind| matches!(k, EventKind::Optimized { .. });
    let first = rig.wait_for("the upkeep that fell due", optimized).await;
    assert!(matches!(first, EventKind::Optimized { compacted: false, .. }), "{first:?}");
    assert!(rig.status.get(SOURCE).unwrap().vectors_pending > 0, "the backfill was still held");
    drop(hold);
    rig.writer.send(AwaitVectors).await.unwrap().unwrap();
    rig.ingest(vec![page("after.md", 1)], vec![], Origin::Edit).await;
    rig.writer.send(Commit).await.unwrap().unwrap();
    let compacting = |k: &EventKind| matches!(k, EventKind::Optimized { compacted: true, .. });
    rig.wait_for("a compacting upkeep after the backfill", compacting).await;
    assert_eq!(rig.served_slugs().len(), super::upkeep::UPKEEP_EVERY + 1);
    let host = rig.served.now();
    assert_eq!(host.live(SOURCE).unwrap().resident.read().unembedded_count(), 0);
}

//! The read verbs, answered once for every role that reads: the owner (from the sources its
//! writers keep current) and a reader (from the tables it follows). A role says what it has
//! ([`Reads`]: its sources now, each one's freshness, who it is, where answers are journaled);
//! what a read verb does with it, including every answer's post-processing, is written here
//! only.

use super::{Diagnose, Duplicates, Get, Handle, Links, Search};
use crate::Result;
use crate::core::event::QueryAnswered;
use crate::engine::host::{PageWithBody, QueryHost};
use crate::engine::query::FreshnessOf;
use cairn_query::{SearchResponse, ServedBy};
use futures::future::BoxFuture;
use std::collections::BTreeSet;
use std::sync::Arc;

/// What a role that answers the read verbs has.
pub trait Reads: Send + Sync {
    /// The sources it answers from, as they are now.
    fn host(&self) -> Arc<QueryHost>;

    /// This process, as the one that answered.
    fn served_by(&self) -> ServedBy;

    /// Where searches run (their worker threads embed the query and score in memory, so
    /// concurrent searches do not queue behind each other).
    fn runtime(&self) -> tokio::runtime::Handle {
        tokio::runtime::Handle::current()
    }

    /// A search is asked: a reader looks at its writer's feed first when its last look is old.
    fn asked(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    /// Each source's freshness, taken before a search reads the sources, and the sources whose
    /// folder cannot be read here (their results are not checked against it).
    fn freshness_before(&self) -> (BTreeSet<String>, FreshnessOf<'_>);

    /// What this role adds to every answer (after the freshness notes).
    fn note(&self, _answer: &mut SearchResponse) {}

    /// Journal an answer.
    fn answered(&self, answered: QueryAnswered) -> BoxFuture<'_, ()>;
}

/// A task's end: cancelled (the owner's runtime stopped under it: the process is stopping), or
/// failed (a panic), as the errors callers know.
fn joined<T>(r: std::result::Result<T, tokio::task::JoinError>) -> Result<T> {
    r.map_err(|e| {
        if e.is_cancelled() {
            crate::Error::Stopped
        } else {
            cairn_query::QueryError::Internal(e.to_string()).into()
        }
    })
}

impl<R: Reads> Handle<Search> for R {
    fn handle(&self, v: Search) -> BoxFuture<'_, Result<SearchResponse>> {
        Box::pin(async move {
            self.asked().await;
            let (away, freshness) = self.freshness_before();
            let host = self.host();
            let mut resp =
                joined(self.runtime().spawn(async move { host.search(&v.request, &away).await }).await)??;
            cairn_index::fault::point_async("reads.searched").await;
            resp.served_by = Some(self.served_by());
            crate::engine::query::apply_freshness(&mut resp, freshness);
            self.note(&mut resp);
            self.answered(crate::engine::query::telemetry(&resp)).await;
            Ok(resp)
        })
    }
}

impl<R: Reads> Handle<Get> for R {
    fn handle(&self, v: Get) -> BoxFuture<'_, Result<Option<PageWithBody>>> {
        Box::pin(async move {
            let page = self.host().get(&v.source, &v.slug).await?;
            Ok(page.map(|p| PageWithBody { served_by: Some(self.served_by()), ..p }))
        })
    }
}

impl<R: Reads> Handle<Diagnose> for R {
    fn handle(&self, v: Diagnose) -> BoxFuture<'_, Result<cairn_query::Diagnosis>> {
        Box::pin(async move {
            let host = self.host();
            let task =
                self.runtime().spawn(async move { host.diagnose(&v.request, &v.source, &v.slug).await });
            let d = joined(task.await)??;
            Ok(cairn_query::Diagnosis { served_by: Some(self.served_by()), ..d })
        })
    }
}

impl<R: Reads> Handle<Links> for R {
    fn handle(&self, v: Links) -> BoxFuture<'_, Result<Option<cairn_query::links::Links>>> {
        Box::pin(async move { self.host().links(&v.source, &v.slug) })
    }
}

impl<R: Reads> Handle<Duplicates> for R {
    fn handle(&self, v: Duplicates) -> BoxFuture<'_, Result<Vec<cairn_query::duplicates::DuplicateGroup>>> {
        // In the caller's task: a caller that goes (its client left) stops the job.
        Box::pin(crate::engine::host::duplicates_job(self.host(), v.threshold))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::host::{HostCell, LiveSource};
    use crate::engine::query::Freshness;
    use std::sync::Mutex;

    /// A role with one empty source (`notes`, in LanceDB's memory store) that says what it was
    /// asked, in order.
    struct Role {
        cell: HostCell,
        freshness: Freshness,
        said: Mutex<Vec<String>>,
        answered: Mutex<Vec<QueryAnswered>>,
    }

    impl Role {
        async fn new(freshness: Freshness) -> Self {
            let db = cairn_index::Database::open("memory://reads").await.unwrap();
            let manifest = cairn_index::Manifest::current("test", 8);
            let store = db.open_source("notes", &manifest).await.unwrap();
            let (resident, _) = cairn_index::Resident::load(&store, usize::MAX).await.unwrap();
            let mut host = QueryHost::new(None, None);
            host.add(LiveSource { store, resident, root: None });
            Self { cell: HostCell::new(host), freshness, said: Mutex::default(), answered: Mutex::default() }
        }

        fn say(&self, what: &str) {
            self.said.lock().unwrap().push(what.into());
        }
    }

    impl Reads for Role {
        fn host(&self) -> Arc<QueryHost> {
            self.say("host");
            self.cell.now()
        }

        fn served_by(&self) -> ServedBy {
            ServedBy::here(cairn_query::Role::Reader)
        }

        fn asked(&self) -> BoxFuture<'_, ()> {
            Box::pin(async { self.say("asked") })
        }

        fn freshness_before(&self) -> (BTreeSet<String>, FreshnessOf<'_>) {
            self.say("freshness");
            let f = self.freshness.clone();
            (BTreeSet::new(), Box::new(move |_| (f.clone(), None)))
        }

        fn note(&self, answer: &mut SearchResponse) {
            answer.notes.push("from the test role".into());
        }

        fn answered(&self, answered: QueryAnswered) -> BoxFuture<'_, ()> {
            Box::pin(async { self.answered.lock().unwrap().push(answered) })
        }
    }

    fn search(query: &str) -> Search {
        Search {
            request: cairn_query::SearchRequest {
                mode: cairn_query::Mode::Fast,
                ..cairn_query::SearchRequest::new(query)
            },
        }
    }

    #[tokio::test]
    async fn a_search_is_answered_with_who_answered_each_sources_freshness_and_its_event() {
        let role = Role::new(Freshness::Watched { pending: 3, lag_ms: 40 }).await;
        let resp = Handle::<Search>::handle(&role, search("marble hall")).await.unwrap();
        // The freshness is taken before the sources are read: a commit landing during the
        // search only makes the answer newer than it says.
        assert_eq!(*role.said.lock().unwrap(), ["asked", "freshness", "host"]);
        assert_eq!(resp.served_by.as_ref().map(|s| s.role), Some(cairn_query::Role::Reader));
        assert_eq!(resp.sources.len(), 1);
        assert_eq!((resp.sources[0].pending, resp.sources[0].lag_ms), (Some(3), Some(40)));
        assert_eq!(resp.pending_changes, Some(3));
        assert!(
            resp.notes.iter().any(|n| n.starts_with("3 change(s) are not searchable yet")),
            "{:?}",
            resp.notes
        );
        assert_eq!(resp.notes.last().map(String::as_str), Some("from the test role"));
        let answered = role.answered.lock().unwrap();
        assert_eq!(answered.len(), 1);
        assert_eq!((answered[0].query.as_str(), answered[0].pending_changes), ("marble hall", Some(3)));
    }

    #[tokio::test]
    async fn a_source_nothing_watches_leaves_the_pending_count_unknown() {
        let role = Role::new(Freshness::Unwatched).await;
        let resp = Handle::<Search>::handle(&role, search("marble hall")).await.unwrap();
        assert_eq!(resp.pending_changes, None);
        assert!(
            resp.notes.iter().any(|n| n.contains("no running `cairn watch` keeps source(s) notes current"))
        );
    }

    #[tokio::test]
    async fn the_other_read_verbs_say_who_answered_and_name_unknown_pages_and_sources() {
        let role = Role::new(Freshness::Followed).await;
        let page = Handle::<Get>::handle(&role, Get { source: "notes".into(), slug: "hall".into() }).await;
        assert!(matches!(page, Ok(None)), "{page:?}");
        let other = Handle::<Get>::handle(&role, Get { source: "sea".into(), slug: "hall".into() }).await;
        assert!(other.unwrap_err().to_string().contains("notes"), "an unknown source names the known ones");
        let links =
            Handle::<Links>::handle(&role, Links { source: "notes".into(), slug: "hall".into() }).await;
        assert!(matches!(links, Ok(None)), "{links:?}");
        let groups = Handle::<Duplicates>::handle(&role, Duplicates { threshold: 0.9 }).await.unwrap();
        assert!(groups.is_empty());
        let bad = Handle::<Duplicates>::handle(&role, Duplicates { threshold: 1.5 }).await;
        assert!(bad.is_err(), "a threshold that is no cosine is refused");
    }
}

//! The one API: every verb a cairn process answers, declared once.
//!
//! A verb is a struct of its arguments with its reply type ([`Verb`]). The list in [`verbs!`]
//! below is the only place that names them all; from it come the socket's [`Request`] (one
//! variant per verb, tagged `verb` on the wire), each verb's time limit, how it reaches each
//! role, and the server's dispatch. Three roles answer it:
//!
//! - the **owner** ([`OwnerApi`]: the process that holds the database's lock and runs the
//!   pipeline) serves every verb;
//! - a **client** ([`crate::roles::client::Client`]) sends any verb over the owner's socket: one generic
//!   implementation, nothing per verb;
//! - a **reader** ([`ReaderApi`]: no owner runs, this process reads the tables) serves the `read`
//!   verbs; the `write` ones are refused with what to start.
//!
//! The verbs that read the index (`search`, `get`, `diagnose`, `links`, `duplicates`) are
//! answered once, in [`reads`], for both the owner and a reader: each says only what it has
//! ([`reads::Reads`]). So a new verb is two places: its line in the list (with its struct), and
//! its [`Handle`] implementation (in [`reads`] when it reads the index; else the owner's, plus the
//! reader's when it is a `read` verb).
//! [`crate::Cairn::ask`] calls any verb on whichever role this process has now.

pub mod ipc;
pub mod owner;
mod reader;
pub mod reads;

pub use owner::OwnerApi;
pub use reader::ReaderApi;

use crate::api::ipc::Hello;
use crate::core::config::SourceConfig;
use crate::engine::host::PageWithBody;
use crate::{Error, ReconcileReport, Result};
use cairn_query::SearchRequest;
use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// One verb: its arguments (the struct), its reply, and how long the owner may take.
pub trait Verb: Serialize + DeserializeOwned + Send + 'static {
    type Reply: Serialize + DeserializeOwned + Send + 'static;
    /// The name on the wire (`search`, `add_source`…).
    const NAME: &'static str;
    /// How long the owner works on it before answering `timeout`.
    const LIMIT: Limit;
    /// Whether it changes what the database holds or does (`add_source`, `reindex`…), or waits
    /// on its writer (`flush`): a server open to reads only refuses it.
    const CHANGES: bool;
    fn into_request(self) -> Request;
    /// This verb, answered by the owner.
    fn by_owner(self, owner: &OwnerApi) -> BoxFuture<'_, Result<Self::Reply>>;
    /// This verb, answered by a reader (a `write` verb is refused).
    fn by_reader(self, reader: &ReaderApi) -> BoxFuture<'_, Result<Self::Reply>>;
}

/// A role's answer to verb `V`.
pub trait Handle<V: Verb> {
    fn handle(&self, verb: V) -> BoxFuture<'_, Result<V::Reply>>;
}

/// How long a verb may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Secs(u64),
    /// A first index of a large vault, or its backfill, takes as long as it takes.
    None,
}

impl Limit {
    pub fn duration(self) -> Duration {
        match self {
            Limit::Secs(s) => Duration::from_secs(s),
            Limit::None => Duration::MAX,
        }
    }
}

/// Declares the verbs: `read|write looks|changes Struct => Reply, "name", limit;` (`read`: a
/// reader answers it too; `changes`: see [`Verb::CHANGES`]). Makes [`Request`], each verb's
/// [`Verb`] impl and [`dispatch`].
macro_rules! verbs {
    ($($kind:ident $effect:ident $verb:ident => $reply:ty, $name:literal, $limit:expr;)*) => {
        /// A request on the owner's socket: `hello` first, then verbs; `subscribe` turns the
        /// connection into a stream of events.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        #[serde(tag = "verb", rename_all = "snake_case")]
        pub enum Request {
            Hello(Hello),
            /// From now on, every event, one frame each.
            Subscribe,
            $($verb($verb),)*
        }

        impl Request {
            pub fn verb(&self) -> &'static str {
                match self {
                    Request::Hello(_) => "hello",
                    Request::Subscribe => "subscribe",
                    $(Request::$verb(_) => $name,)*
                }
            }

            /// How long the owner works on it before answering `timeout`.
            pub fn time_limit(&self) -> Duration {
                match self {
                    Request::Hello(_) => Duration::from_secs(10),
                    Request::Subscribe => Duration::MAX,
                    $(Request::$verb(_) => <$verb as Verb>::LIMIT.duration(),)*
                }
            }

            /// See [`Verb::CHANGES`] (`hello` and `subscribe` change nothing).
            pub fn changes(&self) -> bool {
                match self {
                    Request::Hello(_) | Request::Subscribe => false,
                    $(Request::$verb(_) => <$verb as Verb>::CHANGES,)*
                }
            }
        }

        $(
            impl Verb for $verb {
                type Reply = $reply;
                const NAME: &'static str = $name;
                const LIMIT: Limit = $limit;
                const CHANGES: bool = verbs!(@changes $effect);
                fn into_request(self) -> Request {
                    Request::$verb(self)
                }
                fn by_owner(self, owner: &OwnerApi) -> BoxFuture<'_, Result<Self::Reply>> {
                    Handle::<$verb>::handle(owner, self)
                }
                fn by_reader(self, reader: &ReaderApi) -> BoxFuture<'_, Result<Self::Reply>> {
                    verbs!(@reader $kind $verb, reader, self)
                }
            }
        )*

        /// A request (after `hello`; not `subscribe`) answered by this process's role, as the
        /// JSON of its reply.
        pub async fn dispatch(answerer: &Answerer, request: Request) -> Result<serde_json::Value> {
            fn json<T: Serialize>(r: Result<T>) -> Result<serde_json::Value> {
                r.and_then(|v| serde_json::to_value(v).map_err(|e| Error::Pipeline(e.to_string())))
            }
            match request {
                $(Request::$verb(v) => json(answerer.ask(v).await),)*
                Request::Hello(_) | Request::Subscribe => Err(Error::Config(format!(
                    "`{}` is not a verb here: it is said once, when the connection opens",
                    request.verb()
                ))),
            }
        }
    };
    (@changes looks) => { false };
    (@changes changes) => { true };
    (@reader read $verb:ident, $reader:ident, $v:ident) => {
        Handle::<$verb>::handle($reader, $v)
    };
    (@reader write $verb:ident, $reader:ident, $v:ident) => {
        Box::pin(async move { Err($reader.needs_owner(<$verb as Verb>::NAME)) })
    };
}

verbs! {
    read looks Search => cairn_query::SearchResponse, "search", Limit::Secs(60);
    read looks Get => Option<PageWithBody>, "get", Limit::Secs(60);
    read looks Diagnose => cairn_query::Diagnosis, "diagnose", Limit::Secs(300);
    read looks Links => Option<cairn_query::links::Links>, "links", Limit::Secs(60);
    read looks Duplicates => Vec<cairn_query::duplicates::DuplicateGroup>, "duplicates", Limit::Secs(600);
    read looks Status => crate::Status, "status", Limit::Secs(10);
    read looks Stats => crate::ops::stats::Stats, "stats", Limit::Secs(60);
    read changes Flush => (), "flush", Limit::None;
    read changes AddSource => (), "add_source", Limit::Secs(300);
    write changes RemoveSource => (), "remove_source", Limit::Secs(300);
    write changes Reindex => (), "reindex", Limit::None;
    write changes Reconcile => ReconcileReport, "reconcile", Limit::None;
}

/// What answers in this process: the owner's pipeline (it writes the database), or a reader of
/// its tables (another process, maybe on another machine, writes it).
#[derive(Debug, Clone)]
pub enum Answerer {
    Owner(std::sync::Arc<OwnerApi>),
    Reader(std::sync::Arc<ReaderApi>),
}

impl Answerer {
    /// Any verb, answered by this role.
    pub async fn ask<V: Verb>(&self, verb: V) -> Result<V::Reply> {
        match self {
            Answerer::Owner(o) => verb.by_owner(o).await,
            Answerer::Reader(r) => verb.by_reader(r).await,
        }
    }
}

/// Answer a query.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Search {
    pub request: SearchRequest,
}

/// A page with its body (`None`: the source has no such slug).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Get {
    pub source: String,
    pub slug: String,
}

/// Where one page stands at every layer of the query engine for a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Diagnose {
    pub request: SearchRequest,
    pub source: String,
    pub slug: String,
}

/// A page's links both ways (`None`: no such page).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Links {
    pub source: String,
    pub slug: String,
}

/// Groups of pages that look like one subject (shared names, identical content, chunks at
/// cosine ≥ `threshold`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Duplicates {
    pub threshold: f32,
}

/// Who answers, and every source's state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Status {}

/// What the index holds and how its answers scored, from the event log (`days`: only the last
/// N days, with the drift against the N before).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stats {
    pub days: Option<u32>,
}

/// Everything seen so far searchable (`vectors`: by meaning too); with a `token`, a `flushed`
/// event carrying it follows the work.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Flush {
    pub vectors: bool,
    #[serde(default)]
    pub token: Option<u64>,
}

/// Watch another source from now on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AddSource {
    pub source: SourceConfig,
}

/// Stop watching a source; `forget` also drops its tables and state.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoveSource {
    pub id: String,
    pub forget: bool,
}

/// Drop a source's tables and index its folder again.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reindex {
    pub id: String,
}

/// Compare a source's folder with its index now; `allow_removals` says yes to the removals the
/// guard would hold.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reconcile {
    pub id: String,
    pub allow_removals: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_names_every_verb_and_keeps_its_arguments_beside_the_tag() {
        let r = Get { source: "sea".into(), slug: "big".into() }.into_request();
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json, serde_json::json!({"verb": "get", "source": "sea", "slug": "big"}));
        let back: Request = serde_json::from_value(json).unwrap();
        assert_eq!(back.verb(), "get");
        let status: Request = serde_json::from_str(r#"{"verb":"status"}"#).unwrap();
        assert_eq!((status.verb(), status.time_limit()), ("status", Duration::from_secs(10)));
        let flush: Request = serde_json::from_str(r#"{"verb":"flush","vectors":true}"#).unwrap();
        assert_eq!(flush.time_limit(), Duration::MAX);
        assert!(serde_json::from_str::<Request>(r#"{"verb":"format_disk"}"#).is_err());
    }
}

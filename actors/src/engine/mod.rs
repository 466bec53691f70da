//! The pipeline of a process, one file (or folder) per actor: the watchers, the parsing pool
//! (`workers`), one writer per source, the embedding scheduler, the query actor and the host it
//! answers from, the follower that keeps a reader's host current; and the system that starts
//! and supervises them.

pub mod embedding;
pub mod follow;
pub mod host;
pub mod query;
pub(crate) mod system;
pub mod watcher;
pub mod workers;
pub mod writer;

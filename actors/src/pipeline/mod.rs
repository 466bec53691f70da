//! The pipeline of a process that writes: watchers, the parsing pool, one writer per source, the
//! embedding scheduler, the query actor, and the system that starts and supervises them.

pub mod embedding;
pub mod error;
pub mod folders;
pub mod poison;
pub mod query;
pub(crate) mod retry;
pub(crate) mod system;
pub mod watcher;
pub mod workers;
pub mod writer;

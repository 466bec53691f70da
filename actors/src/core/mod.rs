//! What every layer stands on: events and the event log, status, configuration, the crate's
//! errors, a database's local paths, the folder book, retries and the poison book. Imports
//! nothing above it (see `scripts/layers`).

pub mod config;
pub mod error;
pub mod event;
pub mod folders;
pub mod history;
pub mod log;
pub mod paths;
pub mod poison;
pub(crate) mod retry;
pub mod status;

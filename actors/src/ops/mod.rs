//! What operators read: the event log, `cairn stats`, a page's ingest history, replays of
//! recorded scenarios, and `cairn doctor`.

pub mod doctor;
pub mod history;
pub mod log;
pub mod replay;
pub mod stats;

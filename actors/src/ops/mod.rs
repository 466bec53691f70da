//! What operators ask for: `cairn stats`, replays of recorded scenarios, and `cairn doctor`.

pub mod doctor;
pub mod replay;
pub mod stats;

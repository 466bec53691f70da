//! One database across machines: the object store's client, the writer lease, the change feed
//! (the journal), machines' events shipped to the store, and this machine's identity.

pub mod journal;
pub mod lease;
pub mod machine;
pub mod readers;
pub mod remote;
pub mod shipping;

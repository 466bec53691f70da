//! Who serves a database: the owner lock and its socket on one machine, the writer lease and
//! the journal across machines, the clients and the readers that follow a writer.

pub mod client;
pub mod follow;
pub mod ipc;
pub mod journal;
pub mod lease;
pub(crate) mod local;
pub mod machine;
pub mod owner;
pub mod paths;
pub mod remote;
pub mod server;
pub mod shipping;

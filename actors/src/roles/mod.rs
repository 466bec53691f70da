//! Who serves a database on this machine: the owner lock, the owner's socket server, the
//! clients of it, and a process's role over its life (`local`: owner, reader, standby, writer).

pub mod client;
pub(crate) mod local;
pub mod lock;
pub mod server;

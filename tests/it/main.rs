//! Integration tests of the `cairn` package, in one binary (each test binary that links LanceDB
//! is large; see shared/OFFLINE.md).

mod backfill;
mod check;
mod cli;
mod crash;
mod doctor;
mod faults;
mod handover;
mod hostile;
mod index;
mod machines;
mod mcp;
mod notes;
mod owner;
mod replay;
mod s3;
mod scan;
mod support;
mod vanished;
mod watch;
mod weed;

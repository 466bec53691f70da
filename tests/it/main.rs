//! Integration tests of the `cairn` package, in one binary (each test binary that links LanceDB
//! is large; see shared/OFFLINE.md).

mod backfill;
mod browser;
mod check;
mod cli;
mod crash;
mod doctor;
mod faults;
mod flaky;
mod handover;
mod history;
mod hostile;
#[path = "../shared/http.rs"]
mod http;
mod index;
mod machines;
mod mcp;
mod notes;
mod outage;
mod owner;
mod replay;
mod s3;
mod scan;
mod serve;
mod support;
mod vanished;
mod watch;
#[path = "../shared/webdriver.rs"]
mod webdriver;
mod weed;

//! Integration tests of the `cairn` package, in one binary (each test binary that links LanceDB
//! is large; see shared/OFFLINE.md).

mod index;
mod scan;

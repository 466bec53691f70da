//! `cairn-actors`: the actix pipeline (watcher, parser, embedder, writer, query actor, event log).

//! `cairn-query`: the retrieval layers as small, separately testable functions (gather, fusion, max-pool, title and alias layers, evidence).

//! Content hashing: hex sha256 (first 16 bytes) over length-delimited parts.

use sha2::{Digest, Sha256};

/// Hex of the first 16 bytes of sha256 over the parts, each prefixed by its length so that
/// `["ab", "c"]` and `["a", "bc"]` differ.
pub fn hex_digest(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

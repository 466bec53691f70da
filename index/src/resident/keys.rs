//! Chunk ids and text hashes, held once and compactly. At a million chunks they were ~4 strings a
//! chunk (each chunk's id and text hash in its slot, and again as the keys of the maps from them
//! to the slot): ~160 MiB of a source's memory for what is 32 bytes of hash a chunk.
//!
//! A [`Key`] holds cairn's 32-hex-digit ids as their 16 bytes (any other string as itself), and a
//! [`SlotsBy`] finds slots by a key the slot itself holds, so the key is not held twice.

use hashbrown::HashTable;
use std::hash::{BuildHasher, Hash, RandomState};

/// A chunk id or text hash: 32 lowercase hex digits (what cairn writes: 16 bytes of sha256) as
/// those 16 bytes, any other string as itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Key {
    Hex([u8; 16]),
    Text(Box<str>),
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

impl Key {
    pub fn new(s: &str) -> Self {
        let b = s.as_bytes();
        if b.len() == 32 {
            let mut out = [0u8; 16];
            let all = out.iter_mut().zip(b.chunks_exact(2)).all(|(o, pair)| {
                let (Some(hi), Some(lo)) = (hex_digit(pair[0]), hex_digit(pair[1])) else { return false };
                *o = hi << 4 | lo;
                true
            });
            if all {
                return Key::Hex(out);
            }
        }
        Key::Text(s.into())
    }

    /// Bytes held beyond the key itself.
    pub fn heap(&self) -> usize {
        match self {
            Key::Hex(_) => 0,
            Key::Text(t) => t.len(),
        }
    }
}

/// The order of the strings they stand for (for lowercase hex, the order of the bytes).
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        match (self, other) {
            (Key::Hex(a), Key::Hex(b)) => a.cmp(b),
            (Key::Text(a), Key::Text(b)) => a.cmp(b),
            _ => self.to_string().cmp(&other.to_string()),
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Hex(b) => b.iter().try_for_each(|x| write!(f, "{x:02x}")),
            Key::Text(t) => f.write_str(t),
        }
    }
}

/// Slots by a key each of them holds (`key_of(slot)`, given to every call): a hash table of slot
/// numbers alone. Every slot in it must answer `key_of` (a slot leaves before it is emptied).
#[derive(Debug, Default)]
pub(crate) struct SlotsBy {
    table: HashTable<u32>,
    hasher: RandomState,
}

impl SlotsBy {
    pub fn with_capacity(n: usize) -> Self {
        Self { table: HashTable::with_capacity(n), hasher: RandomState::new() }
    }

    fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn get<'a>(&self, key: &Key, key_of: impl Fn(u32) -> &'a Key) -> Option<u32> {
        self.table.find(self.hash(key), |s| key_of(*s) == key).copied()
    }

    /// `slot` for its key, in place of a slot that had the same key.
    pub fn insert<'a>(&mut self, slot: u32, key_of: impl Fn(u32) -> &'a Key) {
        let key = key_of(slot);
        let hasher = &self.hasher;
        match self.table.entry(hasher.hash_one(key), |s| key_of(*s) == key, |s| hasher.hash_one(key_of(*s))) {
            hashbrown::hash_table::Entry::Occupied(mut e) => *e.get_mut() = slot,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(slot);
            }
        }
    }

    /// Take `slot` out, if it is the one held for its key.
    pub fn remove<'a>(&mut self, slot: u32, key_of: impl Fn(u32) -> &'a Key) {
        if let Ok(e) = self.table.find_entry(self.hash(key_of(slot)), |s| *s == slot) {
            e.remove();
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn bytes(&self) -> usize {
        self.table.allocation_size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_ids_are_held_as_bytes_and_read_back_as_written() {
        let id = "0123456789abcdef0123456789abcdef";
        assert!(matches!(Key::new(id), Key::Hex(_)));
        assert_eq!(Key::new(id).to_string(), id);
        for other in ["a#0", "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcdeg", ""] {
            assert_eq!(Key::new(other), Key::Text(other.into()), "{other}");
            assert_eq!(Key::new(other).to_string(), other);
        }
    }

    #[test]
    fn keys_order_as_the_strings_they_stand_for() {
        let mut strings = vec![
            "ffffffffffffffffffffffffffffffff".to_string(),
            "0a000000000000000000000000000000".to_string(),
            "09ffffffffffffffffffffffffffffff".to_string(),
            "a#0".to_string(),
            "0b".to_string(),
        ];
        let mut keys: Vec<Key> = strings.iter().map(|s| Key::new(s)).collect();
        strings.sort();
        keys.sort();
        assert_eq!(keys.iter().map(Key::to_string).collect::<Vec<_>>(), strings);
    }

    #[test]
    fn slots_are_found_by_the_key_they_hold() {
        let keys: Vec<Key> = ["a", "b", "a"].into_iter().map(Key::new).collect();
        let key_of = |s: u32| &keys[s as usize];
        let mut by = SlotsBy::default();
        by.insert(0, key_of);
        by.insert(1, key_of);
        assert_eq!(by.get(&Key::new("a"), key_of), Some(0));
        by.insert(2, key_of);
        assert_eq!((by.get(&Key::new("a"), key_of), by.len()), (Some(2), 2), "replaced");
        by.remove(0, key_of);
        assert_eq!(by.get(&Key::new("a"), key_of), Some(2), "only the slot held leaves");
        by.remove(2, key_of);
        assert_eq!((by.get(&Key::new("a"), key_of), by.get(&Key::new("b"), key_of)), (None, Some(1)));
        // Growth rehashes every slot through `key_of`.
        let many: Vec<Key> = (0..1000).map(|i| Key::new(&format!("{i:032x}"))).collect();
        let mut by = SlotsBy::with_capacity(2);
        (0..1000).for_each(|s| by.insert(s, |s| &many[s as usize]));
        assert!((0..1000).all(|s| by.get(&many[s as usize], |s| &many[s as usize]) == Some(s)));
    }
}

//! The keyword index's terms: every term's name once, in one string, found through a hash table
//! of term ids. A map from boxed names cost a term a heap allocation and a 24-byte entry (with
//! the table's slack, ~55 bytes: 8 MiB of GCIDE's 157,013 chunk terms; BENCHMARKS.md, "The
//! keyword engine"); here a term costs its name's bytes, 4 bytes for where the name ends, and a
//! 4-byte slot of the table.

use hashbrown::HashTable;
use std::hash::{BuildHasher, RandomState};

/// Term names by id (ids are dense, from 0, in the order terms first came).
#[derive(Debug, Default)]
pub(crate) struct Vocabulary {
    text: String,
    /// Per term id, where its name ends in `text` (it starts where the one before it ends).
    ends: Vec<u32>,
    table: HashTable<u32>,
    hasher: RandomState,
}

/// Term `id`'s name, from the parts (apart from the table, which is being changed meanwhile).
fn name_of<'a>(text: &'a str, ends: &[u32], id: u32) -> &'a str {
    let id = id as usize;
    let start = if id == 0 { 0 } else { ends[id - 1] as usize };
    &text[start..ends[id] as usize]
}

impl Vocabulary {
    pub fn with_capacity(terms: usize) -> Self {
        Self { table: HashTable::with_capacity(terms), ends: Vec::with_capacity(terms), ..Self::default() }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn name(&self, id: u32) -> &str {
        name_of(&self.text, &self.ends, id)
    }

    pub fn get(&self, name: &str) -> Option<u32> {
        self.table.find(self.hasher.hash_one(name), |&id| self.name(id) == name).copied()
    }

    /// The id of `name`: its own if it has one, else the next (`len()` before the call).
    pub fn id(&mut self, name: &str) -> u32 {
        let hash = self.hasher.hash_one(name);
        if let Some(&id) = self.table.find(hash, |&id| self.name(id) == name) {
            return id;
        }
        let id = self.ends.len() as u32;
        self.text.push_str(name);
        // Names past 4 GiB in all would need wider ends; a vocabulary is megabytes.
        self.ends.push(u32::try_from(self.text.len()).expect("term names under 4 GiB in all"));
        let (text, ends, hasher) = (&self.text, &self.ends, &self.hasher);
        self.table.insert_unique(hash, id, |&i| hasher.hash_one(name_of(text, ends, i)));
        id
    }

    /// Keep the terms `keep` says yes to (by id), renumbered in their order.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut kept = Self::with_capacity(self.len());
        for id in (0..self.len() as u32).filter(|id| keep(*id)) {
            kept.id(self.name(id));
        }
        kept.shrink();
        *self = kept;
    }

    /// Give back the room the parts grew into.
    pub fn shrink(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
        let (text, ends, hasher) = (&self.text, &self.ends, &self.hasher);
        self.table.shrink_to_fit(|&i| hasher.hash_one(name_of(text, ends, i)));
    }

    /// Bytes held: the names, their ends, and the table (a 4-byte slot and a control byte each).
    pub fn bytes(&self) -> usize {
        self.text.capacity() + self.ends.capacity() * 4 + self.table.capacity() * 5
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_back_by_id_and_ids_by_name_through_a_renumbering() {
        let mut v = Vocabulary::default();
        let words = ["tide", "moon", "", "tide", "cañon", "sun"];
        let ids: Vec<u32> = words.iter().map(|w| v.id(w)).collect();
        assert_eq!(ids, [0, 1, 2, 0, 3, 4], "a name seen before keeps its id");
        assert_eq!(v.len(), 5);
        assert_eq!((v.name(3), v.get("cañon"), v.get("comet")), ("cañon", Some(3), None));
        v.retain(|id| id != 1 && id != 2);
        assert_eq!(v.len(), 3);
        let names: Vec<&str> = (0..3).map(|id| v.name(id)).collect();
        assert_eq!(names, ["tide", "cañon", "sun"], "renumbered in their order");
        assert_eq!((v.get("sun"), v.get("moon")), (Some(2), None));
        assert_eq!(v.id("moon"), 3, "a term dropped comes back as a new one");
    }
}

//! A small LRU of query vectors.

use std::collections::HashMap;
use std::sync::Mutex;

/// A small LRU of query vectors: repeated queries cost nothing.
#[derive(Debug)]
pub struct QueryCache {
    capacity: usize,
    inner: Mutex<LruState>,
}

/// A logical clock and, per query, when it was last used and its vector.
#[derive(Debug, Default)]
struct LruState {
    clock: u64,
    entries: HashMap<String, (u64, Vec<f32>)>,
}

impl QueryCache {
    pub fn new(capacity: usize) -> Self {
        Self { capacity, inner: Mutex::new(LruState::default()) }
    }

    pub fn get(&self, key: &str) -> Option<Vec<f32>> {
        let mut state = self.inner.lock().expect("cache lock");
        state.clock += 1;
        let now = state.clock;
        let entry = state.entries.get_mut(key)?;
        entry.0 = now;
        Some(entry.1.clone())
    }

    pub fn put(&self, key: &str, value: Vec<f32>) {
        if self.capacity == 0 {
            return;
        }
        let mut state = self.inner.lock().expect("cache lock");
        state.clock += 1;
        let now = state.clock;
        let map = &mut state.entries;
        if map.len() >= self.capacity && !map.contains_key(key) {
            // O(capacity) eviction of the least recently used: capacities are a few hundred.
            if let Some(oldest) = map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone()) {
                map.remove(&oldest);
            }
        }
        map.insert(key.to_string(), (now, value));
    }

    pub fn len(&self) -> usize {
        self.inner.lock().expect("cache lock").entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

//! Where a resident index past its limit keeps the chunk text and exact vectors memory no longer
//! holds: its chunk file (see [`super::chunk_file`]), made when first needed, compacted, and
//! dropped (the tables then answer) when it cannot be written.

use super::chunk_file::{self, ChunkFile, NOWHERE};
use super::keys::Key;
use super::slots::{ChunkHome, ResidentIndex, id_of};
use std::collections::HashMap;

impl ResidentIndex {
    /// Keep the chunk file beside the snapshot at `snapshot`, or in a temporary file with no
    /// name when `None` (made when first needed).
    pub fn keep_chunks_beside(&mut self, snapshot: Option<&std::path::Path>) {
        self.chunk_home = match snapshot {
            Some(s) => ChunkHome::Beside(chunk_file::path_beside(s)),
            None => ChunkHome::Unnamed,
        };
    }

    /// Put a chunk's exact vector and text, which memory is about to lose, in the chunk file
    /// (when the index keeps one).
    pub(super) fn keep_stored(&mut self, slot: u32, v: &[f32], text: &str) {
        if self.file.is_none() {
            let path = match std::mem::take(&mut self.chunk_home) {
                ChunkHome::Nowhere => return,
                ChunkHome::Beside(path) => Some(path),
                ChunkHome::Unnamed => None,
            };
            match ChunkFile::create(path.as_deref()) {
                Ok(f) => self.file = Some(f),
                Err(e) => {
                    return tracing::warn!(
                        "the chunk file cannot be made ({e}); chunks are read from the tables"
                    );
                }
            }
        }
        let (Some(file), Some(s)) = (self.file.as_mut(), self.chunks[slot as usize].as_mut()) else { return };
        if s.at != NOWHERE {
            file.forget(s.at);
        }
        match file.append(&s.chunk_id.to_string(), v, text) {
            Ok(at) => s.at = at,
            Err(e) => self.lose_file(e),
        }
    }

    /// Move to `copy`, a compaction's copy of the chunk file: `moved` says
    /// each listed slot's record, where it was and where its copy is (`None`: no whole record
    /// was there). A slot whose record changed since it was listed points to its old file's
    /// record still, which is copied now. The new file's length; `None` when this index has no
    /// chunk file any more, or lost it here (a write failed: what it held is read from the
    /// tables).
    pub(super) fn move_to(
        &mut self,
        mut copy: ChunkFile,
        moved: Vec<(u32, u64, Option<u64>)>,
    ) -> Option<u64> {
        let old = self.file.take()?;
        let (from, _, from_len) = match old.source() {
            Ok(s) => s,
            Err(e) => {
                self.lose_file(e);
                return None;
            }
        };
        let mut moved = moved.into_iter().peekable();
        let mut renumber = || -> std::io::Result<()> {
            for (i, s) in self.chunks.iter_mut().enumerate() {
                while moved.next_if(|(slot, ..)| (*slot as usize) < i).is_some() {}
                let Some(s) = s.as_mut().filter(|s| s.at != NOWHERE) else { continue };
                s.at = match moved.next_if(|(slot, ..)| *slot as usize == i) {
                    Some((_, at, to)) if at == s.at => to.unwrap_or(NOWHERE),
                    // Appended after the list was made: its record is copied now.
                    _ => copy.copy_record(&from, s.at, from_len)?.unwrap_or(NOWHERE),
                };
            }
            copy.take_place_of()
        };
        match renumber() {
            Ok(()) => {
                let len = copy.len();
                self.file = Some(copy);
                Some(len)
            }
            Err(e) => {
                self.lose_file(e);
                None
            }
        }
    }

    /// A chunk file that cannot be written is dropped: what it held is read from the tables.
    pub(super) fn lose_file(&mut self, e: std::io::Error) {
        tracing::warn!(
            "the chunk file cannot be written ({e}); chunk text and vectors are read from the tables"
        );
        self.file = None;
    }

    /// The exact vector of the chunk at `slot`, if the chunk file holds it.
    pub(super) fn filed_vector(&self, slot: usize) -> Option<Vec<f32>> {
        let s = self.chunks.get(slot)?.as_ref().filter(|s| s.at != NOWHERE)?;
        self.file.as_ref()?.read(s.at, &s.chunk_id.to_string()).map(|(_, v)| v)
    }

    /// The exact vectors (`dim` values) of chunks (by id) that the chunk file holds, without
    /// their text; the others are left out (for the caller to read from the tables).
    pub fn filed_vectors(&self, ids: &[&str], dim: usize) -> HashMap<String, Vec<f32>> {
        self.filed(ids, |file, at, id| file.read_vector(at, id, dim))
    }

    /// The texts of chunks (by id) that the chunk file holds, without their vectors; the others
    /// are left out.
    pub fn filed_texts(&self, ids: &[&str]) -> HashMap<String, String> {
        self.filed(ids, ChunkFile::read_text)
    }

    /// The text and exact vector of chunks (by id) that the chunk file holds; the others are
    /// left out (for the caller to read from the tables).
    pub fn stored(&self, ids: &[&str]) -> HashMap<String, (String, Option<Vec<f32>>)> {
        self.filed(ids, |file, at, id| file.read(at, id).map(|(text, v)| (text, Some(v))))
    }

    /// `read` of each chunk (by id) whose record the chunk file holds, at its place; a chunk it
    /// does not hold, or whose read finds nothing, is left out.
    fn filed<T>(
        &self,
        ids: &[&str],
        read: impl Fn(&ChunkFile, u64, &str) -> Option<T>,
    ) -> HashMap<String, T> {
        let Some(file) = &self.file else { return HashMap::new() };
        ids.iter()
            .filter_map(|id| {
                let s = self.chunks[self.by_id.get(&Key::new(id), id_of(&self.chunks))? as usize].as_ref()?;
                let got = (s.at != NOWHERE).then(|| read(file, s.at, id))??;
                Some((id.to_string(), got))
            })
            .collect()
    }
}

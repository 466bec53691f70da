//! Past its limit a source holds neither its chunks' text nor their f32 vectors in memory (int8
//! codes only), yet an answer needs both: the text of the chunks it returns, and the exact
//! vectors of the int8 candidates it re-scores. Read from LanceDB by id, those were two or three
//! reads in sequence per query, 13–16 ms each at a million chunks (up to 53 ms at p99), and what
//! they allocated stayed with the process (BENCHMARKS.md).
//!
//! The chunk file holds them beside the source's snapshot instead: one record per chunk, appended
//! when the chunk gets its vector (or when the source passes its limit, for every chunk it holds),
//! read back by position. A read is a few microseconds from the page cache, and the page cache is
//! not the process's memory.
//!
//! Like the snapshot it is a cache; the tables stay the record. A chunk slot names its record's
//! place; a replaced chunk's record stays behind, unread and counted as dead, until the file is
//! compacted: once the dead bytes outweigh the live ones, the writer's upkeep copies the live
//! records to a new file (no lock held while it copies; see `Resident::compact_chunk_file`),
//! renames it into place and saves a snapshot that names it. The snapshot names the file (a random id in its header) and its length when it was
//! saved (flushed to disk before the snapshot), and a restore refuses a file that is not that one
//! or is shorter, and cuts what was appended after. A record also carries a hash of its chunk's id,
//! so a read that lands anywhere else finds nothing, and the caller reads the tables instead.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The file's first bytes: a name and the layout's version, then the file's id (8 bytes).
const MAGIC: &[u8; 8] = b"cairnCF1";
const HEAD: u64 = 16;

/// A record's head: the hash of its chunk id, its vector's length, its text's length.
const RECORD_HEAD: usize = 16;

/// Where a slot's record is: nowhere yet.
pub(crate) const NOWHERE: u64 = u64::MAX;

/// Dead bytes below which a file is never compacted, however much of it is dead (a copy costs a
/// pass over the live records; under this it is not worth one).
pub(crate) const COMPACT_FROM: u64 = 1 << 20;

/// The chunk file beside the snapshot at `snapshot`.
pub(crate) fn path_beside(snapshot: &Path) -> PathBuf {
    snapshot.with_extension("chunks")
}

/// FNV-1a of a chunk id: stable across builds, which a std hasher is not promised to be.
fn id_hash(chunk_id: &str) -> u64 {
    chunk_id.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// An open chunk file: appends go through a buffer that [`ChunkFile::flush`] empties (the index
/// flushes at the end of every change, so that reads, by position, see every record).
#[derive(Debug)]
pub(crate) struct ChunkFile {
    out: BufWriter<File>,
    id: u64,
    len: u64,
    /// Bytes of records no slot names any more.
    dead: u64,
    /// Where it is (`None`: a temporary file with no name).
    path: Option<PathBuf>,
}

impl ChunkFile {
    /// A new, empty file at `path` (replacing what was there), with a fresh id; `None`: a
    /// temporary file with no name, gone with the process (for a process with no snapshot).
    pub fn create(path: Option<&Path>) -> io::Result<Self> {
        let file = match path {
            Some(path) => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?
            }
            None => tempfile::tempfile()?,
        };
        let since_epoch =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        // Never 0: a snapshot names "no chunk file" by 0.
        let id = (since_epoch.as_nanos() as u64 ^ (u64::from(std::process::id()) << 40)) | 1;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(MAGIC)?;
        out.write_all(&id.to_le_bytes())?;
        out.flush()?;
        Ok(Self { out, id, len: HEAD, dead: 0, path: path.map(Path::to_path_buf) })
    }

    /// The file at `path`, if it is the one with id `id` and holds at least `len` bytes (`dead`
    /// of them dead); what follows `len` (appended after the snapshot that names it) is cut.
    pub fn reopen(path: &Path, id: u64, len: u64, dead: u64) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut head = [0u8; HEAD as usize];
        file.read_exact_at(&mut head, 0)?;
        let found = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
        if &head[..8] != MAGIC
            || found != id
            || file.metadata()?.len() < len
            || len < HEAD
            || dead > len - HEAD
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not the chunk file the snapshot was saved with", path.display()),
            ));
        }
        file.set_len(len)?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        std::io::Seek::seek(&mut out, io::SeekFrom::Start(len))?;
        Ok(Self { out, id, len, dead, path: Some(path.to_path_buf()) })
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    /// Bytes written (flushed or not).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Bytes of records no slot names any more.
    pub fn dead(&self) -> u64 {
        self.dead
    }

    /// The record at `at` is named by no slot any more.
    pub fn forget(&mut self, at: u64) {
        if let Some(n) = self.record_len(at) {
            self.dead = (self.dead + n).min(self.len - HEAD);
        }
    }

    /// Whether a copy of the live records is due: more dead bytes than live ones, and at least
    /// [`COMPACT_FROM`] of them.
    pub fn compaction_due(&self) -> bool {
        self.dead >= COMPACT_FROM && self.dead > self.len - HEAD - self.dead
    }

    /// The length of the record at `at` (head and body), from its head.
    fn record_len(&self, at: u64) -> Option<u64> {
        let (_, dim, text_len) = self.head(at)?;
        let n = RECORD_HEAD as u64 + dim * 4 + text_len;
        (at + n <= self.len).then_some(n)
    }

    /// The head of the record at `at`: its chunk id's hash, its vector's length, its text's
    /// length.
    fn head(&self, at: u64) -> Option<(u64, u64, u64)> {
        let mut head = [0u8; RECORD_HEAD];
        self.out.get_ref().read_exact_at(&mut head, at).ok()?;
        Some(parse_head(&head))
    }

    /// The vector's and text's lengths of chunk `chunk_id`'s record at `at`; `None` when the
    /// record there is not that chunk's, or runs past the file's end.
    fn head_of(&self, at: u64, chunk_id: &str) -> Option<(u64, u64)> {
        let (hash, dim, text_len) = self.head(at)?;
        let whole = at + RECORD_HEAD as u64 + dim * 4 + text_len <= self.len;
        (hash == id_hash(chunk_id) && whole).then_some((dim, text_len))
    }

    /// What a compaction reads from while the index goes on using this file: the file itself
    /// (positional reads leave its writer alone), where it is, and its length now.
    pub fn source(&self) -> io::Result<(File, Option<PathBuf>, u64)> {
        Ok((self.out.get_ref().try_clone()?, self.path.clone(), self.len))
    }

    /// A new file beside `path` (or nameless), to copy live records into, renamed over `path`
    /// by [`ChunkFile::take_place_of`].
    pub fn create_beside(path: Option<&Path>) -> io::Result<Self> {
        let mut file = Self::create(path.map(|p| p.with_extension("chunks-new")).as_deref())?;
        file.path = path.map(Path::to_path_buf);
        Ok(file)
    }

    /// Copy the record at `at` of `from` (a file of this layout) to the end of this one; where it
    /// starts here. `None` when no whole record is there.
    pub fn copy_record(&mut self, from: &File, at: u64, from_len: u64) -> io::Result<Option<u64>> {
        let mut head = [0u8; RECORD_HEAD];
        from.read_exact_at(&mut head, at)?;
        let dim = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")) as u64;
        let text_len = u32::from_le_bytes(head[12..].try_into().expect("4 bytes")) as u64;
        let n = RECORD_HEAD as u64 + dim * 4 + text_len;
        if at + n > from_len {
            return Ok(None);
        }
        let mut record = vec![0u8; n as usize];
        from.read_exact_at(&mut record, at)?;
        let to = self.len;
        self.out.write_all(&record)?;
        self.len += n;
        Ok(Some(to))
    }

    /// Put this file (made by [`ChunkFile::create_beside`], flushed) in the place of the one it
    /// was copied from: on disk first, then renamed over it.
    pub fn take_place_of(&mut self) -> io::Result<()> {
        self.out.flush()?;
        self.sync()?;
        if let Some(path) = &self.path {
            std::fs::rename(path.with_extension("chunks-new"), path)?;
        }
        Ok(())
    }

    /// Append a chunk's record; returns where it starts.
    pub fn append(&mut self, chunk_id: &str, vector: &[f32], text: &str) -> io::Result<u64> {
        let at = self.len;
        let mut head = [0u8; RECORD_HEAD];
        head[..8].copy_from_slice(&id_hash(chunk_id).to_le_bytes());
        head[8..12].copy_from_slice(&(vector.len() as u32).to_le_bytes());
        head[12..].copy_from_slice(&(text.len() as u32).to_le_bytes());
        self.out.write_all(&head)?;
        for x in vector {
            self.out.write_all(&x.to_le_bytes())?;
        }
        crate::fault::point_after("chunk_file.append", || drop(self.out.flush()));
        self.out.write_all(text.as_bytes())?;
        self.len += (RECORD_HEAD + vector.len() * 4 + text.len()) as u64;
        Ok(at)
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Put what was flushed on disk (before a snapshot that names this length is written).
    pub fn sync(&self) -> io::Result<()> {
        self.out.get_ref().sync_data()
    }

    /// The vector of chunk `chunk_id` from its record at `at`, in one read of its head and its
    /// `dim` values (not its text: a re-score reads many vectors and keeps few texts); `None`
    /// when the record there is not that chunk's, its vector is not `dim` long, or it cannot be
    /// read.
    pub fn read_vector(&self, at: u64, chunk_id: &str, dim: usize) -> Option<Vec<f32>> {
        let mut buf = vec![0u8; RECORD_HEAD + dim * 4];
        if at + buf.len() as u64 > self.len {
            return None;
        }
        self.out.get_ref().read_exact_at(&mut buf, at).ok()?;
        let (head, v) = buf.split_at(RECORD_HEAD);
        let (hash, len, _) = parse_head(head);
        (hash == id_hash(chunk_id) && len == dim as u64).then(|| floats(v))
    }

    /// The text of chunk `chunk_id` from its record at `at` (its head, then its text; not its
    /// vector); `None` as [`ChunkFile::read`].
    pub fn read_text(&self, at: u64, chunk_id: &str) -> Option<String> {
        let (dim, text_len) = self.head_of(at, chunk_id)?;
        let mut text = vec![0u8; text_len as usize];
        self.out.get_ref().read_exact_at(&mut text, at + RECORD_HEAD as u64 + dim * 4).ok()?;
        String::from_utf8(text).ok()
    }

    /// The text and vector of chunk `chunk_id` from its record at `at`; `None` when the record
    /// there is not that chunk's (or cannot be read).
    pub fn read(&self, at: u64, chunk_id: &str) -> Option<(String, Vec<f32>)> {
        let (dim, text_len) = self.head_of(at, chunk_id)?;
        let mut buf = vec![0u8; (dim * 4 + text_len) as usize];
        self.out.get_ref().read_exact_at(&mut buf, at + RECORD_HEAD as u64).ok()?;
        let (v, text) = buf.split_at(dim as usize * 4);
        Some((String::from_utf8(text.to_vec()).ok()?, floats(v)))
    }
}

/// A record head's fields (its [`RECORD_HEAD`] bytes): the hash of its chunk id, its vector's
/// length, its text's length.
fn parse_head(head: &[u8]) -> (u64, u64, u64) {
    let u32_at = |i: usize| u64::from(u32::from_le_bytes(head[i..i + 4].try_into().expect("4 bytes")));
    (u64::from_le_bytes(head[..8].try_into().expect("8 bytes")), u32_at(8), u32_at(12))
}

/// A vector's little-endian bytes as its values.
fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_vector_and_its_text_read_apart_are_what_it_holds() {
        let mut f = ChunkFile::create(None).unwrap();
        let a = f.append("a#0", &[0.6, 0.8], "alpha text").unwrap();
        let b = f.append("b#0", &[1.0, 0.0, 0.0], "").unwrap();
        f.flush().unwrap();
        assert_eq!(f.read_vector(a, "a#0", 2), Some(vec![0.6, 0.8]));
        assert_eq!(f.read_text(a, "a#0").as_deref(), Some("alpha text"));
        assert_eq!(
            (f.read_vector(b, "b#0", 3), f.read_text(b, "b#0").as_deref()),
            (Some(vec![1.0, 0.0, 0.0]), Some(""))
        );
        // Another chunk's record, or a vector of another length, is not read as this one.
        assert_eq!((f.read_vector(a, "b#0", 2), f.read_text(a, "b#0")), (None, None));
        assert_eq!(f.read_vector(a, "a#0", 3), None);
        assert_eq!(f.read_vector(b, "b#0", 4), None, "past the file's end");
    }

    #[test]
    fn records_read_back_by_place_and_a_reopen_keeps_only_what_its_snapshot_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.chunks");
        let mut f = ChunkFile::create(Some(&path)).unwrap();
        let a = f.append("a#0", &[0.6, 0.8], "alpha text").unwrap();
        let b = f.append("b#0", &[1.0, 0.0], "βeta").unwrap();
        f.flush().unwrap();
        f.sync().unwrap();
        assert_eq!(f.read(a, "a#0"), Some(("alpha text".to_string(), vec![0.6, 0.8])));
        assert_eq!(f.read(b, "b#0"), Some(("βeta".to_string(), vec![1.0, 0.0])));
        // Another chunk's place, or no record's place, reads as nothing.
        assert_eq!(f.read(a, "b#0"), None);
        assert_eq!(f.read(a + 3, "a#0"), None);
        assert_eq!(f.read(f.len(), "a#0"), None);

        let (id, saved) = (f.id(), f.len());
        let c = f.append("c#0", &[0.0, 1.0], "after the snapshot").unwrap();
        f.flush().unwrap();
        drop(f);
        assert!(ChunkFile::reopen(&path, id ^ 2, saved, 0).is_err(), "another file's id");
        assert!(ChunkFile::reopen(&path, id, saved + 10_000, 0).is_err(), "shorter than named");
        let mut f = ChunkFile::reopen(&path, id, saved, 0).unwrap();
        assert_eq!(f.read(b, "b#0").map(|(t, _)| t), Some("βeta".to_string()));
        assert_eq!(f.read(c, "c#0"), None, "what followed the snapshot is cut");
        let d = f.append("d#0", &[0.5, 0.5], "").unwrap();
        f.flush().unwrap();
        assert_eq!(d, c);
        assert_eq!(f.read(d, "d#0"), Some((String::new(), vec![0.5, 0.5])));
        assert!(ChunkFile::reopen(&dir.path().join("missing.chunks"), id, saved, 0).is_err());
        let mut unnamed = ChunkFile::create(None).unwrap();
        let at = unnamed.append("e#0", &[1.0], "nameless").unwrap();
        unnamed.flush().unwrap();
        assert_eq!(unnamed.read(at, "e#0"), Some(("nameless".to_string(), vec![1.0])));
    }

    /// A kill tears an append anywhere in its record: whatever length the file was left at past
    /// what the snapshot named, the reopen reads every named record back and appends after them.
    #[test]
    fn a_file_torn_at_any_byte_after_its_snapshot_reopens_as_the_snapshot_named_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.chunks");
        let mut f = ChunkFile::create(Some(&path)).unwrap();
        let a = f.append("a#0", &[0.6, 0.8], "alpha").unwrap();
        f.flush().unwrap();
        f.sync().unwrap();
        let (id, saved) = (f.id(), f.len());
        f.append("b#0", &[1.0, 0.0], "torn here").unwrap();
        f.append("c#0", &[0.0, 1.0], "and here").unwrap();
        f.flush().unwrap();
        drop(f);
        let whole = std::fs::read(&path).unwrap();
        for cut in saved as usize..=whole.len() {
            std::fs::write(&path, &whole[..cut]).unwrap();
            let mut f =
                ChunkFile::reopen(&path, id, saved, 0).unwrap_or_else(|e| panic!("torn at {cut}: {e}"));
            assert_eq!(f.read(a, "a#0"), Some(("alpha".to_string(), vec![0.6, 0.8])), "torn at {cut}");
            assert_eq!(f.read(saved, "b#0"), None, "torn at {cut}: the record after the snapshot is cut");
            let d = f.append("d#0", &[0.5, 0.5], "next").unwrap();
            f.flush().unwrap();
            assert_eq!((d, f.read(d, "d#0")), (saved, Some(("next".to_string(), vec![0.5, 0.5]))), "{cut}");
        }
    }
}

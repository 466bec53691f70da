//! A resident index saved to a local file, so that a large source opens by reading its index
//! back instead of reading every row and tokenising every chunk again (about 160 µs a chunk:
//! minutes at a million chunks).
//!
//! The tables stay the record: a snapshot is a cache of what loading them gives. It is written
//! by the owner's writer when the source is quiet (after its upkeep, and after a full load), to a
//! temporary name and then renamed, and it names the table versions and row counts it was taken
//! at. A load uses it only when the tables are still at exactly those versions and counts (the
//! writer is the tables' only writer, and every commit moves the versions); anything else (a
//! crash after later commits, another build's file, a damaged file) means a full load, which
//! writes a fresh snapshot.
//!
//! Past its limit a source's chunk text and exact vectors are in its chunk file (see
//! [`super::chunk_file`]); the snapshot names that file and its length, and is refused without it.

use super::chunk_file::{self, ChunkFile, NOWHERE};
use super::keys::{Key, SlotsBy};
use super::keyword::Bm25;
use super::learnt::{Lesson, Teaching};
use super::slots::{Page, ResidentIndex, Slot, id_of, text_hash_of};
use super::wire::{In, Out, bad};
use crate::store::{Json, PageRecord};
use crate::vectors::Vectors;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// What a snapshot must match to stand for the tables: their versions (and when the chunks
/// table's was written) and row counts, and the source's vector limit (which decides what the
/// index holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub chunks_version: u64,
    /// When the chunks table's current version was written (µs since the epoch).
    pub chunks_written_us: u64,
    pub pages_version: u64,
    pub chunk_rows: u64,
    pub page_rows: u64,
    pub exact_up_to: u64,
    /// The language the index's words were read in (another one reads them anew).
    pub lang: super::analyzer::Lang,
}

/// A chunk slot's flags: it holds a chunk, the chunk has a vector, its text follows.
const LIVE: u8 = 1;
const EMBEDDED: u8 = 2;
const TEXT: u8 = 4;

/// The file's first bytes: a name and the layout's version (a new layout is a new name; 5: body
/// hashes became SHA-256; 6: the chunk file's dead bytes, for its compaction; 7: the names each
/// page teaches; 8: the keyword index keeps headings apart from bodies; 9: the stamp names the
/// source's language).
const MAGIC: &[u8; 8] = b"cairnRI9";

/// A language's code as a stamp's number (its bytes), and back.
fn lang_number(lang: super::analyzer::Lang) -> u64 {
    let mut bytes = [0u8; 8];
    let code = lang.code().as_bytes();
    bytes[..code.len().min(8)].copy_from_slice(&code[..code.len().min(8)]);
    u64::from_le_bytes(bytes)
}

fn lang_of(n: u64) -> io::Result<super::analyzer::Lang> {
    let bytes = n.to_le_bytes();
    let code =
        std::str::from_utf8(&bytes).map_err(|_| bad("a language that is no code"))?.trim_end_matches('\0');
    super::analyzer::Lang::parse(code).ok_or_else(|| bad("a language cairn does not know"))
}

impl<W: Write> Out<W> {
    pub(super) fn strs(&mut self, v: &[String]) -> io::Result<()> {
        self.len(v.len())?;
        v.iter().try_for_each(|x| self.str(x))
    }
    /// What a page teaches: name, target, and how (0: acronym, 1: link text), each.
    pub(super) fn lessons(&mut self, v: &[Lesson]) -> io::Result<()> {
        self.len(v.len())?;
        v.iter().try_for_each(|l| {
            self.str(&l.name)?;
            self.str(&l.target)?;
            self.bytes(&[match l.how {
                Teaching::Acronym => 0,
                Teaching::LinkText => 1,
            }])
        })
    }
    /// A chunk id or text hash: its 16 bytes, or its text.
    pub(super) fn key(&mut self, k: &Key) -> io::Result<()> {
        match k {
            Key::Hex(b) => self.bytes(&[0]).and_then(|_| self.bytes(b)),
            Key::Text(t) => self.bytes(&[1]).and_then(|_| self.str(t)),
        }
    }
    /// A page record, field by field (score and body count are not kept: a held record's are 0).
    pub(super) fn record(&mut self, r: &PageRecord) -> io::Result<()> {
        [&r.slug, &r.path, &r.title].iter().try_for_each(|t| self.str(t))?;
        self.strs(&r.aliases)?;
        self.strs(&r.tags)?;
        match &r.page_type {
            Some(t) => self.bytes(&[1]).and_then(|_| self.str(t))?,
            None => self.bytes(&[0])?,
        }
        [r.frontmatter.text(), r.links.text(), &r.content_hash, r.problems.text()]
            .iter()
            .try_for_each(|t| self.str(t))?;
        self.u64(r.mtime_ms as u64)?;
        self.u64(r.bytes as u64)?;
        self.bytes(&r.chunk_count.to_le_bytes())
    }
    pub(super) fn stamp(&mut self, s: &Stamp) -> io::Result<()> {
        let lang = lang_number(s.lang);
        [
            s.chunks_version,
            s.chunks_written_us,
            s.pages_version,
            s.chunk_rows,
            s.page_rows,
            s.exact_up_to,
            lang,
        ]
        .iter()
        .try_for_each(|v| self.u64(*v))
    }
}

/// A file read from a place on by positional reads, so that two readers of one open file (the
/// two parts of a snapshot, read at once) keep their own places.
struct At<'a>(&'a File, u64);

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.read_at(buf, self.1)?;
        self.1 += n as u64;
        Ok(n)
    }
}

impl<R: Read> In<R> {
    pub(super) fn i32(&mut self) -> io::Result<i32> {
        Ok(i32::from_le_bytes(self.array()?))
    }
    pub(super) fn strings(&mut self) -> io::Result<Vec<String>> {
        (0..self.count()?).map(|_| self.string()).collect()
    }
    pub(super) fn lessons(&mut self) -> io::Result<Vec<Lesson>> {
        (0..self.count()?)
            .map(|_| {
                let (name, target) = (self.string()?, self.string()?);
                let how = match self.array::<1>()? {
                    [0] => Teaching::Acronym,
                    [1] => Teaching::LinkText,
                    _ => return Err(bad("a lesson of no known kind")),
                };
                Ok(Lesson { name, target, how })
            })
            .collect()
    }
    pub(super) fn key(&mut self) -> io::Result<Key> {
        match self.array::<1>()? {
            [0] => Ok(Key::Hex(self.array()?)),
            _ => Ok(Key::Text(self.string()?.into_boxed_str())),
        }
    }
    pub(super) fn record(&mut self) -> io::Result<PageRecord> {
        let (slug, path, title) = (self.string()?, self.string()?, self.string()?);
        let (aliases, tags) = (self.strings()?, self.strings()?);
        let page_type = match self.array::<1>()? {
            [0] => None,
            _ => Some(self.string()?),
        };
        let (frontmatter, links) = (Json::trusted(self.string()?), Json::trusted(self.string()?));
        let (content_hash, problems) = (self.string()?, Json::trusted(self.string()?));
        Ok(PageRecord {
            slug,
            path,
            title,
            aliases,
            tags,
            page_type,
            frontmatter,
            links,
            content_hash,
            mtime_ms: self.u64()? as i64,
            bytes: self.u64()? as i64,
            chunk_count: self.i32()?,
            problems,
            score: 0.0,
            body_shared_by: 0,
        })
    }
    pub(super) fn stamp(&mut self) -> io::Result<Stamp> {
        Ok(Stamp {
            chunks_version: self.u64()?,
            chunks_written_us: self.u64()?,
            pages_version: self.u64()?,
            chunk_rows: self.u64()?,
            page_rows: self.u64()?,
            exact_up_to: self.u64()?,
            lang: lang_of(self.u64()?)?,
        })
    }
}

/// What the first part of a snapshot holds.
#[derive(Default)]
struct ChunkPart {
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    by_id: SlotsBy,
    by_text_hash: SlotsBy,
    unembedded: usize,
}

impl ResidentIndex {
    /// Write the index, stamped, to `path` (through a temporary file renamed into place).
    ///
    /// Two parts, read back at once ([`ResidentIndex::restore`]): the chunk slots, then the pages,
    /// vectors and keyword indexes; the header says where the second starts.
    pub fn save(&self, path: &Path, stamp: &Stamp) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension("tmp");
        let mut o = Out(BufWriter::with_capacity(1 << 20, File::create(&tmp)?), 0);
        o.bytes(MAGIC)?;
        o.stamp(stamp)?;
        // The chunk file first (it must be on disk before a snapshot that names it), named by its
        // id, length and dead bytes; 0 for none, and then no slot names a place in it.
        let file = self.file.as_ref();
        if let Some(f) = file {
            f.sync()?;
        }
        o.u64(file.map_or(0, ChunkFile::id))?;
        o.u64(file.map_or(0, ChunkFile::len))?;
        o.u64(file.map_or(0, ChunkFile::dead))?;
        let second_at = o.1;
        o.u64(0)?;
        o.len(self.chunks.len())?;
        for s in &self.chunks {
            // A test's death after the N-th slot: the file torn where a kill would tear it.
            crate::fault::point_after("snapshot.save", || drop(o.0.flush()));
            let Some(s) = s else {
                o.bytes(&[0])?;
                continue;
            };
            o.bytes(&[LIVE | (u8::from(s.embedded) * EMBEDDED) | (u8::from(s.text.is_some()) * TEXT)])?;
            o.u64(if file.is_some() { s.at } else { NOWHERE })?;
            o.key(&s.chunk_id)?;
            o.u32(s.page)?;
            [s.ordinal, s.line_start, s.line_end].iter().try_for_each(|v| o.bytes(&v.to_le_bytes()))?;
            o.str(&s.heading_path)?;
            o.key(&s.text_hash)?;
            if let Some(t) = &s.text {
                o.str(t)?;
            }
        }
        o.u32s(&self.free_chunks)?;
        let second = o.1;
        // Pages: record, page slot, chunk slots, names, lessons, body hash.
        o.len(self.page_slots.len())?;
        o.len(self.pages.len())?;
        for p in self.pages.values() {
            o.record(&p.record)?;
            o.u32(p.doc)?;
            o.u32s(&p.chunks)?;
            o.strs(&p.names)?;
            o.lessons(&p.lessons)?;
            o.u64(p.body)?;
        }
        o.u32s(&self.free_pages)?;
        self.vectors.save(&mut |b| o.bytes(b))?;
        self.chunk_text.save(&mut o)?;
        self.page_names.save(&mut o)?;
        let mut file = o.0.into_inner().map_err(|e| e.into_error())?;
        file.seek(SeekFrom::Start(second_at))?;
        file.write_all(&second.to_le_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    }

    /// Remove the snapshot at `path` and its chunk file (a source forgotten), ignoring either
    /// being missing.
    pub fn forget_snapshot(path: &Path) {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(chunk_file::path_beside(path));
    }

    /// The stamp of the snapshot at `path`, if there is a readable one.
    pub fn stamp_of(path: &Path) -> Option<Stamp> {
        let file = File::open(path).ok()?;
        let len = file.metadata().ok()?.len();
        let mut i = In(BufReader::new(file), len);
        (&i.array::<8>().ok()? == MAGIC).then(|| i.stamp().ok())?
    }

    /// The index saved at `path`, if it was saved with `stamp` (`Ok(None)` when the file is
    /// missing or stamped otherwise; an error when it cannot be read back whole). Its two parts
    /// are read on two threads.
    pub fn restore(path: &Path, stamp: &Stamp) -> io::Result<Option<Self>> {
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let len = file.metadata()?.len();
        let mut i = In(BufReader::with_capacity(1 << 20, At(&file, 0)), len);
        if &i.array::<8>()? != MAGIC || i.stamp()? != *stamp {
            return Ok(None);
        }
        let (file_id, file_len, file_dead) = (i.u64()?, i.u64()?, i.u64()?);
        let second = i.u64()?;
        let head = len - i.1;
        if second < head || second > len {
            return Err(bad("a part that starts outside the file"));
        }
        i.1 = second - head;
        let exact_up_to = stamp.exact_up_to as usize;
        let (chunks, rest) = std::thread::scope(|s| {
            let rest = s.spawn(|| {
                let mut j = In(BufReader::with_capacity(1 << 20, At(&file, second)), len - second);
                Self::read_rest(&mut j, exact_up_to)
            });
            (Self::read_chunks(&mut i), rest.join().unwrap_or_else(|_| Err(bad("a reader panicked"))))
        });
        let mut index = rest?;
        index.lang = stamp.lang;
        let chunks = chunks?;
        // Slots the parts name must be there: a damaged file is refused here, not by a panic
        // at the first query that meets the slot.
        let (slots, pages) = (chunks.slots.len(), index.page_slots.len());
        if chunks.slots.iter().flatten().any(|s| s.page as usize >= pages)
            || chunks.free.iter().any(|c| *c as usize >= slots)
            || index.free_pages.iter().any(|p| *p as usize >= pages)
            || index.pages.values().flat_map(|p| &p.chunks).any(|c| *c as usize >= slots)
            || index.chunk_text.doc_len.len() > slots
            || index.vectors.slots() > slots
            || index.page_names.doc_len.len() > pages
        {
            return Err(bad("a part names a slot that is not there"));
        }
        index.chunks = chunks.slots;
        index.free_chunks = chunks.free;
        index.by_id = chunks.by_id;
        index.by_text_hash = chunks.by_text_hash;
        index.unembedded = chunks.unembedded;
        let beside = chunk_file::path_beside(path);
        match file_id {
            0 => index.chunk_home = super::slots::ChunkHome::Beside(beside),
            id => index.file = Some(ChunkFile::reopen(&beside, id, file_len, file_dead)?),
        }
        Ok(Some(index))
    }

    /// The first part: the chunk slots, with the maps to them, to where the second starts.
    fn read_chunks<R: Read>(i: &mut In<R>) -> io::Result<ChunkPart> {
        let n = i.count()?;
        // With room to grow, as the codes have (see `vectors::room`).
        let mut part =
            ChunkPart { slots: Vec::with_capacity(crate::vectors::room(n)), ..ChunkPart::default() };
        for _ in 0..n {
            let [flags] = i.array::<1>()?;
            if flags == 0 {
                part.slots.push(None);
                continue;
            }
            let at = i.u64()?;
            let chunk_id = i.key()?;
            let page = i.u32()?;
            let (ordinal, line_start, line_end) = (i.i32()?, i.i32()?, i.i32()?);
            let (heading_path, text_hash) = (i.string()?.into_boxed_str(), i.key()?);
            let embedded = flags & EMBEDDED != 0;
            let text = if flags & TEXT != 0 { Some(i.string()?.into_boxed_str()) } else { None };
            part.unembedded += usize::from(!embedded);
            part.slots.push(Some(Slot {
                chunk_id,
                page,
                ordinal,
                heading_path,
                text,
                line_start,
                line_end,
                text_hash,
                embedded,
                at,
            }));
        }
        part.free = i.u32s()?;
        if i.1 != 0 {
            return Err(bad("the chunk slots end before their part does"));
        }
        // The maps, sized first (grown a doubling at a time, they would hash every key again at
        // each step), in slot order as a load makes them (a later slot with a text hash wins).
        let held = part.slots.iter().flatten().count();
        let embedded = part.slots.iter().flatten().filter(|s| s.embedded).count();
        (part.by_id, part.by_text_hash) = (SlotsBy::with_capacity(held), SlotsBy::with_capacity(embedded));
        for (slot, s) in part.slots.iter().enumerate() {
            let Some(s) = s else { continue };
            part.by_id.insert(slot as u32, id_of(&part.slots));
            if s.embedded {
                part.by_text_hash.insert(slot as u32, text_hash_of(&part.slots));
            }
        }
        Ok(part)
    }

    /// The second part: pages, vectors and keyword indexes, to the end of the file.
    fn read_rest<R: Read>(i: &mut In<R>, exact_up_to: usize) -> io::Result<Self> {
        let mut index = ResidentIndex::with_exact_vectors_up_to(exact_up_to);
        index.page_slots = vec![None; i.count()?];
        let pages = i.count()?;
        index.pages.reserve(pages);
        for _ in 0..pages {
            let record = i.record()?;
            let doc = i.u32()?;
            let chunks = i.u32s()?;
            let names = i.strings()?;
            let lessons = i.lessons()?;
            let body = i.u64()?;
            let slot =
                index.page_slots.get_mut(doc as usize).ok_or_else(|| bad("a page slot out of range"))?;
            *slot = Some(record.slug.clone());
            *index.bodies.entry(body).or_default() += 1;
            for n in &names {
                index.by_name.entry(n.as_str().into()).or_default().push(doc);
            }
            index.learn(doc, &lessons);
            index.pages.insert(record.slug.clone(), Page { record, doc, chunks, names, lessons, body });
        }
        index.free_pages = i.u32s()?;
        index.vectors = Vectors::restore(exact_up_to, &mut |n, room| i.raw_with_room(n, room))?;
        index.chunk_text = Bm25::load(i)?;
        index.page_names = Bm25::load(i)?;
        let mut rest = [0u8; 1];
        if i.0.read(&mut rest)? != 0 {
            return Err(bad("bytes after the end"));
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resident::keyword::Fields;

    #[test]
    fn a_keyword_index_reads_back_as_it_was_written_and_refuses_a_damaged_one() {
        let mut bm25 = Bm25::default();
        let doc = |words: &str| words.split(' ').map(String::from).collect::<Vec<_>>();
        bm25.insert_fields(0, &doc("tides"), &doc("moon tides"));
        bm25.insert(1, &doc("moon"));
        bm25.insert(2, &doc("sun sun sun"));
        bm25.remove(1);
        let mut bytes = Vec::new();
        let n = bm25.write_to(&mut bytes).unwrap();
        assert_eq!(n, bytes.len() as u64);
        let back = Bm25::read_from(&bytes[..], n).unwrap();
        let q = doc("moon sun tides");
        for fields in [Fields::Apart, Fields::Together] {
            let (mut want, mut got) = (bm25.scores(&q, fields), back.scores(&q, fields));
            want.sort_by_key(|(d, _)| *d);
            got.sort_by_key(|(d, _)| *d);
            assert_eq!(want, got);
        }
        let want = bm25.scores(&q, Fields::Apart);
        assert_eq!(want.len(), 2, "the removed document scores nothing: {want:?}");
        assert!(Bm25::read_from(&bytes[..bytes.len() - 3], n - 3).is_err());
    }
}

//! A source's resident vectors, one slot per chunk slot: exact f32 while the source is small,
//! int8 codes (a quarter of the memory) once it holds more chunks than its limit.
//!
//! Int8 codes are per vector: each unit vector is scaled so its largest component is ±127 and
//! rounded; the scale is kept beside the codes. A query is coded the same way and scored against
//! the codes with integer arithmetic (exact for the codes, so the only error is the rounding:
//! about `√dim · scale / √12` per component pair, ~0.002 of cosine for 384-d unit vectors). Int8
//! scores only choose candidates: the caller re-scores them from the stored f32 vectors
//! (see `Resident::vector`), so answers carry exact cosines either way.

mod codes;
#[cfg(test)]
mod tests;

pub use codes::dot;

use codes::{SCAN_SLOTS_PER_THREAD, Scored, best_codes, code, dot_i8};
use std::borrow::Cow;

/// Chunks a source holds with exact f32 vectors by default: where the two paths cost the same.
/// The f32 scan reads 1,536 bytes a chunk; the int8 scan reads 384 (on two threads) and then
/// re-scores its 4 × K best from the chunk file, a fixed cost. Measured through the release owner
/// with one client (balanced, the query's vector cached; BENCHMARKS.md, "int8 codes past 8,000
/// chunks"): int8 +0.4 ms at 2,116 chunks (Cranfield), -0.5 ms at 14,442 (FOLDOC). A line
/// through the two, ~68 ns a chunk saved against ~0.5 ms fixed, crosses near 7,500 chunks. On
/// GCIDE (149,773 chunks, the bench's clients, the query embedded each time) int8 answers at
/// p50 12.3 ms against 28.8. A source past the limit also holds a quarter of the vector memory
/// and none of its embedded chunks' text.
pub const EXACT_VECTORS_UP_TO: usize = 8_000;

/// Slots to make room for when `n` are needed and the codes must grow: an eighth more, not a
/// doubling (a large source's codes are most of what it holds, and a doubling would leave up to
/// half of them unused). A restore makes this room at once: growing later moves every code, a
/// second or more at a million chunks, and room not yet used is address space, not memory.
pub(crate) fn room(n: usize) -> usize {
    n + n / 8
}

#[derive(Debug)]
enum Data {
    Exact(Vec<f32>),
    /// `dim` codes per slot, and each slot's scale (0 for "no vector").
    Int8 {
        codes: Vec<i8>,
        scales: Vec<f32>,
    },
}

impl Default for Data {
    fn default() -> Self {
        Data::Exact(Vec::new())
    }
}

/// A query ready to score slots: itself (unit length) and, for int8 slots, its codes.
#[derive(Debug)]
pub struct Probe {
    unit: Box<[f32]>,
    codes: Vec<i8>,
    scale: f32,
}

impl Probe {
    pub fn unit(&self) -> &[f32] {
        &self.unit
    }
}

/// The vectors of every chunk slot, one after another (`dim` values each): a scan reads them in
/// one sequential pass, which the memory system streams.
#[derive(Debug)]
pub struct Vectors {
    dim: usize,
    data: Data,
    /// Slots holding a vector; past `exact_up_to` of them, the vectors are coded to int8.
    exact_up_to: usize,
    /// Slots a load about to run will fill ([`Vectors::expect`]): the codes' first room.
    expected_slots: usize,
}

impl Default for Vectors {
    fn default() -> Self {
        Self::new(usize::MAX)
    }
}

impl Vectors {
    pub fn new(exact_up_to: usize) -> Self {
        Self { dim: 0, data: Data::default(), exact_up_to, expected_slots: 0 }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Whether the slots hold the exact vectors (else int8 codes, to be re-scored).
    pub fn exact(&self) -> bool {
        matches!(self.data, Data::Exact(_))
    }

    /// Slots the vectors cover (the slots past them have none).
    pub(crate) fn slots(&self) -> usize {
        match &self.data {
            Data::Exact(v) => v.len().checked_div(self.dim).unwrap_or(0),
            Data::Int8 { scales, .. } => scales.len(),
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match &self.data {
            Data::Exact(v) => v.capacity() * 4,
            Data::Int8 { codes, scales } => codes.capacity() + scales.capacity() * 4,
        }
    }

    /// `v` (unit length, or empty for "no vector yet") into `slot`; `slots` is how many slots
    /// exist (the width is not known before the first vector: slots filled before have none).
    pub fn put(&mut self, slot: usize, v: &[f32], slots: usize) {
        if self.dim == 0 {
            if v.is_empty() {
                return;
            }
            self.dim = v.len();
        }
        let dim = self.dim;
        let len = slots.max(slot + 1);
        // The store refuses vectors of another dimension; one here could only match nothing.
        let v = if v.len() == dim { v } else { &[] };
        match &mut self.data {
            Data::Exact(values) => {
                if values.len() < len * dim {
                    values.resize(len * dim, 0.0);
                }
                let dest = &mut values[slot * dim..(slot + 1) * dim];
                if v.is_empty() { dest.fill(0.0) } else { dest.copy_from_slice(v) }
            }
            Data::Int8 { codes, scales } => {
                if scales.len() < len {
                    // Room made only when it is used up (`reserve_exact` counts from the length:
                    // asked at every step, it would move the codes at every step).
                    if scales.capacity() < len || codes.capacity() < len * dim {
                        let extra = room(len.max(self.expected_slots)) - scales.len();
                        scales.reserve_exact(extra);
                        codes.reserve_exact(extra * dim);
                    }
                    scales.resize(len, 0.0);
                    codes.resize(len * dim, 0);
                }
                let (c, s) = if v.is_empty() { (vec![0; dim], 0.0) } else { code(v) };
                codes[slot * dim..(slot + 1) * dim].copy_from_slice(&c);
                scales[slot] = s;
            }
        }
    }

    /// Start coded when a source about to be loaded holds more than the limit (`held` vectors),
    /// so that its f32 vectors are never all held at once; with room for its `slots` slots from
    /// the first code on: grown an eighth at a time, the codes would be moved some twenty times
    /// over the load, the last moves holding two copies of nearly all of them at once (the peak
    /// of a load).
    pub fn expect(&mut self, held: usize, slots: usize) {
        if held > self.exact_up_to && matches!(&self.data, Data::Exact(v) if v.is_empty()) {
            self.data = Data::Int8 { codes: Vec::new(), scales: Vec::new() };
            self.expected_slots = slots;
        }
    }

    /// Whether [`Vectors::settle`] with `held` codes the vectors now (they are exact and `held`
    /// passes the limit).
    pub fn codes_at(&self, held: usize) -> bool {
        held > self.exact_up_to && self.dim > 0 && self.exact()
    }

    /// Code every slot to int8 once `held` (slots with a vector) passes the limit.
    pub fn settle(&mut self, held: usize) {
        if !self.codes_at(held) {
            return;
        }
        let Data::Exact(values) = &mut self.data else { return };
        let values = std::mem::take(values);
        let mut codes = Vec::with_capacity(values.len());
        let mut scales = Vec::with_capacity(values.len() / self.dim);
        for v in values.chunks_exact(self.dim) {
            let (c, s) = code(v);
            codes.extend(c);
            scales.push(s);
        }
        self.data = Data::Int8 { codes, scales };
    }

    /// A query (any length) made ready to score.
    pub fn probe(&self, query: &[f32]) -> Probe {
        let unit = unit(query.to_vec());
        let (codes, scale) = if self.exact() { (Vec::new(), 0.0) } else { code(&unit) };
        Probe { unit, codes, scale }
    }

    /// The (cosine, or int8 estimate of it) score of `slot` for `p`.
    pub fn score(&self, p: &Probe, slot: usize) -> f32 {
        let dim = self.dim;
        match &self.data {
            Data::Exact(values) => dot(&p.unit, &values[slot * dim..(slot + 1) * dim]),
            Data::Int8 { codes, scales } => {
                dot_i8(&p.codes, &codes[slot * dim..(slot + 1) * dim]) as f32 * p.scale * scales[slot]
            }
        }
    }

    /// The best `k` slots' scores (unordered): among slots holding a vector (`held` says which,
    /// for exact vectors; an int8 slot without one has scale 0) that `keep` allows.
    ///
    /// Past the limit (a million slots) the codes are streamed once and only a running best `k`
    /// is kept: a score per slot in a list, or a look at each slot's chunk to ask whether it
    /// holds a vector, cost more than the dot products.
    pub fn top(
        &self,
        p: &Probe,
        k: usize,
        held: impl Fn(usize) -> bool,
        keep: impl Fn(usize) -> bool + Sync,
    ) -> Vec<(f32, u32)> {
        if self.dim == 0 || k == 0 {
            return Vec::new();
        }
        let dim = self.dim;
        match &self.data {
            Data::Exact(values) => values
                .chunks_exact(dim)
                .enumerate()
                .filter(|(i, _)| held(*i) && keep(*i))
                .map(|(i, v)| (dot(&p.unit, v), i as u32))
                .collect(),
            Data::Int8 { scales, .. } => {
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                self.top_codes(p, k, &keep, (scales.len() / SCAN_SLOTS_PER_THREAD).clamp(1, threads))
            }
        }
    }

    /// [`Vectors::top`] over int8 codes, the slots split into `parts` runs scanned at once.
    fn top_codes(
        &self,
        p: &Probe,
        k: usize,
        keep: &(impl Fn(usize) -> bool + Sync),
        parts: usize,
    ) -> Vec<(f32, u32)> {
        let Data::Int8 { codes, scales } = &self.data else { return Vec::new() };
        let dim = self.dim;
        let per = scales.len().div_ceil(parts.max(1)).max(1);
        let scan = |from: usize| {
            let to = (from + per).min(scales.len());
            best_codes(p, k, dim, &codes[from * dim..to * dim], &scales[from..to], from, keep)
        };
        let mut found = std::thread::scope(|s| {
            let others: Vec<_> =
                (1..parts).map(|t| s.spawn(move || scan((t * per).min(scales.len())))).collect();
            let mut all = scan(0);
            others.into_iter().for_each(|h| all.extend(h.join().expect("a scan thread panicked")));
            all
        });
        // Each run's best k; the best k of all of them.
        found.sort_by_key(|f| std::cmp::Reverse(Scored(f.0, f.1)));
        found.truncate(k);
        found
    }

    /// Write the slots' vectors through `out` (for a snapshot of the resident index).
    pub(crate) fn save(&self, out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>) -> std::io::Result<()> {
        out(&(self.dim as u64).to_le_bytes())?;
        // In pieces: a copy of a million slots' codes at once would be hundreds of MiB.
        const PIECE: usize = 1 << 16;
        let floats = |out: &mut dyn FnMut(&[u8]) -> std::io::Result<()>, v: &[f32]| {
            out(&(v.len() as u64).to_le_bytes())?;
            v.chunks(PIECE)
                .try_for_each(|p| out(&p.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()))
        };
        match &self.data {
            Data::Exact(values) => {
                out(&[0])?;
                floats(out, values)
            }
            Data::Int8 { codes, scales } => {
                out(&[1])?;
                out(&(codes.len() as u64).to_le_bytes())?;
                codes
                    .chunks(PIECE)
                    .try_for_each(|p| out(&p.iter().map(|c| *c as u8).collect::<Vec<u8>>()))?;
                floats(out, scales)
            }
        }
    }

    /// Vectors written by [`Vectors::save`], read through `take` (which gives the next `n` bytes,
    /// in a buffer with room for the second number of them).
    pub(crate) fn restore(
        exact_up_to: usize,
        take: &mut dyn FnMut(usize, usize) -> std::io::Result<Vec<u8>>,
    ) -> std::io::Result<Self> {
        type Take<'a> = &'a mut dyn FnMut(usize, usize) -> std::io::Result<Vec<u8>>;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "vectors out of step");
        let u64_of = |take: Take<'_>| -> std::io::Result<usize> {
            let b = take(8, 8)?;
            Ok(u64::from_le_bytes(b.try_into().map_err(|_| bad())?) as usize)
        };
        // `n` floats, with room for `room` of them.
        let floats = |take: Take<'_>, n: usize, room: usize| {
            take(n.checked_mul(4).ok_or_else(bad)?, 0).map(|b| {
                let mut v = Vec::with_capacity(room.max(n));
                v.extend(b.chunks_exact(4).map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]])));
                v
            })
        };
        let dim = u64_of(take)?;
        let data = match take(1, 1)?[..] {
            [0] => {
                let n = u64_of(take)?;
                Data::Exact(floats(take, n, n)?)
            }
            [1] => {
                let n = u64_of(take)?;
                let slots = n.checked_div(dim).unwrap_or(0);
                // Read into its final place, room included (mapping u8 to i8 reuses the buffer).
                let codes: Vec<i8> = take(n, room(slots) * dim)?.into_iter().map(|b| b as i8).collect();
                let m = u64_of(take)?;
                let scales = floats(take, m, room(m))?;
                if codes.len() != scales.len() * dim {
                    return Err(bad());
                }
                Data::Int8 { codes, scales }
            }
            _ => return Err(bad()),
        };
        Ok(Self { dim, data, exact_up_to, expected_slots: 0 })
    }

    /// The vector of `slot`: exact, or decoded from its int8 codes.
    pub fn get(&self, slot: usize) -> Cow<'_, [f32]> {
        let dim = self.dim;
        match &self.data {
            Data::Exact(values) => Cow::Borrowed(&values[slot * dim..(slot + 1) * dim]),
            Data::Int8 { codes, scales } => Cow::Owned(
                codes[slot * dim..(slot + 1) * dim].iter().map(|c| f32::from(*c) * scales[slot]).collect(),
            ),
        }
    }
}

/// `v` scaled to unit length (a zero vector stays zero).
pub fn unit(mut v: Vec<f32>) -> Box<[f32]> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v.into_boxed_slice()
}

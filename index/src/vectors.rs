//! A source's resident vectors, one slot per chunk slot: exact f32 while the source is small,
//! int8 codes (a quarter of the memory) once it holds more chunks than its limit.
//!
//! Int8 codes are per vector: each unit vector is scaled so its largest component is ±127 and
//! rounded; the scale is kept beside the codes. A query is coded the same way and scored against
//! the codes with integer arithmetic (exact for the codes, so the only error is the rounding:
//! about `√dim · scale / √12` per component pair, ~0.002 of cosine for 384-d unit vectors). Int8
//! scores only choose candidates: the caller re-scores them from the stored f32 vectors
//! (see `Resident::vector`), so answers carry exact cosines either way.

use std::borrow::Cow;

/// Chunks a source holds with exact f32 vectors by default (586 MiB of 384-d vectors). At 110k
/// chunks the int8 path answers 20 ms slower (balanced p50 56 against 36 ms, release: the
/// re-scoring read) for 146 MiB less (BENCHMARKS.md, "Reads that scale"); the f32 scan grows
/// with the source and the read does not, so past a few hundred thousand chunks the codes are
/// both smaller and faster.
pub const EXACT_VECTORS_UP_TO: usize = 400_000;

/// Slots to make room for when `n` are needed and the codes must grow: an eighth more, not a
/// doubling (a large source's codes are most of what it holds, and a doubling would leave up to
/// half of them unused). A restore makes this room at once: growing later moves every code, a
/// second or more at a million chunks, and room not yet used is address space, not memory.
pub(crate) fn room(n: usize) -> usize {
    n + n / 8
}

/// Largest code magnitude.
const CODE_MAX: f32 = 127.0;

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

/// A vector coded to int8 with its scale (`code × scale` ≈ component).
fn code(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        return (vec![0; v.len()], 0.0);
    }
    let scale = max / CODE_MAX;
    (v.iter().map(|x| (x / scale).round().clamp(-CODE_MAX, CODE_MAX) as i8).collect(), scale)
}

/// Dot product in 16 independent lanes: a single running sum is a chain the compiler may not
/// reorder (float addition is not associative), so it would not vectorise.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const LANES: usize = 16;
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: f32 = ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum();
    let mut acc = [0.0f32; LANES];
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Integer dot product of two code vectors: with AVX2 where the CPU has it, else portable. Both
/// give the same integer.
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if let Some(d) = avx2::dot_i8(a, b) {
        return d;
    }
    dot_i8_portable(a, b)
}

/// Integer dot product of two code vectors, in 16 lanes. Each product is taken in i16 (codes are
/// within ±127, so it fits) before it is widened: on the baseline x86-64 instruction set that
/// is what lets the compiler use its 16-bit multiply-add, 1.8× faster than widening each code
/// to i32 first (133 against 82 ms for a million 384-d codes, one core).
fn dot_i8_portable(a: &[i8], b: &[i8]) -> i32 {
    const LANES: usize = 16;
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let tail: i32 =
        ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum();
    let mut acc = [0i32; LANES];
    for (x, y) in ca.zip(cb) {
        for i in 0..LANES {
            acc[i] += i32::from(i16::from(x[i]) * i16::from(y[i]));
        }
    }
    acc.iter().sum::<i32>() + tail
}

/// The int8 dot product in AVX2, three times the portable one's speed on this machine's cores
/// (48 against 150 ms for a million 384-d codes, one core): 32 codes a step, multiplied and
/// summed in pairs to i16 by `vpmaddubsw` (which takes one side unsigned: `|a|` against `b`
/// with `a`'s sign), then in pairs to i32. Exact for codes within ±127: a pair's sum is at most
/// 2 × 127 × 127 = 32,258, inside i16. The baseline x86-64 target has no AVX2, and its compiler
/// does not find this form alone; the CPU is asked once (`is_x86_feature_detected!` caches it).
///
/// The crate's one `unsafe`: a `#[target_feature]` function may only be called where the
/// feature is known to be there, and the loads read through pointers.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm_add_epi32, _mm_cvtsi128_si32, _mm_hadd_epi32, _mm256_add_epi32, _mm256_castsi256_si128,
        _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_set1_epi16, _mm256_setzero_si256, _mm256_sign_epi8,
    };

    /// `None` where the CPU has no AVX2.
    pub(super) fn dot_i8(a: &[i8], b: &[i8]) -> Option<i32> {
        if !std::is_x86_feature_detected!("avx2") {
            return None;
        }
        // SAFETY: the CPU has AVX2, checked just above.
        Some(unsafe { dot(a, b) })
    }

    #[target_feature(enable = "avx2")]
    fn dot(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let whole = n - n % 32;
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_si256();
        let mut i = 0;
        while i < whole {
            // SAFETY: `i + 32 <= whole <= n`, inside both slices; `loadu` needs no alignment.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_si256(a.as_ptr().add(i).cast::<__m256i>()),
                    _mm256_loadu_si256(b.as_ptr().add(i).cast::<__m256i>()),
                )
            };
            let pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, ones));
            i += 32;
        }
        let half = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256::<1>(acc));
        let quarter = _mm_hadd_epi32(half, half);
        let sum = _mm_cvtsi128_si32(_mm_hadd_epi32(quarter, quarter));
        sum + a[whole..n].iter().zip(&b[whole..n]).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum::<i32>()
    }
}

/// Slots a scan of int8 codes takes on one thread; a larger source is split across the cores
/// (a scan streams every code once, and one core does not draw the memory bandwidth two do).
const SCAN_SLOTS_PER_THREAD: usize = 1 << 17;

/// A slot's score, ordered by score then slot (a total order, so a heap can hold it).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scored(f32, u32);

impl Eq for Scored {}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0).then(other.1.cmp(&self.1))
    }
}

/// The best `k` of a run of int8 slots (the first is slot `first`) that `keep` allows, by a
/// running best `k`: slots without a vector (scale 0) are passed by.
fn best_codes(
    p: &Probe,
    k: usize,
    dim: usize,
    codes: &[i8],
    scales: &[f32],
    first: usize,
    keep: &(impl Fn(usize) -> bool + Sync),
) -> Vec<(f32, u32)> {
    use std::cmp::Reverse;
    let mut best: std::collections::BinaryHeap<Reverse<Scored>> =
        std::collections::BinaryHeap::with_capacity(k + 1);
    for (i, (c, s)) in codes.chunks_exact(dim).zip(scales).enumerate() {
        if *s == 0.0 {
            continue;
        }
        let score = dot_i8(&p.codes, c) as f32 * p.scale * s;
        if best.len() == k && best.peek().is_some_and(|w| score <= w.0.0) {
            continue;
        }
        let slot = first + i;
        if !keep(slot) {
            continue;
        }
        best.push(Reverse(Scored(score, slot as u32)));
        if best.len() > k {
            best.pop();
        }
    }
    best.into_iter().map(|Reverse(Scored(s, i))| (s, i)).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic pseudo-random unit vectors (xorshift), `dim` wide.
    fn vectors(n: usize, dim: usize, seed: u64) -> Vec<Box<[f32]>> {
        let mut s = seed.max(1);
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f32 / (1u64 << 53) as f32 - 0.5
        };
        (0..n).map(|_| unit((0..dim).map(|_| next()).collect())).collect()
    }

    fn filled(exact_up_to: usize, vs: &[Box<[f32]>]) -> Vectors {
        let mut out = Vectors::new(exact_up_to);
        for (i, v) in vs.iter().enumerate() {
            out.put(i, v, vs.len());
        }
        out.settle(vs.len());
        out
    }

    #[test]
    fn vectors_stay_exact_up_to_the_limit_and_are_coded_past_it() {
        let vs = vectors(10, 384, 7);
        let exact = filled(10, &vs);
        assert!(exact.exact());
        assert_eq!(exact.bytes(), 10 * 384 * 4);
        let coded = filled(9, &vs);
        assert!(!coded.exact());
        assert_eq!(coded.bytes(), 10 * 384 + 10 * 4, "a quarter of the memory, plus a scale each");
        // Decoded vectors are close to the originals; slots put after coding are coded too.
        for (i, v) in vs.iter().enumerate() {
            let d = coded.get(i);
            assert!(dot(v, &d) > 0.999, "slot {i}: {}", dot(v, &d));
        }
        let mut early = Vectors::new(9);
        early.expect(10, 40);
        assert!(!early.exact(), "a load past the limit is coded from its first vector");
        early.put(0, &vs[0], 1);
        assert!(dot(&vs[0], &early.get(0)) > 0.999);
        let Data::Int8 { codes, scales } = &early.data else { panic!("coded") };
        assert!(
            codes.capacity() >= room(40) * 384 && scales.capacity() >= room(40),
            "room for the load's slots from the first code on"
        );
        let mut more = coded;
        more.put(10, &vs[0], 11);
        assert!(dot(&vs[0], &more.get(10)) > 0.999);
        more.put(3, &[], 11);
        let all = |_| true;
        assert!(
            more.top(&more.probe(&vs[3]), 20, all, all).iter().all(|(_, i)| *i != 3),
            "an emptied slot is skipped"
        );
        assert_eq!(more.top(&more.probe(&vs[3]), 20, all, |i| i != 5).len(), 9, "as is one `keep` refuses");
    }

    #[test]
    fn int8_scores_are_within_rounding_of_the_cosine_and_rank_the_same_top() {
        let vs = vectors(2000, 384, 11);
        let (exact, coded) = (filled(usize::MAX, &vs), filled(0, &vs));
        for q in vectors(20, 384, 99) {
            let (pe, pc) = (exact.probe(&q), coded.probe(&q));
            let mut e = exact.top(&pe, 2000, |_| true, |_| true);
            for i in 0..2000 {
                let (se, sc) = (exact.score(&pe, i), coded.score(&pc, i));
                assert!((se - sc).abs() < 0.01, "{se} vs {sc}");
            }
            // The exact top 10 are all among the int8 top 40 (what re-scoring reads), and the
            // running best 40 are the best 40 of every score.
            e.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut c = coded.top(&pc, 40, |_| true, |_| true);
            c.sort_by(|a, b| b.0.total_cmp(&a.0));
            let mut every: Vec<(f32, u32)> = (0..2000).map(|i| (coded.score(&pc, i), i as u32)).collect();
            every.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            assert_eq!(
                c.iter().map(|x| x.0).collect::<Vec<_>>(),
                every[..40].iter().map(|x| x.0).collect::<Vec<_>>()
            );
            let pool: Vec<u32> = c.iter().map(|(_, i)| *i).collect();
            assert!(e.iter().take(10).all(|(_, i)| pool.contains(i)));
        }
    }

    #[test]
    fn the_int8_dot_product_is_the_same_integer_on_every_path() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Within ±127, the extremes included.
            ((x % 255) as i32 - 127) as i8
        };
        for n in [0, 1, 31, 32, 33, 384, 385, 1000] {
            let (a, b): (Vec<i8>, Vec<i8>) = (0..n).map(|_| (next(), next())).unzip();
            let exact: i32 = a.iter().zip(&b).map(|(x, y)| i32::from(*x) * i32::from(*y)).sum();
            assert_eq!(dot_i8_portable(&a, &b), exact, "portable, {n} codes");
            assert_eq!(dot_i8(&a, &b), exact, "dispatched, {n} codes");
            let (max, min) = (vec![127i8; n], vec![-127i8; n]);
            assert_eq!(dot_i8(&max, &max), 127 * 127 * n as i32, "{n} codes at the top");
            assert_eq!(dot_i8(&max, &min), -127 * 127 * n as i32, "{n} codes at both ends");
        }
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx2") {
            assert!(avx2::dot_i8(&[1; 64], &[2; 64]) == Some(128), "the AVX2 path is the one taken here");
        }
    }

    #[test]
    fn restored_codes_read_back_and_grow_by_their_room_without_moving() {
        let vs = vectors(800, 16, 7);
        let v = filled(100, &vs);
        let mut bytes = Vec::new();
        v.save(&mut |b| {
            bytes.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        let mut at = 0;
        let mut back = Vectors::restore(100, &mut |n, room| {
            let mut b = Vec::with_capacity(room.max(n));
            b.extend_from_slice(&bytes[at..at + n]);
            at += n;
            Ok(b)
        })
        .unwrap();
        assert_eq!(at, bytes.len());
        let p = v.probe(&vs[3]);
        assert_eq!(back.top(&p, 5, |_| true, |_| true), v.top(&p, 5, |_| true, |_| true));
        let codes_at = |v: &Vectors| match &v.data {
            Data::Int8 { codes, .. } => codes.as_ptr(),
            Data::Exact(_) => panic!("past its limit the codes are restored"),
        };
        let before = codes_at(&back);
        for slot in 800..room(800) {
            back.put(slot, &vs[slot % 800], slot + 1);
        }
        assert_eq!(codes_at(&back), before, "slots up to the room are added in place");
        assert_eq!(back.top(&back.probe(&vs[5]), 1, |_| true, |s| s >= 800)[0].1, 805);
    }

    #[test]
    fn a_scan_split_across_threads_finds_what_one_pass_finds() {
        let vs = vectors(1001, 24, 5);
        let mut coded = filled(0, &vs);
        coded.put(500, &[], 1001);
        let keep = |i: usize| !i.is_multiple_of(7);
        for q in vectors(5, 24, 3) {
            let p = coded.probe(&q);
            let mut one = coded.top_codes(&p, 30, &keep, 1);
            one.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for parts in [2, 3, 8, 1002] {
                assert_eq!(coded.top_codes(&p, 30, &keep, parts), one, "{parts} runs");
            }
            assert!(one.iter().all(|(_, i)| keep(*i as usize) && *i != 500));
            assert_eq!(one.len(), 30);
        }
    }

    #[test]
    fn vectors_of_another_width_and_before_the_first_match_nothing() {
        let mut v = Vectors::new(usize::MAX);
        v.put(0, &[], 1);
        assert_eq!(v.dim(), 0);
        assert!(v.top(&v.probe(&[1.0, 0.0]), 5, |_| true, |_| true).is_empty());
        v.put(1, &[0.0, 1.0], 2);
        v.put(2, &[1.0, 0.0, 0.0], 3);
        let s = v.top(&v.probe(&[0.0, 1.0]), 5, |_| true, |_| true);
        assert_eq!(s, vec![(0.0, 0), (1.0, 1), (0.0, 2)]);
    }
}

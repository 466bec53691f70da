//! Int8 codes and the scans over them: a vector coded to int8 with its scale, integer dot
//! products (AVX2 where the processor has it, else portable), and the best codes of a range of
//! slots, kept in a bounded heap.

use super::Probe;

/// Largest code magnitude.
pub(super) const CODE_MAX: f32 = 127.0;

/// A vector coded to int8 with its scale (`code × scale` ≈ component).
pub(super) fn code(v: &[f32]) -> (Vec<i8>, f32) {
    let max = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    if max == 0.0 || !max.is_finite() {
        return (vec![0; v.len()], 0.0);
    }
    let scale = max / CODE_MAX;
    (v.iter().map(|x| (x / scale).round().clamp(-CODE_MAX, CODE_MAX) as i8).collect(), scale)
}

/// Dot product in 16 independent lanes: a single running sum is a chain the compiler may not
/// reorder (float addition is not associative), so it would not vectorise.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
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
pub(super) fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
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
pub(super) fn dot_i8_portable(a: &[i8], b: &[i8]) -> i32 {
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
/// The crate's one `unsafe` but for the model's exit handler (`embed`): a `#[target_feature]` function may only be called where the
/// feature is known to be there, and the loads read through pointers.
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
pub(super) mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm_add_epi32, _mm_cvtsi128_si32, _mm_hadd_epi32, _mm256_add_epi32, _mm256_castsi256_si128,
        _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_maddubs_epi16,
        _mm256_set1_epi16, _mm256_setzero_si256, _mm256_sign_epi8,
    };

    /// `None` where the CPU has no AVX2.
    pub(in crate::vectors) fn dot_i8(a: &[i8], b: &[i8]) -> Option<i32> {
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
pub(super) const SCAN_SLOTS_PER_THREAD: usize = 1 << 17;

/// A slot's score, ordered by score then slot (a total order, so a heap can hold it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Scored(pub(super) f32, pub(super) u32);

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
pub(super) fn best_codes(
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

use super::codes::{avx2, dot_i8_portable};
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

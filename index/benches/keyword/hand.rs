//! The hand index (the resident engine's), under either scoring; under BM25F also edited.

use crate::bm25f::{edits, fields};
use crate::{Report, TOP, chunks, ms, queries, rss_mib};
use cairn_index::resident::keyword::{Bm25, Fields, top_k};
use cairn_index::resident::terms;
use std::io::BufWriter;
use std::path::Path;
use std::time::Instant;

/// The hand index's file for a way of scoring.
fn hand_file(work: &Path, scoring: Fields) -> std::path::PathBuf {
    work.join(if scoring == Fields::Apart { "hand-f.bin" } else { "hand.bin" })
}

/// The hand index built chunk by chunk, heading and text apart when `scoring` keeps them apart
/// (else the search text as one), and saved as the resident snapshot saves it.
pub(crate) fn hand_build(work: &Path, scoring: Fields) -> Report {
    let mut r = Report::default();
    let (rss0, t) = (rss_mib(), Instant::now());
    let mut bm25 = Bm25::default();
    for (i, text) in chunks(work).enumerate() {
        match scoring {
            Fields::Apart => {
                let (head, body) = fields(&text);
                bm25.insert_fields(i as u32, &head, &body);
            }
            Fields::Together => bm25.insert(i as u32, &terms(&text)),
        }
    }
    bm25.shrink();
    r.figure("build ms", ms(t));
    r.figure("built RSS added MiB", rss_mib() - rss0);
    let file = std::fs::File::create(hand_file(work, scoring)).expect("the snapshot file");
    let bytes = bm25.write_to(BufWriter::new(file)).expect("the snapshot written");
    r.figure("on disk MiB", bytes as f64 / (1 << 20) as f64);
    r
}

/// The hand index opened from its file and queried, scored as `scoring` says; under BM25F then
/// edited, and queried again.
pub(crate) fn hand_open(work: &Path, scoring: Fields) -> Report {
    let mut r = Report::default();
    let queries = queries(work);
    let (rss0, t) = (rss_mib(), Instant::now());
    let path = hand_file(work, scoring);
    let len = std::fs::metadata(&path).expect("the snapshot").len();
    let mut bm25 =
        Bm25::read_from(std::fs::File::open(&path).expect("the snapshot"), len).expect("read back");
    r.figure("open ms", ms(t));
    let search = |bm25: &Bm25, q: &str| {
        let scored = bm25.scores(&terms(q), scoring).into_iter().map(|(d, s)| (s, d)).collect();
        top_k(scored, TOP, |d| *d).into_iter().map(|(_, d)| u64::from(d)).collect()
    };
    r.run(&queries, |q| search(&bm25, q));
    r.figure("RSS added MiB", rss_mib() - rss0);
    if scoring == Fields::Together {
        return r;
    }
    edits(&mut r, work, |out, put| {
        out.iter().for_each(|&c| bm25.remove(c as u32));
        for (c, text) in put {
            let (h, b) = fields(text);
            bm25.insert_fields(*c as u32, &h, &b);
        }
        if bm25.purge_due() {
            bm25.purge();
        }
    });
    r.run_as(&queries, " after edits", |q| search(&bm25, q));
    r
}

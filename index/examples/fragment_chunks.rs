//! The state a first index leaves for its first compaction, made from a finished database: every
//! chunk row of source `SOURCE` deleted and written again, 512 at a time (the size of a vector
//! commit), with the key indexes brought up to date every other write (as the writer's upkeep
//! does during a backfill). Used by `scripts/bench/compaction` on a copy of a kept GCIDE
//! database (`CAIRN_BENCH_KEEP` of `scripts/bench/gcide`).
//!
//! `cargo run --release -p cairn-index --example fragment_chunks -- DB SOURCE`

use futures::TryStreamExt;
use lancedb::query::ExecutableQuery;
use std::time::Instant;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, uri, source] = args.as_slice() else { panic!("usage: fragment_chunks DB SOURCE") };
    let store = cairn_index::Database::open(uri).await.expect("the database opens");
    let src = store.open_existing(source).await.expect("the source exists");
    let db = lancedb::connect(uri).execute().await.expect("the database opens");
    let table = db.open_table(format!("{source}_chunks")).execute().await.expect("its chunks table");
    let batches: Vec<arrow_array::RecordBatch> =
        table.query().execute().await.expect("a scan").try_collect().await.expect("the rows");
    let started = Instant::now();
    let mut writes = 0;
    for rows in batches {
        let ids = rows.column_by_name("id").expect("an id column");
        let ids = ids.as_any().downcast_ref::<arrow_array::StringArray>().expect("string ids");
        for at in (0..rows.num_rows()).step_by(512) {
            let len = 512.min(rows.num_rows() - at);
            let list: Vec<String> = (at..at + len).map(|r| format!("'{}'", ids.value(r))).collect();
            table.delete(&format!("id IN ({})", list.join(","))).await.expect("a delete");
            table.add(rows.slice(at, len)).execute().await.expect("an append");
            writes += 1;
            if writes % 2 == 0 {
                src.index_keys().await.expect("the key indexes");
            }
        }
    }
    src.index_keys().await.expect("the key indexes");
    src.prune(std::time::Duration::ZERO, true).await.expect("old versions removed");
    let stats = table.stats().await.expect("table statistics");
    eprintln!(
        "{writes} writes in {:.1} s: {} fragments of {} rows",
        started.elapsed().as_secs_f64(),
        stats.fragment_stats.num_fragments,
        stats.num_rows
    );
}

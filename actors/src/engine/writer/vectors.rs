//! The writer's second phase: chunks without a vector go to the model (edits first, a few
//! requests out at a time), and each answer is attached to the tables by a commit of its own.

use super::SourceWriter;
use super::commit::Sink;
use crate::core::error::{PipelineError, Refusal};
use crate::core::event::EventKind;
use crate::engine::embedding::{EmbedReply, EmbedScheduler, Priority, Stopped};
use crate::replication::journal::Change;
use actix::prelude::*;
use cairn_index::Resident;
use std::collections::HashMap;
use std::time::{Duration, Instant};

impl SourceWriter {
    /// Send chunks waiting for vectors to the model: edits first, at most [`backlog::MAX_EMBEDS_OUT`]
    /// requests out. Texts with a known vector skip the model.
    pub(super) fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(resident) = self.resident.clone() else { return };
        while let Some((ids, priority)) = self.vectors.next_request(self.opts.commit_chunks) {
            // Each distinct text once; texts already known skip the model.
            let (mut texts, mut hashes): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
            let mut by_text: HashMap<String, (usize, Vec<String>)> = HashMap::new();
            {
                let index = resident.read();
                for id in ids {
                    let Some((_, hash, text)) = index.waiting(&id) else { continue };
                    if let Some(v) = self.vectors.fresh(&hash).or_else(|| index.vector_of(&hash)) {
                        self.vectors.ready(id, v);
                        continue;
                    }
                    match by_text.get_mut(&hash) {
                        Some((_, ids)) => ids.push(id),
                        None => {
                            by_text.insert(hash.clone(), (texts.len(), vec![id]));
                            texts.push(text);
                            hashes.push(hash);
                        }
                    }
                }
            }
            if texts.is_empty() {
                continue;
            }
            self.vectors.sent(priority);
            let (scheduler, id, resident) = (self.embedder.clone(), self.id.clone(), resident.clone());
            let fut =
                async move { embed_or_reuse(&scheduler, &resident, &id, priority, texts, hashes).await };
            ctx.spawn(actix::fut::wrap_future::<_, Self>(fut).map(move |res, act, ctx| {
                act.vectors.answered(priority);
                // An error means the scheduler stopped (shutting down): the chunks stay without
                // vectors in the tables and are embedded at the next start.
                if let Ok(reply) = res {
                    act.received(reply, by_text, ctx);
                }
                act.pump(ctx);
            }));
        }
        if self.vectors.commit_due() {
            self.commit_vectors(ctx);
        }
        self.settle_waiters();
    }

    /// The model's answer: each text's vector goes to every chunk waiting for that text.
    fn received(
        &mut self,
        reply: EmbedReply,
        by_text: HashMap<String, (usize, Vec<String>)>,
        ctx: &mut Context<Self>,
    ) {
        self.vectors.model_time(reply.model);
        self.warn_truncated(&reply.truncated, &by_text);
        for (hash, (i, ids)) in by_text {
            match &reply.vectors[i] {
                Some(v) => {
                    self.vectors.embedded(hash, v, ids, !reply.reused.contains(&i));
                }
                None => {
                    let why = reply.failed.iter().find(|(j, _)| *j == i).map_or("", |(_, w)| w.as_str());
                    tracing::warn!(
                        "source `{}`: a chunk could not be embedded ({why}); it is found by its words only",
                        self.id
                    );
                }
            }
        }
        self.commit_vectors(ctx);
    }

    /// Chunks longer than the model's token window were embedded from their first tokens only:
    /// each page holding one gets a `page_warning` (its words are all still found by keyword).
    /// The chunker's budget is an estimate; text dense in rare tokens (long identifiers, URLs,
    /// base64) can exceed it.
    fn warn_truncated(&mut self, truncated: &[usize], by_text: &HashMap<String, (usize, Vec<String>)>) {
        if truncated.is_empty() {
            return;
        }
        let Some(resident) = self.resident.as_ref() else { return };
        let mut per_page: std::collections::BTreeMap<String, usize> = Default::default();
        {
            let index = resident.read();
            for (i, ids) in by_text.values() {
                if !truncated.contains(i) {
                    continue;
                }
                for id in ids {
                    if let Some((slug, _, _)) = index.waiting(id) {
                        *per_page.entry(slug).or_default() += 1;
                    }
                }
            }
            let slugs: Vec<&str> = per_page.keys().map(String::as_str).collect();
            let paths: HashMap<String, String> =
                index.pages(&slugs).into_iter().map(|p| (p.slug, p.path)).collect();
            per_page = per_page
                .into_iter()
                .map(|(slug, n)| (paths.get(&slug).cloned().unwrap_or(slug), n))
                .collect();
        }
        self.vectors.warn(per_page.into_iter().map(|(path, n)| EventKind::PageWarning {
            path,
            kind: "chunk_truncated".into(),
            reason: format!(
                "{n} chunk(s) longer than the model's {} token window are embedded from their first tokens; \
                 split long paragraphs or code blocks for their meaning to be found",
                cairn_index::embed::MODEL_WINDOW
            ),
        }));
    }

    /// Commit the vectors that are ready (ordered with every other write of this source).
    fn commit_vectors(&mut self, ctx: &mut Context<Self>) {
        if !self.vectors.has_ready() || self.store.is_none() || self.resident.is_none() {
            return;
        }
        let sink = match self.sink() {
            Ok(sink) => sink,
            // A lapsed lease (the store not answering): the vectors stay ready and are committed
            // once it is renewed, rather than reloading the source to embed them again.
            Err(lapsed @ PipelineError::Refused { why: Refusal::LeaseLapsed, .. }) => {
                self.hold(&lapsed);
                if self.vectors.retry_once() {
                    ctx.run_later(super::LAPSED_RETRY, |act, ctx| {
                        act.vectors.retrying();
                        act.commit_vectors(ctx);
                    });
                }
                return;
            }
            Err(refused) => return self.fail(ctx, "writer", refused),
        };
        let taken = self.vectors.take_ready();
        let ready = taken.vectors;
        let complete = self.complete_pages(&sink.resident, &ready);
        let n = ready.len();
        let done =
            Embedded { embedded: taken.embedded, model: taken.model, warnings: taken.warnings, complete };
        let write = write_vectors(sink, ready, done);
        ctx.wait(actix::fut::wrap_future::<_, Self>(write).map(move |res, act, ctx| {
            act.vectors.committed(res.is_ok().then_some(n));
            match res {
                Ok((pending, version)) => {
                    act.landed();
                    act.status.set_version(&act.id, version);
                    act.publish_vectors();
                    debug_assert!(
                        pending == act.resident.as_ref().map_or(0, |r| r.read().unembedded_count())
                    );
                    act.note_commit(0, n, ctx);
                    act.settle_waiters();
                }
                // The chunks keep no vector in the tables; the restart reloads and embeds them again.
                Err(e) => act.fail(ctx, "writer", e),
            }
        }));
    }

    /// The pages whose last waiting chunks are among `ready`, sorted.
    fn complete_pages(&mut self, resident: &Resident, ready: &[(String, Vec<f32>)]) -> Vec<String> {
        let mut per_page: HashMap<String, usize> = HashMap::new();
        {
            let index = resident.read();
            for (chunk, _) in ready {
                if let Some((slug, _, _)) = index.waiting(chunk) {
                    *per_page.entry(slug).or_default() += 1;
                }
            }
        }
        let mut complete: Vec<String> = Vec::new();
        for (slug, n) in &per_page {
            if self.vectors.page_embedded(slug, *n) {
                complete.push(slug.clone());
            }
        }
        complete.sort();
        complete
    }

    /// Chunks stored, chunks waiting for vectors and the recent rate, into the status.
    pub(super) fn publish_vectors(&mut self) {
        let (chunks, pending) =
            self.resident.as_ref().map_or((0, 0), |r| (r.read().chunk_count(), r.read().unembedded_count()));
        let rate = self.vectors.rate(Instant::now());
        self.status.set_vectors(&self.id, chunks, pending, rate);
    }

    /// Answer `flush` callers once nothing waits for a vector.
    pub(super) fn settle_waiters(&mut self) {
        if self.vectors.idle() && self.plan.is_empty() {
            self.vectors.tell_waiters(Ok(()));
        }
    }
}

/// What a vector commit reports besides the vectors: how many the model made and how long it
/// took, the truncation warnings, and the pages it completes.
struct Embedded {
    embedded: usize,
    model: Duration,
    warnings: Vec<EventKind>,
    complete: Vec<String>,
}

/// Write a vector commit: the vectors, the journal entry, the resident index, then its events;
/// the chunks still waiting, and the version.
async fn write_vectors(
    sink: Sink,
    ready: Vec<(String, Vec<f32>)>,
    done: Embedded,
) -> Result<(usize, u64), PipelineError> {
    let started = Instant::now();
    let n = ready.len();
    let version = sink.store.attach_vectors(&ready).await?;
    let vectors = ready.iter().map(|(chunk, _)| chunk.clone()).collect();
    sink.record(Change {
        version,
        committed_unix_ms: crate::core::event::unix_ms(),
        vectors,
        ..Default::default()
    })
    .await?;
    let pending = sink.resident.apply_vectors(ready).await?;
    let mut events = done.warnings;
    events.extend(done.complete.into_iter().map(|slug| EventKind::PageEmbedded { slug, version }));
    events.push(EventKind::Committed {
        pages: 0,
        removed: 0,
        chunks_embedded: done.embedded,
        chunks_reused: n - done.embedded.min(n),
        chunks_pending: pending,
        embed_ms: done.model.as_millis() as u64,
        commit_ms: (started.elapsed() + done.model).as_millis() as u64,
        version,
    });
    sink.emit.emit(&sink.id, events).await;
    Ok((pending, version))
}

/// Vectors for `texts` (with their `hashes`): those the store already holds for another chunk
/// of the same text, read from it (a source whose resident vectors are int8 codes cannot give
/// them from memory), the model's for the rest; one reply in request order. A failed read only
/// costs the model's time.
async fn embed_or_reuse(
    scheduler: &EmbedScheduler,
    resident: &Resident,
    source: &str,
    priority: Priority,
    texts: Vec<String>,
    hashes: Vec<String>,
) -> Result<EmbedReply, Stopped> {
    let held: Vec<&str> = {
        let index = resident.read();
        hashes.iter().map(String::as_str).filter(|h| index.has_vector(h)).collect()
    };
    let known = if held.is_empty() {
        HashMap::new()
    } else {
        resident.known_vectors(&held).await.unwrap_or_else(|e| {
            tracing::warn!("source `{source}`: stored vectors could not be read ({e}); embedding again");
            HashMap::new()
        })
    };
    if known.is_empty() {
        return scheduler.embed(source, priority, texts).await;
    }
    let (rest, rest_texts): (Vec<usize>, Vec<String>) =
        texts.into_iter().enumerate().filter(|(i, _)| !known.contains_key(&hashes[*i])).unzip();
    let reply = scheduler.embed(source, priority, rest_texts).await?;
    let mut vectors: Vec<Option<Vec<f32>>> = hashes.iter().map(|h| known.get(h).cloned()).collect();
    for (j, v) in reply.vectors.into_iter().enumerate() {
        vectors[rest[j]] = v;
    }
    Ok(EmbedReply {
        reused: (0..hashes.len()).filter(|i| known.contains_key(&hashes[*i])).collect(),
        vectors,
        failed: reply.failed.into_iter().map(|(j, why)| (rest[j], why)).collect(),
        truncated: reply.truncated.into_iter().map(|j| rest[j]).collect(),
        model: reply.model,
    })
}

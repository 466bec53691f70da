//! `cairn watch`: index the folders, then keep the index current until Ctrl-C (or, with
//! `--once`, until caught up).

use anyhow::Result;
use cairn::{Cairn, Role};
use cairn_actors::{Event, EventKind as K};
use futures::StreamExt;
use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Instant;

pub async fn watch(config: cairn::Config, json: bool, once: bool) -> Result<ExitCode> {
    let ids: Vec<String> = config.sources.iter().map(|s| format!("{}={}", s.id, s.root.display())).collect();
    let db = config.db.clone();
    let opts = cairn::OpenOptions { purpose: "watch".into(), standby: !once, register_sources: true };
    // Listening from the start: Ctrl-C or SIGTERM during the catch-up (which can be long on a
    // large vault) stops the watch as cleanly as later, instead of killing it mid-way.
    let stop = cairn::stop_signal();
    tokio::pin!(stop);
    let cairn = Cairn::open_with(config, opts).await?;
    if let Some(code) = not_the_writer(&cairn, &db, once).await? {
        return Ok(code);
    }
    if cairn.role() != Role::Owner {
        let mut roles = cairn.roles();
        tokio::select! {
            _ = &mut stop => {
                cairn.shutdown().await?;
                return Ok(ExitCode::SUCCESS);
            }
            _ = roles.wait_for(|r| *r == Role::Owner) => {
                eprintln!("cairn: the writer stopped; this process writes {db} now");
            }
        }
    }
    let events = cairn.subscribe().await?;
    let watched = ids.join(", ");
    eprintln!(
        "cairn: watching {} (db: {db})",
        if watched.is_empty() { "the sources the database holds".into() } else { watched }
    );
    let printer = tokio::spawn(print_while_writing(cairn.clone(), events, json));
    // `None`: stopped by a signal before the catch-up ended (what is pending is committed at
    // the shutdown below; the chunks still waiting for vectors are embedded at the next start).
    let caught_up = tokio::select! {
        r = catch_up(&cairn) => Some(r?),
        _ = &mut stop => None,
    };
    match caught_up {
        Some(_) if once => {}
        Some(_) => {
            eprintln!("cairn: watching for changes; Ctrl-C to stop");
            (&mut stop).await;
            eprintln!("cairn: stopping (committing what is pending)");
        }
        None => eprintln!("cairn: stopping (committing what is pending)"),
    }
    let failed = cairn.status().await.map(|s| s.sources.iter().any(failing)).unwrap_or(false);
    cairn.shutdown().await?;
    printer.abort();
    // A stop before the catch-up ended is how a watch ends; for `--once` it left work undone.
    let done = caught_up.unwrap_or(!once);
    Ok(if done && !failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// A source that cannot be watched: it keeps failing, or its folder is unavailable here.
fn failing(s: &cairn_actors::SourceStatus) -> bool {
    s.state == cairn_actors::core::status::SourceState::Retrying
        || s.unavailable.as_ref().is_some_and(|u| *u != cairn_ingest::Unavailable::NotHere)
}

/// Say who writes the database when this process does not. `Some`: the watch ends here (a
/// `--once` done through the owner).
async fn not_the_writer(cairn: &Cairn, db: &str, once: bool) -> Result<Option<ExitCode>> {
    match cairn.role() {
        Role::Client => {
            let status = cairn.status().await?;
            let owner = status
                .owner
                .as_ref()
                .map_or("another process".to_string(), |o| format!("pid {} (cairn {})", o.pid, o.purpose));
            let watched: Vec<String> =
                status.sources.iter().map(|s| format!("{}={}", s.source, s.root)).collect();
            let writes = match (&status.writer, &status.owner) {
                (Some(w), Some(o)) => {
                    w.pid == o.pid && w.host == cairn_actors::replication::lease::host_name()
                }
                _ => false,
            };
            if writes {
                eprintln!("cairn: {db} is owned by {owner}, which now watches {}", watched.join(", "));
            } else {
                // An object store written from another process: this machine's process reads it.
                let writer = status.writer.as_ref().map_or("no process now".to_string(), |w| w.to_string());
                eprintln!(
                    "cairn: {db} is written by {writer}; this machine's {owner} reads it and writes these folders once it holds the writer lease"
                );
                if once {
                    anyhow::bail!("{db} is written by {writer}; `watch --once` cannot index it from here");
                }
            }
            if once {
                cairn.flush().await?;
                eprintln!("cairn: up to date (through the owner)");
                return Ok(Some(ExitCode::SUCCESS));
            }
            eprintln!("cairn: standing by to take over if it stops; Ctrl-C to quit");
        }
        Role::Reader => {
            // An object store written from another process (maybe another machine): a one-shot
            // run waits out a lease its holder stopped renewing, and writes, or says who does.
            if once {
                cairn::refuse_unless_writer(cairn).await?;
                return Ok(None);
            }
            let writer =
                cairn.status().await?.writer.map_or("another process".to_string(), |w| w.to_string());
            eprintln!(
                "cairn: {db} is written by {writer}; this process follows its commits and stands by to take over as the writer; Ctrl-C to quit"
            );
        }
        Role::Owner => {}
    }
    Ok(None)
}

/// Wait until every page is searchable by name, then by meaning; whether that succeeded.
async fn catch_up(cairn: &Cairn) -> Result<bool> {
    let summary = |s: &cairn::Status| {
        let each = s.sources.iter().map(|s| {
            format!("{}: {} pages, {} chunks waiting for vectors", s.source, s.pages, s.vectors_pending)
        });
        each.collect::<Vec<_>>().join("; ")
    };
    match cairn.flush_pages().await {
        Ok(()) => eprintln!(
            "cairn: every page is searchable by name and keyword ({})",
            summary(&cairn.status().await?)
        ),
        Err(e) => eprintln!("cairn: catching up failed: {e}"),
    }
    let caught_up = cairn.flush().await;
    match &caught_up {
        Ok(()) => eprintln!("cairn: up to date ({})", summary(&cairn.status().await?)),
        Err(e) => eprintln!("cairn: catching up failed: {e}"),
    }
    Ok(caught_up.is_ok())
}

/// Every event as a JSON line on stdout, or the ones a person wants on stderr (vector progress
/// as a rate and an ETA).
/// Print the pipeline's events, and each later pipeline's: a watch that lost the lease (a pause
/// past it, a store cut off) and took it again runs a new pipeline, whose events must be
/// printed too (a `--json` consumer would otherwise see the watch fall silent).
async fn print_while_writing(
    cairn: Cairn,
    mut events: futures::stream::BoxStream<'static, std::sync::Arc<Event>>,
    json: bool,
) {
    let mut roles = cairn.roles();
    loop {
        print_events(events, json).await;
        // This pipeline ended: once this process writes again, its next one. (A look every 100 ms
        // at most, while the ended pipeline may still be the one a subscription reaches.)
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        if roles.wait_for(|r| *r == Role::Owner).await.is_err() {
            return;
        }
        events = match cairn.subscribe().await {
            Ok(next) => next,
            Err(_) => futures::stream::empty().boxed(),
        };
    }
}

async fn print_events(mut events: futures::stream::BoxStream<'static, std::sync::Arc<Event>>, json: bool) {
    // Per source: chunks embedded since this process started, and when the first were.
    let mut embedding: HashMap<String, (usize, Instant)> = HashMap::new();
    while let Some(e) = events.next().await {
        if json {
            if let Ok(line) = serde_json::to_string(&*e) {
                out!("{line}");
            }
            continue;
        }
        match &e.kind {
            K::Reconciled { changed: 0, removed: 0, held: 0, .. } => {}
            K::Committed { pages: 0, removed: 0, chunks_embedded, chunks_pending, .. } => {
                let (done, since) = embedding.entry(e.source.clone()).or_insert((0, Instant::now()));
                *done += chunks_embedded;
                let rate = *done as f64 / since.elapsed().as_secs_f64().max(1.0);
                let eta = if *chunks_pending > 0 && rate > 0.0 {
                    format!(", ETA {:.0} s", *chunks_pending as f64 / rate)
                } else {
                    String::new()
                };
                eprintln!(
                    "{}: vectors: {done} chunks embedded, {chunks_pending} to go ({rate:.1} chunks/s{eta})",
                    e.source
                );
            }
            K::Reconciled { .. }
            | K::SourceUnavailable { .. }
            | K::SourceAvailable
            | K::RemovalsHeld { .. }
            | K::FoldersUnavailable { .. }
            | K::Committed { .. }
            | K::PageFailed { .. }
            | K::PageWarning { .. }
            | K::FileRenamed { .. }
            | K::PageRemoved { .. }
            | K::StageFailed { .. } => eprintln!("{e}"),
            _ => {}
        }
    }
}

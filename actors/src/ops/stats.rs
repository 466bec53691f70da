//! `cairn stats`: what the event log and the tables say about the index and its answers —
//! per source pages, chunks, failures and alias collisions; per day the queries answered and
//! their rank-1 base score (a downward drift is retrieval regressing).

use crate::Result;
use crate::core::event::{Event, EventKind};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Stats {
    pub sources: Vec<SourceStats>,
    pub queries: QueryStats,
    /// The event log files read, oldest first.
    pub logs: Vec<String>,
}

/// Each source's counts and failing files, then the queries: counts, rank-1 groups, the drift
/// and one row per day.
impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for src in &self.sources {
            let (pages, chunks, failing) = (src.pages, src.chunks, src.failing.len());
            writeln!(f, "{}: {pages} pages, {chunks} chunks, {failing} failing files", src.source)?;
            for failing in &src.failing {
                writeln!(f, "  failing {}: {}", failing.path, failing.reason)?;
            }
            for c in &src.alias_collisions {
                writeln!(f, "  name `{}` is claimed by {}", c.name, c.slugs.join(", "))?;
            }
        }
        write!(f, "{}", self.queries)
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SourceStats {
    pub source: String,
    pub pages: usize,
    pub chunks: usize,
    /// Files whose last event is a failure (not indexed since).
    pub failing: Vec<Failing>,
    /// Names (normalised aliases or titles) claimed by more than one page.
    pub alias_collisions: Vec<Collision>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Failing {
    pub path: String,
    pub kind: String,
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Collision {
    pub name: String,
    pub slugs: Vec<String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct QueryStats {
    pub answered: usize,
    /// Rank-1 base scores per mode, and per source of the rank-1 result.
    pub by_mode: BTreeMap<String, GroupStats>,
    pub by_source: BTreeMap<String, GroupStats>,
    pub by_create_safety: BTreeMap<String, usize>,
    /// Rank-1 base scores in buckets (`<0.3`, `0.3-0.5`, `0.5-0.7`, `>=0.7`).
    pub top_score_buckets: BTreeMap<String, usize>,
    pub degraded: usize,
    pub empty: usize,
    /// Empty answers by cause: `degraded` (a source or the embedder failed), `pending_changes`
    /// (changes were not searchable yet), `below_relevance_floor` (candidates were found and all
    /// dropped as junk), `no_candidates` (nothing matched).
    pub empty_by_cause: BTreeMap<String, usize>,
    pub p50_latency_ms: f64,
    pub p99_latency_ms: f64,
    /// Per UTC day: queries, mean and median rank-1 base score, share with `exists` at rank 1.
    pub days: Vec<DayStats>,
    /// The window's mean rank-1 base score against the window before it (with `--days`).
    pub drift: Option<Drift>,
}

impl std::fmt::Display for QueryStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (p50, p99) = (self.p50_latency_ms, self.p99_latency_ms);
        writeln!(
            f,
            "queries answered: {} ({} empty, {} degraded); latency p50 {p50:.1} ms, p99 {p99:.1} ms",
            self.answered, self.empty, self.degraded
        )?;
        for (k, v) in &self.by_create_safety {
            writeln!(f, "  rank 1 create_safety {k}: {v}")?;
        }
        for (k, v) in &self.top_score_buckets {
            writeln!(f, "  rank 1 base score {k}: {v}")?;
        }
        for (k, v) in &self.empty_by_cause {
            writeln!(f, "  empty ({k}): {v}")?;
        }
        let modes = self.by_mode.iter().map(|(k, m)| ("mode", k, m));
        for (what, k, m) in modes.chain(self.by_source.iter().map(|(k, m)| ("rank 1 from source", k, m))) {
            let buckets: Vec<String> = m.top_score_buckets.iter().map(|(b, n)| format!("{b}: {n}")).collect();
            let (n, mean) = (m.queries, m.mean_top_base_score);
            writeln!(
                f,
                "  {what} {k}: {n} queries, mean rank-1 base score {mean:.3} ({})",
                buckets.join(", ")
            )?;
        }
        if let Some(d) = &self.drift {
            let (mean, days) = (d.mean_top_base_score, d.days);
            match (d.previous_mean_top_base_score, d.change) {
                (Some(p), Some(c)) => writeln!(
                    f,
                    "drift: mean rank-1 base score {mean:.3} over the last {days} day(s), {p:.3} the {days} before ({c:+.3})"
                )?,
                _ => writeln!(f, "drift: {mean:.3} over the last {days} day(s); no queries before")?,
            }
        }
        if self.days.is_empty() {
            return Ok(());
        }
        writeln!(
            f,
            "{:<12} {:>7} {:>10} {:>10} {:>8} {:>8}",
            "day", "queries", "mean top", "median", "exists", "p50 ms"
        )?;
        for d in &self.days {
            writeln!(
                f,
                "{:<12} {:>7} {:>10.3} {:>10.3} {:>8.2} {:>8.1}",
                d.day,
                d.queries,
                d.mean_top_base_score,
                d.median_top_base_score,
                d.exists_at_rank_1,
                d.p50_latency_ms
            )?;
        }
        Ok(())
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct GroupStats {
    pub queries: usize,
    pub mean_top_base_score: f64,
    pub top_score_buckets: BTreeMap<String, usize>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Drift {
    pub days: u32,
    pub mean_top_base_score: f64,
    pub previous_mean_top_base_score: Option<f64>,
    pub change: Option<f64>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct DayStats {
    pub day: String,
    pub queries: usize,
    pub mean_top_base_score: f64,
    pub median_top_base_score: f64,
    pub exists_at_rank_1: f64,
    pub p50_latency_ms: f64,
}

pub use crate::core::history::log_files;

/// The UTC day (`YYYY-MM-DD`) of a time.
fn day_of(unix_ms: u64) -> String {
    jiff::Timestamp::from_millisecond(unix_ms as i64)
        .map_or_else(|_| "?".into(), |t| t.to_zoned(jiff::tz::TimeZone::UTC).date().to_string())
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One answered query, as the log tells it.
struct Answer {
    at_ms: u64,
    mode: String,
    /// Rank-1 base score, create_safety and source.
    top: Option<(f64, String, String)>,
    degraded: bool,
    latency_ms: f64,
    empty_cause: &'static str,
}

/// Why an answer came back empty (see [`QueryStats::empty_by_cause`]).
fn empty_cause(a: &crate::core::event::QueryAnswered) -> &'static str {
    if !a.degraded.is_empty() {
        "degraded"
    } else if a.pending_changes.unwrap_or(0) > 0 {
        "pending_changes"
    } else if a.candidates.values().sum::<usize>() > 0 {
        "below_relevance_floor"
    } else {
        "no_candidates"
    }
}

fn bucket(score: f64) -> &'static str {
    match score {
        s if s < 0.3 => "<0.3",
        s if s < 0.5 => "0.3-0.5",
        s if s < 0.7 => "0.5-0.7",
        _ => ">=0.7",
    }
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// Fold events (in log order) into query and failure statistics; with `days`, queries of the
/// last `days` days (before the newest) only, and the drift against the `days` before them.
pub fn from_events(
    events: &[Event],
    days: Option<u32>,
) -> (QueryStats, BTreeMap<String, BTreeMap<String, Failing>>) {
    let (mut answers, failing) = read_events(events);
    let mut q = QueryStats::default();
    if let Some(d) = days {
        q.drift = drift(&mut answers, d);
    }
    q.count(&answers);
    q.days = per_day(&answers);
    (q, failing)
}

/// The answers the events record, and the pages failing now (by source, by path).
fn read_events(events: &[Event]) -> (Vec<Answer>, BTreeMap<String, BTreeMap<String, Failing>>) {
    let mut failing: BTreeMap<String, BTreeMap<String, Failing>> = BTreeMap::new();
    let mut started_ms = 0u64;
    let mut answers = Vec::new();
    for e in events {
        match &e.kind {
            EventKind::SystemStarted { unix_ms, .. } => started_ms = *unix_ms,
            EventKind::QueryAnswered(a) => answers.push(Answer {
                // Wall-clock time when the event has it (a one-shot `cairn search` has no
                // pipeline clock), else the pipeline's start plus its logical time.
                at_ms: a.unix_ms.unwrap_or(started_ms + e.ts),
                mode: a.mode.clone(),
                top: a
                    .top
                    .as_ref()
                    .map(|t| (f64::from(t.base_score), t.create_safety.clone(), t.source.clone())),
                degraded: !a.degraded.is_empty(),
                latency_ms: a.latency_ms,
                empty_cause: empty_cause(a),
            }),
            EventKind::PageFailed { path, kind, reason } => {
                failing.entry(e.source.clone()).or_default().insert(
                    path.clone(),
                    Failing { path: path.clone(), kind: kind.clone(), reason: reason.clone() },
                );
            }
            EventKind::PageIndexed { path, .. } | EventKind::FileRemoved { path } => {
                if let Some(f) = failing.get_mut(&e.source) {
                    f.remove(path);
                }
            }
            _ => {}
        }
    }
    (answers, failing)
}

/// Keep the answers of the last `days` days before the newest, and say how their mean top
/// score moved against the `days` before them.
fn drift(answers: &mut Vec<Answer>, days: u32) -> Option<Drift> {
    let newest = answers.iter().map(|a| a.at_ms).max()?;
    let window = u64::from(days) * 86_400_000;
    let since = newest.saturating_sub(window);
    let before: Vec<f64> = answers
        .iter()
        .filter(|a| a.at_ms < since && a.at_ms >= since.saturating_sub(window))
        .filter_map(|a| a.top.as_ref().map(|t| t.0))
        .collect();
    answers.retain(|a| a.at_ms >= since);
    let now = mean(answers.iter().filter_map(|a| a.top.as_ref().map(|t| t.0))).unwrap_or(0.0);
    let prev = mean(before.into_iter());
    Some(Drift {
        days,
        mean_top_base_score: now,
        previous_mean_top_base_score: prev,
        change: prev.map(|p| now - p),
    })
}

impl QueryStats {
    /// Count the answers: by mode, create-safety, top-score bucket and source, the empty ones
    /// by cause, the means of the top scores and the latency percentiles.
    fn count(&mut self, answers: &[Answer]) {
        for a in answers {
            self.answered += 1;
            self.degraded += usize::from(a.degraded);
            self.by_mode.entry(a.mode.clone()).or_default().queries += 1;
            match &a.top {
                Some((score, safety, source)) => {
                    *self.by_create_safety.entry(safety.clone()).or_default() += 1;
                    *self.top_score_buckets.entry(bucket(*score).into()).or_default() += 1;
                    *self
                        .by_mode
                        .entry(a.mode.clone())
                        .or_default()
                        .top_score_buckets
                        .entry(bucket(*score).into())
                        .or_default() += 1;
                    let s = self.by_source.entry(source.clone()).or_default();
                    s.queries += 1;
                    *s.top_score_buckets.entry(bucket(*score).into()).or_default() += 1;
                }
                None => {
                    self.empty += 1;
                    *self.empty_by_cause.entry(a.empty_cause.into()).or_default() += 1;
                }
            }
        }
        for (mode, m) in self.by_mode.iter_mut() {
            m.mean_top_base_score =
                mean(answers.iter().filter(|a| a.mode == *mode).filter_map(|a| a.top.as_ref().map(|t| t.0)))
                    .unwrap_or(0.0);
        }
        for (source, m) in self.by_source.iter_mut() {
            m.mean_top_base_score =
                mean(answers.iter().filter_map(|a| a.top.as_ref().filter(|t| t.2 == *source).map(|t| t.0)))
                    .unwrap_or(0.0);
        }
        let mut lat: Vec<f64> = answers.iter().map(|a| a.latency_ms).collect();
        if !lat.is_empty() {
            lat.sort_by(f64::total_cmp);
            self.p50_latency_ms = lat[lat.len() / 2];
            self.p99_latency_ms = lat[((lat.len() as f64 - 1.0) * 0.99).round() as usize];
        }
    }
}

/// The answers' figures day by day.
fn per_day(answers: &[Answer]) -> Vec<DayStats> {
    let mut by_day: BTreeMap<String, Vec<&Answer>> = BTreeMap::new();
    for a in answers {
        by_day.entry(day_of(a.at_ms)).or_default().push(a);
    }
    by_day
        .into_iter()
        .map(|(day, list)| {
            let mut scores: Vec<f64> = list.iter().filter_map(|a| a.top.as_ref().map(|t| t.0)).collect();
            let exists = list.iter().filter(|a| a.top.as_ref().is_some_and(|t| t.1 == "exists")).count();
            let mut lat: Vec<f64> = list.iter().map(|a| a.latency_ms).collect();
            let n = scores.len();
            DayStats {
                day,
                queries: list.len(),
                mean_top_base_score: mean(scores.iter().copied()).unwrap_or(0.0),
                median_top_base_score: median(&mut scores),
                exists_at_rank_1: if n > 0 { exists as f64 / n as f64 } else { 0.0 },
                p50_latency_ms: median(&mut lat),
            }
        })
        .collect()
}

/// Statistics of the database at `db` with its event log in `log_dir`.
pub async fn collect(config: &crate::Config, log_dir: Option<&Path>, days: Option<u32>) -> Result<Stats> {
    let mut stats = Stats::default();
    let mut events = Vec::new();
    let remote =
        crate::replication::remote::Remote::of(&config.db, &config.storage).map_err(crate::Error::Config)?;
    match (&remote, log_dir) {
        // Every machine's shipped events (this one's included, at most a shipment behind).
        (Some(r), None) | (Some(r), Some(_)) if log_dir == config.event_log_dir().as_deref() => {
            // The window and the one before it (the drift), when days are asked for.
            let span = days.map(|d| std::time::Duration::from_secs(2 * u64::from(d) * 86_400));
            events = crate::replication::shipping::shipped(r, span).await.map_err(crate::Error::Pipeline)?;
            stats.logs.push(format!("{}/_cairn/events (every machine)", r.uri));
        }
        _ => {
            for f in log_dir.map(log_files).unwrap_or_default() {
                events.extend(crate::core::log::read_log(&f)?);
                stats.logs.push(f.display().to_string());
            }
        }
    }
    let (queries, mut failing) = from_events(&events, days);
    stats.queries = queries;
    let database = config.database().await?;
    for id in database.source_ids().await? {
        let store = database.open_existing(&id).await?;
        let (pages, chunks) = store.counts().await?;
        let mut claims: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for n in store.names().await? {
            for a in n.aliases_norm.iter().chain([&n.title_norm, &n.file_name_norm]) {
                claims.entry(a.clone()).or_default().insert(n.slug.clone());
            }
        }
        let alias_collisions = claims
            .into_iter()
            .filter(|(name, s)| s.len() > 1 && !name.is_empty())
            .map(|(name, s)| Collision { name, slugs: s.into_iter().collect() })
            .collect();
        stats.sources.push(SourceStats {
            source: id.clone(),
            pages,
            chunks,
            failing: failing.remove(&id).map(|m| m.into_values().collect()).unwrap_or_default(),
            alias_collisions,
        });
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{QueryAnswered, TopResult};

    fn answered(ts: u64, score: f32, safety: &str) -> Event {
        Event {
            seq: 0,
            ts,
            source: "_queries".into(),
            kind: EventKind::QueryAnswered(Box::new(QueryAnswered {
                query: "q".into(),
                mode: "balanced".into(),
                results: 1,
                top: Some(TopResult {
                    source: "s".into(),
                    slug: "a".into(),
                    base_score: score,
                    score,
                    evidence: vec![],
                    create_safety: safety.into(),
                }),
                candidates: Default::default(),
                degraded: vec![],
                alias_collisions: 0,
                scoring_version: "v".into(),
                latency_ms: 5.0,
                pending_changes: Some(0),
                unix_ms: None,
            })),
        }
    }

    #[test]
    fn rank_one_scores_are_grouped_by_day_so_a_drift_shows() {
        let start = |ms| Event {
            seq: 0,
            ts: 0,
            source: "_system".into(),
            kind: EventKind::SystemStarted { unix_ms: ms, sources: vec![] },
        };
        let day = 86_400_000;
        let events = vec![
            start(1_796_000_000_000),
            answered(0, 0.9, "exists"),
            answered(10, 0.7, "unknown"),
            start(1_796_000_000_000 + day),
            answered(43_200_000, 0.5, "unknown"),
        ];
        let (q, _) = from_events(&events, None);
        assert_eq!(q.answered, 3);
        assert_eq!(q.days.len(), 2);
        assert!((q.days[0].mean_top_base_score - 0.8).abs() < 1e-6);
        assert!((q.days[0].exists_at_rank_1 - 0.5).abs() < 1e-9);
        assert!(q.days[1].mean_top_base_score < q.days[0].mean_top_base_score);
        assert_eq!(q.days[0].day, "2026-11-30");
        // The last day against the day before: the drift is negative.
        let (w, _) = from_events(&events, Some(1));
        let d = w.drift.unwrap();
        assert_eq!(w.answered, 1);
        assert!((d.change.unwrap() + 0.3).abs() < 1e-6, "{d:?}");
    }

    #[test]
    fn empty_answers_are_counted_by_cause_and_rank_one_scores_by_source() {
        let empty = |candidates: usize, degraded: &[&str], pending: u64| {
            let mut e = answered(0, 0.0, "unknown");
            if let EventKind::QueryAnswered(a) = &mut e.kind {
                a.top = None;
                a.results = 0;
                a.candidates = [("s".to_string(), candidates)].into();
                a.degraded = degraded.iter().map(|d| d.to_string()).collect();
                a.pending_changes = Some(pending);
            }
            e
        };
        let mut other = answered(0, 0.2, "unknown");
        if let EventKind::QueryAnswered(a) = &mut other.kind {
            a.top.as_mut().unwrap().source = "t".into();
        }
        let events = vec![
            answered(0, 0.9, "exists"),
            answered(0, 0.5, "probable"),
            other,
            empty(4, &[], 0),
            empty(0, &[], 0),
            empty(0, &[], 2),
            empty(0, &["source t"], 2),
        ];
        let (q, _) = from_events(&events, None);
        assert_eq!(q.empty, 4);
        let causes: Vec<(&str, usize)> = q.empty_by_cause.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            causes,
            [("below_relevance_floor", 1), ("degraded", 1), ("no_candidates", 1), ("pending_changes", 1)]
        );
        assert_eq!((q.by_source["s"].queries, q.by_source["t"].queries), (2, 1));
        assert!((q.by_source["s"].mean_top_base_score - 0.7).abs() < 1e-6);
        assert_eq!(q.by_source["t"].top_score_buckets["<0.3"], 1);
        assert_eq!(q.by_mode["balanced"].queries, 7);
    }

    #[test]
    fn a_failure_is_forgotten_once_the_file_indexes() {
        let ev = |kind| Event { seq: 0, ts: 0, source: "s".into(), kind };
        let events = vec![
            ev(EventKind::PageFailed { path: "a.md".into(), kind: "not_utf8".into(), reason: "r".into() }),
            ev(EventKind::PageFailed { path: "b.md".into(), kind: "too_large".into(), reason: "r".into() }),
            ev(EventKind::PageIndexed {
                path: "a.md".into(),
                slug: "a".into(),
                chunks: 1,
                version: 2,
                vectors_pending: 0,
            }),
        ];
        let (_, failing) = from_events(&events, None);
        let left: Vec<&str> = failing["s"].keys().map(String::as_str).collect();
        assert_eq!(left, ["b.md"]);
    }
}

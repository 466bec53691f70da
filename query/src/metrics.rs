//! Retrieval metrics for evaluation: Hit@k, MRR@10, Recall@k, nDCG@10 (graded where grades
//! exist), and the share of queries with no forbidden page in the top 3.

use std::collections::{BTreeMap, HashMap};

/// One judged query (the shared eval format; page ids already turned into slugs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Judged {
    pub id: String,
    pub family: String,
    pub query: String,
    pub relevant: Vec<String>,
    pub forbidden: Vec<String>,
    /// Gain per relevant slug (1 for each relevant slug when absent).
    pub grades: HashMap<String, f64>,
}

/// Metric values (each the mean over the queries it applies to).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Metrics {
    pub hit_at_1: f64,
    pub hit_at_3: f64,
    pub mrr_at_10: f64,
    pub recall_at_10: f64,
    pub recall_at_100: f64,
    pub ndcg_at_10: f64,
    pub forbidden_clean_at_3: f64,
}

/// The metrics of one query's ranking (slugs, best first).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct QueryScore {
    /// `None` for a query with only `forbidden` pages.
    pub relevance: Option<Metrics>,
    /// `None` for a query without `forbidden` pages.
    pub forbidden_clean: Option<bool>,
}

pub fn score(q: &Judged, ranking: &[String]) -> QueryScore {
    let forbidden_clean =
        (!q.forbidden.is_empty()).then(|| !ranking.iter().take(3).any(|s| q.forbidden.contains(s)));
    if q.relevant.is_empty() {
        return QueryScore { relevance: None, forbidden_clean };
    }
    let first = ranking.iter().position(|s| q.relevant.contains(s));
    let hit = |k: usize| if first.is_some_and(|p| p < k) { 1.0 } else { 0.0 };
    let recall = |k: usize| {
        ranking.iter().take(k).filter(|s| q.relevant.contains(s)).count() as f64 / q.relevant.len() as f64
    };
    let gain =
        |s: &String| if q.relevant.contains(s) { q.grades.get(s).copied().unwrap_or(1.0) } else { 0.0 };
    let dcg: f64 = ranking.iter().take(10).enumerate().map(|(i, s)| gain(s) / ((i + 2) as f64).log2()).sum();
    let mut ideal: Vec<f64> = q.relevant.iter().map(gain).collect();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let idcg: f64 = ideal.iter().take(10).enumerate().map(|(i, g)| g / ((i + 2) as f64).log2()).sum();
    let m = Metrics {
        hit_at_1: hit(1),
        hit_at_3: hit(3),
        mrr_at_10: first.filter(|p| *p < 10).map_or(0.0, |p| 1.0 / (p + 1) as f64),
        recall_at_10: recall(10),
        recall_at_100: recall(100),
        ndcg_at_10: if idcg > 0.0 { dcg / idcg } else { 0.0 },
        forbidden_clean_at_3: 0.0,
    };
    QueryScore { relevance: Some(m), forbidden_clean }
}

/// Means over a family (or all queries).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub n: usize,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// Aggregate per-query scores: relevance metrics over queries with `relevant`,
/// `forbidden_clean_at_3` over queries with `forbidden` (1.0 when there are none).
pub fn summarize(scores: &[&QueryScore]) -> Summary {
    let rel: Vec<&Metrics> = scores.iter().filter_map(|s| s.relevance.as_ref()).collect();
    let mean = |f: fn(&Metrics) -> f64| {
        if rel.is_empty() { 0.0 } else { rel.iter().map(|m| f(m)).sum::<f64>() / rel.len() as f64 }
    };
    let forb: Vec<bool> = scores.iter().filter_map(|s| s.forbidden_clean).collect();
    Summary {
        n: scores.len(),
        metrics: Metrics {
            hit_at_1: mean(|m| m.hit_at_1),
            hit_at_3: mean(|m| m.hit_at_3),
            mrr_at_10: mean(|m| m.mrr_at_10),
            recall_at_10: mean(|m| m.recall_at_10),
            recall_at_100: mean(|m| m.recall_at_100),
            ndcg_at_10: mean(|m| m.ndcg_at_10),
            forbidden_clean_at_3: if forb.is_empty() {
                1.0
            } else {
                forb.iter().filter(|c| **c).count() as f64 / forb.len() as f64
            },
        },
    }
}

/// Overall and per-family summaries.
pub fn by_family(queries: &[Judged], scores: &[QueryScore]) -> (Summary, BTreeMap<String, Summary>) {
    let all: Vec<&QueryScore> = scores.iter().collect();
    let mut fams: BTreeMap<String, Vec<&QueryScore>> = BTreeMap::new();
    for (q, s) in queries.iter().zip(scores) {
        fams.entry(q.family.clone()).or_default().push(s);
    }
    (summarize(&all), fams.into_iter().map(|(f, s)| (f, summarize(&s))).collect())
}

impl Metrics {
    /// A metric by its JSON name (for gate files).
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name {
            "hit_at_1" => self.hit_at_1,
            "hit_at_3" => self.hit_at_3,
            "mrr_at_10" => self.mrr_at_10,
            "recall_at_10" => self.recall_at_10,
            "recall_at_100" => self.recall_at_100,
            "ndcg_at_10" => self.ndcg_at_10,
            "forbidden_clean_at_3" => self.forbidden_clean_at_3,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(relevant: &[&str], grades: &[(&str, f64)]) -> Judged {
        Judged {
            relevant: relevant.iter().map(|s| s.to_string()).collect(),
            grades: grades.iter().map(|(s, g)| (s.to_string(), *g)).collect(),
            ..Judged::default()
        }
    }

    fn ranking(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn hit_mrr_recall() {
        let m = score(&judged(&["b", "z"], &[]), &ranking(&["a", "b", "c"])).relevance.unwrap();
        assert_eq!((m.hit_at_1, m.hit_at_3, m.mrr_at_10, m.recall_at_10), (0.0, 1.0, 0.5, 0.5));
    }

    #[test]
    fn graded_ndcg() {
        // Gains 2 and 1; ranked in the ideal order: nDCG 1. Swapped: (1 + 2/log2 3) / (2 + 1/log2 3).
        let q = judged(&["a", "b"], &[("a", 2.0), ("b", 1.0)]);
        assert!((score(&q, &ranking(&["a", "b"])).relevance.unwrap().ndcg_at_10 - 1.0).abs() < 1e-9);
        let swapped = score(&q, &ranking(&["b", "a"])).relevance.unwrap().ndcg_at_10;
        let expect = (1.0 + 2.0 / 3f64.log2()) / (2.0 + 1.0 / 3f64.log2());
        assert!((swapped - expect).abs() < 1e-9);
    }

    #[test]
    fn forbidden_only_queries_count_only_there() {
        let q = Judged { forbidden: vec!["x".into()], ..Judged::default() };
        let clean = score(&q, &ranking(&["a", "b", "c", "x"]));
        let dirty = score(&q, &ranking(&["a", "x"]));
        let hit = score(&judged(&["a"], &[]), &ranking(&["a"]));
        let s = summarize(&[&clean, &dirty, &hit]);
        assert_eq!(s.metrics.forbidden_clean_at_3, 0.5);
        assert_eq!(s.metrics.hit_at_1, 1.0, "relevance metrics only over queries with relevant pages");
    }
}

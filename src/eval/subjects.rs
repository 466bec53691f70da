//! `cairn eval --subjects`: questions about a page's subject, asked the way people ask them
//! ("what is X", "how does X work"), where X is the page's title. The page is the answer; the
//! vault's other pages mention X, often many times. Made from any vault, so the subject rule is
//! measured on vaults it was not written for.

use super::held_out;
use anyhow::Result;
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, normalize_name, read_scanned, rel_string, scan};
use cairn_query::metrics::Judged;
use std::collections::HashMap;
use std::path::Path;

/// The question forms asked of each sampled title: (family, form with `{}` for the title).
pub const FORMS: [(&str, &str); 2] = [("what-is", "what is {}"), ("how-does", "how does {} work")];

/// Questions about one page in `every` of `vault` (the same hash rule `--exists` holds pages out
/// by), each form of [`FORMS`] once. A page is asked about only when its title has a word that
/// is not a stop word and no other page of the vault carries that name (its title, an alias,
/// its file name): otherwise the question has more than one answer.
pub fn subject_queries(vault: &Path, every: u64) -> Result<Vec<Judged>> {
    let report = scan(vault, &PathFilter::new(&ScanOptions::default())?)?;
    let mut pages = Vec::new();
    let mut carriers: HashMap<String, usize> = HashMap::new();
    for f in &report.files {
        let rel = rel_string(&f.rel);
        let Ok(page) = read_scanned("x", vault, &report, f, &ParseOptions::default()) else { continue };
        let file = cairn_index::resident::file_name(&rel);
        let mut names: Vec<String> =
            [&page.title, &file].into_iter().chain(&page.aliases).map(|n| normalize_name(n)).collect();
        names.sort();
        names.dedup();
        for n in names {
            *carriers.entry(n).or_default() += 1;
        }
        if held_out(&rel, every) {
            pages.push((page.title, page.slug));
        }
    }
    let mut out = Vec::new();
    for (title, slug) in pages {
        let named_once = carriers.get(&normalize_name(&title)) == Some(&1);
        if !named_once || cairn_query::layers::terms(&title).is_empty() {
            continue;
        }
        for (family, form) in FORMS {
            out.push(Judged {
                id: format!("{slug}/{family}"),
                family: family.to_string(),
                query: form.replace("{}", &title),
                relevant: vec![slug.clone()],
                forbidden: Vec::new(),
                grades: HashMap::new(),
            });
        }
    }
    Ok(out)
}

//! `cairn eval --typos`: titles of a vault with one typo each, asked as queries; the page is the
//! answer. One edit of the kinds people make at a keyboard (Damerau 1964 found most misspellings
//! to be one of them): a letter dropped, doubled, swapped with its neighbour, or struck on a
//! neighbouring key. Each sampled title gets one, chosen and placed by a hash of its slug, so
//! the set is the same on every run and was not picked to suit the lane.
//!
//! A typo that makes another page's name (its title, an alias, its file name) is left out: that
//! query names the other page, and `exists` on it is right.

use super::held_out;
use anyhow::Result;
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, normalize_name, read_scanned, rel_string, scan};
use cairn_query::metrics::Judged;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The kinds of typo, as the query families are named.
pub const KINDS: [&str; 4] = ["dropped", "doubled", "swapped", "neighbour"];

/// The keys around each letter on a QWERTY keyboard (same row and the rows above and below).
fn neighbours(c: char) -> &'static str {
    match c {
        'q' => "wa",
        'w' => "qeas",
        'e' => "wrsd",
        'r' => "etdf",
        't' => "ryfg",
        'y' => "tugh",
        'u' => "yihj",
        'i' => "uojk",
        'o' => "ipkl",
        'p' => "ol",
        'a' => "qwsz",
        's' => "weadzx",
        'd' => "ersfxc",
        'f' => "rtdgcv",
        'g' => "tyfhvb",
        'h' => "yugjbn",
        'j' => "uihknm",
        'k' => "iojlm",
        'l' => "opk",
        'z' => "asx",
        'x' => "zsdc",
        'c' => "xdfv",
        'v' => "cfgb",
        'b' => "vghn",
        'n' => "bhjm",
        'm' => "njk",
        _ => "",
    }
}

/// A stable 64-bit hash of a string (FNV-1a): the same typo on every run and machine.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// `title` with one typo of kind `KINDS[seed % 4]` at a letter chosen by `seed`, and the kind;
/// `None` when the title has no letter to put it at.
pub fn misspell(title: &str, seed: u64) -> Option<(String, &'static str)> {
    let chars: Vec<char> = title.chars().collect();
    let letters: Vec<usize> = (0..chars.len()).filter(|&i| chars[i].is_ascii_alphabetic()).collect();
    if letters.is_empty() {
        return None;
    }
    let kind = KINDS[(seed % 4) as usize];
    let at = letters[((seed / 4) % letters.len() as u64) as usize];
    let mut out = chars.clone();
    match kind {
        "dropped" => {
            out.remove(at);
        }
        "doubled" => out.insert(at, chars[at]),
        "swapped" => {
            // With the next letter; the last letter swaps with the one before it.
            let other = if at + 1 < chars.len() && chars[at + 1].is_ascii_alphabetic() {
                at + 1
            } else if at > 0 && chars[at - 1].is_ascii_alphabetic() {
                at - 1
            } else {
                return misspell(title, seed + 1);
            };
            if chars[at] == chars[other] {
                return misspell(title, seed + 1);
            }
            out.swap(at, other);
        }
        _ => {
            let near = neighbours(chars[at].to_ascii_lowercase());
            let pick = near.chars().nth(((seed / 64) % near.len().max(1) as u64) as usize)?;
            out[at] = if chars[at].is_ascii_uppercase() { pick.to_ascii_uppercase() } else { pick };
        }
    }
    Some((out.into_iter().collect(), kind))
}

/// One title in `every` of `vault` (the pages `--exists` holds out) with a typo, as judged
/// queries (family: the kind of typo). Titles shared by several pages are left out (the query
/// has more than one answer), and so are typos that make another page's name.
pub fn typo_queries(vault: &Path, every: u64) -> Result<Vec<Judged>> {
    let report = scan(vault, &PathFilter::new(&ScanOptions::default())?)?;
    let mut names: HashMap<String, usize> = HashMap::new();
    let mut sampled = Vec::new();
    for f in &report.files {
        let rel = rel_string(&f.rel);
        let Ok(page) = read_scanned("x", vault, &report, f, &ParseOptions::default()) else { continue };
        let file = cairn_index::resident::file_name(&rel);
        let own: HashSet<String> = [&page.title, &file, &page.slug]
            .into_iter()
            .chain(&page.aliases)
            .map(|n| normalize_name(n))
            .collect();
        for n in own {
            *names.entry(n).or_default() += 1;
        }
        if held_out(&rel, every) {
            sampled.push((page.title, page.slug));
        }
    }
    let mut out = Vec::new();
    for (title, slug) in sampled {
        if names.get(&normalize_name(&title)) != Some(&1) {
            continue;
        }
        let Some((query, kind)) = misspell(&title, fnv(&slug)) else { continue };
        // A one-letter title dropped to nothing asks nothing; a typo that is a name asks for it.
        if !query.chars().any(char::is_alphanumeric) || names.contains_key(&normalize_name(&query)) {
            continue;
        }
        out.push(Judged {
            id: format!("{slug}/{kind}"),
            family: kind.to_string(),
            query,
            relevant: vec![slug],
            forbidden: Vec::new(),
            grades: HashMap::new(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_one_edit_of_the_title() {
        let title = "Stack overflow";
        let mut kinds = HashSet::new();
        for seed in 0..64 {
            let (typo, kind) = misspell(title, seed).unwrap();
            kinds.insert(kind);
            let d = cairn_ingest::fuzzy::distance_within(&typo.to_lowercase(), &title.to_lowercase(), 2);
            assert_eq!(d, Some(1), "{seed}: {typo} ({kind})");
        }
        assert_eq!(kinds.len(), 4);
        assert_eq!(misspell("42", 0), None);
        // The same seed, the same typo.
        assert_eq!(misspell(title, fnv("stack-overflow")), misspell(title, fnv("stack-overflow")));
    }

    #[test]
    fn typos_that_name_another_page_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| std::fs::write(dir.path().join(rel), text).unwrap();
        // Every page is sampled (every = 1).
        write("kubernetes.md", "# Kubernetes\n\nContainers.\n");
        write("ab.md", "# Ab\n\nA page.\n");
        write("a.md", "# A\n\nA letter.\n");
        let q = typo_queries(dir.path(), 1).unwrap();
        for j in &q {
            assert_ne!(normalize_name(&j.query), "a", "a typo of `Ab` that is the page `A`: {j:?}");
            assert_eq!(j.relevant.len(), 1);
        }
        assert!(q.iter().any(|j| j.relevant[0] == "kubernetes"), "{q:?}");
    }
}

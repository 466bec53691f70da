//! Compound words split by the source's own words: German writes "Zeichenkodierung" where English
//! writes "character encoding", so a query's compound meets a page that says "Kodierung" only
//! once it is read as its parts too.
//!
//! A query word the source holds is read as it is. One it never holds is read as the parts it
//! does hold, if some reading covers the word: of every such reading, the one whose parts'
//! frequencies have the highest geometric mean (Koehn and Knight 2003, "Empirical Methods for
//! Compound Splitting"). Their rule splits a held word too, when its parts are more frequent than
//! it; on German manual pages that read "Namensräume" as "Namen" and "Räume" and lost more than
//! it found (BENCHMARKS.md, "Compound words"). Nothing is fitted to a set: the frequencies are
//! the source's own (how many chunks hold each stem), and the parts join the query's words.
//!
//! The other way round, a query word is also met by the source's compounds that end in it (their
//! head: "Dateisystemtypen" are "Typen"), when what comes before it is a word the source holds.
//! They count as that word, not as words of their own: one term whose occurrences are the word's
//! and its compounds' (written `word|compound|…`, see [`ALSO`]), so a rare compound does not
//! weigh more than the word the query said.

use super::analyzer::{Lang, terms_in};
use lance_tokenizer::Language;

/// A part is at least this many characters (shorter ones, "ort", "tag", are more often the
/// start or end of an unrelated word than a word of the compound).
const MIN_PART: usize = 4;
/// At most this many parts (a German word rarely joins more).
const MAX_PARTS: usize = 4;
/// Linking letters a part may end with before the next one ("Verwaltung-s-vorgang",
/// "Funktion-en-namen"), tried with and without them.
const LINKS: [&str; 5] = ["s", "es", "n", "en", "e"];

/// Joins a query word and the compounds that end in it into one term (`Bm25::scores` reads the
/// occurrences of each); the analyzer never makes a term holding it.
pub const ALSO: char = '|';

/// A query's terms as a source reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryTerms {
    /// Its words, through the source's analyzer.
    pub words: Vec<String>,
    /// The parts of its compound words the source holds (see [`super::compounds`]), those not
    /// among `words`.
    pub parts: Vec<String>,
    /// Words of `words` with the source's compounds that end in them.
    pub heads: Vec<(String, Vec<String>)>,
}

impl QueryTerms {
    /// A query's words through `lang`'s analyzer, with no parts (no source's words to split by).
    pub fn plain(lang: Lang, query: &str) -> Self {
        Self { words: terms_in(lang, query), parts: Vec::new(), heads: Vec::new() }
    }

    /// Words (each with the compounds that end in it, as one term) and parts: what a page is
    /// scored against.
    pub fn all(&self) -> Vec<String> {
        let words = self.words.iter().map(|w| match self.heads.iter().find(|(h, _)| h == w) {
            Some((_, compounds)) => std::iter::once(w.as_str())
                .chain(compounds.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(&ALSO.to_string()),
            None => w.clone(),
        });
        words.chain(self.parts.iter().cloned()).collect()
    }

    /// Only the words, as the analyzer reads them (the rule off).
    pub fn words_only(mut self) -> Self {
        self.parts.clear();
        self.heads.clear();
        self
    }
}

/// Whether `lang` writes its compounds as one word (the Germanic languages but English).
pub fn closed_compounds(lang: Lang) -> bool {
    matches!(
        lang,
        Lang::Snowball(
            Language::German | Language::Dutch | Language::Swedish | Language::Danish | Language::Norwegian
        )
    )
}

/// The stems of the parts `word` (one word, lower case, as written) is read as: empty when the
/// source holds the word itself or no reading covers it. `df` is how many of the source's
/// documents hold a stem.
pub fn split(lang: Lang, word: &str, df: &impl Fn(&str) -> usize) -> Vec<String> {
    let chars: Vec<char> = word.chars().collect();
    if chars.len() < 2 * MIN_PART {
        return Vec::new();
    }
    if stem(lang, word).is_none_or(|s| df(&s) > 0) {
        return Vec::new();
    }
    let mut best: (f64, Vec<String>) = (0.0, Vec::new());
    let mut parts = Vec::new();
    segment(lang, &chars, df, &mut parts, &mut best);
    best.1
}

/// Every reading of `rest` as parts after `parts` (each a stem with its frequency), keeping in
/// `best` the one of two or more parts with the highest geometric mean.
fn segment(
    lang: Lang,
    rest: &[char],
    df: &impl Fn(&str) -> usize,
    parts: &mut Vec<(String, usize)>,
    best: &mut (f64, Vec<String>),
) {
    // The rest as the last part.
    if !parts.is_empty()
        && rest.len() >= MIN_PART
        && let Some(last) = known(lang, &rest.iter().collect::<String>(), df)
    {
        parts.push(last);
        let mean = (parts.iter().map(|(_, n)| (*n as f64).ln()).sum::<f64>() / parts.len() as f64).exp();
        if mean > best.0 {
            *best = (mean, parts.iter().map(|(s, _)| s.clone()).collect());
        }
        parts.pop();
    }
    if parts.len() + 1 >= MAX_PARTS {
        return;
    }
    for end in MIN_PART..=rest.len().saturating_sub(MIN_PART) {
        let head: String = rest[..end].iter().collect();
        if let Some(part) = leading_part(lang, &head, df) {
            parts.push(part);
            segment(lang, &rest[end..], df, parts, best);
            parts.pop();
        }
    }
}

/// The source's compounds that end in one of `words` (stems of at least four letters), by word:
/// each a term `df` finds, whose head is the word and whose rest is a word the source holds (with
/// a linking letter or not). One pass over the source's `terms`, a lookup for each length of the
/// words wanted.
pub fn heads<'a>(
    lang: Lang,
    words: &[String],
    terms: impl Iterator<Item = &'a str>,
    df: &impl Fn(&str) -> usize,
) -> Vec<(String, Vec<String>)> {
    let wanted: std::collections::HashSet<&str> =
        words.iter().map(String::as_str).filter(|w| w.chars().count() >= MIN_PART).collect();
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    if wanted.is_empty() {
        return out;
    }
    // Only the byte lengths of the words wanted can end a term in one of them.
    let mut lengths: Vec<usize> = wanted.iter().map(|w| w.len()).collect();
    lengths.sort_unstable();
    lengths.dedup();
    for term in terms {
        for &len in lengths.iter().filter(|&&len| len < term.len()) {
            let at = term.len() - len;
            if !term.is_char_boundary(at) {
                continue;
            }
            let (rest, head) = term.split_at(at);
            if rest.chars().count() < MIN_PART || !wanted.contains(head) || df(term) == 0 {
                continue;
            }
            if leading_part(lang, rest, df).is_some() {
                match out.iter_mut().find(|(w, _)| w == head) {
                    Some((_, compounds)) => compounds.push(term.to_string()),
                    None => out.push((head.to_string(), vec![term.to_string()])),
                }
            }
        }
    }
    for (_, compounds) in &mut out {
        compounds.sort();
    }
    out.sort();
    out
}

/// A part that comes before another: `text` itself, or `text` without a linking letter at its
/// end ([`LINKS`]), whichever the source holds first (of at least [`MIN_PART`] letters).
fn leading_part(lang: Lang, text: &str, df: &impl Fn(&str) -> usize) -> Option<(String, usize)> {
    known(lang, text, df).or_else(|| {
        LINKS.iter().find_map(|l| {
            text.strip_suffix(l).filter(|t| t.chars().count() >= MIN_PART).and_then(|t| known(lang, t, df))
        })
    })
}

/// `text`'s stem and how many documents hold it, when some do (a stop word has none).
fn known(lang: Lang, text: &str, df: &impl Fn(&str) -> usize) -> Option<(String, usize)> {
    stem(lang, text).map(|s| (df(&s), s)).filter(|(n, _)| *n > 0).map(|(n, s)| (s, n))
}

fn stem(lang: Lang, word: &str) -> Option<String> {
    let mut t = terms_in(lang, word);
    (t.len() == 1).then(|| t.remove(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn de() -> Lang {
        Lang::parse("de").unwrap()
    }

    /// A source's stems and how many documents hold each, from words as written.
    fn source(words: &[(&str, usize)]) -> HashMap<String, usize> {
        words.iter().map(|(w, n)| (stem(de(), w).unwrap(), *n)).collect()
    }

    #[test]
    fn a_compound_the_source_lacks_is_read_as_the_parts_it_holds() {
        let held = source(&[("Zeichen", 12), ("Kodierung", 5), ("Verwaltung", 3), ("Schlüssel", 7)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        assert_eq!(
            split(de(), "zeichenkodierung", &df),
            vec![stem(de(), "zeichen").unwrap(), stem(de(), "kodierung").unwrap()]
        );
        assert_eq!(
            split(de(), "schlüsselverwaltungsaufgaben", &df),
            Vec::<String>::new(),
            "no reading covers every letter: 'aufgaben' is not held"
        );
        // Three parts, with a linking s between the second and the third.
        let held = source(&[("Schlüssel", 7), ("Verwaltung", 3), ("Aufgabe", 2)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        let parts = ["schlüssel", "verwaltung", "aufgaben"].map(|w| stem(de(), w).unwrap());
        assert_eq!(split(de(), "schlüsselverwaltungsaufgaben", &df), parts);
    }

    #[test]
    fn a_compound_the_source_holds_stays_whole_and_the_likelier_reading_wins() {
        // Held, even rarely: the source's own word is what the query meets.
        let held = source(&[("Dateisystem", 1), ("Datei", 30), ("System", 20)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        assert!(split(de(), "dateisystem", &df).is_empty());
        let held = source(&[("Datei", 30), ("System", 20)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        assert_eq!(split(de(), "dateisystem", &df).len(), 2);
        // Two readings cover "Staubecken": Stau + Becken (a reservoir), Staub + Ecken (dusty
        // corners). The one whose parts the source holds more often wins.
        let stems = |a: &str, b: &str| vec![stem(de(), a).unwrap(), stem(de(), b).unwrap()];
        let held = source(&[("Stau", 3), ("Becken", 4), ("Staub", 20), ("Ecken", 30)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        assert_eq!(split(de(), "staubecken", &df), stems("staub", "ecken"));
        let held = source(&[("Stau", 30), ("Becken", 40), ("Staub", 2), ("Ecken", 3)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        assert_eq!(split(de(), "staubecken", &df), stems("stau", "becken"));
        // A word too short for two parts of four letters is not split, whatever the source holds.
        assert!(split(de(), "haustür", &|_| 9).is_empty());
        assert!(!closed_compounds(Lang::English));
        assert!(closed_compounds(de()));
    }

    #[test]
    fn a_word_is_met_by_the_compounds_that_end_in_it_when_their_rest_is_a_word_too() {
        let held = source(&[("Gerätedateien", 2), ("Geräte", 5), ("Dateien", 9), ("Quelldateien", 1)]);
        let df = |s: &str| held.get(s).copied().unwrap_or(0);
        let word = |w: &str| stem(de(), w).unwrap();
        let found = heads(de(), &[word("Dateien")], held.keys().map(String::as_str), &df);
        // "Quelldateien" ends in it too, but "Quell" is no word of the source's.
        assert_eq!(found, vec![(word("Dateien"), vec![word("Gerätedateien")])]);
        let terms = QueryTerms { words: vec![word("Dateien")], parts: vec![], heads: found };
        assert_eq!(terms.all(), vec![format!("{}{ALSO}{}", word("Dateien"), word("Gerätedateien"))]);
        assert_eq!(terms.words_only().all(), vec![word("Dateien")]);
    }
}

//! Names the vault teaches its pages. A short form its text defines ("Application Protocol Data
//! Unit (APDU)", see [`cairn_ingest::definitions`]) is taught to the page named by the long
//! form; a link's display text (`[[Page|display text]]`, `[display text](page.md)`) to the page
//! it links. A learnt name is weaker than a page's own names (title, aliases, file name, id): a
//! name some page has as its own is never looked up here. And it names a page only when more than
//! half of the pages that teach it point there: a display text such as "notes" that links to
//! many pages names none of them.

use super::analyzer::{Lang, terms_in};
use super::slots::ResidentIndex;
use crate::store::PageRecord;
use cairn_ingest::normalize_name;
use std::collections::{BTreeSet, HashMap};

/// How a name was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Teaching {
    /// A short form defined in a page's text.
    Acronym,
    /// A link's display text.
    LinkText,
}

/// What one page teaches: a name, and the name of the page it is taught to (both normalised).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lesson {
    pub name: String,
    pub target: String,
    pub how: Teaching,
}

/// A name as the index holds it: who taught it, to which page name, how.
#[derive(Debug)]
pub(super) struct Taught {
    pub(super) by: u32,
    pub(super) target: Box<str>,
    pub(super) how: Teaching,
}

/// A page a name was learnt for, and the pages that taught it (by slug, sorted).
#[derive(Debug, Clone, PartialEq)]
pub struct LearntPage {
    pub page: PageRecord,
    pub how: Teaching,
    pub taught_by: Vec<String>,
}

/// A name worth learning: it has a word that is not a stop word, and it is not the name it is
/// taught to already.
fn worth(name: &str, target: &str, lang: Lang) -> bool {
    !name.is_empty() && name != target && !terms_in(lang, name).is_empty()
}

/// The lessons of a page: the display texts of its links to pages (not to a heading, not
/// embeds), and the short forms its chunks' `texts` define. Each once, sorted.
pub fn lessons<'a>(record: &PageRecord, texts: impl Iterator<Item = &'a str>, lang: Lang) -> Vec<Lesson> {
    let links: Vec<cairn_ingest::Link> = serde_json::from_str(record.links.text()).unwrap_or_default();
    let mut out: Vec<Lesson> = Vec::new();
    for l in links.iter().filter(|l| !l.embed && l.heading.is_none()) {
        let Some(label) = &l.label else { continue };
        let path = l.target.strip_suffix(".md").unwrap_or(&l.target);
        let (name, target) = (normalize_name(label), normalize_name(path));
        let file = path.rsplit('/').next().map(normalize_name).unwrap_or_default();
        if worth(&name, &target, lang) && name != file {
            out.push(Lesson { name, target, how: Teaching::LinkText });
        }
    }
    for text in texts {
        for d in cairn_ingest::definitions::definitions(text) {
            let (name, target) = (normalize_name(&d.short), normalize_name(&d.long));
            if worth(&name, &target, lang) {
                out.push(Lesson { name, target, how: Teaching::Acronym });
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

impl ResidentIndex {
    /// Hold what page slot `doc` teaches.
    pub(super) fn learn(&mut self, doc: u32, lessons: &[Lesson]) {
        for l in lessons {
            let taught = Taught { by: doc, target: l.target.as_str().into(), how: l.how };
            self.learnt.entry(l.name.as_str().into()).or_default().push(taught);
        }
    }

    /// Forget what page slot `doc` taught.
    pub(super) fn unlearn(&mut self, doc: u32, lessons: &[Lesson]) {
        for l in lessons {
            if let Some(taught) = self.learnt.get_mut(l.name.as_str()) {
                taught.retain(|t| t.by != doc);
                if taught.is_empty() {
                    self.learnt.remove(l.name.as_str());
                }
            }
        }
    }

    /// The page a normalised name was learnt for, if no page has it as its own name and more
    /// than half of the pages that teach it point at that one page (a target name that several
    /// pages share points at none).
    pub fn learnt(&self, normalized: &str) -> Option<LearntPage> {
        if self.by_name.contains_key(normalized) {
            return None;
        }
        let taught = self.learnt.get(normalized)?;
        let teachers: BTreeSet<u32> = taught.iter().map(|t| t.by).collect();
        let mut votes: HashMap<u32, (BTreeSet<u32>, Teaching)> = HashMap::new();
        for t in taught {
            let [doc] = self.by_name.get(&*t.target).map(Vec::as_slice).unwrap_or_default() else { continue };
            let v = votes.entry(*doc).or_insert_with(|| (BTreeSet::new(), t.how));
            v.0.insert(t.by);
            v.1 = v.1.min(t.how);
        }
        let (doc, (by, how)) =
            votes.into_iter().max_by_key(|(doc, (by, _))| (by.len(), std::cmp::Reverse(*doc)))?;
        if by.len() * 2 <= teachers.len() {
            return None;
        }
        let slug = self.page_slots.get(doc as usize)?.as_deref()?;
        let page = self.record(self.pages.get(slug)?);
        let mut taught_by: Vec<String> =
            by.iter().filter_map(|d| self.page_slots.get(*d as usize)?.clone()).collect();
        taught_by.sort();
        Some(LearntPage { page, how, taught_by })
    }

    /// Bytes the learnt names hold.
    pub(super) fn learnt_bytes(&self) -> usize {
        self.learnt
            .iter()
            .map(|(name, taught)| {
                name.len()
                    + 16
                    + taught.iter().map(|t| t.target.len() + std::mem::size_of::<Taught>()).sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resident::{Prepared, PreparedPage, ResidentIndex};
    use crate::store::{ChunkHit, Json, StoredChunk};

    /// A page with one chunk of `text` and links (target, display text).
    fn page(slug: &str, title: &str, text: &str, links: &[(&str, &str)]) -> PreparedPage {
        let mut record = PageRecord::named(slug, title, &[], 1);
        let links: Vec<serde_json::Value> = links
            .iter()
            .map(|(t, l)| match t.split_once('#') {
                Some((t, h)) => serde_json::json!({"target": t, "heading": h, "label": l}),
                None => serde_json::json!({"target": t, "label": l}),
            })
            .collect();
        record.links = Json::of(&links);
        let chunk = StoredChunk {
            hit: ChunkHit::numbered(slug, 0, title, text),
            text_hash: format!("h:{slug}"),
            vector: None,
        };
        PreparedPage::stored(record, vec![chunk], crate::resident::Lang::English)
    }

    fn index(pages: Vec<PreparedPage>) -> ResidentIndex {
        let mut i = ResidentIndex::default();
        i.apply(Prepared::pages(pages));
        i
    }

    fn learnt_slug(i: &ResidentIndex, name: &str) -> Option<(String, Teaching, Vec<String>)> {
        i.learnt(name).map(|l| (l.page.slug, l.how, l.taught_by))
    }

    #[test]
    fn a_short_form_defined_anywhere_names_the_page_of_its_long_form() {
        let i = index(vec![
            page("apdu-page", "Application Protocol Data Unit", "The unit of exchange.", &[]),
            page("cards", "Smart cards", "Each Application Protocol Data Unit (APDU) is answered.", &[]),
        ]);
        assert_eq!(
            learnt_slug(&i, "apdu"),
            Some(("apdu-page".into(), Teaching::Acronym, vec!["cards".into()]))
        );
        assert_eq!(i.learnt("smart cards"), None, "a page's own name is no learnt name");
    }

    #[test]
    fn link_texts_name_the_page_they_link_when_most_of_them_agree() {
        let i = index(vec![
            page("tides", "Tides", "", &[]),
            page("moon", "Moon", "", &[]),
            page("a", "A", "", &[("Tides", "the pull of the sea"), ("Moon", "notes")]),
            page("b", "B", "", &[("tides.md", "The Pull of the Sea"), ("Tides", "notes")]),
            page("c", "C", "", &[("Moon", "notes"), ("Moon#Phases", "phases"), ("Tides", "tides")]),
        ]);
        let (slug, how, by) = learnt_slug(&i, "the pull of the sea").expect("learnt");
        assert_eq!(
            (slug.as_str(), how, by),
            ("tides", Teaching::LinkText, vec!["a".to_string(), "b".into()])
        );
        // "notes" links to Moon from a and c, to Tides from b: two of three pages is a majority.
        assert_eq!(learnt_slug(&i, "notes").map(|l| l.0), Some("moon".into()));
        assert_eq!(i.learnt("phases"), None, "a link to a heading names the heading, not the page");
        assert_eq!(i.learnt("tides"), None, "a display text equal to the page's name teaches nothing");
        let split = index(vec![
            page("tides", "Tides", "", &[]),
            page("moon", "Moon", "", &[]),
            page("a", "A", "", &[("Tides", "notes")]),
            page("b", "B", "", &[("Moon", "notes")]),
        ]);
        assert_eq!(split.learnt("notes"), None, "half is no majority");
    }

    #[test]
    fn what_a_page_taught_goes_with_it_and_a_snapshot_keeps_it() {
        let mut i = index(vec![
            page("dns-page", "Domain Name System", "", &[]),
            page("net", "Networks", "We ask the Domain Name System (DNS) first.", &[]),
        ]);
        assert_eq!(learnt_slug(&i, "dns").map(|l| l.0), Some("dns-page".into()));
        i.apply(Prepared::pages(vec![
            page("resolver", "Domain Name System", "", &[]),
            page(
                "net",
                "Networks",
                "We ask the Domain Name System (DNS) first.",
                &[("resolver", "name lookup")],
            ),
        ]));
        assert_eq!(learnt_slug(&i, "name lookup").map(|l| l.0), Some("resolver".into()));
        assert_eq!(i.learnt("dns"), None, "two pages named so: the long form names neither");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snapshot");
        let stamp = crate::resident::Stamp {
            chunks_version: 1,
            chunks_written_us: 1,
            pages_version: 1,
            chunk_rows: 3,
            page_rows: 3,
            exact_up_to: crate::vectors::EXACT_VECTORS_UP_TO as u64,
            lang: Default::default(),
        };
        i.save(&path, &stamp).unwrap();
        let back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
        assert_eq!(back.learnt("name lookup"), i.learnt("name lookup"));
        i.apply(Prepared { upserts: vec![], removals: vec!["net".into()] });
        assert_eq!(i.learnt("name lookup"), None, "the page that taught it is gone");
        assert!(i.learnt.is_empty());
    }
}

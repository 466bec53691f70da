//! Sections of a page, by a stable id: a result names the section its best chunk is in, and `get`
//! reads that section alone instead of the whole page.
//!
//! A section's anchor is its heading path below the page's title, each heading slugified as a
//! path segment is, joined by `/` (`Compiler › History › Early compilers` →
//! `history/early-compilers`), the path the chunker gives the section's chunks. The text before
//! the first heading, and the whole page, have the empty anchor. An anchor changes only when
//! those headings do. Two sections with the same path (a heading repeated under one parent)
//! share an anchor: `get` returns the first.

use crate::chunk::{PATH_SEPARATOR, clip_name};
use crate::markdown::{BlockKind, analyze};
use crate::slug::slugify_segment;

/// The anchor of a section whose heading path (the page's title first) is `heading_path`.
pub fn section_anchor<S: AsRef<str>>(heading_path: &[S]) -> String {
    heading_path.iter().skip(1).map(|h| slugify_segment(h.as_ref())).collect::<Vec<_>>().join("/")
}

/// The anchor of a heading path as stored (headings joined by [`PATH_SEPARATOR`]).
pub fn anchor_of_stored(heading_path: &str) -> String {
    section_anchor(&heading_path.split(PATH_SEPARATOR).collect::<Vec<_>>())
}

/// Every section's anchor in a page's body, in order (for an error naming the ones there are).
pub fn anchors(body: &str, title: &str) -> Vec<String> {
    let mut out = Vec::new();
    walk(body, title, |anchor, _, _| {
        if !anchor.is_empty() && !out.iter().any(|a| a == anchor) {
            out.push(anchor.to_string());
        }
        false
    });
    out
}

/// Each heading of the body as the chunker paths it (a leading `# Title` repeating the title is
/// no level): `visit(anchor, level, start)` until it returns true.
fn walk(body: &str, title: &str, mut visit: impl FnMut(&str, u8, usize) -> bool) {
    let mut stack: Vec<(u8, String)> = Vec::new();
    let mut seen_heading = false;
    for block in analyze(body).blocks {
        let BlockKind::Heading(level) = block.kind else { continue };
        let repeats_title = !seen_heading && level == 1 && clip_name(&block.text) == title;
        seen_heading = true;
        if !repeats_title {
            stack.retain(|(l, _)| *l < level);
            stack.push((level, clip_name(&block.text)));
        }
        let anchor = stack.iter().map(|(_, t)| slugify_segment(t)).collect::<Vec<_>>().join("/");
        if visit(&anchor, level, block.range.start) {
            return;
        }
    }
}

/// The section `anchor` of a page's body (its text after the frontmatter) under `title`, with
/// its subsections: from its heading to the next heading of its level or above. The whole body
/// for the empty anchor; `None` when no heading has that anchor.
pub fn section_text<'a>(body: &'a str, title: &str, anchor: &str) -> Option<&'a str> {
    if anchor.is_empty() {
        return Some(body);
    }
    // Its heading, then the next heading of its level or above.
    let mut open: Option<(u8, usize)> = None;
    let mut end = body.len();
    walk(body, title, |a, level, start| match open {
        Some((at, _)) if level <= at => {
            end = start;
            true
        }
        Some(_) => false,
        None => {
            if a == anchor {
                open = Some((level, start));
            }
            false
        }
    });
    open.map(|(_, start)| &body[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ParseOptions, parse_page};

    const BODY: &str = "# Compiler\n\nA program that translates.\n\n## History\n\nFirst ones.\n\n### Early compilers\n\nAUTOCODER, 1952.\n\n## See also\n\nAssembler.\n";

    #[test]
    fn a_section_is_read_by_the_anchor_its_chunks_carry_with_its_subsections() {
        let page = format!("---\ntitle: Compiler\n---\n{BODY}");
        let chunking = crate::ChunkOptions { max_tokens: 8, overlap_tokens: 0, min_tokens: 0 };
        let opts = ParseOptions { chunking, ..Default::default() };
        let parsed = parse_page("s", std::path::Path::new("compiler.md"), page.as_bytes(), &opts).unwrap();
        let chunk_anchors: Vec<String> =
            parsed.chunks.iter().map(|c| section_anchor(&c.heading_path)).collect();
        assert!(chunk_anchors.contains(&"history/early-compilers".to_string()), "{chunk_anchors:?}");
        let history = section_text(BODY, "Compiler", "history").unwrap();
        assert!(history.starts_with("## History") && history.contains("AUTOCODER"), "{history}");
        assert!(!history.contains("See also"), "{history}");
        let early = section_text(BODY, "Compiler", "history/early-compilers").unwrap();
        assert!(early.contains("AUTOCODER") && !early.contains("First ones"), "{early}");
        assert!(section_text(BODY, "Compiler", "see-also").unwrap().contains("Assembler"));
        assert_eq!(section_text(BODY, "Compiler", "no-such-heading"), None);
        assert_eq!(section_text(BODY, "Compiler", ""), Some(BODY));
        assert_eq!(anchors(BODY, "Compiler"), ["history", "history/early-compilers", "see-also"]);
        let stored: Vec<String> = parsed.chunks.iter().map(|c| c.heading_path.join(PATH_SEPARATOR)).collect();
        assert_eq!(stored.iter().map(|h| anchor_of_stored(h)).collect::<Vec<_>>(), chunk_anchors);
    }
}

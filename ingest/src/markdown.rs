//! One pass of `pulldown-cmark` over a page body: its top-level blocks (with byte ranges), the
//! headings, the first `#` heading, the code spans to ignore, and the outgoing links.

use crate::budget::{Budget, OverBudget};
use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, LinkType, Options, Parser, Tag, TagEnd};
use std::ops::Range;

/// Bytes of markdown given to the parser at once. pulldown-cmark holds about 60 bytes per inline
/// item of the block it is parsing, so one 10 MB paragraph of `[` costs 600 MB. A body over this
/// size is parsed in pieces cut at blank lines outside fenced code (where blocks end anyway), or,
/// in a block longer than this, at a line break or a space: memory stays near 64 × this, whatever
/// the file.
pub const SEGMENT_BYTES: usize = 256 * 1024;

/// What a top-level block is, as far as chunking cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    Heading(u8),
    /// Prose: split at sentence boundaries when too long.
    Prose,
    /// Code, tables, HTML: split only at line boundaries.
    Lines,
}

/// A top-level block of the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: BlockKind,
    pub range: Range<usize>,
    /// Heading text (headings only).
    pub text: String,
}

/// An outgoing link: a wikilink (`[[target|label]]`, `![[embed]]`) or a markdown link to a local
/// `.md` file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Link {
    /// The page named, as written (without `#heading`, `|label` or `.md`).
    pub target: String,
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub embed: bool,
}

/// The result of [`analyze`].
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    pub blocks: Vec<Block>,
    /// Text of the first level-1 heading (outside code, by construction).
    pub first_h1: Option<String>,
    pub links: Vec<Link>,
    /// Inline `#tags` of the text (not in code or headings), without the `#`, in order.
    pub tags: Vec<String>,
}

/// Obsidian's inline tags in a piece of text: `#` after a space or a line start (or at the
/// start), then letters, digits, `_`, `-` and `/` (nested tags), with at least one character that
/// is not a digit (`#1984` is not a tag); a trailing `/` is dropped.
pub fn inline_tags(text: &str, out: &mut Vec<String>) {
    let mut prev: Option<char> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let starts = c == '#' && prev.is_none_or(char::is_whitespace);
        prev = Some(c);
        if !starts {
            continue;
        }
        let rest = &text[i + 1..];
        let len: usize = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '/'))
            .map(char::len_utf8)
            .sum();
        let tag = rest[..len].trim_end_matches('/');
        if !tag.is_empty() && tag.chars().any(|c| !c.is_ascii_digit()) && !tag.starts_with('/') {
            out.push(tag.to_string());
        }
        for _ in 0..rest[..len].chars().count() {
            prev = chars.next().map(|(_, c)| c);
        }
    }
}

fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
}

/// Analyse a body (frontmatter already removed, LF line endings).
pub fn analyze(body: &str) -> Analysis {
    analyze_within(body, &Budget::unlimited()).expect("no deadline")
}

/// [`analyze`] within a time budget.
pub fn analyze_within(body: &str, budget: &Budget) -> Result<Analysis, OverBudget> {
    let mut out = Analysis::default();
    let mut code_ranges: Vec<Range<usize>> = Vec::new();
    for seg in segments(body, SEGMENT_BYTES) {
        analyze_segment(&body[seg.clone()], seg.start, budget, &mut out, &mut code_ranges)?;
    }
    let wiki = wikilinks(body, code_ranges, budget)?;
    out.links.splice(0..0, wiki);
    Ok(out)
}

/// One piece of the body, whose ranges start at `base`.
fn analyze_segment(
    text: &str,
    base: usize,
    budget: &Budget,
    out: &mut Analysis,
    code_ranges: &mut Vec<Range<usize>>,
) -> Result<(), OverBudget> {
    let mut walk = SegmentWalk {
        out,
        code_ranges,
        depth: 0,
        block_start: None,
        heading_text: None,
        md_link: None,
        in_code_block: false,
    };
    for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
        budget.tick()?;
        walk.event(event, range.start + base..range.end + base);
    }
    Ok(())
}

/// The walk over one segment's events: the top-level block open, and the heading and link
/// texts being collected.
struct SegmentWalk<'a> {
    out: &'a mut Analysis,
    code_ranges: &'a mut Vec<Range<usize>>,
    depth: usize,
    block_start: Option<(BlockKind, usize)>,
    heading_text: Option<String>,
    /// An inline or reference link's destination and label.
    md_link: Option<(String, String)>,
    in_code_block: bool,
}

impl SegmentWalk<'_> {
    fn event(&mut self, event: Event<'_>, range: Range<usize>) {
        match event {
            Event::Start(tag) => self.start(&tag, range),
            Event::End(tag_end) => self.end(tag_end, range.end),
            Event::Code(t) => {
                self.code_ranges.push(range);
                push_text(&mut self.heading_text, &mut self.md_link, &t);
            }
            Event::Text(t) => {
                if self.heading_text.is_none() && !self.in_code_block {
                    inline_tags(&t, &mut self.out.tags);
                }
                push_text(&mut self.heading_text, &mut self.md_link, &t);
            }
            Event::InlineMath(t) | Event::DisplayMath(t) => {
                push_text(&mut self.heading_text, &mut self.md_link, &t);
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(h) = self.heading_text.as_mut() {
                    h.push(' ');
                }
            }
            Event::Html(_) | Event::InlineHtml(_) if self.depth == 0 => {
                self.out.blocks.push(Block { kind: BlockKind::Lines, range, text: String::new() });
            }
            _ => {}
        }
    }

    fn start(&mut self, tag: &Tag<'_>, range: Range<usize>) {
        if self.depth == 0 {
            let kind = match tag {
                Tag::Heading { level, .. } => {
                    self.heading_text = Some(String::new());
                    BlockKind::Heading(heading_number(*level))
                }
                Tag::CodeBlock(_) | Tag::Table(_) | Tag::HtmlBlock => BlockKind::Lines,
                _ => BlockKind::Prose,
            };
            self.block_start = Some((kind, range.start));
        }
        match tag {
            Tag::CodeBlock(CodeBlockKind::Fenced(_) | CodeBlockKind::Indented) => {
                self.code_ranges.push(range);
                self.in_code_block = true;
            }
            Tag::Link { link_type: LinkType::Inline | LinkType::Reference, dest_url, .. } => {
                self.md_link = Some((dest_url.to_string(), String::new()));
            }
            _ => {}
        }
        self.depth += 1;
    }

    fn end(&mut self, tag_end: TagEnd, end: usize) {
        self.depth = self.depth.saturating_sub(1);
        if matches!(tag_end, TagEnd::CodeBlock) {
            self.in_code_block = false;
        }
        if matches!(tag_end, TagEnd::Link)
            && let Some((dest, label)) = self.md_link.take()
            && let Some(link) = local_markdown_link(&dest, &label)
        {
            self.out.links.push(link);
        }
        if self.depth == 0
            && let Some((kind, start)) = self.block_start.take()
        {
            let text = match kind {
                BlockKind::Heading(level) => {
                    let text = self.heading_text.take().unwrap_or_default().trim().to_string();
                    if level == 1 && self.out.first_h1.is_none() && !text.is_empty() {
                        self.out.first_h1 = Some(text.clone());
                    }
                    text
                }
                _ => String::new(),
            };
            self.out.blocks.push(Block { kind, range: start..end, text });
        }
    }
}

/// A fence line's character and length (` ``` ` or `~~~`, up to three spaces in).
fn fence(line: &str) -> Option<(u8, usize)> {
    let t = line.trim_start_matches(' ');
    if line.len() - t.len() > 3 {
        return None;
    }
    let c = *t.as_bytes().first()?;
    let n = t.bytes().take_while(|&b| b == c).count();
    ((c == b'`' || c == b'~') && n >= 3).then_some((c, n))
}

/// Cut `body` into pieces of at most `max` bytes (see [`SEGMENT_BYTES`]).
fn segments(body: &str, max: usize) -> Vec<Range<usize>> {
    if body.len() <= max {
        return std::iter::once(0..body.len()).collect();
    }
    let mut out = Vec::new();
    let (mut start, mut pos) = (0usize, 0usize);
    // The end of the last blank line outside fenced code: the best place to cut.
    let mut blank: Option<usize> = None;
    let mut open_fence: Option<(u8, usize)> = None;
    for line in body.split_inclusive('\n') {
        pos += line.len();
        match (open_fence, fence(line)) {
            (None, Some(f)) => open_fence = Some(f),
            (Some((c, n)), Some((c2, n2))) if c == c2 && n2 >= n && line.trim().len() == n2 => {
                open_fence = None
            }
            _ => {}
        }
        if open_fence.is_none() && line.trim().is_empty() {
            blank = Some(pos);
        }
        while pos - start > max {
            let cut = match blank.filter(|&b| b > start) {
                Some(b) if b - start <= max => b,
                _ => fallback_cut(body, start, max),
            };
            out.push(start..cut);
            start = cut;
        }
    }
    if start < body.len() {
        out.push(start..body.len());
    }
    out
}

/// Where to cut a run of `max` bytes from `start` with no blank line in it: after its last line
/// break, else after its last space, else at a character boundary.
fn fallback_cut(body: &str, start: usize, max: usize) -> usize {
    let mut end = (start + max).min(body.len());
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    let window = &body[start..end];
    let after = |i: Option<usize>| i.map(|i| start + i + 1).filter(|&c| c > start);
    after(window.rfind('\n')).or_else(|| after(window.rfind(|c: char| c.is_whitespace()))).unwrap_or(
        if end > start { end } else { start + body[start..].chars().next().map_or(1, char::len_utf8) },
    )
}

fn push_text(heading: &mut Option<String>, link: &mut Option<(String, String)>, text: &str) {
    if let Some(h) = heading.as_mut() {
        h.push_str(text);
    }
    if let Some((_, label)) = link.as_mut() {
        label.push_str(text);
    }
}

fn heading_number(level: HeadingLevel) -> u8 {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// `[text](path/to/Note.md#part)` → a link to `path/to/Note`; URLs with a scheme are not pages.
fn local_markdown_link(dest: &str, label: &str) -> Option<Link> {
    if dest.contains("://") || dest.starts_with("mailto:") || dest.starts_with('#') {
        return None;
    }
    let (path, heading) = match dest.split_once('#') {
        Some((p, h)) => (p, Some(h.to_string())),
        None => (dest, None),
    };
    let decoded = percent_encoding::percent_decode_str(path).decode_utf8_lossy();
    let lower = decoded.to_ascii_lowercase();
    let stem = if lower.ends_with(".md") {
        &decoded[..decoded.len() - 3]
    } else if lower.ends_with(".markdown") {
        &decoded[..decoded.len() - 9]
    } else {
        return None;
    };
    let label = label.trim();
    Some(Link {
        target: stem.trim_start_matches("./").to_string(),
        label: (!label.is_empty()).then(|| label.to_string()),
        heading: heading.filter(|h| !h.is_empty()),
        embed: false,
    })
}

/// Wikilinks in the raw body, outside code: `[[target]]`, `[[target|label]]`,
/// `[[target#heading]]`, and embeds `![[…]]`. One pass: a `[[` opens a link, a later `[[` on
/// the same line opens it again, a line break abandons it, `]]` closes it.
fn wikilinks(body: &str, mut code: Vec<Range<usize>>, budget: &Budget) -> Result<Vec<Link>, OverBudget> {
    // Code ranges as disjoint, sorted spans, so "is this in code" is a binary search.
    code.sort_by_key(|r| r.start);
    let mut spans: Vec<Range<usize>> = Vec::with_capacity(code.len());
    for r in code {
        match spans.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => spans.push(r),
        }
    }
    let in_code = |at: usize| {
        let i = spans.partition_point(|r| r.start <= at);
        i > 0 && spans[i - 1].end > at
    };
    let bytes = body.as_bytes();
    let mut links = Vec::new();
    let mut open: Option<usize> = None;
    let mut i = 0;
    while i + 1 < bytes.len() {
        budget.tick()?;
        match (bytes[i], bytes[i + 1]) {
            (b'[', b'[') => {
                open = Some(i);
                i += 2;
                continue;
            }
            (b']', b']') if open.is_some() => {
                let start = open.take().expect("checked");
                if !in_code(start)
                    && let Some(link) = wikilink(&body[start + 2..i], start > 0 && bytes[start - 1] == b'!')
                {
                    links.push(link);
                }
                i += 2;
                continue;
            }
            (b'\n', _) => open = None,
            _ => {}
        }
        i += 1;
    }
    Ok(links)
}

/// The inside of `[[…]]`.
fn wikilink(inner: &str, embed: bool) -> Option<Link> {
    let (target_part, label) = match inner.split_once('|') {
        Some((t, l)) => (t, Some(l.trim().to_string()).filter(|l| !l.is_empty())),
        None => (inner, None),
    };
    let (target, heading) = match target_part.split_once('#') {
        Some((t, h)) => (t.trim(), Some(h.trim().to_string()).filter(|h| !h.is_empty())),
        None => (target_part.trim(), None),
    };
    (!target.is_empty()).then(|| Link { target: target.to_string(), label, heading, embed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(target: &str, label: Option<&str>, heading: Option<&str>, embed: bool) -> Link {
        Link { target: target.into(), label: label.map(Into::into), heading: heading.map(Into::into), embed }
    }

    #[test]
    fn wikilink_forms_and_markdown_links() {
        let body = "See [[Alpha]], [[Beta|the b]], [[Gamma#Part two]] and ![[diagram.png]].\n\
                    Also [*doc*](sub/My%20Note.md#x) and [web](https://x.org/a.md).\n\
                    `[[not a link]]`\n\n```\n[[nor this]]\n```\n";
        let a = analyze(body);
        assert_eq!(
            a.links,
            vec![
                link("Alpha", None, None, false),
                link("Beta", Some("the b"), None, false),
                link("Gamma", None, Some("Part two"), false),
                link("diagram.png", None, None, true),
                link("sub/My Note", Some("doc"), Some("x"), false),
            ]
        );
    }

    #[test]
    fn first_h1_ignores_code_fences_and_lower_levels() {
        let a = analyze("## Sub\n\n```\n# not a heading\n```\n\n# Real *Title*\n\n# Second\n");
        assert_eq!(a.first_h1.as_deref(), Some("Real Title"));
        let kinds: Vec<BlockKind> = a.blocks.iter().map(|b| b.kind).collect();
        assert_eq!(
            kinds,
            [BlockKind::Heading(2), BlockKind::Lines, BlockKind::Heading(1), BlockKind::Heading(1)]
        );
    }

    #[test]
    fn wikilinks_reopen_at_the_last_open_and_stop_at_line_ends() {
        let a = analyze("[[a [[b]] and [[c\nd]] and [[e]]]\n");
        let targets: Vec<&str> = a.links.iter().map(|l| l.target.as_str()).collect();
        assert_eq!(targets, ["b", "e"]);
        // Many opens before one close: linear, not a rescan per open.
        let many = format!("{}x]]", "[[".repeat(200_000));
        assert_eq!(analyze(&many).links.len(), 1);
    }

    #[test]
    fn a_large_body_is_parsed_in_pieces_with_positions_kept() {
        let para = "Some words here. ".repeat(40);
        let body: String = (0..2000).map(|i| format!("## H{i}\n\n{para}[[T{i}]]\n\n")).collect();
        assert!(body.len() > 3 * SEGMENT_BYTES);
        let a = analyze(&body);
        assert_eq!(a.links.len(), 2000);
        let headings: Vec<&Block> =
            a.blocks.iter().filter(|b| matches!(b.kind, BlockKind::Heading(2))).collect();
        assert_eq!(headings.len(), 2000);
        for (i, h) in headings.iter().enumerate() {
            assert_eq!(
                &body[h.range.clone()],
                format!("## H{i}\n"),
                "block ranges point into the whole body"
            );
        }
        // A fenced block with blank lines is not cut inside.
        let fenced = format!("```\n{}```\n", "line\n\n".repeat(60_000));
        let pieces = segments(&fenced, SEGMENT_BYTES);
        assert!(pieces.len() > 1, "a block longer than a segment is cut at a line break");
        let one_line = "[".repeat(3 * SEGMENT_BYTES + 7);
        let pieces = segments(&one_line, SEGMENT_BYTES);
        assert_eq!(pieces.iter().map(|r| r.len()).sum::<usize>(), one_line.len());
        assert!(pieces.iter().all(|r| r.len() <= SEGMENT_BYTES));
    }

    #[test]
    fn inline_tags_as_obsidian_reads_them() {
        let a = analyze(
            "# Heading #not-a-tag\n\nPlanning #project/alpha and #todo, not mail#x nor #1984 nor `#code`.\n\n\
             ```\n#fenced\n```\n\n#Last-one/\n",
        );
        assert_eq!(a.tags, ["project/alpha", "todo", "Last-one"]);
        let mut t = Vec::new();
        inline_tags("#a #b#c ##d #é_1", &mut t);
        assert_eq!(t, ["a", "b", "é_1"]);
    }

    #[test]
    fn blocks_cover_tables_lists_and_html() {
        let body = "Para one.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- x\n- y\n\n<div>\nhi\n</div>\n";
        let a = analyze(body);
        let kinds: Vec<BlockKind> = a.blocks.iter().map(|b| b.kind).collect();
        assert_eq!(kinds, [BlockKind::Prose, BlockKind::Lines, BlockKind::Prose, BlockKind::Lines]);
        assert!(body[a.blocks[1].range.clone()].starts_with("| a | b |"));
    }
}

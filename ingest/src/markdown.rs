//! One pass of `pulldown-cmark` over a page body: its top-level blocks (with byte ranges), the
//! headings, the first `#` heading, the code spans to ignore, and the outgoing links.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, LinkType, Options, Parser, Tag, TagEnd};
use std::ops::Range;

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
}

fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES
}

/// Analyse a body (frontmatter already removed, LF line endings).
pub fn analyze(body: &str) -> Analysis {
    let mut out = Analysis::default();
    let mut depth = 0usize;
    let mut block_start: Option<(BlockKind, usize)> = None;
    let mut heading_text: Option<String> = None;
    let mut code_ranges: Vec<Range<usize>> = Vec::new();
    let mut md_link: Option<(String, String)> = None;

    for (event, range) in Parser::new_ext(body, options()).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                if depth == 0 {
                    let kind = match &tag {
                        Tag::Heading { level, .. } => {
                            heading_text = Some(String::new());
                            BlockKind::Heading(heading_number(*level))
                        }
                        Tag::CodeBlock(_) | Tag::Table(_) | Tag::HtmlBlock => BlockKind::Lines,
                        _ => BlockKind::Prose,
                    };
                    block_start = Some((kind, range.start));
                }
                match &tag {
                    Tag::CodeBlock(CodeBlockKind::Fenced(_) | CodeBlockKind::Indented) => {
                        code_ranges.push(range.clone());
                    }
                    Tag::Link { link_type: LinkType::Inline | LinkType::Reference, dest_url, .. } => {
                        md_link = Some((dest_url.to_string(), String::new()));
                    }
                    _ => {}
                }
                depth += 1;
            }
            Event::End(tag_end) => {
                depth = depth.saturating_sub(1);
                if matches!(tag_end, TagEnd::Link)
                    && let Some((dest, label)) = md_link.take()
                    && let Some(link) = local_markdown_link(&dest, &label)
                {
                    out.links.push(link);
                }
                if depth == 0
                    && let Some((kind, start)) = block_start.take()
                {
                    let text = match kind {
                        BlockKind::Heading(level) => {
                            let text = heading_text.take().unwrap_or_default().trim().to_string();
                            if level == 1 && out.first_h1.is_none() && !text.is_empty() {
                                out.first_h1 = Some(text.clone());
                            }
                            text
                        }
                        _ => String::new(),
                    };
                    out.blocks.push(Block { kind, range: start..range.end, text });
                }
            }
            Event::Code(t) => {
                code_ranges.push(range);
                push_text(&mut heading_text, &mut md_link, &t);
            }
            Event::Text(t) | Event::InlineMath(t) | Event::DisplayMath(t) => {
                push_text(&mut heading_text, &mut md_link, &t);
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(h) = heading_text.as_mut() {
                    h.push(' ');
                }
            }
            Event::Html(_) | Event::InlineHtml(_) if depth == 0 => {
                out.blocks.push(Block { kind: BlockKind::Lines, range, text: String::new() });
            }
            _ => {}
        }
    }
    out.links.splice(0..0, wikilinks(body, &code_ranges));
    out
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
    let decoded = percent_decode(path);
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

fn percent_decode(s: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(hi * 16 + lo);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Wikilinks in the raw body, outside code: `[[target]]`, `[[target|label]]`,
/// `[[target#heading]]`, and embeds `![[…]]`.
fn wikilinks(body: &str, code: &[Range<usize>]) -> Vec<Link> {
    let mut links = Vec::new();
    let mut from = 0;
    while let Some(open) = body[from..].find("[[").map(|i| i + from) {
        let Some(close) = body[open + 2..].find("]]").map(|i| i + open + 2) else { break };
        from = close + 2;
        let inner = &body[open + 2..close];
        if inner.contains('\n') || inner.contains("[[") || code.iter().any(|r| r.contains(&open)) {
            from = open + 2;
            continue;
        }
        let (target_part, label) = match inner.split_once('|') {
            Some((t, l)) => (t, Some(l.trim().to_string()).filter(|l| !l.is_empty())),
            None => (inner, None),
        };
        let (target, heading) = match target_part.split_once('#') {
            Some((t, h)) => (t.trim(), Some(h.trim().to_string()).filter(|h| !h.is_empty())),
            None => (target_part.trim(), None),
        };
        if target.is_empty() {
            continue;
        }
        let embed = open > 0 && body.as_bytes()[open - 1] == b'!';
        links.push(Link { target: target.to_string(), label, heading, embed });
    }
    links
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
    fn blocks_cover_tables_lists_and_html() {
        let body = "Para one.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- x\n- y\n\n<div>\nhi\n</div>\n";
        let a = analyze(body);
        let kinds: Vec<BlockKind> = a.blocks.iter().map(|b| b.kind).collect();
        assert_eq!(kinds, [BlockKind::Prose, BlockKind::Lines, BlockKind::Prose, BlockKind::Lines]);
        assert!(body[a.blocks[1].range.clone()].starts_with("| a | b |"));
    }
}

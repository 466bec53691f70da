//! Heading-aware chunking: sections carry their heading path; a section over the token budget is
//! split at block, then sentence, then word boundaries (code, tables and HTML only between
//! lines), with a small overlap; tiny chunks merge with a neighbour.

use crate::budget::{Budget, OverBudget};
use crate::hash::hex_digest;
use crate::markdown::{Block, BlockKind};
use std::ops::Range;

/// Chunking knobs. `CHUNKER_VERSION` changes whenever their meaning or the algorithm changes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChunkOptions {
    /// Budget per chunk, by [`estimate_tokens`].
    pub max_tokens: usize,
    /// Trailing text of a split chunk repeated at the start of the next one.
    pub overlap_tokens: usize,
    /// Chunks smaller than this merge with a neighbour when the budget allows.
    pub min_tokens: usize,
}

impl Default for ChunkOptions {
    fn default() -> Self {
        Self { max_tokens: 256, overlap_tokens: 32, min_tokens: 24 }
    }
}

/// Bumped when chunk boundaries or embedded text can change for the same input.
pub const CHUNKER_VERSION: u32 = 2;

/// Longest name (title or heading) carried into heading paths and the embedded text, in
/// characters: every chunk of a section repeats its path, so a 10 MB heading line must not.
pub const MAX_NAME_CHARS: usize = 200;

/// `name` cut to [`MAX_NAME_CHARS`] characters (with `…` when cut).
pub fn clip_name(name: &str) -> String {
    match name.char_indices().nth(MAX_NAME_CHARS) {
        Some((at, _)) => format!("{}…", name[..at].trim_end()),
        None => name.to_string(),
    }
}

/// Separator of heading paths (`Page › Section › Subsection`).
pub const PATH_SEPARATOR: &str = " › ";

/// A piece of a page, the unit of embedding and of keyword search.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Chunk {
    /// Stable id: hash of source, slug, ordinal and text hash.
    pub id: String,
    pub ordinal: u32,
    pub heading_path: Vec<String>,
    /// The markdown of the chunk as it stands in the file.
    pub text: String,
    /// 1-based, inclusive, in file lines (frontmatter counted).
    pub line_start: u32,
    pub line_end: u32,
    /// Estimated tokens of [`Chunk::embed_text`].
    pub tokens: u32,
    /// Hash of the embedded text: equal hashes are never embedded twice.
    pub text_hash: String,
}

impl std::fmt::Debug for Chunk {
    // Counts and positions, not note bodies: chunks end up in logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk")
            .field("ordinal", &self.ordinal)
            .field("heading_path", &self.heading_path)
            .field("lines", &(self.line_start..=self.line_end))
            .field("tokens", &self.tokens)
            .field("text_bytes", &self.text.len())
            .finish()
    }
}

impl Chunk {
    /// The text given to the embedding model: the heading path (which starts with the page
    /// title), then the chunk's markdown, so every chunk carries the page's name.
    pub fn embed_text(&self) -> String {
        embed_text(&self.heading_path, &self.text)
    }
}

fn embed_text(path: &[String], text: &str) -> String {
    format!("{}\n\n{}", path.join(PATH_SEPARATOR), text)
}

/// The chunk's own markdown of a text [`Chunk::embed_text`] made: its heading path left out
/// (a heading is one line, so the path ends at the first blank line).
pub fn without_heading_path(embed_text: &str) -> &str {
    embed_text.split_once("\n\n").map_or(embed_text, |(_, text)| text)
}

/// A cheap, deliberately generous estimate of WordPiece tokens: a word costs one token per five
/// letters or digits (at least one) plus one per punctuation character, and one per character of
/// scripts written without spaces (Chinese, Japanese, Korean), which the tokenizer splits into
/// single characters.
pub fn estimate_tokens(s: &str) -> usize {
    s.split_whitespace()
        .map(|w| {
            let (mut alnum, mut punct, mut cjk) = (0usize, 0usize, 0usize);
            for c in w.chars() {
                if is_cjk(c) {
                    cjk += 1;
                } else if c.is_alphanumeric() {
                    alnum += 1
                } else {
                    punct += 1
                }
            }
            alnum.div_ceil(5) + punct + cjk
        })
        .sum()
}

/// Characters of CJK scripts (ideographs, kana, hangul, CJK punctuation and full-width forms).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF
        | 0xFF00..=0xFFEF | 0x20000..=0x2FA1F)
}

struct Unit {
    range: Range<usize>,
    tokens: usize,
}

struct Draft {
    path: Vec<String>,
    range: Range<usize>,
}

/// Everything [`chunk_page`] needs to know about a page.
#[derive(Debug, Clone, Copy)]
pub struct PageText<'a> {
    pub source_id: &'a str,
    pub slug: &'a str,
    pub title: &'a str,
    pub aliases: &'a [String],
    pub body: &'a str,
    pub body_line_offset: usize,
}

/// Chunk a page body. A page without body text gets one chunk built from its title and aliases
/// so that it is still findable.
pub fn chunk_page(page: PageText<'_>, blocks: &[Block], opts: &ChunkOptions) -> Vec<Chunk> {
    chunk_page_within(page, blocks, opts, &Budget::unlimited()).expect("no deadline")
}

/// [`chunk_page`] within a time budget.
pub fn chunk_page_within(
    page: PageText<'_>,
    blocks: &[Block],
    opts: &ChunkOptions,
    budget: &Budget,
) -> Result<Vec<Chunk>, OverBudget> {
    let max = opts.max_tokens.max(8);
    let mut drafts = Vec::new();
    for (path, units) in sections(page, blocks, max, budget)? {
        budget.tick()?;
        pack(path, units, max, opts.overlap_tokens.min(max / 2), &mut drafts);
    }
    let drafts = merge_tiny(page.body, drafts, max, opts.min_tokens);
    let lines = LineIndex::new(page.body, page.body_line_offset);
    let mut chunks: Vec<Chunk> = drafts
        .into_iter()
        .filter_map(|d| {
            let raw = &page.body[d.range.clone()];
            let text = raw.trim();
            if text.is_empty() {
                return None;
            }
            let start = d.range.start + (raw.len() - raw.trim_start().len());
            let end = start + text.len();
            Some((d.path, text.to_string(), lines.line_of(start), lines.line_of(end - 1)))
        })
        .enumerate()
        .map(|(i, (path, text, line_start, line_end))| {
            make_chunk(page, i as u32, path, text, line_start, line_end)
        })
        .collect();
    if chunks.is_empty() {
        let mut text = page.title.to_string();
        if !page.aliases.is_empty() {
            text.push_str(&format!("\naliases: {}", page.aliases.join(", ")));
        }
        let last_line = (page.body_line_offset + page.body.lines().count()).max(1) as u32;
        chunks.push(make_chunk(page, 0, vec![page.title.to_string()], text, 1, last_line));
    }
    Ok(chunks)
}

/// A chunk's stable id: a hash of its source, its page's slug, its ordinal and its text hash.
pub fn chunk_id(source_id: &str, slug: &str, ordinal: u32, text_hash: &str) -> String {
    hex_digest(&[source_id.as_bytes(), slug.as_bytes(), &ordinal.to_le_bytes(), text_hash.as_bytes()])
}

fn make_chunk(
    page: PageText<'_>,
    ordinal: u32,
    heading_path: Vec<String>,
    text: String,
    line_start: u32,
    line_end: u32,
) -> Chunk {
    let embedded = embed_text(&heading_path, &text);
    let text_hash = hex_digest(&[embedded.as_bytes()]);
    let id = chunk_id(page.source_id, page.slug, ordinal, &text_hash);
    Chunk {
        id,
        ordinal,
        heading_path,
        tokens: estimate_tokens(&embedded) as u32,
        text,
        line_start,
        line_end,
        text_hash,
    }
}

/// Group blocks into sections by heading, each with its heading path and its units.
#[allow(clippy::type_complexity)]
fn sections(
    page: PageText<'_>,
    blocks: &[Block],
    max: usize,
    budget: &Budget,
) -> Result<Vec<(Vec<String>, Vec<Unit>)>, OverBudget> {
    let mut out: Vec<(Vec<String>, Vec<Unit>)> = vec![(vec![page.title.to_string()], Vec::new())];
    let mut stack: Vec<(u8, String)> = Vec::new();
    let mut seen_heading = false;
    for block in blocks {
        budget.tick()?;
        if let BlockKind::Heading(level) = block.kind {
            // A leading `# Title` that repeats the page title is not a path level of its own.
            let repeats_title = !seen_heading && level == 1 && clip_name(&block.text) == page.title;
            seen_heading = true;
            if !repeats_title {
                stack.retain(|(l, _)| *l < level);
                stack.push((level, clip_name(&block.text)));
            }
            let mut path = vec![page.title.to_string()];
            path.extend(stack.iter().map(|(_, t)| t.clone()));
            out.push((path, Vec::new()));
        }
        let units = &mut out.last_mut().expect("at least the preamble").1;
        split_block(page.body, block, max, units, budget)?;
    }
    out.retain(|(_, units)| !units.is_empty());
    Ok(out)
}

/// One unit per block, or, for a block over the budget, its sentences (prose) or lines (code,
/// tables, HTML); a piece still over the budget is cut between words, and a word longer than
/// the budget (a run without spaces) into pieces of the budget.
fn split_block(
    body: &str,
    block: &Block,
    max: usize,
    out: &mut Vec<Unit>,
    budget: &Budget,
) -> Result<(), OverBudget> {
    let tokens = estimate_tokens(&body[block.range.clone()]);
    if tokens <= max {
        out.push(Unit { range: block.range.clone(), tokens });
        return Ok(());
    }
    let pieces = match block.kind {
        BlockKind::Lines => {
            boundaries(body, block.range.clone(), |text, i| text[..i].ends_with('\n'), budget)?
        }
        BlockKind::Heading(_) => vec![block.range.clone()],
        BlockKind::Prose => boundaries(body, block.range.clone(), sentence_end, budget)?,
    };
    for piece in pieces {
        let tokens = estimate_tokens(&body[piece.clone()]);
        if tokens > max {
            for words in word_windows(body, piece, max, budget)? {
                out.push(Unit { tokens: estimate_tokens(&body[words.clone()]), range: words });
            }
        } else if tokens > 0 {
            out.push(Unit { range: piece, tokens });
        }
    }
    Ok(())
}

/// A sentence ends after `.`, `!`, `?` (or a line break) followed by white space.
fn sentence_end(text: &str, i: usize) -> bool {
    let before = &text[..i];
    before.ends_with('\n')
        || (text[i..].starts_with(char::is_whitespace) && before.ends_with(['.', '!', '?', '。', '！', '？']))
}

/// Split `range` of `body` at every char boundary `i` where `is_cut(body, i)`.
fn boundaries(
    body: &str,
    range: Range<usize>,
    is_cut: impl Fn(&str, usize) -> bool,
    budget: &Budget,
) -> Result<Vec<Range<usize>>, OverBudget> {
    let mut out = Vec::new();
    let mut start = range.start;
    for (offset, _) in body[range.clone()].char_indices().skip(1) {
        budget.tick()?;
        let i = range.start + offset;
        if is_cut(&body[..range.end], i) {
            out.push(start..i);
            start = i;
        }
    }
    out.push(start..range.end);
    out.retain(|r| !body[r.clone()].trim().is_empty());
    Ok(out)
}

/// Runs of words of at most `max` tokens; a single word over `max` is cut into pieces.
fn word_windows(
    body: &str,
    range: Range<usize>,
    max: usize,
    budget: &Budget,
) -> Result<Vec<Range<usize>>, OverBudget> {
    let mut out = Vec::new();
    let (mut start, mut tokens) = (range.start, 0usize);
    let text = &body[range.clone()];
    let mut pos = 0;
    for word in text.split_inclusive(char::is_whitespace) {
        budget.tick()?;
        let cost = estimate_tokens(word);
        if cost > max {
            if tokens > 0 {
                out.push(start..range.start + pos);
            }
            out.extend(
                word_pieces(word, max, budget)?
                    .into_iter()
                    .map(|r| r.start + range.start + pos..r.end + range.start + pos),
            );
            pos += word.len();
            (start, tokens) = (range.start + pos, 0);
            continue;
        }
        if tokens + cost > max && tokens > 0 {
            out.push(start..range.start + pos);
            start = range.start + pos;
            tokens = 0;
        }
        tokens += cost;
        pos += word.len();
    }
    if start < range.end {
        out.push(start..range.end);
    }
    Ok(out)
}

/// A word (no white space inside) cut into pieces of at most `max` tokens by
/// [`estimate_tokens`]'s own count: a letter or digit is a fifth of a token, anything else one.
fn word_pieces(word: &str, max: usize, budget: &Budget) -> Result<Vec<Range<usize>>, OverBudget> {
    let mut out = Vec::new();
    let (mut start, mut alnum, mut punct) = (0usize, 0usize, 0usize);
    for (i, c) in word.char_indices() {
        budget.tick()?;
        // A CJK character is a token of its own: count it with the punctuation.
        let letter = c.is_alphanumeric() && !is_cjk(c);
        let (a, p) = if letter { (alnum + 1, punct) } else { (alnum, punct + 1) };
        if a.div_ceil(5) + p > max && i > start {
            out.push(start..i);
            start = i;
            (alnum, punct) = if letter { (1, 0) } else { (0, 1) };
        } else {
            (alnum, punct) = (a, p);
        }
    }
    if start < word.len() {
        out.push(start..word.len());
    }
    Ok(out)
}

/// Greedy packing of a section's units into chunks, carrying up to `overlap` tokens of trailing
/// units into the next chunk when a section is split.
fn pack(path: Vec<String>, units: Vec<Unit>, max: usize, overlap: usize, out: &mut Vec<Draft>) {
    let mut current: Vec<&Unit> = Vec::new();
    let mut tokens = 0usize;
    for unit in &units {
        if !current.is_empty() && tokens + unit.tokens > max {
            out.push(Draft { path: path.clone(), range: span(&current) });
            let mut carried = 0usize;
            let mut keep = current.len();
            while keep > 1 && carried + current[keep - 1].tokens <= overlap {
                keep -= 1;
                carried += current[keep].tokens;
            }
            current.drain(..keep);
            if carried + unit.tokens > max {
                current.clear();
                carried = 0;
            }
            tokens = carried;
        }
        tokens += unit.tokens;
        current.push(unit);
    }
    if !current.is_empty() {
        out.push(Draft { path, range: span(&current) });
    }
}

fn span(units: &[&Unit]) -> Range<usize> {
    units[0].range.start..units[units.len() - 1].range.end
}

/// Merge a chunk under `min` tokens into the following chunk (keeping the first one's heading
/// path, usually the parent), or else into the preceding one, when the budget allows.
fn merge_tiny(body: &str, drafts: Vec<Draft>, max: usize, min: usize) -> Vec<Draft> {
    let cost = |d: &Draft| estimate_tokens(&body[d.range.clone()]);
    let mut out: Vec<Draft> = Vec::with_capacity(drafts.len());
    let mut pending: Option<Draft> = None;
    for draft in drafts {
        let draft = match pending.take() {
            Some(tiny) if tiny.range.end <= draft.range.start => {
                let merged = Draft { path: tiny.path.clone(), range: tiny.range.start..draft.range.end };
                if cost(&merged) <= max {
                    merged
                } else {
                    out.push(tiny);
                    draft
                }
            }
            Some(tiny) => {
                out.push(tiny);
                draft
            }
            None => draft,
        };
        if cost(&draft) < min {
            pending = Some(draft);
        } else {
            out.push(draft);
        }
    }
    if let Some(tiny) = pending {
        match out.last_mut() {
            Some(prev)
                if prev.range.end <= tiny.range.start
                    && estimate_tokens(&body[prev.range.start..tiny.range.end]) <= max =>
            {
                prev.range.end = tiny.range.end;
            }
            _ => out.push(tiny),
        }
    }
    out
}

/// Byte offset → 1-based file line.
struct LineIndex {
    newlines: Vec<usize>,
    offset: usize,
}

impl LineIndex {
    fn new(body: &str, offset: usize) -> Self {
        Self { newlines: body.match_indices('\n').map(|(i, _)| i).collect(), offset }
    }
    fn line_of(&self, byte: usize) -> u32 {
        (self.offset + 1 + self.newlines.partition_point(|&n| n < byte)) as u32
    }
}

#[cfg(test)]
mod tests;

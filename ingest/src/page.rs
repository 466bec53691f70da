//! A markdown file → a [`ParsedPage`]: decoding, frontmatter, title, links, hash and chunks.

use crate::budget::Budget;
use crate::chunk::{Chunk, ChunkOptions, PageText, chunk_page_within, clip_name};
use crate::error::{Error, Result};
use crate::frontmatter::{self, Refusal, YamlLimits};
use crate::hash::hex_digest;
use crate::markdown::{Link, analyze_within};
use crate::slug::{normalize_name, slugify_path};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

/// Parsing knobs: the bounds one page must stay within (each a `[limits]` key of cairn.toml,
/// named in the error of a page over it) and the chunking.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParseOptions {
    /// Files larger than this are refused (default 10 MB).
    pub max_page_bytes: u64,
    /// The frontmatter block's size (also once YAML aliases expand) and nesting.
    pub frontmatter: YamlLimits,
    /// Wall time for parsing and chunking one page (0: none).
    pub parse_timeout_ms: u64,
    /// Chunks embedded per page: the first ones are kept (a 10 MB line of brackets would
    /// otherwise cost the model half an hour).
    pub max_page_chunks: usize,
    pub chunking: ChunkOptions,
}

impl Default for ParseOptions {
    fn default() -> Self {
        Self {
            max_page_bytes: 10_000_000,
            frontmatter: YamlLimits::default(),
            parse_timeout_ms: 30_000,
            max_page_chunks: 1000,
            chunking: ChunkOptions::default(),
        }
    }
}

/// Where a page's title came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TitleSource {
    Frontmatter,
    Heading,
    FileName,
}

/// A page ready to embed and store.
#[derive(Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ParsedPage {
    pub source_id: String,
    pub slug: String,
    /// Vault-relative path with `/` separators.
    pub path: String,
    pub title: String,
    pub title_source: TitleSource,
    /// Aliases as written.
    pub aliases: Vec<String>,
    /// Aliases through [`normalize_name`], in the same order.
    pub aliases_normalized: Vec<String>,
    pub tags: Vec<String>,
    pub page_type: Option<String>,
    /// The whole frontmatter as JSON (an object; empty without frontmatter).
    pub frontmatter: Value,
    pub links: Vec<Link>,
    /// The body's headings in order (clipped as names are), for whoever asks pages by them.
    #[serde(default)]
    pub headings: Vec<String>,
    /// Hash of the body and the non-volatile frontmatter: unchanged means nothing to do.
    pub content_hash: String,
    pub chunks: Vec<Chunk>,
    /// Problems that did not stop the page from being indexed (e.g. broken frontmatter: the
    /// body is indexed with the file name as title).
    pub problems: Vec<Error>,
    pub bytes: u64,
}

impl std::fmt::Debug for ParsedPage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedPage")
            .field("source_id", &self.source_id)
            .field("slug", &self.slug)
            .field("title", &self.title)
            .field("aliases", &self.aliases.len())
            .field("links", &self.links.len())
            .field("chunks", &self.chunks.len())
            .field("problems", &self.problems.len())
            .finish()
    }
}

impl ParsedPage {
    /// The slug this page's file name makes (its slug, unless [`ParsedPage::take_slug`] gave it
    /// another).
    pub fn own_slug(&self) -> &str {
        self.problems
            .iter()
            .find_map(|p| match p {
                Error::SlugTaken { slug, .. } => Some(slug.as_str()),
                _ => None,
            })
            .unwrap_or(&self.slug)
    }

    /// Index this page as `given` (a [`crate::slug_variant`] of [`ParsedPage::own_slug`]): another
    /// file, `holder`, has the slug the name makes. The chunks' ids follow the slug, and the page
    /// says why (one `slug_taken` problem; none when `given` is its own slug).
    pub fn take_slug(&mut self, given: String, holder: &Path) {
        if given == self.slug {
            return;
        }
        let own = self.own_slug().to_string();
        self.problems.retain(|p| !matches!(p, Error::SlugTaken { .. }));
        for c in &mut self.chunks {
            c.id = crate::chunk::chunk_id(&self.source_id, &given, c.ordinal, &c.text_hash);
        }
        self.slug = given.clone();
        if given != own {
            let path = PathBuf::from(&self.path);
            self.problems.push(Error::SlugTaken { path, slug: own, holder: holder.into(), given });
        }
    }
}

/// The bytes of one file of a source: refused when it resolves outside `root` (a symlink out of
/// the vault) or holds more than `cap` bytes. The cap is checked on the open file before reading
/// and again while reading, so a file that grows meanwhile is refused, never read whole.
pub fn read_within(root: &Path, rel: &Path, cap: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let io = |e: std::io::Error| Error::io(rel, &e);
    let too_large = |size: u64| Error::TooLarge { path: rel.into(), size, cap };
    let file = std::fs::File::open(crate::scan::within_root(root, rel)?).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    if size > cap {
        return Err(too_large(size));
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Read ([`read_within`]) and parse one file of a source.
pub fn read_page(source_id: &str, root: &Path, rel: &Path, opts: &ParseOptions) -> Result<ParsedPage> {
    parse_page(source_id, rel, &read_within(root, rel, opts.max_page_bytes)?, opts)
}

/// Parse the bytes of a file at vault-relative path `rel`.
pub fn parse_page(source_id: &str, rel: &Path, bytes: &[u8], opts: &ParseOptions) -> Result<ParsedPage> {
    let path: PathBuf = rel.to_path_buf();
    if bytes.len() as u64 > opts.max_page_bytes {
        return Err(Error::TooLarge { path, size: bytes.len() as u64, cap: opts.max_page_bytes });
    }
    let slug = slugify_path(rel).ok_or_else(|| Error::NoSlug { path: path.clone() })?;
    let budget = Budget::new(std::time::Duration::from_millis(opts.parse_timeout_ms));
    let timeout = |_| Error::ParseTimeout { path: path.clone(), limit_ms: opts.parse_timeout_ms };
    let text = decode(rel, bytes)?;
    let mut problems = Vec::new();

    let split = frontmatter::split(&text);
    let map = frontmatter_map(&path, &split, &opts.frontmatter, &mut problems)?;
    let fields = frontmatter::fields(&map);
    let analysis = analyze_within(split.body, &budget).map_err(timeout)?;
    let file_name = file_stem(rel);
    let (title, title_source) = match (fields.title, analysis.first_h1.clone()) {
        (Some(t), _) => (t, TitleSource::Frontmatter),
        (None, Some(h)) => (h, TitleSource::Heading),
        (None, None) => (file_name, TitleSource::FileName),
    };
    let title = clip_name(&title);
    let content_hash = hash_content(&split, &map, !problems.is_empty());
    let page_text = PageText {
        source_id,
        slug: &slug,
        title: &title,
        aliases: &fields.aliases,
        body: split.body,
        body_line_offset: split.body_line_offset,
    };
    let mut chunks =
        chunk_page_within(page_text, &analysis.blocks, &opts.chunking, &budget).map_err(timeout)?;
    if chunks.len() > opts.max_page_chunks.max(1) {
        let cap = opts.max_page_chunks.max(1);
        problems.push(Error::Truncated { path: path.clone(), chunks: chunks.len() as u64, cap: cap as u64 });
        chunks.truncate(cap);
    }
    // Frontmatter tags, then the body's inline `#tags` (Obsidian reads both), each once.
    let mut tags = fields.tags;
    for t in &analysis.tags {
        if !tags.iter().any(|x| x.eq_ignore_ascii_case(t)) {
            tags.push(t.clone());
        }
    }
    let headings = analysis
        .blocks
        .iter()
        .filter(|b| matches!(b.kind, crate::markdown::BlockKind::Heading(_)))
        .map(|b| clip_name(&b.text))
        .collect();
    Ok(ParsedPage {
        source_id: source_id.to_string(),
        path: rel_string(rel),
        aliases_normalized: fields.aliases.iter().map(|a| normalize_name(a)).collect(),
        aliases: fields.aliases,
        tags,
        page_type: fields.page_type,
        frontmatter: Value::Object(map),
        links: analysis.links,
        headings,
        content_hash,
        chunks,
        problems,
        bytes: bytes.len() as u64,
        slug,
        title,
        title_source,
    })
}

/// The frontmatter's map: an error for one over its bounds (the page is refused), a problem for
/// one left open or not parsing (the page is indexed without it).
fn frontmatter_map(
    path: &Path,
    split: &frontmatter::Split<'_>,
    limits: &YamlLimits,
    problems: &mut Vec<Error>,
) -> Result<Map<String, Value>> {
    if let Some(yaml) = split.yaml {
        frontmatter::check_yaml(yaml, limits).map_err(|r| match r {
            Refusal::TooLarge { bytes, expanded } => {
                Error::FrontmatterTooLarge { path: path.into(), bytes, expanded, cap: limits.max_bytes }
            }
            Refusal::TooDeep => Error::FrontmatterTooDeep { path: path.into(), cap: limits.max_depth },
        })?;
    }
    if split.unclosed {
        problems.push(Error::UnclosedFrontmatter { path: path.into() });
    }
    Ok(match split.yaml.map(frontmatter::parse_yaml) {
        None => Map::new(),
        Some(Ok(map)) => map,
        Some(Err(p)) => {
            problems.push(Error::InvalidFrontmatter {
                path: path.into(),
                line: p.line,
                column: p.column,
                message: p.message,
            });
            Map::new()
        }
    })
}

/// A page's content hash: the frontmatter without volatile keys, and the body.
fn hash_content(
    split: &frontmatter::Split<'_>,
    map: &Map<String, Value>,
    broken_frontmatter: bool,
) -> String {
    hex_digest(&[
        frontmatter::stable_json(map).as_bytes(),
        split.body.as_bytes(),
        // A frontmatter that fails to parse still changes the page when its text changes.
        split.yaml.filter(|_| broken_frontmatter).unwrap_or("").as_bytes(),
    ])
}

/// The content hash [`parse_page`] gives these bytes, without parsing the body (`None` when they
/// are not a page's: not text, or a frontmatter over its bounds). Cheap enough to check, when
/// answering, whether a file still holds what was indexed.
pub fn content_hash_of(bytes: &[u8], opts: &ParseOptions) -> Option<String> {
    let text = decode(Path::new(""), bytes).ok()?;
    let split = frontmatter::split(&text);
    if let Some(yaml) = split.yaml {
        frontmatter::check_yaml(yaml, &opts.frontmatter).ok()?;
    }
    let (map, broken) = match split.yaml.map(frontmatter::parse_yaml) {
        None => (Map::new(), split.unclosed),
        Some(Ok(map)) => (map, split.unclosed),
        Some(Err(_)) => (Map::new(), true),
    };
    Some(hash_content(&split, &map, broken))
}

/// The path with `/` separators, as stored and shown.
pub fn rel_string(rel: &Path) -> String {
    rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/")
}

fn file_stem(rel: &Path) -> String {
    rel.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Bytes → text: binary refused, UTF-8 required, BOM dropped, CRLF → LF, NUL bytes dropped.
fn decode(rel: &Path, bytes: &[u8]) -> Result<String> {
    if let Some(reason) = binary_reason(bytes) {
        return Err(Error::Binary { path: rel.into(), reason });
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| Error::NotUtf8 { path: rel.into(), offset: e.valid_up_to() })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = text.replace("\r\n", "\n");
    out.retain(|c| c != '\0');
    Ok(out)
}

/// Known binary signatures, or many control bytes in the first 8 KiB. A stray NUL in a text
/// file is not binary (it is dropped).
fn binary_reason(bytes: &[u8]) -> Option<String> {
    const SIGNATURES: [(&[u8], &str); 6] = [
        (b"\x89PNG", "PNG image"),
        (b"%PDF", "PDF document"),
        (b"PK\x03\x04", "zip archive"),
        (b"\xff\xd8\xff", "JPEG image"),
        (b"GIF8", "GIF image"),
        (b"\x7fELF", "executable"),
    ];
    if let Some((_, what)) = SIGNATURES.iter().find(|(sig, _)| bytes.starts_with(sig)) {
        return Some(what.to_string());
    }
    let head = &bytes[..bytes.len().min(8192)];
    let control = head.iter().filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x0c)).count();
    (head.len() >= 32 && control * 10 > head.len())
        .then(|| format!("{control} control bytes in the first {} bytes", head.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(name: &str, text: &str) -> Result<ParsedPage> {
        parse_page("notes", Path::new(name), text.as_bytes(), &ParseOptions::default())
    }

    #[test]
    fn a_file_is_read_only_within_its_root_and_under_the_cap() {
        let (vault, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(vault.path().join("a.md"), "12345").unwrap();
        std::fs::write(outside.path().join("secret.md"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), vault.path().join("link.md")).unwrap();
        let read = |rel: &str, cap| read_within(vault.path(), Path::new(rel), cap);
        assert_eq!(read("a.md", 5).unwrap(), b"12345");
        assert!(matches!(read("a.md", 4), Err(Error::TooLarge { size: 5, cap: 4, .. })));
        assert!(matches!(read("link.md", 5), Err(Error::SymlinkOutsideRoot { .. })));
        assert!(matches!(read("gone.md", 5), Err(Error::Io { .. })));
    }

    #[test]
    fn title_precedence() {
        assert_eq!(parse("f.md", "---\ntitle: FM\n---\n# H1\n").unwrap().title, "FM");
        let h = parse("f.md", "```\n# code\n```\n# H1 here\n").unwrap();
        assert_eq!((h.title.as_str(), h.title_source), ("H1 here", TitleSource::Heading));
        let f = parse("dir/My File.md", "just text\n").unwrap();
        assert_eq!((f.title.as_str(), f.title_source), ("My File", TitleSource::FileName));
        assert_eq!(f.slug, "dir/my-file");
        assert_eq!(f.path, "dir/My File.md");
    }

    #[test]
    fn inline_tags_join_the_frontmatter_tags() {
        let p =
            parse("m.md", "---\ntags: [meeting]\n---\n\nNotes for #Meeting and #project/alpha.\n").unwrap();
        assert_eq!(p.tags, ["meeting", "project/alpha"]);
    }

    #[test]
    fn broken_frontmatter_keeps_the_body() {
        let p = parse("Broken.md", "---\ntitle: [oops\n---\n# Heading\n\nBody survives.\n").unwrap();
        assert_eq!(p.problems.len(), 1);
        assert_eq!(p.problems[0].kind(), "invalid_frontmatter");
        let msg = p.problems[0].to_string();
        assert!(msg.contains("Broken.md") && msg.contains("line"), "{msg}");
        assert!(p.chunks.iter().any(|c| c.text.contains("Body survives.")));
        // Title falls back past the frontmatter to the heading.
        assert_eq!(p.title, "Heading");
    }

    #[test]
    fn hash_ignores_volatile_keys_but_not_content() {
        let a = parse("a.md", "---\ntitle: A\nupdated: 2024-01-01\n---\nbody\n").unwrap();
        let b = parse("a.md", "---\nupdated: 2025-02-02\ntitle: A\n---\nbody\n").unwrap();
        let c = parse("a.md", "---\ntitle: A\n---\nbody changed\n").unwrap();
        assert_eq!(a.content_hash, b.content_hash);
        assert_ne!(a.content_hash, c.content_hash);
    }

    #[test]
    fn frontmatter_over_its_bounds_fails_the_page_naming_the_key() {
        let mut bomb = String::from("---\na0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..12 {
            bomb.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 9].join(", ")));
        }
        bomb.push_str("aliases: *a11\n---\nbody\n");
        let e = parse("bomb.md", &bomb).unwrap_err();
        assert_eq!(e.kind(), "frontmatter_too_large");
        assert!(
            e.to_string().contains("bomb.md") && e.to_string().contains("limits.max_frontmatter_bytes"),
            "{e}"
        );
        let deep = format!("---\na: {}1{}\n---\nbody\n", "[".repeat(200), "]".repeat(200));
        let e = parse("deep.md", &deep).unwrap_err();
        assert_eq!(e.kind(), "frontmatter_too_deep");
        assert!(e.to_string().contains("limits.max_frontmatter_depth"), "{e}");
    }

    #[test]
    fn a_page_with_too_many_chunks_keeps_the_first_ones_and_says_so() {
        let opts = ParseOptions { max_page_chunks: 3, ..ParseOptions::default() };
        let body = "[".repeat(5000);
        let p = parse_page("s", Path::new("brackets.md"), body.as_bytes(), &opts).unwrap();
        assert_eq!(p.chunks.len(), 3);
        assert_eq!(p.problems.iter().map(Error::kind).collect::<Vec<_>>(), ["truncated"]);
        assert!(p.problems[0].to_string().contains("limits.max_page_chunks"));
    }

    #[test]
    fn a_page_over_its_time_budget_fails_naming_the_key() {
        let opts = ParseOptions { parse_timeout_ms: 1, ..ParseOptions::default() };
        let body = "word. ".repeat(1_000_000);
        let e = parse_page("s", Path::new("slow.md"), body.as_bytes(), &opts).unwrap_err();
        assert_eq!(e.kind(), "parse_timeout");
        assert!(e.to_string().contains("limits.parse_timeout_ms"), "{e}");
    }

    #[test]
    fn the_content_hash_alone_agrees_with_a_full_parse() {
        for text in [
            "---\ntitle: A\nupdated: x\n---\nbody\n",
            "no frontmatter\n",
            "---\ntitle: [oops\n---\nbody\n",
            "---\nunclosed\n",
        ] {
            let full = parse("a.md", text).unwrap().content_hash;
            assert_eq!(content_hash_of(text.as_bytes(), &ParseOptions::default()), Some(full), "{text:?}");
        }
    }

    #[test]
    fn bom_crlf_and_nul_are_handled() {
        let p = parse("w.md", "\u{feff}---\r\ntitle: Win\r\n---\r\nLine one.\r\nLine\0 two.\r\n").unwrap();
        assert_eq!(p.title, "Win");
        assert_eq!(p.chunks[0].text, "Line one.\nLine two.");
        assert_eq!((p.chunks[0].line_start, p.chunks[0].line_end), (4, 5));
        let unix = parse("w.md", "---\ntitle: Win\n---\nLine one.\nLine two.\n").unwrap();
        assert_eq!(p.content_hash, unix.content_hash);
    }

    #[test]
    fn failures_are_values_naming_the_file() {
        let opts = ParseOptions { max_page_bytes: 10, ..ParseOptions::default() };
        let big = parse_page("s", Path::new("big.md"), &[b'a'; 11], &opts).unwrap_err();
        assert_eq!(big.kind(), "too_large");
        let latin1 = parse_page("s", Path::new("l.md"), b"caf\xe9 au lait", &ParseOptions::default());
        let e = latin1.unwrap_err();
        assert!(matches!(e, Error::NotUtf8 { offset: 3, .. }), "{e:?}");
        assert!(e.to_string().contains("l.md") && e.to_string().contains("iconv"));
        let png = parse_page("s", Path::new("p.md"), b"\x89PNG\r\n\x1a\n....", &ParseOptions::default());
        assert_eq!(png.unwrap_err().kind(), "binary");
        let punctuation = parse("(()).md", "x").unwrap();
        assert_eq!((punctuation.slug.as_str(), punctuation.title.as_str()), ("u+28-u+28-u+29-u+29", "(())"));
        assert_eq!(parse("..md", "x").unwrap_err().kind(), "no_slug");
    }
}

//! Frontmatter: finding the YAML block, parsing it with `gray_matter`, and reading the fields
//! cairn understands (title, aliases, tags, type) in the forms Obsidian writes them.

use gray_matter::engine::{Engine, YAML};
use serde_json::{Map, Value};

/// Keys whose change does not change a page's meaning (editors and sync tools rewrite them).
pub const VOLATILE_KEYS: [&str; 8] = [
    "updated",
    "modified",
    "mtime",
    "last_modified",
    "lastmod",
    "date_modified",
    "updated_at",
    "modified_at",
];

/// Where the frontmatter block sits in a (BOM-stripped, LF-normalised) text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split<'a> {
    /// The YAML between the delimiters (`None` when the text has no frontmatter block).
    pub yaml: Option<&'a str>,
    /// Everything after the closing delimiter line.
    pub body: &'a str,
    /// Number of file lines before the body (the block including both delimiters).
    pub body_line_offset: usize,
    /// The text opens a block but never closes it; `body` is then the whole text.
    pub unclosed: bool,
}

/// Split a text into its frontmatter block and body. A block opens with a first line of `---`
/// and closes at the next line of `---` or `...`.
pub fn split(text: &str) -> Split<'_> {
    let no_block = Split { yaml: None, body: text, body_line_offset: 0, unclosed: false };
    let Some((first, rest)) = text.split_once('\n') else {
        return no_block;
    };
    if first.trim_end() != "---" {
        return no_block;
    }
    let mut offset = first.len() + 1;
    for (i, line) in rest.split_inclusive('\n').enumerate() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed == "..." {
            let yaml = &text[first.len() + 1..offset];
            let body_start = offset + line.len();
            return Split {
                yaml: Some(yaml),
                body: &text[body_start..],
                body_line_offset: i + 2,
                unclosed: false,
            };
        }
        offset += line.len();
    }
    Split { unclosed: true, ..no_block }
}

/// A YAML problem, positioned in the file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlProblem {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

/// Bounds on a frontmatter block, checked before anything is built from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct YamlLimits {
    /// Bytes of the block, and of what it expands to through YAML aliases.
    pub max_bytes: u64,
    /// Collections inside collections.
    pub max_depth: u64,
}

impl Default for YamlLimits {
    fn default() -> Self {
        Self { max_bytes: 64 * 1024, max_depth: 64 }
    }
}

/// Why a block was refused before it was parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over `max_bytes`: as written (`bytes` known), or once aliases expand (`expanded`).
    TooLarge {
        bytes: Option<u64>,
        expanded: bool,
    },
    TooDeep,
}

/// Weight of a node beyond its text: what one value costs once built.
const NODE_BYTES: u64 = 16;

/// Refuse a block whose expansion through YAML aliases, or whose nesting, is over the limits.
///
/// YAML aliases (`*a`) copy the node they name when the document is loaded, so eleven levels
/// of nine aliases each turn 700 bytes into 9^11 nodes. This walks the parser's events (linear in
/// the text, nothing built) and adds each alias's expanded size, so such a block is refused in
/// microseconds instead of exhausting memory; deep nesting is refused here too, because loading
/// and converting a document recurse once per level. Syntax errors are left to the loader, which
/// reports them with their position.
pub fn check_yaml(yaml: &str, limits: &YamlLimits) -> Result<(), Refusal> {
    use yaml_rust2::parser::{Event, Parser};
    let raw = yaml.len() as u64;
    if raw > limits.max_bytes {
        return Err(Refusal::TooLarge { bytes: Some(raw), expanded: false });
    }
    let mut parser = Parser::new_from_str(yaml);
    // Open collections: (anchor id, weight when opened).
    let mut open: Vec<(usize, u64)> = Vec::new();
    let mut sizes: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
    let (mut weight, mut aliased) = (0u64, false);
    loop {
        let Ok((event, _)) = parser.next_token() else { return Ok(()) };
        match event {
            Event::StreamEnd => return Ok(()),
            Event::Scalar(text, _, anchor, _) => {
                let w = text.len() as u64 + NODE_BYTES;
                weight += w;
                if anchor > 0 {
                    sizes.insert(anchor, w);
                }
            }
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                open.push((anchor, weight));
                weight += NODE_BYTES;
                if open.len() as u64 > limits.max_depth {
                    return Err(Refusal::TooDeep);
                }
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some((anchor, start)) = open.pop()
                    && anchor > 0
                {
                    sizes.insert(anchor, weight - start);
                }
            }
            Event::Alias(id) => {
                aliased = true;
                weight = weight.saturating_add(sizes.get(&id).copied().unwrap_or(0));
            }
            _ => {}
        }
        if aliased && weight > limits.max_bytes {
            return Err(Refusal::TooLarge { bytes: None, expanded: true });
        }
    }
}

/// Parse the YAML of a frontmatter block into JSON (an object). An empty block is an empty
/// object. Positions in errors are file positions (the block starts on file line 2).
pub fn parse_yaml(yaml: &str) -> Result<Map<String, Value>, YamlProblem> {
    if yaml.trim().is_empty() {
        return Ok(Map::new());
    }
    let pod = YAML::parse(yaml).map_err(|e| yaml_problem(&e.to_string()))?;
    let value: Value = pod.deserialize().map_err(|e| yaml_problem(&e.to_string()))?;
    match sort_keys(value) {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(YamlProblem {
            line: 2,
            column: 1,
            message: format!("expected `key: value` pairs, found a {}", json_kind(&other)),
        }),
    }
}

/// Objects with their keys in sorted order at every depth. The YAML engine yields hash-map order,
/// and `serde_json` may be built with `preserve_order` (another crate in the tree enables it), so
/// without this the stored frontmatter and the content hash would vary from run to run.
fn sort_keys(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let sorted: std::collections::BTreeMap<String, Value> =
                map.into_iter().map(|(k, v)| (k, sort_keys(v))).collect();
            Value::Object(sorted.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

/// yaml-rust2 reports "… at byte B line L column C" with L counted from 1 inside the block.
fn yaml_problem(message: &str) -> YamlProblem {
    let number_after = |key: &str| -> Option<usize> {
        let at = message.rfind(key)? + key.len();
        message[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let line = number_after(" line ").map_or(2, |l| l.max(1) + 1);
    let column = number_after(" column ").unwrap_or(1);
    let text = message.find(" at byte ").map_or(message, |i| &message[..i]);
    let text = text.strip_prefix("Deserialize error: ").unwrap_or(text);
    YamlProblem { line, column, message: text.trim().to_string() }
}

/// The frontmatter fields cairn reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    pub title: Option<String>,
    pub aliases: Vec<String>,
    pub tags: Vec<String>,
    pub page_type: Option<String>,
}

/// Read title, aliases (`aliases` or `alias`: list, scalar or comma string), tags (`tags` or
/// `tag`: list, scalar, comma or space separated, with or without `#`) and `type`.
pub fn fields(map: &Map<String, Value>) -> Fields {
    let title = map.get("title").and_then(scalar_text).filter(|t| !t.is_empty());
    let mut aliases = Vec::new();
    for key in ["aliases", "alias"] {
        if let Some(v) = map.get(key) {
            aliases.extend(string_list(v, |s| s.split(',').map(str::to_string).collect()));
        }
    }
    dedup_keep_order(&mut aliases);
    let mut tags = Vec::new();
    for key in ["tags", "tag"] {
        if let Some(v) = map.get(key) {
            let split_tags = |s: &str| -> Vec<String> {
                s.split(|c: char| c == ',' || c.is_whitespace()).map(str::to_string).collect()
            };
            tags.extend(
                string_list(v, split_tags)
                    .into_iter()
                    .map(|t| t.trim_start_matches('#').to_string())
                    .filter(|t| !t.is_empty()),
            );
        }
    }
    dedup_keep_order(&mut tags);
    let page_type = map.get("type").and_then(scalar_text).filter(|t| !t.is_empty());
    Fields { title, aliases, tags, page_type }
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A list of scalars, or one scalar split by `split_scalar`; empty items dropped.
fn string_list(v: &Value, split_scalar: impl Fn(&str) -> Vec<String>) -> Vec<String> {
    let items: Vec<String> = match v {
        Value::Array(items) => items.iter().filter_map(scalar_text).collect(),
        other => scalar_text(other).map(|s| split_scalar(&s)).unwrap_or_default(),
    };
    items.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn dedup_keep_order(items: &mut Vec<String>) {
    let mut seen = std::collections::HashSet::new();
    items.retain(|s| seen.insert(s.clone()));
}

/// The frontmatter without volatile keys, as canonical (key-sorted) JSON text.
pub fn stable_json(map: &Map<String, Value>) -> String {
    let stable: Map<String, Value> = map
        .iter()
        .filter(|(k, _)| !VOLATILE_KEYS.contains(&k.to_ascii_lowercase().as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::to_string(&sort_keys(Value::Object(stable))).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_finds_block_and_body_offset() {
        let s = split("---\ntitle: A\n---\n# Body\n");
        assert_eq!(s.yaml, Some("title: A\n"));
        assert_eq!(s.body, "# Body\n");
        assert_eq!(s.body_line_offset, 3);
        let dots = split("---\na: 1\n...\nbody");
        assert_eq!(dots.body, "body");
        let none = split("# Just a page\n---\n");
        assert_eq!(none.yaml, None);
        assert_eq!(none.body_line_offset, 0);
        let unclosed = split("---\ntitle: A\nno end");
        assert!(unclosed.unclosed);
        assert_eq!(unclosed.body, "---\ntitle: A\nno end");
        let only = split("---\ntitle: A\n---");
        assert_eq!(only.yaml, Some("title: A\n"));
        assert_eq!(only.body, "");
    }

    #[test]
    fn yaml_errors_carry_file_positions() {
        let err = parse_yaml("title: A\naliases: [unclosed\n").unwrap_err();
        assert!(err.line >= 2, "{err:?}");
        assert!(!err.message.is_empty());
        let err = parse_yaml("- a\n- b\n").unwrap_err();
        assert!(err.message.contains("found a list"), "{err:?}");
    }

    #[test]
    fn obsidian_alias_forms() {
        let list = parse_yaml("aliases:\n  - Hall of Light\n  - HoL\n").unwrap();
        assert_eq!(fields(&list).aliases, ["Hall of Light", "HoL"]);
        let flow = parse_yaml("aliases: [Hall of Light, HoL]").unwrap();
        assert_eq!(fields(&flow).aliases, ["Hall of Light", "HoL"]);
        let scalar = parse_yaml("alias: Hall of Light").unwrap();
        assert_eq!(fields(&scalar).aliases, ["Hall of Light"]);
        let comma = parse_yaml("aliases: Hall of Light, HoL ,").unwrap();
        assert_eq!(fields(&comma).aliases, ["Hall of Light", "HoL"]);
        let numeric = parse_yaml("aliases: [1984, ok]").unwrap();
        assert_eq!(fields(&numeric).aliases, ["1984", "ok"]);
        let both = parse_yaml("aliases: [A]\nalias: B\n").unwrap();
        assert_eq!(fields(&both).aliases, ["A", "B"]);
    }

    #[test]
    fn tags_title_and_type() {
        let m = parse_yaml("title: Home\ntags: \"#a b, #c\"\ntype: project").unwrap();
        let f = fields(&m);
        assert_eq!(f.title.as_deref(), Some("Home"));
        assert_eq!(f.tags, ["a", "b", "c"]);
        assert_eq!(f.page_type.as_deref(), Some("project"));
        let list = parse_yaml("tags: ['#x', y]\ntitle: 42").unwrap();
        assert_eq!(fields(&list).tags, ["x", "y"]);
        assert_eq!(fields(&list).title.as_deref(), Some("42"));
    }

    /// Eleven levels of nine aliases each: 9^11 copies of `x` once loaded.
    fn alias_bomb(levels: usize, fan: usize) -> String {
        let mut s = format!("a0: &a0 [{}]\n", vec!["x"; fan].join(", "));
        for i in 1..levels {
            s.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); fan].join(", ")));
        }
        s.push_str(&format!("aliases: *a{}\n", levels - 1));
        s
    }

    #[test]
    fn alias_bombs_are_refused_before_they_are_built() {
        let limits = YamlLimits::default();
        let bomb = alias_bomb(12, 9);
        assert!(bomb.len() < 1000);
        assert_eq!(check_yaml(&bomb, &limits), Err(Refusal::TooLarge { bytes: None, expanded: true }));
        // A mapping anchor expanded by merge keys, and one huge scalar repeated.
        let merge = format!(
            "base: &b {{k: {}}}\n{}",
            "v".repeat(4000),
            (0..40).map(|i| format!("m{i}: *b\n")).collect::<String>()
        );
        assert!(check_yaml(&merge, &limits).is_err());
        // Modest reuse of an anchor is fine, and parses.
        let fine = "defaults: &d {lang: en}\none: *d\ntwo: *d\naliases: [A, B]\n";
        assert_eq!(check_yaml(fine, &limits), Ok(()));
        assert_eq!(fields(&parse_yaml(fine).unwrap()).aliases, ["A", "B"]);
    }

    #[test]
    fn deep_nesting_and_oversize_blocks_are_refused() {
        let limits = YamlLimits::default();
        let deep = format!("a: {}x{}\n", "[".repeat(100), "]".repeat(100));
        assert_eq!(check_yaml(&deep, &limits), Err(Refusal::TooDeep));
        let block: String = (0..80).map(|i| format!("{}k{i}:\n", " ".repeat(i))).collect();
        assert_eq!(check_yaml(&block, &limits), Err(Refusal::TooDeep));
        let big = format!("title: {}\n", "t".repeat(70_000));
        assert_eq!(
            check_yaml(&big, &limits),
            Err(Refusal::TooLarge { bytes: Some(big.len() as u64), expanded: false })
        );
        // Syntax errors are the loader's to report, with their position.
        assert_eq!(check_yaml("title: [oops\n", &limits), Ok(()));
    }

    #[test]
    fn stable_json_ignores_volatile_keys_and_order() {
        let a = parse_yaml("b: 1\na: 2\nz: {y: 1, x: 2}\nupdated: 2024-01-01").unwrap();
        let b = parse_yaml("z: {x: 2, y: 1}\na: 2\nb: 1\nModified: yesterday").unwrap();
        assert_eq!(stable_json(&a), stable_json(&b));
        assert_eq!(stable_json(&a), r#"{"a":2,"b":1,"z":{"x":2,"y":1}}"#);
        let keys: Vec<&String> = a.keys().collect();
        assert_eq!(keys, ["a", "b", "updated", "z"], "parsed frontmatter keeps a stable order");
    }
}

use super::*;
use crate::markdown::analyze;

fn chunks(body: &str, opts: &ChunkOptions) -> Vec<Chunk> {
    let page = PageText { source_id: "s", slug: "p", title: "Page", aliases: &[], body, body_line_offset: 0 };
    chunk_page(page, &analyze(body).blocks, opts)
}

#[test]
fn estimate_is_generous_but_sane() {
    assert_eq!(estimate_tokens("hello, world"), 3);
    assert_eq!(estimate_tokens(""), 0);
    assert_eq!(estimate_tokens("internationalisation"), 4);
}

#[test]
fn sections_carry_heading_paths_and_lines() {
    let body = "# Page\n\nIntro text that is long enough to stand on its own as a chunk here.\n\n\
                ## Design\n\nThe design section explains the hall's acoustic ceiling treatment in detail.\n\n\
                ### Ceiling\n\nPanels of slatted oak absorb the echo of two hundred voices at once, they say.\n";
    let cs = chunks(body, &ChunkOptions { min_tokens: 5, ..ChunkOptions::default() });
    let paths: Vec<String> = cs.iter().map(|c| c.heading_path.join(PATH_SEPARATOR)).collect();
    assert_eq!(paths, ["Page", "Page › Design", "Page › Design › Ceiling"]);
    assert_eq!((cs[0].line_start, cs[0].line_end), (1, 3));
    assert_eq!((cs[2].line_start, cs[2].line_end), (9, 11));
    assert!(cs[2].embed_text().starts_with("Page › Design › Ceiling\n\n### Ceiling\n\nPanels"));
}

#[test]
fn long_sections_split_at_sentences_with_overlap() {
    let sentence = "The amphitheater hosts structured debates every single week of the year. ";
    let body = format!("## Long\n\n{}\n", sentence.repeat(40));
    let opts = ChunkOptions { max_tokens: 64, overlap_tokens: 16, min_tokens: 4 };
    let cs = chunks(&body, &opts);
    assert!(cs.len() > 5, "{}", cs.len());
    for c in &cs {
        assert!(estimate_tokens(&c.text) <= 64, "{c:?}");
        assert!(c.text.ends_with('.'), "cut mid-sentence: {:?}", c.text);
    }
    // Overlap: each chunk after the first starts with the previous chunk's last sentence.
    let last_sentence = cs[0].text.rsplit(". ").next().unwrap();
    assert!(cs[1].text.starts_with(last_sentence.trim()), "{:?}", cs[1].text);
}

#[test]
fn code_blocks_and_tables_split_only_between_lines() {
    let code: String = (0..200).map(|i| format!("let value_{i} = compute(input_{i}, {i});\n")).collect();
    let body = format!("```rust\n{code}```\n");
    let cs = chunks(&body, &ChunkOptions { max_tokens: 64, overlap_tokens: 0, min_tokens: 1 });
    assert!(cs.len() > 3);
    for c in &cs {
        for line in c.text.lines() {
            assert!(line.starts_with("let value_") || line.starts_with("```"), "line cut: {line:?}");
            if line.starts_with("let") {
                assert!(line.ends_with(");"), "line cut: {line:?}");
            }
        }
    }
}

#[test]
fn tiny_sections_merge_with_their_neighbour() {
    let body = "## A\n\nshort.\n\n## B\n\nThis section has enough words in it to stand alone as its own chunk of text.\n";
    let cs = chunks(body, &ChunkOptions { min_tokens: 10, ..ChunkOptions::default() });
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].heading_path, ["Page", "A"]);
    assert!(cs[0].text.contains("short.") && cs[0].text.contains("stand alone"));
}

#[test]
fn empty_body_gets_a_title_chunk() {
    let page = PageText {
        source_id: "s",
        slug: "p",
        title: "Hall",
        aliases: &["Hall of Light".to_string()],
        body: "",
        body_line_offset: 3,
    };
    let cs = chunk_page(page, &[], &ChunkOptions::default());
    assert_eq!(cs.len(), 1);
    assert_eq!(cs[0].text, "Hall\naliases: Hall of Light");
    assert_eq!((cs[0].line_start, cs[0].line_end), (1, 3));
}

#[test]
fn runs_without_spaces_and_huge_headings_are_cut_to_the_budget() {
    let opts = ChunkOptions::default();
    for body in [
        "a".repeat(200_000),
        "[".repeat(50_000),
        format!("# {}\n\ntext\n", "h".repeat(50_000)),
        format!("```\n{}\n```\n", "x;".repeat(40_000)),
    ] {
        let cs = chunks(&body, &opts);
        assert!(cs.len() > 10, "{} chunks", cs.len());
        for c in &cs {
            assert!(
                estimate_tokens(&c.text) <= opts.max_tokens,
                "a chunk of {} tokens",
                estimate_tokens(&c.text)
            );
            assert!(c.heading_path.iter().all(|h| h.chars().count() <= MAX_NAME_CHARS + 1));
        }
    }
    assert_eq!(clip_name(&"é".repeat(300)).chars().count(), MAX_NAME_CHARS + 1);
    assert_eq!(clip_name("short"), "short");
}

#[test]
fn text_without_spaces_counts_a_token_per_character() {
    assert_eq!(estimate_tokens("東京は日本の首都です"), 10);
    let body = "東京は日本の首都です。".repeat(100);
    let cs = chunks(&body, &ChunkOptions::default());
    assert!(cs.len() >= 4, "1,100 characters are 1,100 tokens: {} chunks", cs.len());
    for c in &cs {
        assert!(c.text.chars().count() <= ChunkOptions::default().max_tokens, "{}", c.text.chars().count());
    }
}

#[test]
fn ids_are_stable_and_depend_on_text() {
    let a = chunks("Some text here that is a paragraph.\n", &ChunkOptions::default());
    let b = chunks("Some text here that is a paragraph.\n", &ChunkOptions::default());
    let c = chunks("Other text here that is a paragraph.\n", &ChunkOptions::default());
    assert_eq!(a[0].id, b[0].id);
    assert_ne!(a[0].id, c[0].id);
    assert_ne!(a[0].text_hash, c[0].text_hash);
}

//! The hostile fixture vault (`fixtures/vaults/hostile`): every file becomes the page or the
//! error its golden (`hostile.expected.json`) says, and the scan reports what it cannot include.

use cairn_ingest::{Error, ParseOptions, PathFilter, ScanOptions, read_scanned, rel_string, scan};
use serde_json::{Value, json};
use std::path::PathBuf;

#[test]
fn hostile_vault_matches_its_golden() {
    let fixtures = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("../fixtures/vaults");
    let root = fixtures.join("hostile");
    let report = scan(&root, &PathFilter::new(&ScanOptions::default()).unwrap()).unwrap();
    let mut pages = serde_json::Map::new();
    let mut failures = serde_json::Map::new();
    for file in &report.files {
        let key = rel_string(&file.rel);
        match read_scanned("hostile", &root, &report, file, &ParseOptions::default()) {
            Ok(p) => {
                for problem in &p.problems {
                    assert!(problem.to_string().contains(&key), "problem must name the file: {problem}");
                }
                pages.insert(
                    key,
                    json!({
                        "slug": p.slug, "title": p.title, "aliases": p.aliases_normalized,
                        "problems": p.problems.iter().map(Error::kind).collect::<Vec<_>>(),
                        "chunks": p.chunks.len(),
                    }),
                );
            }
            Err(e) => {
                assert!(e.to_string().contains(&key), "error must name the file: {e}");
                failures.insert(key, json!(e.kind()));
            }
        }
    }
    let mut scan_problems: Vec<Value> = report
        .problems
        .iter()
        .map(|e| json!({"path": rel_string(e.path().unwrap()), "kind": e.kind()}))
        .collect();
    scan_problems.sort_by_key(|v| v.to_string());
    let actual = json!({"pages": pages, "failures": failures, "scan_problems": scan_problems});
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("hostile.expected.json")).unwrap())
            .unwrap();
    assert_eq!(actual, expected, "actual:\n{}", serde_json::to_string_pretty(&actual).unwrap());
}

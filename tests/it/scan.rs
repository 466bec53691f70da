use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo")).join("fixtures").join(rel)
}

#[test]
fn scan_source_reports_pages_and_failures_with_reasons() {
    let summary = cairn::scan_source("hostile", &fixture("vaults/hostile"), &Default::default()).unwrap();
    assert_eq!(summary.pages.len(), 13);
    let failed: Vec<(&str, &str)> =
        summary.failures.iter().map(|f| (f.path.as_str(), f.kind.as_str())).collect();
    for expected in [("image.md", "binary"), ("latin1.md", "not_utf8")] {
        assert!(failed.contains(&expected), "{expected:?} missing from {failed:?}");
    }
    for f in &summary.failures {
        assert!(f.reason.contains(&f.path), "reason must name the file: {}", f.reason);
    }
    let slug = |path: &str| summary.pages.iter().find(|p| p.path == path).map(|p| p.slug.as_str());
    assert_eq!(slug("duplicate-name.md"), Some("duplicate-name"), "the name the slug is, as it stands");
    assert_eq!(slug("Duplicate Name.md"), Some("duplicate-name~2"), "a file of a taken slug is indexed too");
    let bad_yaml = summary.pages.iter().find(|p| p.slug == "bad-yaml").unwrap();
    assert_eq!(bad_yaml.problems.len(), 1, "broken frontmatter is reported, the body kept");
}

#[test]
fn source_ids_come_from_folder_names() {
    assert_eq!(cairn::source_id_from_dir(&fixture("vaults/hostile")).unwrap(), "hostile");
    assert!(cairn::validate_source_id("Bad_Id").is_err());
    assert!(cairn::validate_source_id("-x").is_err());
    assert!(cairn::validate_source_id("notes-2").is_ok());
}

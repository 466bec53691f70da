//! Scanning a source root for markdown files, with the rules every source shares: hidden
//! folders and `node_modules` skipped, include/exclude globs, no symlink followed out of the
//! root, loops and unreadable folders reported instead of fatal, duplicate slugs refused.

use crate::error::{Error, Result};
use crate::page::{ParseOptions, ParsedPage, read_page};
use crate::placeholder::{is_dataless, placeholder_of};
use crate::slug::{is_markdown, slug_changes, slug_variant, slugify_path};
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use walkdir::WalkDir;

/// Which files of a root belong to the source, beyond the fixed rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanOptions {
    /// When non-empty, only files matching one of these (vault-relative, `/`-separated) count.
    #[serde(default)]
    pub include: Vec<String>,
    /// Files and folders matching one of these are skipped.
    #[serde(default)]
    pub exclude: Vec<String>,
}

/// Compiled [`ScanOptions`] plus the fixed rules; also used by the watcher to filter events.
#[derive(Debug, Clone)]
pub struct PathFilter {
    include: Option<GlobSet>,
    exclude: GlobSet,
}

impl PathFilter {
    pub fn new(opts: &ScanOptions) -> Result<Self> {
        let build = |globs: &[String]| -> Result<GlobSet> {
            let mut b = GlobSetBuilder::new();
            for g in globs {
                b.add(Glob::new(g).map_err(|e| Error::Glob { glob: g.clone(), message: e.to_string() })?);
            }
            b.build().map_err(|e| Error::Glob { glob: globs.join(", "), message: e.to_string() })
        };
        Ok(Self {
            include: if opts.include.is_empty() { None } else { Some(build(&opts.include)?) },
            exclude: build(&opts.exclude)?,
        })
    }

    /// Whether a folder (vault-relative) is walked.
    pub fn allows_dir(&self, rel: &Path) -> bool {
        !rel.components().any(|c| is_ignored_name(&c.as_os_str().to_string_lossy()))
            && !self.exclude.is_match(rel)
    }

    /// Whether a file (vault-relative) is part of the source.
    pub fn allows_file(&self, rel: &Path) -> bool {
        is_markdown(rel) && self.allows_dir(rel) && self.include.as_ref().is_none_or(|inc| inc.is_match(rel))
    }
}

/// Hidden files and folders (`.obsidian`, `.git`, `.trash`, editor temp files) and
/// `node_modules` are never part of a source.
pub fn is_ignored_name(name: &str) -> bool {
    (name.starts_with('.') && name != "." && name != "..") || name == "node_modules"
}

/// A markdown file found by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedFile {
    pub rel: PathBuf,
    pub slug: String,
    pub size: u64,
    /// Modification time, milliseconds since the Unix epoch (0 when unknown).
    pub mtime_ms: i64,
}

/// The files of a source and what could not be included.
#[derive(Debug, Clone, Default)]
pub struct ScanReport {
    /// In path order, but for files that do not have the slug their name makes (see
    /// [`assign_slugs`]); slugs are unique.
    pub files: Vec<ScannedFile>,
    pub problems: Vec<Error>,
    /// Paths below the root (vault-relative, `.` for the root) that could not be read for a
    /// reason other than being gone (EACCES, EIO, ESTALE…): the scan cannot say what is under
    /// them, so their pages are not gone (see [`crate::folder::shield`]).
    pub unreadable: Vec<PathBuf>,
    /// Folders below the root on another file system than the folder holding them (mount
    /// points, vault-relative), in path order.
    pub mounts: Vec<PathBuf>,
    /// Notes whose content is not on this machine (a cloud client's placeholder, see
    /// [`crate::placeholder`]): there, but not to be read. Not in `files`.
    pub placeholders: Vec<PathBuf>,
}

/// `root.join(rel)` as the file it really is, refused when a symlink on the way leads out of
/// the root: what the scan refuses, the paths of live events and of reads refuse too (a link
/// made while watching, or a file replaced by a link after it was indexed).
pub fn within_root(root: &Path, rel: &Path) -> Result<PathBuf> {
    let io = |e: std::io::Error| Error::io(rel, &e);
    let canon_root = root.canonicalize().map_err(io)?;
    let target = root.join(rel).canonicalize().map_err(io)?;
    if target.starts_with(&canon_root) {
        Ok(target)
    } else {
        Err(Error::SymlinkOutsideRoot { path: rel.to_path_buf(), target })
    }
}

/// Scan `root`. Fails only when the root itself cannot be read.
pub fn scan(root: &Path, filter: &PathFilter) -> Result<ScanReport> {
    let canon_root = root.canonicalize().map_err(|e| Error::io(root, &e))?;
    let problems = RefCell::new(Vec::new());
    let mut found = Vec::new();
    let (mut unreadable, mut mounts, mut placeholders) = (Vec::new(), Vec::new(), Vec::new());
    // Each folder's device, to tell a mount point from the folder holding it.
    let mut devices: HashMap<PathBuf, u64> = HashMap::new();
    if let Ok(meta) = std::fs::metadata(root) {
        devices.insert(root.to_path_buf(), crate::folder::device_of(&meta));
    }
    let rel_of = |p: &Path| match p.strip_prefix(root) {
        Ok(r) if r.as_os_str().is_empty() => PathBuf::from("."),
        Ok(r) => r.to_path_buf(),
        Err(_) => p.to_path_buf(),
    };
    let walker = WalkDir::new(root).follow_links(true).sort_by_file_name().into_iter();
    let walker = walker.filter_entry(|e| {
        if e.depth() == 0 {
            return true;
        }
        let rel = rel_of(e.path());
        if e.file_type().is_dir() && !filter.allows_dir(&rel) {
            return false;
        }
        if e.path_is_symlink() {
            match e.path().canonicalize() {
                Ok(target) if !target.starts_with(&canon_root) => {
                    problems.borrow_mut().push(Error::SymlinkOutsideRoot { path: rel, target });
                    return false;
                }
                Err(_) => return false, // dangling: nothing to index
                Ok(_) => {}
            }
        }
        true
    });
    for entry in walker {
        match entry {
            Ok(e) if e.file_type().is_file() => {
                let rel = rel_of(e.path());
                if let Some(note) = placeholder_of(&rel).filter(|n| filter.allows_file(n)) {
                    placeholders.push(note);
                    continue;
                }
                if !filter.allows_file(&rel) {
                    continue;
                }
                let Some(slug) = slugify_path(&rel) else {
                    problems.borrow_mut().push(Error::NoSlug { path: rel });
                    continue;
                };
                let meta = e.metadata().ok();
                if meta.as_ref().is_some_and(is_dataless) {
                    placeholders.push(rel);
                    continue;
                }
                found.push(ScannedFile {
                    rel,
                    slug,
                    size: meta.as_ref().map_or(0, |m| m.len()),
                    mtime_ms: meta.and_then(|m| m.modified().ok()).map_or(0, mtime_ms),
                });
            }
            Ok(e) if e.file_type().is_dir() && e.depth() > 0 => {
                let Ok(meta) = e.metadata() else { continue };
                let dev = crate::folder::device_of(&meta);
                let parent = e.path().parent().and_then(|p| devices.get(p));
                if parent.is_some_and(|&p| p != dev) {
                    mounts.push(rel_of(e.path()));
                }
                devices.insert(e.path().to_path_buf(), dev);
            }
            Ok(_) => {}
            Err(err) => {
                let path = err.path().map(rel_of).unwrap_or_default();
                // A dangling link is simply nothing to index; anything else hides what is there.
                if err.loop_ancestor().is_none()
                    && err.io_error().is_none_or(|e| e.kind() != std::io::ErrorKind::NotFound)
                {
                    unreadable.push(path.clone());
                }
                let problem = match err.loop_ancestor() {
                    Some(ancestor) => Error::SymlinkLoop { path, ancestor: rel_of(ancestor) },
                    None => match err.io_error() {
                        Some(e) => Error::io(path, e),
                        None => Error::Io { path, message: err.to_string() },
                    },
                };
                problems.borrow_mut().push(problem);
            }
        }
    }
    let problems = problems.into_inner();
    let files = assign_slugs(found);
    mounts.sort();
    placeholders.sort();
    placeholders.dedup();
    // A stub beside a whole file (a download just finished) stands for nothing.
    placeholders.retain(|p| !files.iter().any(|f| f.rel == *p));
    Ok(ScanReport { files, problems, unreadable, mounts, placeholders })
}

/// Read a file of `report` as a new index would: under the slug the scan gave it (another
/// file's name may make the same slug).
pub fn read_scanned(
    id: &str,
    root: &Path,
    report: &ScanReport,
    file: &ScannedFile,
    opts: &ParseOptions,
) -> Result<ParsedPage> {
    let mut page = read_page(id, root, &file.rel, opts)?;
    if page.slug != file.slug {
        let holder = report.files.iter().find(|f| f.slug == page.slug).map_or(Path::new(""), |f| &f.rel);
        page.take_slug(file.slug.clone(), holder);
    }
    Ok(page)
}

/// Milliseconds since the Unix epoch.
pub fn mtime_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Give every file the slug a new index gives it. Files whose names make one slug are ranked by
/// [`slug_changes`] (the name the slug most nearly is first), then by path: the first has the
/// slug, the k-th `slug~k` ([`slug_variant`]). The files are in path order, except that those
/// without their own slug come last, so an index built by reading them in order (a file takes
/// the first of its slugs no file holds) gives each the slug it has here.
fn assign_slugs(mut files: Vec<ScannedFile>) -> Vec<ScannedFile> {
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    let mut claims: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, f) in files.iter().enumerate() {
        claims.entry(f.slug.clone()).or_default().push(i);
    }
    // `None` (a file with its own slug) sorts first, then each base's later files by rank.
    let mut order: Vec<(Option<(String, usize)>, usize)> = (0..files.len()).map(|i| (None, i)).collect();
    for (base, mut claimants) in claims.into_iter().filter(|(_, c)| c.len() > 1) {
        claimants.sort_by_key(|&i| (slug_changes(&files[i].rel), i));
        for (rank, &i) in claimants.iter().enumerate().skip(1) {
            files[i].slug = slug_variant(&base, rank as u32 + 1);
            order[i].0 = Some((base.clone(), rank));
        }
    }
    order.sort();
    let mut files: Vec<Option<ScannedFile>> = files.into_iter().map(Some).collect();
    order.into_iter().filter_map(|(_, i)| files[i].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, rel: &str, text: &str) {
        let p = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn skips_hidden_node_modules_excluded_and_non_markdown() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for rel in [
            "a.md",
            "sub/b.markdown",
            ".obsidian/c.md",
            ".git/d.md",
            ".trash/e.md",
            "node_modules/f.md",
            "drafts/g.md",
            "h.txt",
            ".hidden.md",
        ] {
            write(root, rel, "x");
        }
        let filter =
            PathFilter::new(&ScanOptions { include: vec![], exclude: vec!["drafts/**".into()] }).unwrap();
        let report = scan(root, &filter).unwrap();
        let rels: Vec<_> = report.files.iter().map(|f| f.rel.to_string_lossy().into_owned()).collect();
        assert_eq!(rels, ["a.md", "sub/b.markdown"]);
        assert!(report.problems.is_empty());
    }

    #[test]
    fn include_globs_restrict() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "notes/a.md", "x");
        write(dir.path(), "other/b.md", "x");
        let filter =
            PathFilter::new(&ScanOptions { include: vec!["notes/**".into()], exclude: vec![] }).unwrap();
        let report = scan(dir.path(), &filter).unwrap();
        assert_eq!(report.files.len(), 1);
        assert_eq!(report.files[0].slug, "notes/a");
    }

    #[test]
    fn bad_glob_is_a_clear_error() {
        let err = PathFilter::new(&ScanOptions { include: vec!["a/[".into()], exclude: vec![] }).unwrap_err();
        assert_eq!(err.kind(), "glob");
        assert!(err.to_string().contains("a/["));
    }

    #[test]
    fn files_of_one_slug_are_all_indexed_and_the_nearest_name_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        for rel in ["(c).md", "C.md", "My Note.md", "b.md", "c-.md", "my-note.md"] {
            write(dir.path(), rel, "x");
        }
        let report = scan(dir.path(), &PathFilter::new(&ScanOptions::default()).unwrap()).unwrap();
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let got: Vec<(String, &str)> =
            report.files.iter().map(|f| (f.rel.to_string_lossy().into_owned(), f.slug.as_str())).collect();
        let want = [
            ("C.md", "c"),
            ("b.md", "b"),
            ("my-note.md", "my-note"),
            // The files a new index reads last, so that each finds the slug it has here free.
            ("c-.md", "c~2"),
            ("(c).md", "c~3"),
            ("My Note.md", "my-note~2"),
        ];
        assert_eq!(got, want.map(|(p, s)| (p.to_string(), s)));
    }

    #[cfg(unix)]
    #[test]
    fn a_path_through_a_link_out_of_the_root_is_refused_and_one_inside_is_not() {
        let (dir, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(outside.path().join("secret.md"), "# Secret\n").unwrap();
        std::fs::create_dir(dir.path().join("in")).unwrap();
        std::fs::write(dir.path().join("in/note.md"), "# Note\n").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("in"), dir.path().join("alias")).unwrap();
        let refused = within_root(dir.path(), Path::new("out/secret.md")).unwrap_err();
        assert!(matches!(refused, Error::SymlinkOutsideRoot { .. }), "{refused}");
        let inside = within_root(dir.path(), Path::new("alias/note.md")).unwrap();
        assert_eq!(inside, dir.path().canonicalize().unwrap().join("in/note.md"));
    }

    #[test]
    fn symlinks_out_of_root_and_loops_are_reported_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.md", "x");
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "in/a.md", "x");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("in"), dir.path().join("in/loop")).unwrap();
        let report = scan(dir.path(), &PathFilter::new(&ScanOptions::default()).unwrap()).unwrap();
        let slugs: Vec<_> = report.files.iter().map(|f| f.slug.as_str()).collect();
        assert_eq!(slugs, ["in/a"]);
        let kinds: Vec<_> = report.problems.iter().map(Error::kind).collect();
        assert!(kinds.contains(&"symlink_outside_root"), "{kinds:?}");
        assert!(kinds.contains(&"symlink_loop"), "{kinds:?}");
    }

    #[test]
    fn placeholders_are_there_but_not_files_to_read() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.md", "# A\n");
        write(dir.path(), "sub/.Evicted Note.md.icloud", "stub");
        write(dir.path(), ".b.md.icloud", "stub");
        write(dir.path(), "b.md", "# B, downloaded again\n");
        write(dir.path(), "drafts/.c.md.icloud", "stub");
        let filter =
            PathFilter::new(&ScanOptions { include: vec![], exclude: vec!["drafts/**".into()] }).unwrap();
        let report = scan(dir.path(), &filter).unwrap();
        let files: Vec<_> = report.files.iter().map(|f| f.slug.as_str()).collect();
        assert_eq!(files, ["a", "b"]);
        assert_eq!(report.placeholders, [PathBuf::from("sub/Evicted Note.md")]);
    }

    #[test]
    fn missing_root_is_an_error() {
        let err = scan(Path::new("/nonexistent/cairn"), &PathFilter::new(&ScanOptions::default()).unwrap());
        assert_eq!(err.unwrap_err().kind(), "io");
    }
}

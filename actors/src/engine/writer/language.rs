//! A source's language: configured, else the one recorded with its tables, else told from a
//! sample of its folder's text the first time it is indexed (and recorded then, so that every
//! reader, on any machine, reads its words the same way).

use cairn_index::resident::Lang;
use std::path::{Path, PathBuf};

/// Notes read for the sample, at most, and bytes read of each.
const SAMPLE_FILES: usize = 64;
const SAMPLE_BYTES_EACH: usize = 4096;

/// The language of the notes under `root`, when their text tells it (`None` when it does not:
/// an empty or missing folder, a few words, a mix).
pub(super) async fn told_from(root: PathBuf) -> Option<Lang> {
    let sample = tokio::task::spawn_blocking(move || sample(&root)).await.unwrap_or_default();
    Lang::detect(&sample)
}

/// The prose of up to [`SAMPLE_FILES`] notes under `root` (by path, shallowest folders first):
/// frontmatter and fenced code left out, which are not in the note's language.
fn sample(root: &Path) -> String {
    let mut out = String::new();
    let mut folders = vec![root.to_path_buf()];
    let mut read = 0;
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        // Symbolic links are not followed: a link to a folder above would be walked for ever.
        let mut entries: Vec<(PathBuf, bool)> = entries
            .filter_map(|e| e.ok())
            .map(|e| (e.path(), e.file_type().is_ok_and(|t| t.is_dir())))
            .collect();
        entries.sort();
        for (path, dir) in entries {
            let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
            if hidden {
                continue;
            }
            if dir {
                folders.insert(0, path);
            } else if path.extension().is_some_and(|e| e == "md" || e == "markdown") && read < SAMPLE_FILES {
                read += 1;
                out.push_str(&prose(&head_of(&path)));
                out.push('\n');
            }
        }
        if read >= SAMPLE_FILES {
            break;
        }
    }
    out
}

/// The first bytes of a file, as text (cut at a character boundary).
fn head_of(path: &Path) -> String {
    use std::io::Read;
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(SAMPLE_BYTES_EACH as u64).read_to_end(&mut buf);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

/// A note's lines without its frontmatter and fenced code.
fn prose(text: &str) -> String {
    let mut lines = text.lines().peekable();
    if lines.peek().is_some_and(|l| l.trim_end() == "---") {
        lines.next();
        for l in lines.by_ref() {
            if l.trim_end() == "---" {
                break;
            }
        }
    }
    let mut out = String::new();
    let mut fenced = false;
    for l in lines {
        if l.trim_start().starts_with("```") || l.trim_start().starts_with("~~~") {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_folder_of_german_notes_reads_as_german_and_an_empty_one_tells_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let note = "---\ntitle: Katzen\naliases: [cat, kitty]\n---\n# Katzen\n\nDie Katze sitzt auf der Matte \
                    und schaut aus dem Fenster, während der Hund im Garten schläft.\n\n```\nlet x = the_code();\n```\n";
        std::fs::create_dir(dir.path().join("Tiere")).unwrap();
        std::fs::write(dir.path().join("Tiere/Katzen.md"), note).unwrap();
        std::fs::write(
            dir.path().join("Wetter.md"),
            "# Wetter\n\nMorgen wird es regnen, und die Kinder bleiben im Haus, weil es draußen kalt ist.\n",
        )
        .unwrap();
        assert!(!prose(note).contains("aliases") && !prose(note).contains("the_code"));
        assert_eq!(told_from(dir.path().to_path_buf()).await, Lang::parse("de"));
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(told_from(empty.path().to_path_buf()).await, None);
        // A link back up, in a folder with no notes: the walk ends (it is not followed).
        std::fs::create_dir(empty.path().join("loop")).unwrap();
        std::os::unix::fs::symlink("..", empty.path().join("loop/up")).unwrap();
        assert_eq!(told_from(empty.path().to_path_buf()).await, None);
    }
}

//! Files that stand for a note whose content is not on this machine: a cloud client's
//! placeholder. Reading one forces a download (or fails), and taking one for a deleted note
//! would remove a page the user still has. So a placeholder is never read, never removed from
//! the index, and never taken as absent: its page stays as it was last indexed, and is read
//! again once the file is whole.
//!
//! The forms told apart here, behind [`placeholder_of`] and [`is_dataless`]:
//! - iCloud Drive's evicted file: `Name.md` replaced by a hidden stub `.Name.md.icloud` beside it;
//! - a file whose size is backed by no allocated block (at least [`DATALESS_MIN_BYTES`], so a
//!   small file a file system stores inline is not taken for one): how on-demand files of
//!   Linux sync clients and FUSE mounts show an evicted file;
//! - the platforms' own flags: macOS `SF_DATALESS`, Windows `FILE_ATTRIBUTE_OFFLINE`,
//!   `RECALL_ON_OPEN` and `RECALL_ON_DATA_ACCESS` (OneDrive, Dropbox, iCloud for Windows).

use std::fs::Metadata;
use std::path::{Path, PathBuf};

/// The smallest size a file with no allocated block must have to be taken for a placeholder.
/// ext4 keeps up to ~160 bytes inline, btrfs up to 2 KiB by default, with no block of their
/// own; 4 KiB is past both.
pub const DATALESS_MIN_BYTES: u64 = 4096;

/// The note an iCloud stub stands for, beside it: `.Name.md.icloud` → `Name.md`.
pub fn placeholder_of(rel: &Path) -> Option<PathBuf> {
    let name = rel.file_name()?.to_str()?;
    let target = name.strip_prefix('.')?.strip_suffix(".icloud")?;
    if target.is_empty() {
        return None;
    }
    Some(rel.with_file_name(target))
}

/// The iCloud stub that would stand for `rel` (`Name.md` → `.Name.md.icloud`).
pub fn stub_for(rel: &Path) -> Option<PathBuf> {
    let name = rel.file_name()?.to_str()?;
    Some(rel.with_file_name(format!(".{name}.icloud")))
}

/// Whether the note at `rel` (under `root`) stands evicted now: its iCloud stub is a file beside
/// it. A note gone from its path this way keeps its page.
pub fn is_evicted(root: &Path, rel: &Path) -> bool {
    stub_for(rel).is_some_and(|stub| root.join(stub).is_file())
}

/// Whether a file's content is not on this machine (its metadata, links followed).
pub fn is_dataless(meta: &Metadata) -> bool {
    if !meta.is_file() {
        return false;
    }
    #[cfg(target_os = "macos")]
    {
        use std::os::macos::fs::MetadataExt;
        const SF_DATALESS: u32 = 0x4000_0000;
        if meta.st_flags() & SF_DATALESS != 0 {
            return true;
        }
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        const OFFLINE: u32 = 0x1000;
        const RECALL_ON_OPEN: u32 = 0x4_0000;
        const RECALL_ON_DATA_ACCESS: u32 = 0x40_0000;
        if meta.file_attributes() & (OFFLINE | RECALL_ON_OPEN | RECALL_ON_DATA_ACCESS) != 0 {
            return true;
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if meta.len() >= DATALESS_MIN_BYTES && meta.blocks() == 0 {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_icloud_stub_names_the_note_beside_it() {
        assert_eq!(
            placeholder_of(Path::new("sub/.My Note.md.icloud")),
            Some(PathBuf::from("sub/My Note.md"))
        );
        assert_eq!(placeholder_of(Path::new(".a.md.icloud")), Some(PathBuf::from("a.md")));
        assert_eq!(placeholder_of(Path::new("a.md.icloud")), None, "not hidden: no stub");
        assert_eq!(placeholder_of(Path::new("..icloud")), None);
        assert_eq!(placeholder_of(Path::new(".obsidian")), None);
        assert_eq!(stub_for(Path::new("sub/a.md")), Some(PathBuf::from("sub/.a.md.icloud")));
    }

    #[cfg(unix)]
    #[test]
    fn a_file_with_no_block_behind_its_size_is_dataless_and_a_written_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let sparse = dir.path().join("sparse.md");
        std::fs::File::create(&sparse).unwrap().set_len(8192).unwrap();
        let meta = std::fs::metadata(&sparse).unwrap();
        use std::os::unix::fs::MetadataExt;
        if meta.blocks() != 0 {
            // A file system that allocates on set_len cannot make the case; nothing to check.
            eprintln!("{}: this file system allocates blocks for a sparse file", dir.path().display());
        } else {
            assert!(is_dataless(&meta));
        }
        let whole = dir.path().join("whole.md");
        std::fs::write(&whole, vec![b'x'; 8192]).unwrap();
        assert!(!is_dataless(&std::fs::metadata(&whole).unwrap()));
        // Small and empty files are never taken for placeholders (inline data has no block).
        std::fs::write(dir.path().join("small.md"), "# Small\n").unwrap();
        assert!(!is_dataless(&std::fs::metadata(dir.path().join("small.md")).unwrap()));
        std::fs::File::create(dir.path().join("empty.md")).unwrap();
        assert!(!is_dataless(&std::fs::metadata(dir.path().join("empty.md")).unwrap()));
        assert!(!is_dataless(&std::fs::metadata(dir.path()).unwrap()), "a folder");
    }
}

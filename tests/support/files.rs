//! Looking at what a daemon left on disk: [`snapshot`] (every entry under a directory, to prove
//! that a refused call changed nothing), [`files_under`], [`temp_files`] (leftover
//! `.wardfs-tmp-*` files), [`contains`] (to look for a secret in bytes) and [`resident_pages`] (what
//! of a file the kernel's page cache holds).

use std::path::{Path, PathBuf};

/// Snapshot of every file under `dir`: path, kind, contents, mode, mtime.
pub fn snapshot(dir: &Path) -> Vec<(String, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            let desc = if md.is_dir() {
                stack.push(e.path());
                format!("dir {:o} {}", md.mode(), md.mtime_nsec())
            } else if md.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(e.path()).unwrap().display())
            } else {
                format!(
                    "file {:o} {} {} {:?}",
                    md.mode(),
                    md.mtime_nsec(),
                    md.nlink(),
                    std::fs::read(e.path()).unwrap()
                )
            };
            out.push((rel, desc));
        }
    }
    out.sort();
    out
}

/// Every file (not directory) under `dir`, following no order; none when `dir` is missing.
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Every `.wardfs-tmp-*` file beneath `dir`.
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(".wardfs-tmp-") {
                out.push(e.path());
            }
        }
    }
    out
}

/// Whether `hay` contains `needle`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Removes everything in `dir` (not `dir` itself); symlinks are removed, never followed.
pub fn empty_dir(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if std::fs::symlink_metadata(&p).unwrap().is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
}

//! The local side of a mirror: walking, reading and writing a zone directory beneath its fd.
//!
//! Every access starts from the directory fd and resolves with `openat2(RESOLVE_BENEATH)`, like
//! the rest of the core, so a symlink inside the zone can never make the mirror read or write
//! outside it. Names are acted on with the `*at` calls, which never follow a final symlink.

use std::collections::BTreeMap;
use std::io::{self, Read as _};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use crate::core::zone::openat2_beneath;

use crate::core::retention::TMP_PREFIX;

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// What a walk found at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalKind {
    File,
    Dir,
    Symlink(String),
}

/// One entry of a local walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalItem {
    pub kind: LocalKind,
    pub size: u64,
    pub mtime_ns: i64,
    pub mode: u32,
}

impl LocalItem {
    fn from_stat(kind: LocalKind, st: &Stat) -> LocalItem {
        LocalItem {
            kind,
            size: st.st_size as u64,
            mtime_ns: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec as i64,
            mode: st.st_mode & 0o7777,
        }
    }
}

/// The most entries a walk names in [`LocalWalk::left_out`] (the rest are only counted).
pub const MAX_LEFT_OUT_SHOWN: usize = 1000;

/// Why a name that is not UTF-8 is not sent.
const NOT_UTF8: &str =
    "a name that is not UTF-8 (every wardfs path is; a directory of such a name \
                        is not entered); rename it to send it";

/// Why a symlink whose target is not UTF-8 is not sent.
const TARGET_NOT_UTF8: &str = "a symlink whose target is not UTF-8; it cannot be sent";

/// What a local walk found: every entry by relative path, and what it left out.
#[derive(Debug, Default)]
pub struct LocalWalk {
    pub items: BTreeMap<String, LocalItem>,
    /// (path, why), the first [`MAX_LEFT_OUT_SHOWN`]: the path relative to the root, escaped
    /// as git quotes it when it is not UTF-8 (`"d/caf\351.txt"`).
    pub left_out: Vec<(String, String)>,
    /// How many were left out (all of them).
    pub left_out_total: usize,
}

impl LocalWalk {
    fn leave_out(&mut self, dir_rel: &str, name: &[u8], why: &str) {
        self.left_out_total += 1;
        if self.left_out.len() >= MAX_LEFT_OUT_SHOWN {
            return;
        }
        let mut path = dir_rel.as_bytes().to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(name);
        let shown = crate::core::text::name_bytes(&path).into_owned();
        tracing::warn!(path = %shown, rule = why, "mirror push: not sent");
        self.left_out.push((shown, why.to_string()));
    }
}

/// A zone directory opened for mirroring.
pub struct LocalTree {
    root: OwnedFd,
}

impl LocalTree {
    /// Opens the directory `path`.
    pub fn open(path: &Path) -> io::Result<LocalTree> {
        let root = rustix::fs::open(
            path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(LocalTree { root })
    }

    fn open_dir(&self, rel: &str) -> io::Result<OwnedFd> {
        openat2_beneath(
            self.root.as_fd(),
            if rel.is_empty() { "." } else { rel },
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
            Mode::empty(),
        )
    }

    fn open_parent(&self, rel: &str) -> io::Result<(OwnedFd, String)> {
        let (parent, name) = split(rel);
        let fd = openat2_beneath(
            self.root.as_fd(),
            if parent.is_empty() { "." } else { parent },
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
        )?;
        Ok((fd, name.to_string()))
    }

    /// Returns every file, directory and symlink below the root, by relative path, and what it
    /// leaves out that a person would expect sent: a name that is not UTF-8 (a directory of such
    /// a name is not entered) and a symlink whose target is not UTF-8, named. Temp files of
    /// atomic writes and other file types are left out silently.
    pub fn walk(&self) -> io::Result<LocalWalk> {
        let mut out = LocalWalk::default();
        let mut pending = vec![String::new()];
        while let Some(dir_rel) = pending.pop() {
            let fd = self.open_dir(&dir_rel)?;
            let listing = rustix::fs::Dir::new(fd.try_clone()?)?;
            for ent in listing {
                let ent = ent?;
                let Ok(name) = ent.file_name().to_str() else {
                    out.leave_out(&dir_rel, ent.file_name().to_bytes(), NOT_UTF8);
                    continue;
                };
                if name == "." || name == ".." || name.starts_with(TMP_PREFIX) {
                    continue;
                }
                let rel = join(&dir_rel, name);
                let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => st,
                    Err(rustix::io::Errno::NOENT) => continue,
                    Err(e) => return Err(e.into()),
                };
                let kind = match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile => LocalKind::File,
                    FileType::Directory => {
                        pending.push(rel.clone());
                        LocalKind::Dir
                    }
                    FileType::Symlink => {
                        let target = rustix::fs::readlinkat(&fd, name, Vec::new())?;
                        match target.into_string() {
                            Ok(t) => LocalKind::Symlink(t),
                            Err(_) => {
                                out.leave_out(&dir_rel, name.as_bytes(), TARGET_NOT_UTF8);
                                continue;
                            }
                        }
                    }
                    _ => continue,
                };
                out.items.insert(rel, LocalItem::from_stat(kind, &st));
            }
        }
        Ok(out)
    }

    /// Returns the item at `rel` (not following a final symlink), `None` when absent.
    pub fn lstat(&self, rel: &str) -> io::Result<Option<LocalItem>> {
        let (parent, name) = match self.open_parent(rel) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let st = match rustix::fs::statat(&parent, name.as_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let kind = match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => LocalKind::File,
            FileType::Directory => LocalKind::Dir,
            FileType::Symlink => {
                let t = rustix::fs::readlinkat(&parent, name.as_str(), Vec::new())?;
                LocalKind::Symlink(t.to_string_lossy().into_owned())
            }
            _ => return Ok(None),
        };
        Ok(Some(LocalItem::from_stat(kind, &st)))
    }

    /// Opens the regular file `rel` for reading (never through a symlink), with its stat.
    pub fn open_file(&self, rel: &str) -> io::Result<(std::fs::File, LocalItem)> {
        let fd = openat2_beneath(
            self.root.as_fd(),
            rel,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
        )?;
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok((
            std::fs::File::from(fd),
            LocalItem::from_stat(LocalKind::File, &st),
        ))
    }

    /// Reads the regular file `rel`, returning its content and the stat it was read with.
    pub fn read(&self, rel: &str) -> io::Result<(Vec<u8>, LocalItem)> {
        let (mut file, item) = self.open_file(rel)?;
        let mut data = Vec::with_capacity(item.size as usize);
        file.read_to_end(&mut data)?;
        Ok((data, item))
    }

    /// Returns the BLAKE3 of the regular file `rel` (read 64 KiB at a time, never whole) and the
    /// stat it was read with.
    pub fn hash(&self, rel: &str) -> io::Result<(String, LocalItem)> {
        let (file, item) = self.open_file(rel)?;
        let mut hasher = blake3::Hasher::new();
        hasher.update_reader(file)?;
        Ok((hasher.finalize().to_hex().to_string(), item))
    }

    /// Opens a temp file beside `rel` (creating missing parents) for a download to stream into;
    /// [`Spool::commit`] renames it over a name of the same directory, dropping it removes it.
    pub fn spool(&self, rel: &str) -> io::Result<Spool> {
        let (parent_rel, _) = split(rel);
        if !parent_rel.is_empty() {
            self.mkdir_p(parent_rel, 0o755)?;
        }
        let dir = self.open_dir(parent_rel)?;
        let tmp = tmp_name();
        let fd = rustix::fs::openat(
            &dir,
            tmp.as_str(),
            OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(Spool {
            dir,
            tmp,
            file: std::fs::File::from(fd),
            hasher: blake3::Hasher::new(),
            len: 0,
            done: false,
        })
    }

    /// Creates the directory `rel` and its missing parents.
    pub fn mkdir_p(&self, rel: &str, mode: u32) -> io::Result<()> {
        let mut done = String::new();
        for part in rel.split('/') {
            let fd = self.open_dir(&done)?;
            match rustix::fs::mkdirat(&fd, part, Mode::from_raw_mode(mode)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            done = join(&done, part);
        }
        // The last component must now be a real directory (not a symlink or a file).
        self.open_dir(rel).map(|_| ())
    }

    /// Replaces `rel` with a symlink to `target` (through a temp name renamed into place).
    pub fn symlink_atomic(&self, rel: &str, target: &str) -> io::Result<LocalItem> {
        let (parent_rel, _) = split(rel);
        if !parent_rel.is_empty() {
            self.mkdir_p(parent_rel, 0o755)?;
        }
        let dir = self.open_dir(parent_rel)?;
        let (_, name) = split(rel);
        let tmp = tmp_name();
        rustix::fs::symlinkat(target, &dir, tmp.as_str())?;
        if let Err(e) = rustix::fs::renameat(&dir, tmp.as_str(), &dir, name) {
            let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
            return Err(e.into());
        }
        let st = rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        Ok(LocalItem::from_stat(
            LocalKind::Symlink(target.to_string()),
            &st,
        ))
    }

    /// Removes the file or symlink `rel` (or the empty directory, with `dir`); absent is fine.
    pub fn remove(&self, rel: &str, dir: bool) -> io::Result<()> {
        let (parent, name) = match self.open_parent(rel) {
            Ok(p) => p,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(&parent, name.as_str(), flags) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A download in progress: a temp file beside its destination that hashes what is written.
pub struct Spool {
    dir: OwnedFd,
    tmp: String,
    pub file: std::fs::File,
    hasher: blake3::Hasher,
    len: u64,
    done: bool,
}

impl io::Write for Spool {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Spool {
    /// The BLAKE3 of what was written.
    pub fn hash(&self) -> String {
        self.hasher.finalize().to_hex().to_string()
    }

    /// How many bytes were written.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Gives the file `mode`, syncs it and renames it over `name` (in the same directory);
    /// refuses when a directory is in the way. Returns the new file's stat.
    pub fn commit(&mut self, name: &str, mode: u32) -> io::Result<LocalItem> {
        if let Ok(st) = rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                return Err(io::Error::new(
                    io::ErrorKind::IsADirectory,
                    "a directory is in the way",
                ));
            }
        }
        rustix::fs::fchmod(&self.file, Mode::from_raw_mode(mode & 0o777))?;
        self.file.sync_data()?;
        rustix::fs::renameat(&self.dir, self.tmp.as_str(), &self.dir, name)?;
        self.done = true;
        let st = rustix::fs::statat(&self.dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
        Ok(LocalItem::from_stat(LocalKind::File, &st))
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        if !self.done {
            let _ = rustix::fs::unlinkat(&self.dir, self.tmp.as_str(), AtFlags::empty());
        }
    }
}

fn tmp_name() -> String {
    let n = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{TMP_PREFIX}{}-m{n}", std::process::id())
}

/// Splits a relative path into its parent ("" for the root) and its last name.
pub fn split(rel: &str) -> (&str, &str) {
    rel.rsplit_once('/').unwrap_or(("", rel))
}

/// Joins a relative directory ("" for the root) and a name.
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

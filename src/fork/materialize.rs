//! Filling a new fork's directory: the parent's tree made again beside it, every regular file
//! a hard link to the parent's (no data copied, no space used until written), directories made
//! with their permission bits, symlinks with their targets. Where the fork's directory is on
//! another filesystem than the parent's, or a file has too many links, the file is cloned
//! (`FICLONE`, on btrfs and XFS) or else copied.
//!
//! A hard link is safe to share because nothing wardfs does changes a file with more than one
//! link in place: the mount gives a file a copy of its own before the first change
//! (`core::copy_up`), and the API, restores and pulls write a temp file and rename it. A
//! program writing in place beside wardfs (not through the mount) would reach both; that is
//! documented (docs/forks.md).
//!
//! Every directory is opened relative to the one above with `O_NOFOLLOW`, so a symlink swapped
//! for a directory while the walk runs is never followed out of the zone. Entries that are
//! neither file, directory nor symlink (sockets, pipes, devices) are skipped and named; the temp
//! file of an atomic write under way (`.wardfs-tmp-*`) is left out.

use std::ffi::{CString, OsStr};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;

use crate::core::retention::TMP_PREFIX;
use crate::core::text;

/// Names skipped at most (the count goes on).
const MAX_SKIPPED: usize = 1000;

/// What filling a fork did.
#[derive(Debug, Default, Clone)]
pub struct Filled {
    /// Files linked to the parent's (sharing its data).
    pub linked: u64,
    /// Files copied or cloned (another filesystem, or too many links).
    pub copied: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Entries left out, with why (at most [`MAX_SKIPPED`]).
    pub skipped: Vec<String>,
    pub skipped_total: u64,
    /// Whether files are shared with the parent (linked) or copied.
    share: bool,
}

impl Filled {
    fn skip(&mut self, rel: &[u8], why: impl std::fmt::Display) {
        self.skipped_total += 1;
        if self.skipped.len() < MAX_SKIPPED {
            self.skipped
                .push(format!("{}: {why}", text::name_bytes(rel)));
        }
    }
}

/// Makes the tree under `src` (a directory fd of the parent zone) again under `dst` (the
/// fork's empty directory), as the module doc says; with `share` false every file is copied
/// (a parent that allows hard links changes a linked file in place).
pub fn fill(src: BorrowedFd<'_>, dst: BorrowedFd<'_>, share: bool) -> std::io::Result<Filled> {
    let mut filled = Filled {
        share,
        ..Filled::default()
    };
    let mut stack: Vec<(OwnedFd, OwnedFd, Vec<u8>)> = vec![(dup(src)?, dup(dst)?, Vec::new())];
    while let Some((s, d, rel)) = stack.pop() {
        fill_dir(&s, &d, &rel, &mut filled, &mut stack)?;
    }
    Ok(filled)
}

fn dup(fd: BorrowedFd<'_>) -> std::io::Result<OwnedFd> {
    Ok(rustix::io::fcntl_dupfd_cloexec(fd, 0)?)
}

/// Makes one directory's entries again; its subdirectories go on `stack`.
fn fill_dir(
    src: &OwnedFd,
    dst: &OwnedFd,
    rel: &[u8],
    filled: &mut Filled,
    stack: &mut Vec<(OwnedFd, OwnedFd, Vec<u8>)>,
) -> std::io::Result<()> {
    let dir = rustix::fs::openat(
        src,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    for entry in rustix::fs::Dir::read_from(&dir)? {
        let entry = entry?;
        let name = entry.file_name();
        // `.` and `..`, and an atomic write of the parent under way: its file arrives by the
        // rename the journal names, which a spare fork's update applies.
        if name == c"." || name == c".." || name.to_bytes().starts_with(TMP_PREFIX.as_bytes()) {
            continue;
        }
        let path = join(rel, name.to_bytes());
        if let Err(e) = fill_entry(src, dst, name, entry.file_type(), &path, filled, stack) {
            filled.skip(&path, e);
        }
    }
    Ok(())
}

fn join(rel: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = rel.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Makes one entry again (a directory: made, and queued).
fn fill_entry(
    src: &OwnedFd,
    dst: &OwnedFd,
    name: &std::ffi::CStr,
    kind: FileType,
    path: &[u8],
    filled: &mut Filled,
    stack: &mut Vec<(OwnedFd, OwnedFd, Vec<u8>)>,
) -> std::io::Result<()> {
    let kind = match kind {
        FileType::Unknown => FileType::from_raw_mode(
            rustix::fs::statat(src, name, AtFlags::SYMLINK_NOFOLLOW)?.st_mode,
        ),
        k => k,
    };
    match kind {
        FileType::RegularFile => {
            if filled.share && link_or_copy(src, dst, name)? {
                filled.linked += 1;
            } else if !filled.share {
                copy_file(src, dst, name)?;
                filled.copied += 1;
            } else {
                filled.copied += 1;
            }
        }
        FileType::Directory => {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let s = rustix::fs::openat(src, name, flags, Mode::empty())?;
            let mode = rustix::fs::fstat(&s)?.st_mode & 0o7777;
            // The owner may always list and fill the fork's copy (a directory without those
            // bits could not be filled); the umask does not apply.
            let bits = Mode::from_raw_mode(mode | 0o700);
            rustix::fs::mkdirat(dst, name, bits)?;
            rustix::fs::chmodat(dst, name, bits, AtFlags::empty())?;
            let d = rustix::fs::openat(dst, name, flags, Mode::empty())?;
            filled.dirs += 1;
            stack.push((s, d, path.to_vec()));
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(src, name, Vec::new())?;
            rustix::fs::symlinkat(target.as_c_str(), dst, name)?;
            filled.symlinks += 1;
        }
        other => {
            return Err(std::io::Error::other(format!(
                "a {} is not copied into a fork",
                kind_name(other)
            )))
        }
    }
    Ok(())
}

fn kind_name(k: FileType) -> &'static str {
    match k {
        FileType::Fifo => "named pipe",
        FileType::Socket => "socket",
        FileType::CharacterDevice | FileType::BlockDevice => "device",
        _ => "special file",
    }
}

/// Links `name` of `src` into `dst`; where a link cannot be made (another filesystem, too many
/// links), clones or copies it. Returns whether it linked.
fn link_or_copy(src: &OwnedFd, dst: &OwnedFd, name: &std::ffi::CStr) -> std::io::Result<bool> {
    match rustix::fs::linkat(src, name, dst, name, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::XDEV) | Err(Errno::MLINK) | Err(Errno::PERM) => {
            copy_file(src, dst, name)?;
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

/// Copies the regular file `name` of `src` into `dst` (a clone where the filesystem shares
/// extents), keeping its permission bits and times.
pub fn copy_file(src: &OwnedFd, dst: &OwnedFd, name: &std::ffi::CStr) -> std::io::Result<()> {
    let from = rustix::fs::openat(
        src,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&from)?;
    let to = rustix::fs::openat(
        dst,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(st.st_mode & 0o7777),
    )?;
    if rustix::fs::ioctl_ficlone(&to, &from).is_err() {
        std::io::copy(
            &mut std::fs::File::from(rustix::io::fcntl_dupfd_cloexec(&from, 0)?),
            &mut std::fs::File::from(rustix::io::fcntl_dupfd_cloexec(&to, 0)?),
        )?;
    }
    let times = rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as _,
        },
    };
    let _ = rustix::fs::futimens(&to, &times);
    Ok(())
}

/// Writes `content` as the file `rel` (relative to `root`, the fork's directory; directories
/// on the way made), replacing what is there: a file of the fork point the parent changed
/// while the fork was being filled.
pub fn put_file(root: BorrowedFd<'_>, rel: &str, content: &[u8], mode: i32) -> std::io::Result<()> {
    let (dir, name) = open_parent(root, rel)?;
    let name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    match rustix::fs::unlinkat(&dir, name.as_c_str(), AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        Err(e) => return Err(e.into()),
    }
    if mode == 0o120000 {
        let target = CString::new(content).map_err(std::io::Error::other)?;
        rustix::fs::symlinkat(target.as_c_str(), &dir, name.as_c_str())?;
        return Ok(());
    }
    let bits = if mode == 0o100755 { 0o755 } else { 0o644 };
    let fd = rustix::fs::openat(
        &dir,
        name.as_c_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(bits),
    )?;
    std::io::Write::write_all(&mut std::fs::File::from(fd), content)
}

/// Opens the directory holding `rel` beneath `root` (made where missing, never through a
/// symlink) and returns it with the last name.
fn open_parent<'a>(root: BorrowedFd<'_>, rel: &'a str) -> std::io::Result<(OwnedFd, &'a OsStr)> {
    walk_parent(root, rel, true)?.ok_or_else(|| std::io::Error::other("a directory is missing"))
}

/// Opens the directory holding `rel` beneath `root`, never through a symlink: with `make`,
/// directories missing on the way are made; without, `None` when one is missing (or is not a
/// directory).
fn walk_parent<'a>(
    root: BorrowedFd<'_>,
    rel: &'a str,
    make: bool,
) -> std::io::Result<Option<(OwnedFd, &'a OsStr)>> {
    let mut dir = dup(root)?;
    let mut parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let last = parts
        .pop()
        .ok_or_else(|| std::io::Error::other("an empty path"))?;
    if parts.iter().chain([&last]).any(|p| *p == "." || *p == "..") {
        return Err(std::io::Error::other("a path with `.` or `..` in it"));
    }
    for p in parts {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        dir = match rustix::fs::openat(&dir, p, flags, Mode::empty()) {
            Ok(d) => d,
            Err(Errno::NOENT) if make => {
                rustix::fs::mkdirat(&dir, p, Mode::from_raw_mode(0o755))?;
                rustix::fs::openat(&dir, p, flags, Mode::empty())?
            }
            Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::LOOP) if !make => return Ok(None),
            Err(e) => return Err(e.into()),
        };
    }
    Ok(Some((dir, OsStr::from_bytes(last.as_bytes()))))
}

/// Makes `rel` of the fork's directory `dst` again as it is now in the parent's `src`: what
/// `dst` has there is removed (a whole tree for a directory), then the parent's entry is linked
/// (a directory: its whole tree), as [`fill`] does. Nothing is made where the parent has nothing.
/// Used to bring a spare (a fork made ahead) up to date with the paths the journal names.
pub fn refill(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    rel: &str,
    filled: &mut Filled,
) -> std::io::Result<()> {
    let (to, name) = open_parent(dst, rel)?;
    let name = CString::new(name.as_bytes()).map_err(std::io::Error::other)?;
    remove_tree(&to, &name)?;
    let Some((from, _)) = walk_parent(src, rel, false)? else {
        return Ok(());
    };
    let st = match rustix::fs::statat(&from, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let kind = FileType::from_raw_mode(st.st_mode);
    let mut stack = Vec::new();
    if let Err(e) = fill_entry(&from, &to, &name, kind, rel.as_bytes(), filled, &mut stack) {
        filled.skip(rel.as_bytes(), e);
    }
    while let Some((s, d, rel)) = stack.pop() {
        fill_dir(&s, &d, &rel, filled, &mut stack)?;
    }
    Ok(())
}

/// Removes the entry `name` of `dir`, a directory with everything beneath it, never following
/// a symlink; nothing there is fine.
pub fn remove_tree(dir: &OwnedFd, name: &std::ffi::CStr) -> std::io::Result<()> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        Err(Errno::ISDIR) | Err(Errno::PERM) => {}
        Err(e) => return Err(e.into()),
    }
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let sub = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    let names: Vec<CString> = rustix::fs::Dir::read_from(&sub)?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_c_str() != c"." && n.as_c_str() != c"..")
        .collect();
    for n in names {
        remove_tree(&sub, &n)?;
    }
    match rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Gives the file `rel` beneath `root` the permission bits `bits` (never through a symlink).
pub fn set_mode(root: BorrowedFd<'_>, rel: &str, bits: u32) -> std::io::Result<()> {
    let (dir, name) = open_parent(root, rel)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, name, flags, Mode::empty())?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(bits & 0o7777))?;
    Ok(())
}

/// Removes the file or symlink `rel` beneath `root`, if it is there.
pub fn remove_file(root: BorrowedFd<'_>, rel: &str) -> std::io::Result<()> {
    let (dir, name) = open_parent(root, rel)?;
    match rustix::fs::unlinkat(&dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) | Err(Errno::ISDIR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    fn open(p: &std::path::Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn a_fill_links_files_makes_dirs_and_symlinks_and_names_what_it_skips() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::create_dir(&dst).unwrap();
        std::fs::write(src.join("a/b/f.txt"), b"hello").unwrap();
        // An API write of the parent under way: not part of its tree yet.
        std::fs::write(src.join("a/.wardfs-tmp-1-1"), b"half").unwrap();
        std::os::unix::fs::symlink("b/f.txt", src.join("a/l")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            src.join("fifo\x1b[2J").as_path(),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let filled = fill(open(&src).as_fd(), open(&dst).as_fd(), true).unwrap();
        assert_eq!((filled.linked, filled.dirs, filled.symlinks), (1, 2, 1));
        assert_eq!(filled.skipped_total, 1);
        assert!(
            filled.skipped[0].contains("named pipe"),
            "{:?}",
            filled.skipped
        );
        assert!(!filled.skipped[0].contains('\x1b'), "{:?}", filled.skipped);
        let (a, b) = (
            std::fs::metadata(src.join("a/b/f.txt")).unwrap(),
            std::fs::metadata(dst.join("a/b/f.txt")).unwrap(),
        );
        assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
        assert!(!dst.join("a/.wardfs-tmp-1-1").exists());
        assert_eq!(
            std::fs::read_link(dst.join("a/l")).unwrap().to_str(),
            Some("b/f.txt")
        );
    }

    #[test]
    fn put_file_replaces_a_link_without_touching_the_parents_file() {
        let t = tempfile::tempdir().unwrap();
        let (src, dst) = (t.path().join("src"), t.path().join("dst"));
        std::fs::create_dir_all(src.join("d")).unwrap();
        std::fs::create_dir(&dst).unwrap();
        std::fs::write(src.join("d/f"), b"parent now").unwrap();
        fill(open(&src).as_fd(), open(&dst).as_fd(), true).unwrap();
        put_file(open(&dst).as_fd(), "d/f", b"fork point", 0o100644).unwrap();
        assert_eq!(std::fs::read(src.join("d/f")).unwrap(), b"parent now");
        assert_eq!(std::fs::read(dst.join("d/f")).unwrap(), b"fork point");
    }
}

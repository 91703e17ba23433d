//! Breaking a hard link before a change (copy-up): the file at a name is copied to a temp file
//! beside it, which is then renamed over the name, so a change made afterwards reaches this name
//! only, never the file's other links (one may lie outside the zone).
//!
//! The copy keeps the contents (`copy_file_range`, which shares extents where the filesystem
//! can), the owner (where the daemon may set it), the extended attributes it may set, the
//! permission bits and the times. It is synced before the rename, so a crash leaves the name with
//! the old shared file or a whole copy, never a part of one. The rename happens only if the name
//! still holds the file the caller saw (compared right before it, under the caller's path lock):
//! a file put there beside wardfs meanwhile is never replaced by the copy (`ESTALE`). A copy
//! that fails half-way leaves only its temp file, which it removes.
//!
//! May not import any adapter.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::{AtFlags, Gid, Mode, OFlags, Stat, Timestamps, Uid, XattrFlags};
use rustix::io::{Errno, Result};

use super::store::tmp_name;

/// Replaces the name `name` in `dir`, which holds the file `seen` (its `fstatat`), by a copy of
/// that file of its own; returns the copy's attributes. The other links keep the old file as it
/// was.
pub fn copy_up(dir: BorrowedFd<'_>, name: &OsStr, seen: &Stat) -> Result<Stat> {
    let src = open_seen(dir, name, seen)?;
    let mut tmp = Temp::create(dir)?;
    std::io::copy(&mut &src, &mut &tmp.file).map_err(|e| errno_of(&e))?;
    copy_metadata(&src, seen, &tmp.file)?;
    rustix::fs::fsync(&tmp.file)?;
    check_seen(dir, name, seen)?;
    rustix::fs::renameat(dir, tmp.name.as_str(), dir, name)?;
    tmp.kept = true;
    rustix::fs::fstat(&tmp.file)
}

/// Opens `name` in `dir` for reading, if it is still the file `seen`.
fn open_seen(dir: BorrowedFd<'_>, name: &OsStr, seen: &Stat) -> Result<File> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    same_file(&rustix::fs::fstat(&fd)?, seen)?;
    Ok(File::from(fd))
}

/// Fails with `ESTALE` unless `name` in `dir` is still the file `seen`.
fn check_seen(dir: BorrowedFd<'_>, name: &OsStr, seen: &Stat) -> Result<()> {
    same_file(
        &rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?,
        seen,
    )
}

fn same_file(now: &Stat, seen: &Stat) -> Result<()> {
    if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino) {
        Ok(())
    } else {
        Err(Errno::STALE)
    }
}

/// Gives the copy `to` the owner, extended attributes, permission bits and times of `from`
/// (whose stat is `seen`); the owner and the attributes only where the daemon may set them.
fn copy_metadata(from: &File, seen: &Stat, to: &File) -> Result<()> {
    let owner = (Uid::from_raw(seen.st_uid), Gid::from_raw(seen.st_gid));
    // A daemon not running as root creates files it owns, as the linked file normally is.
    let _ = rustix::fs::fchown(to, Some(owner.0), Some(owner.1));
    copy_xattrs(from, to);
    // After the owner: chown clears the set-user-ID and set-group-ID bits.
    rustix::fs::fchmod(to, Mode::from_raw_mode(seen.st_mode & 0o7777))?;
    let times = Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: seen.st_atime,
            tv_nsec: seen.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: seen.st_mtime,
            tv_nsec: seen.st_mtime_nsec as _,
        },
    };
    rustix::fs::futimens(to, &times)
}

/// Copies the extended attributes of `from` that the daemon may read and set (`user.*`, and
/// the others when it runs as root); one it may not is left out, as `cp --preserve=xattr` does.
fn copy_xattrs(from: &File, to: &File) {
    let list = || rustix::fs::flistxattr_query(from);
    let Ok(names) = read_sized(list, |buf| rustix::fs::flistxattr(from, buf)) else {
        return;
    };
    for name in names.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = OsStr::from_bytes(name);
        let size = || rustix::fs::fgetxattr_query(from, name);
        if let Ok(value) = read_sized(size, |buf| rustix::fs::fgetxattr(from, name, buf)) {
            let _ = rustix::fs::fsetxattr(to, name, &value, XattrFlags::empty());
        }
    }
}

/// Calls `read` with a buffer of the size `size` tells (asked again if it grew meanwhile).
fn read_sized(
    size: impl Fn() -> Result<usize>,
    read: impl Fn(&mut [u8]) -> Result<usize>,
) -> Result<Vec<u8>> {
    for _ in 0..3 {
        let mut buf = vec![0u8; size()?];
        if buf.is_empty() {
            return Ok(buf);
        }
        match read(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(Errno::RANGE) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(Errno::RANGE)
}

fn errno_of(e: &std::io::Error) -> Errno {
    Errno::from_io_error(e).unwrap_or(Errno::IO)
}

/// The temp file a copy is written to, beside the name it replaces; removed when dropped unless
/// kept.
struct Temp<'d> {
    dir: BorrowedFd<'d>,
    name: String,
    file: File,
    /// Renamed to the name it replaces: no longer removed.
    kept: bool,
}

impl<'d> Temp<'d> {
    /// Creates a new temp file in `dir`, readable and writable by the daemon only until
    /// [`copy_metadata`] gives it its modes.
    fn create(dir: BorrowedFd<'d>) -> Result<Temp<'d>> {
        let name = tmp_name();
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
        let fd = rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600))?;
        Ok(Temp {
            dir,
            name,
            file: File::from(fd),
            kept: false,
        })
    }
}

impl Drop for Temp<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let _ = rustix::fs::unlinkat(self.dir, self.name.as_str(), AtFlags::empty());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn dir_fd(p: &std::path::Path) -> std::os::fd::OwnedFd {
        rustix::fs::open(p, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    #[test]
    fn the_copy_takes_the_name_and_the_other_link_keeps_the_file_as_it_was() {
        let t = tempfile::tempdir().unwrap();
        let (outside, inside) = (t.path().join("outside"), t.path().join("zone/f"));
        std::fs::create_dir(t.path().join("zone")).unwrap();
        std::fs::write(&outside, "shared\n").unwrap();
        std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o640)).unwrap();
        rustix::fs::setxattr(&outside, "user.k", b"v", XattrFlags::empty()).unwrap();
        std::fs::hard_link(&outside, &inside).unwrap();
        let seen = rustix::fs::lstat(&inside).unwrap();
        let dir = dir_fd(&t.path().join("zone"));
        let copy = copy_up(dir.as_fd(), OsStr::new("f"), &seen).unwrap();
        assert_ne!(copy.st_ino, seen.st_ino);
        assert_eq!(copy.st_nlink, 1);
        assert_eq!(copy.st_mode & 0o7777, 0o640);
        assert_eq!(
            (copy.st_mtime, copy.st_mtime_nsec),
            (seen.st_mtime, seen.st_mtime_nsec)
        );
        let mut v = [0u8; 8];
        let n = rustix::fs::getxattr(&inside, "user.k", &mut v[..]).unwrap();
        assert_eq!(&v[..n], b"v");
        std::fs::write(&inside, "changed\n").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "shared\n");
        assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 1);
        let names: Vec<_> = std::fs::read_dir(t.path().join("zone")).unwrap().collect();
        assert_eq!(names.len(), 1, "a temp file was left: {names:?}");
    }

    #[test]
    fn a_name_that_holds_another_file_by_now_is_left_alone() {
        let t = tempfile::tempdir().unwrap();
        let f = t.path().join("f");
        std::fs::write(&f, "old\n").unwrap();
        std::fs::hard_link(&f, t.path().join("g")).unwrap();
        let seen = rustix::fs::lstat(&f).unwrap();
        // Replaced beside wardfs after the caller looked.
        std::fs::remove_file(&f).unwrap();
        std::fs::write(&f, "someone else's\n").unwrap();
        let dir = dir_fd(t.path());
        let e = copy_up(dir.as_fd(), OsStr::new("f"), &seen).unwrap_err();
        assert_eq!(e, Errno::STALE);
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "someone else's\n");
        assert_eq!(std::fs::read_dir(t.path()).unwrap().count(), 2);
    }
}

//! The local-directory store: every call resolves beneath the zone's directory fd
//! ([`LocalZone`]), opens the parent, and acts on one plain name with the `*at` calls, which
//! never follow a symlink in the last component. Replacements are a temp file or symlink made
//! beside the destination and renamed over it, so readers never see a torn file; a
//! compare-and-swap stats the name right before the rename or unlink, under the caller's lock.
//! The one exception is a restore's rewrite of a plain file in place ([`LocalZone::overwrite`]).

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, RenameFlags, Stat};

use super::{
    tmp_name, Fingerprint, Identity, Listing, Meta, Moved, Opened, Put, Removal, Replace, Seen,
    Store, Way,
};
use crate::core::error::{FsError, FsResult};
use crate::core::ops::{Entry, ResolveResult};
use crate::core::path::VPath;
use crate::core::zone::{kind_of, mtime_ms, LocalZone};
use crate::core::{EntryKind, Zones};

fn errno_err<'a>(vp: &'a VPath, op: &'static str) -> impl Fn(rustix::io::Errno) -> FsError + 'a {
    move |e| FsError::from_io(&vp.to_string(), op, e.into())
}

fn io_err<'a>(vp: &'a VPath, op: &'static str) -> impl Fn(std::io::Error) -> FsError + 'a {
    move |e| FsError::from_io(&vp.to_string(), op, e)
}

impl Seen {
    /// The identity of the local file open as `file` now (what [`Opened::seen`] gave when it
    /// was opened, if it has not changed since).
    pub fn of_local_file(file: &std::fs::File) -> std::io::Result<Seen> {
        let st = rustix::fs::fstat(file)?;
        Ok(Seen::Entry(Identity(Fingerprint::of(&st))))
    }
}

impl Fingerprint {
    /// The identity of the local entry whose stat is `st`.
    fn of(st: &Stat) -> Fingerprint {
        Fingerprint::Local {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// Stats `name` in `parent` (not following a symlink) under the caller's path lock and checks it
/// against `expect`: `CONFLICT` when it is no longer what the caller saw, `IS_DIR` for a directory.
fn check_seen(
    parent: &OwnedFd,
    name: &str,
    vp: &VPath,
    expect: Option<Seen>,
) -> FsResult<Option<Stat>> {
    let now = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Some(st),
        Err(rustix::io::Errno::NOENT) => None,
        Err(e) => return Err(errno_err(vp, "stat")(e)),
    };
    if let Some(exp) = expect {
        let current = match &now {
            Some(st) => Seen::Entry(Identity(Fingerprint::of(st))),
            None => Seen::Absent,
        };
        if exp != Seen::Unknown && current != exp {
            return Err(super::changed(vp));
        }
    }
    if let Some(st) = &now {
        if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
    }
    Ok(now)
}

impl LocalZone {
    /// Overwrites the regular file at `vp` in place: the same inode, truncated and written
    /// with `content`, its permission bits set to `mode`, only if it is still `expect` (compared
    /// by name before it is opened and on the opened descriptor before any byte changes). No new
    /// inode, no rename: what a restore of many files does (as `git checkout` rewrites files),
    /// where a temp file and a rename per file cost an inode allocation and an eviction each.
    /// A reader of the file meanwhile may see it partly written. Returns `false`, changing
    /// nothing, when the entry cannot be overwritten so (not a regular file with one link,
    /// `busy` says it is open for writing elsewhere, or it cannot be opened for writing): the
    /// caller replaces it instead.
    pub fn overwrite(
        &self,
        vp: &VPath,
        content: &[u8],
        mode: u32,
        expect: Seen,
        busy: &dyn Fn(&Stat) -> bool,
    ) -> FsResult<bool> {
        use std::io::Write;
        let parent = self.open_parent_by(vp, Way::Plain)?;
        let name = vp.name().expect("entry");
        let Some(st) = check_seen(&parent, name, vp, Some(expect))? else {
            return Ok(false);
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_nlink != 1
            || busy(&st)
        {
            return Ok(false);
        }
        let flags =
            OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let Ok(fd) = rustix::fs::openat(&parent, name, flags, Mode::empty()) else {
            return Ok(false);
        };
        let now = rustix::fs::fstat(&fd).map_err(errno_err(vp, "stat"))?;
        if Seen::Entry(Identity(Fingerprint::of(&now))) != expect {
            return Err(super::changed(vp));
        }
        rustix::fs::ftruncate(&fd, 0).map_err(errno_err(vp, "truncate"))?;
        let mut file = std::fs::File::from(fd);
        file.write_all(content).map_err(io_err(vp, "write"))?;
        if now.st_mode & 0o7777 != mode {
            rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(errno_err(vp, "chmod"))?;
        }
        Ok(true)
    }
}

/// Syncs a directory given by an `O_PATH` fd (reopened for reading: `fsync` needs a real fd).
fn sync_dir(dir: &OwnedFd) -> rustix::io::Result<()> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    rustix::fs::fsync(&fd)
}

/// Removes `name` in `parent` and everything beneath it, never following a symlink.
fn remove_tree(parent: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<()> {
    let fd = rustix::fs::openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let listing = rustix::io::dup(&fd)?;
    for ent in rustix::fs::Dir::new(listing)? {
        let ent = ent?;
        let child = ent.file_name();
        if child.to_bytes() == b"." || child.to_bytes() == b".." {
            continue;
        }
        match rustix::fs::unlinkat(&fd, child, AtFlags::empty()) {
            Err(rustix::io::Errno::ISDIR) | Err(rustix::io::Errno::PERM)
                if matches!(ent.file_type(), FileType::Directory | FileType::Unknown) =>
            {
                remove_tree(fd.as_fd(), child)?;
            }
            other => other?,
        }
    }
    rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR)
}

impl Store for LocalZone {
    fn read_only(&self) -> bool {
        LocalZone::read_only(self)
    }

    fn stat(&self, vp: &VPath, target: bool, _fresh: bool) -> FsResult<Meta> {
        let st = self.lstat(vp)?;
        let kind = kind_of(&st);
        let target = if target && kind == EntryKind::Symlink {
            Some(Store::readlink(self, vp)?)
        } else {
            None
        };
        Ok(Meta {
            kind,
            size: st.st_size as u64,
            mode: st.st_mode & 0o7777,
            mtime_ms: mtime_ms(&st),
            nlink: st.st_nlink,
            target,
        })
    }

    fn follow(&self, vp: &VPath) -> FsResult<VPath> {
        self.follow_last(vp)
    }

    fn real(&self, vp: &VPath) -> FsResult<VPath> {
        self.real_entry(vp)
    }

    fn plain_way(&self, vp: &VPath) -> bool {
        LocalZone::plain_way(self, vp)
    }

    fn seen(&self, vp: &VPath) -> FsResult<Seen> {
        let parent = match self.open_parent(vp) {
            Ok(p) => p,
            Err(FsError::NotFound { .. }) => return Ok(Seen::Absent),
            Err(e) => return Err(e),
        };
        match rustix::fs::statat(
            &parent,
            vp.name().expect("entry"),
            AtFlags::SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(Seen::Entry(Identity(Fingerprint::of(&st)))),
            Err(rustix::io::Errno::NOENT) => Ok(Seen::Absent),
            Err(e) => Err(errno_err(vp, "stat")(e)),
        }
    }

    fn list(&self, vp: &VPath) -> FsResult<Listing> {
        let fd = self.open(vp, OFlags::RDONLY | OFlags::DIRECTORY)?;
        let mut listing = Listing::default();
        let dir = rustix::fs::Dir::new(fd.try_clone().map_err(io_err(vp, "dup"))?)
            .map_err(errno_err(vp, "readdir"))?;
        for ent in dir {
            let ent = ent.map_err(errno_err(vp, "readdir"))?;
            let name = ent.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(name) else {
                listing
                    .skipped
                    .push(crate::core::text::name_bytes(name).into_owned());
                continue;
            };
            let st = match rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => continue, // removed meanwhile
                Err(e) => return Err(errno_err(vp, "stat")(e)),
            };
            listing.entries.push(Entry {
                name: name.to_string(),
                kind: kind_of(&st),
                size: st.st_size as u64,
                mtime_ms: mtime_ms(&st),
            });
        }
        Ok(listing)
    }

    fn readlink(&self, vp: &VPath) -> FsResult<String> {
        let parent = self.open_parent(vp)?;
        let target = rustix::fs::readlinkat(&parent, vp.name().expect("entry"), Vec::new())
            .map_err(errno_err(vp, "readlink"))?;
        target.into_string().map_err(|_| FsError::Binary {
            path: vp.to_string(),
            reason: "the symlink's target is not UTF-8".into(),
        })
    }

    fn open_read(&self, _zones: &Zones, vp: &VPath) -> FsResult<Opened> {
        let (file, st) = self.open_file_for_read(vp)?;
        Ok(Opened {
            file,
            size: st.st_size as u64,
            seen: Seen::Entry(Identity(Fingerprint::of(&st))),
        })
    }

    fn write_dir(&self, vp: &VPath, follow: bool, way: Way) -> FsResult<(VPath, OwnedFd)> {
        // A symlink followed may point through others: the destination's real path.
        let vp = if follow {
            self.real_entry(&self.follow_last(vp)?)?
        } else {
            vp.clone()
        };
        if vp.is_root() {
            return Err(FsError::IsDir {
                path: vp.to_string(),
            });
        }
        let parent = self.ensure_parent_by(&vp, way)?;
        Ok((vp, parent))
    }

    fn put(&self, put: Put<'_>) -> FsResult<bool> {
        let vp = put.vp;
        let name = vp.name().expect("not a root");
        let existing = check_seen(put.dir, name, vp, put.expect)?;
        let mode = match (&existing, put.mode) {
            (_, Some(mode)) => mode,
            (Some(st), None) => st.st_mode & 0o7777,
            (None, None) => put.new_mode,
        };
        let file = put.file;
        rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(errno_err(vp, "chmod"))?;
        if put.sync {
            file.sync_all().map_err(io_err(vp, "fsync"))?;
        }
        drop(file);
        rustix::fs::renameat(put.dir, put.tmp.as_str(), put.dir, name)
            .map_err(errno_err(vp, "rename"))?;
        put.tmp.clear();
        if put.sync {
            sync_dir(put.dir).map_err(errno_err(vp, "fsync directory"))?;
        }
        Ok(existing.is_none())
    }

    fn symlink(
        &self,
        vp: &VPath,
        target: &str,
        replace: bool,
        expect: Option<Seen>,
        way: Way,
    ) -> FsResult<bool> {
        let name = vp.name().expect("entry");
        let parent = self.ensure_parent_by(vp, way)?;
        let tmp = tmp_name();
        rustix::fs::symlinkat(target, &parent, tmp.as_str()).map_err(errno_err(vp, "symlink"))?;
        let cleanup = |e: FsError| {
            let _ = rustix::fs::unlinkat(&parent, tmp.as_str(), AtFlags::empty());
            e
        };
        let now = check_seen(&parent, name, vp, expect).map_err(cleanup)?;
        if now.is_some() && !replace {
            return Err(cleanup(FsError::Exists {
                path: vp.to_string(),
            }));
        }
        rustix::fs::renameat(&parent, tmp.as_str(), &parent, name)
            .map_err(|e| cleanup(errno_err(vp, "rename")(e)))?;
        Ok(now.is_none())
    }

    fn mkdir(&self, vp: &VPath, parents: bool, mode: Option<u32>, way: Way) -> FsResult<()> {
        if parents {
            if let Ok(st) = self.lstat(vp) {
                return if kind_of(&st) == EntryKind::Dir {
                    Ok(())
                } else {
                    Err(FsError::Exists {
                        path: vp.to_string(),
                    })
                };
            }
            self.mkdir_p_by(vp, way)?;
            if let Some(mode) = mode {
                let parent = self.open_parent_by(vp, way)?;
                rustix::fs::chmodat(
                    &parent,
                    vp.name().expect("entry"),
                    Mode::from_raw_mode(mode),
                    AtFlags::empty(),
                )
                .map_err(errno_err(vp, "chmod"))?;
            }
            return Ok(());
        }
        let parent = self.open_parent_by(vp, way)?;
        rustix::fs::mkdirat(
            &parent,
            vp.name().expect("entry"),
            Mode::from_raw_mode(mode.unwrap_or(0o777)),
        )
        .map_err(errno_err(vp, "mkdir"))
    }

    fn remove(&self, vp: &VPath, how: Removal, expect: Option<Seen>, way: Way) -> FsResult<bool> {
        let name = vp.name().expect("entry");
        let parent = self.open_parent_by(vp, way)?;
        if expect.is_some() && check_seen(&parent, name, vp, expect)?.is_none() {
            return Ok(false);
        }
        match how {
            Removal::File => rustix::fs::unlinkat(&parent, name, AtFlags::empty())
                .map_err(errno_err(vp, "unlink"))?,
            Removal::EmptyDir => rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR)
                .map_err(errno_err(vp, "rmdir"))?,
            Removal::Any { recursive } => {
                let st = self.stat_at(&parent, name, vp)?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
                    rustix::fs::unlinkat(&parent, name, AtFlags::empty())
                        .map_err(errno_err(vp, "unlink"))?;
                } else if recursive {
                    remove_tree(
                        parent.as_fd(),
                        &CString::new(name).expect("no NUL in a parsed path"),
                    )
                    .map_err(errno_err(vp, "delete"))?;
                } else {
                    rustix::fs::unlinkat(&parent, name, AtFlags::REMOVEDIR)
                        .map_err(errno_err(vp, "rmdir"))?;
                }
            }
        }
        Ok(true)
    }

    fn rename(
        &self,
        from: &VPath,
        to_store: &dyn Store,
        to: &VPath,
        replace: Replace,
    ) -> FsResult<Moved> {
        let Some(dst) = to_store.as_local() else {
            return Ok(Moved::Across);
        };
        let sp = self.open_parent(from)?;
        let (sname, dname) = (from.name().expect("entry"), to.name().expect("entry"));
        // The source must exist before any missing destination directory is created.
        self.stat_at(&sp, sname, from)?;
        let dp = dst.ensure_parent(to)?;
        let flags = match replace {
            Replace::Never => RenameFlags::NOREPLACE,
            Replace::Files | Replace::Posix => RenameFlags::empty(),
        };
        match rustix::fs::renameat_with(&sp, sname, &dp, dname, flags) {
            Ok(()) => Ok(Moved::Done),
            Err(rustix::io::Errno::EXIST) | Err(rustix::io::Errno::NOTEMPTY)
                if replace != Replace::Posix =>
            {
                Err(FsError::Exists {
                    path: to.to_string(),
                })
            }
            Err(rustix::io::Errno::XDEV) => Ok(Moved::Across),
            Err(e) => Err(errno_err(from, "rename")(e)),
        }
    }

    fn resolve(&self, vp: &VPath) -> FsResult<ResolveResult> {
        let root = self.root().display().to_string();
        match self.open(vp, OFlags::PATH) {
            Ok(fd) => Ok(ResolveResult {
                path: vp.to_string(),
                real_path: LocalZone::fd_real_path(&fd)
                    .map_err(io_err(vp, "resolve"))?
                    .display()
                    .to_string(),
                exists: true,
                zone_root: root,
            }),
            Err(FsError::NotFound { .. }) if !vp.is_root() => {
                let parent = self.open_parent(vp)?;
                let dir = LocalZone::fd_real_path(&parent).map_err(io_err(vp, "resolve"))?;
                Ok(ResolveResult {
                    path: vp.to_string(),
                    real_path: dir.join(vp.name().expect("entry")).display().to_string(),
                    exists: false,
                    zone_root: root,
                })
            }
            Err(e) => Err(e),
        }
    }

    fn as_local(&self) -> Option<&LocalZone> {
        Some(self)
    }
}

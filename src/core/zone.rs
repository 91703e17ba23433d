//! A zone backed by a local directory, and the fd-relative primitives every operation uses.
//!
//! The second half of the security boundary (after [`super::path`]): every access starts from the
//! zone's directory fd and goes through `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so the
//! kernel refuses `..`, absolute symlinks, relative symlinks pointing out and `/proc` magic links
//! while it resolves, with no window between a check and a use. Operations that replace a name
//! (`write`, `rename`, `unlink`) first open the parent this way and then act on one plain name with
//! the `*at` calls, which never follow a symlink in the last component.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};

use super::error::{FsError, FsResult};
use super::path::{VPath, ZoneId};
use super::store::Way;

/// Symlinks followed at most when resolving the last component of a path ourselves.
pub const MAX_SYMLINK_HOPS: usize = 40;

/// A zone served from a local directory.
#[derive(Debug)]
pub struct LocalZone {
    id: ZoneId,
    root: PathBuf,
    dirfd: OwnedFd,
    read_only: bool,
    allow_hardlinks: bool,
}

impl LocalZone {
    /// Opens the directory `path` as zone `id`, creating it first when `create` is set.
    pub fn open_dir(
        id: ZoneId,
        path: &Path,
        create: bool,
        read_only: bool,
        allow_hardlinks: bool,
    ) -> io::Result<LocalZone> {
        if create {
            std::fs::create_dir_all(path)?;
        }
        let root = std::fs::canonicalize(path)?;
        let dirfd = rustix::fs::open(
            &root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(LocalZone {
            id,
            root,
            dirfd,
            read_only,
            allow_hardlinks,
        })
    }

    /// Returns the zone id.
    pub fn id(&self) -> ZoneId {
        self.id
    }

    /// Returns the canonical real path of the zone root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Returns true when the zone refuses changes.
    pub fn read_only(&self) -> bool {
        self.read_only
    }

    /// Returns the zone root's directory fd (opened with `O_PATH`).
    pub fn dirfd(&self) -> BorrowedFd<'_> {
        self.dirfd.as_fd()
    }

    /// Fails with `READ_ONLY` when the zone refuses changes.
    pub fn check_writable(&self, vp: &VPath) -> FsResult<()> {
        refuse_if_read_only(self.read_only, vp)
    }

    /// Opens `rel` (relative to the zone root, "" for the root) beneath the zone.
    pub fn open_rel(&self, rel: &str, flags: OFlags, mode: Mode) -> io::Result<OwnedFd> {
        openat2_beneath(
            self.dirfd(),
            if rel.is_empty() { "." } else { rel },
            flags,
            mode,
        )
    }

    /// Opens a path beneath the zone, mapping failures to core errors.
    pub fn open(&self, vp: &VPath, flags: OFlags) -> FsResult<OwnedFd> {
        self.open_rel(vp.rel(), flags, Mode::empty())
            .map_err(|e| FsError::from_io(&vp.to_string(), "open", e))
    }

    /// Opens a regular file for reading (one with several hard links too: see
    /// [`LocalZone::breaks_links`]).
    pub fn open_file_for_read(&self, vp: &VPath) -> FsResult<(std::fs::File, Stat)> {
        // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        let fd = self.open(vp, OFlags::RDONLY | OFlags::NOCTTY | OFlags::NONBLOCK)?;
        let st = rustix::fs::fstat(&fd)
            .map_err(|e| FsError::from_io(&vp.to_string(), "stat", e.into()))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => {
                return Err(FsError::IsDir {
                    path: vp.to_string(),
                })
            }
            _ => {
                return Err(FsError::InvalidArgument {
                    name: "path".into(),
                    rule: format!("{vp} is not a regular file"),
                })
            }
        }
        rustix::fs::fcntl_setfl(&fd, OFlags::empty())
            .map_err(|e| FsError::from_io(&vp.to_string(), "open", e.into()))?;
        Ok((std::fs::File::from(fd), st))
    }

    /// The hard-link rule: true when a change to the file `st` must first give it an inode of
    /// its own ([`super::copy_up`]), because it is a regular file with another link (a link made
    /// beside wardfs may name a file outside the zone, and no path check can tell) and the zone
    /// does not allow hard links (`zones.<zone>.allow_hardlinks`). Such a file may be read: a
    /// link into a zone is made beside wardfs, by someone who may open the file anyway (the
    /// kernel's `fs.protected_hardlinks`), never by an agent (docs/reliability.md).
    pub fn breaks_links(&self, st: &Stat) -> bool {
        !self.allow_hardlinks
            && st.st_nlink > 1
            && FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
    }

    /// True when the zone treats hard links as POSIX does (`zones.<zone>.allow_hardlinks`).
    pub fn allows_hardlinks(&self) -> bool {
        self.allow_hardlinks
    }

    /// Opens the parent directory of `vp` (`O_PATH`), beneath the zone.
    pub fn open_parent(&self, vp: &VPath) -> FsResult<OwnedFd> {
        self.open_parent_by(vp, Way::Beneath)
    }

    /// Opens the parent directory of `vp` (`O_PATH`), beneath the zone, its way reached as `way`
    /// says: with [`Way::Plain`], a symlink on the way is `CONFLICT` ([`symlink_on_the_way`]).
    pub fn open_parent_by(&self, vp: &VPath, way: Way) -> FsResult<OwnedFd> {
        openat2_resolve(
            self.dirfd(),
            vp.parent_rel(),
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
            resolve_flags(way),
        )
        .map_err(|e| {
            if way == Way::Plain && e.raw_os_error() == Some(libc::ELOOP) {
                return symlink_on_the_way(vp);
            }
            let shown = vp
                .parent()
                .map(|p| p.to_string())
                .unwrap_or_else(|| vp.to_string());
            FsError::from_io(&shown, "open parent", e)
        })
    }

    /// Opens the parent directory of `vp`, creating missing directories on the way (`mkdir -p`).
    pub fn ensure_parent(&self, vp: &VPath) -> FsResult<OwnedFd> {
        self.ensure_parent_by(vp, Way::Beneath)
    }

    /// [`LocalZone::ensure_parent`], the way reached as `way` says.
    pub fn ensure_parent_by(&self, vp: &VPath, way: Way) -> FsResult<OwnedFd> {
        match self.open_parent_by(vp, way) {
            Err(FsError::NotFound { .. }) => {}
            other => return other,
        }
        let parent = vp
            .parent()
            .expect("a path with a missing parent is not a zone root");
        self.mkdir_p_by(&parent, way)?;
        self.open_parent_by(vp, way)
    }

    /// Creates `vp` and its missing parents as directories.
    pub fn mkdir_p(&self, vp: &VPath) -> FsResult<()> {
        self.mkdir_p_by(vp, Way::Beneath)
    }

    /// [`LocalZone::mkdir_p`], the way reached as `way` says: with [`Way::Plain`], a symlink at
    /// `vp` (or above) is `CONFLICT`, a symlink to a directory not taken for one.
    pub fn mkdir_p_by(&self, vp: &VPath, way: Way) -> FsResult<()> {
        if vp.is_root() {
            return Ok(());
        }
        let parent_fd = self.ensure_parent_by(vp, way)?;
        let name = vp.name().expect("not a root");
        match rustix::fs::mkdirat(&parent_fd, name, Mode::from_raw_mode(0o777)) {
            Ok(()) => Ok(()),
            Err(rustix::io::Errno::EXIST) => {
                match self.stat_at(&parent_fd, name, vp)? {
                    st if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(()),
                    st if FileType::from_raw_mode(st.st_mode) == FileType::Symlink
                        && way == Way::Beneath =>
                    {
                        // A symlink to a directory is fine when it resolves beneath the zone.
                        let fd = self.open(vp, OFlags::PATH | OFlags::DIRECTORY)?;
                        drop(fd);
                        Ok(())
                    }
                    st if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                        Err(symlink_on_the_way(vp))
                    }
                    _ => Err(FsError::NotDir {
                        path: vp.to_string(),
                    }),
                }
            }
            Err(e) => Err(FsError::from_io(&vp.to_string(), "mkdir", e.into())),
        }
    }

    /// `fstatat(parent, name, AT_SYMLINK_NOFOLLOW)`.
    pub fn stat_at(&self, parent: &OwnedFd, name: &str, vp: &VPath) -> FsResult<Stat> {
        rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| FsError::from_io(&vp.to_string(), "stat", e.into()))
    }

    /// Stats `vp` without following a symlink in its last component (`lstat`).
    pub fn lstat(&self, vp: &VPath) -> FsResult<Stat> {
        match vp.name() {
            None => rustix::fs::fstat(self.dirfd())
                .map_err(|e| FsError::from_io(&vp.to_string(), "stat", e.into())),
            Some(name) => {
                let parent = self.open_parent(vp)?;
                self.stat_at(&parent, name, vp)
            }
        }
    }

    /// Follows symlinks in the last component of `vp` while they stay inside the zone, returning
    /// the path of the first non-symlink (which may not exist yet).
    pub fn follow_last(&self, vp: &VPath) -> FsResult<VPath> {
        let mut cur = vp.clone();
        for _ in 0..MAX_SYMLINK_HOPS {
            let Some(name) = cur.name() else {
                return Ok(cur);
            };
            let parent = match self.open_parent(&cur) {
                Ok(fd) => fd,
                // A missing parent holds no symlink; the caller creates it.
                Err(FsError::NotFound { .. }) => return Ok(cur),
                Err(e) => return Err(e),
            };
            let st = match rustix::fs::statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(rustix::io::Errno::NOENT) => return Ok(cur),
                Err(e) => return Err(FsError::from_io(&cur.to_string(), "stat", e.into())),
            };
            if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                return Ok(cur);
            }
            let target = rustix::fs::readlinkat(&parent, name, Vec::new())
                .map_err(|e| FsError::from_io(&cur.to_string(), "readlink", e.into()))?;
            let target = target.to_str().map_err(|_| FsError::InvalidPath {
                path: cur.to_string(),
                rule: "symlink target is not UTF-8".into(),
            })?;
            if target.starts_with('/') {
                return Err(FsError::OutsideZone {
                    path: cur.to_string(),
                    rule: format!("it is a symlink to the absolute path {target:?}"),
                });
            }
            let base = cur.parent().expect("has a name");
            cur = base.join(target).map_err(|_| FsError::OutsideZone {
                path: cur.to_string(),
                rule: format!("it is a symlink to {target:?}, which climbs out of the zone"),
            })?;
        }
        Err(FsError::OutsideZone {
            path: vp.to_string(),
            rule: format!("more than {MAX_SYMLINK_HOPS} symlinks"),
        })
    }

    /// `vp` with every symlink above its last component resolved: the path its entry really has
    /// beneath the zone, which path locks and the journal must name (a write to `link/f`, where
    /// `link` points at `dir`, changes `dir/f`; journaled as `link/f`, a checkpoint would look
    /// for a file beneath a symlink). The last component is left as it is (a name is replaced
    /// or removed, never written through, unless the caller follows it first).
    ///
    /// One `openat2` with `RESOLVE_NO_SYMLINKS` when no symlink is on the way; otherwise the
    /// deepest existing directory on the way is opened beneath the zone, as every access is, and
    /// its real path read back from the kernel. What cannot be resolved (outside the zone, a
    /// file on the way, the root moved) is returned as given: the operation reports it.
    pub fn real_entry(&self, vp: &VPath) -> FsResult<VPath> {
        if self.plain_way(vp) {
            return Ok(vp.clone());
        }
        // Not plain, so `vp` has a parent below the zone's root (`plain_way` is true for the rest).
        let mut dir = vp.parent().expect("a path with a way to it");
        let mut missing: Vec<String> = vec![vp.name().expect("has a parent").to_string()];
        loop {
            match openat2_beneath(
                self.dirfd(),
                dir.rel(),
                OFlags::PATH | OFlags::DIRECTORY,
                Mode::empty(),
            ) {
                Ok(fd) => {
                    let Ok(real) = LocalZone::fd_real_path(&fd) else {
                        return Ok(vp.clone());
                    };
                    let Some(rel) = real.strip_prefix(&self.root).ok().and_then(Path::to_str)
                    else {
                        return Ok(vp.clone());
                    };
                    let mut parts = vec![rel.to_string()];
                    parts.extend(missing.into_iter().rev());
                    return VPath::new(self.id, &parts.join("/"));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    let Some(up) = dir.parent() else {
                        return Ok(vp.clone());
                    };
                    missing.push(dir.name().expect("not the root").to_string());
                    dir = up;
                }
                Err(_) => return Ok(vp.clone()),
            }
        }
    }

    /// Whether every component above `vp`'s last is a directory, not a symlink or a file: one
    /// `openat2` of the parent with `RESOLVE_NO_SYMLINKS` (which refuses at the first symlink,
    /// dangling or not, before following it). A missing component, met before any symlink, is
    /// nothing in the way.
    pub fn plain_way(&self, vp: &VPath) -> bool {
        let Some(parent) = vp.parent().filter(|p| !p.is_root()) else {
            return true;
        };
        match openat2_resolve(
            self.dirfd(),
            parent.rel(),
            OFlags::PATH | OFlags::DIRECTORY,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS,
        ) {
            Ok(_) => true,
            Err(e) => e.kind() == io::ErrorKind::NotFound,
        }
    }

    /// Returns the real path of an open fd (from `/proc/self/fd`).
    pub fn fd_real_path(fd: &OwnedFd) -> io::Result<PathBuf> {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
    }
}

/// `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`, retried on `EAGAIN` (which the kernel
/// returns when a concurrent rename makes `..` resolution unsafe to complete).
pub fn openat2_beneath(
    dirfd: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    openat2_resolve(dirfd, rel, flags, mode, ResolveFlags::empty())
}

/// [`openat2_beneath`] with the resolve flags `extra` on top.
fn openat2_resolve(
    dirfd: BorrowedFd<'_>,
    rel: &str,
    flags: OFlags,
    mode: Mode,
    extra: ResolveFlags,
) -> io::Result<OwnedFd> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(
            dirfd,
            rel,
            flags | OFlags::CLOEXEC,
            mode,
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS | extra,
        ) {
            Err(rustix::io::Errno::AGAIN) if tries < 64 => tries += 1,
            other => return other.map_err(io::Error::from),
        }
    }
}

/// The resolve flags of `way` on top of `RESOLVE_BENEATH`.
fn resolve_flags(way: Way) -> ResolveFlags {
    match way {
        Way::Beneath => ResolveFlags::empty(),
        Way::Plain => ResolveFlags::NO_SYMLINKS,
    }
}

/// `CONFLICT`: a change that may not pass a symlink ([`Way::Plain`]) met one on its way, made
/// there after the caller looked (or never looked at).
pub fn symlink_on_the_way(vp: &VPath) -> FsError {
    FsError::Conflict {
        path: vp.to_string(),
        reason: "a symlink is now on the way to it, and a pull or restore never writes beyond a \
                 symlink; nothing was written there"
            .into(),
    }
}

/// Fails with `READ_ONLY` for a change to `vp` in a zone that refuses changes.
pub fn refuse_if_read_only(read_only: bool, vp: &VPath) -> FsResult<()> {
    if read_only {
        Err(FsError::ReadOnly {
            path: vp.to_string(),
            zone: vp.zone().name().into(),
        })
    } else {
        Ok(())
    }
}

/// What kind of entry a stat describes.
pub fn kind_of(st: &Stat) -> super::EntryKind {
    use super::EntryKind;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => EntryKind::File,
        FileType::Directory => EntryKind::Dir,
        FileType::Symlink => EntryKind::Symlink,
        _ => EntryKind::Other,
    }
}

/// Modification time of a stat in milliseconds since the epoch.
pub fn mtime_ms(st: &Stat) -> i64 {
    st.st_mtime * 1000 + (st.st_mtime_nsec as i64) / 1_000_000
}

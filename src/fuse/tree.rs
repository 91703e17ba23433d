//! What serves a part of the mount: the one interface ([`Tree`]) every kernel request is handed
//! to once decoded, and the types its answers come in.
//!
//! Three trees make up the mount, chosen by inode number (or file handle) in one place,
//! `WardFs::tree`:
//! * [`super::top::Top`]: the virtual top level and the forks' directory;
//! * [`super::local_tree::LocalTree`]: a zone on this machine (the workspace, the cache, a fork),
//!   by the inodes' descriptors (`core::node`), with its open files and I/O modes;
//! * [`super::sandbox_tree::SandboxTree`]: a zone served from inside a sandbox, by path.
//!
//! A handler in `super::fs` decodes the request, makes one call of the tree's and replies with
//! what it returns, so what each kind of zone does lives with that kind, and a new kind of zone
//! is one more implementation (docs/architecture.md, "How to add a zone backend"). What a tree
//! does not do it answers with the errno the kernel expects of a file system without it: the
//! defaults below.

use std::ffi::{OsStr, OsString};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{BackingId, Errno, FileAttr, FopenFlags, INodeNo, TimeOrNow};
use rustix::fs::{FileType, Stat};

use crate::core::node::{Caller, RenameMode};

/// How long the kernel may cache entries and attributes of a local zone; changes made behind
/// its back are invalidated explicitly (see `super::invalidate`).
pub const TTL: Duration = Duration::from_secs(60);

/// A tree's answer, or the errno the kernel gets.
pub type Res<T> = Result<T, Errno>;

/// A directory listing: name, type, inode number.
pub type DirEntries = Vec<(OsString, FileType, u64)>;

/// An entry (or attributes) to answer the kernel with, and how long it may keep each.
pub struct Entry {
    pub attr: FileAttr,
    /// How long the kernel may keep the attributes.
    pub attr_ttl: Duration,
    /// How long the kernel may keep the name (for a lookup's answer).
    pub entry_ttl: Duration,
}

impl Entry {
    /// Attributes and name both kept for `ttl`.
    pub fn new(attr: FileAttr, ttl: Duration) -> Entry {
        Entry {
            attr,
            attr_ttl: ttl,
            entry_ttl: ttl,
        }
    }
}

/// The attributes a `setattr` call changes, and the open file it came through (if any).
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
}

/// A file system's figures for `statfs`.
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

impl From<&rustix::fs::StatVfs> for StatFs {
    fn from(s: &rustix::fs::StatVfs) -> StatFs {
        StatFs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: s.f_namemax as u32,
            frsize: s.f_frsize as u32,
        }
    }
}

/// An open file to answer `OPEN` (or `CREATE`) with: its handle, the flags the kernel gets and,
/// for kernel passthrough, the backing file registered for it.
pub struct Opened {
    pub fh: u64,
    pub flags: FopenFlags,
    pub backing: Option<Arc<BackingId>>,
}

/// Registers a descriptor as a passthrough backing file with the kernel (the reply's
/// `open_backing`), for a tree that hands the kernel its files.
pub type RegisterBacking<'r> = &'r dyn Fn(BorrowedFd<'_>) -> std::io::Result<BackingId>;

/// What a write asks besides its bytes.
#[derive(Clone, Copy)]
pub struct WriteHow {
    /// The file was opened with `O_APPEND`.
    pub append: bool,
    /// The kernel asks to clear set-user-ID and set-group-ID (`FUSE_WRITE_KILL_SUIDGID`).
    pub kill_suidgid: bool,
}

/// A part of the mount: what the handlers of `super::fs` call once they have decoded a request
/// (see the module's doc). Inode numbers are the kernel's; `who` is the caller, for the zone's
/// rules and the journal.
pub trait Tree {
    /// Looks up `name` in `parent`, counting one kernel reference (the kernel sends `FORGET`).
    fn lookup(&self, parent: u64, name: &OsStr) -> Res<Entry>;
    /// The entry to answer a lookup of a name absent from `parent` with, which the kernel
    /// keeps (a negative entry), if this tree has one; else the lookup fails with `ENOENT`.
    fn negative(&self, _parent: u64) -> Option<Entry> {
        None
    }
    /// Drops `n` kernel references to `ino`.
    fn forget(&self, ino: u64, n: u64);
    /// True when the kernel holds `ino` already, with attributes it keeps: a listing may then
    /// give the name alone (`add_name_only`), with no stat and no new reference.
    fn held(&self, _ino: u64) -> bool {
        false
    }
    /// The attributes of `ino` (through the open file `fh`, if given and this tree's).
    fn getattr(&self, ino: u64, fh: Option<u64>) -> Res<Entry>;
    fn setattr(&self, who: &Caller, ino: u64, change: SetAttr) -> Res<Entry>;
    fn readlink(&self, ino: u64) -> Res<Vec<u8>>;
    fn mknod(
        &self,
        _who: &Caller,
        _parent: u64,
        _name: &OsStr,
        _mode: u32,
        _rdev: u32,
    ) -> Res<Entry> {
        Err(Errno::EPERM)
    }
    fn mkdir(&self, who: &Caller, parent: u64, name: &OsStr, mode: u32) -> Res<Entry>;
    fn symlink(&self, who: &Caller, parent: u64, name: &OsStr, target: &Path) -> Res<Entry>;
    /// A hard link of `ino` as `name` in `newparent`.
    fn link(&self, _who: &Caller, _ino: u64, _newparent: u64, _name: &OsStr) -> Res<Entry> {
        Err(Errno::EPERM)
    }
    /// Removes `name` from `parent`: an empty directory when `dir`, else anything else.
    fn remove(&self, who: &Caller, parent: u64, name: &OsStr, dir: bool) -> Res<()>;
    /// Renames within this tree (the caller refuses a rename between trees with `EXDEV`).
    fn rename(
        &self,
        who: &Caller,
        from: (u64, &OsStr),
        to: (u64, &OsStr),
        mode: RenameMode,
    ) -> Res<()>;
    /// Lists directory `ino`, `.` and `..` first.
    fn list(&self, ino: u64) -> Res<DirEntries>;
    fn statfs(&self, ino: u64) -> Res<StatFs>;
    /// Whether the zone lets `ino` be written (`write`); the kernel checks the permissions.
    fn access(&self, ino: u64, write: bool) -> Res<()>;
    fn fsync_dir(&self, _ino: u64) -> Res<()> {
        Ok(())
    }

    /// An extended attribute of `ino` into `buf` (or its size, when `buf` is empty). None
    /// is kept by default: `ENODATA`.
    fn get_xattr(&self, _ino: u64, _name: &OsStr, _buf: &mut [u8]) -> Res<usize> {
        Err(Errno::from_i32(libc::ENODATA))
    }
    /// The names of `ino`'s extended attributes into `buf` (or their size); none by default.
    fn list_xattr(&self, _ino: u64, _buf: &mut [u8]) -> Res<usize> {
        Ok(0)
    }
    /// Sets (`Some((value, flags))`) or removes (`None`) an extended attribute.
    fn set_xattr(
        &self,
        _who: &Caller,
        _ino: u64,
        _name: &OsStr,
        _value: Option<(&[u8], i32)>,
    ) -> Res<()> {
        Err(Errno::ENOTSUP)
    }

    /// Opens `ino` with the kernel's `flags`.
    fn open(
        &self,
        _who: &Caller,
        _ino: u64,
        _flags: i32,
        _register: RegisterBacking,
    ) -> Res<Opened> {
        Err(Errno::EPERM)
    }
    /// Creates and opens `name` in `parent`.
    fn create(
        &self,
        _who: &Caller,
        _parent: u64,
        _name: &OsStr,
        _mode: u32,
        _flags: i32,
        _register: RegisterBacking,
    ) -> Res<(Entry, Opened)> {
        Err(Errno::EPERM)
    }
    // The calls on an open file `fh` below reach only the tree that gave it (`WardFs::tree_fh`):
    // a tree that opens no file keeps the defaults, `EBADF`.
    /// Reads into `buf` from `offset`, as much as it holds (fewer bytes only at the end of the
    /// file); `buf` is the reply's own buffer (`ReplyData::data_from`).
    fn read(
        &self,
        _who: &Caller,
        _ino: u64,
        _fh: u64,
        _offset: u64,
        _buf: &mut [u8],
    ) -> Res<usize> {
        Err(Errno::EBADF)
    }
    fn write(
        &self,
        _who: &Caller,
        _ino: u64,
        _fh: u64,
        _offset: u64,
        _data: &[u8],
        _how: WriteHow,
    ) -> Res<u32> {
        Err(Errno::EBADF)
    }
    fn flush(&self, _fh: u64) -> Res<()> {
        Err(Errno::EBADF)
    }
    fn release(&self, _fh: u64) -> Res<()> {
        Err(Errno::EBADF)
    }
    fn fsync(&self, _who: &Caller, _ino: u64, _fh: u64, _datasync: bool) -> Res<()> {
        Err(Errno::EBADF)
    }
    fn allocate(&self, _who: &Caller, _ino: u64, _fh: u64, _at: (u64, u64), _mode: i32) -> Res<()> {
        Err(Errno::ENOTSUP)
    }
    /// `lseek`'s `SEEK_DATA`/`SEEK_HOLE` (the kernel does the others itself).
    fn seek(&self, _who: &Caller, _ino: u64, _fh: u64, _offset: i64, _whence: i32) -> Res<u64> {
        Err(Errno::ENOTSUP)
    }
}

/// The errno of a system call's error.
pub fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

fn time(sec: i64, nsec: u64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec)
    }
}

/// The kernel's name of a file type.
pub fn fuse_kind(t: FileType) -> fuser::FileType {
    match t {
        FileType::Directory => fuser::FileType::Directory,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Fifo => fuser::FileType::NamedPipe,
        FileType::Socket => fuser::FileType::Socket,
        FileType::CharacterDevice => fuser::FileType::CharDevice,
        FileType::BlockDevice => fuser::FileType::BlockDevice,
        _ => fuser::FileType::RegularFile,
    }
}

/// The attributes of inode `ino` from a backing file's `stat`.
pub fn attr_of(ino: u64, st: &Stat) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: fuse_kind(FileType::from_raw_mode(st.st_mode)),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

/// The daemon's own uid and gid, which the virtual directories (and negative entries) show:
/// read once, not twice per name looked up and not found.
pub fn own_ids() -> (u32, u32) {
    static IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *IDS.get_or_init(|| {
        (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        )
    })
}

/// A single file name from the kernel; `.`/`..`/slashes never reach a backing `*at` call.
pub fn plain_name(name: &OsStr) -> Res<&OsStr> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

/// The attributes of a directory that has no backing file (the top level, the forks'
/// directory, a negative entry's): `ino`, made at `born`, changed at `mtime`, `nlink` links.
pub fn virtual_dir(ino: u64, born: SystemTime, mtime: SystemTime, nlink: u32) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: 4096,
        blocks: 8,
        atime: born,
        mtime,
        ctime: mtime,
        crtime: born,
        kind: fuser::FileType::Directory,
        perm: 0o755,
        nlink,
        uid: own_ids().0,
        gid: own_ids().1,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

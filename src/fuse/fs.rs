//! The `fuser::Filesystem` implementation: the mount's side of every kernel request.
//!
//! Each callback resolves its inode(s) from [`Inodes`] and hands the work to the core. On a local
//! zone, lookups and changes (create, mkdir, rename, setattr, xattrs, …) go to the core's
//! inode-level operations (`Zones::node_*`, `core::node`), which make the system calls beneath
//! the inodes' `O_PATH` descriptors under the zone's rules (read-only, hard links, path locks) and
//! record each change in the journal with the calling pid and uid; reads and writes go to the open
//! file (`core::node::io`), and a file's data writes are journaled once, when it is released. A
//! zone served from a sandbox is answered by its [`SandboxTree`]. What stays here is the kernel's
//! business: file and directory handles, attributes and their TTLs, directory listings,
//! passthrough backing files, metadata prefetch, and the errno of each answer.
//!
//! The top level holds the zone roots and `forks`, a virtual directory of the forks that exist
//! now ([`Zones::fork_ids`]), each a local zone whose root is looked up when the kernel asks
//! (`Inodes::fork_root`). Forks come and go through the API, which tells the mount nothing: the
//! kernel keeps no entry of `forks` and no attributes of it (TTL 0), and the directory's
//! modification time changes with the set of forks, so a cached listing of it is dropped too.
//! Nothing can be made, removed or renamed in it (`EPERM`). Below a fork's root everything is as
//! in the workspace.
//!
//! Two I/O modes per zone (`zones.<zone>.io`, [`IoMode`]). Passthrough: `OPEN` hands the kernel
//! the backing file. Cached (the default): when every zone is local, writable and cached, the
//! first `OPEN`, `OPENDIR` and `FLUSH` are answered `ENOSYS` and the kernel sends none again (nor
//! `RELEASE`); reads come from the page cache, and reads and writes that reach the daemon carry
//! handle 0 ([`WardFs::io_handle`]: the file is reopened beneath its parent and the zone's rules
//! checked there). Without a close to hear of, a written file's writes are journaled once it has
//! gone [`IMPLICIT_IDLE_MS`] without one.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    AccessFlags, BackingId, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FopenFlags,
    Generation, INodeNo, InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use rustix::fs::{FileType, OFlags, Stat};

use super::echo::{Answer, Echoes};
use super::handles::{Handle, ImplicitWriters};
use super::inodes::{zone_ino, Inode, Inodes, FORKS_INO, ROOT_INO};
use super::sandbox_tree::{SandboxTree, REMOTE_FH_BASE};
use crate::config::IoMode;
use crate::config::Transport;
use crate::config::FORKS_DIR;
use crate::core::node::{io as node_io, AttrChange, BackingKey, Caller, RenameMode, SetTime};
use crate::core::prefetch::Prefetch;
use crate::core::{ZoneId, Zones};
use crate::state::{Origin, Via};

/// How long the kernel may cache entries and attributes; changes made behind its back are
/// invalidated explicitly (see `super::invalidate`).
pub const TTL: Duration = Duration::from_secs(60);

/// How long the kernel keeps an entry of the forks' directory (see [`WardFs::entry_ttl`]).
const FORK_ENTRY_TTL: Duration = Duration::from_secs(1);

/// `max_write` over io_uring: every ring entry holds a payload buffer this large.
const URING_MAX_WRITE: u32 = 1 << 20;

/// The attributes a `setattr` call changes.
struct SetAttr {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
    fh: Option<FileHandle>,
}

/// A directory listing: name, type, inode number.
type DirEntries = Vec<(OsString, FileType, u64)>;

/// An open directory: a snapshot of its entries, taken by the first `readdir` (and again when the
/// caller rewinds to offset 0). Not at opendir: the kernel serves a cached listing without asking
/// (`FOPEN_CACHE_DIR`), and then the directory is never read. Only when a zone is served from
/// a sandbox: otherwise the kernel sends no `OPENDIR` at all (see [`WardFs::no_opendir`]).
struct DirHandle {
    ino: u64,
    entries: Mutex<Option<Arc<DirEntries>>>,
}

/// The mounted filesystem.
pub struct WardFs {
    zones: Arc<Zones>,
    pub(super) inodes: Arc<Inodes>,
    handles: RwLock<HashMap<u64, Arc<Handle>>>,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    /// When every zone is local, `OPENDIR` is answered `ENOSYS` once and the kernel sends no
    /// `OPENDIR` or `RELEASEDIR` again (two round trips per directory listed), caching listings
    /// as with `FOPEN_CACHE_DIR | FOPEN_KEEP_CACHE`. Not with a sandbox zone, whose listings
    /// must be asked for again after its TTL.
    no_opendir: bool,
    /// The snapshots `readdir` answers from without an open directory, by directory inode, from
    /// offset 0 until the end is sent.
    listings: Mutex<HashMap<u64, Arc<DirEntries>>>,
    /// Zones whose files are served from the page cache without passthrough
    /// ([`IoMode::Cached`]), by zone index.
    cached: [bool; 2],
    /// When every zone is local, writable and cached, `OPEN` is answered `ENOSYS` once and the
    /// kernel sends no `OPEN` or `RELEASE` again: reads and writes then come with file handle 0
    /// and are served by [`WardFs::io_handle`].
    no_open: bool,
    /// Files written with file handle 0 (and files created on such a connection), by inode:
    /// opened at the first write, ended (journaled) once idle for [`IMPLICIT_IDLE_MS`] by the
    /// thread [`end_idle_writers`]. `FLUSH` is answered `ENOSYS`, so the kernel sends none
    /// (another round trip per `close`), and sends no `RELEASE` either.
    implicit: Arc<ImplicitWriters>,
    next_fh: AtomicU64,
    passthrough: AtomicBool,
    want_passthrough: bool,
    /// Ask the kernel for FUSE over io_uring (`mount_transport = "io_uring"`).
    want_uring: bool,
    started: SystemTime,
    /// Metadata read-ahead of walks (`[fuse] prefetch`).
    prefetch: Option<Prefetch>,
    /// Extended attributes served (`[fuse] xattrs`); else every xattr request is `ENOSYS`,
    /// which the kernel remembers for the mount.
    xattrs: bool,
    /// The zones served from a sandbox, by zone index.
    remote: [Option<Arc<SandboxTree>>; 2],
    /// The forks the mount last saw, and since when (see [`WardFs::forks_seen`]).
    forks: Mutex<(Vec<ZoneId>, SystemTime)>,
    /// The echo of changes made outside the mount, whose requests are answered apart
    /// ([`WardFs::echoing`]).
    echo: Arc<Echoes>,
}

type Res<T> = Result<T, Errno>;

fn errno(e: rustix::io::Errno) -> Errno {
    Errno::from_i32(e.raw_os_error())
}

fn time(sec: i64, nsec: u64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs(sec.unsigned_abs()) + Duration::from_nanos(nsec)
    }
}

fn fuse_kind(t: FileType) -> fuser::FileType {
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

fn attr_of(ino: u64, st: &Stat) -> FileAttr {
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
fn own_ids() -> (u32, u32) {
    static IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *IDS.get_or_init(|| {
        (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        )
    })
}

/// A single file name from the kernel; `.`/`..`/slashes never reach a backing `*at` call.
fn plain_name(name: &OsStr) -> Res<&OsStr> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    Ok(name)
}

impl WardFs {
    /// The file system over `zones`; `io` is each zone's I/O mode, by zone index; `transport`
    /// says whether to ask for FUSE over io_uring; `prefetch`, whether to read ahead of walks;
    /// `echo`, the echo whose requests to answer apart.
    pub fn new(
        zones: Arc<Zones>,
        io: [IoMode; 2],
        fuse: crate::config::FuseSection,
        echo: Arc<Echoes>,
    ) -> std::io::Result<WardFs> {
        let inodes = Arc::new(Inodes::new());
        let zones_for_remote = zones.clone();
        let all_local = ZoneId::ALL.iter().all(|id| zones.local(*id).is_ok());
        let cached = io.map(|m| m == IoMode::Cached);
        let no_open = all_local
            && cached.iter().all(|c| *c)
            && ZoneId::ALL
                .iter()
                .all(|id| zones.node_writable(*id).is_ok());
        let implicit: Arc<ImplicitWriters> = Arc::default();
        if no_open {
            ImplicitWriters::spawn_ender(&implicit, zones.clone())?;
        }
        for id in ZoneId::ALL {
            if let Some(root) = zones.node_zone_root(id) {
                let (fd, st) = root?;
                inodes.add_zone_root(id, fd, &st);
            }
        }
        Ok(WardFs {
            zones,
            inodes,
            handles: RwLock::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            no_opendir: all_local,
            listings: Mutex::new(HashMap::new()),
            cached,
            no_open,
            implicit,
            next_fh: AtomicU64::new(1),
            passthrough: AtomicBool::new(false),
            want_passthrough: !no_open,
            want_uring: fuse.transport == Transport::IoUring,
            started: SystemTime::now(),
            xattrs: fuse.xattrs,
            prefetch: if fuse.prefetch {
                Some(Prefetch::start()?)
            } else {
                None
            },
            remote: ZoneId::ALL
                .map(|id| SandboxTree::new(zones_for_remote.clone(), id).map(Arc::new)),
            forks: Mutex::new((Vec::new(), SystemTime::now())),
            echo,
        })
    }

    /// Whether `zone`'s I/O mode is `cached` (a fork has its parent workspace's mode).
    fn cached_io(&self, zone: ZoneId) -> bool {
        self.cached[zone.config_index().unwrap_or(1)]
    }

    /// The remote tree serving `ino`, when its zone is served from a sandbox.
    fn tree(&self, ino: u64) -> Option<&SandboxTree> {
        self.remote
            .iter()
            .flatten()
            .map(|t| &**t)
            .find(|t| t.owns(ino))
    }

    /// The remote tree whose zone root is `name` in the top-level directory `parent`.
    fn remote_root(&self, parent: u64, name: &OsStr) -> Option<&SandboxTree> {
        if parent != ROOT_INO {
            return None;
        }
        let id = name.to_str().and_then(ZoneId::from_name)?;
        self.remote[id.config_index()?].as_deref()
    }

    /// The remote tree holding the open file `fh`.
    fn tree_fh(&self, fh: u64) -> Option<&SandboxTree> {
        if fh < REMOTE_FH_BASE {
            return None;
        }
        self.remote
            .iter()
            .flatten()
            .map(|t| &**t)
            .find(|t| t.owns_fh(fh))
    }

    fn origin(req: &Request) -> Origin {
        Origin {
            via: Via::Fuse,
            pid: Some(req.pid()),
            uid: Some(req.uid()),
        }
    }

    /// The caller of a request, as the core's node operations take it.
    fn caller(req: &Request) -> Caller {
        Caller {
            origin: WardFs::origin(req),
            uid: req.uid(),
            gid: req.gid(),
        }
    }

    /// Asks the invalidation thread to evict idle inodes (the core calls it when out of fds).
    fn press(&self) -> impl Fn() + '_ {
        || self.inodes.press()
    }

    fn inode(&self, ino: INodeNo) -> Res<Arc<Inode>> {
        self.inodes.get(ino.0).ok_or(Errno::ENOENT)
    }

    fn writable(&self, zone: ZoneId) -> Res<()> {
        self.zones.node_writable(zone).map_err(errno)
    }

    /// After the hard-link rule gave `inode`'s file a copy of its own (see
    /// [`Zones::node_break_links`]; `old` is the backing key it had): the inode's number now
    /// stands for the copy, and a passthrough backing file registered for the old file is let go,
    /// so the kernel never writes to it.
    fn follow_copy(&self, inode: &Inode, old: BackingKey) {
        self.inodes
            .follow_copy(inode.zone, inode.ino, old, inode.node.key());
        *inode.backing.lock().expect("not poisoned") = None;
    }

    /// A directory inode to create or remove names in (never the virtual top level, nor the
    /// forks' directory: forks are made and removed through the API and the CLI).
    fn dir_for_change(&self, parent: INodeNo, op: &str) -> Res<Arc<Inode>> {
        if parent.0 == ROOT_INO {
            return Err(Errno::EPERM);
        }
        if parent.0 == FORKS_INO {
            tracing::warn!(
                op,
                "refused through the mount: {FORKS_DIR}/ holds the forks and nothing else; make \
                 one with `wardfs fork NAME`, remove one with `wardfs fork rm NAME`"
            );
            return Err(Errno::EPERM);
        }
        let p = self.inode(parent)?;
        self.writable(p.zone)?;
        Ok(p)
    }

    /// The attributes of a virtual directory (the top level, the forks' directory).
    fn virtual_attr(&self, ino: u64) -> FileAttr {
        let (mtime, nlink) = if ino == FORKS_INO {
            let forks = self.forks_seen();
            (forks.1, 2 + forks.0.len() as u32)
        } else {
            (self.started, 5)
        };
        FileAttr {
            ino: INodeNo(ino),
            size: 4096,
            blocks: 8,
            atime: self.started,
            mtime,
            ctime: mtime,
            crtime: self.started,
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

    fn root_attr(&self) -> FileAttr {
        self.virtual_attr(ROOT_INO)
    }

    /// The forks that exist now, and when the mount first saw them so (the forks' directory's
    /// modification time: the kernel drops its cached listing when it changes). A fork gone
    /// since the last look is let go of ([`Inodes::forks_alive`]).
    fn forks_seen(&self) -> (Vec<ZoneId>, SystemTime) {
        let now = self.zones.fork_ids();
        let mut seen = self.forks.lock().expect("not poisoned");
        if seen.0 != now {
            let gone = self.inodes.forks_alive(&now);
            if !gone.is_empty() {
                tracing::debug!(
                    forks = gone.len(),
                    "let go of the mount's inodes of removed forks"
                );
            }
            *seen = (now, SystemTime::now());
        }
        seen.clone()
    }

    /// How long the kernel may keep an entry of `parent` and its attributes: a second in the
    /// forks' directory, whose entries come and go with the forks (a fork made or removed
    /// invalidates its entry at once: `ChangeListener::forks_changed`). Not at all made every
    /// walk through `forks/NAME` ask again: `rg` through a fork's mount took 5.7 times the
    /// workspace's, opening 50,000 files by such paths.
    fn entry_ttl(parent: u64) -> Duration {
        if parent == FORKS_INO {
            FORK_ENTRY_TTL
        } else {
            TTL
        }
    }

    /// How long the kernel may keep the attributes of `ino`: a second for the forks'
    /// directory, whose modification time tells the kernel when its cached listing is stale
    /// (the kernel lists it without asking otherwise; see [`WardFs::forks_seen`]); a fork made
    /// or removed invalidates it at once (`ChangeListener::forks_changed`).
    fn attr_ttl(ino: u64) -> Duration {
        if ino == FORKS_INO {
            FORK_ENTRY_TTL
        } else {
            TTL
        }
    }

    /// Looks up `name` in `parent` for the kernel (counting one reference when it is a real
    /// inode): a zone root or the forks' directory in the top level, a fork's root in the
    /// forks' directory, else a file.
    fn lookup_entry(&self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        if parent == ROOT_INO && name == FORKS_DIR {
            return Ok(self.virtual_attr(FORKS_INO));
        }
        if parent == FORKS_INO {
            return self.fork_lookup(name).map(|(_, attr)| attr);
        }
        self.do_lookup(INodeNo(parent), name).map(|(_, attr)| attr)
    }

    /// Looks up the root of the fork `name` (in the forks' directory), counting one reference.
    fn fork_lookup(&self, name: &OsStr) -> Res<(Arc<Inode>, FileAttr)> {
        let found = name
            .to_str()
            .and_then(ZoneId::fork)
            .and_then(|id| Some((id, self.zones.node_zone_root(id)?)));
        let Some((id, root)) = found else {
            // Gone, maybe: let go of what the mount held of it.
            self.forks_seen();
            return Err(Errno::ENOENT);
        };
        let (fd, st) = root.map_err(errno)?;
        let inode = self.inodes.fork_root(id, name, fd, &st);
        Ok((inode.clone(), attr_of(inode.ino, &st)))
    }

    /// Looks up `name` in `parent`, counting one kernel reference.
    fn do_lookup(&self, parent: INodeNo, name: &OsStr) -> Res<(Arc<Inode>, FileAttr)> {
        if parent.0 == ROOT_INO {
            let zone = name
                .to_str()
                .and_then(ZoneId::from_name)
                .ok_or(Errno::ENOENT)?;
            let inode = self.inodes.get(zone_ino(zone)).ok_or(Errno::ENOENT)?;
            let st = inode.stat().map_err(errno)?;
            return Ok((inode.clone(), attr_of(inode.ino, &st)));
        }
        if parent.0 == FORKS_INO {
            return self.fork_lookup(name);
        }
        let p = self.inode(parent)?;
        let name = plain_name(name)?;
        let (node, st) = self
            .zones
            .node_lookup(&p.node, name, &self.press())
            .map_err(errno)?;
        let inode = self.inodes.remember(node, &st, parent.0, &p.node, name);
        Ok((inode.clone(), attr_of(inode.ino, &st)))
    }

    /// Counts a change of a name through the mount (create, `mkdir`, rename, removal, …) as under
    /// way until the guard is dropped, after [`WardFs::mark`]: the watcher of the zones'
    /// directories waits for it before it calls the change someone else's.
    fn naming(&self) -> crate::core::own::Naming<'_> {
        self.zones.own().naming()
    }

    /// Notes a change the mount made to `name` in `dir` (and to `dir`), so the watcher leaves
    /// the kernel's view of them alone.
    fn mark(&self, dir: &Inode, name: Option<&OsStr>) {
        if let Ok(fd) = dir.fd() {
            self.zones.own().note_entry(fd, name);
        }
    }

    /// Before the mount removes or replaces the name `name` in `dir`: ends the implicit writer of
    /// the live inode it names, and pins that inode if it is held by name (an open file must stay
    /// reachable after its name is gone).
    fn pin_victim(&self, dir: &Inode, name: &OsStr) {
        let Some((dev, backing)) = self.zones.node_key_at(dir, name) else {
            return;
        };
        // Its implicit writer ends first: journaled under the name it is leaving, and its
        // descriptor no longer keeps a removed file's space allocated.
        if let Some(n) = self.inodes.known_number(dir.zone, dev, backing) {
            self.implicit.end(&self.zones, n);
        }
        if let Some(i) = self
            .inodes
            .known_number(dir.zone, dev, backing)
            .and_then(|n| self.inodes.get(n))
            .filter(|i| !i.node.is_pinned())
        {
            let _ = i.node.pin();
        }
    }

    /// The daemon's descriptor of the open file `h`, opened now if it has none yet.
    fn file_of<'h>(&self, h: &'h Handle) -> Res<&'h std::fs::File> {
        h.file(|i, flags| self.reopen(i, flags))
    }

    fn reopen(&self, inode: &Inode, flags: OFlags) -> Res<OwnedFd> {
        self.zones
            .node_open(inode, flags, &self.press())
            .map_err(errno)
    }

    /// Opens a regular file with `flags` to change it, after the hard-link rule (see
    /// [`Zones::node_open_for_change`]).
    fn open_for_change(&self, inode: &Inode, flags: OFlags) -> Res<std::fs::File> {
        self.zones
            .node_open_for_change(inode, flags, &self.press(), |old| {
                self.follow_copy(inode, old)
            })
            .map(std::fs::File::from)
            .map_err(errno)
    }

    fn handle(&self, fh: FileHandle) -> Res<Arc<Handle>> {
        self.handles
            .read()
            .expect("not poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Registers an open file (`file`: the daemon's descriptor, if it opened one with `flags`).
    fn new_handle(
        &self,
        req: &Request,
        inode: &Arc<Inode>,
        file: Option<std::fs::File>,
        flags: OFlags,
        writable: bool,
        backing: Option<Arc<BackingId>>,
    ) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let writer_key = file
            .as_ref()
            .filter(|_| writable)
            .and_then(|f| node_io::stat(f).ok())
            .map(|st| (st.st_dev, st.st_ino));
        if let Some((dev, ino)) = writer_key {
            self.zones
                .own()
                .writer_opened(dev, ino, self.zones.node_vpath(inode));
        }
        self.handles.write().expect("not poisoned").insert(
            fh,
            Arc::new(Handle {
                backing,
                writable,
                writer_key,
                ..Handle::new(inode.clone(), file, flags, WardFs::origin(req))
            }),
        );
        fh
    }

    fn open_flags(flags: i32) -> OFlags {
        // Creation flags were handled by the kernel or by `create`; keep access mode and behaviour.
        let keep = libc::O_ACCMODE
            | libc::O_APPEND
            | libc::O_TRUNC
            | libc::O_DIRECT
            | libc::O_SYNC
            | libc::O_DSYNC
            | libc::O_NOATIME;
        OFlags::from_bits_retain((flags & keep) as u32)
    }

    fn is_write(flags: i32) -> bool {
        let acc = flags & libc::O_ACCMODE;
        acc == libc::O_WRONLY || acc == libc::O_RDWR || flags & libc::O_TRUNC != 0
    }

    fn do_setattr(&self, req: &Request, inode: &Inode, change: SetAttr) -> Res<FileAttr> {
        if inode.ino == ROOT_INO {
            return Err(Errno::EPERM);
        }
        if change.size.is_some() {
            inode.changing_through_mount();
        }
        let when = |t: Option<TimeOrNow>| {
            t.map(|t| match t {
                TimeOrNow::Now => SetTime::Now,
                TimeOrNow::SpecificTime(t) => SetTime::At(t),
            })
        };
        let open = change
            .fh
            .and_then(|fh| self.handle(fh).ok())
            .filter(|h| h.writable);
        let file = match &open {
            Some(h) if change.size.is_some() => Some(self.file_of(h)?),
            _ => None,
        };
        let st = self
            .zones
            .node_setattr(
                &WardFs::caller(req),
                inode,
                AttrChange {
                    mode: change.mode,
                    uid: change.uid,
                    gid: change.gid,
                    size: change.size,
                    atime: when(change.atime),
                    mtime: when(change.mtime),
                },
                file,
                &self.press(),
                |old| self.follow_copy(inode, old),
            )
            .map_err(errno)?;
        self.zones.own().note(&st);
        Ok(attr_of(inode.ino, &st))
    }

    /// Lists a directory (the virtual top level or a backing directory).
    fn list_dir(&self, ino: u64) -> Res<DirEntries> {
        if ino == ROOT_INO {
            let mut entries = vec![
                (OsString::from("."), FileType::Directory, ROOT_INO),
                (OsString::from(".."), FileType::Directory, ROOT_INO),
            ];
            for id in ZoneId::ALL {
                if self.inodes.get(zone_ino(id)).is_some()
                    || id.config_index().is_some_and(|i| self.remote[i].is_some())
                {
                    entries.push((OsString::from(id.name()), FileType::Directory, zone_ino(id)));
                }
            }
            entries.push((OsString::from(FORKS_DIR), FileType::Directory, FORKS_INO));
            Ok(entries)
        } else if ino == FORKS_INO {
            Ok(self.list_forks())
        } else if let Some(t) = self.tree(ino) {
            t.list_dir(ino)
        } else {
            self.inode(INodeNo(ino))
                .and_then(|i| self.read_dir_entries(&i))
        }
    }

    /// The forks' directory: each fork that exists now, as its root's number.
    fn list_forks(&self) -> DirEntries {
        let mut entries = vec![
            (OsString::from("."), FileType::Directory, FORKS_INO),
            (OsString::from(".."), FileType::Directory, ROOT_INO),
        ];
        for id in self.forks_seen().0 {
            let (Some(name), Some(Ok((_, st)))) = (id.fork_name(), self.zones.node_zone_root(id))
            else {
                continue; // removed meanwhile
            };
            let ino = self.inodes.fork_root_number(id, (st.st_dev, st.st_ino));
            entries.push((OsString::from(name), FileType::Directory, ino));
        }
        entries
    }

    /// The snapshot of directory `ino` (open as `fh`, or 0) to answer a `readdir` at `offset`
    /// from.
    fn dir_snapshot(&self, fh: FileHandle, ino: u64, offset: u64) -> Res<Arc<DirEntries>> {
        if fh.0 == 0 {
            if offset != 0 {
                if let Some(e) = self.listings.lock().expect("not poisoned").get(&ino) {
                    return Ok(e.clone());
                }
            }
            // Read outside the lock: a cold directory is a disk read, and other listings go on.
            let e = Arc::new(self.list_dir(ino)?);
            let mut listings = self.listings.lock().expect("not poisoned");
            // Bounded: a reader that stops halfway leaves its snapshot behind.
            if listings.len() >= 1024 {
                listings.clear();
            }
            listings.insert(ino, e.clone());
            return Ok(e);
        }
        let d = self
            .dirs
            .lock()
            .expect("not poisoned")
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        let mut slot = d.entries.lock().expect("not poisoned");
        match &*slot {
            Some(e) if offset != 0 => Ok(e.clone()),
            _ => {
                let e = Arc::new(self.list_dir(d.ino)?);
                *slot = Some(e.clone());
                Ok(e)
            }
        }
    }

    /// After a reply from `d` at `offset`: drops the snapshot of a directory listed without an
    /// open directory once its end was sent, a reply with no entry left. A reply that sent the
    /// last entries keeps it, so the kernel's next request (which asks past the last entry, to
    /// learn that it was the last) is answered from it instead of from a new listing.
    fn listed(&self, fh: FileHandle, ino: u64, offset: u64, d: &DirEntries) {
        if fh.0 == 0 && offset as usize >= d.len() {
            self.listings.lock().expect("not poisoned").remove(&ino);
        }
    }

    fn read_dir_entries(&self, inode: &Inode) -> Res<DirEntries> {
        let entries: DirEntries = self
            .zones
            .node_read_dir(inode, &self.press())
            .map_err(errno)?
            .into_iter()
            .map(|(name, kind, backing)| {
                let ino = match name.as_bytes() {
                    b"." => inode.ino,
                    b".." => ROOT_INO,
                    _ => self.inodes.number_of(inode.zone, inode.dev, backing),
                };
                (name, kind, ino)
            })
            .collect();
        if let Some(p) = &self.prefetch {
            // A listing is often the first step of a walk: the subdirectories come next. Not
            // those the kernel holds already: they were looked up, and so read, before (as
            // `git status` looks up every tracked file before it lists the directories).
            let subdirs = entries
                .iter()
                .filter(|(_, kind, ino)| {
                    *kind == FileType::Directory && self.inodes.get(*ino).is_none()
                })
                .map(|(name, _, _)| name.as_os_str());
            p.subdirs(&inode.node, subdirs);
        }
        Ok(entries)
    }
}

macro_rules! reply {
    ($reply:ident, $res:expr, |$v:pat_param| $ok:expr) => {
        match $res {
            Ok($v) => $ok,
            Err(e) => $reply.error(e),
        }
    };
}

/// The answers to the echo's requests (see `super::echo`).
impl WardFs {
    /// True when `req` comes from the echo thread (`super::echo`): it repeats through the mount
    /// a change the zones hold already, so that the kernel tells the mount's watchers. Every
    /// handler of a request the echo makes asks first, and answers with an `echo_*` method
    /// below: from what the zones hold now, never touching the backing store, the journal, the
    /// path locks or the own-change bookkeeping.
    fn echoing(&self, req: &Request) -> bool {
        self.echo.is_echo(req.pid())
    }

    /// How to answer the echo's lookup of `name` in `parent`, when it is a name the echo
    /// changes ([`Echoes::answer`]).
    fn echo_asks(&self, req: &Request, parent: INodeNo, name: &OsStr) -> Option<Answer> {
        if !self.echoing(req) {
            return None;
        }
        let dir = self.inode(parent).ok()?;
        let (dev, ino) = dir.node.key();
        self.echo.answer((dir.zone, dev, ino), name)
    }

    /// The echo's lookup of a name it changes, as [`Echoes::answer`] says. Never cached (entry
    /// TTL 0): anyone else looking the name up meanwhile asks again and is answered as the
    /// zones are.
    ///
    /// An entry for a name that is gone (a removal's, a move's source) is answered only while
    /// the name is still gone: one made anew meanwhile is `ENOENT` (not cached either), so that
    /// the echo, late, fails and the kernel keeps what it knows.
    fn echo_lookup(&self, parent: INodeNo, name: &OsStr, answer: Answer, reply: ReplyEntry) {
        let gone = |ino, kind| self.gone_attr(ino, kind);
        if answer != Answer::Absent && self.echo_there(parent, name) {
            return reply.error(Errno::ENOENT);
        }
        match answer {
            Answer::Absent => reply.error(Errno::ENOENT),
            Answer::Held(ino, kind)
                if !self.a_file_has(ino) && self.inodes.looked_up_again(ino) =>
            {
                reply.entry(&Duration::ZERO, &gone(ino, kind), Generation(0))
            }
            Answer::Held(_, kind) | Answer::Ghost(kind) => reply.entry(
                &Duration::ZERO,
                &gone(self.inodes.ghost(), kind),
                Generation(0),
            ),
            Answer::At((zone, dev, ino), name) => {
                let found = self
                    .inodes
                    .known_number(zone, dev, ino)
                    .ok_or(Errno::ENOENT)
                    .and_then(|dir| self.do_lookup(INodeNo(dir), &name));
                reply!(reply, found, |(_, attr)| reply.entry_with_ttls(
                    &TTL,
                    &Duration::ZERO,
                    &attr,
                    Generation(0)
                ))
            }
        }
    }

    /// True when the live inode `ino` stands for a file that is there: moved meanwhile, still
    /// named by another link, or its number given to a new file (the backing filesystem reuses a
    /// removed file's inode number). The echo's removal of a name the kernel knew it by then
    /// gets a ghost: the attributes of a gone file (size 0) would overwrite what the kernel holds
    /// of that file, and a reader of it would find it empty.
    fn a_file_has(&self, ino: u64) -> bool {
        self.inodes
            .get(ino)
            .and_then(|i| i.stat().ok())
            .is_some_and(|st| st.st_nlink > 0)
    }

    /// The echo's `mkdir`, `symlink` or `mknod` of `name` in `parent`: the entry that is there.
    fn echo_entry(&self, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply!(reply, self.do_lookup(parent, name), |(_, attr)| reply
            .entry(&TTL, &attr, Generation(0)))
    }

    /// How the echo's opens are answered: no `FLUSH` at its close, and the kernel keeps the
    /// file's cached pages (it drops them at an open without `FOPEN_KEEP_CACHE`; the echo changes
    /// nothing, and the change it repeats invalidated what it made stale before it was queued).
    const ECHO_OPEN: FopenFlags = FopenFlags::FOPEN_NOFLUSH.union(FopenFlags::FOPEN_KEEP_CACHE);

    /// The echo's create of the file `name` in `parent`: the entry that is there, opened as
    /// [`WardFs::echo_open`] opens it.
    ///
    /// Refused (`EBUSY`, the kernel's view unchanged) for a file the mount is changing: the
    /// kernel applies a create's attributes whatever happened meanwhile, so a size read here
    /// between the mount's truncation and its write would be applied after the write, and the
    /// file read as empty. Its watchers hear the mount's own events for it.
    fn echo_created(&self, parent: INodeNo, name: &OsStr, reply: ReplyCreate) {
        let (inode, attr) = match self.do_lookup(parent, name) {
            Ok(found) => found,
            Err(e) => return reply.error(e),
        };
        if inode.changed_through_mount() {
            return reply.error(Errno::EBUSY);
        }
        let flags = WardFs::ECHO_OPEN;
        match WardFs::echo_backing(&inode) {
            Some(b) => {
                reply.created_passthrough(&TTL, &attr, Generation(0), FileHandle(0), flags, &b)
            }
            None => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(0),
                flags | FopenFlags::FOPEN_DIRECT_IO,
            ),
        }
    }

    /// The echo's open of `ino` (to truncate it to its size): handle 0, which no `RELEASE`
    /// ends (there is nothing to end), in the I/O mode that leaves the inode's as it is:
    /// through the passthrough backing file the kernel has for it, if it has one (the kernel
    /// refuses any other open of such an inode), else direct I/O (which enters no mode, so it
    /// never makes a passthrough open of the file fail meanwhile).
    fn echo_open(&self, ino: INodeNo, reply: ReplyOpen) {
        let flags = WardFs::ECHO_OPEN;
        match self.inode(ino).ok().and_then(|i| WardFs::echo_backing(&i)) {
            Some(b) => reply.opened_passthrough(FileHandle(0), flags, &b),
            None => reply.opened(FileHandle(0), flags | FopenFlags::FOPEN_DIRECT_IO),
        }
    }

    /// The passthrough backing file the kernel has for `inode`, if any.
    fn echo_backing(inode: &Inode) -> Option<Arc<BackingId>> {
        inode.backing.lock().expect("not poisoned").clone()
    }

    /// The echo's removal of `name` in `parent`: done already; the kernel drops the name.
    /// Refused (`EBUSY`, the kernel's view unchanged) when `name` is there again: the echo is
    /// late for a name made anew meanwhile.
    fn echo_removed(&self, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.echo_there(parent, name) {
            return reply.error(Errno::EBUSY);
        }
        self.inodes.unname(parent.0, name);
        reply.ok()
    }

    /// The echo's rename of `name` in `parent` to `newname` in `newparent`: done already (the
    /// kernel learnt the entry at the destination, `echo_lookup`), unless the zones hold
    /// something else now (the source is there again, or the destination gone): refused
    /// (`EBUSY`, the kernel's view unchanged).
    fn echo_renamed(
        &self,
        (parent, name): (INodeNo, &OsStr),
        (newparent, newname): (INodeNo, &OsStr),
        reply: ReplyEmpty,
    ) {
        if self.echo_there(parent, name) || !self.echo_there(newparent, newname) {
            return reply.error(Errno::EBUSY);
        }
        reply.ok()
    }

    /// True when the zones hold an entry `name` in the directory inode `parent` now.
    fn echo_there(&self, parent: INodeNo, name: &OsStr) -> bool {
        self.inode(parent)
            .is_ok_and(|p| self.zones.node_key_at(&p, name).is_some())
    }

    /// The echo's `setattr` (a truncation to the size the file has, times set to what they
    /// are): the attributes the file has.
    fn echo_attr(&self, ino: INodeNo, reply: ReplyAttr) {
        let res = self
            .inode(ino)
            .and_then(|i| i.stat().map_err(errno).map(|st| attr_of(i.ino, &st)));
        reply!(reply, res, |attr| reply.attr(&TTL, &attr))
    }

    /// The attributes of an entry whose file is gone (answered so that the echo can remove it):
    /// its number and kind, nothing in it.
    fn gone_attr(&self, ino: u64, kind: FileType) -> FileAttr {
        let dir = kind == FileType::Directory;
        FileAttr {
            ino: INodeNo(ino),
            size: 0,
            blocks: 0,
            perm: if dir { 0o755 } else { 0o644 },
            nlink: if dir { 2 } else { 1 },
            kind: fuse_kind(kind),
            ..self.virtual_attr(ROOT_INO)
        }
    }
}

impl fuser::Filesystem for WardFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let _ = config.add_capabilities(
            InitFlags::FUSE_DO_READDIRPLUS
                | InitFlags::FUSE_READDIRPLUS_AUTO
                | InitFlags::FUSE_PARALLEL_DIROPS,
        );
        if self.no_opendir
            && config
                .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_err()
        {
            self.no_opendir = false;
        }
        if self.no_open
            && config
                .add_capabilities(InitFlags::FUSE_NO_OPEN_SUPPORT)
                .is_err()
        {
            tracing::info!(
                "the kernel cannot skip OPEN (FUSE_NO_OPEN_SUPPORT); cached zones send OPEN"
            );
            self.no_open = false;
        }
        if self.no_open {
            // Every write comes to the daemon, which clears set-user-ID and set-group-ID when
            // the kernel says the writer may not keep them (`write`): the kernel then stops
            // asking for security.capability before each write (one GETXATTR per write before;
            // now at most one per file, SB_NOSEC). Not with passthrough, where writes bypass us.
            let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        }
        if self.want_passthrough {
            match config.add_capabilities(InitFlags::FUSE_PASSTHROUGH) {
                Ok(()) => match config.set_max_stack_depth(2) {
                    Ok(_) => self.passthrough.store(true, Ordering::Relaxed),
                    Err(_) => {
                        tracing::info!("kernel passthrough unavailable (stack depth refused)")
                    }
                },
                Err(_) => tracing::info!(
                    "kernel passthrough unavailable (needs Linux 6.9+ and CAP_SYS_ADMIN)"
                ),
            }
        }
        let uring = self.want_uring
            && config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
        if uring {
            // Each ring entry gets a payload buffer of max_write bytes; the kernel splits
            // requests at max_pages (1 MiB) anyway.
            let _ = config.set_max_write(URING_MAX_WRITE);
        } else if self.want_uring {
            tracing::info!(
                "the kernel does not offer FUSE over io_uring (Linux 6.14+ with \
                 /sys/module/fuse/parameters/enable_uring = Y); requests go through /dev/fuse"
            );
        }
        tracing::info!(
            passthrough = self.passthrough.load(Ordering::Relaxed),
            transport = if uring { "io_uring" } else { "/dev/fuse" },
            xattrs = self.xattrs,
            "FUSE session started; file I/O uses {}",
            if self.no_open {
                "the page cache, with no OPEN requests (every zone io = \"cached\")"
            } else if self.passthrough.load(Ordering::Relaxed) {
                "kernel passthrough"
            } else {
                "reads and writes served by the daemon"
            }
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some(answer) = self.echo_asks(req, parent, name) {
            return self.echo_lookup(parent, name, answer, reply);
        }
        if let Some(t) = self.remote_root(parent.0, name) {
            return reply!(reply, t.root_attr(), |attr| reply.entry(
                &t.ttl(),
                &attr,
                Generation(0)
            ));
        }
        if let Some(t) = self.tree(parent.0) {
            return reply!(reply, t.lookup(parent.0, name), |attr| reply.entry(
                &t.ttl(),
                &attr,
                Generation(0)
            ));
        }
        match self.lookup_entry(parent.0, name) {
            Ok(attr) => reply.entry_with_ttls(
                &WardFs::attr_ttl(attr.ino.0),
                &WardFs::entry_ttl(parent.0),
                &attr,
                Generation(0),
            ),
            // An absent name is answered as a negative entry (inode 0), which the kernel caches for
            // TTL: tools probe for many names that do not exist (rg and git look for .git,
            // .gitignore, .ignore in every directory). A name that appears behind the mount's back
            // is invalidated like any other entry (see `super::invalidate`).
            Err(Errno::ENOENT) if self.inodes.get(parent.0).is_some() => {
                let attr = FileAttr {
                    ino: INodeNo(0),
                    ..self.root_attr()
                };
                reply.entry(&TTL, &attr, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if let Some(t) = self.tree(ino.0) {
            return t.forget(ino.0, nlookup);
        }
        self.inodes.forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(t) = self.tree(ino.0) {
            return reply!(reply, t.getattr(ino.0), |attr| reply.attr(&t.ttl(), &attr));
        }
        if ino.0 == ROOT_INO || ino.0 == FORKS_INO {
            return reply.attr(&WardFs::attr_ttl(ino.0), &self.virtual_attr(ino.0));
        }
        // `fstat` on an open file: the file itself, even when its name has gone.
        let open = fh
            .and_then(|fh| self.handle(fh).ok())
            .filter(|h| h.inode.ino == ino.0);
        if let Some(f) = open.as_ref().and_then(|h| h.file.get()) {
            let res = node_io::stat(f)
                .map_err(errno)
                .map(|st| attr_of(ino.0, &st));
            return reply!(reply, res, |attr| reply.attr(&TTL, &attr));
        }
        let res = self
            .inode(ino)
            .and_then(|i| i.stat().map_err(errno).map(|st| attr_of(i.ino, &st)));
        reply!(reply, res, |attr| reply.attr(&TTL, &attr))
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        if self.echoing(req) {
            return self.echo_attr(ino, reply);
        }
        if let Some(t) = self.tree(ino.0) {
            let when = |t: TimeOrNow| match t {
                TimeOrNow::SpecificTime(t) => t,
                TimeOrNow::Now => SystemTime::now(),
            };
            let res = t.setattr(
                ino.0,
                mode,
                uid,
                gid,
                size,
                mtime.map(when),
                WardFs::origin(req),
            );
            return reply!(reply, res, |attr| reply.attr(&t.ttl(), &attr));
        }
        if ino.0 == FORKS_INO {
            return reply.error(Errno::EPERM);
        }
        let res = self.inode(ino).and_then(|i| {
            let change = SetAttr {
                mode,
                uid,
                gid,
                size,
                atime,
                mtime,
                fh,
            };
            self.do_setattr(req, &i, change)
        });
        reply!(reply, res, |attr| reply.attr(&TTL, &attr))
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        if let Some(t) = self.tree(ino.0) {
            return reply!(reply, t.readlink(ino.0), |t| reply.data(&t));
        }
        let res = self
            .inode(ino)
            .and_then(|i| self.zones.node_readlink(&i).map_err(errno));
        reply!(reply, res, |t| reply.data(&t))
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        if self.echoing(req) {
            return self.echo_entry(parent, name, reply);
        }
        if self.tree(parent.0).is_some() {
            return reply.error(Errno::EPERM);
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "mknod")?;
            let name = plain_name(name)?;
            let mode = (mode & !0o7777) | (mode & !umask & 0o7777);
            self.zones
                .node_mknod(&WardFs::caller(req), &p, name, mode, rdev as u64, || {
                    self.mark(&p, Some(name))
                })
                .map_err(errno)?;
            self.do_lookup(parent, name)
        })();
        reply!(reply, res, |(_, attr)| reply.entry(
            &TTL,
            &attr,
            Generation(0)
        ))
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        if self.echoing(req) {
            return self.echo_entry(parent, name, reply);
        }
        if let Some(t) = self.tree(parent.0) {
            let res = t.mkdir(parent.0, name, mode & !umask, WardFs::origin(req));
            return reply!(reply, res, |attr| reply.entry(
                &t.ttl(),
                &attr,
                Generation(0)
            ));
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "mkdir")?;
            let name = plain_name(name)?;
            self.zones
                .node_mkdir(&WardFs::caller(req), &p, name, mode & !umask, || {
                    self.mark(&p, Some(name))
                })
                .map_err(errno)?;
            self.do_lookup(parent, name)
        })();
        reply!(reply, res, |(_, attr)| reply.entry(
            &TTL,
            &attr,
            Generation(0)
        ))
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.echoing(req) {
            return self.echo_removed(parent, name, reply);
        }
        if let Some(t) = self.tree(parent.0) {
            let res = t.remove(parent.0, name, false, WardFs::origin(req));
            return reply!(reply, res, |()| reply.ok());
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "unlink")?;
            let name = plain_name(name)?;
            self.pin_victim(&p, name);
            self.zones
                .node_remove(&WardFs::caller(req), &p, name, false, |gone| {
                    self.mark(&p, None);
                    if let Some(k) = gone {
                        self.zones.own().forget(k);
                    }
                })
                .map_err(errno)?;
            // The kernel drops the name (the inode it held there may live on, open).
            self.inodes.unname(parent.0, name);
            Ok(())
        })();
        reply!(reply, res, |()| reply.ok())
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.echoing(req) {
            return self.echo_removed(parent, name, reply);
        }
        if let Some(t) = self.tree(parent.0) {
            let res = t.remove(parent.0, name, true, WardFs::origin(req));
            return reply!(reply, res, |()| reply.ok());
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "rmdir")?;
            let name = plain_name(name)?;
            self.zones
                .node_remove(&WardFs::caller(req), &p, name, true, |gone| {
                    self.mark(&p, None);
                    if let Some(k) = gone {
                        self.zones.own().forget(k);
                    }
                })
                .map_err(errno)?;
            // The kernel drops the name (the inode it held there may live on, open).
            self.inodes.unname(parent.0, name);
            Ok(())
        })();
        reply!(reply, res, |()| reply.ok())
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        if self.echoing(req) {
            return self.echo_entry(parent, link_name, reply);
        }
        if let Some(t) = self.tree(parent.0) {
            let res = t.symlink(parent.0, link_name, target, WardFs::origin(req));
            return reply!(reply, res, |attr| reply.entry(
                &t.ttl(),
                &attr,
                Generation(0)
            ));
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "symlink")?;
            let name = plain_name(link_name)?;
            self.zones
                .node_symlink(&WardFs::caller(req), &p, name, target, || {
                    self.mark(&p, Some(name))
                })
                .map_err(errno)?;
            self.do_lookup(parent, name)
        })();
        reply!(reply, res, |(_, attr)| reply.entry(
            &TTL,
            &attr,
            Generation(0)
        ))
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if self.echoing(req) {
            return self.echo_renamed((parent, name), (newparent, newname), reply);
        }
        match (self.tree(parent.0), self.tree(newparent.0)) {
            (None, None) => {}
            (Some(a), Some(b)) if std::ptr::eq(a, b) => {
                if flags.contains(RenameFlags::RENAME_EXCHANGE)
                    || flags.contains(RenameFlags::RENAME_WHITEOUT)
                {
                    return reply.error(Errno::EINVAL);
                }
                let res = a.rename(
                    parent.0,
                    name,
                    newparent.0,
                    newname,
                    flags.contains(RenameFlags::RENAME_NOREPLACE),
                    WardFs::origin(req),
                );
                return reply!(reply, res, |()| reply.ok());
            }
            _ => return reply.error(Errno::EXDEV),
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "rename")?;
            let np = self.dir_for_change(newparent, "rename")?;
            let (name, newname) = (plain_name(name)?, plain_name(newname)?);
            if flags.contains(RenameFlags::RENAME_WHITEOUT) {
                return Err(Errno::EINVAL);
            }
            let mode = if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                RenameMode::Exchange
            } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                RenameMode::NoReplace
            } else {
                RenameMode::Replace
            };
            let who = WardFs::caller(req);
            if mode == RenameMode::Replace {
                self.pin_victim(&np, newname);
            }
            self.zones
                .node_rename(&who, &p, name, &np, newname, mode, |replaced| {
                    if let Some(k) = replaced {
                        self.zones.own().forget(k);
                    }
                    self.mark(&p, Some(name));
                    self.mark(&np, Some(newname));
                })
                .map_err(errno)?;
            // The kernel now knows the moved inode(s) under the new name(s).
            for (dir, n, kernel_dir) in [(&np, newname, newparent.0), (&p, name, parent.0)] {
                if let Some((dev, backing)) = self.zones.node_key_at(dir, n) {
                    if let Some(ino) = self.inodes.known_number(dir.zone, dev, backing) {
                        self.inodes.seen_as(ino, kernel_dir, &dir.node, n);
                    }
                }
            }
            Ok(())
        })();
        reply!(reply, res, |()| reply.ok())
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if self.tree(ino.0).is_some() || self.tree(newparent.0).is_some() {
            return reply.error(Errno::EPERM);
        }
        let res = (|| {
            let i = self.inode(ino)?;
            let _naming = self.naming();
            let np = self.dir_for_change(newparent, "link")?;
            let name = plain_name(newname)?;
            self.zones
                .node_link(&WardFs::caller(req), &i, &np, name, || {
                    self.mark(&np, Some(name))
                })
                .map_err(errno)?;
            self.do_lookup(newparent, name)
        })();
        reply!(reply, res, |(_, attr)| reply.entry(
            &TTL,
            &attr,
            Generation(0)
        ))
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.no_open {
            // Once: the kernel then opens every file without asking (see `io_handle`).
            return reply.error(Errno::ENOSYS);
        }
        if self.echoing(req) {
            return self.echo_open(ino, reply);
        }
        if let Some(t) = self.tree(ino.0) {
            let write = WardFs::is_write(flags.0);
            let trunc = write && flags.0 & libc::O_TRUNC != 0;
            let res = t.open(ino.0, write, trunc, WardFs::origin(req));
            return reply!(reply, res, |fh| reply
                .opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO));
        }
        let i = match self.inode(ino) {
            Ok(i) => i,
            Err(e) => return reply.error(e),
        };
        let write = WardFs::is_write(flags.0);
        let oflags = WardFs::open_flags(flags.0);
        // A file read through passthrough before: the kernel already has its backing file, so
        // there is nothing to open here (our own descriptor is opened if a later call needs it).
        let passthrough = self.passthrough.load(Ordering::Relaxed) && !self.cached_io(i.zone);
        if !write && i.kind == FileType::RegularFile && passthrough {
            let known = i.backing.lock().expect("not poisoned").clone();
            if let Some(b) = known {
                let fh = self.new_handle(req, &i, None, oflags, false, Some(b.clone()));
                return reply.opened_passthrough(FileHandle(fh), FopenFlags::FOPEN_NOFLUSH, &b);
            }
        }
        let res = (|| {
            if write {
                self.writable(i.zone)?;
            }
            if write && i.kind == FileType::RegularFile {
                return self.open_for_change(&i, oflags).map(OwnedFd::from);
            }
            self.reopen(&i, oflags)
        })();
        let fd = match res {
            Ok(fd) => fd,
            Err(e) => return reply.error(e),
        };
        let file = std::fs::File::from(fd);
        let backing = (passthrough && i.kind == FileType::RegularFile)
            .then(|| WardFs::shared_backing(&i, || reply.open_backing(file.as_fd())))
            .flatten();
        let fh = self.new_handle(req, &i, Some(file), oflags, write, backing.clone());
        // Count the file as changed when truncated, or opened for writing with the kernel doing
        // the writes (the daemon never sees them).
        if write && (backing.is_some() || flags.0 & libc::O_TRUNC != 0) {
            self.mark_dirty(fh);
        }
        match &backing {
            Some(b) => reply.opened_passthrough(FileHandle(fh), FopenFlags::FOPEN_NOFLUSH, b),
            None => reply.opened(
                FileHandle(fh),
                FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_NOFLUSH,
            ),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if let Some(t) = self.tree_fh(fh.0) {
            return reply!(reply, t.read(fh.0, offset, size), |buf| reply.data(&buf));
        }
        let res = self.io_handle(_req, ino, fh, false).and_then(|h| {
            if offset == 0 {
                if let (Some(p), Some(dir)) = (&self.prefetch, h.inode.parent()) {
                    // The start of a file not in the page cache: its neighbours may come next.
                    p.files(&dir);
                }
            }
            let mut buf = vec![0u8; size as usize];
            let n = node_io::read_at(self.file_of(&h)?, &mut buf, offset).map_err(errno)?;
            buf.truncate(n);
            Ok(buf)
        });
        reply!(reply, res, |buf| reply.data(&buf))
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Some(t) = self.tree_fh(fh.0) {
            let append = flags.0 & libc::O_APPEND != 0;
            let res = t.write(fh.0, offset, data, append, WardFs::origin(_req));
            return reply!(reply, res, |n| reply.written(n));
        }
        let append = flags.0 & libc::O_APPEND != 0;
        // Set only with FUSE_HANDLE_KILLPRIV_V2 (see `init`), for a writer without CAP_FSETID.
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let res = if fh.0 == 0 && append {
            // The implicit writer writes at offsets; an appending write opens its own file.
            self.io_handle(_req, ino, fh, true).and_then(|h| {
                let f =
                    std::fs::File::from(self.reopen(&h.inode, OFlags::WRONLY | OFlags::APPEND)?);
                let _writing = h.writing(&self.zones);
                if kill {
                    node_io::kill_suidgid(&f).map_err(errno)?;
                }
                let n = node_io::write_at(&f, data, offset, true).map_err(errno)?;
                h.written.fetch_add(n as u64, Ordering::Relaxed);
                h.wrote(&self.zones);
                Ok(n as u32)
            })
        } else {
            self.io_handle(_req, ino, fh, true).and_then(|h| {
                let f = self.file_of(&h)?;
                let _writing = h.writing(&self.zones);
                if kill {
                    node_io::kill_suidgid(f).map_err(errno)?;
                }
                let n = node_io::write_at(f, data, offset, append).map_err(errno)?;
                if !append {
                    h.behind.wrote(f, offset, n);
                }
                h.written.fetch_add(n as u64, Ordering::Relaxed);
                h.wrote(&self.zones);
                Ok(n as u32)
            })
        };
        reply!(reply, res, |n| reply.written(n))
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if let Some(t) = self.tree_fh(fh.0) {
            return reply!(reply, t.flush(fh.0), |()| reply.ok());
        }
        if self.no_open {
            // Once: the kernel then sends no FLUSH at `close` (implicit writers end when idle).
            return reply.error(Errno::ENOSYS);
        }
        reply!(reply, self.handle(fh), |_| reply.ok())
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(t) = self.tree_fh(fh.0) {
            return reply!(reply, t.release(fh.0), |()| reply.ok());
        }
        let h = self.handles.write().expect("not poisoned").remove(&fh.0);
        if let Some(h) = h {
            self.end_handle(&h);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        if let Some(t) = self.tree_fh(fh.0) {
            return reply!(reply, t.fsync(fh.0), |()| reply.ok());
        }
        let res = self
            .io_handle(_req, ino, fh, false)
            .and_then(|h| node_io::sync(self.file_of(&h)?, datasync).map_err(errno));
        reply!(reply, res, |()| reply.ok())
    }
    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            return reply.error(Errno::ENOSYS);
        }
        if ino.0 != ROOT_INO && ino.0 != FORKS_INO && self.tree(ino.0).is_none() {
            if let Err(e) = self.inode(ino) {
                return reply.error(e);
            }
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().expect("not poisoned").insert(
            fh,
            Arc::new(DirHandle {
                ino: ino.0,
                entries: Mutex::new(None),
            }),
        );
        // The kernel may keep the listing in its cache across opens: changes through the mount
        // update it, changes behind its back invalidate it (`inval_inode` on the directory).
        if self.tree(ino.0).is_some() || ino.0 == FORKS_INO {
            // Listings of a sandbox directory are asked for again after the zone's TTL, the
            // forks' at every open.
            return reply.opened(FileHandle(fh), FopenFlags::empty());
        }
        reply.opened(
            FileHandle(fh),
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        );
    }

    fn readdir(
        &self,
        _req: &Request,
        dir: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let d = match self.dir_snapshot(fh, dir.0, offset) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        for (i, (name, kind, ino)) in d.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), (i + 1) as u64, fuse_kind(*kind), name) {
                break;
            }
        }
        self.listed(fh, dir.0, offset, &d);
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let d = match self.dir_snapshot(fh, ino.0, offset) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        for (i, (name, kind, known)) in d.iter().enumerate().skip(offset as usize) {
            let full = if name == "." || name == ".." {
                // The kernel takes no reference for these; answer with attributes only.
                let target = if name == "." { ino.0 } else { ROOT_INO };
                let attr = if target == ROOT_INO || target == FORKS_INO {
                    Some(self.virtual_attr(target))
                } else if let Some(t) = self.tree(target) {
                    t.getattr(target).ok()
                } else {
                    self.inodes
                        .get(target)
                        .and_then(|i| i.stat().ok().map(|st| attr_of(target, &st)))
                };
                match attr {
                    Some(a) => reply.add(
                        INodeNo(target),
                        (i + 1) as u64,
                        name,
                        &TTL,
                        &a,
                        Generation(0),
                    ),
                    None => continue,
                }
            } else if let Some(t) = self.remote_root(ino.0, name) {
                match t.root_attr() {
                    // The zone roots have fixed numbers and take no reference.
                    Ok(attr) => reply.add(
                        attr.ino,
                        (i + 1) as u64,
                        name,
                        &t.ttl(),
                        &attr,
                        Generation(0),
                    ),
                    Err(_) => continue,
                }
            } else if let Some(t) = self.tree(ino.0) {
                match t.lookup(ino.0, name) {
                    Ok(attr) => {
                        let full = reply.add(
                            attr.ino,
                            (i + 1) as u64,
                            name,
                            &t.ttl(),
                            &attr,
                            Generation(0),
                        );
                        if full {
                            t.forget(attr.ino.0, 1);
                        }
                        full
                    }
                    Err(_) => continue,
                }
            } else if *known == FORKS_INO || self.inodes.get(*known).is_some() {
                // The kernel holds this inode already (a walk that looked names up before it
                // listed their directory, as `git status` does), and keeps its attributes, which
                // every change through the mount or beside it invalidates: the name alone, with
                // no stat and no new reference. So is the forks' directory, whose attributes the
                // kernel must not keep (see `attr_ttl`): it looks it up when it needs it.
                reply.add_name_only(INodeNo(*known), (i + 1) as u64, name, fuse_kind(*kind))
            } else {
                match self.lookup_entry(ino.0, name) {
                    Ok(attr) => {
                        let full = reply.add(
                            attr.ino,
                            (i + 1) as u64,
                            name,
                            &WardFs::entry_ttl(ino.0),
                            &attr,
                            Generation(0),
                        );
                        if full {
                            // Not sent: give the reference back.
                            self.inodes.forget(attr.ino.0, 1);
                        }
                        full
                    }
                    Err(_) => continue, // removed since opendir
                }
            };
            if full {
                break;
            }
        }
        self.listed(fh, ino.0, offset, &d);
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs.lock().expect("not poisoned").remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if self.tree(ino.0).is_some() || ino.0 == ROOT_INO || ino.0 == FORKS_INO {
            return reply.ok();
        }
        let res = self
            .inode(ino)
            .and_then(|i| self.zones.node_fsync_dir(&i, &self.press()).map_err(errno));
        reply!(reply, res, |()| reply.ok())
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        if let Some(t) = self.tree(ino.0) {
            let (b, f, a, files, ffree, bsize, namelen) = t.statfs();
            return reply.statfs(b, f, a, files, ffree, bsize, namelen, bsize);
        }
        let target = if ino.0 == ROOT_INO || ino.0 == FORKS_INO {
            zone_ino(ZoneId::Workspace)
        } else {
            ino.0
        };
        let res = self
            .inodes
            .get(target)
            .or_else(|| self.inodes.get(zone_ino(ZoneId::Cache)))
            .ok_or(Errno::ENOENT)
            .and_then(|i| self.zones.node_statfs(&i).map_err(errno));
        reply!(reply, res, |s| reply.statfs(
            s.f_blocks,
            s.f_bfree,
            s.f_bavail,
            s.f_files,
            s.f_ffree,
            s.f_bsize as u32,
            s.f_namemax as u32,
            s.f_frsize as u32
        ))
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        if self.tree(ino.0).is_some() {
            return reply.error(Errno::ENOTSUP);
        }
        let res = (|| {
            let i = self.inode(ino)?;
            let broke = |old| self.follow_copy(&i, old);
            self.zones
                .node_set_xattr(
                    &WardFs::caller(req),
                    &i,
                    name,
                    Some((value, flags)),
                    broke,
                    || {
                        if let Ok(st) = i.stat() {
                            self.zones.own().note(&st);
                        }
                    },
                )
                .map_err(errno)?;
            Ok(())
        })();
        reply!(reply, res, |()| reply.ok())
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        // The top level (`ls -la` asks of `workspace/..`) and a sandbox's tree keep no
        // attributes: none is set, which is ENODATA, not a missing file.
        if ino.0 == ROOT_INO || ino.0 == FORKS_INO || self.tree(ino.0).is_some() {
            return reply.error(Errno::from_i32(libc::ENODATA));
        }
        let res = self.inode(ino).and_then(|i| {
            let mut buf = vec![0u8; size as usize];
            let n = self
                .zones
                .node_get_xattr(&i, name, &mut buf)
                .map_err(errno)?;
            buf.truncate(n);
            Ok((n, buf))
        });
        reply!(reply, res, |(n, buf)| if size == 0 {
            reply.size(n as u32)
        } else {
            reply.data(&buf)
        })
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        if ino.0 == ROOT_INO || ino.0 == FORKS_INO || self.tree(ino.0).is_some() {
            return if size == 0 {
                reply.size(0)
            } else {
                reply.data(&[])
            };
        }
        let res = self.inode(ino).and_then(|i| {
            let mut buf = vec![0u8; size as usize];
            let n = self.zones.node_list_xattr(&i, &mut buf).map_err(errno)?;
            buf.truncate(n);
            Ok((n, buf))
        });
        reply!(reply, res, |(n, buf)| if size == 0 {
            reply.size(n as u32)
        } else {
            reply.data(&buf)
        })
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        if self.tree(ino.0).is_some() {
            return reply.error(Errno::ENOTSUP);
        }
        let res = (|| {
            let i = self.inode(ino)?;
            let broke = |old| self.follow_copy(&i, old);
            self.zones
                .node_set_xattr(&WardFs::caller(req), &i, name, None, broke, || {
                    if let Ok(st) = i.stat() {
                        self.zones.own().note(&st);
                    }
                })
                .map_err(errno)?;
            Ok(())
        })();
        reply!(reply, res, |()| reply.ok())
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // The kernel checks permissions itself (default_permissions); only read-only zones refuse
        // write access here.
        let res = if ino.0 == ROOT_INO || ino.0 == FORKS_INO {
            Ok(())
        } else if let Some(t) = self.tree(ino.0) {
            if mask.contains(AccessFlags::W_OK) {
                self.writable(t.zone())
            } else {
                Ok(())
            }
        } else {
            self.inode(ino).and_then(|i| {
                if mask.contains(AccessFlags::W_OK) {
                    self.writable(i.zone)
                } else {
                    Ok(())
                }
            })
        };
        reply!(reply, res, |()| reply.ok())
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        if self.echoing(req) {
            return self.echo_created(parent, name, reply);
        }
        if let Some(t) = self.tree(parent.0) {
            let excl = flags & libc::O_EXCL != 0;
            let res = t.create(parent.0, name, mode & !umask, excl, WardFs::origin(req));
            return reply!(reply, res, |(attr, fh)| reply.created(
                &t.ttl(),
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_DIRECT_IO
            ));
        }
        let res = (|| {
            let _naming = self.naming();
            let p = self.dir_for_change(parent, "create")?;
            let name = plain_name(name)?;
            let fd = self
                .zones
                .node_create(
                    &WardFs::caller(req),
                    &p,
                    name,
                    WardFs::open_flags(flags),
                    mode & !umask,
                    flags & libc::O_EXCL != 0,
                    || self.mark(&p, Some(name)),
                )
                .map_err(errno)?;
            let (inode, attr) = self.do_lookup(parent, name)?;
            Ok((inode, attr, fd))
        })();
        match res {
            Err(e) => reply.error(e),
            Ok((inode, attr, fd)) => {
                let file = std::fs::File::from(fd);
                if self.no_open {
                    // No RELEASE will end it: the created file, when opened for writing, is the
                    // inode's implicit writer (so a file created read-only can still be written
                    // through the descriptor that created it).
                    if WardFs::is_write(flags) {
                        let h = match node_io::stat(&file) {
                            Ok(st) => {
                                self.add_implicit(req, inode, file, WardFs::open_flags(flags), &st)
                            }
                            Err(e) => return reply.error(errno(e)),
                        };
                        h.wrote(&self.zones);
                    }
                    return reply.created(
                        &TTL,
                        &attr,
                        Generation(0),
                        FileHandle(0),
                        FopenFlags::FOPEN_KEEP_CACHE,
                    );
                }
                let backing = (self.passthrough.load(Ordering::Relaxed)
                    && !self.cached_io(inode.zone))
                .then(|| WardFs::shared_backing(&inode, || reply.open_backing(file.as_fd())))
                .flatten();
                let oflags = WardFs::open_flags(flags);
                let fh = self.new_handle(req, &inode, Some(file), oflags, true, backing);
                self.mark_dirty(fh);
                let h = self.handle(FileHandle(fh)).expect("just inserted");
                match &h.backing {
                    Some(b) => reply.created_passthrough(
                        &TTL,
                        &attr,
                        Generation(0),
                        FileHandle(fh),
                        FopenFlags::FOPEN_NOFLUSH,
                        b,
                    ),
                    // Without OPEN the kernel sends no RELEASE: the FLUSH at close ends the file.
                    None if self.no_open => reply.created(
                        &TTL,
                        &attr,
                        Generation(0),
                        FileHandle(fh),
                        FopenFlags::FOPEN_KEEP_CACHE,
                    ),
                    None => reply.created(
                        &TTL,
                        &attr,
                        Generation(0),
                        FileHandle(fh),
                        FopenFlags::FOPEN_NOFLUSH,
                    ),
                }
            }
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if self.tree_fh(fh.0).is_some() {
            return reply.error(Errno::ENOTSUP);
        }
        let res = self.io_handle(req, ino, fh, true).and_then(|h| {
            node_io::allocate(self.file_of(&h)?, mode, offset, length).map_err(errno)?;
            h.wrote(&self.zones);
            Ok(())
        });
        reply!(reply, res, |()| reply.ok())
    }

    fn lseek(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        if self.tree_fh(fh.0).is_some() {
            return reply.error(Errno::ENOTSUP);
        }
        let res = self
            .io_handle(req, ino, fh, false)
            .and_then(|h| node_io::seek(self.file_of(&h)?, offset, whence).map_err(errno));
        reply!(reply, res, |p| reply.offset(p as i64))
    }

    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if self.tree_fh(fh_in.0).is_some() || self.tree_fh(fh_out.0).is_some() {
            return reply.error(Errno::EXDEV);
        }
        let res = self.io_handle(req, ino_in, fh_in, false).and_then(|i| {
            let o = self.io_handle(req, ino_out, fh_out, true)?;
            let n = node_io::copy_range(
                self.file_of(&i)?,
                offset_in,
                self.file_of(&o)?,
                offset_out,
                len,
            )
            .map_err(errno)?;
            o.wrote(&self.zones);
            Ok(n as u32)
        });
        reply!(reply, res, |n| reply.written(n))
    }
}

impl Drop for WardFs {
    /// Journals what the implicit writers wrote (the kernel sends no `RELEASE` for them).
    fn drop(&mut self) {
        self.implicit.end_all(&self.zones);
    }
}

impl WardFs {
    /// Ends an open file: journals its writes, and it no longer counts as open for writing.
    fn end_handle(&self, h: &Handle) {
        let st = h
            .writer_key
            .is_some()
            .then(|| h.file.get().and_then(|f| node_io::stat(f).ok()))
            .flatten();
        // Journaled before the handle ends: a checkpoint that no longer finds the file open
        // for writing finds its journal row (`OwnChanges::open_writer_paths`).
        if h.dirty.load(Ordering::Relaxed) {
            let size = st.as_ref().map(|st| st.st_size as u64);
            self.zones.node_record_write(&h.inode, size, h.origin);
        }
        if let Some((dev, ino)) = h.writer_key {
            self.zones.own().writer_closed(dev, ino, st.as_ref());
        }
    }

    /// The open file a read or write with file handle `fh` uses. Handle 0 is a file the kernel
    /// opened without asking ([`WardFs::no_open`]): a write uses the inode's implicit writer
    /// (opened now if it has none); a read opens the file for this request only, so files read
    /// once cost no descriptor afterwards. Either way the zone's rules are checked here, where
    /// `open` would have checked them.
    fn io_handle(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        write: bool,
    ) -> Res<Arc<Handle>> {
        let h = self.find_io_handle(req, ino, fh, write)?;
        if write {
            h.inode.changing_through_mount();
        }
        Ok(h)
    }

    /// The handle [`WardFs::io_handle`] serves a read or write with.
    fn find_io_handle(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        write: bool,
    ) -> Res<Arc<Handle>> {
        if !self.no_open {
            return self.handle(fh);
        }
        if fh.0 != 0 {
            // A created file's handle, unless its FLUSH ended it (see `flush`).
            if let Ok(h) = self.handle(fh) {
                return Ok(h);
            }
        }
        if write {
            if let Some(h) = self.implicit.get(ino.0) {
                return Ok(h);
            }
        }
        let i = self.inode(ino)?;
        if i.kind != FileType::RegularFile {
            return Err(Errno::EBADF);
        }
        if write {
            self.writable(i.zone)?;
        }
        let flags = if write {
            OFlags::WRONLY
        } else {
            OFlags::RDONLY
        };
        let file = match write {
            true => self.open_for_change(&i, flags)?,
            false => std::fs::File::from(self.reopen(&i, flags)?),
        };
        if !write {
            return Ok(Arc::new(Handle::new(
                i,
                Some(file),
                flags,
                WardFs::origin(req),
            )));
        }
        let st = node_io::stat(&file).map_err(errno)?;
        Ok(self.add_implicit(req, i, file, flags, &st))
    }

    /// Registers `file` (opened with `flags`, `st` its attributes) as the implicit writer of
    /// `inode`; the one registered first wins.
    fn add_implicit(
        &self,
        req: &Request,
        inode: Arc<Inode>,
        file: std::fs::File,
        flags: OFlags,
        st: &Stat,
    ) -> Arc<Handle> {
        let key = (st.st_dev, st.st_ino);
        self.implicit.get_or_add(inode.ino, || {
            self.zones
                .own()
                .write_pending(key.0, key.1, self.zones.node_vpath(&inode));
            Handle::implicit(inode.clone(), file, flags, WardFs::origin(req), key)
        })
    }

    /// Returns the inode's passthrough backing file, registering `open` as it when it has none.
    fn shared_backing(
        inode: &Inode,
        open: impl FnOnce() -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        let mut slot = inode.backing.lock().expect("not poisoned");
        if let Some(b) = &*slot {
            return Some(b.clone());
        }
        match open() {
            Ok(b) => {
                let b = Arc::new(b);
                *slot = Some(b.clone());
                Some(b)
            }
            Err(e) => {
                tracing::debug!(error = %e, "passthrough registration failed; serving I/O in the daemon");
                None
            }
        }
    }

    fn mark_dirty(&self, fh: u64) {
        if let Some(h) = self.handles.read().expect("not poisoned").get(&fh) {
            h.dirty.store(true, Ordering::Relaxed);
        }
    }
}

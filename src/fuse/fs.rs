//! The `fuser::Filesystem` implementation: the mount's side of every kernel request.
//!
//! Each handler decodes its request, hands it to the [`Tree`] that serves the inode (or the
//! open file) in one call, and replies with what that returns: [`Top`] for the top level and
//! the forks' directory, `SandboxTree` for a zone served from a sandbox, [`LocalTree`] for a
//! zone on this machine (`super::tree` says what each does). Which one is decided in one place,
//! [`WardFs::tree`] (by inode number) and [`WardFs::tree_fh`] (by file handle). The I/O modes
//! (which requests are answered `ENOSYS` once, and how) are `super::mode`'s.
//!
//! What stays here is the kernel's business around those calls: the echo's requests, answered
//! apart ([`WardFs::echoing`]), the snapshots `readdir` answers from, and turning each answer
//! into its reply.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, BackingId, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FopenFlags,
    Generation, INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use rustix::fs::FileType;

use super::echo::{Answer, Echoes};
use super::inodes::{Inode, Inodes, FORKS_INO, PROBE_INO, ROOT_INO};
use super::local_tree::LocalTree;
use super::mode::Modes;
use super::probe::Probe;
use super::top::Top;
use super::tree::{attr_of, fuse_kind, DirEntries, Entry, Opened, Res, SetAttr, Tree, WriteHow};
use crate::config::Transport;
use crate::core::node::{Caller, RenameMode};
use crate::core::{ZoneId, Zones};
use crate::state::{Origin, Via};

pub use super::tree::TTL;

/// An open directory: a snapshot of its entries, taken by the first `readdir` (and again when the
/// caller rewinds to offset 0). Not at opendir: the kernel serves a cached listing without asking
/// (`FOPEN_CACHE_DIR`), and then the directory is never read. Only when a zone is served from
/// a sandbox: otherwise the kernel sends no `OPENDIR` at all ([`Modes::no_opendir`]).
struct DirHandle {
    ino: u64,
    entries: Mutex<Option<Arc<DirEntries>>>,
}

/// The mounted filesystem.
pub struct WardFs {
    pub(super) inodes: Arc<Inodes>,
    modes: Arc<Modes>,
    top: Top,
    local: LocalTree,
    dirs: Mutex<HashMap<u64, Arc<DirHandle>>>,
    next_dir: AtomicU64,
    /// The snapshots `readdir` answers from without an open directory, by directory inode, from
    /// offset 0 until the end is sent.
    listings: Mutex<HashMap<u64, Arc<DirEntries>>>,
    /// Extended attributes served (`[fuse] xattrs`); else every xattr request is `ENOSYS`,
    /// which the kernel remembers for the mount.
    xattrs: bool,
    /// The echo of changes made outside the mount, whose requests are answered apart
    /// ([`WardFs::echoing`]).
    echo: Arc<Echoes>,
    /// The daemon's own open right after mounting ([`super::probe`]).
    pub(super) probe: Arc<Probe>,
}

impl WardFs {
    /// The file system over `zones`; `io` is each zone's I/O mode, by zone index; `fuse` says
    /// whether to ask for FUSE over io_uring, to read ahead of walks and to serve xattrs;
    /// `echo`, the echo whose requests to answer apart.
    pub fn new(
        zones: Arc<Zones>,
        io: [crate::config::IoMode; 2],
        fuse: crate::config::FuseSection,
        echo: Arc<Echoes>,
    ) -> std::io::Result<WardFs> {
        let inodes = Arc::new(Inodes::new());
        let all_local = ZoneId::ALL.iter().all(|id| zones.local(*id).is_ok());
        let all_writable = ZoneId::ALL
            .iter()
            .all(|id| zones.node_writable(*id).is_ok());
        let want_uring = fuse.transport == Transport::IoUring;
        let modes = Arc::new(Modes::new(io, all_local, all_writable, want_uring));
        for id in ZoneId::ALL {
            if let Some(root) = zones.node_zone_root(id) {
                let (fd, st) = root?;
                inodes.add_zone_root(id, fd, &st);
            }
        }
        let local = LocalTree::new(zones.clone(), inodes.clone(), modes.clone(), fuse.prefetch)?;
        Ok(WardFs {
            top: Top::new(zones, inodes.clone()),
            local,
            inodes,
            modes,
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            listings: Mutex::new(HashMap::new()),
            xattrs: fuse.xattrs,
            echo,
            probe: Arc::default(),
        })
    }

    /// The tree serving the inode `ino`: the one place that chooses.
    fn tree(&self, ino: u64) -> &dyn Tree {
        if Top::owns(ino) {
            return &self.top;
        }
        match self.top.sandbox(ino) {
            Some(t) => t,
            None => &self.local,
        }
    }

    /// The tree holding the open file `fh`.
    fn tree_fh(&self, fh: u64) -> &dyn Tree {
        match self.top.sandbox_fh(fh) {
            Some(t) => t,
            None => &self.local,
        }
    }

    /// True when `a` and `b` are served by the same tree.
    fn same_tree(&self, a: u64, b: u64) -> bool {
        std::ptr::addr_eq(self.tree(a), self.tree(b))
    }

    fn origin(req: &Request) -> Origin {
        Origin {
            via: Via::Fuse,
            pid: Some(req.pid()),
            uid: Some(req.uid()),
        }
    }

    /// The caller of a request, as the trees take it.
    fn caller(req: &Request) -> Caller {
        Caller {
            origin: WardFs::origin(req),
            uid: req.uid(),
            gid: req.gid(),
        }
    }

    /// Lists directory `ino`.
    fn list_dir(&self, ino: u64) -> Res<DirEntries> {
        self.tree(ino).list(ino)
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

    /// Adds the entry `name` of directory `dir` (at `offset`) to a `readdirplus` reply; true when
    /// the reply is full. `.` and `..` are answered with attributes only (the kernel takes no
    /// reference for them); a name whose inode the kernel holds already, with the name alone;
    /// any other is looked up, and its reference given back if it does not fit.
    fn add_plus(
        &self,
        reply: &mut ReplyDirectoryPlus,
        dir: u64,
        (name, kind, known): (&OsStr, FileType, u64),
        offset: u64,
    ) -> Option<bool> {
        if name == "." || name == ".." {
            let target = if name == "." { dir } else { ROOT_INO };
            let e = self.tree(target).getattr(target, None).ok()?;
            return Some(reply.add(INodeNo(target), offset, name, &TTL, &e.attr, Generation(0)));
        }
        let t = self.tree(dir);
        if t.held(known) {
            // The kernel holds this inode already (a walk that looked names up before it listed
            // their directory, as `git status` does), and keeps its attributes, which every
            // change through the mount or beside it invalidates: no stat, no new reference.
            return Some(reply.add_name_only(INodeNo(known), offset, name, fuse_kind(kind)));
        }
        let e = t.lookup(dir, name).ok()?; // removed since the listing
        let full = reply.add(
            e.attr.ino,
            offset,
            name,
            &e.entry_ttl,
            &e.attr,
            Generation(0),
        );
        if full {
            // Not sent: give the reference back.
            self.tree(e.attr.ino.0).forget(e.attr.ino.0, 1);
        }
        Some(full)
    }

    /// How a rename's flags ask to treat the destination.
    fn rename_mode(flags: RenameFlags) -> Res<RenameMode> {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            Err(Errno::EINVAL)
        } else if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            Ok(RenameMode::Exchange)
        } else if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            Ok(RenameMode::NoReplace)
        } else {
            Ok(RenameMode::Replace)
        }
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

/// Replies to a request that made an entry (`mkdir`, `symlink`, `mknod`, `link`, `lookup`).
fn reply_entry(reply: ReplyEntry, res: Res<Entry>) {
    reply!(reply, res, |e| reply.entry_with_ttls(
        &e.attr_ttl,
        &e.entry_ttl,
        &e.attr,
        Generation(0)
    ))
}

/// Replies to an `OPEN` with the file the tree opened.
fn reply_opened(reply: ReplyOpen, res: Res<Opened>) {
    match res {
        Err(e) => reply.error(e),
        Ok(Opened {
            fh,
            flags,
            backing: Some(b),
        }) => reply.opened_passthrough(FileHandle(fh), flags, &b),
        Ok(o) => reply.opened(FileHandle(o.fh), o.flags),
    }
}

/// Replies to a `CREATE` with the entry made and the file opened.
fn reply_created(reply: ReplyCreate, res: Res<(Entry, Opened)>) {
    let (e, o) = match res {
        Ok(made) => made,
        Err(e) => return reply.error(e),
    };
    let fh = FileHandle(o.fh);
    match &o.backing {
        Some(b) => reply.created_passthrough(&e.attr_ttl, &e.attr, Generation(0), fh, o.flags, b),
        None => reply.created(&e.attr_ttl, &e.attr, Generation(0), fh, o.flags),
    }
}

/// Replies to `GETXATTR` or `LISTXATTR` with what `fill` puts in a buffer of `size` bytes: the
/// size it needs when `size` is 0, else the bytes.
fn reply_xattr(reply: ReplyXattr, size: u32, fill: impl FnOnce(&mut [u8]) -> Res<usize>) {
    let mut buf = vec![0u8; size as usize];
    match fill(&mut buf) {
        Err(e) => reply.error(e),
        Ok(n) if size == 0 => reply.size(n as u32),
        Ok(n) => reply.data(&buf[..n.min(buf.len())]),
    }
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
        let dir = self.local.inode(parent.0).ok()?;
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
        if answer != Answer::Absent && self.local.there(parent.0, name) {
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
                    .and_then(|dir| self.local.lookup_inode(dir, &name));
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
        self.local.attr(ino).is_ok_and(|(_, st)| st.st_nlink > 0)
    }

    /// The echo's `mkdir`, `symlink` or `mknod` of `name` in `parent`: the entry that is there.
    fn echo_entry(&self, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply!(reply, self.local.lookup_inode(parent.0, name), |(
            _,
            attr,
        )| {
            reply.entry(&TTL, &attr, Generation(0))
        })
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
        let (inode, attr) = match self.local.lookup_inode(parent.0, name) {
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
        match self
            .local
            .inode(ino.0)
            .ok()
            .and_then(|i| WardFs::echo_backing(&i))
        {
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
        if self.local.there(parent.0, name) {
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
        if self.local.there(parent.0, name) || !self.local.there(newparent.0, newname) {
            return reply.error(Errno::EBUSY);
        }
        reply.ok()
    }

    /// The echo's `setattr` (a truncation to the size the file has, times set to what they
    /// are): the attributes the file has.
    fn echo_attr(&self, ino: INodeNo, reply: ReplyAttr) {
        let res = self.local.attr(ino.0).map(|(i, st)| attr_of(i.ino, &st));
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
            ..self.top.attr(ROOT_INO)
        }
    }
}

impl fuser::Filesystem for WardFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let uring = self.modes.negotiate(config);
        tracing::info!(
            passthrough = self.modes.passthrough(),
            transport = if uring { "io_uring" } else { "/dev/fuse" },
            xattrs = self.xattrs,
            "FUSE session started; file I/O uses {}",
            self.modes.describe()
        );
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT_INO && self.modes.no_open() && self.probe.asks(req.pid(), name) {
            let attr = self.top.attr(PROBE_INO);
            return reply.entry(&Duration::ZERO, &attr, Generation(0));
        }
        if let Some(answer) = self.echo_asks(req, parent, name) {
            return self.echo_lookup(parent, name, answer, reply);
        }
        let t = self.tree(parent.0);
        match t.lookup(parent.0, name) {
            Err(Errno::ENOENT) => match t.negative(parent.0) {
                Some(e) => reply_entry(reply, Ok(e)),
                None => reply.error(Errno::ENOENT),
            },
            found => reply_entry(reply, found),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.tree(ino.0).forget(ino.0, nlookup)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let res = self.tree(ino.0).getattr(ino.0, fh.map(|f| f.0));
        reply!(reply, res, |e| reply.attr(&e.attr_ttl, &e.attr))
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
        let change = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh: fh.map(|f| f.0),
        };
        let res = self
            .tree(ino.0)
            .setattr(&WardFs::caller(req), ino.0, change);
        reply!(reply, res, |e| reply.attr(&e.attr_ttl, &e.attr))
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        reply!(reply, self.tree(ino.0).readlink(ino.0), |t| reply.data(&t))
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
        let mode = (mode & !0o7777) | (mode & !umask & 0o7777);
        let who = WardFs::caller(req);
        reply_entry(
            reply,
            self.tree(parent.0).mknod(&who, parent.0, name, mode, rdev),
        )
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
        let who = WardFs::caller(req);
        reply_entry(
            reply,
            self.tree(parent.0)
                .mkdir(&who, parent.0, name, mode & !umask),
        )
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.echoing(req) {
            return self.echo_removed(parent, name, reply);
        }
        let res = self
            .tree(parent.0)
            .remove(&WardFs::caller(req), parent.0, name, false);
        reply!(reply, res, |()| reply.ok())
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if self.echoing(req) {
            return self.echo_removed(parent, name, reply);
        }
        let res = self
            .tree(parent.0)
            .remove(&WardFs::caller(req), parent.0, name, true);
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
        let who = WardFs::caller(req);
        reply_entry(
            reply,
            self.tree(parent.0)
                .symlink(&who, parent.0, link_name, target),
        )
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
        // Into or out of a virtual directory: the top level's tree refuses it.
        let tree = match (Top::owns(parent.0), Top::owns(newparent.0)) {
            (false, false) if !self.same_tree(parent.0, newparent.0) => {
                return reply.error(Errno::EXDEV)
            }
            (false, false) => self.tree(parent.0),
            _ => &self.top,
        };
        let res = WardFs::rename_mode(flags).and_then(|mode| {
            let who = WardFs::caller(req);
            tree.rename(&who, (parent.0, name), (newparent.0, newname), mode)
        });
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
        let res = if self.same_tree(ino.0, newparent.0) || Top::owns(newparent.0) {
            let who = WardFs::caller(req);
            self.tree(newparent.0)
                .link(&who, ino.0, newparent.0, newname)
        } else {
            Err(Errno::EPERM)
        };
        reply_entry(reply, res)
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.modes.no_open() {
            // Once: the kernel then opens every file without asking (see `super::mode`).
            return reply.error(Errno::ENOSYS);
        }
        if self.echoing(req) {
            return self.echo_open(ino, reply);
        }
        let register = |fd: std::os::fd::BorrowedFd<'_>| reply.open_backing(fd);
        let who = WardFs::caller(req);
        let res = self.tree(ino.0).open(&who, ino.0, flags.0, &register);
        reply_opened(reply, res)
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let who = WardFs::caller(req);
        // Read straight into the reply (over io_uring: the ring entry the kernel copies from).
        let tree = self.tree_fh(fh.0);
        reply.data_from(size as usize, |buf| {
            tree.read(&who, ino.0, fh.0, offset, buf)
        })
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let how = WriteHow {
            append: flags.0 & libc::O_APPEND != 0,
            // Set only with FUSE_HANDLE_KILLPRIV_V2 (see `super::mode`), for a writer without
            // CAP_FSETID.
            kill_suidgid: write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
        };
        let who = WardFs::caller(req);
        let res = self
            .tree_fh(fh.0)
            .write(&who, ino.0, fh.0, offset, data, how);
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
        if self.modes.no_open() {
            // Once: the kernel then sends no FLUSH at `close` (implicit writers end when idle).
            return reply.error(Errno::ENOSYS);
        }
        reply!(reply, self.tree_fh(fh.0).flush(fh.0), |()| reply.ok())
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
        reply!(reply, self.tree_fh(fh.0).release(fh.0), |()| reply.ok())
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let who = WardFs::caller(req);
        let res = self.tree_fh(fh.0).fsync(&who, ino.0, fh.0, datasync);
        reply!(reply, res, |()| reply.ok())
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.modes.no_opendir() {
            return reply.error(Errno::ENOSYS);
        }
        let sandbox = self.top.sandbox(ino.0).is_some();
        if !sandbox && !Top::owns(ino.0) {
            if let Err(e) = self.local.inode(ino.0) {
                return reply.error(e);
            }
        }
        let fh = self.next_dir.fetch_add(1, Ordering::Relaxed);
        self.dirs.lock().expect("not poisoned").insert(
            fh,
            Arc::new(DirHandle {
                ino: ino.0,
                entries: Mutex::new(None),
            }),
        );
        let refreshed = sandbox || ino.0 == FORKS_INO;
        reply.opened(FileHandle(fh), Modes::opened_dir(refreshed));
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
            let entry = (name.as_os_str(), *kind, *known);
            if self.add_plus(&mut reply, ino.0, entry, (i + 1) as u64) == Some(true) {
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
        reply!(reply, self.tree(ino.0).fsync_dir(ino.0), |()| reply.ok())
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        reply!(reply, self.tree(ino.0).statfs(ino.0), |s| reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize
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
        let who = WardFs::caller(req);
        let res = self
            .tree(ino.0)
            .set_xattr(&who, ino.0, name, Some((value, flags)));
        reply!(reply, res, |()| reply.ok())
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let t = self.tree(ino.0);
        reply_xattr(reply, size, |b| t.get_xattr(ino.0, name, b))
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let t = self.tree(ino.0);
        reply_xattr(reply, size, |b| t.list_xattr(ino.0, b))
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let who = WardFs::caller(req);
        let res = self.tree(ino.0).set_xattr(&who, ino.0, name, None);
        reply!(reply, res, |()| reply.ok())
    }

    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // The kernel checks permissions itself (default_permissions); only read-only zones refuse
        // write access here.
        let write = mask.contains(AccessFlags::W_OK);
        reply!(reply, self.tree(ino.0).access(ino.0, write), |()| reply
            .ok())
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
        let register = |fd: std::os::fd::BorrowedFd<'_>| reply.open_backing(fd);
        let who = WardFs::caller(req);
        let res = self
            .tree(parent.0)
            .create(&who, parent.0, name, mode & !umask, flags, &register);
        reply_created(reply, res)
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
        let who = WardFs::caller(req);
        let res = self
            .tree_fh(fh.0)
            .allocate(&who, ino.0, fh.0, (offset, length), mode);
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
        let who = WardFs::caller(req);
        let res = self.tree_fh(fh.0).seek(&who, ino.0, fh.0, offset, whence);
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
        let sandbox = |fh: FileHandle| self.top.sandbox_fh(fh.0).is_some();
        if sandbox(fh_in) || sandbox(fh_out) {
            return reply.error(Errno::EXDEV);
        }
        let who = WardFs::caller(req);
        let from = (ino_in.0, fh_in.0, offset_in);
        let res = self
            .local
            .copy_range(&who, from, (ino_out.0, fh_out.0, offset_out), len);
        reply!(reply, res, |n| reply.written(n))
    }
}

impl Drop for WardFs {
    /// Journals what the implicit writers wrote (the kernel sends no `RELEASE` for them).
    fn drop(&mut self) {
        self.local.end_implicit_writers();
    }
}

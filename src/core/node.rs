//! Inode-level operations on local zones: what the mount asks of the core.
//!
//! The mount (`src/fuse`) keeps only the kernel's business: inode numbers and lookup counts,
//! TTLs, passthrough registration, invalidation. It holds one [`Node`] (an `O_PATH` descriptor)
//! per backing inode the kernel knows, and every system call on backing files happens here,
//! beneath those descriptors. Every change passes the same rules as the API's path operations in
//! [`super::ops`], each rule in one function: [`Zones::check_writable`] (read-only zones),
//! [`Zones::node_break_links`] (the hard-link rule, [`super::LocalZone::breaks_links`]: a file
//! with another link gets an inode of its own before its first change), [`super::PathLocks`]
//! (one writer per path at a time), and the journal record ([`Zones::record_change`]). Each
//! change takes a callback run right after its system call and before the journal record: the
//! mount notes there that the change is its own, before the watcher can see it. Errors stay
//! kernel errnos (`rustix::io::Errno`); a core [`super::FsError`] becomes one through
//! [`super::FsError::errno`].
//!
//! May not import `fuser` or anything from `src/fuse`: the decoding of requests and the shape of
//! replies are the mount's.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat, StatVfs, Timespec, Timestamps};
use rustix::io::Errno;

use super::path::{VPath, ZoneId};
use super::{Zone, Zones};
use crate::state::Origin;

/// The result of a node operation: a kernel errno on failure.
pub type NodeResult<T> = Result<T, Errno>;

/// A backing inode of a local zone, and how it is reached again.
///
/// Directories, and anything with more than one link, are *pinned*: an `O_PATH` descriptor that
/// follows them through renames. A regular file or symlink with one link is held by *name*
/// (and so is a regular file with more, in a zone that breaks links: its first change makes its
/// name hold a copy of its own, [`Zones::node_break_links`], which the node then follows):
/// its parent (a pinned directory node) and its name there, and reopened beneath the parent's
/// descriptor when an operation needs it, checked against its backing `(st_dev, st_ino)`
/// (`ESTALE` when another file has the name now). So a tree larger than the process's
/// descriptor limit can stay in the kernel's cache whole: only its directories cost a
/// descriptor. A node held by name is pinned ([`Node::pin`]) before the mount removes or
/// replaces its name, and when it gets a second link, so it stays reachable as long as it lives.
#[derive(Debug)]
pub struct Node {
    pub zone: ZoneId,
    pub kind: FileType,
    pub dev: u64,
    /// The backing inode number (changed only when a copy of its own takes the node's name).
    ino: AtomicU64,
    fd: OnceLock<OwnedFd>,
    /// Where a node not pinned lives: its parent directory node and its name there.
    at: Mutex<Option<(Arc<Node>, OsString)>>,
    /// The other names it was looked up under while they still named its file (hard links),
    /// through which a change could come too (see [`Node::has_several_names`]).
    other_names: Mutex<OtherNames>,
    /// A directory's path, read once and kept until a rename ([`super::dir_paths`]).
    path: super::dir_paths::Remembered,
}

/// The names a node was known by besides its place ([`Node::moved`]): at most
/// [`OtherNames::MAX`] kept, past which the node counts as having several names for good.
#[derive(Debug, Default)]
struct OtherNames {
    names: Vec<(Arc<Node>, OsString)>,
    overflowed: bool,
}

impl OtherNames {
    /// Names kept per node; a file linked under more is rare, and then never changed in place.
    const MAX: usize = 8;

    fn add(&mut self, dir: &Arc<Node>, name: &OsStr) {
        if self.find(dir, name).is_some() {
            return;
        }
        if self.names.len() == OtherNames::MAX {
            self.overflowed = true;
            return;
        }
        self.names.push((dir.clone(), name.to_owned()));
    }

    fn drop_name(&mut self, dir: &Arc<Node>, name: &OsStr) {
        if let Some(i) = self.find(dir, name) {
            self.names.swap_remove(i);
        }
    }

    fn find(&self, dir: &Arc<Node>, name: &OsStr) -> Option<usize> {
        self.names
            .iter()
            .position(|(d, n)| d.key() == dir.key() && n.as_os_str() == name)
    }
}

/// A node's descriptor: its pinned one, or one opened for the operation.
#[derive(Debug)]
pub enum NodeFd<'a> {
    Pinned(BorrowedFd<'a>),
    Opened(OwnedFd),
}

impl AsFd for NodeFd<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            NodeFd::Pinned(fd) => *fd,
            NodeFd::Opened(fd) => fd.as_fd(),
        }
    }
}

/// A looked-up file held open until its node is in the mount's inode table
/// ([`Zones::node_lookup`]). A node held by name keeps no descriptor, and the table takes a
/// live number it already holds for the same file (numbers go by backing inode): were the file
/// replaced beside the mount between the lookup and the table (an API write renames a new file
/// over its name), the backing filesystem could give its inode number to a file made meanwhile
/// (ext4 does, at once), whose node the stale lookup would then move to the old name, every
/// call on it failing with `ESTALE`. While this is open the number stays the looked-up file's.
#[derive(Debug)]
#[must_use = "held until the node is in the inode table"]
pub struct Held {
    _fd: Option<OwnedFd>,
}

/// Returns `/proc/self/fd/N`, which reopens the backing file with new flags.
pub fn proc_path(fd: &impl AsFd) -> String {
    format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd())
}

/// The process's `/proc/self/fd` directory, opened once: a descriptor's entry there is then a
/// one-component lookup beneath it (`proc_entry`), not a walk from `/` through `self` (about
/// 1.5 µs less per call, paid several times by every change through the mount).
fn proc_fds() -> Option<BorrowedFd<'static>> {
    static FDS: OnceLock<Option<OwnedFd>> = OnceLock::new();
    FDS.get_or_init(|| {
        rustix::fs::open(
            "/proc/self/fd",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()
    })
    .as_ref()
    .map(|fd| fd.as_fd())
}

/// The entry of `fd` in `/proc/self/fd` (a magic link to its file): the directory and the name
/// to resolve beneath it, or the whole path from `/` when the directory could not be opened.
fn proc_entry(fd: &impl AsFd) -> (BorrowedFd<'static>, String) {
    let n = fd.as_fd().as_raw_fd();
    match proc_fds() {
        Some(dir) => (dir, n.to_string()),
        None => (rustix::fs::CWD, format!("/proc/self/fd/{n}")),
    }
}

/// Opens the file of `fd` (an `O_PATH` descriptor, say) again with `flags`.
pub fn reopen(fd: &impl AsFd, flags: OFlags) -> NodeResult<OwnedFd> {
    let (dir, name) = proc_entry(fd);
    rustix::fs::openat(dir, name.as_str(), flags | OFlags::CLOEXEC, Mode::empty())
}

/// The path the kernel gives the file of `fd` (deleted ones end in ` (deleted)`).
fn path_of_fd(fd: &impl AsFd) -> NodeResult<std::path::PathBuf> {
    let (dir, name) = proc_entry(fd);
    let target = rustix::fs::readlinkat(dir, name.as_str(), Vec::new())?;
    Ok(std::path::PathBuf::from(OsString::from_vec(
        target.into_bytes(),
    )))
}

/// Sets the mode of the file of `fd` (an `O_PATH` descriptor): `fchmodat2` on the descriptor
/// itself (Linux 6.6 and later), else through its `/proc/self/fd` entry.
fn chmod_fd(fd: &impl AsFd, mode: u32) -> NodeResult<()> {
    // SAFETY: fchmodat2 reads the empty C string and changes only the file's mode.
    let done = unsafe {
        libc::syscall(
            libc::SYS_fchmodat2,
            fd.as_fd().as_raw_fd(),
            c"".as_ptr(),
            mode as libc::c_uint,
            libc::AT_EMPTY_PATH,
        )
    };
    if done == 0 {
        return Ok(());
    }
    let e = Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO);
    if e != Errno::NOSYS && e != Errno::INVAL {
        return Err(e);
    }
    let (dir, name) = proc_entry(fd);
    rustix::fs::chmodat(
        dir,
        name.as_str(),
        Mode::from_raw_mode(mode),
        AtFlags::empty(),
    )
}

impl Node {
    /// A pinned node for `fd`, whose stat is `st`.
    pub fn new(zone: ZoneId, fd: OwnedFd, st: &Stat) -> Node {
        Node {
            zone,
            kind: FileType::from_raw_mode(st.st_mode),
            dev: st.st_dev,
            ino: AtomicU64::new(st.st_ino),
            fd: OnceLock::from(fd),
            at: Mutex::new(None),
            other_names: Mutex::default(),
            path: Default::default(),
        }
    }

    /// A node held by its name in `dir` (whose stat is `st`; see [`Node`]).
    pub(crate) fn named(dir: &Arc<Node>, name: &OsStr, st: &Stat) -> Node {
        Node {
            zone: dir.zone,
            kind: FileType::from_raw_mode(st.st_mode),
            dev: st.st_dev,
            ino: AtomicU64::new(st.st_ino),
            fd: OnceLock::new(),
            at: Mutex::new(Some((dir.clone(), name.to_owned()))),
            other_names: Mutex::default(),
            path: Default::default(),
        }
    }

    /// True when the node holds a descriptor.
    pub fn is_pinned(&self) -> bool {
        self.fd.get().is_some()
    }

    fn place(&self) -> Option<(Arc<Node>, OsString)> {
        self.at.lock().expect("not poisoned").clone()
    }

    /// The directory a node held by name lives in (`None` when pinned).
    pub fn parent(&self) -> Option<Arc<Node>> {
        self.at
            .lock()
            .expect("not poisoned")
            .as_ref()
            .map(|(d, _)| d.clone())
    }

    /// The backing inode number.
    pub fn ino(&self) -> u64 {
        self.ino.load(Ordering::Acquire)
    }

    /// The backing `(st_dev, st_ino)`.
    pub fn key(&self) -> BackingKey {
        (self.dev, self.ino())
    }

    fn check(&self, st: &Stat) -> NodeResult<()> {
        if (st.st_dev, st.st_ino) == self.key() {
            Ok(())
        } else {
            Err(Errno::STALE)
        }
    }

    /// The node's descriptor: the pinned one, or an `O_PATH` one opened beneath its parent now.
    pub fn fd(&self) -> NodeResult<NodeFd<'_>> {
        if let Some(fd) = self.fd.get() {
            return Ok(NodeFd::Pinned(fd.as_fd()));
        }
        let Some((dir, name)) = self.place() else {
            return Err(Errno::STALE);
        };
        let fd = rustix::fs::openat(
            dir.fd()?,
            &name,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        self.check(&rustix::fs::fstat(&fd)?)?;
        Ok(NodeFd::Opened(fd))
    }

    /// Pins the node (see [`Node`]); true when it was not pinned before.
    pub fn pin(&self) -> NodeResult<bool> {
        if self.is_pinned() {
            return Ok(false);
        }
        let NodeFd::Opened(fd) = self.fd()? else {
            return Ok(false);
        };
        let newly = self.fd.set(fd).is_ok();
        *self.at.lock().expect("not poisoned") = None;
        Ok(newly)
    }

    /// Notes that a node held by name is now `name` in `dir` (a rename, or a lookup under
    /// another name); pinned nodes follow by themselves. When the name it had still names it,
    /// `name` is a second one (a hard link): the old one is kept among its other names
    /// ([`Node::has_several_names`]).
    pub fn moved(&self, dir: &Arc<Node>, name: &OsStr) {
        let mut at = self.at.lock().expect("not poisoned");
        if self.is_pinned() {
            return;
        }
        if let Some((old_dir, old_name)) = at.as_ref() {
            let same = old_dir.key() == dir.key() && old_name.as_os_str() == name;
            let second = !same && self.still_at(old_dir, old_name);
            let mut others = self.other_names.lock().expect("not poisoned");
            if second {
                others.add(old_dir, old_name);
            }
            others.drop_name(dir, name);
            *at = Some((dir.clone(), name.to_owned()));
        }
    }

    /// True when `name` in `dir` names this node's backing file.
    fn still_at(&self, dir: &Node, name: &OsStr) -> bool {
        dir.fd()
            .and_then(|fd| rustix::fs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW))
            .is_ok_and(|st| self.check(&st).is_ok())
    }

    /// True when the node was looked up under another name than its place that still names
    /// its file (see [`Node::moved`]): a change could come through either. Names replaced or
    /// removed since no longer count.
    pub fn has_several_names(&self) -> bool {
        let mut others = self.other_names.lock().expect("not poisoned");
        others.names.retain(|(dir, name)| self.still_at(dir, name));
        others.overflowed || !others.names.is_empty()
    }

    /// Follows a copy of its own ([`super::copy_up`]) that took the node's name: `st` is its
    /// stat.
    fn follow_copy(&self, st: &Stat) {
        self.ino.store(st.st_ino, Ordering::Release);
    }

    /// The node's current attributes (symlinks not followed).
    pub fn stat(&self) -> NodeResult<Stat> {
        if let Some(fd) = self.fd.get() {
            return rustix::fs::statat(fd, "", AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW);
        }
        let Some((dir, name)) = self.place() else {
            return Err(Errno::STALE);
        };
        let st = rustix::fs::statat(dir.fd()?, &name, AtFlags::SYMLINK_NOFOLLOW)?;
        self.check(&st)?;
        Ok(st)
    }
}

/// Who asks for a change: the journal names them, and what they create belongs to them.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    pub origin: Origin,
    pub uid: u32,
    pub gid: u32,
}

/// A time to set: now, or a given moment.
#[derive(Debug, Clone, Copy)]
pub enum SetTime {
    Now,
    At(SystemTime),
}

/// The attributes a `setattr` changes (`None`: left alone).
#[derive(Debug, Default, Clone, Copy)]
pub struct AttrChange {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
}

/// How `rename` treats the destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RenameMode {
    Replace,
    NoReplace,
    Exchange,
}

/// A directory entry: name, type, backing inode number.
pub type NodeEntry = (OsString, FileType, u64);

/// The backing `(st_dev, st_ino)` of an inode.
pub type BackingKey = (u64, u64);

fn is_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| rustix::process::geteuid().is_root())
}

/// Switches this thread's filesystem uid/gid to the caller's while it creates a node, so new
/// nodes belong to whoever made them (the daemon may run as root).
struct AsCaller {
    switched: bool,
}

impl AsCaller {
    fn new(who: &Caller) -> AsCaller {
        if !is_root() || who.uid == 0 {
            return AsCaller { switched: false };
        }
        // SAFETY: setfsuid/setfsgid only change this thread's filesystem credentials.
        unsafe {
            libc::setfsgid(who.gid);
            libc::setfsuid(who.uid);
        }
        AsCaller { switched: true }
    }
}

impl Drop for AsCaller {
    fn drop(&mut self) {
        if self.switched {
            // SAFETY: as above; back to root.
            unsafe {
                libc::setfsuid(0);
                libc::setfsgid(0);
            }
        }
    }
}

/// Retries `f` while the process is out of descriptors, calling `press` (which asks the mount to
/// evict idle nodes) and waiting up to a second in all, rather than failing on a busy machine.
fn with_fds<T>(press: &dyn Fn(), mut f: impl FnMut() -> NodeResult<T>) -> NodeResult<T> {
    let mut waited = 0;
    loop {
        match f() {
            Err(Errno::MFILE | Errno::NFILE) if waited < 100 => {
                waited += 1;
                press();
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

fn timespec(t: Option<SetTime>) -> Timespec {
    match t {
        None => Timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(SetTime::Now) => Timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(SetTime::At(t)) => {
            let (sec, nsec) = match t.duration_since(UNIX_EPOCH) {
                Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
                Err(e) => {
                    let d = e.duration();
                    let mut sec = -(d.as_secs() as i64);
                    let mut nsec = -(d.subsec_nanos() as i64);
                    if nsec < 0 {
                        sec -= 1;
                        nsec += 1_000_000_000;
                    }
                    (sec, nsec)
                }
            };
            Timespec {
                tv_sec: sec,
                tv_nsec: nsec,
            }
        }
    }
}

/// The backing key of `name` in `dir`, if it exists.
fn key_at(dir: &Node, name: &OsStr) -> Option<BackingKey> {
    rustix::fs::statat(dir.fd().ok()?, name, AtFlags::SYMLINK_NOFOLLOW)
        .ok()
        .map(|st| (st.st_dev, st.st_ino))
}

impl Zones {
    /// Fails with `EROFS` when `zone` refuses changes (the rule the API applies too, through
    /// [`Zones::check_writable`]).
    pub fn node_writable(&self, zone: ZoneId) -> NodeResult<()> {
        self.check_writable(&VPath::root(zone))
            .map_err(|e| Errno::from_raw_os_error(e.errno()))
    }

    /// A new descriptor of zone `zone`'s root, for the mount's root node (None: not a local zone).
    pub fn node_zone_root(&self, zone: ZoneId) -> Option<NodeResult<(OwnedFd, Stat)>> {
        let Zone::Local(z) = self.zone(zone) else {
            return None;
        };
        Some(rustix::io::dup(z.dirfd()).and_then(|fd| {
            let st = rustix::fs::fstat(&fd)?;
            Ok((fd, st))
        }))
    }

    /// The virtual path a node has now: from the kernel's view of its descriptor when pinned,
    /// else its parent's path and its name.
    pub fn node_vpath(&self, node: &Node) -> Option<VPath> {
        if !node.is_pinned() {
            let (dir, name) = node.place()?;
            return self.child_vpath(&dir, &name);
        }
        let dir = node.kind == FileType::Directory;
        let reading = if dir {
            match self.dir_paths.get(&node.path) {
                Ok(vp) => return Some(vp),
                Err(reading) => Some(reading),
            }
        } else {
            None
        };
        let Zone::Local(z) = self.zone(node.zone) else {
            return None;
        };
        let real = path_of_fd(&node.fd().ok()?).ok()?;
        let rel = real.strip_prefix(z.root()).ok()?;
        let vp = VPath::new(node.zone, rel.to_str()?).ok()?;
        if let Some(reading) = reading {
            self.dir_paths.put(&node.path, reading, &vp);
        }
        Some(vp)
    }

    fn child_vpath(&self, dir: &Node, name: &OsStr) -> Option<VPath> {
        self.node_vpath(dir)
            .and_then(|p| p.child(&name.to_string_lossy()).ok())
    }

    /// True when a change to the file `st` of `zone` must first give it an inode of its own
    /// ([`super::LocalZone::breaks_links`]).
    fn breaks_links(&self, zone: ZoneId, st: &Stat) -> bool {
        matches!(self.zone(zone), Zone::Local(z) if z.breaks_links(st))
    }

    /// The hard-link rule, before `op` changes `node` in place (opens it for writing, truncates
    /// it, changes its mode, owner, times or xattrs): a regular file with another link, in a
    /// zone that does not allow hard links, first gets an inode of its own under its name
    /// ([`super::copy_up`], under the path's lock), which the node then follows; the other
    /// links, one of which may lie outside the zone, keep the file as it was. `broke` is given
    /// the backing key the node had, after the copy took its name. Refused with `EACCES` (and a
    /// log line naming the file and the rule) when the node has no name to give the copy, or
    /// was looked up under several (the change could come through either).
    pub fn node_break_links(
        &self,
        node: &Node,
        op: &str,
        broke: impl FnOnce(BackingKey),
    ) -> NodeResult<()> {
        if node.kind != FileType::RegularFile {
            return Ok(());
        }
        let st = node.stat()?;
        if !self.breaks_links(node.zone, &st) {
            return Ok(());
        }
        let vp = self.node_vpath(node);
        let place = node.place().filter(|_| !node.has_several_names());
        let Some((dir, name)) = place else {
            let why = if node.has_several_names() {
                "the mount knows it under more than one name, so a copy of its own could take \
                 the wrong one"
            } else {
                "it has no name left in the zone to give a copy of its own"
            };
            return Err(self.links_refused(node.zone, &st, vp.as_ref(), op, why));
        };
        let old = node.key();
        {
            let _lock = vp.as_ref().map(|v| self.locks.lock(v));
            let copy = self.copy_up_at(&dir.fd()?, &name, &st, vp.as_ref(), op)?;
            node.follow_copy(&copy);
        }
        broke(old);
        Ok(())
    }

    /// Gives `name` in `dir` (the file `st`, path `vp`) a copy of its own before `op` changes
    /// it (the caller holds the path's lock), noted as the mount's own change; returns the
    /// copy's stat.
    fn copy_up_at(
        &self,
        dir: &impl AsFd,
        name: &OsStr,
        st: &Stat,
        vp: Option<&VPath>,
        op: &str,
    ) -> NodeResult<Stat> {
        let copy = super::copy_up::copy_up(dir.as_fd(), name, st)?;
        self.own().note_entry(dir, Some(name));
        let path = vp.map(|v| v.to_string()).unwrap_or_default();
        tracing::info!(
            path,
            op,
            links = st.st_nlink,
            "gave a hard-linked file a copy of its own before changing it; its other links keep \
             the old contents"
        );
        Ok(copy)
    }

    /// `EACCES` for a change `op` the hard-link rule refuses, logged with the file, the reason
    /// `why` and the config key.
    fn links_refused(
        &self,
        zone: ZoneId,
        st: &Stat,
        vp: Option<&VPath>,
        op: &str,
        why: &str,
    ) -> Errno {
        let path = vp.map(|v| v.to_string()).unwrap_or_default();
        tracing::warn!(
            path,
            op,
            "refused through the mount: the file has {} hard links (one may lie outside the \
             zone) and {why}; replace it by a rename, or set zones.{}.allow_hardlinks = true",
            st.st_nlink,
            zone.name()
        );
        Errno::ACCESS
    }

    /// Opens a regular file node to change it, with `flags` (through `/proc/self/fd`), after
    /// [`Zones::node_break_links`] (`broke` as there). A link made beside the mount meanwhile
    /// (the file opened shares its inode again) is refused with `EACCES`, before `O_TRUNC`
    /// changes anything.
    pub fn node_open_for_change(
        &self,
        node: &Node,
        flags: OFlags,
        press: &dyn Fn(),
        broke: impl FnOnce(BackingKey),
    ) -> NodeResult<OwnedFd> {
        self.node_break_links(node, "open", broke)?;
        let path = || self.node_vpath(node);
        self.open_unshared(node.zone, flags, path, |f| self.node_open(node, f, press))
    }

    /// Opens a file of `zone` with `flags` through `open`, and refuses (`EACCES`) one whose
    /// links the zone breaks (a link made beside the mount since they were broken) before
    /// `O_TRUNC` changes it. `path` names the file for the log line of a refusal.
    fn open_unshared(
        &self,
        zone: ZoneId,
        flags: OFlags,
        path: impl FnOnce() -> Option<VPath>,
        open: impl FnOnce(OFlags) -> NodeResult<OwnedFd>,
    ) -> NodeResult<OwnedFd> {
        // Truncated after the check, unless opened read-only (which ftruncate refuses).
        let late_trunc =
            flags.contains(OFlags::TRUNC) && flags.intersects(OFlags::WRONLY | OFlags::RDWR);
        let fd = open(if late_trunc {
            flags - OFlags::TRUNC
        } else {
            flags
        })?;
        let st = rustix::fs::fstat(&fd)?;
        if self.breaks_links(zone, &st) {
            let why = "it gained one while it was being opened for writing";
            return Err(self.links_refused(zone, &st, path().as_ref(), "open", why));
        }
        if late_trunc {
            rustix::fs::ftruncate(&fd, 0)?;
        }
        Ok(fd)
    }

    /// Looks `name` up in `dir` as a new node (not following a final symlink): held by name
    /// when it is a regular file or a symlink with one link, or a regular file whose links the
    /// zone breaks, else pinned (see [`Node`]). A node held by name comes with a descriptor of
    /// its file ([`Held`]), which the caller keeps until the node is in the mount's inode table.
    pub fn node_lookup(
        &self,
        dir: &Arc<Node>,
        name: &OsStr,
        press: &dyn Fn(),
    ) -> NodeResult<(Node, Stat, Held)> {
        let dfd = dir.fd()?;
        let fd = with_fds(press, || {
            rustix::fs::openat(
                &dfd,
                name,
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })?;
        let st = rustix::fs::fstat(&fd)?;
        let kind = FileType::from_raw_mode(st.st_mode);
        let one_link =
            matches!(kind, FileType::RegularFile | FileType::Symlink) && st.st_nlink == 1;
        if one_link || self.breaks_links(dir.zone, &st) {
            return Ok((Node::named(dir, name, &st), st, Held { _fd: Some(fd) }));
        }
        Ok((Node::new(dir.zone, fd, &st), st, Held { _fd: None }))
    }

    /// Opens the node's file with `flags` (through `/proc/self/fd`, so with the new flags).
    pub fn node_open(&self, node: &Node, flags: OFlags, press: &dyn Fn()) -> NodeResult<OwnedFd> {
        let fd = with_fds(press, || node.fd())?;
        with_fds(press, || reopen(&fd, flags))
    }

    /// The target of a symlink node.
    pub fn node_readlink(&self, node: &Node) -> NodeResult<Vec<u8>> {
        rustix::fs::readlinkat(node.fd()?, "", Vec::new()).map(|t| t.into_bytes())
    }

    /// Opens a directory node for reading: `.` beneath its own descriptor, a one-component
    /// lookup (cheaper than the path through `/proc/self/fd` that [`Self::node_open`] walks).
    fn node_open_dir(&self, node: &Node, press: &dyn Fn()) -> NodeResult<OwnedFd> {
        let fd = with_fds(press, || node.fd())?;
        with_fds(press, || {
            rustix::fs::openat(
                &fd,
                ".",
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
        })
    }

    /// The entries of a directory node, `.` and `..` included, with their backing inode numbers.
    pub fn node_read_dir(&self, node: &Node, press: &dyn Fn()) -> NodeResult<Vec<NodeEntry>> {
        let fd = self.node_open_dir(node, press)?;
        let mut out = Vec::new();
        for ent in rustix::fs::Dir::new(fd)? {
            let ent = ent?;
            let name = OsStr::from_bytes(ent.file_name().to_bytes()).to_os_string();
            out.push((name, ent.file_type(), ent.ino()));
        }
        Ok(out)
    }

    /// Creates a node named `name` in `dir` with `make` (as the caller, under the path's lock),
    /// gives it exactly `mode` when the daemon's umask took bits away, runs `made`, and journals
    /// `op`.
    #[allow(clippy::too_many_arguments)]
    fn node_make(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        op: &str,
        mode: Option<u32>,
        make: impl FnOnce() -> NodeResult<()>,
        made: impl FnOnce(),
    ) -> NodeResult<()> {
        self.node_writable(dir.zone)?;
        let vp = self.child_vpath(dir, name);
        {
            let _lock = vp.as_ref().map(|v| self.locks.lock(v));
            let _as = AsCaller::new(who);
            make()?;
            if let Some(mode) = mode.filter(|m| m & self.umask != 0) {
                rustix::fs::chmodat(dir.fd()?, name, Mode::from_raw_mode(mode), AtFlags::empty())?;
            }
        }
        made();
        if let Some(vp) = vp {
            self.record(&vp, op, None, None, who.origin);
        }
        Ok(())
    }

    /// Creates a special file (`mknod`).
    pub fn node_mknod(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        mode: u32,
        rdev: u64,
        made: impl FnOnce(),
    ) -> NodeResult<()> {
        let perm = mode & 0o7777;
        let make = || {
            rustix::fs::mknodat(
                dir.fd()?,
                name,
                FileType::from_raw_mode(mode),
                Mode::from_raw_mode(perm),
                rdev,
            )
        };
        self.node_make(who, dir, name, "create", Some(perm), make, made)
    }

    /// Creates a directory.
    pub fn node_mkdir(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        mode: u32,
        made: impl FnOnce(),
    ) -> NodeResult<()> {
        let perm = mode & 0o7777;
        let make = || rustix::fs::mkdirat(dir.fd()?, name, Mode::from_raw_mode(perm));
        self.node_make(who, dir, name, "mkdir", Some(perm), make, made)
    }

    /// Creates a symlink to `target` (stored verbatim).
    pub fn node_symlink(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        target: &Path,
        made: impl FnOnce(),
    ) -> NodeResult<()> {
        let make = || rustix::fs::symlinkat(target, dir.fd()?, name);
        self.node_make(who, dir, name, "symlink", None, make, made)
    }

    /// Removes `name` from `dir` (a directory with `is_dir`); `removed` is given the backing key of
    /// what was removed (when it could be read first), before the change is journaled.
    pub fn node_remove(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        is_dir: bool,
        removed: impl FnOnce(Option<BackingKey>),
    ) -> NodeResult<()> {
        self.node_writable(dir.zone)?;
        let vp = self.child_vpath(dir, name);
        let gone = {
            let _lock = vp.as_ref().map(|v| self.locks.lock(v));
            let gone = key_at(dir, name);
            let flags = if is_dir {
                AtFlags::REMOVEDIR
            } else {
                AtFlags::empty()
            };
            rustix::fs::unlinkat(dir.fd()?, name, flags)?;
            gone
        };
        removed(gone);
        if let Some(vp) = vp {
            self.record(&vp, "delete", None, None, who.origin);
        }
        Ok(())
    }

    /// Renames `name` in `dir` to `new_name` in `new_dir`; `moved` is given the backing key of the
    /// entry it replaced (not for an exchange), before the change is journaled. Between two
    /// zones (a fork and its parent on one disk) it is `EXDEV`, as between two filesystems:
    /// `mv` then copies, and each zone's journal records its own side.
    #[allow(clippy::too_many_arguments)]
    pub fn node_rename(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        new_dir: &Node,
        new_name: &OsStr,
        mode: RenameMode,
        moved: impl FnOnce(Option<BackingKey>),
    ) -> NodeResult<()> {
        self.node_writable(dir.zone)?;
        self.node_writable(new_dir.zone)?;
        if dir.zone != new_dir.zone {
            return Err(Errno::XDEV);
        }
        let from = self.child_vpath(dir, name);
        let to = self.child_vpath(new_dir, new_name);
        let replaced = {
            let _locks = match (&from, &to) {
                (Some(a), Some(b)) => Some(self.locks.lock_two(a, b)),
                _ => None,
            };
            let flags = match mode {
                RenameMode::Replace => rustix::fs::RenameFlags::empty(),
                RenameMode::NoReplace => rustix::fs::RenameFlags::NOREPLACE,
                RenameMode::Exchange => rustix::fs::RenameFlags::EXCHANGE,
            };
            let replaced = key_at(new_dir, new_name).filter(|_| mode != RenameMode::Exchange);
            rustix::fs::renameat_with(dir.fd()?, name, new_dir.fd()?, new_name, flags)?;
            self.renamed();
            replaced
        };
        moved(replaced);
        if let (Some(from), Some(to)) = (from, to) {
            self.record(&from, "move", None, Some(&to), who.origin);
        }
        Ok(())
    }

    /// The backing key of `name` in `dir` now, if it exists.
    pub fn node_key_at(&self, dir: &Node, name: &OsStr) -> Option<BackingKey> {
        key_at(dir, name)
    }

    /// Makes `new_name` in `new_dir` a hard link to `node`. In a zone that breaks links (see
    /// [`Zones::node_break_links`]) a write through either name would not show through the
    /// other, as a link promises: refused up front with `EPERM` (as on a filesystem without hard
    /// links; tools such as cargo and git then copy).
    pub fn node_link(
        &self,
        who: &Caller,
        node: &Node,
        new_dir: &Node,
        new_name: &OsStr,
        made: impl FnOnce(),
    ) -> NodeResult<()> {
        self.node_writable(new_dir.zone)?;
        if new_dir.zone != node.zone {
            return Err(Errno::XDEV);
        }
        if node.kind == FileType::RegularFile {
            let mut st = node.stat()?;
            st.st_nlink += 1;
            if self.breaks_links(node.zone, &st) {
                link_refused(node.zone, self.node_vpath(node).as_ref());
                return Err(Errno::PERM);
            }
        }
        let vp = self.child_vpath(new_dir, new_name);
        // With a second link it can no longer be held by one name.
        node.pin()?;
        {
            let _lock = vp.as_ref().map(|v| self.locks.lock(v));
            rustix::fs::linkat(
                rustix::fs::CWD,
                proc_path(&node.fd()?).as_str(),
                new_dir.fd()?,
                new_name,
                AtFlags::SYMLINK_FOLLOW,
            )?;
        }
        made();
        if let Some(vp) = vp {
            self.record(&vp, "link", None, None, who.origin);
        }
        Ok(())
    }

    /// Creates and opens the regular file `name` in `dir` with `flags` (exclusively with `excl`);
    /// a file that appeared behind the kernel's back is opened instead
    /// ([`Zones::node_open_existing`]).
    #[allow(clippy::too_many_arguments)]
    pub fn node_create(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        flags: OFlags,
        mode: u32,
        excl: bool,
        made: impl FnOnce(),
    ) -> NodeResult<OwnedFd> {
        self.node_writable(dir.zone)?;
        let base = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let want = mode & 0o7777;
        let vp = self.child_vpath(dir, name);
        let fd = {
            let _lock = vp.as_ref().map(|v| self.locks.lock(v));
            let created = {
                let _as = AsCaller::new(who);
                rustix::fs::openat(
                    dir.fd()?,
                    name,
                    base | OFlags::CREATE | OFlags::EXCL,
                    Mode::from_raw_mode(want),
                )
            };
            match created {
                Ok(fd) => {
                    if want & self.umask != 0 {
                        rustix::fs::fchmod(&fd, Mode::from_raw_mode(want))?;
                    }
                    fd
                }
                Err(Errno::EXIST) if !excl => {
                    self.node_open_existing(who, dir, name, base, vp.as_ref())?
                }
                Err(e) => return Err(e),
            }
        };
        made();
        if let Some(vp) = vp {
            self.record(&vp, "create", Some(0), None, who.origin);
        }
        Ok(fd)
    }

    /// Opens the existing file `name` in `dir` (path `vp`, whose lock the caller holds) with
    /// `flags`, as the caller, for [`Zones::node_create`]: opened first without `O_TRUNC`, so
    /// that a change the caller may not make changes nothing, then given a copy of its own when
    /// the zone breaks its links (the rule of [`Zones::node_break_links`]; the kernel holds no
    /// node under this name) and opened again (`O_TRUNC` after the rule is asked again).
    fn node_open_existing(
        &self,
        who: &Caller,
        dir: &Node,
        name: &OsStr,
        flags: OFlags,
        vp: Option<&VPath>,
    ) -> NodeResult<OwnedFd> {
        let open = |f: OFlags| {
            let _as = AsCaller::new(who);
            rustix::fs::openat(dir.fd()?, name, f, Mode::empty())
        };
        let fd = open(flags - OFlags::TRUNC)?;
        let st = rustix::fs::fstat(&fd)?;
        let shared = self.breaks_links(dir.zone, &st);
        if !shared && !flags.contains(OFlags::TRUNC) {
            return Ok(fd);
        }
        if shared {
            self.copy_up_at(&dir.fd()?, name, &st, vp, "create")?;
        }
        self.open_unshared(dir.zone, flags, || vp.cloned(), open)
    }

    /// Changes a node's attributes; a size change goes through `open_file` when the caller has the
    /// file open for writing. Returns the new attributes. Size, mode, owner and times live in
    /// the one inode every link shares: the hard-link rule first ([`Zones::node_break_links`],
    /// `broke` as there).
    pub fn node_setattr(
        &self,
        who: &Caller,
        node: &Node,
        change: AttrChange,
        open_file: Option<&std::fs::File>,
        press: &dyn Fn(),
        broke: impl FnOnce(BackingKey),
    ) -> NodeResult<Stat> {
        self.node_writable(node.zone)?;
        self.node_break_links(node, "setattr", broke)?;
        let vp = if change.mode.is_some()
            || change.uid.is_some()
            || change.gid.is_some()
            || change.size.is_some()
        {
            self.node_vpath(node)
        } else {
            None
        };
        // One descriptor for every step (after the hard-link rule, which may give the node a
        // new file): its stat is the answer.
        let fd = node.fd()?;
        {
            let _lock = change.size.and(vp.as_ref()).map(|v| self.locks.lock(v));
            Zones::apply_attrs(&fd, &change, open_file, || {
                self.node_open(node, OFlags::WRONLY, press)
            })?;
        }
        if let Some(vp) = vp {
            let op = if change.size.is_some() {
                "truncate"
            } else {
                "setattr"
            };
            self.record(&vp, op, change.size, None, who.origin);
        }
        rustix::fs::fstat(&fd)
    }

    /// Makes `change` to the file of `fd`: mode, owner, size (through `open_file`, else a
    /// descriptor `open` opens for writing), times.
    fn apply_attrs(
        fd: &impl AsFd,
        change: &AttrChange,
        open_file: Option<&std::fs::File>,
        open: impl FnOnce() -> NodeResult<OwnedFd>,
    ) -> NodeResult<()> {
        if let Some(mode) = change.mode {
            chmod_fd(fd, mode & 0o7777)?;
        }
        if change.uid.is_some() || change.gid.is_some() {
            rustix::fs::chownat(
                fd,
                "",
                change.uid.map(rustix::fs::Uid::from_raw),
                change.gid.map(rustix::fs::Gid::from_raw),
                AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
            )?;
        }
        if let Some(size) = change.size {
            match open_file {
                Some(f) => rustix::fs::ftruncate(f, size)?,
                None => rustix::fs::ftruncate(&open()?, size)?,
            }
        }
        if change.atime.is_some() || change.mtime.is_some() {
            let ts = Timestamps {
                last_access: timespec(change.atime),
                last_modification: timespec(change.mtime),
            };
            // On the descriptor itself, a symlink's own times as a file's.
            rustix::fs::utimensat(fd, "", &ts, AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW)?;
        }
        Ok(())
    }

    /// Sets (`Some(value)`) or removes (`None`) an extended attribute, after the hard-link rule
    /// ([`Zones::node_break_links`], `broke` as there).
    pub fn node_set_xattr(
        &self,
        who: &Caller,
        node: &Node,
        name: &OsStr,
        value: Option<(&[u8], i32)>,
        broke: impl FnOnce(BackingKey),
        made: impl FnOnce(),
    ) -> NodeResult<()> {
        self.node_writable(node.zone)?;
        let op = if value.is_some() {
            "setxattr"
        } else {
            "removexattr"
        };
        self.node_break_links(node, op, broke)?;
        let fd = node.fd()?;
        let path = proc_path(&fd);
        match value {
            Some((v, flags)) => rustix::fs::setxattr(
                path.as_str(),
                name,
                v,
                rustix::fs::XattrFlags::from_bits_retain(flags as _),
            )?,
            None => rustix::fs::removexattr(path.as_str(), name)?,
        }
        made();
        if let Some(vp) = self.node_vpath(node) {
            self.record(&vp, "setxattr", None, None, who.origin);
        }
        Ok(())
    }

    /// Reads an extended attribute into `buf` (its size when `buf` is empty).
    pub fn node_get_xattr(&self, node: &Node, name: &OsStr, buf: &mut [u8]) -> NodeResult<usize> {
        if node.kind == FileType::Symlink {
            return Err(Errno::NODATA);
        }
        rustix::fs::getxattr(proc_path(&node.fd()?).as_str(), name, buf)
    }

    /// Lists extended attribute names into `buf` (their size when `buf` is empty).
    pub fn node_list_xattr(&self, node: &Node, buf: &mut [u8]) -> NodeResult<usize> {
        if node.kind == FileType::Symlink {
            return Ok(0);
        }
        rustix::fs::listxattr(proc_path(&node.fd()?).as_str(), buf)
    }

    /// The filesystem statistics of the node's backing filesystem.
    pub fn node_statfs(&self, node: &Node) -> NodeResult<StatVfs> {
        rustix::fs::statvfs(proc_path(&node.fd()?).as_str())
    }

    /// Syncs a directory node.
    pub fn node_fsync_dir(&self, node: &Node, press: &dyn Fn()) -> NodeResult<()> {
        let fd = self.node_open_dir(node, press)?;
        rustix::fs::fsync(&fd)
    }

    /// Journals the writes made through one open file, once, when it is closed.
    pub fn node_record_write(&self, node: &Node, size: Option<u64>, origin: Origin) {
        if let Some(vp) = self.node_vpath(node) {
            self.record(&vp, "write", size, None, origin);
        }
    }
}

/// File I/O on a backing file the mount opened through [`Zones::node_open`] or
/// [`Zones::node_create`] (used when the kernel does not pass the I/O through itself).
pub mod io {
    use std::fs::File;

    use rustix::fs::SeekFrom;

    use super::NodeResult;

    /// Reads up to `buf.len()` bytes at `offset` (fewer only at the end of the file).
    pub fn read_at(f: &File, buf: &mut [u8], offset: u64) -> NodeResult<usize> {
        let mut n = 0;
        while n < buf.len() {
            let r = rustix::io::pread(f, &mut buf[n..], offset + n as u64)?;
            if r == 0 {
                break;
            }
            n += r;
        }
        Ok(n)
    }

    /// Writes all of `data` at `offset`, or at the end with `append`.
    pub fn write_at(f: &File, data: &[u8], offset: u64, append: bool) -> NodeResult<usize> {
        let mut n = 0;
        while n < data.len() {
            n += if append {
                rustix::io::write(f, &data[n..])?
            } else {
                rustix::io::pwrite(f, &data[n..], offset + n as u64)?
            };
        }
        Ok(n)
    }

    /// How much of a sequential run of writes is left to the kernel's own writeback before
    /// [`WriteBehind`] starts it.
    pub const WRITE_BEHIND_CHUNK: u64 = 8 << 20;

    /// Starts writing a file's data to disk while a long sequential write goes on, a chunk
    /// ([`WRITE_BEHIND_CHUNK`]) at a time, so that an `fsync` at its end (or the kernel's
    /// writeback 30 s later) finds little left to write.
    ///
    /// Through the mount every write costs a round trip, so the writer fills the page cache more
    /// slowly than on the native disk, and the disk sits idle meanwhile; starting the writeback
    /// early overlaps the two. Files smaller than a chunk (sources, temporary files an untar
    /// creates and a `rm -rf` deletes) are never written early. `SYNC_FILE_RANGE_WRITE` only
    /// starts the writeback of pages not already under it, and waits for nothing but a full
    /// device queue; it changes no data and no metadata.
    #[derive(Debug, Default)]
    pub struct WriteBehind {
        /// The unwritten part of the current run: its start, and where its next write goes.
        run: std::sync::Mutex<(u64, u64)>,
    }

    impl WriteBehind {
        /// Notes `len` bytes written at `offset`, and starts the writeback of the run when a
        /// chunk of it is waiting.
        pub fn wrote(&self, f: &File, offset: u64, len: usize) {
            let Some((start, len)) = self.advance(offset, len) else {
                return;
            };
            // An error here only means the kernel writes the pages back later, as it would have.
            // SAFETY: sync_file_range(2) on a descriptor we hold; it reads no memory of ours.
            unsafe {
                libc::sync_file_range(
                    std::os::fd::AsRawFd::as_raw_fd(f),
                    start as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }

        /// Notes a write of `len` bytes at `offset`; returns the range (start, length) to write
        /// back now, if a chunk of the run is waiting.
        pub(crate) fn advance(&self, offset: u64, len: usize) -> Option<(u64, u64)> {
            let end = offset.saturating_add(len as u64);
            let mut run = self.run.lock().expect("not poisoned");
            if offset != run.1 {
                // Not where the last write ended: a new run starts here.
                *run = (offset, end);
                return None;
            }
            run.1 = end;
            if run.1 - run.0 < WRITE_BEHIND_CHUNK {
                return None;
            }
            let flush = (run.0, run.1 - run.0);
            run.0 = run.1;
            Some(flush)
        }
    }

    /// Clears set-user-ID, and set-group-ID when the group may execute, as a write by a caller
    /// without `CAP_FSETID` does. The kernel asks for it (`FUSE_WRITE_KILL_SUIDGID`) once the
    /// daemon handles it (`FUSE_HANDLE_KILLPRIV_V2`): the daemon's own write, as root, keeps them.
    pub fn kill_suidgid(f: &File) -> NodeResult<()> {
        let mode = rustix::fs::fstat(f)?.st_mode;
        let mut clear = libc::S_ISUID;
        if mode & libc::S_IXGRP != 0 {
            clear |= libc::S_ISGID;
        }
        if mode & clear != 0 {
            rustix::fs::fchmod(f, rustix::fs::Mode::from_raw_mode(mode & 0o7777 & !clear))?;
        }
        Ok(())
    }

    /// Syncs the file's data (and metadata unless `datasync`).
    pub fn sync(f: &File, datasync: bool) -> NodeResult<()> {
        if datasync {
            rustix::fs::fdatasync(f)
        } else {
            rustix::fs::fsync(f)
        }
    }

    /// `fallocate(2)` with the kernel's mode bits.
    pub fn allocate(f: &File, mode: i32, offset: u64, len: u64) -> NodeResult<()> {
        rustix::fs::fallocate(
            f,
            rustix::fs::FallocateFlags::from_bits_retain(mode as _),
            offset,
            len,
        )
    }

    /// `lseek(2)`, SEEK_DATA and SEEK_HOLE included.
    pub fn seek(f: &File, offset: i64, whence: i32) -> NodeResult<u64> {
        let pos = match whence {
            libc::SEEK_DATA => SeekFrom::Data(offset as u64),
            libc::SEEK_HOLE => SeekFrom::Hole(offset as u64),
            libc::SEEK_END => SeekFrom::End(offset),
            libc::SEEK_CUR => SeekFrom::Current(offset),
            _ => SeekFrom::Start(offset as u64),
        };
        rustix::fs::seek(f, pos)
    }

    /// Copies `len` bytes between two open files in the kernel.
    pub fn copy_range(
        from: &File,
        from_offset: u64,
        to: &File,
        to_offset: u64,
        len: u64,
    ) -> NodeResult<usize> {
        let (mut a, mut b) = (from_offset, to_offset);
        rustix::fs::copy_file_range(from, Some(&mut a), to, Some(&mut b), len as usize)
    }

    /// The attributes of an open file.
    pub fn stat(f: &File) -> NodeResult<rustix::fs::Stat> {
        rustix::fs::fstat(f)
    }
}

/// Links refused so far by the hard-link rule, in this daemon.
static LINKS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// Logs a link refused by the hard-link rule (`EPERM`, after which cargo, rustc and git copy):
/// the first at `warn` with the rule and the config key, then one in a thousand with the count
/// (a build refused thousands), each at `debug`.
fn link_refused(zone: ZoneId, vp: Option<&VPath>) {
    let n = LINKS_REFUSED.fetch_add(1, Ordering::Relaxed) + 1;
    let path = vp.map(|v| v.to_string()).unwrap_or_default();
    if n == 1 {
        tracing::warn!(
            path,
            "refused a hard link through the mount: a second name made through the mount would not \
             share its writes (tools such as cargo and git then copy); set \
             zones.{}.allow_hardlinks = true to allow links; further refusals are counted here \
             every 1000 and logged at debug",
            zone.name()
        );
    } else if n.is_multiple_of(1000) {
        tracing::info!(refused = n, "hard links refused through the mount so far");
    } else {
        tracing::debug!(path, "refused a hard link through the mount");
    }
}

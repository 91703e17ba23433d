//! The mount's side of a zone served from a sandbox: path-keyed inode numbers and open handles.
//!
//! A sandbox zone has no backing fds, so its inodes are names: each number maps to a path relative
//! to the zone, assigned at lookup and kept while the kernel holds a reference (renames move the
//! names beneath). This file owns only that, the file handles, and turning answers into
//! [`FileAttr`]s; every operation is the core's ([`crate::core::sandbox_node`]: the read-only,
//! path-lock, size and journal rules, errors mapped by [`FsError::errno`]). Attributes and
//! listings are cached by the core for the zone's `attr_ttl`; the kernel is told the same TTL,
//! so a change made inside the sandbox shows through the mount within that time.
//!
//! Open files share one local copy per inode ([`SandboxFile`], in the zone's spool): the first
//! open streams it from the sandbox; it is written back on `flush` (every `close`), `fsync` and
//! the last `release` when it changed. A write-back the sandbox does not take is queued durably
//! by the core and the `close`/`fsync` fails with `EIO`; until the queue has sent it, a new open
//! sees the queued content and `fsync` or the `close` of a writable handle fails with `EIO` again.
//! Remote files are opened with `FOPEN_DIRECT_IO`: reads and writes go to the daemon's copy
//! without the kernel's page cache, so a reader never sees a size the kernel cached before
//! another writer grew the file, and each open sees what the sandbox holds then (shared
//! `mmap` is refused by the kernel for such files; private mappings work).
//!
//! A sandbox that is down or hung fails each call with `EIO` after the zone's deadline (see
//! [`SandboxZone::deadline`]), with a log line naming the sandbox: the mount never hangs on it.
//!
//! May not import `api`, `git` or `sandbox`; calls nothing of [`SandboxZone`] but its settings.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FopenFlags, INodeNo, TimeOrNow};
use rustix::fs::FileType;

use super::inodes::{zone_ino, ROOT_INO};
use super::mode::is_write;
use super::tree::{
    errno, DirEntries, Entry, Opened, RegisterBacking, SetAttr, StatFs, Tree, WriteHow,
};
use crate::core::node::{Caller, RenameMode};
use crate::core::provider::RemoteMeta;
use crate::core::sandbox_node::{Removal, Replace, SandboxFile};
use crate::core::sandbox_zone::SandboxZone;
use crate::core::store::Way;
use crate::core::{EntryKind, FsError, VPath, ZoneId, Zones};
use crate::state::Origin;

/// First inode number of remote zones' entries: cache below `1 << 61`, workspace above.
pub const REMOTE_INO_BASE: u64 = 1 << 60;

/// File handles of remote files start here (local handles count up from 1).
pub const REMOTE_FH_BASE: u64 = 1 << 62;

use super::tree::Res;

/// Maps a core error to the errno the kernel gets.
pub fn errno_of(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn base_of(zone: ZoneId) -> u64 {
    match zone {
        ZoneId::Cache => REMOTE_INO_BASE,
        ZoneId::Workspace => REMOTE_INO_BASE << 1,
        // Never asked: a fork is a local zone ([`SandboxTree::new`] makes no tree for it).
        ZoneId::Fork(_) => REMOTE_INO_BASE,
    }
}

/// Returns the zone a remote inode number belongs to, when it is one (the numbers above the
/// workspace's range are local files': spilled ones and forks').
pub fn zone_of_ino(ino: u64) -> Option<ZoneId> {
    if ino >= REMOTE_INO_BASE << 2 {
        None
    } else if ino >= REMOTE_INO_BASE << 1 {
        Some(ZoneId::Workspace)
    } else if ino >= REMOTE_INO_BASE {
        Some(ZoneId::Cache)
    } else {
        None
    }
}

/// One name the kernel holds.
struct Node {
    rel: String,
    nlookup: u64,
}

/// The inode table of one remote zone.
#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    by_path: HashMap<String, u64>,
}

/// A file's content while it is open, shared by its handles.
struct Content {
    file: SandboxFile,
    opens: usize,
}

/// An open remote file.
struct Handle {
    ino: u64,
    content: Arc<Mutex<Content>>,
    writable: bool,
}

/// The mount's side of one remote zone.
pub struct SandboxTree {
    zones: Arc<Zones>,
    zone: ZoneId,
    table: Mutex<Table>,
    next_ino: AtomicU64,
    contents: Mutex<HashMap<u64, Arc<Mutex<Content>>>>,
    handles: RwLock<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    uid: u32,
    gid: u32,
}

fn time_of(ns: Option<i64>) -> SystemTime {
    match ns {
        Some(ns) if ns >= 0 => UNIX_EPOCH + Duration::from_nanos(ns as u64),
        _ => UNIX_EPOCH,
    }
}

fn fuse_kind(k: EntryKind) -> fuser::FileType {
    match k {
        EntryKind::Dir => fuser::FileType::Directory,
        EntryKind::Symlink => fuser::FileType::Symlink,
        _ => fuser::FileType::RegularFile,
    }
}

fn file_type(k: EntryKind) -> FileType {
    match k {
        EntryKind::Dir => FileType::Directory,
        EntryKind::Symlink => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn name_str(name: &OsStr) -> Res<&str> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
        return Err(Errno::EINVAL);
    }
    name.to_str().ok_or(Errno::EINVAL)
}

impl SandboxTree {
    /// Returns the tree of `zone` when it is served from a sandbox.
    pub fn new(zones: Arc<Zones>, zone: ZoneId) -> Option<SandboxTree> {
        zones.sandbox_zone(zone)?;
        Some(SandboxTree {
            zones,
            zone,
            table: Mutex::new(Table::default()),
            next_ino: AtomicU64::new(base_of(zone)),
            contents: Mutex::new(HashMap::new()),
            handles: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(REMOTE_FH_BASE + (base_of(zone) >> 2)),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        })
    }

    fn remote(&self) -> &SandboxZone {
        self.zones
            .sandbox_zone(self.zone)
            .expect("a sandbox tree serves a sandbox zone")
    }

    /// How long the kernel may keep what this tree answers.
    pub fn ttl(&self) -> Duration {
        self.remote().attr_ttl()
    }

    /// True when `ino` is this zone's root or one of its entries.
    pub fn owns(&self, ino: u64) -> bool {
        ino == zone_ino(self.zone) || zone_of_ino(ino) == Some(self.zone)
    }

    /// True when `fh` is a handle of this tree.
    pub fn owns_fh(&self, fh: u64) -> bool {
        self.handles.read().expect("not poisoned").contains_key(&fh)
    }

    fn rel_of(&self, ino: u64) -> Res<String> {
        if ino == zone_ino(self.zone) {
            return Ok(String::new());
        }
        self.table
            .lock()
            .expect("not poisoned")
            .nodes
            .get(&ino)
            .map(|n| n.rel.clone())
            .ok_or(Errno::ENOENT)
    }

    fn vpath(&self, rel: &str) -> Res<VPath> {
        VPath::new(self.zone, rel).map_err(|e| errno_of(&e))
    }

    fn child(&self, parent: u64, name: &OsStr) -> Res<(String, VPath)> {
        let prel = self.rel_of(parent)?;
        let name = name_str(name)?;
        let rel = if prel.is_empty() {
            name.to_string()
        } else {
            format!("{prel}/{name}")
        };
        let vp = self.vpath(&rel)?;
        Ok((rel, vp))
    }

    /// The number of `rel`, assigned now when it has none; `count` adds a kernel reference.
    fn ino_of(&self, rel: &str, count: bool) -> u64 {
        if rel.is_empty() {
            return zone_ino(self.zone);
        }
        let mut t = self.table.lock().expect("not poisoned");
        let ino = match t.by_path.get(rel) {
            Some(&ino) => ino,
            None => {
                let ino = self.next_ino.fetch_add(1, Ordering::Relaxed) + 1;
                t.by_path.insert(rel.to_string(), ino);
                t.nodes.insert(
                    ino,
                    Node {
                        rel: rel.to_string(),
                        nlookup: 0,
                    },
                );
                ino
            }
        };
        if count {
            if let Some(n) = t.nodes.get_mut(&ino) {
                n.nlookup += 1;
            }
        }
        ino
    }

    /// Drops `n` kernel references to `ino`; the name is forgotten at zero.
    pub fn forget(&self, ino: u64, n: u64) {
        let mut t = self.table.lock().expect("not poisoned");
        let gone = match t.nodes.get_mut(&ino) {
            Some(node) => {
                node.nlookup = node.nlookup.saturating_sub(n);
                node.nlookup == 0
            }
            None => false,
        };
        if gone
            && !self
                .contents
                .lock()
                .expect("not poisoned")
                .contains_key(&ino)
        {
            if let Some(node) = t.nodes.remove(&ino) {
                if t.by_path.get(&node.rel) == Some(&ino) {
                    t.by_path.remove(&node.rel);
                }
            }
        }
    }

    fn attr(&self, ino: u64, meta: &RemoteMeta) -> FileAttr {
        let mut perm = meta.mode.unwrap_or(match meta.kind {
            EntryKind::Dir => 0o755,
            EntryKind::Symlink => 0o777,
            _ => 0o644,
        }) as u16
            & 0o7777;
        if self.remote().read_only() {
            perm &= !0o222;
        }
        let mtime = time_of(meta.mtime_ns);
        let mut attr = FileAttr {
            ino: INodeNo(ino),
            size: meta.size,
            blocks: meta.size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: UNIX_EPOCH,
            kind: fuse_kind(meta.kind),
            perm,
            nlink: if meta.kind == EntryKind::Dir { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        // An open file's local copy is what readers through the mount see.
        if let Some(c) = self.contents.lock().expect("not poisoned").get(&ino) {
            let md = c.lock().expect("not poisoned").file.metadata();
            if let Ok(md) = md {
                attr.size = md.len();
                attr.blocks = md.len().div_ceil(512);
                if let Ok(m) = md.modified() {
                    if m > attr.mtime {
                        attr.mtime = m;
                        attr.ctime = m;
                    }
                }
            }
        }
        attr
    }

    fn stat(&self, vp: &VPath) -> Res<RemoteMeta> {
        self.zones.sandbox_stat(vp).map_err(|e| errno_of(&e))
    }

    /// The attributes of the zone root.
    pub fn root_attr(&self) -> Res<FileAttr> {
        let vp = VPath::root(self.zone);
        let meta = self.stat(&vp)?;
        if meta.kind != EntryKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        Ok(self.attr(zone_ino(self.zone), &meta))
    }

    /// Looks up `name` in `parent`, counting one kernel reference.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Res<FileAttr> {
        let (rel, vp) = self.child(parent, name)?;
        let meta = self.stat(&vp)?;
        let ino = self.ino_of(&rel, true);
        Ok(self.attr(ino, &meta))
    }

    /// The attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Res<FileAttr> {
        if ino == zone_ino(self.zone) {
            return self.root_attr();
        }
        let rel = self.rel_of(ino)?;
        if self
            .contents
            .lock()
            .expect("not poisoned")
            .contains_key(&ino)
        {
            // Open: the local copy holds the truth; the kind and mode come from the sandbox.
            let vp = self.vpath(&rel)?;
            let meta = self.zones.sandbox_stat(&vp).unwrap_or(RemoteMeta {
                kind: EntryKind::File,
                size: 0,
                mtime_ns: None,
                mode: None,
                link_target: None,
            });
            return Ok(self.attr(ino, &meta));
        }
        let meta = self.stat(&self.vpath(&rel)?)?;
        Ok(self.attr(ino, &meta))
    }

    /// Changes size, mode or modification time.
    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        mtime: Option<SystemTime>,
        origin: Origin,
    ) -> Res<FileAttr> {
        let rel = self.rel_of(ino)?;
        let vp = self.vpath(&rel)?;
        if uid.is_some_and(|u| u != self.uid) || gid.is_some_and(|g| g != self.gid) {
            return Err(Errno::EPERM);
        }
        if let Some(size) = size {
            let open = self
                .contents
                .lock()
                .expect("not poisoned")
                .get(&ino)
                .cloned();
            match open {
                Some(c) => {
                    let mut c = c.lock().expect("not poisoned");
                    self.zones
                        .sandbox_set_len(&vp, &mut c.file, size, origin)
                        .map_err(|e| errno_of(&e))?;
                }
                None => self
                    .zones
                    .sandbox_truncate(&vp, size, origin)
                    .map_err(|e| errno_of(&e))?,
            }
        }
        if mode.is_some() || mtime.is_some() {
            let mtime = mtime.and_then(|t| t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs()));
            self.zones
                .sandbox_set_meta(&vp, mode, mtime, origin)
                .map_err(|e| errno_of(&e))?;
        }
        self.getattr(ino)
    }

    /// Where a symlink points.
    pub fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let vp = self.vpath(&self.rel_of(ino)?)?;
        self.zones
            .store(&vp)
            .and_then(|s| s.readlink(&vp))
            .map(String::into_bytes)
            .map_err(|e| errno_of(&e))
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, origin: Origin) -> Res<FileAttr> {
        let (rel, vp) = self.child(parent, name)?;
        self.zones
            .mkdir_at(&vp, false, Some(mode), Way::Beneath, origin)
            .map_err(|e| errno_of(&e))?;
        let meta = self
            .zones
            .sandbox_stat_fresh(&vp)
            .map_err(|e| errno_of(&e))?;
        let ino = self.ino_of(&rel, true);
        Ok(self.attr(ino, &meta))
    }

    /// Removes a file (`dir` false) or an empty directory (`dir` true).
    pub fn remove(&self, parent: u64, name: &OsStr, dir: bool, origin: Origin) -> Res<()> {
        let (_, vp) = self.child(parent, name)?;
        let how = if dir {
            Removal::EmptyDir
        } else {
            Removal::File
        };
        self.zones
            .remove_at(&vp, how, None, Way::Beneath, origin)
            .map(|_| ())
            .map_err(|e| errno_of(&e))
    }

    /// Creates a symlink.
    pub fn symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &std::path::Path,
        origin: Origin,
    ) -> Res<FileAttr> {
        let (rel, vp) = self.child(parent, name)?;
        let target = target.to_str().ok_or(Errno::EINVAL)?;
        self.zones
            .symlink_at(&vp, target, false, None, Way::Beneath, origin)
            .map_err(|e| errno_of(&e))?;
        let ino = self.ino_of(&rel, true);
        Ok(self.attr(
            ino,
            &RemoteMeta {
                kind: EntryKind::Symlink,
                size: target.len() as u64,
                mtime_ns: None,
                mode: Some(0o777),
                link_target: Some(target.to_string()),
            },
        ))
    }

    /// Renames within the zone; `noreplace` fails when the destination exists.
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
        origin: Origin,
    ) -> Res<()> {
        let (from_rel, from) = self.child(parent, name)?;
        let (to_rel, to) = self.child(newparent, newname)?;
        let replace = if noreplace {
            Replace::Never
        } else {
            Replace::Posix
        };
        if to_rel == from_rel {
            return Ok(());
        }
        if from.is_root() || to_rel.starts_with(&format!("{from_rel}/")) {
            // A directory cannot move into itself.
            return Err(Errno::EINVAL);
        }
        self.zones
            .rename_at(&from, &to, replace, origin)
            .map_err(|e| errno_of(&e))?;
        // The names beneath move with it.
        let mut t = self.table.lock().expect("not poisoned");
        let under = format!("{from_rel}/");
        let moved: Vec<(String, u64)> = t
            .by_path
            .iter()
            .filter(|(k, _)| *k == &from_rel || k.starts_with(&under))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if let Some(old) = t.by_path.remove(&to_rel) {
            if let Some(n) = t.nodes.get_mut(&old) {
                n.rel = format!("\0replaced/{old}");
            }
        }
        for (k, ino) in moved {
            t.by_path.remove(&k);
            let nk = format!("{to_rel}{}", &k[from_rel.len()..]);
            if let Some(n) = t.nodes.get_mut(&ino) {
                n.rel = nk.clone();
            }
            t.by_path.insert(nk, ino);
        }
        Ok(())
    }

    /// Lists a directory: (name, type, inode number), with `.` and `..`.
    pub fn list_dir(&self, ino: u64) -> Res<Vec<(OsString, FileType, u64)>> {
        let rel = self.rel_of(ino)?;
        let vp = self.vpath(&rel)?;
        let entries = self.zones.sandbox_list(&vp).map_err(|e| errno_of(&e))?;
        let mut out = vec![
            (OsString::from("."), FileType::Directory, ino),
            (OsString::from(".."), FileType::Directory, ROOT_INO),
        ];
        for e in entries.iter() {
            let crel = if rel.is_empty() {
                e.name.clone()
            } else {
                format!("{rel}/{}", e.name)
            };
            out.push((
                OsString::from(&e.name),
                file_type(e.meta.kind),
                self.ino_of(&crel, false),
            ));
        }
        Ok(out)
    }

    /// Opens `ino`, downloading it unless another open holds it or `truncate` empties it.
    pub fn open(&self, ino: u64, write: bool, truncate: bool, origin: Origin) -> Res<u64> {
        self.open_as(ino, write, truncate, false, origin)
    }

    /// [`SandboxTree::open`]; `created` says the sandbox's file was just created empty, so there
    /// is nothing to download and nothing to send back unless something is written.
    fn open_as(
        &self,
        ino: u64,
        write: bool,
        truncate: bool,
        created: bool,
        origin: Origin,
    ) -> Res<u64> {
        let rel = self.rel_of(ino)?;
        let vp = self.vpath(&rel)?;
        // Checked before the copy is shared (the count below), as the core checks when it opens
        // one: a refused open must not hold a copy.
        if write {
            self.zones.check_writable(&vp).map_err(|e| errno_of(&e))?;
        }
        // Counted under the table's lock, which the last release holds while it removes the
        // copy: an open racing a release (the kernel sends it after close returns) either
        // shares the copy before it goes or makes a new one, never holds one the table lost.
        let shared = self
            .contents
            .lock()
            .expect("not poisoned")
            .get(&ino)
            .cloned()
            .inspect(|c| c.lock().expect("not poisoned").opens += 1);
        let content = match shared {
            Some(c) => {
                if truncate {
                    let mut g = c.lock().expect("not poisoned");
                    self.zones
                        .sandbox_set_len(&vp, &mut g.file, 0, origin)
                        .map_err(|e| errno_of(&e))?;
                }
                c
            }
            None => {
                let file = self
                    .zones
                    .sandbox_open(&vp, write, truncate, created, origin)
                    .map_err(|e| errno_of(&e))?;
                let c = Arc::new(Mutex::new(Content { file, opens: 1 }));
                let mut contents = self.contents.lock().expect("not poisoned");
                // Another open may have raced us here: use its copy.
                match contents.get(&ino) {
                    Some(other) => {
                        other.lock().expect("not poisoned").opens += 1;
                        other.clone()
                    }
                    None => {
                        contents.insert(ino, c.clone());
                        c
                    }
                }
            }
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.write().expect("not poisoned").insert(
            fh,
            Arc::new(Handle {
                ino,
                content,
                writable: write,
            }),
        );
        Ok(fh)
    }

    /// Creates an empty file in the sandbox and opens it.
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        exclusive: bool,
        origin: Origin,
    ) -> Res<(FileAttr, u64)> {
        let (rel, vp) = self.child(parent, name)?;
        let created = self
            .zones
            .sandbox_create(&vp, mode, exclusive, origin)
            .map_err(|e| errno_of(&e))?;
        let ino = self.ino_of(&rel, true);
        let fh = self.open_as(ino, true, false, created, origin)?;
        Ok((self.getattr(ino)?, fh))
    }

    fn handle(&self, fh: u64) -> Res<Arc<Handle>> {
        self.handles
            .read()
            .expect("not poisoned")
            .get(&fh)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Reads from the local copy.
    pub fn read(&self, fh: u64, offset: u64, buf: &mut [u8]) -> Res<usize> {
        let h = self.handle(fh)?;
        let c = h.content.lock().expect("not poisoned");
        c.file.read_at(offset, buf).map_err(|e| io_errno(&e))
    }

    /// Writes to the local copy (sent to the sandbox at flush, fsync or the last close).
    pub fn write(&self, fh: u64, offset: u64, data: &[u8], append: bool, o: Origin) -> Res<u32> {
        let h = self.handle(fh)?;
        if !h.writable {
            return Err(Errno::EBADF);
        }
        let vp = self.vpath(&self.rel_of(h.ino)?)?;
        let mut c = h.content.lock().expect("not poisoned");
        self.zones
            .sandbox_write(&vp, &mut c.file, data, offset, append, o)
            .map(|n| n as u32)
            .map_err(|e| errno_of(&e))
    }

    /// Sends the local copy to the sandbox when it changed (`close`).
    pub fn flush(&self, fh: u64) -> Res<()> {
        let h = self.handle(fh)?;
        self.write_back(h.ino, &h.content, h.writable)
    }

    /// Sends the local copy to the sandbox when it changed, or a queued write-back of the file
    /// (`fsync`): it succeeds only once the sandbox holds what was written.
    pub fn fsync(&self, fh: u64) -> Res<()> {
        let h = self.handle(fh)?;
        self.write_back(h.ino, &h.content, true)
    }

    /// Writes the local copy back (see [`Zones::sandbox_write_back`]).
    fn write_back(&self, ino: u64, content: &Mutex<Content>, settle: bool) -> Res<()> {
        let mut c = content.lock().expect("not poisoned");
        let vp = self.vpath(&self.rel_of(ino)?)?;
        self.zones
            .sandbox_write_back(&vp, &mut c.file, settle)
            .map_err(|e| errno_of(&e))
    }

    /// Closes a handle: writes back what changed, and drops the local copy after the last one.
    pub fn release(&self, fh: u64) -> Res<()> {
        let h = self
            .handles
            .write()
            .expect("not poisoned")
            .remove(&fh)
            .ok_or(Errno::EBADF)?;
        let res = self.write_back(h.ino, &h.content, false);
        let mut contents = self.contents.lock().expect("not poisoned");
        let last = {
            let mut c = h.content.lock().expect("not poisoned");
            c.opens = c.opens.saturating_sub(1);
            c.opens == 0
        };
        if last
            && contents
                .get(&h.ino)
                .is_some_and(|c| Arc::ptr_eq(c, &h.content))
        {
            contents.remove(&h.ino);
        }
        res
    }

    /// The filesystem statistics reported for the zone (the sandbox's are not known).
    pub fn statfs(&self) -> (u64, u64, u64, u64, u64, u32, u32) {
        (1 << 28, 1 << 27, 1 << 27, 1 << 24, 1 << 23, 4096, 255)
    }
}

fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Tree for SandboxTree {
    fn lookup(&self, parent: u64, name: &OsStr) -> Res<Entry> {
        SandboxTree::lookup(self, parent, name).map(|attr| Entry::new(attr, self.ttl()))
    }

    fn forget(&self, ino: u64, n: u64) {
        SandboxTree::forget(self, ino, n)
    }

    fn getattr(&self, ino: u64, _fh: Option<u64>) -> Res<Entry> {
        SandboxTree::getattr(self, ino).map(|attr| Entry::new(attr, self.ttl()))
    }

    fn setattr(&self, who: &Caller, ino: u64, change: SetAttr) -> Res<Entry> {
        let when = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => SystemTime::now(),
        };
        let SetAttr {
            mode,
            uid,
            gid,
            size,
            mtime,
            ..
        } = change;
        SandboxTree::setattr(self, ino, mode, uid, gid, size, mtime.map(when), who.origin)
            .map(|attr| Entry::new(attr, self.ttl()))
    }

    fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        SandboxTree::readlink(self, ino)
    }

    fn mkdir(&self, who: &Caller, parent: u64, name: &OsStr, mode: u32) -> Res<Entry> {
        SandboxTree::mkdir(self, parent, name, mode, who.origin)
            .map(|attr| Entry::new(attr, self.ttl()))
    }

    fn symlink(&self, who: &Caller, parent: u64, name: &OsStr, target: &Path) -> Res<Entry> {
        SandboxTree::symlink(self, parent, name, target, who.origin)
            .map(|attr| Entry::new(attr, self.ttl()))
    }

    fn remove(&self, who: &Caller, parent: u64, name: &OsStr, dir: bool) -> Res<()> {
        SandboxTree::remove(self, parent, name, dir, who.origin)
    }

    /// No `RENAME_EXCHANGE`: the sandbox's file API cannot swap two names at once.
    fn rename(
        &self,
        who: &Caller,
        (parent, name): (u64, &OsStr),
        (newparent, newname): (u64, &OsStr),
        mode: RenameMode,
    ) -> Res<()> {
        if mode == RenameMode::Exchange {
            return Err(Errno::EINVAL);
        }
        let noreplace = mode == RenameMode::NoReplace;
        SandboxTree::rename(
            self, parent, name, newparent, newname, noreplace, who.origin,
        )
    }

    fn list(&self, ino: u64) -> Res<DirEntries> {
        self.list_dir(ino)
    }

    fn statfs(&self, _ino: u64) -> Res<StatFs> {
        let (blocks, bfree, bavail, files, ffree, bsize, namelen) = SandboxTree::statfs(self);
        Ok(StatFs {
            blocks,
            bfree,
            bavail,
            files,
            ffree,
            bsize,
            namelen,
            frsize: bsize,
        })
    }

    fn access(&self, _ino: u64, write: bool) -> Res<()> {
        if write {
            self.zones.node_writable(self.zone).map_err(errno)?;
        }
        Ok(())
    }

    /// Through the daemon's copy, never the page cache (see the module's doc).
    fn open(&self, who: &Caller, ino: u64, flags: i32, _register: RegisterBacking) -> Res<Opened> {
        let write = is_write(flags);
        let trunc = write && flags & libc::O_TRUNC != 0;
        let fh = SandboxTree::open(self, ino, write, trunc, who.origin)?;
        Ok(Opened {
            fh,
            flags: FopenFlags::FOPEN_DIRECT_IO,
            backing: None,
        })
    }

    fn create(
        &self,
        who: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        _register: RegisterBacking,
    ) -> Res<(Entry, Opened)> {
        let excl = flags & libc::O_EXCL != 0;
        let (attr, fh) = SandboxTree::create(self, parent, name, mode, excl, who.origin)?;
        let opened = Opened {
            fh,
            flags: FopenFlags::FOPEN_DIRECT_IO,
            backing: None,
        };
        Ok((Entry::new(attr, self.ttl()), opened))
    }

    fn read(&self, _who: &Caller, _ino: u64, fh: u64, offset: u64, buf: &mut [u8]) -> Res<usize> {
        SandboxTree::read(self, fh, offset, buf)
    }

    fn write(
        &self,
        who: &Caller,
        _ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        how: WriteHow,
    ) -> Res<u32> {
        SandboxTree::write(self, fh, offset, data, how.append, who.origin)
    }

    fn flush(&self, fh: u64) -> Res<()> {
        SandboxTree::flush(self, fh)
    }

    fn release(&self, fh: u64) -> Res<()> {
        SandboxTree::release(self, fh)
    }

    fn fsync(&self, _who: &Caller, _ino: u64, fh: u64, _datasync: bool) -> Res<()> {
        SandboxTree::fsync(self, fh)
    }
}

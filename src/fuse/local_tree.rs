//! A zone on this machine (the workspace, the cache, a fork), as the mount serves it: the
//! [`Tree`] over the core's inode-level operations.
//!
//! Lookups and changes (create, mkdir, rename, setattr, xattrs, …) go to `Zones::node_*` and
//! `core::node`, which make the system calls beneath the inodes' `O_PATH` descriptors under the
//! zone's rules (read-only, hard links, path locks) and record each change in the journal with
//! the calling pid and uid. Reads and writes go to the open file (`core::node::io`), and a file's
//! data writes are journaled once, when it is released (or, for an implicit writer, once idle:
//! see `super::mode`). What stays here is the mount's own business around those calls: the
//! kernel's inode numbers ([`Inodes`]), open files and their passthrough backing files, the
//! marks that tell the watcher a change was the mount's own, and metadata prefetch.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use fuser::{BackingId, Errno, FileAttr, TimeOrNow};
use rustix::fs::{FileType, OFlags, Stat};

use super::handles::{Handle, ImplicitWriters};
use super::inodes::{zone_ino, Inode, Inodes, ROOT_INO};
use super::mode::{is_write, open_flags, Modes};
use super::tree::{
    attr_of, errno, plain_name, virtual_dir, DirEntries, Entry, Opened, RegisterBacking, Res,
    SetAttr, StatFs, Tree, WriteHow, TTL,
};
use crate::core::node::{io as node_io, AttrChange, BackingKey, Caller, RenameMode, SetTime};
use crate::core::prefetch::Prefetch;
use crate::core::{ZoneId, Zones};

/// The local zones of the mount (see the module's doc): one tree for all of them, as the
/// inode table is one.
pub struct LocalTree {
    zones: Arc<Zones>,
    inodes: Arc<Inodes>,
    modes: Arc<Modes>,
    handles: RwLock<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    /// Files written with file handle 0 (and files created on such a connection), by inode
    /// (see `super::mode`).
    implicit: Arc<ImplicitWriters>,
    /// Metadata read-ahead of walks (`[fuse] prefetch`).
    prefetch: Option<Prefetch>,
    /// When the mount started (the times of a negative entry).
    started: SystemTime,
}

impl LocalTree {
    /// The tree of the local zones over `inodes`; starts the thread that ends idle implicit
    /// writers when the kernel will send no `OPEN`.
    pub fn new(
        zones: Arc<Zones>,
        inodes: Arc<Inodes>,
        modes: Arc<Modes>,
        prefetch: bool,
    ) -> std::io::Result<LocalTree> {
        let implicit: Arc<ImplicitWriters> = Arc::default();
        if modes.no_open() {
            ImplicitWriters::spawn_ender(&implicit, zones.clone())?;
        }
        Ok(LocalTree {
            zones,
            inodes,
            modes,
            handles: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            implicit,
            prefetch: if prefetch {
                Some(Prefetch::start()?)
            } else {
                None
            },
            started: SystemTime::now(),
        })
    }

    /// Journals what the implicit writers wrote (the kernel sends no `RELEASE` for them).
    pub fn end_implicit_writers(&self) {
        self.implicit.end_all(&self.zones);
    }

    /// Asks the invalidation thread to evict idle inodes (the core calls it when out of fds).
    fn press(&self) -> impl Fn() + '_ {
        || self.inodes.press()
    }

    /// The live inode `ino`.
    pub fn inode(&self, ino: u64) -> Res<Arc<Inode>> {
        self.inodes.get(ino).ok_or(Errno::ENOENT)
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

    /// A directory inode to create or remove names in, in a writable zone.
    fn dir_for_change(&self, parent: u64) -> Res<Arc<Inode>> {
        let p = self.inode(parent)?;
        self.writable(p.zone)?;
        Ok(p)
    }

    /// Looks up `name` in the directory inode `parent`, counting one kernel reference.
    pub fn lookup_inode(&self, parent: u64, name: &OsStr) -> Res<(Arc<Inode>, FileAttr)> {
        let p = self.inode(parent)?;
        let name = plain_name(name)?;
        let (node, st, held) = self
            .zones
            .node_lookup(&p.node, name, &self.press())
            .map_err(errno)?;
        let inode = self.inodes.remember(node, &st, parent, &p.node, name);
        drop(held);
        Ok((inode.clone(), attr_of(inode.ino, &st)))
    }

    /// [`LocalTree::lookup_inode`], as the kernel's entry.
    fn lookup_entry(&self, parent: u64, name: &OsStr) -> Res<Entry> {
        self.lookup_inode(parent, name)
            .map(|(_, attr)| Entry::new(attr, TTL))
    }

    /// Counts a change of a name through the mount (create, `mkdir`, rename, removal, …) as under
    /// way until the guard is dropped, after [`LocalTree::mark`]: the watcher of the zones'
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
            if let Err(e) = i.node.pin() {
                // Unpinned, its number may pass to the next file ext4 makes once it is gone.
                tracing::debug!(error = %e, ino = i.ino, "cannot hold open a file about to lose its name");
            }
        }
    }

    /// A new name made in `parent` by `make` (under the naming guard, marked as the mount's
    /// own), looked up for the kernel.
    fn make_entry(
        &self,
        parent: u64,
        name: &OsStr,
        make: impl FnOnce(&Arc<Inode>, &OsStr, &dyn Fn()) -> rustix::io::Result<()>,
    ) -> Res<Entry> {
        let _naming = self.naming();
        let p = self.dir_for_change(parent)?;
        let name = plain_name(name)?;
        make(&p, name, &|| self.mark(&p, Some(name))).map_err(errno)?;
        self.lookup_entry(parent, name)
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

    fn handle(&self, fh: u64) -> Res<Arc<Handle>> {
        self.handles
            .read()
            .expect("not poisoned")
            .get(&fh)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Registers an open file (`file`: the daemon's descriptor, if it opened one with `flags`).
    fn new_handle(
        &self,
        who: &Caller,
        inode: &Arc<Inode>,
        file: Option<std::fs::File>,
        flags: OFlags,
        writable: bool,
        backing: Option<Arc<BackingId>>,
    ) -> Arc<Handle> {
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
        let h = Arc::new(Handle {
            fh,
            backing,
            writable,
            writer_key,
            ..Handle::new(inode.clone(), file, flags, who.origin)
        });
        self.handles
            .write()
            .expect("not poisoned")
            .insert(fh, h.clone());
        h
    }

    /// Changes the attributes of `inode`: through the open file the change names, if it
    /// truncates.
    fn set_attr(&self, who: &Caller, inode: &Inode, change: SetAttr) -> Res<FileAttr> {
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
        let attrs = AttrChange {
            mode: change.mode,
            uid: change.uid,
            gid: change.gid,
            size: change.size,
            atime: when(change.atime),
            mtime: when(change.mtime),
        };
        let st = self
            .zones
            .node_setattr(who, inode, attrs, file, &self.press(), |old| {
                self.follow_copy(inode, old)
            })
            .map_err(errno)?;
        self.zones.own().note(&st);
        Ok(attr_of(inode.ino, &st))
    }

    /// Lists a directory, and prefetches the metadata of the subdirectories a walk goes to next.
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

    /// After a rename: the kernel now knows the moved inode(s) under the new name(s).
    fn renamed(&self, dirs: [(&Arc<Inode>, &OsStr, u64); 2]) {
        for (dir, n, kernel_dir) in dirs {
            if let Some((dev, backing)) = self.zones.node_key_at(dir, n) {
                if let Some(ino) = self.inodes.known_number(dir.zone, dev, backing) {
                    self.inodes.seen_as(ino, kernel_dir, &dir.node, n);
                }
            }
        }
    }

    /// Copies `len` bytes from one open file to another (both this tree's).
    pub fn copy_range(
        &self,
        who: &Caller,
        from: (u64, u64, u64),
        to: (u64, u64, u64),
        len: u64,
    ) -> Res<u32> {
        let (ino_in, fh_in, offset_in) = from;
        let (ino_out, fh_out, offset_out) = to;
        let i = self.io_handle(who, ino_in, fh_in, false)?;
        let o = self.io_handle(who, ino_out, fh_out, true)?;
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
    }
}

impl Tree for LocalTree {
    fn lookup(&self, parent: u64, name: &OsStr) -> Res<Entry> {
        self.lookup_entry(parent, name)
    }

    /// An absent name is answered as a negative entry (inode 0), which the kernel caches for
    /// TTL: tools probe for many names that do not exist (rg and git look for .git,
    /// .gitignore, .ignore in every directory). A name that appears behind the mount's back is
    /// invalidated like any other entry (see `super::invalidate`).
    fn negative(&self, parent: u64) -> Option<Entry> {
        self.inodes.get(parent)?;
        let attr = virtual_dir(0, self.started, self.started, 5);
        Some(Entry::new(attr, TTL))
    }

    fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    fn held(&self, ino: u64) -> bool {
        self.inodes.get(ino).is_some()
    }

    fn getattr(&self, ino: u64, fh: Option<u64>) -> Res<Entry> {
        // `fstat` on an open file: the file itself, even when its name has gone.
        let open = fh
            .and_then(|fh| self.handle(fh).ok())
            .filter(|h| h.inode.ino == ino);
        let st = match open.as_ref().and_then(|h| h.file.get()) {
            Some(f) => node_io::stat(f).map_err(errno)?,
            None => self.inode(ino)?.stat().map_err(errno)?,
        };
        Ok(Entry::new(attr_of(ino, &st), TTL))
    }

    fn setattr(&self, who: &Caller, ino: u64, change: SetAttr) -> Res<Entry> {
        let inode = self.inode(ino)?;
        self.set_attr(who, &inode, change)
            .map(|attr| Entry::new(attr, TTL))
    }

    fn readlink(&self, ino: u64) -> Res<Vec<u8>> {
        let i = self.inode(ino)?;
        self.zones.node_readlink(&i).map_err(errno)
    }

    fn mknod(&self, who: &Caller, parent: u64, name: &OsStr, mode: u32, rdev: u32) -> Res<Entry> {
        self.make_entry(parent, name, |p, name, mark| {
            self.zones.node_mknod(who, p, name, mode, rdev as u64, mark)
        })
    }

    fn mkdir(&self, who: &Caller, parent: u64, name: &OsStr, mode: u32) -> Res<Entry> {
        self.make_entry(parent, name, |p, name, mark| {
            self.zones.node_mkdir(who, p, name, mode, mark)
        })
    }

    fn symlink(&self, who: &Caller, parent: u64, name: &OsStr, target: &Path) -> Res<Entry> {
        self.make_entry(parent, name, |p, name, mark| {
            self.zones.node_symlink(who, p, name, target, mark)
        })
    }

    fn link(&self, who: &Caller, ino: u64, newparent: u64, name: &OsStr) -> Res<Entry> {
        let i = self.inode(ino)?;
        self.make_entry(newparent, name, |np, name, mark| {
            self.zones.node_link(who, &i, np, name, mark)
        })
    }

    fn remove(&self, who: &Caller, parent: u64, name: &OsStr, dir: bool) -> Res<()> {
        let _naming = self.naming();
        let p = self.dir_for_change(parent)?;
        let name = plain_name(name)?;
        if !dir {
            self.pin_victim(&p, name);
        }
        self.zones
            .node_remove(who, &p, name, dir, |gone| {
                self.mark(&p, None);
                if let Some(k) = gone {
                    self.zones.own().forget(k);
                }
            })
            .map_err(errno)?;
        // The kernel drops the name (the inode it held there may live on, open).
        self.inodes.unname(parent, name);
        Ok(())
    }

    fn rename(
        &self,
        who: &Caller,
        (parent, name): (u64, &OsStr),
        (newparent, newname): (u64, &OsStr),
        mode: RenameMode,
    ) -> Res<()> {
        let _naming = self.naming();
        let p = self.dir_for_change(parent)?;
        let np = self.dir_for_change(newparent)?;
        let (name, newname) = (plain_name(name)?, plain_name(newname)?);
        if mode == RenameMode::Replace {
            self.pin_victim(&np, newname);
        }
        self.zones
            .node_rename(who, &p, name, &np, newname, mode, |replaced| {
                if let Some(k) = replaced {
                    self.zones.own().forget(k);
                }
                self.mark(&p, Some(name));
                self.mark(&np, Some(newname));
            })
            .map_err(errno)?;
        self.renamed([(&np, newname, newparent), (&p, name, parent)]);
        Ok(())
    }

    fn list(&self, ino: u64) -> Res<DirEntries> {
        let i = self.inode(ino)?;
        self.read_dir_entries(&i)
    }

    /// The file system of `ino` (of the cache's root when the inode has gone meanwhile).
    fn statfs(&self, ino: u64) -> Res<StatFs> {
        let i = self
            .inodes
            .get(ino)
            .or_else(|| self.inodes.get(zone_ino(ZoneId::Cache)))
            .ok_or(Errno::ENOENT)?;
        let s = self.zones.node_statfs(&i).map_err(errno)?;
        Ok(StatFs::from(&s))
    }

    fn access(&self, ino: u64, write: bool) -> Res<()> {
        let i = self.inode(ino)?;
        if write {
            self.writable(i.zone)?;
        }
        Ok(())
    }

    fn fsync_dir(&self, ino: u64) -> Res<()> {
        let i = self.inode(ino)?;
        self.zones.node_fsync_dir(&i, &self.press()).map_err(errno)
    }

    fn get_xattr(&self, ino: u64, name: &OsStr, buf: &mut [u8]) -> Res<usize> {
        let i = self.inode(ino)?;
        self.zones.node_get_xattr(&i, name, buf).map_err(errno)
    }

    fn list_xattr(&self, ino: u64, buf: &mut [u8]) -> Res<usize> {
        let i = self.inode(ino)?;
        self.zones.node_list_xattr(&i, buf).map_err(errno)
    }

    fn set_xattr(
        &self,
        who: &Caller,
        ino: u64,
        name: &OsStr,
        value: Option<(&[u8], i32)>,
    ) -> Res<()> {
        let i = self.inode(ino)?;
        let broke = |old| self.follow_copy(&i, old);
        let noted = || {
            if let Ok(st) = i.stat() {
                self.zones.own().note(&st);
            }
        };
        self.zones
            .node_set_xattr(who, &i, name, value, broke, noted)
            .map_err(errno)
    }

    fn open(&self, who: &Caller, ino: u64, flags: i32, register: RegisterBacking) -> Res<Opened> {
        let i = self.inode(ino)?;
        let write = is_write(flags);
        let oflags = open_flags(flags);
        // A file read through passthrough before: the kernel already has its backing file, so
        // there is nothing to open here (our own descriptor is opened if a later call needs it).
        let passthrough = self.modes.passthrough_for(i.zone.config_index());
        if !write && i.kind == FileType::RegularFile && passthrough {
            let known = i.backing.lock().expect("not poisoned").clone();
            if let Some(b) = known {
                let h = self.new_handle(who, &i, None, oflags, false, Some(b));
                return Ok(opened(&h));
            }
        }
        if write {
            self.writable(i.zone)?;
        }
        let file = match write && i.kind == FileType::RegularFile {
            true => self.open_for_change(&i, oflags)?,
            false => std::fs::File::from(self.reopen(&i, oflags)?),
        };
        let backing = (passthrough && i.kind == FileType::RegularFile)
            .then(|| shared_backing(&i, || register(file.as_fd())))
            .flatten();
        let h = self.new_handle(who, &i, Some(file), oflags, write, backing);
        // Count the file as changed when truncated, or opened for writing with the kernel doing
        // the writes (the daemon never sees them).
        if write && (h.backing.is_some() || flags & libc::O_TRUNC != 0) {
            h.dirty.store(true, Ordering::Relaxed);
        }
        Ok(opened(&h))
    }

    fn create(
        &self,
        who: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        register: RegisterBacking,
    ) -> Res<(Entry, Opened)> {
        let (inode, attr, fd) = self.create_file(who, parent, name, mode, flags)?;
        let file = std::fs::File::from(fd);
        let entry = Entry::new(attr, TTL);
        let oflags = open_flags(flags);
        if self.modes.no_open() {
            // No RELEASE will end it: the created file, when opened for writing, is the
            // inode's implicit writer (so a file created read-only can still be written
            // through the descriptor that created it).
            if is_write(flags) {
                let st = node_io::stat(&file).map_err(errno)?;
                self.add_implicit(who, inode, file, oflags, &st)
                    .wrote(&self.zones);
            }
            let flags = self.modes.created(false);
            let opened = Opened {
                fh: 0,
                flags,
                backing: None,
            };
            return Ok((entry, opened));
        }
        let backing = self
            .modes
            .passthrough_for(inode.zone.config_index())
            .then(|| shared_backing(&inode, || register(file.as_fd())))
            .flatten();
        let h = self.new_handle(who, &inode, Some(file), oflags, true, backing);
        h.dirty.store(true, Ordering::Relaxed);
        let opened = Opened {
            fh: h.fh,
            flags: self.modes.created(h.backing.is_some()),
            backing: h.backing.clone(),
        };
        Ok((entry, opened))
    }

    fn read(&self, who: &Caller, ino: u64, fh: u64, offset: u64, buf: &mut [u8]) -> Res<usize> {
        let h = self.io_handle(who, ino, fh, false)?;
        if offset == 0 {
            if let (Some(p), Some(dir)) = (&self.prefetch, h.inode.parent()) {
                // The start of a file not in the page cache: its neighbours may come next.
                p.files(&dir);
            }
        }
        node_io::read_at(self.file_of(&h)?, buf, offset).map_err(errno)
    }

    fn write(
        &self,
        who: &Caller,
        ino: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        how: WriteHow,
    ) -> Res<u32> {
        let h = self.io_handle(who, ino, fh, true)?;
        // The implicit writer writes at offsets; an appending write opens its own file.
        let own;
        let f = if fh == 0 && how.append {
            own = std::fs::File::from(self.reopen(&h.inode, OFlags::WRONLY | OFlags::APPEND)?);
            &own
        } else {
            self.file_of(&h)?
        };
        let _writing = h.writing(&self.zones);
        if how.kill_suidgid {
            node_io::kill_suidgid(f).map_err(errno)?;
        }
        let n = node_io::write_at(f, data, offset, how.append).map_err(errno)?;
        if !how.append {
            h.behind.wrote(f, offset, n);
        }
        h.written.fetch_add(n as u64, Ordering::Relaxed);
        h.wrote(&self.zones);
        Ok(n as u32)
    }

    fn flush(&self, fh: u64) -> Res<()> {
        self.handle(fh).map(|_| ())
    }

    fn release(&self, fh: u64) -> Res<()> {
        let h = self.handles.write().expect("not poisoned").remove(&fh);
        if let Some(h) = h {
            self.end_handle(&h);
        }
        Ok(())
    }

    fn fsync(&self, who: &Caller, ino: u64, fh: u64, datasync: bool) -> Res<()> {
        let h = self.io_handle(who, ino, fh, false)?;
        node_io::sync(self.file_of(&h)?, datasync).map_err(errno)
    }

    fn allocate(&self, who: &Caller, ino: u64, fh: u64, at: (u64, u64), mode: i32) -> Res<()> {
        let h = self.io_handle(who, ino, fh, true)?;
        node_io::allocate(self.file_of(&h)?, mode, at.0, at.1).map_err(errno)?;
        h.wrote(&self.zones);
        Ok(())
    }

    fn seek(&self, who: &Caller, ino: u64, fh: u64, offset: i64, whence: i32) -> Res<u64> {
        let h = self.io_handle(who, ino, fh, false)?;
        node_io::seek(self.file_of(&h)?, offset, whence).map_err(errno)
    }
}

/// The answer to an open of `h`.
fn opened(h: &Handle) -> Opened {
    Opened {
        fh: h.fh,
        flags: Modes::opened(h.backing.is_some()),
        backing: h.backing.clone(),
    }
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

/// The open files: explicit ones (a handle the kernel was given) and implicit writers.
impl LocalTree {
    /// Creates `name` in `parent` and looks it up: the inode, its attributes and the
    /// descriptor the creation opened.
    fn create_file(
        &self,
        who: &Caller,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
    ) -> Res<(Arc<Inode>, FileAttr, OwnedFd)> {
        let _naming = self.naming();
        let p = self.dir_for_change(parent)?;
        let name = plain_name(name)?;
        let excl = flags & libc::O_EXCL != 0;
        let fd = self
            .zones
            .node_create(who, &p, name, open_flags(flags), mode, excl, || {
                self.mark(&p, Some(name))
            })
            .map_err(errno)?;
        let (inode, attr) = self.lookup_inode(parent, name)?;
        Ok((inode, attr, fd))
    }

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
    /// opened without asking ([`Modes::no_open`]): a write uses the inode's implicit writer
    /// (opened now if it has none); a read opens the file for this request only, so files read
    /// once cost no descriptor afterwards. Either way the zone's rules are checked here, where
    /// `open` would have checked them.
    fn io_handle(&self, who: &Caller, ino: u64, fh: u64, write: bool) -> Res<Arc<Handle>> {
        let h = self.find_io_handle(who, ino, fh, write)?;
        if write {
            h.inode.changing_through_mount();
        }
        Ok(h)
    }

    /// The handle [`LocalTree::io_handle`] serves a read or write with.
    fn find_io_handle(&self, who: &Caller, ino: u64, fh: u64, write: bool) -> Res<Arc<Handle>> {
        if !self.modes.no_open() {
            return self.handle(fh);
        }
        if fh != 0 {
            // A created file's handle, unless its FLUSH ended it.
            if let Ok(h) = self.handle(fh) {
                return Ok(h);
            }
        }
        if write {
            if let Some(h) = self.implicit.get(ino) {
                return Ok(h);
            }
        }
        let i = self.inode(ino)?;
        if i.kind != FileType::RegularFile {
            return Err(Errno::EBADF);
        }
        if !write {
            let file = std::fs::File::from(self.reopen(&i, OFlags::RDONLY)?);
            return Ok(Arc::new(Handle::new(
                i,
                Some(file),
                OFlags::RDONLY,
                who.origin,
            )));
        }
        self.writable(i.zone)?;
        let file = self.open_for_change(&i, OFlags::WRONLY)?;
        let st = node_io::stat(&file).map_err(errno)?;
        Ok(self.add_implicit(who, i, file, OFlags::WRONLY, &st))
    }

    /// Registers `file` (opened with `flags`, `st` its attributes) as the implicit writer of
    /// `inode`; the one registered first wins.
    fn add_implicit(
        &self,
        who: &Caller,
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
            Handle::implicit(inode.clone(), file, flags, who.origin, key)
        })
    }
}

/// What the echo's answers read (see `super::fs`).
impl LocalTree {
    /// True when the zones hold an entry `name` in the directory inode `parent` now.
    pub fn there(&self, parent: u64, name: &OsStr) -> bool {
        self.inode(parent)
            .is_ok_and(|p| self.zones.node_key_at(&p, name).is_some())
    }

    /// The attributes of `ino` now.
    pub fn attr(&self, ino: u64) -> Res<(Arc<Inode>, Stat)> {
        let i = self.inode(ino)?;
        let st = i.stat().map_err(errno)?;
        Ok((i, st))
    }
}

//! The mount's virtual directories, as a [`Tree`]: the top level (the zone roots and `forks`)
//! and `forks`, the forks that exist now ([`Zones::fork_ids`]), each a local zone whose root is
//! looked up when the kernel asks (`Inodes::fork_root`).
//!
//! Forks come and go through the API, which tells the mount nothing: the kernel keeps no entry
//! of `forks` for long and no attributes of it ([`FORK_ENTRY_TTL`]), and the directory's
//! modification time changes with the set of forks, so a cached listing of it is dropped too.
//! Nothing can be made, removed or renamed in either directory (`EPERM`). Below a fork's root
//! everything is as in the workspace (`super::local_tree`).

use std::ffi::{OsStr, OsString};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{Errno, FileAttr};
use rustix::fs::FileType;

use super::inodes::{zone_ino, Inodes, FORKS_INO, PROBE_INO, ROOT_INO};
use super::probe::Probe;
use super::sandbox_tree::{SandboxTree, REMOTE_FH_BASE};
use super::tree::{
    attr_of, errno, virtual_dir, DirEntries, Entry, Opened, RegisterBacking, Res, SetAttr, StatFs,
    Tree, TTL,
};
use crate::config::FORKS_DIR;
use crate::core::node::{Caller, RenameMode};
use crate::core::{ZoneId, Zones};

/// How long the kernel keeps an entry of the forks' directory, and the directory's attributes
/// (see [`Top::ttl_of`]).
const FORK_ENTRY_TTL: Duration = Duration::from_secs(1);

/// The top level and the forks' directory (see the module's doc).
pub struct Top {
    zones: Arc<Zones>,
    inodes: Arc<Inodes>,
    /// The zones served from a sandbox, by zone index.
    sandboxes: [Option<Arc<SandboxTree>>; 2],
    started: SystemTime,
    /// The forks the mount last saw, and since when (see [`Top::forks_seen`]).
    forks: Mutex<(Vec<ZoneId>, SystemTime)>,
}

impl Top {
    pub fn new(zones: Arc<Zones>, inodes: Arc<Inodes>) -> Top {
        Top {
            sandboxes: ZoneId::ALL.map(|id| SandboxTree::new(zones.clone(), id).map(Arc::new)),
            zones,
            inodes,
            started: SystemTime::now(),
            forks: Mutex::new((Vec::new(), SystemTime::now())),
        }
    }

    /// True for the inodes this tree serves.
    pub fn owns(ino: u64) -> bool {
        ino == ROOT_INO || ino == FORKS_INO || ino == PROBE_INO
    }

    /// The sandbox tree serving `ino`, when its zone is served from a sandbox.
    pub fn sandbox(&self, ino: u64) -> Option<&SandboxTree> {
        self.sandboxes
            .iter()
            .flatten()
            .map(|t| &**t)
            .find(|t| t.owns(ino))
    }

    /// The sandbox tree holding the open file `fh`.
    pub fn sandbox_fh(&self, fh: u64) -> Option<&SandboxTree> {
        if fh < REMOTE_FH_BASE {
            return None; // a local file's (the hot path: every read and write)
        }
        self.sandboxes
            .iter()
            .flatten()
            .map(|t| &**t)
            .find(|t| t.owns_fh(fh))
    }

    /// The sandbox tree whose zone root is `name` in the top level.
    fn sandbox_root(&self, name: &OsStr) -> Option<&SandboxTree> {
        let id = name.to_str().and_then(ZoneId::from_name)?;
        self.sandboxes[id.config_index()?].as_deref()
    }

    /// How long the kernel may keep the attributes of `ino`: a second for the forks'
    /// directory, whose modification time tells the kernel when its cached listing is stale
    /// (the kernel lists it without asking otherwise; see [`Top::forks_seen`]); a fork made
    /// or removed invalidates it at once (`ChangeListener::forks_changed`).
    fn ttl_of(ino: u64) -> Duration {
        if ino == PROBE_INO {
            Duration::ZERO
        } else if ino == FORKS_INO {
            FORK_ENTRY_TTL
        } else {
            TTL
        }
    }

    /// The attributes of a virtual directory (or of the open probe's file, `super::probe`).
    pub fn attr(&self, ino: u64) -> FileAttr {
        if ino == PROBE_INO {
            return Probe::attr(self.started);
        }
        if ino == FORKS_INO {
            let forks = self.forks_seen();
            return virtual_dir(ino, self.started, forks.1, 2 + forks.0.len() as u32);
        }
        virtual_dir(ino, self.started, self.started, 5)
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

    /// Looks up `name` in the top level: `forks`, or a zone's root (which takes no reference).
    fn lookup_top(&self, name: &OsStr) -> Res<Entry> {
        if name == FORKS_DIR {
            return Ok(Entry {
                attr: self.attr(FORKS_INO),
                attr_ttl: FORK_ENTRY_TTL,
                entry_ttl: TTL,
            });
        }
        if let Some(t) = self.sandbox_root(name) {
            return t.root_attr().map(|attr| Entry::new(attr, t.ttl()));
        }
        let zone = name
            .to_str()
            .and_then(ZoneId::from_name)
            .ok_or(Errno::ENOENT)?;
        let inode = self.inodes.get(zone_ino(zone)).ok_or(Errno::ENOENT)?;
        let st = inode.stat().map_err(errno)?;
        Ok(Entry::new(attr_of(inode.ino, &st), TTL))
    }

    /// Looks up the root of the fork `name` (in the forks' directory), counting one reference.
    /// How long the kernel keeps the entry: see `ChangeListener::forks_changed`, which drops it
    /// at once when the fork is made or removed. Not at all made every walk through
    /// `forks/NAME` ask again: `rg` through a fork's mount took 5.7 times the workspace's,
    /// opening 50,000 files by such paths.
    fn lookup_fork(&self, name: &OsStr) -> Res<Entry> {
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
        Ok(Entry {
            attr: attr_of(inode.ino, &st),
            attr_ttl: TTL,
            entry_ttl: FORK_ENTRY_TTL,
        })
    }

    /// The top level: the zones that are there, and the forks' directory.
    fn list_top(&self) -> DirEntries {
        let mut entries = vec![
            (OsString::from("."), FileType::Directory, ROOT_INO),
            (OsString::from(".."), FileType::Directory, ROOT_INO),
        ];
        for id in ZoneId::ALL {
            if self.inodes.get(zone_ino(id)).is_some()
                || id
                    .config_index()
                    .is_some_and(|i| self.sandboxes[i].is_some())
            {
                entries.push((OsString::from(id.name()), FileType::Directory, zone_ino(id)));
            }
        }
        entries.push((OsString::from(FORKS_DIR), FileType::Directory, FORKS_INO));
        entries
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

    /// A change of names here: refused. The forks' directory says where forks are made.
    fn refuse(&self, parent: u64, op: &str) -> Errno {
        if parent == FORKS_INO {
            tracing::warn!(
                op,
                "refused through the mount: {FORKS_DIR}/ holds the forks and nothing else; make \
                 one with `wardfs fork NAME`, remove one with `wardfs fork rm NAME`"
            );
        }
        Errno::EPERM
    }
}

impl Tree for Top {
    fn lookup(&self, parent: u64, name: &OsStr) -> Res<Entry> {
        if parent == FORKS_INO {
            return self.lookup_fork(name);
        }
        self.lookup_top(name)
    }

    fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
    }

    /// The forks' directory, whose attributes the kernel must not keep (see [`Top::ttl_of`]),
    /// and a local zone's or fork's root the kernel looked up: it looks them up when it needs
    /// them.
    fn held(&self, ino: u64) -> bool {
        ino == FORKS_INO || self.inodes.get(ino).is_some()
    }

    fn getattr(&self, ino: u64, _fh: Option<u64>) -> Res<Entry> {
        Ok(Entry::new(self.attr(ino), Top::ttl_of(ino)))
    }

    fn setattr(&self, _who: &Caller, ino: u64, _change: SetAttr) -> Res<Entry> {
        Err(if ino == FORKS_INO {
            Errno::EPERM
        } else {
            Errno::ENOENT
        })
    }

    fn readlink(&self, _ino: u64) -> Res<Vec<u8>> {
        Err(Errno::ENOENT)
    }

    fn mknod(&self, _w: &Caller, parent: u64, _n: &OsStr, _m: u32, _r: u32) -> Res<Entry> {
        Err(self.refuse(parent, "mknod"))
    }

    fn mkdir(&self, _who: &Caller, parent: u64, _name: &OsStr, _mode: u32) -> Res<Entry> {
        Err(self.refuse(parent, "mkdir"))
    }

    fn symlink(&self, _who: &Caller, parent: u64, _name: &OsStr, _target: &Path) -> Res<Entry> {
        Err(self.refuse(parent, "symlink"))
    }

    fn link(&self, _who: &Caller, _ino: u64, newparent: u64, _name: &OsStr) -> Res<Entry> {
        Err(self.refuse(newparent, "link"))
    }

    fn create(
        &self,
        _who: &Caller,
        parent: u64,
        _name: &OsStr,
        _mode: u32,
        _flags: i32,
        _register: RegisterBacking,
    ) -> Res<(Entry, Opened)> {
        Err(self.refuse(parent, "create"))
    }

    fn remove(&self, _who: &Caller, parent: u64, _name: &OsStr, dir: bool) -> Res<()> {
        Err(self.refuse(parent, if dir { "rmdir" } else { "unlink" }))
    }

    fn rename(
        &self,
        _who: &Caller,
        from: (u64, &OsStr),
        to: (u64, &OsStr),
        _mode: RenameMode,
    ) -> Res<()> {
        let virtual_parent = if Top::owns(from.0) { from.0 } else { to.0 };
        Err(self.refuse(virtual_parent, "rename"))
    }

    fn list(&self, ino: u64) -> Res<DirEntries> {
        Ok(if ino == FORKS_INO {
            self.list_forks()
        } else {
            self.list_top()
        })
    }

    /// The workspace's file system (the cache's when the workspace is in a sandbox).
    fn statfs(&self, _ino: u64) -> Res<StatFs> {
        let i = [ZoneId::Workspace, ZoneId::Cache]
            .into_iter()
            .find_map(|id| self.inodes.get(zone_ino(id)))
            .ok_or(Errno::ENOENT)?;
        let s = self.zones.node_statfs(&i).map_err(errno)?;
        Ok(StatFs::from(&s))
    }

    fn access(&self, _ino: u64, _write: bool) -> Res<()> {
        Ok(())
    }

    fn set_xattr(&self, _w: &Caller, _i: u64, _n: &OsStr, _v: Option<(&[u8], i32)>) -> Res<()> {
        Err(Errno::ENOENT)
    }
}

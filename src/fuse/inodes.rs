//! The inode table: FUSE inode numbers ↔ open `O_PATH` descriptors of backing files.
//!
//! Every inode the kernel knows about holds an `O_PATH | O_NOFOLLOW` fd of its backing file, opened
//! one name at a time beneath its parent's fd (the kernel resolves paths in the mount; we only ever
//! open a single component), so no lookup can leave a zone. Numbers are assigned per backing
//! `(st_dev, st_ino)` and kept for the life of the mount, so hard links share an inode and a file
//! looked up again after `forget` gets the number it had before.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};

use rustix::fs::{AtFlags, FileType, Stat};

use crate::core::ZoneId;

/// The top-level directory holding the zones.
pub const ROOT_INO: u64 = 1;

/// Returns the fixed inode number of a zone root.
pub fn zone_ino(z: ZoneId) -> u64 {
    match z {
        ZoneId::Cache => 2,
        ZoneId::Workspace => 3,
    }
}

/// One backing file the kernel holds a reference to.
#[derive(Debug)]
pub struct Inode {
    pub ino: u64,
    pub zone: ZoneId,
    pub fd: OwnedFd,
    pub kind: FileType,
    pub dev: u64,
    nlookup: AtomicU64,
    /// The kernel wants one backing file per inode for passthrough: shared by all open handles.
    pub backing: Mutex<Weak<fuser::BackingId>>,
}

impl Inode {
    /// Returns `/proc/self/fd/N`, which reopens the backing file with new flags.
    pub fn proc_path(&self) -> String {
        format!("/proc/self/fd/{}", self.fd.as_raw_fd())
    }

    /// Stats the backing file (never following a symlink).
    pub fn stat(&self) -> rustix::io::Result<Stat> {
        rustix::fs::statat(
            &self.fd,
            "",
            AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        )
    }
}

/// The table of live inodes.
#[derive(Default)]
pub struct Inodes {
    live: RwLock<HashMap<u64, Arc<Inode>>>,
    numbers: Mutex<HashMap<(u64, u64), u64>>,
    next: AtomicU64,
}

impl Inodes {
    pub fn new() -> Inodes {
        Inodes {
            next: AtomicU64::new(16),
            ..Default::default()
        }
    }

    /// Registers a zone root (never forgotten).
    pub fn add_zone_root(&self, zone: ZoneId, fd: OwnedFd) -> rustix::io::Result<()> {
        let st = rustix::fs::fstat(&fd)?;
        let ino = zone_ino(zone);
        self.numbers
            .lock()
            .expect("not poisoned")
            .insert((st.st_dev, st.st_ino), ino);
        self.live.write().expect("not poisoned").insert(
            ino,
            Arc::new(Inode {
                ino,
                zone,
                fd,
                kind: FileType::Directory,
                dev: st.st_dev,
                nlookup: AtomicU64::new(1),
                backing: Mutex::new(Weak::new()),
            }),
        );
        Ok(())
    }

    /// Returns a live inode.
    pub fn get(&self, ino: u64) -> Option<Arc<Inode>> {
        self.live.read().expect("not poisoned").get(&ino).cloned()
    }

    /// Returns the number for a backing file, assigning one if it has none.
    pub fn number_of(&self, dev: u64, backing_ino: u64) -> u64 {
        *self
            .numbers
            .lock()
            .expect("not poisoned")
            .entry((dev, backing_ino))
            .or_insert_with(|| self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// Returns the number of a backing file if the kernel may know it.
    pub fn known_number(&self, dev: u64, backing_ino: u64) -> Option<u64> {
        self.numbers
            .lock()
            .expect("not poisoned")
            .get(&(dev, backing_ino))
            .copied()
    }

    /// Records one kernel lookup of the backing file behind `fd` (whose stat is `st`); returns its
    /// inode. A second fd for an inode already live is dropped.
    pub fn remember(&self, zone: ZoneId, fd: OwnedFd, st: &Stat) -> Arc<Inode> {
        let ino = self.number_of(st.st_dev, st.st_ino);
        let mut live = self.live.write().expect("not poisoned");
        if let Some(existing) = live.get(&ino) {
            existing.nlookup.fetch_add(1, Ordering::Relaxed);
            return existing.clone();
        }
        let inode = Arc::new(Inode {
            ino,
            zone,
            fd,
            kind: FileType::from_raw_mode(st.st_mode),
            dev: st.st_dev,
            nlookup: AtomicU64::new(1),
            backing: Mutex::new(Weak::new()),
        });
        live.insert(ino, inode.clone());
        inode
    }

    /// Drops `n` kernel references; the fd is closed when none remain (zone roots stay).
    pub fn forget(&self, ino: u64, n: u64) {
        if ino <= 3 {
            return;
        }
        let mut live = self.live.write().expect("not poisoned");
        if let Some(inode) = live.get(&ino) {
            let prev = inode.nlookup.fetch_sub(
                n.min(inode.nlookup.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            if prev <= n {
                live.remove(&ino);
            }
        }
    }
}

//! The mount's open files, and the writers without one.
//!
//! A [`Handle`] is an open file: the daemon's own descriptor, who opened it, what was written
//! through it (journaled once, at release). In the cached I/O mode, when every zone is local and
//! writable, the kernel is told not to send `OPEN` at all: reads and writes then arrive with file
//! handle 0, and a file written that way has an *implicit writer* ([`ImplicitWriters`]), a handle
//! the mount opens on the first write. No `RELEASE` ever ends it, so it ends when it has not
//! written for [`IMPLICIT_IDLE_MS`] (a thread looks every 100 ms), or when its name is removed
//! or replaced through the mount; ending it journals its writes and tells the watcher the writes
//! were the mount's own ([`crate::core::own`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use fuser::BackingId;
use fuser::Errno;
use rustix::fs::OFlags;

use super::inodes::Inode;
use crate::core::node::io as node_io;
use crate::core::Zones;
use crate::state::Origin;

/// How long an implicit writer may go without writing before it ends (journaled).
pub(super) const IMPLICIT_IDLE_MS: u64 = 200;

/// Milliseconds since the first call, on a monotonic clock.
pub(super) fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// An open file.
pub(super) struct Handle {
    /// The kernel's handle of it (0: an implicit writer, or a file read without `OPEN`).
    pub(super) fh: u64,
    /// The daemon's own descriptor, for the calls the kernel does not pass through (fsync, lseek,
    /// fallocate, …): opened with the caller's flags, at open or on first use.
    pub(super) file: OnceLock<std::fs::File>,
    pub(super) flags: OFlags,
    pub(super) inode: Arc<Inode>,
    pub(super) backing: Option<Arc<BackingId>>,
    pub(super) writable: bool,
    /// Who opened the file: the journal entry written at release names them.
    pub(super) origin: Origin,
    pub(super) written: AtomicU64,
    pub(super) dirty: AtomicBool,
    /// The backing file's `(st_dev, st_ino)` when open for writing (counted in [`OwnChanges`]).
    pub(super) writer_key: Option<(u64, u64)>,
    /// An implicit writer ([`ImplicitWriters`]): its backing `(st_dev, st_ino)`, when it last
    /// wrote (milliseconds on [`now_ms`]'s clock), and the file's size after that write
    /// (`u64::MAX`: not known).
    pub(super) implicit: Option<((u64, u64), AtomicU64, AtomicU64)>,
    /// Starts the disk writeback of long sequential writes early ([`node_io::WriteBehind`]).
    pub(super) behind: node_io::WriteBehind,
}

impl Handle {
    /// An open file of `inode`, read-only and unwritten until the caller says otherwise.
    pub(super) fn new(
        inode: Arc<Inode>,
        file: Option<std::fs::File>,
        flags: OFlags,
        origin: Origin,
    ) -> Handle {
        Handle {
            fh: 0,
            file: file.map(OnceLock::from).unwrap_or_default(),
            flags,
            inode,
            backing: None,
            writable: false,
            origin,
            written: AtomicU64::new(0),
            dirty: AtomicBool::new(false),
            writer_key: None,
            implicit: None,
            behind: node_io::WriteBehind::default(),
        }
    }

    /// For an implicit writer, marks a write as under way until the guard is dropped (after
    /// [`Handle::wrote`] noted it): the watcher waits for it before calling the change someone
    /// else's, which would drop the kernel's cache of the file being written.
    pub(super) fn writing<'z>(&self, zones: &'z Zones) -> Option<crate::core::own::Writing<'z>> {
        self.implicit
            .as_ref()
            .map(|(key, _, _)| zones.own().writing(*key))
    }

    /// Counts a change made through the handle. An implicit writer also notes when, and the
    /// file as it left it: the watcher then takes a change by anyone else for theirs.
    pub(super) fn wrote(&self, zones: &Zones) {
        self.dirty.store(true, Ordering::Relaxed);
        if let Some((_, touched, size)) = &self.implicit {
            touched.store(now_ms(), Ordering::Relaxed);
            if let Some(st) = self.file.get().and_then(|f| node_io::stat(f).ok()) {
                zones.own().note(&st);
                size.store(st.st_size as u64, Ordering::Relaxed);
            }
        }
    }

    /// The daemon's descriptor of the file, opened now with `reopen` if the handle has none yet.
    pub(super) fn file(
        &self,
        reopen: impl FnOnce(&Inode, OFlags) -> Result<std::os::fd::OwnedFd, Errno>,
    ) -> Result<&std::fs::File, Errno> {
        if let Some(f) = self.file.get() {
            return Ok(f);
        }
        let f = std::fs::File::from(reopen(&self.inode, self.flags)?);
        Ok(self.file.get_or_init(|| f))
    }

    /// An implicit writer of `inode` through `file` (its backing file `key`), writing now.
    pub(super) fn implicit(
        inode: Arc<Inode>,
        file: std::fs::File,
        flags: OFlags,
        origin: Origin,
        key: (u64, u64),
    ) -> Handle {
        Handle {
            writable: true,
            implicit: Some((key, AtomicU64::new(now_ms()), AtomicU64::new(u64::MAX))),
            ..Handle::new(inode, Some(file), flags, origin)
        }
    }
}

/// The implicit writers, by inode number (see the module's doc).
#[derive(Default)]
pub(super) struct ImplicitWriters {
    by_ino: Mutex<HashMap<u64, Arc<Handle>>>,
}

impl ImplicitWriters {
    /// The implicit writer of inode `ino`, if it has one.
    pub(super) fn get(&self, ino: u64) -> Option<Arc<Handle>> {
        self.by_ino.lock().expect("not poisoned").get(&ino).cloned()
    }

    /// The implicit writer of inode `ino`: the one it has, else the one `make` makes now (under
    /// the table's lock, so of two first writes at once one registers and both use it).
    pub(super) fn get_or_add(&self, ino: u64, make: impl FnOnce() -> Handle) -> Arc<Handle> {
        let mut by_ino = self.by_ino.lock().expect("not poisoned");
        by_ino
            .entry(ino)
            .or_insert_with(|| Arc::new(make()))
            .clone()
    }

    /// Ends the implicit writer of inode `ino`, if it has one (its name is being removed or
    /// replaced): journaled under the name it is leaving.
    pub(super) fn end(&self, zones: &Zones, ino: u64) {
        let h = self.by_ino.lock().expect("not poisoned").remove(&ino);
        if let Some(h) = h {
            end_implicit(zones, &h);
        }
    }

    /// Ends every implicit writer (the file system is going).
    pub(super) fn end_all(&self, zones: &Zones) {
        let all: Vec<Arc<Handle>> = self
            .by_ino
            .lock()
            .expect("not poisoned")
            .drain()
            .map(|(_, h)| h)
            .collect();
        for h in all {
            end_implicit(zones, &h);
        }
    }

    /// Takes out the writers that have not written for [`IMPLICIT_IDLE_MS`] at `now` (on
    /// [`now_ms`]'s clock).
    fn take_idle(&self, now: u64) -> Vec<Arc<Handle>> {
        let mut by_ino = self.by_ino.lock().expect("not poisoned");
        let idle: Vec<u64> = by_ino
            .iter()
            .filter(|(_, h)| {
                h.implicit.as_ref().is_some_and(|(_, t, _)| {
                    now.saturating_sub(t.load(Ordering::Relaxed)) >= IMPLICIT_IDLE_MS
                })
            })
            .map(|(k, _)| *k)
            .collect();
        idle.iter().filter_map(|k| by_ino.remove(k)).collect()
    }

    /// Starts the thread that ends idle writers every 100 ms, until `writers` is dropped.
    pub(super) fn spawn_ender(
        writers: &Arc<ImplicitWriters>,
        zones: Arc<Zones>,
    ) -> std::io::Result<()> {
        let weak = Arc::downgrade(writers);
        std::thread::Builder::new()
            .name("wardfs-writers".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(100));
                let Some(writers) = weak.upgrade() else {
                    return;
                };
                for h in writers.take_idle(now_ms()) {
                    end_implicit(&zones, &h);
                }
            })?;
        Ok(())
    }
}

/// Ends an implicit writer: journals its writes. The file as each write left it was noted then
/// ([`Handle::wrote`]); its state now is not noted, as a change beside the mount since the last
/// write must stay someone else's.
fn end_implicit(zones: &Zones, h: &Handle) {
    let Some(((dev, ino), _, size)) = &h.implicit else {
        return;
    };
    if h.dirty.load(Ordering::Relaxed) {
        let size = Some(size.load(Ordering::Relaxed)).filter(|s| *s != u64::MAX);
        zones.node_record_write(&h.inode, size, h.origin);
    }
    zones.own().write_done(*dev, *ino, None);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ZoneId;
    use crate::fuse::inodes::{zone_ino, Inodes};
    use rustix::fs::Mode;

    /// An inode to write (the root of a zone in a temporary directory).
    fn inode() -> (tempfile::TempDir, Arc<Inode>) {
        let dir = tempfile::tempdir().unwrap();
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(dir.path(), flags, Mode::empty()).unwrap();
        let st = rustix::fs::fstat(&fd).unwrap();
        let inodes = Inodes::new();
        inodes.add_zone_root(ZoneId::Workspace, fd, &st);
        let i = inodes.get(zone_ino(ZoneId::Workspace)).unwrap();
        (dir, i)
    }

    /// An implicit writer of `i` that last wrote at `last` (on [`now_ms`]'s clock).
    fn writer(i: &Arc<Inode>, last: u64) -> Handle {
        let f = std::fs::File::open("/dev/null").unwrap();
        let h = Handle::implicit(i.clone(), f, OFlags::WRONLY, Origin::INTERNAL, (0, 1));
        h.implicit
            .as_ref()
            .unwrap()
            .1
            .store(last, Ordering::Relaxed);
        h
    }

    #[test]
    fn writers_idle_for_the_idle_time_are_taken_out_and_the_others_stay() {
        let (_dir, i) = inode();
        let w = ImplicitWriters::default();
        w.get_or_add(1, || writer(&i, 1_000));
        w.get_or_add(2, || writer(&i, 1_150));
        let idle = w.take_idle(1_000 + IMPLICIT_IDLE_MS);
        assert_eq!(idle.len(), 1);
        assert!(w.get(1).is_none(), "the idle one is out");
        assert!(w.get(2).is_some(), "the other stays");
        assert!(w.take_idle(1_150 + IMPLICIT_IDLE_MS - 1).is_empty());
        assert_eq!(w.take_idle(1_150 + IMPLICIT_IDLE_MS).len(), 1);
        assert!(w.get(2).is_none());
    }

    #[test]
    fn the_first_writer_registered_is_the_one_every_write_uses() {
        let (_dir, i) = inode();
        let w = ImplicitWriters::default();
        let a = w.get_or_add(7, || writer(&i, 5));
        let b = w.get_or_add(7, || panic!("a second writer was made"));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(Arc::ptr_eq(&a, &w.get(7).unwrap()));
    }
}

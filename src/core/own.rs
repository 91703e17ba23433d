//! The changes wardfs made itself, so that a watcher of the backing directories can tell them
//! from changes made beside wardfs.
//!
//! Each change through wardfs (the mount's `node_*` operations, the API's operations, git and
//! mirror pulls) records the changed backing inode's ctime right after it ([`OwnChanges::note`],
//! `Zones::record` for every entry point but the mount, whose operations note with the
//! descriptors they hold); a change whose inode still has that ctime, or that is open for
//! writing through the mount, is wardfs's own ([`OwnChanges::is_own_change`]). The watcher
//! first lets writes and changes of names through the mount that are under way be noted
//! ([`OwnChanges::when_not_writing`], [`OwnChanges::when_not_naming`]). Recording the
//! ctime means querying it, so with multigrain timestamps the next change by anyone else gets a
//! different one. The daemon's watcher (`crate::daemon::watch`) journals the others as
//! `watcher` changes and passes them to the mount to invalidate.
//!
//! Owns only the marks; may not import any adapter.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, Stat};

use super::path::{VPath, ZoneId};

/// Marks older than this are dropped once the table is large (an event that arrives later is
/// treated as someone else's change: one needless invalidation, never a missed one).
const MARK_LIFETIME: Duration = Duration::from_secs(30);
const MARKS_BEFORE_PRUNE: usize = 1 << 16;

/// A backing inode's ctime as the mount left it, and when that was recorded.
struct Mark {
    ctime: (i64, u64),
    at: Instant,
}

/// Backing inodes wardfs changed itself, by `(st_dev, st_ino)`.
#[derive(Default)]
pub struct OwnChanges {
    marks: Mutex<HashMap<(u64, u64), Mark>>,
    /// Open for writing through the mount, with the number of such handles and the virtual path
    /// the file had when last opened: its writes are journaled when the kernel releases the
    /// last handle, which it does after `close` returned, so a checkpoint looks at these too.
    writers: Mutex<HashMap<(u64, u64), Writers>>,
    /// Written through the mount with no handle the kernel closes (the cached I/O mode sends no
    /// `OPEN` or `RELEASE`), and not journaled yet, with the virtual path: a checkpoint looks at
    /// these as at open writers. Unlike those, they do not make every change to the file look
    /// like wardfs's own: each write is noted ([`OwnChanges::note`]) instead.
    pending: Mutex<HashMap<(u64, u64), Option<VPath>>>,
    /// Backing paths wardfs removed (by the API, git or a mirror pull), and when: a later change
    /// beside wardfs to their directory must not make their removal look like someone else's.
    removed: Mutex<HashMap<PathBuf, Instant>>,
    /// Writes through the mount under way, by backing inode: between a write's system call and
    /// its [`OwnChanges::note`] the file is not as wardfs last noted it, yet the change is its own.
    writing: Mutex<HashMap<(u64, u64), u32>>,
    /// Told when a write in [`OwnChanges::writing`] ends.
    written: Condvar,
    /// Changes of names through the mount (a create, `mkdir`, rename, removal, …) begun and
    /// ended: between the system call and its note the entry is not as wardfs last noted it, yet
    /// the change is its own.
    naming: Mutex<(u64, u64)>,
    /// Told when a change in [`OwnChanges::naming`] ends.
    named: Condvar,
}

/// A change of a name through the mount under way ([`OwnChanges::naming`]); ends when dropped,
/// after the change was noted.
pub struct Naming<'a> {
    own: &'a OwnChanges,
}

impl Drop for Naming<'_> {
    fn drop(&mut self) {
        self.own.naming.lock().expect("not poisoned").1 += 1;
        self.own.named.notify_all();
    }
}

/// A write through the mount under way ([`OwnChanges::writing`]); ends when dropped, after the
/// write was noted.
pub struct Writing<'a> {
    own: &'a OwnChanges,
    key: (u64, u64),
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        let mut w = self.own.writing.lock().expect("not poisoned");
        if let Some(n) = w.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                w.remove(&self.key);
            }
        }
        self.own.written.notify_all();
    }
}

/// How long the watcher waits for a write under way to be noted before it takes the change for
/// someone else's (a write takes well under a millisecond; a stuck one costs one invalidation).
const WRITE_NOTE_WAIT: Duration = Duration::from_millis(50);

/// Handles open for writing on one backing inode, and its virtual path at the last open.
type Writers = (u32, Option<VPath>);

fn ctime(st: &Stat) -> (i64, u64) {
    (st.st_ctime, st.st_ctime_nsec)
}

impl OwnChanges {
    /// Records `st` (taken right after a change through wardfs) as wardfs's own.
    pub fn note(&self, st: &Stat) {
        let mut marks = self.marks.lock().expect("not poisoned");
        if marks.len() >= MARKS_BEFORE_PRUNE {
            marks.retain(|_, m| m.at.elapsed() < MARK_LIFETIME);
        }
        marks.insert(
            (st.st_dev, st.st_ino),
            Mark {
                ctime: ctime(st),
                at: Instant::now(),
            },
        );
    }

    /// Records that wardfs removed what was at the backing `path` (and everything beneath it).
    pub fn note_removed(&self, path: PathBuf) {
        let mut removed = self.removed.lock().expect("not poisoned");
        if removed.len() >= MARKS_BEFORE_PRUNE {
            removed.retain(|_, at| at.elapsed() < MARK_LIFETIME);
        }
        removed.insert(path, Instant::now());
    }

    /// Records the entry `name` in `dir` (if it exists) and `dir` itself.
    pub fn note_entry(&self, dir: impl AsFd, name: Option<&OsStr>) {
        let dir = dir.as_fd();
        if let Some(name) = name {
            if let Ok(st) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                self.note(&st);
            }
        }
        if let Ok(st) = rustix::fs::fstat(dir) {
            self.note(&st);
        }
    }

    /// Drops what is recorded of a backing inode the mount has removed: its inode number may be
    /// reused by a file created elsewhere.
    pub fn forget(&self, key: (u64, u64)) {
        self.marks.lock().expect("not poisoned").remove(&key);
    }

    /// Counts a write through the mount to the backing inode `key` as under way until the
    /// returned guard is dropped (which the writer does after noting the file as it left it).
    pub fn writing(&self, key: (u64, u64)) -> Writing<'_> {
        *self
            .writing
            .lock()
            .expect("not poisoned")
            .entry(key)
            .or_default() += 1;
        Writing { own: self, key }
    }

    /// Runs `f` (an `lstat` of the file) once no write through the mount to the backing inode
    /// `key` is under way, waiting at most [`WRITE_NOTE_WAIT`], and with none allowed to start
    /// while it runs: what `f` sees is then as a noted write left it, or someone else's. The
    /// watcher calls it before it takes a change to a file for someone else's.
    pub fn when_not_writing<T>(&self, key: (u64, u64), f: impl FnOnce() -> T) -> T {
        let deadline = Instant::now() + WRITE_NOTE_WAIT;
        let mut w = self.writing.lock().expect("not poisoned");
        while w.contains_key(&key) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            w = self.written.wait_timeout(w, left).expect("not poisoned").0;
        }
        f()
    }

    /// Counts a change of a name through the mount as under way until the returned guard is
    /// dropped (which the mount does after noting the entry as it left it).
    pub fn naming(&self) -> Naming<'_> {
        self.naming.lock().expect("not poisoned").0 += 1;
        Naming { own: self }
    }

    /// Runs `f` (an `lstat` of the entry) once as many changes of names through the mount have
    /// ended as had begun when called, waiting at most [`WRITE_NOTE_WAIT`] (never for one begun
    /// later, so a mount busy making files never holds it up): an entry the mount just made or
    /// removed is then noted. The watcher calls it before it takes a change to an entry for
    /// someone else's.
    pub fn when_not_naming<T>(&self, f: impl FnOnce() -> T) -> T {
        let deadline = Instant::now() + WRITE_NOTE_WAIT;
        let mut n = self.naming.lock().expect("not poisoned");
        let begun = n.0;
        while n.1 < begun {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            n = self.named.wait_timeout(n, left).expect("not poisoned").0;
        }
        drop(n);
        f()
    }

    /// Counts a handle open for writing through the mount, at `path`.
    pub fn writer_opened(&self, dev: u64, ino: u64, path: Option<VPath>) {
        let mut w = self.writers.lock().expect("not poisoned");
        let e = w.entry((dev, ino)).or_default();
        e.0 += 1;
        if path.is_some() {
            e.1 = path;
        }
    }

    /// The paths of `zone` (relative to it) of the files open for writing through the mount:
    /// written, perhaps, but not journaled until released. A checkpoint reads this before the
    /// journal (a release journals, then ends its handle here), so it misses no write.
    pub fn open_writer_paths(&self, zone: ZoneId) -> Vec<String> {
        let mut paths: Vec<String> = self
            .writers
            .lock()
            .expect("not poisoned")
            .values()
            .filter_map(|(_, p)| p.as_ref())
            .filter(|p| p.zone() == zone)
            .map(|p| p.rel().to_string())
            .collect();
        paths.extend(
            self.pending
                .lock()
                .expect("not poisoned")
                .values()
                .flatten()
                .filter(|p| p.zone() == zone)
                .map(|p| p.rel().to_string()),
        );
        paths
    }

    /// Counts a file written through the mount without a handle as written but not journaled
    /// yet, at `path`.
    pub fn write_pending(&self, dev: u64, ino: u64, path: Option<VPath>) {
        self.pending
            .lock()
            .expect("not poisoned")
            .insert((dev, ino), path);
    }

    /// Ends [`OwnChanges::write_pending`] once the writes are journaled; `st`: the file after.
    pub fn write_done(&self, dev: u64, ino: u64, st: Option<&Stat>) {
        if let Some(st) = st {
            self.note(st);
        }
        self.pending
            .lock()
            .expect("not poisoned")
            .remove(&(dev, ino));
    }

    /// Ends a handle counted by [`OwnChanges::writer_opened`]; `st` is the file's state after it.
    pub fn writer_closed(&self, dev: u64, ino: u64, st: Option<&Stat>) {
        if let Some(st) = st {
            self.note(st);
        }
        let mut w = self.writers.lock().expect("not poisoned");
        if let Some((n, _)) = w.get_mut(&(dev, ino)) {
            *n -= 1;
            if *n == 0 {
                w.remove(&(dev, ino));
            }
        }
    }

    /// True when the file `st` describes is open for writing through the mount.
    pub fn has_writer(&self, st: &Stat) -> bool {
        self.writers
            .lock()
            .expect("not poisoned")
            .contains_key(&(st.st_dev, st.st_ino))
    }

    /// True when `st` is as wardfs left it, or the file is open for writing through the mount.
    pub fn is_own(&self, st: &Stat) -> bool {
        let key = (st.st_dev, st.st_ino);
        if self
            .writers
            .lock()
            .expect("not poisoned")
            .contains_key(&key)
        {
            return true;
        }
        self.marks
            .lock()
            .expect("not poisoned")
            .get(&key)
            .is_some_and(|m| m.ctime == ctime(st))
    }

    /// True when the change at the backing `path` was wardfs's own: the entry is as wardfs left
    /// it or, when it is gone, wardfs removed it (or a directory above it), or the nearest
    /// directory above it that still exists is as wardfs left it.
    pub fn is_own_change(&self, path: &Path) -> bool {
        self.is_own_change_at(path, rustix::fs::lstat(path).ok().as_ref())
    }

    /// [`OwnChanges::is_own_change`] with the entry's `lstat` already taken (`None`: gone).
    pub fn is_own_change_at(&self, path: &Path, st: Option<&Stat>) -> bool {
        if let Some(st) = st {
            return self.is_own(st);
        }
        {
            let removed = self.removed.lock().expect("not poisoned");
            if !removed.is_empty()
                && path.ancestors().any(|a| {
                    removed
                        .get(a)
                        .is_some_and(|at| at.elapsed() < MARK_LIFETIME)
                })
            {
                return true;
            }
        }
        let mut at = path.parent();
        while let Some(p) = at {
            if let Ok(st) = rustix::fs::lstat(p) {
                return self.is_own(&st);
            }
            at = p.parent();
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_watcher_waits_for_a_name_change_under_way_and_never_for_one_begun_after_it_looked() {
        let own = Arc::new(OwnChanges::default());
        let guard = own.naming();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let own = own.clone();
            std::thread::spawn(move || own.when_not_naming(|| tx.send(Instant::now()).unwrap()))
        };
        std::thread::sleep(Duration::from_millis(10));
        let ended = Instant::now();
        drop(guard);
        waiter.join().unwrap();
        assert!(
            rx.recv().unwrap() >= ended,
            "looked before the change ended"
        );

        // One begun after the watcher looked is not waited for; one begun before is, up to the
        // bound, and then it looks anyway.
        let first = own.naming();
        let waiter = {
            let own = own.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                own.when_not_naming(|| ());
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(10));
        let _second = own.naming();
        drop(first);
        let waited = waiter.join().unwrap();
        assert!(waited < WRITE_NOTE_WAIT, "{waited:?}");
        let t = Instant::now();
        own.when_not_naming(|| ());
        assert!(t.elapsed() >= WRITE_NOTE_WAIT, "{:?}", t.elapsed());
    }
}

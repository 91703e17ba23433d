//! Keeps the kernel's caches honest: changes made to a backing directory behind the mount's back
//! (an editor on the backing dir, the API, a git pull) invalidate the cached entries and pages.
//!
//! A `notify` watcher (inotify) reports changed paths; a dedicated thread maps each to the inode
//! numbers the kernel may hold and sends `inval_entry`/`inval_inode`. Notifications are never sent
//! from a FUSE request thread, where they can deadlock against the kernel.
//!
//! Changes made through the core's operations (the API) do not wait for inotify: [`Direct`] is
//! registered as the core's [`ChangeListener`] and invalidates on the calling (API worker) thread
//! before the call returns, so a client that wrote through the API and then reads through the
//! mount sees its write.
//!
//! The watcher also sees the mount's *own* changes, which the kernel already knows about;
//! invalidating those would throw away the entries and attributes the kernel has just learned
//! (a `stat` after a `create` would cost a round trip). [`OwnChanges`] records the backing inode's
//! ctime right after each change made through the mount, and the watcher skips an event whose
//! inode still has it (or that is open for writing through the mount, where the kernel does the
//! writes itself). Recording the ctime means querying it, so with multigrain timestamps the next
//! change by anyone else gets a different one. Events that change nothing (opens, reads,
//! `close`) are not watched at all.
//!
//! The same thread evicts entries when the inode table passes its fd budget (see
//! [`super::inodes`]).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fuser::{INodeNo, Notifier};
use notify::{EventKind, RecursiveMode, Watcher};
use rustix::fs::{AtFlags, Stat};

use super::inodes::Inodes;
use crate::core::ChangeListener;

/// Marks older than this are dropped once the table is large (an event that arrives later is
/// treated as someone else's change: one needless invalidation, never a missed one).
const MARK_LIFETIME: Duration = Duration::from_secs(30);
const MARKS_BEFORE_PRUNE: usize = 1 << 16;

/// A backing inode's ctime as the mount left it, and when that was recorded.
struct Mark {
    ctime: (i64, u64),
    at: Instant,
}

/// Backing inodes the mount changed itself, by `(st_dev, st_ino)`.
#[derive(Default)]
pub struct OwnChanges {
    marks: Mutex<HashMap<(u64, u64), Mark>>,
    /// Open for writing through the mount, with the number of such handles.
    writers: Mutex<HashMap<(u64, u64), u32>>,
}

fn ctime(st: &Stat) -> (i64, u64) {
    (st.st_ctime, st.st_ctime_nsec)
}

impl OwnChanges {
    /// Records `st` (taken after a change through the mount) as the mount's own.
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

    /// Counts a handle open for writing through the mount.
    pub fn writer_opened(&self, dev: u64, ino: u64) {
        *self
            .writers
            .lock()
            .expect("not poisoned")
            .entry((dev, ino))
            .or_default() += 1;
    }

    /// Ends a handle counted by [`OwnChanges::writer_opened`]; `st` is the file's state after it.
    pub fn writer_closed(&self, dev: u64, ino: u64, st: Option<&Stat>) {
        if let Some(st) = st {
            self.note(st);
        }
        let mut w = self.writers.lock().expect("not poisoned");
        if let Some(n) = w.get_mut(&(dev, ino)) {
            *n -= 1;
            if *n == 0 {
                w.remove(&(dev, ino));
            }
        }
    }

    /// True when `st` is as the mount left it, or the file is open for writing through it.
    fn is_own(&self, st: &Stat) -> bool {
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
}

/// What the invalidation thread is asked to do.
enum Job {
    /// Something changed at this backing path.
    Changed(PathBuf),
    /// The inode table is over its fd budget.
    Evict,
}

/// Invalidates synchronously for changes made through the core (never a FUSE request thread:
/// the core skips listeners for changes that came through the mount).
pub struct Direct {
    pub inodes: Arc<Inodes>,
    pub notifier: Notifier,
}

impl ChangeListener for Direct {
    fn changed(&self, paths: &[PathBuf]) {
        for p in paths {
            invalidate(&self.inodes, &self.notifier, p);
            invalidate_new_ancestors(&self.inodes, &self.notifier, p);
        }
    }
}

/// A change may have created the directories above `path` (`mkdir -p`): the kernel may hold
/// negative entries for them. Walks up to the first directory the kernel holds and drops its
/// entry for the new one below it.
fn invalidate_new_ancestors(inodes: &Inodes, notifier: &Notifier, path: &Path) {
    let mut cur = path.parent();
    while let Some(dir) = cur {
        if let Some((dev, ino)) = key(dir) {
            if inodes.is_live(dev, ino) {
                break;
            }
            invalidate(inodes, notifier, dir);
        }
        cur = dir.parent();
    }
}

/// A running watcher; dropping it stops the thread.
pub struct Invalidator {
    _watcher: notify::RecommendedWatcher,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Invalidator {
    /// Watches `roots` and invalidates through `notifier`, skipping the mount's `own` changes;
    /// evicts entries when `inodes` passes its budget.
    pub fn start(
        roots: &[PathBuf],
        inodes: Arc<Inodes>,
        own: Arc<OwnChanges>,
        notifier: Notifier,
    ) -> notify::Result<Invalidator> {
        let (tx, rx) = mpsc::channel::<Job>();
        let evict_tx = Mutex::new(tx.clone());
        inodes.set_pressure_hook(Box::new(move || {
            let _ = evict_tx.lock().expect("not poisoned").send(Job::Evict);
        }));
        // Only changes: no IN_OPEN / IN_CLOSE_NOWRITE, which the daemon's own opens of backing
        // files would queue by the thousand (each one a wake-up of the watcher thread).
        let config = notify::Config::default().with_event_kinds(notify::EventKindMask::CORE);
        let mut watcher = notify::RecommendedWatcher::new(
            move |res: notify::Result<notify::Event>| {
                let Ok(ev) = res else { return };
                // Opening, reading and closing change nothing (should the mask let one through).
                if matches!(ev.kind, EventKind::Access(_)) {
                    return;
                }
                for p in ev.paths {
                    let _ = tx.send(Job::Changed(p));
                }
            },
            config,
        )?;
        for r in roots {
            watcher.watch(r, RecursiveMode::Recursive)?;
        }
        let thread = std::thread::Builder::new()
            .name("sandfs-inval".into())
            .spawn(move || {
                let run = |job: Job| match job {
                    Job::Changed(path) => {
                        if !is_own_change(&own, &path) {
                            invalidate(&inodes, &notifier, &path);
                        }
                    }
                    Job::Evict => evict(&inodes, &notifier),
                };
                while let Ok(job) = rx.recv() {
                    run(job);
                    // Coalesce a burst: drain what is already queued.
                    while let Ok(job) = rx.try_recv() {
                        run(job);
                    }
                }
            })
            .map_err(notify::Error::io)?;
        Ok(Invalidator {
            _watcher: watcher,
            thread: Some(thread),
        })
    }
}

impl Drop for Invalidator {
    fn drop(&mut self) {
        // Dropping the watcher closes the channel, which ends the thread.
        if let Some(t) = self.thread.take() {
            drop(t);
        }
    }
}

/// True when the change at `path` was the mount's own: the entry is as the mount left it, or,
/// when it is gone, its directory is.
fn is_own_change(own: &OwnChanges, path: &Path) -> bool {
    match rustix::fs::lstat(path) {
        Ok(st) => own.is_own(&st),
        Err(_) => path
            .parent()
            .and_then(|p| rustix::fs::lstat(p).ok())
            .is_some_and(|st| own.is_own(&st)),
    }
}

/// Drops the least recently used entries from the kernel's cache; it then forgets their inodes.
fn evict(inodes: &Inodes, notifier: &Notifier) {
    let plan: Vec<(u64, OsString)> = inodes.evict_plan();
    let n = plan.len();
    for (parent, name) in plan {
        let _ = notifier.inval_entry(INodeNo(parent), &name);
    }
    tracing::debug!(
        evicted = n,
        live = inodes.live_count(),
        "inode table over its fd budget: dropped least recently used entries from the kernel's cache"
    );
}

fn key(path: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::lstat(path).ok()?;
    Some((st.st_dev, st.st_ino))
}

fn invalidate(inodes: &Inodes, notifier: &Notifier, path: &Path) {
    if let Some((dev, ino)) = key(path) {
        if let Some(n) = inodes.known_number(dev, ino) {
            let _ = notifier.inval_inode(INodeNo(n), 0, 0);
        }
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    if let Some((dev, ino)) = key(parent) {
        if let Some(n) = inodes.known_number(dev, ino) {
            let _ = notifier.inval_entry(INodeNo(n), OsStr::new(name));
            let _ = notifier.inval_inode(INodeNo(n), 0, 0);
        }
    }
}

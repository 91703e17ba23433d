//! Striped per-path locks that serialize replacing a file's contents inside the daemon.
//!
//! `edit` holds the lock of its path from reading the file to renaming the new version in place,
//! and every other replacement takes the same lock for its rename, so no change made through
//! wardfs can slip between an edit's read and its write. Changes from outside the daemon are caught
//! by the fingerprint check in `edit` instead.
//!
//! The mount takes the same locks for its changes, and the kernel holds a directory's lock while
//! it waits for the mount's answer (a rename, say). A thread holding a path lock therefore must
//! not wait for the kernel: telling the mount to drop cached entries does, as it takes that
//! directory's lock. Such work is handed to [`after_unlock`] and runs on the same thread right
//! after it releases its last path lock, before the operation returns.

use std::cell::{Cell, RefCell};
use std::hash::{BuildHasher, Hash};
use std::sync::{Mutex, MutexGuard};

use super::path::VPath;

const STRIPES: usize = 256;

/// A fixed set of mutexes, chosen by the hash of a path.
pub struct PathLocks {
    stripes: Vec<Mutex<()>>,
    hasher: std::collections::hash_map::RandomState,
}

impl PathLocks {
    pub fn new() -> PathLocks {
        PathLocks {
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            hasher: std::collections::hash_map::RandomState::new(),
        }
    }

    fn index(&self, vp: &VPath) -> usize {
        let mut h = self.hasher.build_hasher();
        vp.hash(&mut h);
        (std::hash::Hasher::finish(&h) as usize) % STRIPES
    }

    fn stripe(&self, i: usize) -> MutexGuard<'_, ()> {
        self.stripes[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Locks the stripe of one path.
    pub fn lock(&self, vp: &VPath) -> Held<'_> {
        Held::new([Some(self.stripe(self.index(vp))), None])
    }

    /// Locks the stripes of two paths in a fixed order (no deadlock between two movers).
    pub fn lock_two(&self, a: &VPath, b: &VPath) -> Held<'_> {
        let (ia, ib) = (self.index(a), self.index(b));
        let (lo, hi) = (ia.min(ib), ia.max(ib));
        let first = self.stripe(lo);
        let second = (hi != lo).then(|| self.stripe(hi));
        Held::new([Some(first), second])
    }
}

thread_local! {
    /// Path locks this thread holds.
    static HELD: Cell<usize> = const { Cell::new(0) };
    /// Work waiting for this thread to hold no path lock.
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// One or two held path locks; released on drop, then the work [`after_unlock`] deferred runs
/// once the thread holds none.
pub struct Held<'a> {
    guards: [Option<MutexGuard<'a, ()>>; 2],
}

impl<'a> Held<'a> {
    fn new(guards: [Option<MutexGuard<'a, ()>>; 2]) -> Held<'a> {
        HELD.with(|h| h.set(h.get() + 1));
        Held { guards }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        for g in &mut self.guards {
            drop(g.take());
        }
        let left = HELD.with(|h| {
            let n = h.get().saturating_sub(1);
            h.set(n);
            n
        });
        if left == 0 {
            run_deferred();
        }
    }
}

fn run_deferred() {
    loop {
        let work = DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut()));
        if work.is_empty() {
            return;
        }
        for f in work {
            f();
        }
    }
}

/// Runs `f` now, or, while this thread holds a path lock, right after it releases the last one
/// (on this thread, before the operation that took the lock returns).
pub fn after_unlock(f: impl FnOnce() + 'static) {
    if HELD.with(Cell::get) == 0 {
        f();
    } else {
        DEFERRED.with(|d| d.borrow_mut().push(Box::new(f)));
    }
}

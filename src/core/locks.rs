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
//!
//! The rule is in the types: what may wait for the kernel (every `ChangeListener` method, the
//! mount's invalidation) takes an [`Unlocked`], the proof that the thread holds no path lock,
//! and only [`after_unlock`] makes one.

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

/// The proof that the thread holds no path lock, which work that may wait for the kernel takes
/// (see the module's doc). Made only by [`after_unlock`], and lent, never kept: work that has
/// one may call such code; nothing else can.
pub struct Unlocked {
    _only_after_unlock: (),
}

/// Runs `f` now, or, while this thread holds a path lock, right after it releases the last one
/// (on this thread, before the operation that took the lock returns); either way with the proof
/// that the thread holds none.
pub fn after_unlock(f: impl FnOnce(&Unlocked) + 'static) {
    let proof = || Unlocked {
        _only_after_unlock: (),
    };
    if HELD.with(Cell::get) == 0 {
        f(&proof());
    } else {
        DEFERRED.with(|d| d.borrow_mut().push(Box::new(move || f(&proof()))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ZoneId;
    use std::rc::Rc;

    #[test]
    fn work_after_unlock_runs_at_once_when_no_lock_is_held_and_else_when_the_last_one_goes() {
        let locks = PathLocks::new();
        let path = |n: usize| VPath::new(ZoneId::Workspace, &format!("f{n}")).unwrap();
        // Two paths of different stripes: a stripe's lock is not reentrant.
        let a = path(0);
        let b = (1..)
            .map(path)
            .find(|b| locks.index(b) != locks.index(&a))
            .unwrap();
        let ran = Rc::new(Cell::new(0));
        let r = ran.clone();
        after_unlock(move |_: &Unlocked| r.set(r.get() + 1));
        assert_eq!(ran.get(), 1, "no lock held: at once");

        let outer = locks.lock(&a);
        let inner = locks.lock(&b);
        let r = ran.clone();
        after_unlock(move |_: &Unlocked| r.set(r.get() + 1));
        drop(inner);
        assert_eq!(ran.get(), 1, "one lock still held: not yet");
        drop(outer);
        assert_eq!(ran.get(), 2, "after the last lock, before anything else");
    }
}

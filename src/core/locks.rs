//! Striped per-path locks that serialize replacing a file's contents inside the daemon.
//!
//! `edit` holds the lock of its path from reading the file to renaming the new version in place,
//! and every other replacement takes the same lock for its rename, so no change made through
//! sandfs can slip between an edit's read and its write. Changes from outside the daemon are caught
//! by the fingerprint check in `edit` instead.

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

    /// Locks the stripe of one path.
    pub fn lock(&self, vp: &VPath) -> MutexGuard<'_, ()> {
        self.stripes[self.index(vp)]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Locks the stripes of two paths in a fixed order (no deadlock between two movers).
    pub fn lock_two(
        &self,
        a: &VPath,
        b: &VPath,
    ) -> (MutexGuard<'_, ()>, Option<MutexGuard<'_, ()>>) {
        let (ia, ib) = (self.index(a), self.index(b));
        let lock = |i: usize| self.stripes[i].lock().unwrap_or_else(|p| p.into_inner());
        if ia == ib {
            (lock(ia), None)
        } else if ia < ib {
            let g1 = lock(ia);
            (g1, Some(lock(ib)))
        } else {
            let g2 = lock(ib);
            (lock(ia), Some(g2))
        }
    }
}

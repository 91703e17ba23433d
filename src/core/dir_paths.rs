//! The paths of the directories the mount holds open, remembered until something is renamed.
//!
//! The journal names each change by its path. A node held by name ([`super::node::Node`]) knows
//! its name and its directory; a directory the mount holds by descriptor does not, and its path
//! was read back from `/proc/self/fd` for every change in it (a `readlink` and a parse of the
//! whole path, per file an untar creates, chowns and chmods). A directory's path changes only
//! when it, or a directory above it, is renamed, so the path read once stands until the next
//! rename: every rename through wardfs ([`DirPaths::renamed`] from the store's and the mount's
//! rename), and every directory the watcher sees moved beside wardfs, forgets them all.
//!
//! A path read back before a rename and remembered after it would stand for good, so each
//! reading is tagged with the rename count it started under and kept only when no rename came
//! in between. Between a rename beside wardfs and the watcher's word of it (a few
//! milliseconds), a change in the moved directory is journaled under the old path, as a
//! `readlink` just before the rename would have. At most [`DirPaths::MAX`] paths are kept.
//!
//! Paths are remembered only while the watcher sees every directory of the zones
//! ([`DirPaths::set_seen`]): without it (`journal.watch` off, or a directory it could not
//! watch), a rename beside wardfs would go unnoticed, and each path is read back every time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::node::BackingKey;
use super::path::{VPath, ZoneId};

/// The remembered paths of directories, by zone and backing inode (see the module docs).
#[derive(Debug, Default)]
pub struct DirPaths {
    inner: Mutex<Inner>,
    /// Whether renames beside wardfs are all seen (by the watcher), so paths may be kept.
    seen: AtomicBool,
}

#[derive(Debug, Default)]
struct Inner {
    /// Renames seen so far.
    renames: u64,
    paths: HashMap<(ZoneId, BackingKey), VPath>,
}

/// What a reading of a directory's path started under ([`DirPaths::get`]), to keep it with
/// ([`DirPaths::put`]).
#[derive(Debug, Clone, Copy)]
pub struct Reading(u64);

impl DirPaths {
    /// Paths kept at most; past it they are all forgotten and read again.
    pub const MAX: usize = 4096;

    /// The remembered path of the directory `key` of `zone`, or the reading to start.
    pub fn get(&self, zone: ZoneId, key: BackingKey) -> Result<VPath, Reading> {
        let inner = self.inner.lock().expect("not poisoned");
        match inner.paths.get(&(zone, key)) {
            Some(vp) if self.seen.load(Ordering::Acquire) => Ok(vp.clone()),
            _ => Err(Reading(inner.renames)),
        }
    }

    /// Remembers the path `vp` read for the directory `key` of `zone`, unless something was
    /// renamed since `reading` started.
    pub fn put(&self, zone: ZoneId, key: BackingKey, reading: Reading, vp: &VPath) {
        let mut inner = self.inner.lock().expect("not poisoned");
        if inner.renames != reading.0 || !self.seen.load(Ordering::Acquire) {
            return;
        }
        if inner.paths.len() >= DirPaths::MAX {
            inner.paths.clear();
        }
        inner.paths.insert((zone, key), vp.clone());
    }

    /// Says whether every rename beside wardfs is seen from now on (the watcher watches every
    /// directory of the zones); paths are kept only then, and all forgotten when it stops.
    pub fn set_seen(&self, seen: bool) {
        if !seen {
            self.renamed();
        }
        self.seen.store(seen, Ordering::Release);
    }

    /// Forgets every path: something was renamed (a directory, or a file: a rename does not
    /// say which, and renames are few beside the changes in place).
    pub fn renamed(&self) {
        let mut inner = self.inner.lock().expect("not poisoned");
        inner.renames += 1;
        inner.paths.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vp(rel: &str) -> VPath {
        VPath::new(ZoneId::Workspace, rel).unwrap()
    }

    fn seen() -> DirPaths {
        let d = DirPaths::default();
        d.set_seen(true);
        d
    }

    #[test]
    fn nothing_is_kept_while_renames_beside_may_go_unseen() {
        let d = DirPaths::default();
        let r = d.get(ZoneId::Workspace, (1, 2)).unwrap_err();
        d.put(ZoneId::Workspace, (1, 2), r, &vp("a/b"));
        assert!(d.get(ZoneId::Workspace, (1, 2)).is_err());
        d.set_seen(true);
        let r = d.get(ZoneId::Workspace, (1, 2)).unwrap_err();
        d.put(ZoneId::Workspace, (1, 2), r, &vp("a/b"));
        assert!(d.get(ZoneId::Workspace, (1, 2)).is_ok());
        d.set_seen(false); // a directory the watcher could not watch
        assert!(d.get(ZoneId::Workspace, (1, 2)).is_err());
    }

    #[test]
    fn a_path_stands_until_a_rename() {
        let d = seen();
        let r = d.get(ZoneId::Workspace, (1, 2)).unwrap_err();
        d.put(ZoneId::Workspace, (1, 2), r, &vp("a/b"));
        assert_eq!(d.get(ZoneId::Workspace, (1, 2)).unwrap(), vp("a/b"));
        assert!(d.get(ZoneId::Cache, (1, 2)).is_err(), "kept by zone");
        d.renamed();
        assert!(d.get(ZoneId::Workspace, (1, 2)).is_err());
    }

    #[test]
    fn a_reading_that_a_rename_overtook_is_not_kept() {
        let d = seen();
        let r = d.get(ZoneId::Workspace, (1, 2)).unwrap_err();
        d.renamed(); // between the readlink and the put
        d.put(ZoneId::Workspace, (1, 2), r, &vp("old"));
        assert!(d.get(ZoneId::Workspace, (1, 2)).is_err());
    }

    #[test]
    fn kept_paths_are_bounded() {
        let d = seen();
        for i in 0..DirPaths::MAX as u64 + 10 {
            let r = d.get(ZoneId::Workspace, (1, i)).unwrap_err();
            d.put(ZoneId::Workspace, (1, i), r, &vp("a"));
        }
        assert!(d.inner.lock().unwrap().paths.len() <= DirPaths::MAX);
    }
}

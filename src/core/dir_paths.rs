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
//! Each path is kept on the directory's own node ([`Remembered`]), never in a table by inode
//! number: the node holds the directory open, so its inode cannot be another directory's while
//! the path is kept, whereas a number is reused as soon as a removed directory is forgotten (a
//! table by number named a new directory's changes by the removed one's path).
//!
//! A path read back before a rename and remembered after it would stand for good, so each
//! reading is tagged with the rename count it started under and served only while no rename
//! came since. Between a rename beside wardfs and the watcher's word of it (a few
//! milliseconds), a change in the moved directory is journaled under the old path, as a
//! `readlink` just before the rename would have.
//!
//! Paths are remembered only while the watcher sees every directory of the zones
//! ([`DirPaths::set_seen`]): without it (`journal.watch` off, or a directory it could not
//! watch), a rename beside wardfs would go unnoticed, and each path is read back every time.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::path::VPath;

/// The rename count and whether renames beside wardfs are seen (see the module docs); the
/// paths themselves are on the nodes ([`Remembered`]).
#[derive(Debug, Default)]
pub struct DirPaths {
    /// Renames seen so far.
    renames: AtomicU64,
    /// Whether renames beside wardfs are all seen (by the watcher), so paths may be kept.
    seen: AtomicBool,
}

/// A directory node's remembered path, with the rename count it was read under.
#[derive(Debug, Default)]
pub struct Remembered(Mutex<Option<(u64, VPath)>>);

/// What a reading of a directory's path started under ([`DirPaths::get`]), to keep it with
/// ([`DirPaths::put`]).
#[derive(Debug, Clone, Copy)]
pub struct Reading(u64);

impl DirPaths {
    /// The path remembered in `slot`, when no rename came since it was read; else the reading
    /// to start.
    pub fn get(&self, slot: &Remembered) -> Result<VPath, Reading> {
        let now = self.renames.load(Ordering::Acquire);
        if !self.seen.load(Ordering::Acquire) {
            return Err(Reading(now));
        }
        match &*slot.0.lock().expect("not poisoned") {
            Some((at, vp)) if *at == now => Ok(vp.clone()),
            _ => Err(Reading(now)),
        }
    }

    /// Remembers in `slot` the path `vp`, read under `reading`: served only until the next
    /// rename, so one that came in between already makes it stale.
    pub fn put(&self, slot: &Remembered, reading: Reading, vp: &VPath) {
        if self.seen.load(Ordering::Acquire) {
            *slot.0.lock().expect("not poisoned") = Some((reading.0, vp.clone()));
        }
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
        self.renames.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::super::path::ZoneId;
    use super::*;

    fn vp(rel: &str) -> VPath {
        VPath::new(ZoneId::Workspace, rel).unwrap()
    }

    fn seen() -> DirPaths {
        let d = DirPaths::default();
        d.set_seen(true);
        d
    }

    /// Reads `slot` as the mount does: the remembered path, or `rel` read back and kept.
    fn read(d: &DirPaths, slot: &Remembered, rel: &str) -> VPath {
        d.get(slot).unwrap_or_else(|r| {
            d.put(slot, r, &vp(rel));
            vp(rel)
        })
    }

    #[test]
    fn nothing_is_kept_while_renames_beside_may_go_unseen() {
        let (d, slot) = (DirPaths::default(), Remembered::default());
        read(&d, &slot, "a/b");
        assert!(d.get(&slot).is_err());
        d.set_seen(true);
        read(&d, &slot, "a/b");
        assert_eq!(d.get(&slot).unwrap(), vp("a/b"));
        d.set_seen(false); // a directory the watcher could not watch
        assert!(d.get(&slot).is_err());
        d.set_seen(true);
        assert!(d.get(&slot).is_err(), "read again after a time unseen");
    }

    #[test]
    fn a_path_stands_until_a_rename() {
        let (d, slot) = (seen(), Remembered::default());
        read(&d, &slot, "a/b");
        assert_eq!(d.get(&slot).unwrap(), vp("a/b"));
        d.renamed();
        assert!(d.get(&slot).is_err());
        read(&d, &slot, "c/b");
        assert_eq!(d.get(&slot).unwrap(), vp("c/b"));
    }

    #[test]
    fn a_reading_that_a_rename_overtook_is_not_served() {
        let (d, slot) = (seen(), Remembered::default());
        let r = d.get(&slot).unwrap_err();
        d.renamed(); // between the readlink and the put
        d.put(&slot, r, &vp("old"));
        assert!(d.get(&slot).is_err());
    }

    #[test]
    fn each_directory_keeps_its_own_path() {
        let d = seen();
        let (one, other) = (Remembered::default(), Remembered::default());
        read(&d, &one, "a");
        assert!(d.get(&other).is_err(), "a new node reads its own path");
        read(&d, &other, "b");
        assert_eq!(d.get(&one).unwrap(), vp("a"));
        assert_eq!(d.get(&other).unwrap(), vp("b"));
    }
}

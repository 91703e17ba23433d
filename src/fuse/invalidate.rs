//! Keeps the kernel's caches honest: changes made to a backing directory behind the mount's back
//! (an editor on the backing dir, the API, a git pull) invalidate the cached entries and pages.
//!
//! [`Direct`] is registered as the core's [`ChangeListener`]. Changes made through the core's
//! operations (the API, git, mirror) reach it on the calling thread before the call returns, so
//! a client that wrote through the API and then reads through the mount sees its write. Changes
//! made beside wardfs reach it from the daemon's watcher (`crate::daemon::watch`), which skips
//! the changes wardfs made itself ([`crate::core::own`]) and journals the rest. Notifications are
//! never sent from a FUSE request thread, where they can deadlock against the kernel.
//!
//! No notification tells the watchers on the mount (inotify) of a change: before it drops the
//! kernel's caches, [`Direct`] plans each change's echo through the mount (`super::echo`, from
//! what the kernel holds still) and queues it once they are dropped.
//!
//! The [`Evictor`] thread drops entries when the inode table passes its fd budget (see
//! [`super::inodes`]).
//!
//! May not import `api`, `git`, `sandbox` or `daemon`.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use fuser::{INodeNo, Notifier};

use super::echo::{Echo, Echoes, Reported};
use super::inodes::Inodes;
use crate::core::{ChangeListener, Unlocked, Zones};

/// Invalidates synchronously for changes made through the core and beside it (never on a FUSE
/// request thread: the core skips listeners for changes that came through the mount), and has
/// each change echoed through the mount for its watchers.
pub struct Direct {
    pub inodes: Arc<Inodes>,
    pub notifier: Notifier,
    pub echo: Arc<Echoes>,
    /// Weak: the zones hold this listener.
    pub zones: Weak<Zones>,
}

impl Direct {
    /// The echoes of the changes at `paths`, planned from what the kernel knows before its
    /// caches are dropped.
    fn plan(&self, paths: &[PathBuf], reported: Reported) -> Vec<Echo> {
        match self.zones.upgrade() {
            Some(zones) => self.echo.plan(&self.inodes, &zones, paths, reported),
            None => Vec::new(),
        }
    }
}

impl ChangeListener for Direct {
    /// `paths` are the changed entry, and for a move its destination after it.
    fn changed(&self, paths: &[PathBuf], _unlocked: &Unlocked) {
        let echoes = self.plan(paths, Reported::ByCore);
        for p in paths {
            invalidate(&self.inodes, &self.notifier, p);
            invalidate_new_ancestors(&self.inodes, &self.notifier, p);
        }
        self.echo.send(echoes);
    }

    fn changed_beside(&self, paths: &[PathBuf], _unlocked: &Unlocked) {
        let echoes = self.plan(paths, Reported::Beside);
        for p in paths {
            invalidate(&self.inodes, &self.notifier, p);
        }
        self.echo.send(echoes);
    }

    fn forks_changed(&self, name: &str, _unlocked: &Unlocked) {
        let forks = INodeNo(super::inodes::FORKS_INO);
        let _ = self.notifier.inval_entry(forks, OsStr::new(name));
        let _ = self.notifier.inval_inode(forks, 0, 0);
    }
}

/// A change may have created the directories above `path` (`mkdir -p`): the kernel may hold
/// negative entries for them, and their parents' listings without them. Walks up to the first
/// directory the kernel held before the change ([`held_before`]) and drops its entry for the new
/// one below it.
fn invalidate_new_ancestors(inodes: &Inodes, notifier: &Notifier, path: &Path) {
    let mut cur = path.parent();
    while let Some(dir) = cur {
        if let Some((dev, ino)) = key(dir) {
            if held_before(inodes, (dev, ino), dir) {
                break;
            }
            invalidate(inodes, notifier, dir);
        }
        cur = dir.parent();
    }
}

/// How long after its birth a directory may be one a change being invalidated made.
const NEW_FOR: Duration = Duration::from_secs(2);

/// True when the kernel held the directory `dir` (backing key `key`) before the change: a
/// zone's root, or a directory older than [`NEW_FOR`] that the kernel knows by that name in its
/// parent as a live inode of that number. Neither a live number nor a known name is enough for
/// a directory the change made: the backing filesystem gives a removed directory's inode number
/// to the next one made (and the kernel may not have forgotten the removed one yet), and the
/// echo may look the new one up meanwhile, which leaves its parent's cached listing without it.
fn held_before(inodes: &Inodes, key: (u64, u64), dir: &Path) -> bool {
    if !inodes.is_live(key.0, key.1) {
        return false;
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return true;
    };
    let parents = self::key(parent).map_or_else(Vec::new, |(d, i)| inodes.known_numbers(d, i));
    if parents.is_empty() {
        return true;
    }
    if born_within(dir, NEW_FOR).unwrap_or(false) {
        return false;
    }
    let numbers = inodes.known_numbers(key.0, key.1);
    parents.iter().any(|p| {
        inodes
            .named(*p, name)
            .is_some_and(|(n, _)| numbers.contains(&n))
    })
}

/// Whether `dir` was made within `age`, by its birth time; `None` when its filesystem keeps none.
fn born_within(dir: &Path, age: Duration) -> Option<bool> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        dir,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BTIME,
    )
    .ok()?;
    if st.stx_mask & StatxFlags::BTIME.bits() == 0 {
        return None;
    }
    let born = std::time::UNIX_EPOCH
        + Duration::new(
            u64::try_from(st.stx_btime.tv_sec).ok()?,
            st.stx_btime.tv_nsec,
        );
    Some(
        std::time::SystemTime::now()
            .duration_since(born)
            .map_or(true, |a| a < age),
    )
}

/// The thread that evicts entries when the inode table is over its fd budget; it ends with the
/// inode table.
pub struct Evictor {
    _thread: std::thread::JoinHandle<()>,
}

impl Evictor {
    /// Evicts through `notifier` whenever `inodes` passes its budget.
    pub fn start(inodes: Arc<Inodes>, notifier: Notifier) -> std::io::Result<Evictor> {
        let (tx, rx) = mpsc::channel::<()>();
        let tx = Mutex::new(tx);
        inodes.set_pressure_hook(Box::new(move || {
            let _ = tx.lock().expect("not poisoned").send(());
        }));
        let thread = std::thread::Builder::new()
            .name("wardfs-evict".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    // Coalesce a burst: one eviction serves what is already queued.
                    while rx.try_recv().is_ok() {}
                    evict(&inodes, &notifier);
                }
            })?;
        // The pressure hook holds the sender: the thread ends with the inode table.
        Ok(Evictor { _thread: thread })
    }
}

/// Drops entries from the kernel's cache (the newest files first, see [`Inodes::evict_plan`]); it
/// then forgets their inodes.
fn evict(inodes: &Inodes, notifier: &Notifier) {
    let plan: Vec<(u64, OsString)> = inodes.evict_plan();
    let n = plan.len();
    for (parent, name) in plan {
        let _ = notifier.inval_entry(INodeNo(parent), &name);
    }
    tracing::debug!(
        evicted = n,
        live = inodes.live_count(),
        pinned = inodes.pinned_count(),
        "inode table over its fd budget: dropped the newest entries from the kernel's cache"
    );
}

fn key(path: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::lstat(path).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// Drops the kernel's cache of the file at the backing path `path` and of its entry, in every
/// zone that has one: a file a fork shares with its parent (a hard link) is an inode in each.
fn invalidate(inodes: &Inodes, notifier: &Notifier, path: &Path) {
    if let Some((dev, ino)) = key(path) {
        for n in inodes.known_numbers(dev, ino) {
            let _ = notifier.inval_inode(INodeNo(n), 0, 0);
        }
    }
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    if let Some((dev, ino)) = key(parent) {
        for n in inodes.known_numbers(dev, ino) {
            let _ = notifier.inval_entry(INodeNo(n), OsStr::new(name));
            let _ = notifier.inval_inode(INodeNo(n), 0, 0);
        }
    }
}

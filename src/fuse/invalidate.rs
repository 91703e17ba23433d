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

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};
use notify::{RecursiveMode, Watcher};

use super::inodes::Inodes;
use crate::core::ChangeListener;

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
        }
    }
}

/// A running watcher; dropping it stops the thread.
pub struct Invalidator {
    _watcher: notify::RecommendedWatcher,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Invalidator {
    /// Watches `roots` and invalidates through `notifier`.
    pub fn start(
        roots: &[PathBuf],
        inodes: Arc<Inodes>,
        notifier: Notifier,
    ) -> notify::Result<Invalidator> {
        let (tx, rx) = mpsc::channel::<PathBuf>();
        let mut watcher =
            notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
                if let Ok(ev) = res {
                    for p in ev.paths {
                        let _ = tx.send(p);
                    }
                }
            })?;
        for r in roots {
            watcher.watch(r, RecursiveMode::Recursive)?;
        }
        let thread = std::thread::Builder::new()
            .name("sandfs-inval".into())
            .spawn(move || {
                while let Ok(path) = rx.recv() {
                    invalidate(&inodes, &notifier, &path);
                    // Coalesce a burst: drain what is already queued.
                    while let Ok(p) = rx.try_recv() {
                        invalidate(&inodes, &notifier, &p);
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

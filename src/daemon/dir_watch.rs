//! One inotify descriptor with a watch per directory, for the watcher of the backing directories
//! ([`super::watch`]): [`DirWatch::add`] watches a directory (not recursively), and a thread of
//! its own reads the kernel's events and hands each batch on as the paths they name (a
//! directory's own events as the directory's path), or as "events were lost" when the kernel's
//! queue overflowed.
//!
//! A watch is an entry in two maps, by watch descriptor and by path, so every event costs a
//! lookup whatever the number of watches. The `notify` crate's inotify backend, used here
//! before, looks through every watch for each directory removed (`remove_watch`: a path prefix
//! test per watch): in a workspace of 2,817 directories, untarring and removing 510 of them spent
//! 30 % of the daemon's CPU there, and `rm -rf` of a `node_modules` of 5,000 directories in a
//! workspace of 20,000 would make 100 million such tests. The paths it reports are the same:
//! a directory moved away loses its watches and those beneath it (the watcher watches it again
//! where it arrives), one removed loses its own when the kernel says so (`IN_IGNORED`).
//!
//! Owns the descriptor and its thread; may not be imported by anything but `daemon`.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};
use rustix::event::{EventfdFlags, PollFd, PollFlags};

/// What a watch reports: names made, removed, moved in or out, written or re-attributed in the
/// directory, and the directory's own removal or move. Not opens, reads and closes, which
/// change nothing and which the daemon's own opens of backing files would queue by the
/// thousand. Never through a symlink; only a directory.
const MASK: WatchMask = WatchMask::CREATE
    .union(WatchMask::DELETE)
    .union(WatchMask::MOVED_FROM)
    .union(WatchMask::MOVED_TO)
    .union(WatchMask::MODIFY)
    .union(WatchMask::ATTRIB)
    .union(WatchMask::DELETE_SELF)
    .union(WatchMask::MOVE_SELF)
    .union(WatchMask::DONT_FOLLOW)
    .union(WatchMask::ONLYDIR);

/// The bytes read from the descriptor at once (about 1,000 events with short names).
const READ_BUFFER: usize = 64 * 1024;

/// How long the thread lets events gather after it has read what was there: a burst (an untar
/// through the mount queues about ten events per file) is then read a millisecond's worth at a
/// time, not woken for event by event (a context switch each: 10 % of the daemon's CPU in an
/// untar). Changes beside wardfs and git's monitor hear of a change this much later at most.
const GATHER: std::time::Duration = std::time::Duration::from_millis(1);

/// What the reading thread hands on for each read of the descriptor.
pub(super) struct Batch {
    /// The paths the events name, in the kernel's order (a path may repeat).
    pub paths: Vec<PathBuf>,
    /// The kernel's queue overflowed before these: events were lost.
    pub overflowed: bool,
    /// A directory was moved (from or into a watched one, or a watched one itself): the paths
    /// of what lies beneath it changed.
    pub moved_dir: bool,
}

/// The watched directories.
#[derive(Default)]
struct Dirs {
    by_wd: HashMap<WatchDescriptor, PathBuf>,
    by_path: BTreeMap<PathBuf, WatchDescriptor>,
}

/// The watches and what the reading thread shares of them.
struct Shared {
    watches: Watches,
    dirs: Dirs,
}

/// The watch; dropping it stops the reading thread (and drops its handler) before it returns.
pub(super) struct DirWatch {
    shared: Arc<Mutex<Shared>>,
    /// Written once to stop the thread.
    stop: Arc<OwnedFd>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DirWatch {
    /// A watch with no directory yet, whose thread (named `name`) calls `handle` with each batch.
    pub fn start(
        name: &str,
        handle: impl FnMut(Batch) + Send + 'static,
    ) -> std::io::Result<DirWatch> {
        let inotify = Inotify::init()?;
        let stop = Arc::new(rustix::event::eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?);
        let shared = Arc::new(Mutex::new(Shared {
            watches: inotify.watches(),
            dirs: Dirs::default(),
        }));
        let reader = Reader {
            inotify,
            shared: shared.clone(),
            stop: stop.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || reader.run(handle))?;
        Ok(DirWatch {
            shared,
            stop,
            thread: Some(thread),
        })
    }

    /// Watches the directory `dir` (not what is beneath it). Watching it again, or the same
    /// directory under a new path, is one watch, reported under the latest path.
    pub fn add(&self, dir: &Path) -> std::io::Result<()> {
        let mut s = self.shared.lock().expect("not poisoned");
        let wd = s.watches.add(dir, MASK)?;
        s.dirs.insert(wd, dir.to_path_buf());
        Ok(())
    }

    /// The number of directories watched.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.shared.lock().expect("not poisoned").dirs.by_wd.len()
    }
}

impl Drop for DirWatch {
    fn drop(&mut self) {
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Dirs {
    fn insert(&mut self, wd: WatchDescriptor, dir: PathBuf) {
        if let Some(old) = self.by_wd.insert(wd.clone(), dir.clone()) {
            if old != dir && self.by_path.get(&old) == Some(&wd) {
                self.by_path.remove(&old);
            }
        }
        self.by_path.insert(dir, wd);
    }

    /// The kernel ended the watch `wd` (its directory is gone).
    fn ended(&mut self, wd: &WatchDescriptor) {
        if let Some(dir) = self.by_wd.remove(wd) {
            if self.by_path.get(&dir) == Some(wd) {
                self.by_path.remove(&dir);
            }
        }
    }

    /// Takes out the watches of `dir` and every directory beneath it (a range of the ordered
    /// map: a path's descendants sort right after it).
    fn take_subtree(&mut self, dir: &Path) -> Vec<WatchDescriptor> {
        let beneath: Vec<PathBuf> = self
            .by_path
            .range::<Path, _>((Bound::Included(dir), Bound::Unbounded))
            .map(|(p, _)| p)
            .take_while(|p| p.starts_with(dir))
            .cloned()
            .collect();
        let mut wds = Vec::with_capacity(beneath.len());
        for p in beneath {
            if let Some(wd) = self.by_path.remove(&p) {
                self.by_wd.remove(&wd);
                wds.push(wd);
            }
        }
        wds
    }
}

/// The reading thread's side.
struct Reader {
    inotify: Inotify,
    shared: Arc<Mutex<Shared>>,
    stop: Arc<OwnedFd>,
}

impl Reader {
    fn run(mut self, mut handle: impl FnMut(Batch)) {
        let mut buffer = vec![0u8; READ_BUFFER];
        while self.wait() {
            loop {
                match self.inotify.read_events(&mut buffer) {
                    Ok(events) => {
                        let batch = self.paths_of(events);
                        if !batch.paths.is_empty() || batch.overflowed {
                            handle(batch);
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(GATHER);
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::error!(error = %e, "cannot read the watch of the zones' directories; changes made beside wardfs are no longer seen");
                        return;
                    }
                }
            }
        }
    }

    /// Waits until there are events (true) or the watch is dropped (false).
    fn wait(&self) -> bool {
        loop {
            let mut fds = [
                PollFd::new(&self.inotify, PollFlags::IN),
                PollFd::new(&*self.stop, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) if !fds[1].revents().is_empty() => return false,
                Ok(_) => return true,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::error!(error = %e, "cannot wait on the watch of the zones' directories");
                    return false;
                }
            }
        }
    }

    /// The paths `events` name, keeping the maps in step: a watch the kernel ended is
    /// forgotten, a directory moved away is no longer watched (nor anything beneath it).
    fn paths_of(&self, events: inotify::Events<'_>) -> Batch {
        let mut s = self.shared.lock().expect("not poisoned");
        let mut batch = Batch {
            paths: Vec::new(),
            overflowed: false,
            moved_dir: false,
        };
        let mut unwatch = Vec::new();
        for ev in events {
            if ev.mask.contains(EventMask::Q_OVERFLOW) {
                batch.overflowed = true;
                continue;
            }
            if ev.mask.contains(EventMask::IGNORED) {
                s.dirs.ended(&ev.wd);
                continue;
            }
            let Some(dir) = s.dirs.by_wd.get(&ev.wd) else {
                continue;
            };
            let path = match ev.name {
                Some(name) => dir.join(name),
                None => dir.clone(),
            };
            if ev.mask.contains(EventMask::MOVED_FROM | EventMask::ISDIR) {
                unwatch.extend(s.dirs.take_subtree(&path));
            }
            let dir_moved = ev.mask.contains(EventMask::ISDIR)
                && ev
                    .mask
                    .intersects(EventMask::MOVED_FROM | EventMask::MOVED_TO);
            batch.moved_dir |= dir_moved || ev.mask.contains(EventMask::MOVE_SELF);
            batch.paths.push(path);
        }
        for wd in unwatch {
            // Already ended by the kernel when the directory is gone since: nothing to undo.
            let _ = s.watches.remove(wd);
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    fn started() -> (DirWatch, mpsc::Receiver<Batch>) {
        let (tx, rx) = mpsc::channel();
        let w = DirWatch::start("test-watch", move |b| {
            let _ = tx.send(b);
        })
        .unwrap();
        (w, rx)
    }

    /// Every path reported until `want` is among them (or 5 s pass).
    fn until(rx: &mpsc::Receiver<Batch>, want: &Path) -> Vec<PathBuf> {
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !seen.iter().any(|p: &PathBuf| p == want) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(b) => seen.extend(b.paths),
                Err(_) => panic!("{} not reported; saw {seen:?}", want.display()),
            }
        }
        seen
    }

    #[test]
    fn names_made_written_and_removed_are_reported_as_paths() {
        let d = tempfile::tempdir().unwrap();
        let (w, rx) = started();
        w.add(d.path()).unwrap();
        let f = d.path().join("a.txt");
        std::fs::write(&f, b"x").unwrap();
        until(&rx, &f);
        std::fs::remove_file(&f).unwrap();
        until(&rx, &f);
    }

    #[test]
    fn a_removed_directory_is_forgotten_and_a_moved_one_is_unwatched_with_what_is_beneath() {
        let d = tempfile::tempdir().unwrap();
        let (w, rx) = started();
        let a = d.path().join("a");
        std::fs::create_dir_all(a.join("b/c")).unwrap();
        for p in [
            d.path().to_path_buf(),
            a.clone(),
            a.join("b"),
            a.join("b/c"),
        ] {
            w.add(&p).unwrap();
        }
        assert_eq!(w.len(), 4);
        // Moved away: a, a/b and a/b/c are no longer watched; a change beneath is not reported
        // under the old path.
        let moved = d.path().join("moved");
        std::fs::rename(&a, &moved).unwrap();
        until(&rx, &a);
        assert_eq!(w.len(), 1);
        std::fs::write(moved.join("b/c/f"), b"x").unwrap();
        let marker = d.path().join("marker");
        std::fs::write(&marker, b"").unwrap();
        let seen = until(&rx, &marker);
        assert!(
            !seen.iter().any(|p| p.ends_with("f")),
            "a change in a directory moved away was reported under its old path: {seen:?}"
        );
        // Watched again where it is now, then removed: the kernel ends the watch.
        w.add(&moved).unwrap();
        assert_eq!(w.len(), 2);
        std::fs::remove_dir_all(&moved).unwrap();
        until(&rx, &moved);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while w.len() != 1 {
            assert!(
                std::time::Instant::now() < deadline,
                "the removed directory's watch is kept"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn dropping_the_watch_ends_its_thread_and_its_handler() {
        let (w, rx) = started();
        drop(w);
        assert!(matches!(
            rx.recv_timeout(Duration::from_secs(5)),
            Err(mpsc::RecvTimeoutError::Disconnected)
        ));
    }

    #[test]
    fn a_file_or_a_missing_path_is_not_watched() {
        let d = tempfile::tempdir().unwrap();
        let (w, _rx) = started();
        let f = d.path().join("f");
        std::fs::write(&f, b"").unwrap();
        let e = w.add(&f).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTDIR));
        let e = w.add(&d.path().join("missing")).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert_eq!(w.len(), 0);
    }
}

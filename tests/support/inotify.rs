//! A real inotify watcher on a directory tree, as `inotifywait -m -r` and editors' watchers
//! watch one: every directory watched (`inotify_add_watch`), each new directory as its
//! `IN_CREATE` or `IN_MOVED_TO` arrives (then read through, so what was made in it before the
//! watch counts too: as `inotifywait -r` does), and the events heard, each with when it was
//! read. [`TreeWatch`] reads on a thread of its own until dropped.

use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The events watched: every change, none of the reads (`IN_OPEN`, `IN_ACCESS`,
/// `IN_CLOSE_NOWRITE`), as editors' watchers ask.
const MASK: u32 = libc::IN_CREATE
    | libc::IN_MODIFY
    | libc::IN_ATTRIB
    | libc::IN_CLOSE_WRITE
    | libc::IN_DELETE
    | libc::IN_DELETE_SELF
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_MOVE_SELF;

/// One event: the path it names (relative to the watched root; a directory's own events name
/// the directory), its kinds as `inotifywait` prints them, its cookie, when it was read.
#[derive(Debug, Clone)]
pub struct Event {
    pub path: PathBuf,
    pub kinds: Vec<&'static str>,
    pub cookie: u32,
    pub at: Instant,
}

impl Event {
    /// True when the event is of kind `kind` (`CREATE`, `ISDIR`, …) at `path`.
    pub fn is(&self, kind: &str, path: &str) -> bool {
        self.path == Path::new(path) && self.kinds.contains(&kind)
    }
}

/// The names of the bits of `mask`, as `inotifywait` prints them.
fn kinds(mask: u32) -> Vec<&'static str> {
    [
        (libc::IN_CREATE, "CREATE"),
        (libc::IN_MODIFY, "MODIFY"),
        (libc::IN_ATTRIB, "ATTRIB"),
        (libc::IN_CLOSE_WRITE, "CLOSE_WRITE"),
        (libc::IN_DELETE, "DELETE"),
        (libc::IN_DELETE_SELF, "DELETE_SELF"),
        (libc::IN_MOVED_FROM, "MOVED_FROM"),
        (libc::IN_MOVED_TO, "MOVED_TO"),
        (libc::IN_MOVE_SELF, "MOVE_SELF"),
        (libc::IN_IGNORED, "IGNORED"),
        (libc::IN_Q_OVERFLOW, "Q_OVERFLOW"),
        (libc::IN_ISDIR, "ISDIR"),
    ]
    .into_iter()
    .filter(|(bit, _)| mask & bit != 0)
    .map(|(_, name)| name)
    .collect()
}

/// The inotify instance and what its watches stand for.
struct Inner {
    fd: OwnedFd,
    root: PathBuf,
    /// Watch descriptor → the directory it watches (relative to `root`).
    dirs: Mutex<HashMap<i32, PathBuf>>,
    events: Mutex<Vec<Event>>,
    stop: AtomicBool,
}

/// A recursive inotify watch of a tree; the reader thread stops when it is dropped.
pub struct TreeWatch {
    inner: Arc<Inner>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TreeWatch {
    /// Watches `root` and every directory beneath it.
    pub fn new(root: &Path) -> TreeWatch {
        // SAFETY: inotify_init1 has no memory effects; a valid fd is owned below.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        let inner = Arc::new(Inner {
            // SAFETY: fd is a new descriptor nothing else owns.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            root: root.to_path_buf(),
            dirs: Mutex::default(),
            events: Mutex::default(),
            stop: AtomicBool::new(false),
        });
        inner.watch_tree(Path::new(""));
        let reader = inner.clone();
        let thread = std::thread::spawn(move || reader.read_until_stopped());
        TreeWatch {
            inner,
            thread: Some(thread),
        }
    }

    /// Every event heard so far.
    pub fn events(&self) -> Vec<Event> {
        self.inner.events.lock().unwrap().clone()
    }

    /// Forgets the events heard so far.
    pub fn clear(&self) {
        self.inner.events.lock().unwrap().clear();
    }

    /// Waits up to `timeout` for an event `what` accepts; returns it and how long after `since`
    /// it was read, or `None` (with every event heard, for the failure message).
    pub fn wait_for(
        &self,
        since: Instant,
        timeout: Duration,
        what: impl Fn(&Event) -> bool,
    ) -> Result<(Event, Duration), Vec<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events().into_iter().find(|e| what(e)) {
                let after = e.at.saturating_duration_since(since);
                return Ok((e, after));
            }
            if Instant::now() > deadline {
                return Err(self.events());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits until no event has come for `quiet` (at most `timeout`); returns every event.
    pub fn settle(&self, quiet: Duration, timeout: Duration) -> Vec<Event> {
        let deadline = Instant::now() + timeout;
        let mut seen = usize::MAX;
        let mut since = Instant::now();
        while Instant::now() < deadline {
            let n = self.events().len();
            if n != seen {
                (seen, since) = (n, Instant::now());
            } else if since.elapsed() >= quiet {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.events()
    }
}

impl Drop for TreeWatch {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Inner {
    /// Watches the directory `rel` (relative to the root) and every directory beneath it.
    fn watch_tree(&self, rel: &Path) {
        let dir = self.root.join(rel);
        let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
        let mask = MASK | libc::IN_ONLYDIR | libc::IN_DONT_FOLLOW;
        // SAFETY: a valid fd and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), mask) };
        if wd < 0 {
            return; // gone meanwhile
        }
        self.dirs.lock().unwrap().insert(wd, rel.to_path_buf());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                self.watch_tree(&rel.join(e.file_name()));
            }
        }
    }

    fn read_until_stopped(&self) {
        let mut buf = vec![0u8; 64 * 1024];
        while !self.stop.load(Ordering::Relaxed) {
            let mut pfd = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            if unsafe { libc::poll(&mut pfd, 1, 20) } <= 0 {
                continue;
            }
            // SAFETY: reads into a buffer of the length given.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                continue;
            }
            let at = Instant::now();
            self.parse(&buf[..n as usize], at);
        }
    }

    /// Records the events in `buf` (read at `at`), watching each new directory.
    fn parse(&self, buf: &[u8], at: Instant) {
        let head = std::mem::size_of::<libc::inotify_event>();
        let mut i = 0;
        while i + head <= buf.len() {
            // SAFETY: the kernel wrote a whole inotify_event at `i` (read_unaligned: any offset).
            let ev: libc::inotify_event =
                unsafe { std::ptr::read_unaligned(buf[i..].as_ptr().cast()) };
            let name_bytes = &buf[i + head..i + head + ev.len as usize];
            let name = &name_bytes[..name_bytes
                .iter()
                .position(|b| *b == 0)
                .unwrap_or(name_bytes.len())];
            i += head + ev.len as usize;
            let Some(dir) = self.dirs.lock().unwrap().get(&ev.wd).cloned() else {
                continue;
            };
            let path = if name.is_empty() {
                dir
            } else {
                dir.join(OsStr::from_bytes(name))
            };
            let new_dir = ev.mask & libc::IN_ISDIR != 0
                && ev.mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0;
            if ev.mask & libc::IN_IGNORED != 0 {
                self.dirs.lock().unwrap().remove(&ev.wd);
            }
            // Watched before the event is told: whoever waits for it may go on in there.
            if new_dir {
                self.watch_tree(&path);
            }
            self.events.lock().unwrap().push(Event {
                path,
                kinds: kinds(ev.mask),
                cookie: ev.cookie,
                at,
            });
        }
    }
}

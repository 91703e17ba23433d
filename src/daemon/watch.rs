//! The watcher of the backing directories: changes made beside wardfs (an editor or a build on
//! the backing directory, another program) are journaled as `watcher` changes and reach the
//! mount's caches, with or without a mount.
//!
//! An inotify watch ([`super::dir_watch`]) reports changed paths of every local zone; one thread
//! looks at each. A change wardfs made itself (any entry point: [`crate::core::own`]) is skipped.
//! Any other goes at once to the core's listeners (the mount's invalidation:
//! `Zones::changed_beside`) and, once it has been quiet for `SETTLE` and still is not wardfs's
//! own (an API write is noted as its own right after its rename, which inotify may report
//! first), into the journal:
//! `delete` when the path is gone, `write` for a file or symlink that is there. Directories that
//! exist are not journaled (the files in them are); wardfs's temp names are never looked at.
//!
//! Each directory is watched on its own (inotify is not recursive): the watches are added by
//! this module's own walk, at start and for every directory that appears, reading directories
//! with `O_NOATIME` so that watching never changes a timestamp (a walk that did would race with a
//! program setting a new directory's atime, as the `notify` crate's recursive mode does). A
//! directory that appears beside wardfs is read through at once (inotify watches a new
//! directory only after it exists, so what a build put in it first would be missed). Opening,
//! reading and closing change nothing and are not watched. A path changed many times in
//! a burst is journaled once. The pending set is bounded (`MAX_PENDING`); past it, further
//! paths still invalidate but are journaled only as a count in the log. A directory that cannot
//! be watched is named in the log, the first few a minute only; the rest are counted
//! ([`Unwatched`]). A name that is not UTF-8 is journaled lossily, as the mount journals it.
//!
//! git's file-system monitor (`crate::git::fsmonitor`) asks the watcher, through
//! [`Watcher::beside`], what it has seen and not journaled yet, once it has taken in every change
//! made before the question ([`Barriers`]: a marker file made in a directory of the daemon's own
//! that the same inotify descriptor watches; the kernel queues its event after every earlier
//! one, so when the thread reaches it, it has looked at them all). It answers the paths pending,
//! the journal's position when it last lost changes (past [`MAX_PENDING`], or the kernel's event
//! queue overflowed), and the directories it could not watch.
//!
//! Owns the watch and its thread; may not be imported by anything but `daemon`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Mode, OFlags, Stat};

use super::dir_watch::{Batch, DirWatch};
use crate::core::own::OwnChanges;
use crate::core::retention::TMP_PREFIX;
use crate::core::{VPath, ZoneId, Zones};
use crate::git::fsmonitor::{Beside as BesideSeen, BesideWatch};

/// How long a path must be quiet before it is journaled.
const SETTLE: Duration = Duration::from_millis(250);
/// Paths waiting to be journaled at most; more in one burst are counted, not journaled.
const MAX_PENDING: usize = 100_000;

/// Directories that cannot be watched named in the log per [`UNWATCHED_WINDOW`]; the rest are
/// counted and summed up in one line (a tree of 10,000 unreadable directories, or a mount
/// past `fs.inotify.max_user_watches`, would otherwise log a line each).
const UNWATCHED_NAMED: usize = 5;
/// How often at most the count of the directories that could not be watched is logged.
const UNWATCHED_WINDOW: Duration = Duration::from_secs(60);
/// Directories that could not be watched remembered by name for git's monitor; past this many,
/// their zone's root stands for them all.
const UNWATCHED_KEPT: usize = 1_000;

/// A running watcher; dropping it stops the watch and its thread.
pub struct Watcher {
    /// Dropping it drops the event handler's [`Closer`], which ends the thread (which holds
    /// the watch weakly).
    _watcher: Arc<DirWatch>,
    _thread: std::thread::JoinHandle<()>,
    barriers: Arc<Barriers>,
}

impl Watcher {
    /// What git's file-system monitor asks the watcher (see the module doc).
    pub fn beside(&self) -> Arc<dyn BesideWatch> {
        self.barriers.clone()
    }

    /// Watches the local zones of `zones`; `None` when there is none. `barrier_dir` is a
    /// directory of the daemon's own (made, and emptied of markers a killed daemon left) where
    /// [`Watcher::beside`] makes its markers.
    pub fn start(zones: Arc<Zones>, barrier_dir: &Path) -> std::io::Result<Option<Watcher>> {
        let roots: Vec<(ZoneId, PathBuf)> = ZoneId::ALL
            .iter()
            .filter_map(|id| Some((*id, zones.local(*id).ok()?.root().to_path_buf())))
            .collect();
        if roots.is_empty() {
            return Ok(None);
        }
        let queue = Arc::new(Queue::default());
        let barriers = Arc::new(Barriers::new(barrier_dir)?);
        let closer = Closer(queue.clone(), barriers.clone(), Arc::downgrade(&zones));
        let watcher = Arc::new(DirWatch::start("wardfs-inotify", move |b: Batch| {
            if b.overflowed {
                closer.0.overflowed();
            }
            // At once, not after the burst settles: the remembered paths of directories are stale.
            if b.moved_dir || b.overflowed {
                if let Some(z) = closer.2.upgrade() {
                    z.renamed();
                }
            }
            // A barrier's marker is looked at without letting a burst gather first.
            let urgent = b.paths.iter().any(|p| closer.1.marker(p).is_some());
            closer.0.push(b.paths, urgent);
        })?);
        watcher.add(&barriers.dir)?;
        let mut beside = Beside::new(
            zones,
            roots.clone(),
            Arc::downgrade(&watcher),
            barriers.clone(),
        );
        for (_, r) in &roots {
            watcher.add(r)?;
            beside.adopt(r, false);
        }
        // The walk at start is over: what it could not watch is summed up now.
        if !beside.unwatched.any() {
            beside.zones.renames_seen(true);
        }
        beside.unwatched.sum_up(Instant::now(), true);
        let thread = std::thread::Builder::new()
            .name("wardfs-watch".into())
            .spawn(move || beside.run(&queue))?;
        Ok(Some(Watcher {
            _watcher: watcher,
            _thread: thread,
            barriers,
        }))
    }
}

/// The paths changed since the watcher thread last looked, each once, in the order first seen:
/// a burst of events for one path (a file unpacked through the mount is created, written a
/// few times and has its mode and times set: ten events) costs the thread one look, not ten.
/// A path that changes again after the thread took it is queued again, so no change is missed.
#[derive(Default)]
struct Queue {
    state: Mutex<Queued>,
    ready: Condvar,
}

#[derive(Default)]
struct Queued {
    order: Vec<PathBuf>,
    set: HashSet<PathBuf>,
    /// The kernel's event queue overflowed since the thread last looked.
    overflowed: bool,
    /// A barrier's marker is queued: the thread takes the queue without waiting for more.
    urgent: bool,
    /// The watch is gone: the thread ends.
    closed: bool,
}

/// What the thread takes from the [`Queue`] at once.
struct Taken {
    paths: Vec<PathBuf>,
    /// Events were lost before these (the kernel's queue overflowed).
    overflowed: bool,
}

/// How long the thread lets a burst gather after the first event of it (it looks at each path
/// once per wake-up; changes beside wardfs reach the mount this much later at most).
const GATHER: Duration = Duration::from_millis(1);

impl Queue {
    fn push(&self, paths: Vec<PathBuf>, urgent: bool) {
        let mut q = self.state.lock().expect("not poisoned");
        q.urgent |= urgent;
        let was_empty = q.order.is_empty();
        for p in paths {
            if !q.set.contains(&p) {
                q.set.insert(p.clone());
                q.order.push(p);
            }
        }
        if was_empty && !q.order.is_empty() {
            self.ready.notify_one();
        }
    }

    /// Notes that the kernel's event queue overflowed (events were lost).
    fn overflowed(&self) {
        self.state.lock().expect("not poisoned").overflowed = true;
        self.ready.notify_one();
    }

    /// The paths queued, after waiting at most `wait` for one (empty when none came); `None`
    /// once the watch is gone.
    fn take(&self, wait: Duration) -> Option<Taken> {
        let q = self.state.lock().expect("not poisoned");
        let (q, _) = self
            .ready
            .wait_timeout_while(q, wait, |q| {
                q.order.is_empty() && !q.overflowed && !q.closed
            })
            .expect("not poisoned");
        if q.closed {
            return None;
        }
        let burst = !q.order.is_empty() && !q.urgent;
        drop(q);
        if burst {
            std::thread::sleep(GATHER);
        }
        let mut q = self.state.lock().expect("not poisoned");
        q.set.clear();
        q.urgent = false;
        Some(Taken {
            paths: std::mem::take(&mut q.order),
            overflowed: std::mem::take(&mut q.overflowed),
        })
    }
}

/// Held by the watch's event handler: when the watch is dropped, the thread is told to end,
/// whoever waits at a barrier stops waiting, and the zones no longer count on renames beside
/// wardfs being seen.
struct Closer(Arc<Queue>, Arc<Barriers>, Weak<Zones>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.state.lock().expect("not poisoned").closed = true;
        self.0.ready.notify_all();
        self.1.close();
        if let Some(z) = self.2.upgrade() {
            z.renames_seen(false);
        }
    }
}

/// The markers git's monitor waits at (see the module doc): each a file named by its number in
/// a directory of the daemon's own, reached once the thread has looked at it.
struct Barriers {
    dir: PathBuf,
    next: AtomicU64,
    reached: Mutex<Reached>,
    cv: Condvar,
}

/// The last marker the thread reached and what it knew then.
#[derive(Default)]
struct Reached {
    n: u64,
    beside: BesideSeen,
    /// The watch is gone: nobody reaches a marker any more.
    closed: bool,
}

impl Barriers {
    /// Barriers in `dir` (made; markers a killed daemon left in it removed).
    fn new(dir: &Path) -> std::io::Result<Barriers> {
        std::fs::create_dir_all(dir)?;
        for e in std::fs::read_dir(dir)?.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        Ok(Barriers {
            dir: dir.to_path_buf(),
            next: AtomicU64::new(0),
            reached: Mutex::default(),
            cv: Condvar::new(),
        })
    }

    /// The number of the marker at `path`, if it is one.
    fn marker(&self, path: &Path) -> Option<u64> {
        if path.parent() != Some(self.dir.as_path()) {
            return None;
        }
        path.file_name()?.to_str()?.parse().ok()
    }

    /// The thread reached marker `n` knowing `beside`.
    fn reach(&self, n: u64, beside: BesideSeen) {
        let mut r = self.reached.lock().expect("not poisoned");
        if n > r.n {
            r.n = n;
            r.beside = beside;
        }
        drop(r);
        self.cv.notify_all();
    }

    fn close(&self) {
        self.reached.lock().expect("not poisoned").closed = true;
        self.cv.notify_all();
    }
}

impl BesideWatch for Barriers {
    fn settle(&self, wait: Duration) -> Option<BesideSeen> {
        let deadline = Instant::now() + wait;
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let marker = self.dir.join(n.to_string());
        // Its event is queued after the events of every change made before this call.
        if let Err(e) = std::fs::File::create(&marker) {
            tracing::warn!(error = %e, marker = %marker.display(), "cannot make a watcher barrier");
            return None;
        }
        let _ = std::fs::remove_file(&marker);
        let mut r = self.reached.lock().expect("not poisoned");
        while r.n < n && !r.closed {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            r = self.cv.wait_timeout(r, left).expect("not poisoned").0;
        }
        (!r.closed).then(|| r.beside.clone())
    }
}

/// The watcher thread's state.
struct Beside {
    zones: Arc<Zones>,
    roots: Vec<(ZoneId, PathBuf)>,
    /// Paths changed beside wardfs, by when they last changed.
    pending: HashMap<PathBuf, Instant>,
    /// The same paths in the order they were first seen (one entry each).
    order: VecDeque<(Instant, PathBuf)>,
    dropped: u64,
    /// The watch, to add each new directory to (weak: dropping the [`Watcher`] ends the thread).
    watcher: Weak<DirWatch>,
    /// Directories the watch could not be added to, for the log.
    unwatched: Unwatched,
    /// The same directories for git's monitor (at most [`UNWATCHED_KEPT`]; then a zone's root).
    unwatched_dirs: Vec<VPath>,
    /// The journal's newest row when changes were last lost (see [`Beside::lose`]).
    lost_at: Option<i64>,
    /// Whether a loss was noted in the batch the thread is looking at.
    lost_in_batch: bool,
    barriers: Arc<Barriers>,
}

/// Directories the watch could not be added to, as the log tells them: the first
/// [`UNWATCHED_NAMED`] of each [`UNWATCHED_WINDOW`] by name (control characters escaped), the
/// rest counted and summed up in one line once the window is over.
struct Unwatched {
    named: usize,
    unnamed: u64,
    since: Instant,
}

impl Unwatched {
    fn new(now: Instant) -> Unwatched {
        Unwatched {
            named: 0,
            unnamed: 0,
            since: now,
        }
    }

    /// True when a directory could not be watched in this window (asked before the first
    /// [`Unwatched::sum_up`]: since the start).
    fn any(&self) -> bool {
        self.named > 0
    }

    /// Notes that `dir` could not be watched.
    fn note(&mut self, dir: &Path, error: &dyn std::fmt::Display) {
        if self.named < UNWATCHED_NAMED {
            self.named += 1;
            let dir = crate::core::text::name_bytes(dir.as_os_str().as_bytes());
            tracing::warn!(%dir, %error, "cannot watch a directory; changes beside wardfs in it are not seen");
        } else {
            self.unnamed += 1;
        }
    }

    /// Once the window is over (or at once with `now_or_never`), logs the count of the
    /// directories noted but not named, if any, and starts a new window.
    fn sum_up(&mut self, now: Instant, now_or_never: bool) {
        if !now_or_never && now.duration_since(self.since) < UNWATCHED_WINDOW {
            return;
        }
        if self.unnamed > 0 {
            tracing::warn!(
                directories = self.unnamed,
                "cannot watch {} besides the {UNWATCHED_NAMED} named above; changes beside wardfs in them are not seen",
                crate::core::text::count(self.unnamed, "directory")
            );
        }
        *self = Unwatched::new(now);
    }

    /// How long until the counted directories are due to be logged (`None`: none counted).
    fn due_in(&self, now: Instant) -> Option<Duration> {
        (self.unnamed > 0).then(|| UNWATCHED_WINDOW.saturating_sub(now.duration_since(self.since)))
    }
}

impl Beside {
    fn new(
        zones: Arc<Zones>,
        roots: Vec<(ZoneId, PathBuf)>,
        watcher: Weak<DirWatch>,
        barriers: Arc<Barriers>,
    ) -> Beside {
        Beside {
            zones,
            roots,
            pending: HashMap::new(),
            order: VecDeque::new(),
            dropped: 0,
            watcher,
            unwatched: Unwatched::new(Instant::now()),
            unwatched_dirs: Vec::new(),
            lost_at: None,
            lost_in_batch: false,
            barriers,
        }
    }

    fn run(mut self, queue: &Queue) {
        loop {
            let mut wait = if self.pending.is_empty() {
                Duration::from_secs(3600)
            } else {
                SETTLE
            };
            if let Some(due) = self.unwatched.due_in(Instant::now()) {
                wait = wait.min(due);
            }
            let Some(taken) = queue.take(wait) else {
                return;
            };
            self.lost_in_batch = false;
            if taken.overflowed {
                tracing::warn!("the kernel's queue of changes beside wardfs overflowed; some were not journaled");
                self.lose();
            }
            let mut reached = None;
            for path in taken.paths {
                match self.barriers.marker(&path) {
                    Some(n) => reached = reached.max(Some(n)),
                    None => self.seen(path),
                }
            }
            if let Some(n) = reached {
                self.barriers.reach(n, self.seen_so_far());
            }
            let now = Instant::now();
            self.journal_settled(now);
            self.unwatched.sum_up(now, false);
        }
    }

    /// A change at `path`: passed on at once unless it is wardfs's own, journaled later.
    fn seen(&mut self, path: PathBuf) {
        if is_temp(&path) {
            return;
        }
        let (st, mine) = settled(self.zones.own(), &path);
        let is_dir = st
            .as_ref()
            .is_some_and(|st| FileType::from_raw_mode(st.st_mode).is_dir());
        if mine {
            if is_dir {
                // Made or moved in through wardfs: watched, not journaled again.
                self.adopt(&path, false);
            }
            return;
        }
        self.zones.changed_beside(std::slice::from_ref(&path));
        // A directory made (or moved in) beside wardfs may have been filled before inotify
        // watched it: what is in it now is part of the change.
        if is_dir {
            self.adopt(&path, true);
        }
        self.pend(path);
    }

    fn pend(&mut self, path: PathBuf) {
        if self.pending.len() >= MAX_PENDING && !self.pending.contains_key(&path) {
            self.dropped += 1;
            self.lose();
            return;
        }
        let now = Instant::now();
        match self.pending.get_mut(&path) {
            // Seen again: its entry in the queue is looked at again when it comes up.
            Some(at) => *at = now,
            None => {
                self.pending.insert(path.clone(), now);
                self.order.push_back((now, path));
            }
        }
    }

    /// Watches the directory `dir` and every directory beneath it (never following a symlink);
    /// with `pend`, also pends the files beneath it, up to the bound. Directories are read with
    /// `O_NOATIME`: watching leaves every timestamp as it was.
    fn adopt(&mut self, dir: &Path, pend: bool) {
        let Some(watcher) = self.watcher.upgrade() else {
            return;
        };
        let mut dirs = vec![dir.to_path_buf()];
        while let Some(d) = dirs.pop() {
            let watched = watcher.add(&d);
            if let Err(e) = watched {
                if !is_gone(&e) {
                    // Renames beside wardfs in it go unseen: paths are read back each time.
                    self.zones.renames_seen(false);
                    self.unwatched.note(&d, &e);
                    self.keep_unwatched(&d);
                }
                continue;
            }
            let Some(entries) = read_dir_noatime(&d) else {
                continue;
            };
            for (name, kind) in entries {
                let p = d.join(OsStr::from_bytes(&name));
                if is_temp(&p) {
                    continue;
                }
                if kind == FileType::Directory {
                    dirs.push(p);
                } else if pend {
                    if self.pending.len() >= MAX_PENDING {
                        self.dropped += 1;
                        self.lose();
                        continue;
                    }
                    self.pend(p);
                }
            }
        }
    }

    /// Notes that changes beside wardfs were lost (not journaled one by one): the journal's
    /// newest row now, once per batch, for git's monitor, which then answers "everything" to a
    /// token not newer than that.
    fn lose(&mut self) {
        if self.lost_in_batch {
            return;
        }
        self.lost_in_batch = true;
        self.lost_at = Some(self.zones.db().journal_max_id().unwrap_or(i64::MAX));
    }

    /// Remembers, for git's monitor, that the directory `dir` is not watched.
    fn keep_unwatched(&mut self, dir: &Path) {
        let Some(vp) = self.vpath_or_root(dir) else {
            return;
        };
        let vp = if self.unwatched_dirs.len() < UNWATCHED_KEPT {
            vp
        } else {
            VPath::root(vp.zone())
        };
        if !self.unwatched_dirs.contains(&vp) {
            self.unwatched_dirs.push(vp);
        }
    }

    /// What git's monitor is told at a barrier: the paths pending (their virtual paths), when
    /// changes were last lost, the directories not watched.
    fn seen_so_far(&self) -> BesideSeen {
        BesideSeen {
            pending: self
                .pending
                .keys()
                .filter_map(|p| self.vpath_or_root(p))
                .collect(),
            lost_at: self.lost_at,
            unwatched: self.unwatched_dirs.clone(),
        }
    }

    /// [`Beside::vpath`], or the zone's root for a zone's directory itself.
    fn vpath_or_root(&self, path: &Path) -> Option<VPath> {
        self.vpath(path).or_else(|| {
            self.roots
                .iter()
                .find(|(_, r)| r == path)
                .map(|(id, _)| VPath::root(*id))
        })
    }

    /// Journals the paths quiet for `SETTLE` that are still not wardfs's own.
    /// Looks only at the oldest entries, so a burst costs each path once, not once per wake-up.
    fn journal_settled(&mut self, now: Instant) {
        while let Some((at, _)) = self.order.front() {
            if now.duration_since(*at) < SETTLE {
                break;
            }
            let (_, path) = self.order.pop_front().expect("a front entry");
            let last = self.pending[&path];
            if now.duration_since(last) < SETTLE {
                // Changed again since it was queued: back in line with its latest time.
                self.order.push_back((last, path));
                continue;
            }
            self.pending.remove(&path);
            if self.zones.own().is_own_change(&path) {
                continue;
            }
            let Some(vp) = self.vpath(&path) else {
                continue;
            };
            match std::fs::symlink_metadata(&path) {
                Ok(md) if md.is_dir() => {}
                Ok(_) => self.zones.record_beside(&vp, "write"),
                Err(_) => self.zones.record_beside(&vp, "delete"),
            }
        }
        if self.dropped > 0 && self.pending.is_empty() {
            tracing::warn!(
                paths = self.dropped,
                "changes made beside wardfs came faster than they could be journaled; these were not journaled one by one"
            );
            self.dropped = 0;
        }
    }

    /// The virtual path of a backing path (None: outside every zone, or not a name wardfs takes).
    /// A name that is not UTF-8 is journaled lossily (U+FFFD in place of its bad bytes), as the
    /// mount journals it: the change is seen (git status then names the real name), never
    /// dropped.
    fn vpath(&self, path: &Path) -> Option<VPath> {
        self.roots.iter().find_map(|(id, root)| {
            let rel = path.strip_prefix(root).ok()?;
            if rel.as_os_str().is_empty() {
                return None;
            }
            VPath::new(*id, &rel.to_string_lossy()).ok()
        })
    }
}

/// The names and kinds in the directory `dir` (`None` when it cannot be read), read without
/// changing its atime (`O_NOATIME`, which needs the owner's uid or `CAP_FOWNER`; without either
/// the directory is read as any reader would).
/// The entry at `path` (`lstat`), and whether its change was wardfs's own. A write or a change
/// of a name through the mount under way is let be noted first, and the entry looked at again.
fn settled(own: &OwnChanges, path: &Path) -> (Option<Stat>, bool) {
    let look = || rustix::fs::lstat(path).ok();
    let mut st = look();
    if let Some(s) = st.as_ref().filter(|s| !own.is_own(s)) {
        // Perhaps a write through the mount not noted yet: look once none is under way.
        st = own.when_not_writing((s.st_dev, s.st_ino), look);
    }
    if own.is_own_change_at(path, st.as_ref()) {
        return (st, true);
    }
    // Perhaps a name the mount made or removed, not noted yet: the same.
    let st = own.when_not_naming(look);
    let mine = own.is_own_change_at(path, st.as_ref());
    (st, mine)
}

fn read_dir_noatime(dir: &Path) -> Option<Vec<(Vec<u8>, FileType)>> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(dir, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => rustix::fs::open(dir, flags, Mode::empty()).ok()?,
        other => other.ok()?,
    };
    let mut out = Vec::new();
    for ent in rustix::fs::Dir::read_from(&fd).ok()? {
        let Ok(ent) = ent else { break };
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match ent.file_type() {
            FileType::Unknown => {
                rustix::fs::statat(&fd, ent.file_name(), rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
                    .map(|st| FileType::from_raw_mode(st.st_mode))
                    .unwrap_or(FileType::Unknown)
            }
            k => k,
        };
        out.push((name.to_vec(), kind));
    }
    Some(out)
}

/// Whether a watch failed because its directory is gone (removed or replaced since it was
/// seen): nothing there to watch, and its removal is an event of its own.
fn is_gone(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// True for wardfs's own temp names (a write in progress through the API or a pull).
fn is_temp(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(TMP_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the log says while `f` runs: the `tracing` lines, as the daemon writes them.
    fn logged(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Capture(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Capture {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = capture.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn ten_thousand_unwatchable_directories_log_five_names_and_one_count() {
        let start = Instant::now();
        let mut u = Unwatched::new(start);
        let log = logged(|| {
            for i in 0..10_000 {
                let dir = PathBuf::from(format!("/z/ws/d{i}\x1b]0;owned\x07"));
                u.note(&dir, &"Permission denied (os error 13)");
            }
            u.sum_up(start, true);
        });
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), UNWATCHED_NAMED + 1, "{log}");
        for (i, line) in lines[..UNWATCHED_NAMED].iter().enumerate() {
            assert!(
                line.contains(&format!("d{i}\\033]0;owned\\a")),
                "named, escaped: {line}"
            );
        }
        assert!(
            lines[UNWATCHED_NAMED].contains("cannot watch 9995 directories besides"),
            "{log}"
        );
        assert!(!log.contains('\x1b') && !log.contains('\x07'), "{log:?}");

        // Trickling in one at a time (a mount past inotify's watch limit): the next five of
        // the window are named, the rest waits for the window's end and is logged as one line.
        let log = logged(|| {
            for i in 0..1000 {
                u.note(&PathBuf::from(format!("/z/ws/m{i}")), &"No space left");
                u.sum_up(start + Duration::from_millis(i), false);
            }
        });
        assert_eq!(log.lines().count(), UNWATCHED_NAMED, "{log}");
        assert_eq!(
            u.due_in(start + Duration::from_secs(1)),
            Some(UNWATCHED_WINDOW - Duration::from_secs(1))
        );
        let log = logged(|| u.sum_up(start + UNWATCHED_WINDOW, false));
        assert_eq!(log.lines().count(), 1, "{log}");
        assert!(
            log.contains("cannot watch 995 directories besides"),
            "{log}"
        );
        assert_eq!(u.due_in(start + UNWATCHED_WINDOW), None);
    }
}

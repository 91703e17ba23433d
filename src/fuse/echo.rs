//! The echo: a change made outside the mount (through the API or MCP, by a git or mirror pull, a
//! restore, a fork merge, or beside the mount in a zone's directory) reaches the watchers on the
//! mount (inotify: editors, build tools, test runners) as the events it would have raised had it
//! been made through the mount.
//!
//! The kernel raises inotify events only for operations that pass through its VFS, and no FUSE
//! notification raises one (Linux 6.18: `FUSE_NOTIFY_INVAL_ENTRY` and `FUSE_NOTIFY_INVAL_INODE`
//! drop cached entries and pages silently, `FUSE_NOTIFY_STORE` fills the page cache silently,
//! `FUSE_NOTIFY_DELETE` raises `IN_DELETE_SELF` only, for a watch on the removed file itself,
//! never `IN_DELETE` on its directory; see docs/architecture.md). So the daemon performs each
//! such change once more through its own mount, an *echo*, and the mount answers the echo's
//! requests from what the zones hold now without changing anything (`WardFs::echoing` in
//! `super::fs`): the kernel raises the events itself, with the right kinds and a move's cookie,
//! and its caches end up holding what the zones hold.
//!
//! [`Echoes::plan`] runs on the thread that made the change, called by the mount's invalidation
//! (`super::invalidate::Direct`) before it drops the kernel's caches, and says what the change
//! was to a watcher, from the zones now and from what the kernel held ([`Inodes`]):
//!
//! * a new entry ([`Change::Create`]; also each new directory above it, first): `IN_CREATE`,
//!   and for a file `IN_CLOSE_WRITE` (an `open(O_CREAT|O_EXCL)` and a `close`; `mkdir`,
//!   `symlink`, `mknod` for the other kinds);
//! * a file changed in place or replaced ([`Change::Modify`]): `IN_MODIFY` and `IN_CLOSE_WRITE`
//!   (an `open(O_WRONLY)`, an `ftruncate` to its size, a `close`); a symlink replaced, or a file
//!   the daemon may not open for writing ([`Change::Attrib`]): `IN_ATTRIB` (`utimensat` to its
//!   own times);
//! * a removal ([`Change::Remove`]) of a name the kernel knew: `IN_DELETE` (`unlink`, `rmdir`),
//!   and `IN_DELETE_SELF` for a watch on what was removed (a name the kernel never knew, no
//!   watcher knows);
//! * a move ([`Change::MoveFrom`]): `IN_MOVED_FROM` and `IN_MOVED_TO` with one cookie
//!   (`renameat`).
//!
//! One thread per mount echoes them ([`start`]; never a FUSE request thread, never holding a
//! path lock: the changes reach it through a queue), through a helper process that makes the
//! requests to the mount (`super::echo_helper`: a daemon thread waiting for its own mount would
//! keep a killed daemon from dying). A burst gathers for [`GATHER`] first, and a
//! path changed many times in it is echoed once (a pull of 3,500 files gives about one echo per
//! file), and a change reported twice (a pull's write is told by the pull and may be reported by
//! the daemon's watcher of the zones' directories too, before the pull notes it as its own) is
//! echoed once: a path already echoed as it is now is not echoed again ([`Echoer::told`]), and a
//! change only that watcher reported is left alone when, looked at again, it was wardfs's own
//! (the mount's, seen before the mount noted it). The queue is bounded ([`MAX_QUEUED`]: further changes are counted in the log, not
//! echoed). The helper works through a descriptor of the mount's root, beneath it only
//! (`RESOLVE_BENEATH`, no symlinks, no other mount), opened for a burst and closed after it, so
//! that an idle echo holds nothing of the mount: when the mount goes, its requests fail and
//! everything queued is dropped; unmounting and shutting down never wait for it (it stops between
//! two echoes once told to).
//!
//! The mount knows the echo's requests by the helper's process id (`Request::pid`):
//! [`Echoes::is_echo`]. It answers a lookup of a name the echo is changing as
//! [`Echoes::answer`] says (absent, so that the kernel creates it; the inode the kernel held
//! there, or a ghost, so that it can remove it; the entry now at a move's destination), a create
//! with the entry that is there, a removal or rename with success, a `setattr` with the
//! attributes the file has: never touching the backing store, the journal, the path locks or the
//! own-change bookkeeping.

use std::collections::{HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use rustix::fs::{FileType, Stat};
use rustix::io::Errno;

use super::echo_helper::{Helper, Op};
use super::inodes::Inodes;
use crate::core::{ZoneId, Zones};

/// How long the echo thread lets a burst of changes gather before it echoes them.
pub const GATHER: Duration = Duration::from_millis(5);

/// Changes waiting for their echo at most; past it, further ones are counted, not echoed.
pub const MAX_QUEUED: usize = 100_000;

/// How long the echo remembers what it told of a path ([`Echoer::told`]).
const TOLD_FOR: Duration = Duration::from_secs(2);

/// The kernel's inode for a name the echo removes: its number and kind.
type Was = Option<(u64, FileType)>;

/// What a change was to a watcher on the mount.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Change {
    /// A new entry.
    Create,
    /// A file's content changed (in place, or the file replaced).
    Modify,
    /// Something else about the entry changed (a symlink replaced).
    Attrib,
    /// Removed; `was` is the inode the kernel held under the name, if any.
    Remove { was: Was },
    /// Moved here from `from` (mount-relative; `from_backing` its backing path), where the
    /// kernel held `was`.
    MoveFrom {
        from: PathBuf,
        from_backing: PathBuf,
        was: Was,
    },
}

/// Who told the echo of a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reported {
    /// The core's operation that made it (`ChangeListener::changed`): a move when it names two
    /// paths, the source first.
    ByCore,
    /// The daemon's watcher of the zones' directories (`ChangeListener::changed_beside`): a
    /// program beside the mount, or wardfs itself when the watcher saw the change before
    /// wardfs noted it as its own (looked at again when echoed).
    Beside,
}

/// One change to echo: its zone, where it is in the mount (`rel`: `zone/...`) and behind it,
/// and whether only the watcher of the zones' directories reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Echo {
    zone: ZoneId,
    rel: PathBuf,
    backing: PathBuf,
    change: Change,
    beside: bool,
}

/// A directory as the echo names it to the mount: its zone and backing `(st_dev, st_ino)`.
pub type DirKey = (ZoneId, u64, u64);

/// How the mount answers the echo's lookup of a name (see [`Echoes::answer`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Nothing is there (`ENOENT`, not cached): the kernel goes on to create it, or to rename
    /// onto it.
    Absent,
    /// The inode the kernel held under the name, whose file is gone (number, kind): the kernel
    /// removes it. When the kernel has forgotten it meanwhile, a ghost of that kind.
    Held(u64, FileType),
    /// A ghost: an entry of this kind under a number no file has (`Inodes::ghost`), for a name
    /// whose file is gone and whose inode the kernel no longer holds; it removes it and forgets
    /// it.
    Ghost(FileType),
    /// The entry now at `name` in the directory `dir` (a move's destination), for its source's
    /// name: the kernel then moves it there.
    At(DirKey, OsString),
}

/// A name the echo's operation under way looks up (in the directory `dir`), and its answer.
#[derive(Debug, Clone)]
struct Asked {
    dir: DirKey,
    name: OsString,
    answer: Answer,
}

impl Asked {
    fn new(dir: DirKey, name: OsString, answer: Answer) -> Asked {
        Asked { dir, name, answer }
    }
}

/// The changes waiting for their echo, each path once, in the order first seen.
#[derive(Default)]
struct Queue {
    order: VecDeque<PathBuf>,
    pending: HashMap<PathBuf, Echo>,
    /// Changes not queued since the last report (the queue was full).
    dropped: u64,
    /// The mount is gone: nothing more is queued, the thread ends.
    closed: bool,
}

impl Queue {
    /// Queues `e`, folding it into what is pending for its path (and, for a move, for its
    /// source).
    fn push(&mut self, mut e: Echo) {
        if let Change::MoveFrom { from, .. } = &e.change {
            let prev = if *from == e.rel {
                None
            } else {
                self.pending.remove(from)
            };
            if let Some(prev) = prev {
                match prev.change {
                    // Never heard of under its old name: it is new here.
                    Change::Create => e.change = Change::Create,
                    // Moved twice: from where it was first.
                    Change::MoveFrom { .. } => e.change = prev.change,
                    // The move carries what changed at the old name.
                    _ => {}
                }
            }
        }
        if matches!(&e.change, Change::MoveFrom { from, .. } if *from == e.rel) {
            // Moved away and back within the burst: to a watcher, it changed.
            e.change = Change::Modify;
        }
        let Some(prev) = self.pending.get(&e.rel) else {
            if self.pending.len() >= MAX_QUEUED {
                self.dropped += 1;
                return;
            }
            self.order.push_back(e.rel.clone());
            self.pending.insert(e.rel.clone(), e);
            return;
        };
        // Reported by the core once: the core's word stands.
        let beside = prev.beside && e.beside;
        match merge(&prev.change, &e.change) {
            Merged::Keep => {
                if let Some(p) = self.pending.get_mut(&e.rel) {
                    p.beside = beside;
                }
            }
            Merged::New(change) => {
                let rel = e.rel.clone();
                self.pending.insert(
                    rel,
                    Echo {
                        change,
                        beside,
                        ..e
                    },
                );
            }
            Merged::Nothing => {
                self.pending.remove(&e.rel);
            }
            Merged::RemovedFrom(from, from_backing, was) => {
                self.pending.remove(&e.rel);
                self.push(Echo {
                    rel: from,
                    backing: from_backing,
                    change: Change::Remove { was },
                    ..e
                });
            }
        }
    }

    /// Everything queued, in order.
    fn take(&mut self) -> Vec<Echo> {
        let order = std::mem::take(&mut self.order);
        let mut pending = std::mem::take(&mut self.pending);
        order
            .into_iter()
            .filter_map(|p| pending.remove(&p))
            .collect()
    }
}

/// What two changes of one path in a burst come to.
#[derive(Debug, PartialEq, Eq)]
enum Merged {
    /// The one pending.
    Keep,
    /// This one.
    New(Change),
    /// Nothing a watcher needs (made and removed within the burst).
    Nothing,
    /// Moved here and removed: a removal at the old name.
    RemovedFrom(PathBuf, PathBuf, Was),
}

fn merge(old: &Change, new: &Change) -> Merged {
    use Change::*;
    match (old, new) {
        (_, MoveFrom { .. }) => Merged::New(new.clone()),
        (Create, Remove { .. }) => Merged::Nothing,
        (Create, _) => Merged::Keep,
        (
            MoveFrom {
                from,
                from_backing,
                was,
            },
            Remove { .. },
        ) => Merged::RemovedFrom(from.clone(), from_backing.clone(), *was),
        (MoveFrom { .. }, _) => Merged::Keep,
        (Remove { .. }, Remove { .. }) => Merged::Keep,
        // Removed and there again: to a watcher, it changed.
        (Remove { .. }, _) => Merged::New(Modify),
        (Modify | Attrib, Remove { .. }) => Merged::New(new.clone()),
        (Modify, _) => Merged::Keep,
        (Attrib, Modify) => Merged::New(Modify),
        (Attrib, _) => Merged::Keep,
    }
}

/// The echo of one mount: the queue, the thread's id and the names its operation under way
/// looks up. Shared by the invalidation (which plans and queues), the echo thread and the FUSE
/// request handlers (which answer it).
#[derive(Default)]
pub struct Echoes {
    /// The process id of the echo's helper (0 while none runs).
    helper_pid: AtomicI32,
    asking: Mutex<Vec<Asked>>,
    queue: Mutex<Queue>,
    ready: Condvar,
}

impl Echoes {
    /// An echo with nothing queued and no thread yet ([`start`] starts it).
    pub fn new() -> Arc<Echoes> {
        Arc::new(Echoes::default())
    }

    /// True when a request with this `pid` (the calling thread's id) comes from the echo's
    /// helper (a process of one thread).
    pub fn is_echo(&self, pid: u32) -> bool {
        let helper = self.helper_pid.load(Ordering::Relaxed);
        helper != 0 && helper as u32 == pid
    }

    /// How to answer the echo's lookup of `name` in the directory `dir`: `None` for a name its
    /// operation does not change (looked up as anyone's).
    pub fn answer(&self, dir: DirKey, name: &OsStr) -> Option<Answer> {
        self.asking
            .lock()
            .expect("not poisoned")
            .iter()
            .find(|a| a.dir == dir && a.name == name)
            .map(|a| a.answer.clone())
    }

    /// What the changes at the backing `paths` were to a watcher on the mount, from the zones
    /// now and what the kernel knows; run before the kernel's caches are dropped. Paths outside
    /// the local zones give nothing, and so does a removal of a name the kernel never knew: no
    /// watcher knows it (a watcher lists a directory, which makes the kernel know its names), or
    /// the mount removed it already.
    pub fn plan(
        &self,
        inodes: &Inodes,
        zones: &Zones,
        paths: &[PathBuf],
        reported: Reported,
    ) -> Vec<Echo> {
        let mut out = Vec::new();
        let beside = reported == Reported::Beside;
        if let ([from, to], false) = (paths, beside) {
            if let (Some(f), Some(t)) = (locate(zones, from), locate(zones, to)) {
                let was = held_at(inodes, f.0, from);
                new_ancestors(inodes, t.0, &t.1, to, &mut out);
                out.push(Echo {
                    zone: t.0,
                    rel: t.1,
                    backing: to.clone(),
                    change: Change::MoveFrom {
                        from: f.1,
                        from_backing: from.clone(),
                        was,
                    },
                    beside,
                });
                return out;
            }
        }
        for p in paths {
            if let Some((zone, rel)) = locate(zones, p) {
                classify(inodes, zone, rel, p, &mut out);
            }
        }
        for e in &mut out {
            e.beside = beside;
        }
        out
    }

    /// Queues `echoes` for the echo thread (dropped once the mount is gone).
    pub fn send(&self, echoes: Vec<Echo>) {
        if echoes.is_empty() {
            return;
        }
        for e in &echoes {
            tracing::trace!(path = %e.rel.display(), change = ?e.change, "echo queued");
        }
        let mut q = self.queue.lock().expect("not poisoned");
        if q.closed {
            return;
        }
        let was_empty = q.pending.is_empty();
        for e in echoes {
            q.push(e);
        }
        if was_empty {
            self.ready.notify_one();
        }
    }

    /// Stops echoing: what is queued is dropped and the thread ends (not waited for: it may be
    /// inside a request to a mount going away, which fails once the mount is gone).
    pub fn close(&self) {
        let mut q = self.queue.lock().expect("not poisoned");
        q.closed = true;
        q.order.clear();
        q.pending.clear();
        self.ready.notify_all();
    }

    /// The next burst, once it has gathered; `None` once closed.
    fn next_burst(&self) -> Option<(Vec<Echo>, u64)> {
        let q = self.queue.lock().expect("not poisoned");
        let q = self
            .ready
            .wait_while(q, |q| q.pending.is_empty() && !q.closed)
            .expect("not poisoned");
        if q.closed {
            return None;
        }
        drop(q);
        std::thread::sleep(GATHER);
        let mut q = self.queue.lock().expect("not poisoned");
        if q.closed {
            return None;
        }
        let dropped = std::mem::take(&mut q.dropped);
        Some((q.take(), dropped))
    }

    fn is_closed(&self) -> bool {
        self.queue.lock().expect("not poisoned").closed
    }

    /// Runs `op` with the mount answering the echo's lookups of the names in `asked`.
    fn asking<T>(&self, asked: Vec<Asked>, op: impl FnOnce() -> T) -> T {
        *self.asking.lock().expect("not poisoned") = asked;
        let out = op();
        self.asking.lock().expect("not poisoned").clear();
        out
    }
}

/// The zone holding the backing path `path`, and where it is in the mount (`zone/rel`); `None`
/// outside every local zone, and for a zone's root.
fn locate(zones: &Zones, path: &Path) -> Option<(ZoneId, PathBuf)> {
    let mut best: Option<(ZoneId, usize, PathBuf)> = None;
    for id in ZoneId::ALL.into_iter().chain(zones.fork_ids()) {
        let Ok(z) = zones.local(id) else {
            continue;
        };
        let Ok(rel) = path.strip_prefix(z.root()) else {
            continue;
        };
        // The deepest root wins: a fork's directory may lie beneath a zone's.
        let depth = z.root().components().count();
        if best.as_ref().is_none_or(|b| depth > b.1) {
            best = Some((id, depth, rel.to_path_buf()));
        }
    }
    let (id, _, rel) = best?;
    (!rel.as_os_str().is_empty()).then(|| (id, Path::new(id.name()).join(rel)))
}

/// The backing `(st_dev, st_ino)` of `path` (not following a symlink).
fn key(path: &Path) -> Option<(u64, u64)> {
    let st = rustix::fs::lstat(path).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// True when the kernel holds an inode of `zone` for the backing file `st`: one of its number
/// whose file is still `st` (the backing filesystem reuses the inode number of a removed file,
/// whose inode the kernel may hold still).
fn held(inodes: &Inodes, zone: ZoneId, st: &Stat) -> bool {
    inodes
        .known_number(zone, st.st_dev, st.st_ino)
        .and_then(|n| inodes.get(n))
        .and_then(|i| i.stat().ok())
        .is_some_and(|now| (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino))
}

/// The inode the kernel last knew under the name of the backing path `path` in `zone` (its
/// file may be gone, or another file may have the name now; the kernel may have forgotten it).
fn held_at(inodes: &Inodes, zone: ZoneId, path: &Path) -> Was {
    let (parent, name) = (path.parent()?, path.file_name()?);
    let (dev, ino) = key(parent)?;
    let dir = inodes.known_number(zone, dev, ino)?;
    inodes.named(dir, name)
}

/// True when the kernel knows the entry `st` of `zone`: it holds its inode, or knew it under
/// its name (`was`, what it knew there).
fn knows(inodes: &Inodes, zone: ZoneId, st: &Stat, was: Was) -> bool {
    held(inodes, zone, st)
        || was.is_some_and(|w| Some(w.0) == inodes.known_number(zone, st.st_dev, st.st_ino))
}

/// What the change at the backing path `path` (mount-relative `rel`, in `zone`) was.
fn classify(inodes: &Inodes, zone: ZoneId, rel: PathBuf, path: &Path, out: &mut Vec<Echo>) {
    let was = held_at(inodes, zone, path);
    let change = match rustix::fs::lstat(path) {
        Err(_) if was.is_none() => return,
        Err(_) => Change::Remove { was },
        // A directory the kernel knows: nothing about it a watcher needs (what changed in it
        // has changes of its own).
        Ok(st) if FileType::from_raw_mode(st.st_mode).is_dir() && knows(inodes, zone, &st, was) => {
            return;
        }
        Ok(st)
            if !FileType::from_raw_mode(st.st_mode).is_dir()
                && (was.is_some() || held(inodes, zone, &st)) =>
        {
            match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Change::Modify,
                _ => Change::Attrib,
            }
        }
        Ok(_) => {
            new_ancestors(inodes, zone, &rel, path, out);
            Change::Create
        }
    };
    out.push(Echo {
        zone,
        rel,
        backing: path.to_path_buf(),
        change,
        beside: false,
    });
}

/// Queues a [`Change::Create`] for each directory above `path` (mount-relative `rel`) that the
/// kernel does not know, up to the first it does, outermost first (made by the change, as a
/// write makes the directories it needs).
fn new_ancestors(inodes: &Inodes, zone: ZoneId, rel: &Path, path: &Path, out: &mut Vec<Echo>) {
    let mut new = Vec::new();
    let (mut r, mut p) = (rel.parent(), path.parent());
    while let (Some(dir_rel), Some(dir)) = (r, p) {
        if dir_rel.as_os_str().is_empty() || dir_rel == Path::new(zone.name()) {
            break;
        }
        match rustix::fs::lstat(dir) {
            Ok(st) if !knows(inodes, zone, &st, held_at(inodes, zone, dir)) => new.push(Echo {
                zone,
                rel: dir_rel.to_path_buf(),
                backing: dir.to_path_buf(),
                change: Change::Create,
                beside: false,
            }),
            _ => break,
        }
        (r, p) = (dir_rel.parent(), dir.parent());
    }
    out.extend(new.into_iter().rev());
}

/// Starts the echo thread of the mount at `mountpoint` (the zones' `zones`). It ends when
/// [`Echoes::close`] is called or the mount is gone.
///
/// The thread never waits for the kernel on the mount's behalf (no request to the mount, no
/// notification to it, which waits for a directory's lock), only for the queue and the
/// helper's pipe: so it ends at once when the daemon is killed, and its end tells the helper
/// to abort the mount's connection (`super::echo_helper`), which frees any other thread of
/// the daemon the kernel holds.
pub fn start(echoes: Arc<Echoes>, mountpoint: PathBuf, zones: Weak<Zones>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("wardfs-echo".into())
        .spawn(move || {
            Echoer {
                echoes,
                mountpoint,
                zones,
                helper: None,
                failures: 0,
                told: HashMap::new(),
            }
            .run()
        })
        .map(|_| ())
}

/// Times the helper may fail to start or die in a row before the echo gives up.
const HELPER_TRIES: u32 = 3;

/// The echo thread's state.
struct Echoer {
    echoes: Arc<Echoes>,
    mountpoint: PathBuf,
    /// The zones (whose own-change bookkeeping says which changes only the watcher of the
    /// zones' directories reported were wardfs's own).
    zones: Weak<Zones>,
    /// The process that makes the echo's requests to the mount (started at the first burst).
    helper: Option<Helper>,
    /// The helper's failures in a row.
    failures: u32,
    /// What the echo told of each path in the last [`TOLD_FOR`] (the entry as it was then, or
    /// `None`: removed), and when: the same state is not told twice.
    told: HashMap<PathBuf, (Instant, Option<Told>)>,
}

/// An entry as the echo told of it: enough of its stat to tell another change from the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Told {
    dev: u64,
    ino: u64,
    mode: u32,
    size: i64,
    mtime: (i64, u64),
    ctime: (i64, u64),
}

impl Told {
    fn of(st: &Stat) -> Told {
        Told {
            dev: st.st_dev,
            ino: st.st_ino,
            mode: st.st_mode,
            size: st.st_size,
            mtime: (st.st_mtime, st.st_mtime_nsec),
            ctime: (st.st_ctime, st.st_ctime_nsec),
        }
    }
}

/// Whether an errno says the mount is gone.
fn mount_gone(e: Errno) -> bool {
    matches!(e, Errno::NOTCONN | Errno::CONNABORTED | Errno::NODEV)
}

/// Why a burst stopped.
enum Stop {
    /// The mount is gone: nothing more is echoed.
    MountGone,
    /// The helper is gone: started again at the next burst.
    HelperGone(std::io::Error),
}

impl Echoer {
    fn run(&mut self) {
        // Started now, so that the first change is not told late.
        if let Err(Stop::HelperGone(e)) = self.start_helper() {
            tracing::debug!(error = %e, "cannot start the mount's echo helper yet");
        }
        while let Some((burst, dropped)) = self.echoes.next_burst() {
            if dropped > 0 {
                tracing::warn!(
                    changes = dropped,
                    "changes came faster than the mount's watchers could be told of them; these were not echoed"
                );
            }
            let started = Instant::now();
            self.told
                .retain(|_, (at, _)| started.duration_since(*at) < TOLD_FOR);
            match self.burst(&burst) {
                Ok(()) => self.failures = 0,
                Err(Stop::MountGone) => {
                    tracing::debug!("the mount is gone: its echo stops");
                    break;
                }
                Err(Stop::HelperGone(e)) => {
                    self.helper = None;
                    self.echoes.helper_pid.store(0, Ordering::Relaxed);
                    self.failures += 1;
                    if self.failures >= HELPER_TRIES {
                        tracing::warn!(error = %e, "the mount's echo helper failed {HELPER_TRIES} times in a row; watchers on the mount (editors) now hear only of changes made through it");
                        break;
                    }
                    tracing::debug!(error = %e, "the mount's echo helper is gone; started again at the next change");
                }
            }
            tracing::trace!(
                echoes = burst.len(),
                ms = started.elapsed().as_millis() as u64,
                "echoed a burst"
            );
        }
        self.echoes.close();
    }

    /// True when the change at `backing` (now `st`) was wardfs's own (see `crate::core::own`).
    fn own_change(&self, backing: &Path, st: Option<&Stat>) -> bool {
        self.zones
            .upgrade()
            .is_some_and(|z| z.own().is_own_change_at(backing, st))
    }

    /// Starts the helper unless it runs.
    fn start_helper(&mut self) -> Result<(), Stop> {
        if self.helper.is_none() {
            let h = Helper::spawn(&self.mountpoint).map_err(Stop::HelperGone)?;
            self.echoes
                .helper_pid
                .store(h.pid() as i32, Ordering::Relaxed);
            self.helper = Some(h);
        }
        Ok(())
    }

    /// Echoes a burst through the helper, which holds the mount for the burst only.
    fn burst(&mut self, burst: &[Echo]) -> Result<(), Stop> {
        self.start_helper()?;
        let root = self.mountpoint.clone();
        self.request(Op::Begin(root), Vec::new())?;
        for e in burst {
            if self.echoes.is_closed() {
                break;
            }
            self.echo(e)?;
        }
        // Nothing of the mount is held between bursts: an unmount never waits for the echo.
        self.request(Op::End, Vec::new())
    }

    /// Has the helper perform `op`, with the mount answering its lookups of the names in
    /// `asked`; an operation that fails is logged (its watchers do not hear of it).
    fn request(&mut self, op: Op, asked: Vec<Asked>) -> Result<(), Stop> {
        let helper = self.helper.as_mut().expect("started by the burst");
        let done = self.echoes.asking(asked, || helper.run(&op));
        match done.map_err(Stop::HelperGone)? {
            Ok(()) => Ok(()),
            Err(e) if mount_gone(e) => Err(Stop::MountGone),
            Err(e) => {
                tracing::debug!(op = ?op, error = %e, "a change could not be echoed through the mount; its watchers did not hear of it");
                Ok(())
            }
        }
    }

    /// Echoes `e` as the zones are now (a change undone or redone since it was planned is
    /// echoed as what it came to), unless the echo told of the path as it is now already.
    fn echo(&mut self, e: &Echo) -> Result<(), Stop> {
        let now = rustix::fs::lstat(&e.backing).ok();
        let state = now.as_ref().map(Told::of);
        if self.told.get(&e.rel).is_some_and(|(_, t)| *t == state) {
            return Ok(());
        }
        if e.beside && self.own_change(&e.backing, now.as_ref()) {
            // The mount's own, seen by the watcher before the mount noted it: told already.
            return Ok(());
        }
        let Some(st) = now else {
            return match &e.change {
                Change::Remove { was } => {
                    self.told.insert(e.rel.clone(), (Instant::now(), None));
                    self.remove(e, &e.rel, &e.backing, *was)
                }
                // Gone since: its removal is queued after it.
                _ => Ok(()),
            };
        };
        self.told.insert(e.rel.clone(), (Instant::now(), state));
        match &e.change {
            Change::Create => self.create(e, &st),
            Change::Modify | Change::Remove { .. } => self.modify(&e.rel, &st),
            Change::Attrib => self.request(attrib(&e.rel, &st), Vec::new()),
            Change::MoveFrom {
                from,
                from_backing,
                was,
            } => {
                if rustix::fs::lstat(from_backing).is_ok() {
                    // Something is at the source again: the destination alone is new.
                    return self.create(e, &st);
                }
                self.told.insert(from.clone(), (Instant::now(), None));
                self.rename(e, from, from_backing, *was, &st)
            }
        }
    }

    /// The parent directory of the backing path `backing` as the mount's lookups name it
    /// (zone, backing key), and `rel`'s name. (What the kernel cached of the name was dropped by
    /// the invalidation that planned the echo.)
    fn target(&self, zone: ZoneId, rel: &Path, backing: &Path) -> Option<(DirKey, OsString)> {
        let name = rel.file_name()?.to_owned();
        let (dev, ino) = key(backing.parent()?)?;
        Some(((zone, dev, ino), name))
    }

    /// `IN_CREATE` (and `IN_CLOSE_WRITE` for a file): `e.rel` made again, its kind and mode as
    /// the zone's entry `st` has them.
    fn create(&mut self, e: &Echo, st: &Stat) -> Result<(), Stop> {
        let Some((dir, name)) = self.target(e.zone, &e.rel, &e.backing) else {
            return Ok(());
        };
        let kind = FileType::from_raw_mode(st.st_mode);
        let target = match kind {
            FileType::Symlink => match rustix::fs::readlink(&e.backing, Vec::new()) {
                Ok(t) => Some(PathBuf::from(OsStr::from_bytes(t.as_bytes()))),
                Err(_) => return Ok(()),
            },
            // A device: made beside the mount only, never echoed.
            FileType::CharacterDevice | FileType::BlockDevice | FileType::Unknown => return Ok(()),
            _ => None,
        };
        let op = Op::Create {
            rel: e.rel.clone(),
            kind,
            mode: st.st_mode & 0o7777,
            target,
        };
        self.request(op, vec![Asked::new(dir, name, Answer::Absent)])
    }

    /// `IN_MODIFY` and `IN_CLOSE_WRITE` for a regular file (opened for writing and truncated to
    /// its size: the mount answers the truncation with the file as it is; `IN_ATTRIB` when the
    /// helper may not open it for writing); `IN_ATTRIB` for anything else.
    fn modify(&mut self, rel: &Path, st: &Stat) -> Result<(), Stop> {
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return self.request(attrib(rel, st), Vec::new());
        }
        let op = Op::Modify {
            rel: rel.to_path_buf(),
            size: st.st_size as u64,
            atime: (st.st_atime, st.st_atime_nsec as i64),
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        };
        self.request(op, Vec::new())
    }

    /// `IN_DELETE` (and `IN_DELETE_SELF` for a watch on it): `rel` (behind it `backing`)
    /// removed, as the inode the kernel held there (`was`) or a ghost.
    fn remove(&mut self, e: &Echo, rel: &Path, backing: &Path, was: Was) -> Result<(), Stop> {
        let Some((dir, name)) = self.target(e.zone, rel, backing) else {
            return Ok(());
        };
        let (answer, kind) = match was {
            Some((n, kind)) => (Answer::Held(n, kind), kind),
            None => (Answer::Ghost(FileType::RegularFile), FileType::RegularFile),
        };
        let op = Op::Remove {
            rel: rel.to_path_buf(),
            dir: kind == FileType::Directory,
        };
        self.request(op, vec![Asked::new(dir, name, answer)])
    }

    /// `IN_MOVED_FROM` and `IN_MOVED_TO` with one cookie: `from` renamed to `e.rel`, where the
    /// zones have it now (`st`); when the rename cannot be echoed, a removal and a creation.
    fn rename(
        &mut self,
        e: &Echo,
        from: &Path,
        from_backing: &Path,
        was: Was,
        st: &Stat,
    ) -> Result<(), Stop> {
        let (Some((from_dir, from_name)), Some((to_dir, to_name))) = (
            self.target(e.zone, from, from_backing),
            self.target(e.zone, &e.rel, &e.backing),
        ) else {
            return Ok(());
        };
        let asked = vec![
            Asked::new(from_dir, from_name, Answer::At(to_dir, to_name.clone())),
            Asked::new(to_dir, to_name, Answer::Absent),
        ];
        let op = Op::Rename {
            from: from.to_path_buf(),
            to: e.rel.clone(),
        };
        let helper = self.helper.as_mut().expect("started by the burst");
        let done = self.echoes.asking(asked, || helper.run(&op));
        match done.map_err(Stop::HelperGone)? {
            Ok(()) => Ok(()),
            Err(err) if mount_gone(err) => Err(Stop::MountGone),
            Err(_) => {
                self.remove(e, from, from_backing, was)?;
                self.create(e, st)
            }
        }
    }
}

/// `IN_ATTRIB`: `rel`'s times set to what they are (`st`).
fn attrib(rel: &Path, st: &Stat) -> Op {
    Op::Attrib {
        rel: rel.to_path_buf(),
        atime: (st.st_atime, st.st_atime_nsec as i64),
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo(rel: &str, change: Change) -> Echo {
        Echo {
            zone: ZoneId::Workspace,
            rel: rel.into(),
            backing: Path::new("/b").join(rel),
            change,
            beside: false,
        }
    }

    fn moved(from: &str, to: &str) -> Echo {
        echo(
            to,
            Change::MoveFrom {
                from: from.into(),
                from_backing: Path::new("/b").join(from),
                was: None,
            },
        )
    }

    fn queued(echoes: Vec<Echo>) -> Vec<(String, Change)> {
        let mut q = Queue::default();
        for e in echoes {
            q.push(e);
        }
        q.take()
            .into_iter()
            .map(|e| (e.rel.display().to_string(), e.change))
            .collect()
    }

    #[test]
    fn a_path_changed_many_times_in_a_burst_is_echoed_once_as_what_it_came_to() {
        let ten_writes = (0..10).map(|_| echo("w/a", Change::Modify)).collect();
        assert_eq!(queued(ten_writes), [("w/a".into(), Change::Modify)]);
        let made_then_written = vec![echo("w/a", Change::Create), echo("w/a", Change::Modify)];
        assert_eq!(queued(made_then_written), [("w/a".into(), Change::Create)]);
        let made_then_removed = vec![
            echo("w/a", Change::Create),
            echo("w/b", Change::Modify),
            echo("w/a", Change::Remove { was: None }),
        ];
        assert_eq!(queued(made_then_removed), [("w/b".into(), Change::Modify)]);
        let removed_then_made = vec![
            echo("w/a", Change::Remove { was: None }),
            echo("w/a", Change::Create),
        ];
        assert_eq!(queued(removed_then_made), [("w/a".into(), Change::Modify)]);
    }

    #[test]
    fn a_move_carries_what_was_pending_at_its_source() {
        let made_then_moved = vec![echo("w/a", Change::Create), moved("w/a", "w/b")];
        assert_eq!(queued(made_then_moved), [("w/b".into(), Change::Create)]);
        let moved_twice = queued(vec![moved("w/a", "w/b"), moved("w/b", "w/c")]);
        assert_eq!(moved_twice.len(), 1);
        assert!(
            matches!(&moved_twice[0], (to, Change::MoveFrom { from, .. }) if to == "w/c" && from == Path::new("w/a")),
            "{moved_twice:?}"
        );
        let moved_then_removed = vec![
            moved("w/a", "w/b"),
            echo("w/b", Change::Remove { was: None }),
        ];
        assert_eq!(
            queued(moved_then_removed),
            [("w/a".into(), Change::Remove { was: None })]
        );
        let there_and_back = vec![moved("w/a", "w/b"), moved("w/b", "w/a")];
        assert_eq!(queued(there_and_back), [("w/a".into(), Change::Modify)]);
    }

    #[test]
    fn past_its_bound_the_queue_counts_what_it_drops() {
        let mut q = Queue::default();
        for i in 0..MAX_QUEUED + 10 {
            q.push(echo(&format!("w/{i}"), Change::Create));
        }
        assert_eq!(q.pending.len(), MAX_QUEUED);
        assert_eq!(q.dropped, 10);
        // A path already queued still takes a later change.
        q.push(echo("w/0", Change::Remove { was: None }));
        assert_eq!(q.pending.len(), MAX_QUEUED - 1);
    }
}

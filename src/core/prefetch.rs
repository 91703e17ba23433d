//! Metadata read-ahead for the mount: when the kernel lists a directory, the backing entries of
//! its subdirectories are read and stat'ed on a thread of their own, ahead of the caller.
//!
//! A program walking a tree through the mount (`find`, `ls -R`, an editor's indexer) waits for
//! each directory in turn: the kernel asks for a listing, the daemon reads the backing directory
//! and stats every entry, and on a cold disk each of those reads is a disk access made while
//! everything else stands still. Native `find` pays the same accesses; through the mount they
//! also wait behind the round trips. The read-ahead thread warms the backing file system's own
//! caches (directory blocks, inodes, dentries) for the directories the walk will open next, so
//! the disk works while the walk goes on, and the daemon finds them in memory when asked.
//!
//! The same thread reads ahead of a program that reads a directory's files one after another
//! (`tar`, `rg`, `cat *`): when the kernel asks for the start of a file that is not in its page
//! cache, the small regular files beside it ([`MAX_FILE_BYTES`] each, [`MAX_DIR_BYTES`] in all)
//! are handed to the backing disk's read-ahead (`POSIX_FADV_WILLNEED`, which starts the reads and
//! waits for none), so the next files are on their way while this one is served. While such a
//! program is at work (a file's start was asked for in the last [`READING_FOR`]), the
//! subdirectories warmed ahead of its walk have their small files handed over too: the first file
//! of each directory is then on its way before the program gets there, not only its neighbours.
//!
//! Invariants: it changes nothing and hands nothing out (what it reads only warms the kernel's
//! caches of the backing file system; every answer to the kernel is still read by the request
//! that gives it, with the zone's rules); it opens only plain names from a listing, beneath the
//! pinned descriptor of their parent, with `O_NOFOLLOW | O_DIRECTORY` (never outside the zone)
//! and `O_NOATIME` where allowed (a directory nobody listed keeps its access time); its work is
//! bounded ([`MAX_JOBS`] queued, newest first, the oldest dropped; [`MAX_ENTRIES`] stat'ed per
//! directory; a directory warmed in the last [`REWARM_AFTER`] is not read again).

use std::collections::{HashMap, VecDeque};
use std::ffi::{CStr, OsStr, OsString};
use std::num::NonZeroU64;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};

use super::node::Node;

/// Directories waiting to be warmed at most (each holds its parent's descriptor).
pub const MAX_JOBS: usize = 256;
/// Entries stat'ed per directory at most.
pub const MAX_ENTRIES: usize = 4096;
/// A directory warmed this recently is not warmed again.
pub const REWARM_AFTER: Duration = Duration::from_secs(2);
/// Directories remembered as warmed at most (then the memory starts afresh).
const MAX_WARMED: usize = 1 << 16;
/// Files larger than this are left to the kernel's own read-ahead when it reads them.
pub const MAX_FILE_BYTES: u64 = 256 << 10;
/// Bytes of files read ahead per directory at most.
pub const MAX_DIR_BYTES: u64 = 8 << 20;
/// How long after a file's start was read the subdirectories warmed get their files read ahead.
pub const READING_FOR: Duration = Duration::from_secs(1);

/// What the thread warms.
enum Job {
    /// The subdirectory `name` of a directory: its listing and its entries' inodes.
    Subdir(Arc<Node>, OsString),
    /// The small regular files of a directory: their data.
    Files(Arc<Node>),
}

/// The read-ahead thread and its queue; dropping it stops the thread.
pub struct Prefetch {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Served newest first, as a depth-first walk wants them.
    jobs: VecDeque<Job>,
    /// Backing directories warmed, by `(st_dev, st_ino)` and whether their files were, and when.
    warmed: HashMap<(u64, u64, bool), Instant>,
    /// Directories warmed so far (for tests).
    count: u64,
    /// When a file's start was last asked for: a program reading files is walking the tree.
    reading: Option<Instant>,
}

impl State {
    /// True when `key` was warmed less than [`REWARM_AFTER`] ago.
    fn warmed_lately(&self, key: &(u64, u64, bool)) -> bool {
        self.warmed
            .get(key)
            .is_some_and(|at| at.elapsed() < REWARM_AFTER)
    }
}

impl Prefetch {
    /// Starts the read-ahead thread.
    pub fn start() -> std::io::Result<Prefetch> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("wardfs-prefetch".into())
            .spawn(move || s.run())?;
        Ok(Prefetch {
            shared,
            thread: Some(thread),
        })
    }

    /// Queues the subdirectories `names` of the directory `dir`, to be warmed before anything
    /// queued earlier, the first name first.
    pub fn subdirs<'a>(&self, dir: &Arc<Node>, names: impl DoubleEndedIterator<Item = &'a OsStr>) {
        let mut st = self.shared.state.lock().expect("not poisoned");
        let mut queued = false;
        for name in names.rev() {
            // Listings give plain names; anything else is not a subdirectory of `dir`.
            let b = name.as_encoded_bytes();
            if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') {
                continue;
            }
            if st.jobs.len() >= MAX_JOBS {
                st.jobs.pop_front();
            }
            st.jobs
                .push_back(Job::Subdir(dir.clone(), name.to_os_string()));
            queued = true;
        }
        if queued {
            self.shared.wake.notify_one();
        }
    }

    /// Queues the small files of the directory `dir` for read-ahead, to be served first.
    pub fn files(&self, dir: &Arc<Node>) {
        let mut st = self.shared.state.lock().expect("not poisoned");
        st.reading = Some(Instant::now());
        if st.warmed_lately(&(dir.dev, dir.ino(), true)) {
            return;
        }
        if st.jobs.len() >= MAX_JOBS {
            st.jobs.pop_front();
        }
        st.jobs.push_back(Job::Files(dir.clone()));
        self.shared.wake.notify_one();
    }

    /// Directories warmed since the start.
    pub fn warmed(&self) -> u64 {
        self.shared.state.lock().expect("not poisoned").count
    }
}

impl Drop for Prefetch {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        {
            // Under the lock: the thread is either waiting (and woken) or about to see `stop`.
            let _st = self.shared.state.lock().expect("not poisoned");
            self.shared.wake.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn run(&self) {
        loop {
            let job = {
                let mut st = self.state.lock().expect("not poisoned");
                loop {
                    if self.stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if let Some(job) = st.jobs.pop_back() {
                        break job;
                    }
                    st = self.wake.wait(st).expect("not poisoned");
                }
            };
            match job {
                Job::Subdir(dir, name) => self.warm(&dir, &name),
                Job::Files(dir) => self.read_ahead(&dir),
            }
        }
    }

    /// Opens the directory `name` beneath `dir` (never through a symlink) and its listing,
    /// unless it (its files, with `files`) was warmed lately; notes it as warmed now.
    fn listing(
        &self,
        dir: &Node,
        name: &OsStr,
        files: bool,
    ) -> Option<(OwnedFd, Stat, rustix::fs::Dir)> {
        let dfd = dir.fd().ok()?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = open_noatime(&dfd, name, flags).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if !self.first_warm(&st, files) {
            return None;
        }
        let entries = rustix::fs::Dir::read_from(&fd).ok()?;
        Some((fd, st, entries))
    }

    /// Notes the directory `st` describes as warmed (its files, with `files`) now; false when
    /// it was already, lately.
    fn first_warm(&self, st: &rustix::fs::Stat, files: bool) -> bool {
        let mut s = self.state.lock().expect("not poisoned");
        let key = (st.st_dev, st.st_ino, files);
        if s.warmed_lately(&key) {
            return false;
        }
        if s.warmed.len() >= MAX_WARMED {
            s.warmed.clear();
        }
        s.warmed.insert(key, Instant::now());
        s.count += 1;
        true
    }

    /// Hands the small regular files of `dir` to the backing disk's read-ahead.
    fn read_ahead(&self, dir: &Node) {
        let Some((fd, _, entries)) = self.listing(dir, OsStr::new("."), true) else {
            return;
        };
        let mut budget = MAX_DIR_BYTES;
        for ent in entries.take(MAX_ENTRIES + 2) {
            let Ok(ent) = ent else { break };
            if ent.file_type() != rustix::fs::FileType::RegularFile {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&fd, ent.file_name(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if !self.will_need(&fd, ent.file_name(), &st, &mut budget) {
                return;
            }
        }
    }

    /// Hands the file `name` of the open directory `dir`, stat'ed as `st`, to the backing disk's
    /// read-ahead when it is a small regular file with one name and `budget` has room for it;
    /// false when the budget is spent (or the thread stops).
    fn will_need(&self, dir: &OwnedFd, name: &CStr, st: &Stat, budget: &mut u64) -> bool {
        let size = st.st_size as u64;
        let regular = FileType::from_raw_mode(st.st_mode) == FileType::RegularFile;
        if !regular || size == 0 || size > MAX_FILE_BYTES || st.st_nlink != 1 {
            return true;
        }
        if size > *budget || self.stop.load(Ordering::Relaxed) {
            return false;
        }
        *budget -= size;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        if let Ok(f) = open_noatime(dir, name, flags) {
            let _ = rustix::fs::fadvise(&f, 0, NonZeroU64::new(size), rustix::fs::Advice::WillNeed);
        }
        true
    }

    /// Reads the directory `name` in `dir` and stats its entries, and while a program reads
    /// files, hands its small files to read-ahead; errors end it quietly (the request that comes
    /// for it, if one does, reports them).
    fn warm(&self, dir: &Node, name: &OsStr) {
        let Some((fd, st, entries)) = self.listing(dir, name, false) else {
            return;
        };
        // A program reading files walks here next: its files too, unless they were lately.
        let mut files = self.reading_lately() && self.first_warm(&st, true);
        let mut budget = MAX_DIR_BYTES;
        for ent in entries.take(MAX_ENTRIES + 2) {
            let Ok(ent) = ent else { break };
            let n = ent.file_name().to_bytes();
            if n == b"." || n == b".." {
                continue;
            }
            let st = rustix::fs::statat(&fd, ent.file_name(), AtFlags::SYMLINK_NOFOLLOW);
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if let (true, Ok(st)) = (files, st) {
                files = self.will_need(&fd, ent.file_name(), &st, &mut budget);
            }
        }
    }

    /// True when a program read a file's start in the last [`READING_FOR`].
    fn reading_lately(&self) -> bool {
        let st = self.state.lock().expect("not poisoned");
        st.reading.is_some_and(|at| at.elapsed() < READING_FOR)
    }
}

/// Opens `name` beneath `dir` with `flags` and `O_NOATIME`, or without it where the kernel
/// allows that to the owner (or `CAP_FOWNER`) only.
fn open_noatime<P: rustix::path::Arg + Copy>(
    dir: impl std::os::fd::AsFd,
    name: P,
    flags: OFlags,
) -> rustix::io::Result<std::os::fd::OwnedFd> {
    let dir = dir.as_fd();
    match rustix::fs::openat(dir, name, flags | OFlags::NOATIME, Mode::empty()) {
        Err(rustix::io::Errno::PERM) => rustix::fs::openat(dir, name, flags, Mode::empty()),
        other => other,
    }
}

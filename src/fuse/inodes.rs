//! The inode table: FUSE inode numbers ↔ backing files ([`Node`]s).
//!
//! Every inode the kernel knows about holds a [`Node`] of its backing file, found one name at a
//! time beneath its parent (the kernel resolves paths in the mount; we only ever look up a single
//! component), so no lookup can leave a zone. A directory, or a file with more than one link, is
//! *pinned*: it holds an `O_PATH | O_NOFOLLOW` fd. A regular file or symlink with one link is
//! *held by name*: its pinned parent and its name, reopened beneath the parent when an
//! operation needs it and checked against the `(st_dev, st_ino)` it was looked up as, so a name
//! reused by another file gives `ESTALE`, never that file. So is a regular file with more links
//! in a zone that breaks them: its first change gives its name a copy of its own
//! (`Zones::node_break_links`), and its inode then stands for the copy ([`Inodes::follow_copy`]). Before the mount removes, replaces or
//! links a name, its file is pinned, so it stays reachable while the kernel holds it. Numbers are
//! assigned per zone and backing `(st_dev, st_ino)` and kept for the life of the mount, so hard
//! links within a zone share an inode and a file looked up again after `forget` gets the number it
//! had before. A fork's files are hard links of its parent's (`crate::fork`): keyed by zone too,
//! the fork's name and the parent's name of one file are two inodes to the kernel, with a page
//! cache, a passthrough backing file and an implicit writer each, so a write through one copies
//! up that name only and the other keeps the old contents.
//!
//! A backing file's number in a zone of the config is its own `st_ino` where that is free (not
//! one of the fixed numbers below [`FIRST_FREE`], not taken by a file of another device), else one
//! from a range no filesystem hands out ([`SPILL_BASE`] up). So the numbers are the same after a
//! remount, and the same as on the backing directory, as bindfs's are: git's index, which records
//! each file's inode number, stays valid, where new numbers at every mount made the first `git
//! status` after it re-read and hash every file. In a fork it is its `st_ino` with the fork's
//! slot above it ([`FORK_FILE_BASE`]): as stable, and the same as the parent's in the low 32 bits
//! git's index keeps, so a new fork's index still matches its files.
//!
//! The table also remembers the names the kernel has known files by, past the kernel's
//! forgetting of their inodes ([`Inodes::named`]): a change made outside the mount is then
//! told to the mount's watchers as a change of a file they know rather than a new one, and a
//! removal names what was removed (`super::echo`). Numbers from [`GHOST_BASE`] up stand for no
//! file: the echo answers with one for a removed name whose inode the kernel has forgotten.
//!
//! The forks' roots (`MOUNT/forks/NAME`) are looked up like files, counted and forgotten; each
//! fork gets a new root number when the fork's directory changes (removed and made again under
//! its name), so the kernel lets go of what it held beneath the old one ([`Inodes::fork_root`]).
//!
//! The descriptors are budgeted: the kernel keeps inodes as long as their dentries stay cached
//! (our TTLs are long), and each pinned one holds one fd here; files held by name hold none, so
//! a tree of any number of files under a few thousand directories stays cached whole. When the
//! pinned entries pass the high-water mark (three quarters of `RLIMIT_NOFILE`), or all entries
//! pass [`MAX_LIVE`] (memory), the table asks for entries to be dropped from the kernel's cache
//! (`inval_entry` on the name they were last seen under, sent by the invalidation thread); the
//! kernel then forgets them and their fds close.
//!
//! Which entries: files before directories, and among them the ones that came in last. Not the
//! least recently looked up: the kernel sends no LOOKUP for an entry it still caches, so "least
//! recently looked up" means "still cached and in use", and a tree larger than the budget walked
//! again and again (`git status`, `find`, `rg` on every run) would lose exactly the entries that
//! hit, and miss on every one. Dropping the newest keeps the first entries cached across runs:
//! each later walk finds that part of the tree in the kernel's cache (scan-resistant, the way
//! a cache that protects what it holds against one pass over more than it can hold is).

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use rustix::fs::{FileType, Stat};

use crate::config::MAX_FORK_NAMES;
use crate::core::node::Node;
use crate::core::ZoneId;

/// The top-level directory holding the zones.
pub const ROOT_INO: u64 = 1;

/// Numbers below this are the mount's own (the root, the zone roots, spare).
pub const FIRST_FREE: u64 = 16;

/// Where numbers for files whose `st_ino` cannot be used start (2^62: far above what
/// filesystems hand out).
pub const SPILL_BASE: u64 = 1 << 62;

/// Live inodes held by name cost no descriptor, only memory (a few hundred bytes each): above
/// this many in all, entries are evicted as for the descriptor budget.
pub const MAX_LIVE: usize = 1 << 20;

/// The directory holding the forks' roots (`MOUNT/forks`): virtual, like the top level.
pub const FORKS_INO: u64 = 4;

/// The file only the daemon's open probe sees in the top level (see `super::probe`).
pub const PROBE_INO: u64 = 5;

/// Where the numbers of the forks' roots start: a fork's first root is `FORK_ROOT_BASE + slot`,
/// a fork made again under its name later gets `MAX_FORK_NAMES` more each time (far above the
/// numbers files get, spilled ones and forks' included).
pub const FORK_ROOT_BASE: u64 = 3 << 62;

/// Where the numbers of forks' files start: `FORK_FILE_BASE + (slot << FORK_INO_BITS) +
/// st_ino`, for an `st_ino` below `1 << FORK_INO_BITS` (else a spilled number).
pub const FORK_FILE_BASE: u64 = 1 << 63;

/// Where the numbers of ghosts start: an entry the mount's echo of a removal answers for a name
/// whose file is gone and whose inode the kernel no longer holds (see `super::echo`). Counted up,
/// never reused; the kernel forgets each at once. Between the spill range's start and the forks'
/// files, far above any number spilled.
pub const GHOST_BASE: u64 = SPILL_BASE + (1 << 61);

/// The bits of a fork file's `st_ino` its number keeps (see [`FORK_FILE_BASE`]).
const FORK_INO_BITS: u32 = 50;

// Every fork slot's files fit between FORK_FILE_BASE and FORK_ROOT_BASE.
const _: () = assert!((MAX_FORK_NAMES as u64) << FORK_INO_BITS <= FORK_ROOT_BASE - FORK_FILE_BASE);

/// Returns the number of a zone root: fixed for the config's zones; for a fork, the number of
/// its first root (see [`FORK_ROOT_BASE`]).
pub fn zone_ino(z: ZoneId) -> u64 {
    match z {
        ZoneId::Cache => 2,
        ZoneId::Workspace => 3,
        ZoneId::Fork(_) => fork_root_ino(z, 0),
    }
}

/// The root number of the `generation`th directory the fork `z` has had in this mount.
fn fork_root_ino(z: ZoneId, generation: u64) -> u64 {
    let slot = z.fork_slot().unwrap_or(0) as u64;
    FORK_ROOT_BASE + generation * MAX_FORK_NAMES as u64 + slot
}

/// The number a backing file `backing_ino` would like in `zone` (taken unless another file has
/// it): its own `st_ino` in a zone of the config, that with the slot above it in a fork.
fn preferred_number(zone: ZoneId, backing_ino: u64) -> Option<u64> {
    match zone.fork_slot() {
        None => (FIRST_FREE..SPILL_BASE)
            .contains(&backing_ino)
            .then_some(backing_ino),
        Some(slot) => (backing_ino < 1 << FORK_INO_BITS)
            .then(|| FORK_FILE_BASE + ((slot as u64) << FORK_INO_BITS) + backing_ino),
    }
}

/// A backing file as one zone sees it: (zone, `st_dev`, `st_ino`).
type NumberKey = (ZoneId, u64, u64);

/// The numbers handed out, by the zone and backing file they stand for, and the zones that have
/// any (to find every zone's number of one backing file).
#[derive(Default)]
struct Numbers {
    map: HashMap<NumberKey, u64>,
    zones: Vec<ZoneId>,
}

impl Numbers {
    fn get(&self, zone: ZoneId, dev: u64, backing_ino: u64) -> Option<u64> {
        self.map.get(&(zone, dev, backing_ino)).copied()
    }

    fn insert(&mut self, zone: ZoneId, dev: u64, backing_ino: u64, n: u64) {
        if !self.zones.contains(&zone) {
            self.zones.push(zone);
        }
        self.map.insert((zone, dev, backing_ino), n);
    }

    /// Every zone's number of the backing file.
    fn all(&self, dev: u64, backing_ino: u64) -> Vec<u64> {
        self.zones
            .iter()
            .filter_map(|z| self.get(*z, dev, backing_ino))
            .collect()
    }

    /// Forgets `zone`'s numbers (a fork whose directory is gone).
    fn drop_zone(&mut self, zone: ZoneId) {
        if let Some(i) = self.zones.iter().position(|z| *z == zone) {
            self.zones.swap_remove(i);
            self.map.retain(|(z, _, _), _| *z != zone);
        }
    }
}

/// The names the kernel has known files by: (parent inode, name) → the inode it knew there
/// (number, kind), kept as a hash of the pair (a few bytes a name, not a second copy of it). A
/// name stays known after the kernel forgets its inode (its cache was dropped, by an
/// invalidation or by memory pressure: a watcher on the mount still knows the name), until it
/// is removed or moved away through the mount, or another file is looked up under it. Bounded:
/// past [`MAX_LIVE`] names it starts again. Two pairs of one hash can only make a change look
/// like another kind of change to a watcher (see `super::echo`), never reach a file.
#[derive(Default)]
struct Names {
    map: HashMap<u64, (u64, FileType)>,
    hasher: std::collections::hash_map::RandomState,
}

impl Names {
    fn key(&self, parent: u64, name: &OsStr) -> u64 {
        use std::hash::BuildHasher;
        self.hasher.hash_one((parent, name))
    }

    fn insert(&mut self, parent: u64, name: &OsStr, ino: u64, kind: FileType) {
        if self.map.len() >= MAX_LIVE {
            self.map.clear();
        }
        let k = self.key(parent, name);
        self.map.insert(k, (ino, kind));
    }

    /// Drops the pair, if it still names `ino` (any inode when `ino` is `None`).
    fn remove(&mut self, parent: u64, name: &OsStr, ino: Option<u64>) {
        let k = self.key(parent, name);
        if ino.is_none() || self.map.get(&k).map(|v| v.0) == ino {
            self.map.remove(&k);
        }
    }
}

/// What the mount knows of a fork slot's root: how many directories it has had (the root's
/// number, [`fork_root_ino`]), and the backing key of the present one (`None`: the fork is gone).
#[derive(Debug, Clone, Copy)]
struct ForkRoot {
    generation: u64,
    dir: Option<(u64, u64)>,
}

/// One backing file the kernel holds a reference to: the core's [`Node`] (its `O_PATH` fd, zone
/// and type) plus what the kernel's bookkeeping needs.
#[derive(Debug)]
pub struct Inode {
    pub ino: u64,
    pub node: Arc<Node>,
    nlookup: AtomicU64,
    /// The kernel wants one backing file per inode for passthrough: registered at the first open
    /// and kept for the inode's life, so later opens need neither a reopen nor an ioctl.
    pub backing: Mutex<Option<Arc<fuser::BackingId>>>,
    /// Where the kernel last looked it up: (parent inode, name), for evicting it.
    seen_as: Mutex<(u64, OsString)>,
    /// The table's clock when the entry came in (the newest are evicted first).
    born: u64,
    /// Counted in [`Inodes::pinned`] (it came in holding a descriptor).
    counted: bool,
    /// When the mount last began to change the file's size or contents (milliseconds on
    /// `super::handles::now_ms`'s clock; 0: never). See [`Inode::changed_through_mount`].
    mount_changed_ms: AtomicU64,
}

impl Inode {
    /// How long after a change through the mount the echo leaves the file alone.
    pub const MOUNT_CHANGE_QUIET_MS: u64 = 1000;

    /// Notes that the mount begins a change of the file's size or contents (a write, a
    /// truncation).
    pub fn changing_through_mount(&self) {
        self.mount_changed_ms
            .store(super::handles::now_ms().max(1), Ordering::Relaxed);
    }

    /// True when the mount changed the file within [`Inode::MOUNT_CHANGE_QUIET_MS`]: the kernel
    /// tracks its size as the mount's writes go, and attributes the daemon answers meanwhile
    /// may be applied after a later write (see `WardFs::echo_created`).
    pub fn changed_through_mount(&self) -> bool {
        let at = self.mount_changed_ms.load(Ordering::Relaxed);
        at != 0 && super::handles::now_ms().saturating_sub(at) < Inode::MOUNT_CHANGE_QUIET_MS
    }
}

impl std::ops::Deref for Inode {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

/// Asks the invalidation thread to evict entries (see [`Inodes::evict_plan`]).
pub type PressureHook = Box<dyn Fn() + Send + Sync>;

/// The table of live inodes.
pub struct Inodes {
    live: RwLock<HashMap<u64, Arc<Inode>>>,
    /// Live inodes holding a descriptor (what the budget counts).
    pinned: AtomicUsize,
    /// The numbers handed out, by the zone and backing file they stand for, and the set of them.
    numbers: Mutex<Numbers>,
    taken: Mutex<std::collections::HashSet<u64>>,
    /// The forks' roots, by slot.
    fork_roots: Mutex<HashMap<usize, ForkRoot>>,
    /// The names the kernel has known files by (see [`Inodes::named`]).
    names: Mutex<Names>,
    next: AtomicU64,
    next_ghost: AtomicU64,
    clock: AtomicU64,
    /// Pinned inodes above this ask for eviction; eviction goes down to `low`.
    high: usize,
    low: usize,
    /// Live inodes of any kind above this ask for eviction too (memory; down to 2/3 of it).
    max_live: usize,
    evicting: AtomicBool,
    on_pressure: OnceLock<PressureHook>,
}

impl Default for Inodes {
    fn default() -> Self {
        Inodes::new()
    }
}

impl Inodes {
    /// A table budgeted to the process's fd limit.
    pub fn new() -> Inodes {
        let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        let fds = lim.current.unwrap_or(1 << 20).min(1 << 20) as usize;
        Inodes::with_budget(fds / 4 * 3)
    }

    /// A table that asks for eviction above `high` live inodes.
    pub fn with_budget(high: usize) -> Inodes {
        let high = high.max(64);
        Inodes {
            live: RwLock::default(),
            pinned: AtomicUsize::new(0),
            numbers: Mutex::default(),
            taken: Mutex::default(),
            fork_roots: Mutex::default(),
            names: Mutex::default(),
            next: AtomicU64::new(SPILL_BASE),
            next_ghost: AtomicU64::new(GHOST_BASE),
            clock: AtomicU64::new(0),
            high,
            low: high / 3 * 2,
            max_live: MAX_LIVE.max(high),
            evicting: AtomicBool::new(false),
            on_pressure: OnceLock::new(),
        }
    }

    /// Sets what to call when the table passes its high-water mark (once; later calls are ignored).
    pub fn set_pressure_hook(&self, hook: PressureHook) {
        let _ = self.on_pressure.set(hook);
    }

    /// Returns the number of live inodes (zone roots included).
    pub fn live_count(&self) -> usize {
        self.live.read().expect("not poisoned").len()
    }

    /// The entries to drop from the kernel's cache, the newest first (files before directories;
    /// see the module docs), to bring the table down to its low-water mark: (parent inode,
    /// name). Ends the eviction request.
    pub fn evict_plan(&self) -> Vec<(u64, OsString)> {
        let live = self.live.read().expect("not poisoned");
        let pinned_excess = self.pinned.load(Ordering::Relaxed).saturating_sub(self.low);
        let live_excess = live.len().saturating_sub(self.max_live / 3 * 2);
        let mut plan: Vec<((bool, std::cmp::Reverse<u64>), u64, OsString)> = Vec::new();
        if pinned_excess + live_excess > 0 {
            plan = live
                .values()
                .filter(|i| i.ino > 3 && (live_excess > 0 || i.node.is_pinned()))
                .map(|i| {
                    let (parent, name) = i.seen_as.lock().expect("not poisoned").clone();
                    // Directories last: dropping one drops everything cached beneath it (its
                    // listing, its children, the names known not to exist in it).
                    let dir = i.kind == FileType::Directory;
                    ((dir, std::cmp::Reverse(i.born)), parent, name)
                })
                .collect();
            plan.sort_unstable_by_key(|(key, _, _)| *key);
            plan.truncate(pinned_excess.max(live_excess));
        }
        self.evicting.store(false, Ordering::Release);
        plan.into_iter().map(|(_, p, n)| (p, n)).collect()
    }

    /// Returns the number of live inodes holding a descriptor.
    pub fn pinned_count(&self) -> usize {
        self.pinned.load(Ordering::Relaxed)
    }

    /// Notes that the kernel now knows `ino` as `name` in `parent`, whose node is `dir` (after
    /// a rename).
    pub fn seen_as(&self, ino: u64, parent: u64, dir: &Arc<Node>, name: &OsStr) {
        if let Some(i) = self.get(ino) {
            self.rename_seen(&i, parent, name);
            i.node.moved(dir, name);
        }
    }

    /// Sets the name the kernel knows `inode` as, in [`Inode::seen_as`] and in [`Names`].
    fn rename_seen(&self, inode: &Inode, parent: u64, name: &OsStr) {
        let mut seen = inode.seen_as.lock().expect("not poisoned");
        let mut names = self.names.lock().expect("not poisoned");
        names.remove(seen.0, &seen.1, Some(inode.ino));
        names.insert(parent, name, inode.ino, inode.kind);
        *seen = (parent, name.to_owned());
    }

    /// The inode the kernel last knew as `name` in `parent` (number, kind), if it has known
    /// one there and the name was not removed through the mount since: its file may be gone,
    /// or another may have the name now, and the kernel may have forgotten it.
    pub fn named(&self, parent: u64, name: &OsStr) -> Option<(u64, FileType)> {
        let (ino, kind) = {
            let names = self.names.lock().expect("not poisoned");
            *names.map.get(&names.key(parent, name))?
        };
        let moved_away = self.get(ino).is_some_and(|i| {
            let seen = i.seen_as.lock().expect("not poisoned");
            seen.0 != parent || seen.1 != name
        });
        (!moved_away).then_some((ino, kind))
    }

    /// Notes that the kernel no longer knows any inode as `name` in `parent` (removed, or moved
    /// away, through the mount).
    pub fn unname(&self, parent: u64, name: &OsStr) {
        self.names
            .lock()
            .expect("not poisoned")
            .remove(parent, name, None);
    }

    /// Counts one more kernel reference to the live inode `ino` (looked up again under a name
    /// it no longer has; see `super::echo`). False when it is not live.
    pub fn looked_up_again(&self, ino: u64) -> bool {
        let live = self.live.read().expect("not poisoned");
        match live.get(&ino) {
            Some(i) => {
                i.nlookup.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// A new ghost number (see [`GHOST_BASE`]).
    pub fn ghost(&self) -> u64 {
        self.next_ghost.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers a zone root (never forgotten): `fd` and its stat `st` come from the core.
    pub fn add_zone_root(&self, zone: ZoneId, fd: OwnedFd, st: &Stat) {
        let ino = zone_ino(zone);
        self.numbers
            .lock()
            .expect("not poisoned")
            .insert(zone, st.st_dev, st.st_ino, ino);
        self.live.write().expect("not poisoned").insert(
            ino,
            Arc::new(Inode {
                ino,
                node: Arc::new(Node::new(zone, fd, st)),
                nlookup: AtomicU64::new(1),
                backing: Mutex::new(None),
                seen_as: Mutex::new((ROOT_INO, OsString::from(zone.name()))),
                born: 0,
                counted: false,
                mount_changed_ms: AtomicU64::new(0),
            }),
        );
    }

    /// Returns a live inode.
    pub fn get(&self, ino: u64) -> Option<Arc<Inode>> {
        self.live.read().expect("not poisoned").get(&ino).cloned()
    }

    /// Returns the number for a backing file in `zone`, assigning one if it has none.
    pub fn number_of(&self, zone: ZoneId, dev: u64, backing_ino: u64) -> u64 {
        let mut numbers = self.numbers.lock().expect("not poisoned");
        if let Some(n) = numbers.get(zone, dev, backing_ino) {
            return n;
        }
        let n = preferred_number(zone, backing_ino)
            .filter(|n| self.taken.lock().expect("not poisoned").insert(*n))
            .unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed));
        numbers.insert(zone, dev, backing_ino, n);
        n
    }

    /// Gives a backing file of `zone` a new number from the spill range (its old one still
    /// names a gone file the kernel holds).
    fn renumber(&self, zone: ZoneId, dev: u64, backing_ino: u64) -> u64 {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.numbers
            .lock()
            .expect("not poisoned")
            .insert(zone, dev, backing_ino, n);
        n
    }

    /// Notes that inode `ino` of `zone` now stands for the backing file `new` instead of `old`
    /// (the hard-link rule gave its name a copy of its own, which the node follows): the old
    /// file, still named by its other links, gets a number of its own if it is looked up again.
    pub fn follow_copy(&self, zone: ZoneId, ino: u64, old: (u64, u64), new: (u64, u64)) {
        let mut numbers = self.numbers.lock().expect("not poisoned");
        if numbers.get(zone, old.0, old.1) == Some(ino) {
            numbers.map.remove(&(zone, old.0, old.1));
        }
        numbers.insert(zone, new.0, new.1, ino);
    }

    /// Returns the number of a backing file in `zone` if the kernel may know it.
    pub fn known_number(&self, zone: ZoneId, dev: u64, backing_ino: u64) -> Option<u64> {
        self.numbers
            .lock()
            .expect("not poisoned")
            .get(zone, dev, backing_ino)
    }

    /// Returns every zone's number of a backing file (a fork's file may be its parent's too).
    pub fn known_numbers(&self, dev: u64, backing_ino: u64) -> Vec<u64> {
        self.numbers
            .lock()
            .expect("not poisoned")
            .all(dev, backing_ino)
    }

    /// True when the kernel holds an inode for the backing file, in any zone.
    pub fn is_live(&self, dev: u64, backing_ino: u64) -> bool {
        let numbers = self.known_numbers(dev, backing_ino);
        let live = self.live.read().expect("not poisoned");
        numbers.iter().any(|n| live.contains_key(n))
    }

    /// The root number of fork `zone` whose directory is `dir` (its backing key): the one it
    /// had, unless the fork's directory changed since (the fork was removed and made again),
    /// which gets a new number, and the numbers of the old directory's files are forgotten.
    pub fn fork_root_number(&self, zone: ZoneId, dir: (u64, u64)) -> u64 {
        let Some(slot) = zone.fork_slot() else {
            return zone_ino(zone);
        };
        let mut roots = self.fork_roots.lock().expect("not poisoned");
        let root = roots.entry(slot).or_insert(ForkRoot {
            generation: 0,
            dir: None,
        });
        match root.dir {
            Some(known) if known == dir => {}
            Some(_) => {
                // Made again: nothing the kernel holds of the old one may be taken for it.
                self.numbers.lock().expect("not poisoned").drop_zone(zone);
                root.generation += 1;
                root.dir = Some(dir);
            }
            None => root.dir = Some(dir),
        }
        let n = fork_root_ino(zone, root.generation);
        self.numbers
            .lock()
            .expect("not poisoned")
            .insert(zone, dir.0, dir.1, n);
        n
    }

    /// Records one kernel lookup of the root of fork `zone`, named `name` in [`FORKS_INO`]:
    /// `fd` and its stat `st` come from the core. Returns its inode.
    pub fn fork_root(&self, zone: ZoneId, name: &OsStr, fd: OwnedFd, st: &Stat) -> Arc<Inode> {
        let ino = self.fork_root_number(zone, (st.st_dev, st.st_ino));
        let mut live = self.live.write().expect("not poisoned");
        if let Some(existing) = live.get(&ino) {
            existing.nlookup.fetch_add(1, Ordering::Relaxed);
            return existing.clone();
        }
        let inode = Arc::new(Inode {
            ino,
            node: Arc::new(Node::new(zone, fd, st)),
            nlookup: AtomicU64::new(1),
            backing: Mutex::new(None),
            seen_as: Mutex::new((FORKS_INO, name.to_owned())),
            born: self.clock.fetch_add(1, Ordering::Relaxed),
            counted: true,
            mount_changed_ms: AtomicU64::new(0),
        });
        live.insert(ino, inode.clone());
        self.pinned.fetch_add(1, Ordering::Relaxed);
        inode
    }

    /// Notes which forks exist now (`alive`): a fork gone since is let go of, its root and the
    /// numbers of its files, so nothing the kernel still holds of it reaches a fork made again
    /// under its name. Returns the forks let go of.
    pub fn forks_alive(&self, alive: &[ZoneId]) -> Vec<ZoneId> {
        let mut roots = self.fork_roots.lock().expect("not poisoned");
        let mut gone = Vec::new();
        for (slot, root) in roots.iter_mut() {
            let zone = ZoneId::fork_at(*slot);
            let Some(zone) = zone.filter(|z| root.dir.is_some() && !alive.contains(z)) else {
                continue;
            };
            self.numbers.lock().expect("not poisoned").drop_zone(zone);
            let ino = fork_root_ino(zone, root.generation);
            if let Some(inode) = self.live.write().expect("not poisoned").remove(&ino) {
                if inode.counted {
                    self.pinned.fetch_sub(1, Ordering::Relaxed);
                }
            }
            root.dir = None;
            root.generation += 1;
            gone.push(zone);
        }
        gone
    }

    /// Records one kernel lookup of `node` (whose stat is `st`), found as `name` in `parent`
    /// (whose node is `dir`); returns its inode. A second node for an inode already live is
    /// dropped, and the live one learns the name (see [`Node::moved`]).
    pub fn remember(
        &self,
        node: Node,
        st: &Stat,
        parent: u64,
        dir: &Arc<Node>,
        name: &OsStr,
    ) -> Arc<Inode> {
        let zone = node.zone;
        let mut ino = self.number_of(zone, st.st_dev, st.st_ino);
        let now = self.clock.fetch_add(1, Ordering::Relaxed);
        let mut live = self.live.write().expect("not poisoned");
        if let Some(existing) = live.get(&ino) {
            if existing.kind == node.kind {
                existing.nlookup.fetch_add(1, Ordering::Relaxed);
                self.rename_seen(existing, parent, name);
                existing.node.moved(dir, name);
                return existing.clone();
            }
            // The kernel still holds this number for a file held by name that is gone (removed
            // beside the mount: by the API, a restore, a pull), and the backing filesystem gave
            // its inode number to this one, of another kind (a symlink's to a file). The kernel
            // cannot change an inode's type: answering with the old number would leave it a
            // file the table takes for a symlink (reads failing with EBADF). This one gets a
            // number of its own; the old stays with the old inode until the kernel forgets it.
            ino = self.renumber(zone, st.st_dev, st.st_ino);
        }
        let counted = node.is_pinned();
        let inode = Arc::new(Inode {
            ino,
            node: Arc::new(node),
            nlookup: AtomicU64::new(1),
            backing: Mutex::new(None),
            seen_as: Mutex::new((parent, name.to_owned())),
            born: now,
            counted,
            mount_changed_ms: AtomicU64::new(0),
        });
        live.insert(ino, inode.clone());
        self.names
            .lock()
            .expect("not poisoned")
            .insert(parent, name, ino, inode.kind);
        let pinned = if counted {
            self.pinned.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.pinned.load(Ordering::Relaxed)
        };
        let pressure = pinned > self.high || live.len() > self.max_live;
        drop(live);
        if pressure {
            self.press();
        }
        inode
    }

    /// Asks the invalidation thread to evict entries, unless it is already doing so (also
    /// called when the daemon runs out of descriptors before the table saw it coming).
    pub fn press(&self) {
        if !self.evicting.swap(true, Ordering::AcqRel) {
            match self.on_pressure.get() {
                Some(hook) => hook(),
                None => self.evicting.store(false, Ordering::Release),
            }
        }
    }

    /// Drops `n` kernel references; the fd is closed when none remain (the config's zone roots
    /// stay).
    pub fn forget(&self, ino: u64, n: u64) {
        if ino < FIRST_FREE {
            return;
        }
        let mut live = self.live.write().expect("not poisoned");
        if let Some(inode) = live.get(&ino) {
            let prev = inode.nlookup.fetch_sub(
                n.min(inode.nlookup.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
            if prev <= n {
                if inode.counted {
                    self.pinned.fetch_sub(1, Ordering::Relaxed);
                }
                // Its name stays known (see [`Names`]).
                live.remove(&ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{Mode, OFlags};

    /// A pinned node of `path`.
    fn pinned(path: &std::path::Path) -> (Node, Stat) {
        let fd = rustix::fs::open(path, OFlags::PATH | OFlags::NOFOLLOW, Mode::empty()).unwrap();
        let st = rustix::fs::fstat(&fd).unwrap();
        (Node::new(ZoneId::Workspace, fd, &st), st)
    }

    /// Looks up `n` new files of `dir` (as the kernel would, one LOOKUP each), from `from` on,
    /// each holding a descriptor (as files with a second link do).
    fn look_up(t: &Inodes, dir: &std::path::Path, from: usize, n: usize) {
        let parent = Arc::new(pinned(dir).0);
        for i in from..from + n {
            let name = format!("f{i}");
            let path = dir.join(&name);
            std::fs::write(&path, b"x").unwrap();
            let (node, st) = pinned(&path);
            t.remember(
                node,
                &st,
                zone_ino(ZoneId::Workspace),
                &parent,
                OsStr::new(&name),
            );
        }
    }

    #[test]
    fn a_backing_inode_number_reused_by_another_kind_of_file_gets_a_number_of_its_own() {
        // The checkpoint model test's EBADF (1 run in 130): the kernel held a symlink held by
        // name; a restore removed it and made a file, which the backing filesystem gave the
        // symlink's inode number. The lookup answered with the symlink's number and attributes
        // of a file; the kernel read the "file" and the table, which took it for the symlink,
        // said EBADF.
        let dir = tempfile::tempdir().unwrap();
        let t = Inodes::with_budget(100);
        let parent = Arc::new(pinned(dir.path()).0);
        std::os::unix::fs::symlink("x", dir.path().join("l")).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let link = rustix::fs::lstat(dir.path().join("l")).unwrap();
        let node = Node::named(&parent, OsStr::new("l"), &link);
        let old = t.remember(node, &link, 3, &parent, OsStr::new("l"));
        assert_eq!(old.kind, FileType::Symlink);
        // The file, as it would be found with the symlink's inode number.
        let mut file = rustix::fs::lstat(dir.path().join("f")).unwrap();
        (file.st_dev, file.st_ino) = (link.st_dev, link.st_ino);
        let node = Node::named(&parent, OsStr::new("l"), &file);
        let new = t.remember(node, &file, 3, &parent, OsStr::new("l"));
        assert_ne!(new.ino, old.ino);
        assert_eq!(new.kind, FileType::RegularFile);
        assert_eq!(t.get(new.ino).unwrap().kind, FileType::RegularFile);
        assert_eq!(
            t.get(old.ino).unwrap().kind,
            FileType::Symlink,
            "until forgotten"
        );
        assert_eq!(
            t.known_number(ZoneId::Workspace, link.st_dev, link.st_ino),
            Some(new.ino)
        );
        // Found again, of the same kind: the same inode, one more reference.
        let node = Node::named(&parent, OsStr::new("l"), &file);
        let again = t.remember(node, &file, 3, &parent, OsStr::new("l"));
        assert!(Arc::ptr_eq(&again, &new));
        t.forget(old.ino, 1);
        assert!(t.get(old.ino).is_none());
        assert!(t.get(new.ino).is_some());
    }

    #[test]
    fn a_file_keeps_its_backing_inode_number_unless_another_device_or_a_fixed_number_has_it() {
        let t = Inodes::with_budget(100);
        let ws = ZoneId::Workspace;
        assert_eq!(t.number_of(ws, 7, 5_931_015), 5_931_015);
        assert_eq!(t.number_of(ws, 7, 5_931_015), 5_931_015, "stable");
        // The same st_ino on another device, and numbers the mount keeps for itself, spill.
        let other = t.number_of(ws, 8, 5_931_015);
        assert!(other >= SPILL_BASE, "{other}");
        let small = t.number_of(ws, 7, 2);
        assert!(small >= SPILL_BASE && small != other, "{small}");
        assert_eq!(t.number_of(ws, 8, 5_931_015), other);
        // A second table (a remount) gives the same numbers to the same files.
        let again = Inodes::with_budget(100);
        assert_eq!(again.number_of(ws, 7, 5_931_015), 5_931_015);
    }

    #[test]
    fn a_file_shared_by_a_fork_and_its_parent_is_two_inodes_and_a_fork_made_again_gets_new_ones() {
        let t = Inodes::with_budget(100);
        let (fork, other) = (
            ZoneId::register_fork("inodes-test-a").unwrap(),
            ZoneId::register_fork("inodes-test-b").unwrap(),
        );
        let slot = fork.fork_slot().unwrap() as u64;
        let ws = t.number_of(ZoneId::Workspace, 7, 5_931_015);
        let f = t.number_of(fork, 7, 5_931_015);
        let g = t.number_of(other, 7, 5_931_015);
        assert_eq!(ws, 5_931_015);
        assert_eq!(f, FORK_FILE_BASE + (slot << FORK_INO_BITS) + 5_931_015);
        assert!(ws != f && f != g && ws != g, "{ws} {f} {g}");
        // git's index keeps the low 32 bits of st_ino: the same in the fork as in the parent.
        assert_eq!(f as u32, ws as u32);
        // A change beside the mount reaches every zone's inode of the file.
        let mut all = t.known_numbers(7, 5_931_015);
        all.sort();
        let mut want = vec![ws, f, g];
        want.sort();
        assert_eq!(all, want);
        assert_eq!(t.known_number(fork, 7, 5_931_015), Some(f));
        // The fork's root keeps its number while its directory stays; a new directory under
        // its name (removed and made again) gets a new root number and new file numbers.
        let root = t.fork_root_number(fork, (7, 100));
        assert_eq!(root, zone_ino(fork));
        assert_eq!(t.fork_root_number(fork, (7, 100)), root);
        let again = t.fork_root_number(fork, (7, 101));
        assert_ne!(again, root);
        assert_eq!(t.known_number(fork, 7, 5_931_015), None);
        let f2 = t.number_of(fork, 7, 5_931_015);
        assert_ne!(f2, f, "a file of the old fork the kernel may hold");
        assert_eq!(
            t.known_number(other, 7, 5_931_015),
            Some(g),
            "other forks keep theirs"
        );
        // Gone: let go of, and its next root has a number of its own again.
        assert_eq!(t.forks_alive(&[other]), vec![fork]);
        assert_eq!(t.known_number(fork, 7, 5_931_015), None);
        let third = t.fork_root_number(fork, (7, 101));
        assert!(third != root && third != again, "{third}");
        assert!(t.forks_alive(&[fork, other]).is_empty());
    }

    #[test]
    fn over_budget_the_newest_files_are_dropped_so_a_repeated_walk_keeps_its_first_part_cached() {
        let dir = tempfile::tempdir().unwrap();
        let t = Inodes::with_budget(90);
        // A first walk over more than the budget: 120 files.
        look_up(&t, dir.path(), 0, 120);
        let plan = t.evict_plan();
        // Down to the low-water mark (60), newest first.
        assert_eq!(plan.len(), 60);
        let names: Vec<String> = plan
            .iter()
            .map(|(_, n)| n.to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "f119");
        assert!(
            names.iter().all(|n| n[1..].parse::<usize>().unwrap() >= 60),
            "{names:?}"
        );
        for (_, name) in &plan {
            let i: usize = name.to_string_lossy()[1..].parse().unwrap();
            // The kernel forgets what it was told to drop.
            let st = rustix::fs::stat(dir.path().join(name)).unwrap();
            let ino = t
                .known_number(ZoneId::Workspace, st.st_dev, st.st_ino)
                .unwrap();
            t.forget(ino, 1);
            assert!(i >= 60);
        }
        // A second walk: the first 60 are still live (the kernel would not even look them up);
        // looking the first of them up again does not make it newer.
        let st = rustix::fs::stat(dir.path().join("f0")).unwrap();
        assert!(t.is_live(st.st_dev, st.st_ino));
        let (node, st) = pinned(&dir.path().join("f0"));
        t.remember(
            node,
            &st,
            zone_ino(ZoneId::Workspace),
            &Arc::new(pinned(dir.path()).0),
            OsStr::new("f0"),
        );
        look_up(&t, dir.path(), 120, 40);
        let again: Vec<String> = t
            .evict_plan()
            .into_iter()
            .map(|(_, n)| n.to_string_lossy().into_owned())
            .collect();
        assert!(!again.contains(&"f0".to_string()), "{again:?}");
        assert_eq!(again.first().map(String::as_str), Some("f159"));
    }

    #[test]
    fn files_held_by_name_cost_no_descriptor_so_only_pinned_inodes_count_against_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let t = Inodes::with_budget(64);
        let parent = Arc::new(pinned(dir.path()).0);
        for i in 0..300 {
            let name = format!("n{i}");
            std::fs::write(dir.path().join(&name), b"x").unwrap();
            let st = rustix::fs::lstat(dir.path().join(&name)).unwrap();
            let node = Node::named(&parent, OsStr::new(&name), &st);
            assert!(!node.is_pinned());
            t.remember(
                node,
                &st,
                zone_ino(ZoneId::Workspace),
                &parent,
                OsStr::new(&name),
            );
        }
        assert_eq!(t.live_count(), 300);
        assert_eq!(t.pinned_count(), 0);
        assert!(t.evict_plan().is_empty(), "nothing to evict for 300 names");
        // Pinned ones count, and only they are planned for eviction.
        look_up(&t, dir.path(), 0, 100);
        assert_eq!(t.pinned_count(), 100);
        let plan = t.evict_plan();
        assert_eq!(plan.len(), 100 - 42);
        assert!(plan
            .iter()
            .all(|(_, n)| n.to_string_lossy().starts_with('f')));
    }
}

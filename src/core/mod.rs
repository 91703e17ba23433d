//! The core: zones, virtual paths, and the file operations every adapter shares.
//!
//! [`Zones`] is the one value the FUSE adapter, the socket API and tests call into. It knows no
//! socket, no mount, no git and no sandbox; it reads paths through [`path`], reaches files through
//! [`zone`], records every mutation in the state journal, and reports failures as [`FsError`].
//! [`provider`] defines what a directory inside a sandbox must offer ([`provider::SandboxFs`]);
//! the providers that offer it live in `crate::sandbox`. A zone may be served from a directory
//! inside a sandbox through one ([`sandbox_zone`]); the operations then go to the sandbox.
//!
//! Owns the filesystem: paths and their jail, local zones by descriptor ([`node`]) and sandbox
//! zones by path ([`sandbox_node`]), the API's operations, and each rule in one function
//! (docs/architecture.md). May import only `state` and `config`: no adapter, no `git`, no
//! `sandbox`, no `fuser` (`tests/rules` checks the imports).

mod copy_up;
pub mod dir_paths;
pub mod error;
pub mod foreign;
pub mod gate;
mod locks;
#[cfg(test)]
mod model_tests;
pub mod node;
#[cfg(test)]
mod node_tests;
mod ops;
pub mod own;
pub mod path;
pub mod prefetch;
pub mod provider;
pub mod retention;
pub mod sandbox_node;
pub mod sandbox_zone;
mod search;
pub mod store;
pub mod text;
pub mod zone;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

pub use error::{ErrorCode, FsError, FsResult};
pub use locks::Unlocked;
pub use ops::{
    EditResult, Entry, ExistsResult, ListResult, ReadResult, Replacement, ResolveResult,
    StatResult, WriteResult,
};
pub use path::{Target, VPath, ZoneId};
pub use search::{
    GlobMatch, GlobOptions, GlobResult, GrepCount, GrepLine, GrepMode, GrepOptions, GrepResult,
    LineKind,
};
pub use store::{Identity, Seen};

use crate::config::{Backing, Limits, Settings};
use crate::state::{Db, JournalEntry, Origin, OwnedEntry, Via};
use locks::PathLocks;
use sandbox_zone::{Connector, SandboxZone};
use zone::LocalZone;

/// The kind of a filesystem entry (symlinks are reported as `symlink`, not followed). `other`
/// covers FIFOs, sockets and devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

/// A size limit of `[limits]` that the core enforces ([`Zones::check_size`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// What an API read or edit holds in memory (`limits.max_read_bytes`).
    Read,
    /// What one API write may carry (`limits.max_write_bytes`).
    Write,
    /// A file downloaded from a sandbox, or made by writes into one through the mount
    /// (`limits.sandbox_file_bytes`).
    SandboxFile,
}

impl Limit {
    /// The bound in bytes under `limits`.
    pub fn bytes(self, limits: &Limits) -> u64 {
        match self {
            Limit::Read => limits.max_read_bytes,
            Limit::Write => limits.max_write_bytes,
            Limit::SandboxFile => limits.sandbox_file_bytes,
        }
    }

    /// The config key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Read => "limits.max_read_bytes",
            Limit::Write => "limits.max_write_bytes",
            Limit::SandboxFile => "limits.sandbox_file_bytes",
        }
    }
}

/// A zone as the daemon serves it.
#[derive(Debug)]
pub enum Zone {
    Local(LocalZone),
    /// A directory inside a remote sandbox.
    Sandbox(Box<SandboxZone>),
    /// Switched off by configuration; the string says why.
    Disabled(String),
}

/// Why a zone has no directory on this machine ([`Zones::local`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotLocal<'a> {
    /// It is served from a directory inside this sandbox.
    Sandbox(&'a str),
    /// It is switched off (or a fork this daemon does not have), for this reason.
    Disabled(&'a str),
}

impl NotLocal<'_> {
    /// Why, in words, for an error: `for_what` says what needs a local zone (`forks are made of
    /// local zones`).
    pub fn reason(&self, for_what: &str) -> String {
        match self {
            NotLocal::Sandbox(name) => {
                format!("it is served from sandbox `{name}`; {for_what}")
            }
            NotLocal::Disabled(reason) => reason.to_string(),
        }
    }

    /// `ZONE_UNAVAILABLE` for zone `id`, with [`NotLocal::reason`].
    pub fn unavailable(&self, id: ZoneId, for_what: &str) -> FsError {
        FsError::ZoneUnavailable {
            path: format!("/{}", id.name()),
            zone: id.name().into(),
            reason: self.reason(for_what),
        }
    }
}

/// What a fork this daemon does not have answers (`ZONE_UNAVAILABLE`).
static NO_FORK: std::sync::LazyLock<Zone> = std::sync::LazyLock::new(|| {
    Zone::Disabled("there is no such fork here (it was removed, or never made)".into())
});

/// The source of time for everything the core records (milliseconds since the epoch).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Returns the system clock.
pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    })
}

/// A zone that could not be opened at start.
#[derive(Debug, thiserror::Error)]
#[error("zone /{zone} at {dir}: {source}")]
pub struct ZoneOpenError {
    pub zone: ZoneId,
    pub dir: String,
    #[source]
    pub source: std::io::Error,
}

/// Told about each change made through the core's operations (the API), after the change and
/// before its caller hears of it: the FUSE mount uses it to drop the kernel's cached entries, so
/// that what an API call changed is visible through the mount as soon as the call returns.
///
/// Each method may wait for the kernel, so it is called only by a thread that holds no path
/// lock: with the proof of it, [`Unlocked`] (see `locks`).
pub trait ChangeListener: Send + Sync {
    /// `paths` are backing paths: the changed entry, and a move's destination.
    fn changed(&self, paths: &[PathBuf], unlocked: &Unlocked);

    /// Told about a change made beside wardfs, found by the daemon's watcher (one event per
    /// path, so a directory made above it has an event of its own).
    fn changed_beside(&self, paths: &[PathBuf], unlocked: &Unlocked) {
        self.changed(paths, unlocked)
    }

    /// Told that the fork `name` was made or removed (the mount drops its cached entry and the
    /// forks' directory listing).
    fn forks_changed(&self, _name: &str, _unlocked: &Unlocked) {}
}

/// Names a registered [`ChangeListener`], to remove it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerId(u64);

/// The zones and the operations on them.
pub struct Zones {
    zones: [Zone; 2],
    /// The forks' zones, by fork slot ([`ZoneId::Fork`]); `None` where this daemon has no fork.
    /// A fork's zone lives as long as the process (see [`Zones::add_fork`]).
    forks: RwLock<Vec<Option<&'static Zone>>>,
    limits: Limits,
    db: Arc<Db>,
    clock: Clock,
    locks: PathLocks,
    umask: u32,
    tmp_counter: AtomicU64,
    listeners: RwLock<Vec<(ListenerId, Arc<dyn ChangeListener>)>>,
    /// The changes wardfs made itself (see [`own`]).
    own: own::OwnChanges,
    /// The rename count that the paths remembered on directory nodes are kept under (see
    /// [`dir_paths`]).
    dir_paths: dir_paths::DirPaths,
    /// Runs just before a replacement checks and renames (tests inject concurrent changes here).
    #[cfg(test)]
    pub(crate) before_replace: std::sync::Mutex<Option<Box<dyn Fn() + Send>>>,
}

impl Zones {
    /// Opens the zones that `settings` describes (creating sandboxed zone directories).
    /// Zones served from a sandbox fail to open here: the daemon passes a provider factory to
    /// [`Zones::open_with`].
    pub fn open(settings: &Settings, db: Arc<Db>, clock: Clock) -> Result<Zones, ZoneOpenError> {
        Zones::open_with(settings, db, clock, &|b| {
            Err(format!(
                "no provider to reach sandbox {:?} from here",
                b.sandbox.name
            ))
        })
    }

    /// Opens the zones, building the providers of remote-backed zones with `connect`.
    pub fn open_with(
        settings: &Settings,
        db: Arc<Db>,
        clock: Clock,
        connect: Connector<'_>,
    ) -> Result<Zones, ZoneOpenError> {
        let mut zones = Vec::with_capacity(2);
        for z in &settings.zones {
            zones.push(match &z.backing {
                Backing::Disabled(reason) => Zone::Disabled(reason.clone()),
                Backing::Sandbox(r) => {
                    let shown = format!("{}:{}", r.sandbox.name, r.path);
                    let fs = connect(r).map_err(|e| ZoneOpenError {
                        zone: z.id,
                        dir: shown.clone(),
                        source: std::io::Error::other(e),
                    })?;
                    let spool = settings.state_dir.join("remote-spool").join(z.id.name());
                    Zone::Sandbox(Box::new(
                        SandboxZone::open(
                            z.id,
                            &r.sandbox.name,
                            &r.path,
                            fs,
                            r.attr_ttl,
                            z.read_only,
                            &spool,
                        )
                        .map_err(|e| ZoneOpenError {
                            zone: z.id,
                            dir: shown,
                            source: e,
                        })?,
                    ))
                }
                Backing::Dir { path, create } => Zone::Local(
                    LocalZone::open_dir(z.id, path, *create, z.read_only, z.allow_hardlinks)
                        .map_err(|e| ZoneOpenError {
                            zone: z.id,
                            dir: path.display().to_string(),
                            source: e,
                        })?,
                ),
            });
        }
        let [cache, workspace]: [Zone; 2] = zones.try_into().expect("config has two zones");
        Ok(Zones {
            zones: [cache, workspace],
            forks: RwLock::new(Vec::new()),
            limits: settings.limits,
            db,
            clock,
            locks: PathLocks::new(),
            umask: process_umask(),
            tmp_counter: AtomicU64::new(0),
            listeners: RwLock::new(Vec::new()),
            own: own::OwnChanges::default(),
            dir_paths: dir_paths::DirPaths::default(),
            #[cfg(test)]
            before_replace: std::sync::Mutex::new(None),
        })
    }

    /// Zone `id`'s directory on this machine, or why it has none: what callers that need files
    /// of their own (forks, checkpoints, the watcher, git's monitor, mirrors) ask, instead of
    /// matching on the kind of zone.
    pub fn local(&self, id: ZoneId) -> Result<&LocalZone, NotLocal<'_>> {
        match self.zone(id) {
            Zone::Local(z) => Ok(z),
            Zone::Sandbox(r) => Err(NotLocal::Sandbox(r.sandbox())),
            Zone::Disabled(reason) => Err(NotLocal::Disabled(reason)),
        }
    }

    /// Zone `id` when it is served from a directory inside a sandbox.
    pub fn sandbox_zone(&self, id: ZoneId) -> Option<&SandboxZone> {
        match self.zone(id) {
            Zone::Sandbox(r) => Some(r),
            _ => None,
        }
    }

    /// Where zone `id` is, for people: its directory, `SANDBOX:DIR`, or none when switched off.
    pub fn location(&self, id: ZoneId) -> Option<String> {
        match self.zone(id) {
            Zone::Local(z) => Some(z.root().display().to_string()),
            Zone::Sandbox(r) => Some(format!("{}:{}", r.sandbox(), r.root())),
            Zone::Disabled(_) => None,
        }
    }

    /// Returns the zone `id` (a fork this daemon does not have: an unavailable zone).
    pub fn zone(&self, id: ZoneId) -> &Zone {
        match (id.config_index(), id.fork_slot()) {
            (Some(i), _) => &self.zones[i],
            (None, Some(slot)) => self
                .forks
                .read()
                .expect("not poisoned")
                .get(slot)
                .copied()
                .flatten()
                .unwrap_or(&NO_FORK),
            (None, None) => &NO_FORK,
        }
    }

    /// Serves the fork `id` from `zone` from now on. Its zone is kept for the life of the
    /// process (a reference to it may outlive the fork's removal: one descriptor and a path).
    pub fn add_fork(&self, id: ZoneId, zone: LocalZone) {
        let Some(slot) = id.fork_slot() else { return };
        let zone: &'static Zone = Box::leak(Box::new(Zone::Local(zone)));
        let mut forks = self.forks.write().expect("not poisoned");
        if forks.len() <= slot {
            forks.resize(slot + 1, None);
        }
        forks[slot] = Some(zone);
        drop(forks);
        self.tell_forks_changed(id);
    }

    /// Tells the listeners that the fork `id` was made or removed.
    fn tell_forks_changed(&self, id: ZoneId) {
        let Some(name) = id.fork_name() else { return };
        let told = self.listeners_now();
        locks::after_unlock(move |unlocked| {
            for l in told {
                l.forks_changed(name, unlocked);
            }
        });
    }

    /// The listeners registered now, to tell once the thread holds no path lock.
    fn listeners_now(&self) -> Vec<Arc<dyn ChangeListener>> {
        let listeners = self.listeners.read().expect("not poisoned");
        listeners.iter().map(|(_, l)| l.clone()).collect()
    }

    /// Stops serving the fork `id`: its paths are unavailable from now on.
    pub fn remove_fork(&self, id: ZoneId) {
        if let Some(slot) = id.fork_slot() {
            if let Some(f) = self.forks.write().expect("not poisoned").get_mut(slot) {
                *f = None;
            }
            self.tell_forks_changed(id);
        }
    }

    /// The forks this daemon serves now, by slot.
    pub fn fork_ids(&self) -> Vec<ZoneId> {
        let forks = self.forks.read().expect("not poisoned");
        (0..forks.len())
            .filter(|i| forks[*i].is_some())
            .filter_map(ZoneId::fork_at)
            .collect()
    }

    /// Every zone this daemon serves: the config's two, then the forks.
    pub fn zone_ids(&self) -> Vec<ZoneId> {
        let mut ids = ZoneId::ALL.to_vec();
        ids.extend(self.fork_ids());
        ids
    }

    /// The read-only rule, for every entry point: fails with `READ_ONLY` when `vp`'s zone refuses
    /// changes (an unavailable zone is refused by whatever then reaches it).
    pub fn check_writable(&self, vp: &VPath) -> FsResult<()> {
        match self.zone(vp.zone()) {
            Zone::Local(z) => z.check_writable(vp),
            Zone::Sandbox(r) => r.check_writable(vp),
            Zone::Disabled(_) => Ok(()),
        }
    }

    /// Returns the limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The size rule, for every entry point: `size` bytes of `what` at `path` must fit in
    /// `limit`, or `TOO_LARGE` naming the config key to raise. API reads, writes and edits, the
    /// mount's sandbox files (opened, written, truncated) and the API's reads of sandbox files
    /// all check here.
    pub fn check_size(
        &self,
        limit: Limit,
        path: &dyn std::fmt::Display,
        what: &'static str,
        size: u64,
    ) -> FsResult<()> {
        let max = limit.bytes(&self.limits);
        if size > max {
            return Err(FsError::TooLarge {
                path: path.to_string(),
                what,
                size,
                limit: max,
                key: limit.key(),
            });
        }
        Ok(())
    }

    /// Returns the state database.
    pub fn db(&self) -> &Arc<Db> {
        &self.db
    }

    /// Returns the current time from the core's clock.
    pub fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// Returns the local zone holding `vp`, or `ZONE_UNAVAILABLE` about `vp`.
    pub fn local_of(&self, vp: &VPath) -> FsResult<&LocalZone> {
        self.local(vp.zone()).map_err(|n| FsError::ZoneUnavailable {
            path: vp.to_string(),
            zone: vp.zone().name().into(),
            reason: n.reason("this operation needs a local zone"),
        })
    }

    /// Returns the storage of the zone holding `vp`, whatever backs it, or `ZONE_UNAVAILABLE`.
    pub fn store(&self, vp: &VPath) -> FsResult<&dyn store::Store> {
        match self.zone(vp.zone()) {
            Zone::Local(z) => Ok(z),
            Zone::Sandbox(r) => Ok(&**r),
            Zone::Disabled(reason) => Err(FsError::ZoneUnavailable {
                path: vp.to_string(),
                zone: vp.zone().name().into(),
                reason: reason.clone(),
            }),
        }
    }

    /// Returns the remote zone holding `vp`, when its zone is served from a sandbox.
    pub fn remote(&self, vp: &VPath) -> Option<&SandboxZone> {
        match self.zone(vp.zone()) {
            Zone::Sandbox(r) => Some(r),
            _ => None,
        }
    }

    /// The changes wardfs made itself, for the watcher of the backing directories.
    pub fn own(&self) -> &own::OwnChanges {
        &self.own
    }

    /// Says that something in a zone was renamed (through wardfs, or beside it, as the watcher
    /// saw): the remembered paths of directories are read again ([`dir_paths`]).
    pub fn renamed(&self) {
        self.dir_paths.renamed();
    }

    /// Says whether the watcher sees every rename beside wardfs from now on (see
    /// [`dir_paths::DirPaths::set_seen`]).
    pub fn renames_seen(&self, seen: bool) {
        self.dir_paths.set_seen(seen);
    }

    /// Tells the listeners (the mount's invalidation) about changes made beside wardfs, found by
    /// the daemon's watcher: `paths` are backing paths.
    pub fn changed_beside(&self, paths: &[PathBuf]) {
        let (told, paths) = (self.listeners_now(), paths.to_vec());
        locks::after_unlock(move |unlocked| {
            for l in told {
                l.changed_beside(&paths, unlocked);
            }
        });
    }

    /// Journals a change made beside wardfs (found by the daemon's watcher) at `vp`.
    pub fn record_beside(&self, vp: &VPath, op: &str) {
        let origin = Origin {
            via: Via::Watcher,
            pid: None,
            uid: None,
        };
        self.journal(vp, op, None, None, origin, None);
    }

    /// Registers a listener for changes made through the operations (not through the mount).
    pub fn add_listener(&self, l: Arc<dyn ChangeListener>) -> ListenerId {
        let id = ListenerId(self.tmp_counter.fetch_add(1, Ordering::Relaxed));
        self.listeners.write().expect("not poisoned").push((id, l));
        id
    }

    /// Removes a listener registered with [`Zones::add_listener`].
    pub fn remove_listener(&self, id: ListenerId) {
        self.listeners
            .write()
            .expect("not poisoned")
            .retain(|(i, _)| *i != id);
    }

    fn tell_listeners(&self, vp: &VPath, to: Option<&VPath>) {
        let told = self.listeners_now();
        if told.is_empty() {
            return;
        }
        let backing = |v: &VPath| match self.zone(v.zone()) {
            Zone::Local(z) if v.is_root() => Some(z.root().to_path_buf()),
            Zone::Local(z) => Some(z.root().join(v.rel())),
            Zone::Sandbox(_) | Zone::Disabled(_) => None,
        };
        let paths: Vec<PathBuf> = std::iter::once(vp).chain(to).filter_map(backing).collect();
        // The mount's invalidation waits for the kernel, which may be waiting for a path lock
        // this thread holds (locks.rs): it runs once the thread holds none.
        locks::after_unlock(move |unlocked| {
            for l in told {
                l.changed(&paths, unlocked);
            }
        });
    }

    /// Notes the backing entry at `vp` and its directory as wardfs's own, or, when nothing is
    /// there any more, its removal (see [`own`]).
    fn note_own(&self, vp: &VPath) {
        let Zone::Local(z) = self.zone(vp.zone()) else {
            return;
        };
        let Some(name) = vp.name() else {
            self.own.note_entry(z.dirfd(), None);
            return;
        };
        let Ok(parent) = z.open_parent(vp) else {
            self.own.note_removed(z.root().join(vp.rel()));
            return;
        };
        match rustix::fs::statat(&parent, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => self.own.note(&st),
            Err(_) => self.own.note_removed(z.root().join(vp.rel())),
        }
        if let Ok(st) = rustix::fs::fstat(&parent) {
            self.own.note(&st);
        }
    }

    /// Records a change made through an adapter that bypasses the operations (the FUSE mount).
    pub fn record_change(
        &self,
        vp: &VPath,
        op: &str,
        bytes: Option<u64>,
        to: Option<&VPath>,
        origin: Origin,
    ) {
        self.record(vp, op, bytes, to, origin)
    }

    /// Records an event that is not a file change (a git pull, stage or push) with what happened.
    pub fn record_event(&self, vp: &VPath, op: &str, detail: &str, origin: Origin) {
        self.journal(vp, op, None, None, origin, Some(detail));
    }

    /// Appends one journal row. What it records has happened already: a journal failure is
    /// logged, never turned into the operation's error.
    fn journal(
        &self,
        vp: &VPath,
        op: &str,
        bytes: Option<u64>,
        to: Option<&VPath>,
        origin: Origin,
        detail: Option<&str>,
    ) {
        let entry = JournalEntry {
            time_ms: self.now_ms(),
            zone: vp.zone().name(),
            path: vp.rel(),
            op,
            bytes,
            to_path: to.map(VPath::rel),
            origin,
            detail,
        };
        let batched = JOURNAL_BATCH.with(|b| {
            let mut b = b.borrow_mut();
            let Some(rows) = b.as_mut() else {
                return false;
            };
            rows.push(OwnedEntry::of(&entry));
            true
        });
        if batched {
            if JOURNAL_BATCH.with(|b| b.borrow().as_ref().is_some_and(|r| r.len() >= BATCH_ROWS)) {
                self.flush_journal_batch();
            }
            return;
        }
        // The mount and the watcher record one row per system call: theirs go in together.
        if matches!(origin.via, Via::Fuse | Via::Watcher) {
            self.db.journal_append_deferred(&entry);
        } else if let Err(e) = self.db.journal_append(&entry) {
            tracing::error!(path = %vp, op, via = ?origin.via, error = %e, "could not record in the journal");
        }
    }

    /// Runs `f` with the journal rows it records (on this thread) written in one transaction at
    /// its end, or every [`BATCH_ROWS`]: for an operation that changes many files at once (a
    /// restore). Until then the rows are in memory only: a crash loses them (the caller must be
    /// able to find those changes again).
    pub fn journal_batch<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Flush<'a>(&'a Zones, bool);
        impl Drop for Flush<'_> {
            fn drop(&mut self) {
                if self.1 {
                    self.0.flush_journal_batch();
                    JOURNAL_BATCH.with(|b| *b.borrow_mut() = None);
                }
            }
        }
        let outer = JOURNAL_BATCH.with(|b| {
            let mut b = b.borrow_mut();
            b.is_none().then(|| *b = Some(Vec::new())).is_some()
        });
        let _flush = Flush(self, outer);
        f()
    }

    fn flush_journal_batch(&self) {
        let rows = JOURNAL_BATCH.with(|b| b.borrow_mut().as_mut().map(std::mem::take));
        let Some(rows) = rows.filter(|r| !r.is_empty()) else {
            return;
        };
        if let Err(e) = self.db.journal_append_many(&rows) {
            tracing::error!(rows = rows.len(), error = %e, "could not record in the journal");
        }
    }

    fn record(&self, vp: &VPath, op: &str, bytes: Option<u64>, to: Option<&VPath>, origin: Origin) {
        self.journal(vp, op, bytes, to, origin, None);
        // The mount saw its own changes (and noted them with the descriptors it holds);
        // everyone else's must reach its caches and be known as wardfs's own to the watcher.
        if origin.via != Via::Fuse {
            self.note_own(vp);
            if let Some(to) = to {
                self.note_own(to);
            }
            self.tell_listeners(vp, to);
        }
    }
}

/// Journal rows a [`Zones::journal_batch`] holds at most before it writes them.
const BATCH_ROWS: usize = 1024;

thread_local! {
    /// The rows of this thread's [`Zones::journal_batch`], when one runs.
    static JOURNAL_BATCH: std::cell::RefCell<Option<Vec<OwnedEntry>>> =
        const { std::cell::RefCell::new(None) };
}

/// Reads the process umask without changing it (from /proc; 0o022 when unavailable).
pub fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

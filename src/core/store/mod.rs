//! A zone's storage behind one trait: [`Store`], implemented by a local directory
//! ([`local`], beneath the zone's directory fd) and by a directory inside a sandbox ([`sandbox`],
//! through its [`super::provider::SandboxFs`]).
//!
//! A store does storage and nothing else: it resolves a path beneath its zone, reads, replaces,
//! removes, renames and describes entries, and compares an entry with what a caller saw before
//! (compare-and-swap, [`Seen`]). It applies no policy. The rules are the caller's, each in one
//! function of [`super::Zones`]: read-only zones ([`super::Zones::check_writable`]), one writer
//! per path (the path locks, held around every change a store makes), sizes
//! ([`super::Zones::check_size`]), and the journal record after the change. The API's path
//! operations ([`super::ops`]) are those rules around one store call, whatever backs the zone;
//! the mount's sandbox zones reach the same functions ([`super::sandbox_node`]), its local zones
//! the descriptor-level [`super::node`], which shares the rules.
//!
//! Owns what a backend must offer and the semantics of removal ([`Removal`]), replacement at a
//! rename's destination ([`Replace`]) and compare-and-swap ([`Seen`]). May import only the core.

pub mod local;
pub mod sandbox;

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::{FsError, FsResult};
use super::ops::{Entry, ResolveResult};
use super::path::VPath;
use super::zone::LocalZone;
use super::{EntryKind, Zones};

/// What a removal may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// A file or symlink (`unlink`): a directory is `IS_DIR`.
    File,
    /// An empty directory (`rmdir`): anything else is `NOT_DIR`, a non-empty one `NOT_EMPTY`.
    EmptyDir,
    /// Whatever is there (the API's delete); a non-empty directory only with `recursive`.
    Any { recursive: bool },
}

/// What a rename may replace at its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replace {
    /// Nothing (`RENAME_NOREPLACE`, the API without `overwrite`): `EXISTS`.
    Never,
    /// What is there (the API with `overwrite`); a directory in the way of a sandbox rename is
    /// `EXISTS`.
    Files,
    /// As `rename(2)`: a file by a file, an empty directory by a directory.
    Posix,
}

/// What [`super::Zones::seen`] found at a path: compared again before a replacement or removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// Nothing there.
    Absent,
    /// A file, symlink or directory with this identity.
    Entry(Identity),
    /// Nothing to compare (the caller did not look).
    Unknown,
}

/// One version of a directory entry, as its store can tell versions apart: inode, size, mtime
/// and ctime for a local entry; kind, size and mtime for a sandbox's (whose provider may report
/// no mtime: then size alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity(pub(super) Fingerprint);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fingerprint {
    Local {
        dev: u64,
        ino: u64,
        size: i64,
        mtime: (i64, u64),
        ctime: (i64, u64),
    },
    Sandbox {
        kind: EntryKind,
        size: u64,
        mtime_ns: Option<i64>,
    },
}

/// What `stat` says about an entry (its last component not followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub kind: EntryKind,
    pub size: u64,
    /// Permission bits (`0o644`).
    pub mode: u32,
    pub mtime_ms: i64,
    pub nlink: u64,
    /// Where a symlink points, when asked for.
    pub target: Option<String>,
}

/// A regular file opened for reading: positioned at its start, never whole in memory.
pub struct Opened {
    pub file: File,
    pub size: u64,
    /// The version that was opened, for a compare-and-swap of a later replacement.
    pub seen: Seen,
}

/// A written temp file to put at its destination ([`Store::put`]).
pub struct Put<'a> {
    pub vp: &'a VPath,
    /// The directory holding the temp file ([`Store::write_dir`]).
    pub dir: &'a OwnedFd,
    /// The temp file's name in `dir`; cleared when the store consumed it.
    pub tmp: &'a mut String,
    pub file: File,
    /// Permission bits to give the file; `None` keeps the old file's.
    pub mode: Option<u32>,
    /// The bits of a new file when `mode` is `None`.
    pub new_mode: u32,
    /// Sync the file and its directory (survives a power loss).
    pub sync: bool,
    pub expect: Option<Seen>,
}

/// How the directories above an entry are reached when a change is made there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// Symlinks on the way are followed while they stay inside the zone: the changes of the API
    /// and the mount.
    Beneath,
    /// Plain directories only: a symlink on the way fails the change with `CONFLICT`. Pulls,
    /// restores and discards change entries this way ([`super::Zones::replace_entry`] and its
    /// kin). They write what came from elsewhere at paths they checked first, and a symlink
    /// swapped in after the check must make the write fail, never land it elsewhere: every
    /// directory on the way is opened with `RESOLVE_NO_SYMLINKS` (missing ones made relative to
    /// the fd of the one above) and the change is made relative to the last fd. A sandbox's store
    /// resolves paths inside the sandbox and takes both alike.
    Plain,
}

/// What a directory holds: its entries, and the names it cannot show as paths.
#[derive(Debug, Default)]
pub struct Listing {
    pub entries: Vec<Entry>,
    /// Names that are not UTF-8, escaped as git quotes them (`"\377.txt"`): every wardfs path
    /// is UTF-8, so they are named here, never silently dropped.
    pub skipped: Vec<String>,
}

/// How a rename went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    Done,
    /// The store cannot rename between these places (another filesystem or another backend):
    /// the caller copies and removes.
    Across,
}

/// `CONFLICT`: the entry at `vp` changed between the caller's look and the change.
fn changed(vp: &VPath) -> FsError {
    FsError::Conflict {
        path: vp.to_string(),
        reason: "the file changed between reading and replacing it; read it again and retry".into(),
    }
}

/// A fresh name for a temp file or symlink beside its destination (or in a spool).
pub fn tmp_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{}{}-{n}",
        crate::core::retention::TMP_PREFIX,
        std::process::id()
    )
}

/// A zone's storage, by virtual path. Every method runs under the caller's rules (see the
/// module doc); a changing method runs with the path lock held.
pub trait Store: Send + Sync {
    /// Whether the zone takes no changes.
    fn read_only(&self) -> bool;

    /// Describes `vp` without following a symlink in its last component; `target` also reads
    /// a symlink's target; `fresh` asks a caching backend now.
    fn stat(&self, vp: &VPath, target: bool, fresh: bool) -> FsResult<Meta>;

    /// The path a change of `vp` lands on: a symlink in its last component followed while it
    /// stays inside the zone (a sandbox follows its own symlinks: `vp` itself).
    fn follow(&self, vp: &VPath) -> FsResult<VPath>;

    /// The path `vp`'s entry really has: symlinks above its last component resolved, so that
    /// locks and the journal name what changes (a sandbox: `vp` itself; see
    /// `LocalZone::real_entry`).
    fn real(&self, vp: &VPath) -> FsResult<VPath>;

    /// Whether the way to `vp`'s entry is plain directories: no symlink and no file above its
    /// last component (a missing directory is nothing in the way). What a restore puts back
    /// never lands beyond a symlink (a sandbox: `true`; it follows its own symlinks).
    fn plain_way(&self, vp: &VPath) -> bool;

    /// What is at `vp` now, for a later compare-and-swap.
    fn seen(&self, vp: &VPath) -> FsResult<Seen>;

    /// The entries of the directory `vp` (in no particular order).
    fn list(&self, vp: &VPath) -> FsResult<Listing>;

    /// Where the symlink at `vp` points.
    fn readlink(&self, vp: &VPath) -> FsResult<String>;

    /// Opens the regular file at `vp` (symlinks inside the zone followed) for reading. A store
    /// that copies the file first checks its size with `zones.check_size` before any byte.
    fn open_read(&self, zones: &Zones, vp: &VPath) -> FsResult<Opened>;

    /// Where a write of `vp` makes its temp file: the destination (with `follow`, a symlink
    /// there followed while it stays inside the zone, and the result made real as by
    /// [`Store::real`]; without, `vp`, which the caller made real; missing parents made) and the
    /// directory for the temp file.
    /// The directories above are reached as `way` says.
    fn write_dir(&self, vp: &VPath, follow: bool, way: Way) -> FsResult<(VPath, OwnedFd)>;

    /// Puts a written temp file at its destination, as itself (a symlink there is replaced);
    /// `CONFLICT` when the destination is no longer `expect`, `IS_DIR` when it is a directory.
    /// Returns whether the destination was created.
    fn put(&self, put: Put<'_>) -> FsResult<bool>;

    /// Makes `vp` a symlink to `target`, replacing a file or symlink there when `replace`
    /// (`EXISTS` otherwise) and only if it is still `expect`. Returns whether it was created.
    fn symlink(
        &self,
        vp: &VPath,
        target: &str,
        replace: bool,
        expect: Option<Seen>,
        way: Way,
    ) -> FsResult<bool>;

    /// Creates the directory `vp` with permission bits `mode` (`None`: the backend's default,
    /// `0o777` less the umask for a local one); with `parents`, missing parents too and no error
    /// when a directory is there; without, `EXISTS` when anything is there.
    fn mkdir(&self, vp: &VPath, parents: bool, mode: Option<u32>, way: Way) -> FsResult<()>;

    /// Removes what is at `vp` as `how` allows, only if it is still `expect` (when given;
    /// `false` when it is gone meanwhile).
    fn remove(&self, vp: &VPath, how: Removal, expect: Option<Seen>, way: Way) -> FsResult<bool>;

    /// Renames `from` (in this store) to `to` (in `to_store`), replacing what `replace` allows.
    fn rename(
        &self,
        from: &VPath,
        to_store: &dyn Store,
        to: &VPath,
        replace: Replace,
    ) -> FsResult<Moved>;

    /// The real place behind `vp`, for tools that work outside wardfs.
    fn resolve(&self, vp: &VPath) -> FsResult<ResolveResult>;

    /// The local directory behind this store, for a rename between two of them.
    fn as_local(&self) -> Option<&LocalZone> {
        None
    }
}

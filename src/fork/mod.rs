//! Forks (issue 30): a zone of its own per agent, made from the workspace, another fork or a
//! checkpoint as it is at that moment; its changes listed against its fork point and merged
//! back into its parent three-way.
//!
//! A fork is a local zone (`/forks/NAME`, `MOUNT/forks/NAME`) served from a directory under
//! `<state_dir>/forks/`, so every rule of a local zone holds in it unchanged: the jail, the
//! read-only and hard-link rules, limits, path locks, the journal (its rows name the fork's
//! zone), checkpoints and restores. Making one:
//!
//! 1. the parent is checkpointed (incrementally: the cost follows what changed since its last
//!    checkpoint); that checkpoint is the **fork point**;
//! 2. the fork's directory is filled from the parent's directory: every file a hard link to the
//!    parent's ([`materialize`]), so no data is copied and no space used until a side writes;
//!    a write through wardfs replaces a shared file (the mount copies it up first), so neither
//!    side sees the other's writes;
//! 3. a file the journal says changed in the parent after the fork point (while the fork was
//!    filled) is written from the fork point's object instead;
//! 4. the fork point is recorded as the fork's own first checkpoint, so the fork's next
//!    checkpoints are incremental and `changes` is a diff of the fork point and the fork now.
//!
//! A merge checkpoints both sides, merges the trees three-way against the fork point (as
//! `git merge-tree` does), and, when nothing conflicts, puts the merged paths in the parent as
//! a restore does: the parent checkpointed first (one restore undoes the merge), every change
//! under the path locks and journaled, a file another writer changed meanwhile left alone and
//! reported.
//!
//! May import `core`, `checkpoint`, `state` and `config`; no adapter.

pub mod materialize;
pub mod overlap;
pub mod spare;
pub mod update;

pub use overlap::Overlap;
pub use update::{UpdateConflict, UpdateResult};

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoints, DiffResult, MergeConflict, Settle};
use crate::config::Settings;
use crate::core::zone::LocalZone;
use crate::core::{FsError, FsResult, ZoneId, Zones};
use crate::state::{CheckpointRow, ForkRecord, NewFork, Origin};

/// Forks alive at once at most.
pub const MAX_FORKS: usize = 256;

/// Journal paths changed in the parent while a fork was filled that it fixes one by one; past
/// this many the fork is refused (try again when the parent is quieter).
const MAX_FIXUPS: usize = 10_000;

/// A fork, as `forks` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct ForkInfo {
    pub name: String,
    /// Its virtual path (`/forks/NAME`).
    pub path: String,
    /// The zone or fork it was made from (`workspace`, `forks/a`), or `checkpoint N`.
    pub parent: String,
    /// The checkpoint holding its fork point (a checkpoint of the fork).
    pub base: i64,
    pub created_ms: i64,
    /// Who made it: `api`, `fuse`, … with pid and uid where known.
    pub via: String,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    /// Paths the journal names as changed in the fork since its fork point (`None`: over
    /// 10,000).
    pub changed: Option<u64>,
    /// The paths it changed that its parent or a sibling fork changed too since the fork point.
    #[serde(default)]
    pub overlaps: Vec<Overlap>,
}

/// What making a fork did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ForkMade {
    pub fork: ForkInfo,
    /// Files shared with the parent (hard links) and files copied.
    pub linked: u64,
    pub copied: u64,
    pub dirs: u64,
    pub symlinks: u64,
    /// Files the parent changed while the fork was filled, written from the fork point.
    pub fixed: u64,
    /// Entries left out, and why (sockets, pipes, devices, unreadable entries).
    pub skipped: Vec<String>,
    pub skipped_total: u64,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
    /// Whether it was made from a spare (a fork made ahead: `forks.spare`), not filled now.
    #[serde(default)]
    pub spare: bool,
}

/// A fork's directory, made: what filling it did, the files put back from the fork point, and
/// whether a spare was used.
struct Made {
    filled: materialize::Filled,
    fixed: u64,
    spare: bool,
}

/// What removing a fork did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ForkRemoved {
    pub name: String,
    /// The checkpoint keeping its last state (until checkpoint retention drops it).
    pub checkpoint: i64,
}

/// What a merge did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MergeResult {
    pub fork: String,
    /// The zone merged into.
    pub parent: String,
    /// Whether the fork's changes were put in the parent (false: conflicts, nothing applied).
    pub applied: bool,
    /// The paths both sides changed in ways a three-way merge cannot join; nothing was applied.
    pub conflicts: Vec<MergeConflict>,
    /// The checkpoint of the parent just before the merge: restore it to undo the merge.
    pub before: Option<i64>,
    /// The paths changed in the parent.
    pub changed: Vec<String>,
    /// Paths left alone because another writer changed them while the merge ran.
    pub left_alone: Vec<String>,
    /// The conflicts settled by `ours` (the parent's version kept) or `theirs` (the fork's
    /// taken), with their kinds.
    #[serde(default)]
    pub settled: Vec<MergeConflict>,
}

/// Where a fork is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A zone or a fork, as it is now.
    Zone(ZoneId),
    /// A checkpoint, as it was then.
    Checkpoint(i64),
}

impl Source {
    /// Parses `--from`: `workspace`, `cache`, a fork's name (or `forks/NAME`), or a checkpoint
    /// id.
    pub fn parse(s: &str) -> FsResult<Source> {
        Source::parse_as("from", s)
    }

    /// Parses `s` as [`Source::parse`] does; an error names the input `field` (`since`).
    pub fn parse_as(field: &str, s: &str) -> FsResult<Source> {
        let s = s.trim_start_matches('/');
        if let Ok(id) = s.parse::<i64>() {
            return Ok(Source::Checkpoint(id));
        }
        ZoneId::from_name(s)
            .or_else(|| ZoneId::fork(s))
            .map(Source::Zone)
            .ok_or_else(|| {
                FsError::invalid(
                    field,
                    format!(
                        "`{}` names no zone, fork or checkpoint; give workspace, cache, a fork's \
                         name or a checkpoint id",
                        crate::core::text::name(s)
                    ),
                )
            })
    }
}

/// The forks of this daemon.
pub struct Forks {
    zones: Arc<Zones>,
    checkpoints: Arc<Checkpoints>,
    root: PathBuf,
    /// Held while a fork is made, removed or merged: one at a time.
    busy: Mutex<()>,
    /// Forks made ahead, one per zone that has been forked.
    spares: Arc<spare::Spares>,
}

/// Checks a fork's name: 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.` or
/// `-` (it becomes a directory name in the mount and a path component).
pub fn check_name(name: &str) -> FsResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with(['.', '-'])
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(FsError::invalid(
            "name",
            format!(
                "`{}` is not a fork name: use 1 to 64 letters, digits, `.`, `_` or `-`, not \
                 starting with `.` or `-`",
                crate::core::text::name(name)
            ),
        ))
    }
}

fn state_err(e: crate::state::StateError) -> FsError {
    FsError::Internal(format!("state database: {e}"))
}

impl Forks {
    /// Opens the forks recorded in the state database and serves each as a zone.
    pub fn open(
        zones: Arc<Zones>,
        checkpoints: Arc<Checkpoints>,
        settings: &Settings,
    ) -> FsResult<Forks> {
        let root = settings.state_dir.join("forks");
        let forks = Forks {
            spares: spare::Spares::new(zones.clone(), root.clone(), settings.forks.spare),
            zones,
            checkpoints,
            root,
            busy: Mutex::new(()),
        };
        let recs = forks.zones.db().fork_list().map_err(state_err)?;
        for rec in &recs {
            if let Err(e) = forks.serve(rec) {
                tracing::error!(fork = %crate::core::text::name(&rec.name), error = %e, "cannot serve a fork");
            }
        }
        for zone in ZoneId::ALL {
            if recs.iter().any(|r| r.parent == zone.name()) {
                forks.spares.prepare(zone);
            }
        }
        Ok(forks)
    }

    /// The spares (forks made ahead), as they stand.
    pub fn spares(&self) -> Vec<spare::SpareInfo> {
        self.spares.info()
    }

    /// Waits until no spare is being filled.
    pub fn settle(&self) {
        self.spares.settle()
    }

    /// Registers the fork `rec` and serves its directory as its zone.
    fn serve(&self, rec: &ForkRecord) -> FsResult<ZoneId> {
        let id = ZoneId::register_fork(&rec.name).ok_or_else(|| FsError::Conflict {
            path: format!("/forks/{}", rec.name),
            reason: "this daemon has made too many forks since it started; restart it".into(),
        })?;
        let zone = LocalZone::open_dir(id, std::path::Path::new(&rec.dir), false, false, false)
            .map_err(|e| FsError::Internal(format!("the fork's directory {}: {e}", rec.dir)))?;
        self.zones.add_fork(id, zone);
        Ok(id)
    }

    /// Makes the fork `name` of `from`, as the module doc says.
    pub fn create(&self, name: &str, from: &Source, origin: Origin) -> FsResult<ForkMade> {
        check_name(name)?;
        let _busy = self.busy.lock().expect("not poisoned");
        let started = Instant::now();
        self.check_new(name)?;
        let spare = match from {
            Source::Zone(z) if z.config_index().is_some() => self.spares.take(*z),
            _ => None,
        };
        let (point, read_at) = self.fork_point(name, from, origin)?;
        let dir = self.root.join(format!("{name}-{}", self.zones.now_ms()));
        let made = self.make_dir(&dir, from, &point, read_at, spare)?;
        let fork = match self.register(name, from, &dir, &point, origin) {
            Ok(f) => f,
            Err(e) => {
                spare::delete(&dir);
                return Err(e);
            }
        };
        if let Source::Zone(z) = from {
            if z.config_index().is_some() {
                self.spares.prepare(*z);
            }
        }
        tracing::info!(
            fork = name,
            parent = fork.parent,
            files = made.filled.linked + made.filled.copied,
            spare = made.spare,
            took_us = started.elapsed().as_micros() as u64,
            "made a fork"
        );
        Ok(ForkMade {
            fork,
            linked: made.filled.linked,
            copied: made.filled.copied,
            dirs: made.filled.dirs,
            symlinks: made.filled.symlinks,
            fixed: made.fixed,
            skipped: made.filled.skipped,
            skipped_total: made.filled.skipped_total,
            took_ms: started.elapsed().as_millis() as u64,
            spare: made.spare,
        })
    }

    /// Refuses a fork named `name` when one exists, or when [`MAX_FORKS`] do.
    fn check_new(&self, name: &str) -> FsResult<()> {
        let db = self.zones.db();
        if db.fork_get(name).map_err(state_err)?.is_some() {
            return Err(FsError::Exists {
                path: format!("/forks/{name}"),
            });
        }
        if db.fork_list().map_err(state_err)?.len() >= MAX_FORKS {
            return Err(FsError::Conflict {
                path: format!("/forks/{name}"),
                reason: format!("{MAX_FORKS} forks exist; remove one first (wardfs fork rm NAME)"),
            });
        }
        Ok(())
    }

    /// Makes the fork's directory `dir` as the fork point `point` has it: from `spare` when there
    /// is one it can be brought up to date, else filled now. Nothing is left behind on error.
    fn make_dir(
        &self,
        dir: &std::path::Path,
        from: &Source,
        point: &CheckpointRow,
        read_at: i64,
        spare: Option<spare::Spare>,
    ) -> FsResult<Made> {
        if let (Some(s), Source::Zone(z)) = (spare, from) {
            match self.of_spare(*z, s, dir, point, read_at) {
                Ok(Some(made)) => return Ok(made),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "a spare fork could not be used; filling"),
            }
            spare::delete(dir);
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| FsError::Internal(format!("cannot make {}: {e}", dir.display())))?;
        match self.fill(dir, from, point, read_at) {
            Ok((filled, fixed)) => Ok(Made {
                filled,
                fixed,
                spare: false,
            }),
            Err(e) => {
                spare::delete(dir);
                Err(e)
            }
        }
    }

    /// Makes the fork's directory `dir` of the spare `s` of `zone`: renamed into place, brought
    /// up to the zone's present ([`spare::Spares::catch_up`]), then what changed after the fork
    /// point put back. `None` when too much changed since the spare was filled.
    fn of_spare(
        &self,
        zone: ZoneId,
        mut s: spare::Spare,
        dir: &std::path::Path,
        point: &CheckpointRow,
        read_at: i64,
    ) -> FsResult<Option<Made>> {
        let io = |e: std::io::Error| FsError::Internal(format!("a spare fork: {e}"));
        if let Err(e) = std::fs::rename(&s.dir, dir) {
            spare::delete(&s.dir);
            return Err(io(e));
        }
        let dst = spare::open_dir(dir).map_err(io)?;
        let Some(redone) = self.spares.catch_up(zone, &mut s, &dst).map_err(io)? else {
            return Ok(None);
        };
        let fixed = self.fix_changed(zone, point, read_at, &dst)?;
        tracing::debug!(redone, fixed, "a fork made of a spare");
        Ok(Some(Made {
            filled: s.filled,
            fixed,
            spare: true,
        }))
    }

    /// Serves the filled directory `dir` as the fork `name` of `from`: registered, its fork
    /// point adopted as its first checkpoint, recorded in the state database.
    fn register(
        &self,
        name: &str,
        from: &Source,
        dir: &std::path::Path,
        point: &CheckpointRow,
        origin: Origin,
    ) -> FsResult<ForkInfo> {
        let db = self.zones.db();
        let id = ZoneId::register_fork(name).ok_or_else(|| FsError::Conflict {
            path: format!("/forks/{name}"),
            reason: "this daemon has made too many forks since it started; restart it".into(),
        })?;
        let rec = match self.record(id, name, from, dir, point, origin) {
            Ok(rec) => rec,
            Err(e) => {
                ZoneId::unregister_fork(id);
                return Err(e);
            }
        };
        match LocalZone::open_dir(id, dir, false, false, false) {
            Ok(zone) => {
                self.zones.add_fork(id, zone);
                Ok(self.info(&rec))
            }
            Err(e) => {
                ZoneId::unregister_fork(id);
                let _ = db.fork_remove(rec.id, self.zones.now_ms(), None);
                Err(FsError::Internal(format!("the fork's directory: {e}")))
            }
        }
    }

    /// Records the fork `name` (zone `id`): its fork point adopted as its first checkpoint, its
    /// row in the state database.
    fn record(
        &self,
        id: ZoneId,
        name: &str,
        from: &Source,
        dir: &std::path::Path,
        point: &CheckpointRow,
        origin: Origin,
    ) -> FsResult<ForkRecord> {
        let db = self.zones.db();
        let base = self
            .checkpoints
            .adopt(id, point, &format!("fork point of {name}"), origin)?;
        let parent = match from {
            Source::Zone(z) => z.name().to_string(),
            Source::Checkpoint(c) => format!("checkpoint {c}"),
        };
        let rec_id = db
            .fork_insert(&NewFork {
                name,
                parent: &parent,
                base: base.id,
                dir: &dir.to_string_lossy(),
                origin,
                created_ms: self.zones.now_ms(),
            })
            .map_err(state_err)?;
        db.fork_get(name)
            .map_err(state_err)?
            .filter(|r| r.id == rec_id)
            .ok_or_else(|| FsError::Internal("a fork vanished as it was made".into()))
    }

    /// The checkpoint a fork of `from` starts from (the zone's present, or the checkpoint), and
    /// the journal position the zone was read at.
    fn fork_point(
        &self,
        name: &str,
        from: &Source,
        origin: Origin,
    ) -> FsResult<(CheckpointRow, i64)> {
        match from {
            Source::Zone(z) => {
                self.local(*z)?;
                self.checkpoints
                    .present(*z, &format!("fork point of {name}"), origin)
            }
            Source::Checkpoint(id) => Ok((self.checkpoints.get(*id)?, 0)),
        }
    }

    /// The local zone `id`, or why a fork cannot be made of it.
    fn local(&self, id: ZoneId) -> FsResult<&LocalZone> {
        self.zones
            .local(id)
            .map_err(|n| n.unavailable(id, "forks are made of local zones"))
    }

    /// Fills the fork's directory `dir`: from the parent zone's directory (then the files it
    /// changed since the fork point put back), or from a checkpoint's objects.
    fn fill(
        &self,
        dir: &std::path::Path,
        from: &Source,
        point: &CheckpointRow,
        read_at: i64,
    ) -> FsResult<(materialize::Filled, u64)> {
        let dst = spare::open_dir(dir)
            .map_err(|e| FsError::Internal(format!("{}: {e}", dir.display())))?;
        let io = |e: std::io::Error| FsError::Internal(format!("filling the fork: {e}"));
        match from {
            Source::Zone(z) => {
                let parent = self.local(*z)?;
                let share = !parent.allows_hardlinks();
                let filled = materialize::fill(parent.dirfd(), dst.as_fd(), share).map_err(io)?;
                let fixed = self.fix_changed(*z, point, read_at, &dst)?;
                Ok((filled, fixed))
            }
            Source::Checkpoint(_) => {
                let mut filled = materialize::Filled::default();
                for f in self.checkpoints.tree_files(&point.tree)? {
                    if let Some((content, mode)) =
                        self.checkpoints.tree_file(&point.tree, &f.path)?
                    {
                        materialize::put_file(dst.as_fd(), &f.path, &content, mode).map_err(io)?;
                        filled.copied += 1;
                    }
                }
                Ok((filled, 0))
            }
        }
    }

    /// Puts back, in the fork's directory `dst`, the fork point's version of each path the
    /// parent `zone` changed after it was read for the fork point (`read_at`; the journal says
    /// which): its content, or no file where the fork point had none. A path a checkpoint leaves
    /// out (`node_modules/`, `.git/`, ignored files) is left as linked. Returns how many.
    fn fix_changed(
        &self,
        zone: ZoneId,
        point: &CheckpointRow,
        read_at: i64,
        dst: &std::os::fd::OwnedFd,
    ) -> FsResult<u64> {
        let paths: Vec<String> = self
            .zones
            .db()
            .journal_zone_paths_since(zone.name(), read_at, MAX_FIXUPS)
            .map_err(state_err)?
            .ok_or_else(|| FsError::Conflict {
                path: format!("/{}", zone.name()),
                reason: format!(
                    "over {MAX_FIXUPS} paths changed while the fork was made; try again"
                ),
            })?
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect();
        let kept = self.checkpoints.would_keep(zone, &paths)?;
        let modes = self.checkpoints.exact_modes(point)?;
        let io = |e: std::io::Error| FsError::Internal(format!("filling the fork: {e}"));
        let mut fixed = 0;
        for (rel, kept) in paths.iter().zip(kept) {
            match self.checkpoints.tree_file(&point.tree, rel)? {
                Some((content, mode)) => {
                    materialize::put_file(dst.as_fd(), rel, &content, mode).map_err(io)?;
                    if mode != 0o120000 {
                        let bits = modes.perm(rel, mode);
                        materialize::set_mode(dst.as_fd(), rel, bits).map_err(io)?;
                    }
                }
                None if kept => materialize::remove_file(dst.as_fd(), rel).map_err(io)?,
                None => continue,
            }
            fixed += 1;
        }
        Ok(fixed)
    }

    /// The forks that exist now.
    pub fn list(&self) -> FsResult<Vec<ForkInfo>> {
        let recs = self.zones.db().fork_list().map_err(state_err)?;
        let overlaps = self.overlaps()?;
        Ok(recs
            .iter()
            .map(|r| {
                let zone = format!("forks/{}", r.name);
                ForkInfo {
                    overlaps: overlaps
                        .iter()
                        .filter(|o| o.zones.contains(&zone))
                        .cloned()
                        .collect(),
                    ..self.info(r)
                }
            })
            .collect())
    }

    fn info(&self, rec: &ForkRecord) -> ForkInfo {
        let db = self.zones.db();
        let changed = db
            .checkpoint_get(rec.base)
            .ok()
            .flatten()
            .and_then(|b| {
                db.journal_zone_paths_since(&format!("forks/{}", rec.name), b.journal_pos, 10_000)
                    .ok()
                    .flatten()
            })
            .map(|p| p.len() as u64);
        ForkInfo {
            name: rec.name.clone(),
            path: format!("/forks/{}", rec.name),
            parent: rec.parent.clone(),
            base: rec.base,
            created_ms: rec.created_ms,
            via: rec.via.clone(),
            pid: rec.pid,
            uid: rec.uid,
            changed,
            overlaps: Vec::new(),
        }
    }

    /// The fork `name`: its record and zone.
    fn get(&self, name: &str) -> FsResult<(ForkRecord, ZoneId)> {
        check_name(name)?;
        let rec = self
            .zones
            .db()
            .fork_get(name)
            .map_err(state_err)?
            .ok_or_else(|| FsError::NotFound {
                path: format!("/forks/{name}"),
            })?;
        let id = ZoneId::fork(name).ok_or_else(|| FsError::NotFound {
            path: format!("/forks/{name}"),
        })?;
        Ok((rec, id))
    }

    /// Removes the fork `name`: its last state is checkpointed (kept until retention drops
    /// it), its zone is no longer served, and its directory is deleted.
    pub fn remove(&self, name: &str, origin: Origin) -> FsResult<ForkRemoved> {
        let _busy = self.busy.lock().expect("not poisoned");
        let (rec, id) = self.get(name)?;
        let (last, _) =
            self.checkpoints
                .present(id, &format!("fork {name} as it was removed"), origin)?;
        self.zones
            .db()
            .fork_remove(rec.id, self.zones.now_ms(), Some(last.id))
            .map_err(state_err)?;
        self.zones.remove_fork(id);
        ZoneId::unregister_fork(id);
        let dir = PathBuf::from(&rec.dir);
        if dir.starts_with(&self.root) {
            spare::delete(&dir);
        }
        Ok(ForkRemoved {
            name: name.to_string(),
            checkpoint: last.id,
        })
    }

    /// What the fork `name` changed since its fork point: the files, and with `patch` the
    /// patch in git's format.
    pub fn changes(&self, name: &str, patch: bool) -> FsResult<DiffResult> {
        let (rec, id) = self.get(name)?;
        let base = self.checkpoints.get(rec.base)?;
        self.checkpoints.changes(&base, id, patch)
    }

    /// What the fork `name` changed against `since` instead of its fork point: another zone or
    /// fork as it is now (checkpointed, as a merge checkpoints it; `from` of the answer), or a
    /// checkpoint.
    pub fn changes_since(
        &self,
        name: &str,
        since: &Source,
        patch: bool,
        origin: Origin,
    ) -> FsResult<DiffResult> {
        let (_, id) = self.get(name)?;
        let from = match since {
            Source::Checkpoint(c) => self.checkpoints.get(*c)?,
            Source::Zone(z) => {
                self.local(*z)?;
                let message = format!("/{} as changes of fork {name} compared it", z.name());
                self.checkpoints.present(*z, &message, origin)?.0
            }
        };
        self.checkpoints.changes(&from, id, patch)
    }

    /// Merges the fork `name`'s changes into its parent (only `paths`, relative to the zone,
    /// when given), as the module doc says.
    pub fn merge(&self, name: &str, paths: &[String], origin: Origin) -> FsResult<MergeResult> {
        self.merge_settling(name, paths, &Settle::default(), origin)
    }

    /// Merges as [`Forks::merge`] does, each conflicting path `settle.ours` names keeping the
    /// parent's version and each `settle.theirs` names taking the fork's (relative to the
    /// zones, as the conflicts name them; `beside` is not used). A path given a side that does
    /// not conflict is refused (INVALID_ARGUMENT) and nothing is applied.
    pub fn merge_settling(
        &self,
        name: &str,
        paths: &[String],
        settle: &Settle,
        origin: Origin,
    ) -> FsResult<MergeResult> {
        let _busy = self.busy.lock().expect("not poisoned");
        let (rec, id) = self.get(name)?;
        let parent = self.parent_zone(&rec, "merge into")?;
        let settle = Settle {
            beside: None,
            ..settle.clone()
        };
        let base = self.checkpoints.get(rec.base)?;
        let (ours, _) =
            self.checkpoints
                .present(parent, &format!("before merging fork {name}"), origin)?;
        let (theirs, _) =
            self.checkpoints
                .present(id, &format!("fork {name} as it was merged"), origin)?;
        let theirs_tree = self.scoped(&base.tree, &theirs.tree, paths)?;
        let merged =
            self.checkpoints
                .merge_settled(&base.tree, &ours.tree, &theirs_tree, &settle)?;
        let mut result = MergeResult {
            fork: name.to_string(),
            parent: parent.name().to_string(),
            applied: false,
            conflicts: merged.conflicts,
            before: None,
            changed: Vec::new(),
            left_alone: Vec::new(),
            settled: merged.settled.into_iter().map(|s| s.conflict).collect(),
        };
        let Some(tree) = merged.tree else {
            return Ok(result);
        };
        let changed = self.checkpoints.changed_paths(&ours.tree, &tree)?;
        result.applied = true;
        if changed.is_empty() {
            return Ok(result);
        }
        let (_, restored) = self.checkpoints.apply_tree(
            parent,
            &ours.tree,
            &tree,
            &changed,
            &format!("merge of fork {name}"),
            origin,
        )?;
        result.before = Some(restored.before);
        result.changed = changed;
        result.left_alone = restored.conflicts;
        self.note_merged(&rec, parent, restored.before, &result)?;
        if paths.is_empty() && result.left_alone.is_empty() {
            // All of the fork is in the parent now: the next merge (and `changes`) starts from
            // here, as git's merge base moves to a merged commit.
            self.zones
                .db()
                .fork_move_base(rec.id, rec.base, theirs.id, restored.before)
                .map_err(state_err)?;
        }
        Ok(result)
    }

    /// Notes the parent's journal rows the merge wrote (after its checkpoint `before`), so the
    /// fork's own changes are no overlap with it.
    fn note_merged(
        &self,
        rec: &ForkRecord,
        parent: ZoneId,
        before: i64,
        result: &MergeResult,
    ) -> FsResult<()> {
        let after = self.checkpoints.get(before)?.journal_pos;
        let prefix = format!("/{}/", parent.name());
        let written: Vec<String> = result
            .changed
            .iter()
            .filter(|p| !result.left_alone.contains(&format!("{prefix}{p}")))
            .cloned()
            .collect();
        self.zones
            .db()
            .fork_note_merged(rec.id, parent.name(), after, &written)
            .map_err(state_err)
    }

    /// The zone the fork `rec` was made from, or why there is none to `verb` (`merge into`,
    /// `update from`): a fork of a checkpoint, or of a fork since removed.
    fn parent_zone(&self, rec: &ForkRecord, verb: &str) -> FsResult<ZoneId> {
        let parent = ZoneId::from_name(&rec.parent).ok_or_else(|| FsError::ZoneUnavailable {
            path: format!("/forks/{}", rec.name),
            zone: rec.parent.clone(),
            reason: format!(
                "the fork was made from a checkpoint (or its parent fork is gone): there is no \
                 zone to {verb}"
            ),
        })?;
        self.check_parent(rec, parent, verb)?;
        Ok(parent)
    }

    /// Refuses a merge of the fork `rec` into the fork `parent` names (or an update from it)
    /// when that is not the fork it was made from: a parent removed and its name used again by
    /// a fork made later (a parent is recorded by its name; fork ids only grow).
    fn check_parent(&self, rec: &ForkRecord, parent: ZoneId, verb: &str) -> FsResult<()> {
        let Some(name) = parent.fork_name() else {
            return Ok(());
        };
        match self.zones.db().fork_get(name).map_err(state_err)? {
            Some(p) if p.id < rec.id => Ok(()),
            _ => Err(FsError::ZoneUnavailable {
                path: format!("/forks/{}", rec.name),
                zone: rec.parent.clone(),
                reason: format!(
                    "the fork it was made from was removed; forks/{name} now is another fork, \
                     made after it: there is no zone to {verb}"
                ),
            }),
        }
    }

    /// The fork's tree `theirs` with only `paths` changed from `base` (all when empty). A path
    /// the fork did not change (nor anything beneath it) has nothing to merge and is left out:
    /// one in neither tree could not be removed from `base`.
    fn scoped(&self, base: &str, theirs: &str, paths: &[String]) -> FsResult<String> {
        if paths.is_empty() || paths.iter().any(|p| p.trim_matches('/').is_empty()) {
            return Ok(theirs.to_string());
        }
        let changed = self.checkpoints.changed_paths(base, theirs)?;
        let touched = |p: &str| {
            changed
                .iter()
                .any(|c| c == p || c.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
        };
        let wanted: Vec<String> = paths
            .iter()
            .map(|p| p.trim_matches('/').to_string())
            .filter(|p| touched(p))
            .collect();
        if wanted.is_empty() {
            return Ok(base.to_string());
        }
        self.checkpoints.pick_paths(base, theirs, &wanted)
    }
}

#[cfg(test)]
mod spare_tests;
#[cfg(test)]
mod tests;

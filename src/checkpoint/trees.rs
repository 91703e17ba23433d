//! What forks (`crate::fork`) ask of the object store: a checkpoint of one zone adopted as
//! another's (a fork's fork point, a merge's result), a checkpoint's files read back, and a
//! three-way merge of trees as git merges them.

use git2::{MergeOptions, ObjectType, Oid, TreeWalkMode, TreeWalkResult};
use serde::{Deserialize, Serialize};

use super::{oid, state_err, store_err, Checkpoints, Unchanged};
use crate::core::{FsResult, ZoneId};
use crate::state::{CheckpointRow, NewCheckpoint, Origin};

/// A path a three-way merge could not decide, and how each side changed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct MergeConflict {
    /// Relative to the zone.
    pub path: String,
    /// What the merge found: `content` (both changed the text where git cannot join them),
    /// `binary`, `mode`, `delete/modify`, `modify/delete`, `add/add` or `type` (a file on one
    /// side, a symlink or a directory on the other).
    pub kind: String,
}

/// The outcome of a three-way merge of trees.
#[derive(Debug, Clone)]
pub struct TreeMerge {
    /// The merged tree (hex), when no conflict is left.
    pub tree: Option<String>,
    /// The conflicts left: nothing is merged while there is one.
    pub conflicts: Vec<MergeConflict>,
    /// The conflicts [`Settle`] settled, as the merged tree has them.
    pub settled: Vec<Settled>,
}

/// How a three-way merge settles the paths it cannot join ([`Checkpoints::merge_settled`]).
#[derive(Debug, Clone, Default)]
pub struct Settle {
    /// Conflicting paths (relative, as a conflict names them) that take `ours`'s entry (none
    /// where `ours` has none).
    pub ours: Vec<String>,
    /// Conflicting paths that take `theirs`'s entry.
    pub theirs: Vec<String>,
    /// Every other conflict keeps `ours`'s entry at its path and puts `theirs`'s beside it, at
    /// the path with this suffix (`a.txt.parent`; `.2`, `.3`, … after it when that name is
    /// taken). `None`: they stay conflicts and no tree is made.
    pub beside: Option<&'static str>,
}

/// A conflict a merge settled as [`Settle`] asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub conflict: MergeConflict,
    /// Where `theirs`'s entry was put ([`Settle::beside`]); `None` when it was not: `theirs`
    /// has none there, the path was settled by a side, or the name would be too long.
    pub beside: Option<String>,
}

/// Names tried beside a conflicting path at most ([`Settle::beside`]).
const MAX_BESIDE: usize = 9;

/// A checkpoint's exact permission bits ([`Checkpoints::exact_modes`]).
pub struct ExactModes(super::Modes);

impl ExactModes {
    /// The bits of the file `rel` whose git mode is `mode`: its exact bits where the checkpoint
    /// kept them (a `.env` at 0600), else what the mode says.
    pub fn perm(&self, rel: &str, mode: i32) -> u32 {
        self.0.perm(rel, super::file_mode(mode))
    }
}

/// A tree to record as a checkpoint, and the journal position it stands for.
struct Recorded<'a> {
    tree: &'a str,
    modes: Option<&'a str>,
    files: u64,
    journal_pos: i64,
}

/// A file of a checkpoint: its content and git mode.
#[derive(Debug, Clone)]
pub struct TreeFile {
    pub path: String,
    pub mode: i32,
    pub blob: Oid,
}

impl Checkpoints {
    /// Records a checkpoint of `zone` whose tree (and permission bits) are `from`'s: a fork's
    /// fork point (the fork's directory was just filled with that tree). Its journal position is
    /// the journal's end, so the zone's next checkpoint starts from it and the changes made after.
    pub fn adopt(
        &self,
        zone: ZoneId,
        from: &CheckpointRow,
        message: &str,
        origin: Origin,
    ) -> FsResult<CheckpointRow> {
        let _repo = self.repo.lock().expect("not poisoned");
        let at = self.zones.db().journal_last_id().map_err(state_err)?;
        let tree = Recorded {
            tree: &from.tree,
            modes: from.modes.as_deref(),
            files: from.files,
            journal_pos: at,
        };
        self.record(zone, &tree, message, origin)
    }

    /// Records a checkpoint of `zone` holding `tree`, as [`Checkpoints::adopt`] does.
    fn record(
        &self,
        zone: ZoneId,
        tree: &Recorded<'_>,
        message: &str,
        origin: Origin,
    ) -> FsResult<CheckpointRow> {
        let db = self.zones.db();
        let id = db
            .checkpoint_insert(&NewCheckpoint {
                zone: zone.name(),
                tree: tree.tree,
                parent: db
                    .checkpoint_last(zone.name())
                    .map_err(state_err)?
                    .map(|p| p.id),
                message,
                origin,
                time_ms: self.zones.now_ms(),
                journal_pos: tree.journal_pos,
                files: tree.files,
                not_kept: 0,
                scope: None,
                modes: tree.modes,
            })
            .map_err(state_err)?;
        self.get(id)
    }

    /// Checkpoints `zone` now unless its latest checkpoint (of the whole zone) holds it as it
    /// is; returns the checkpoint that holds the present either way, and the journal position
    /// the zone was read at (a change journaled after it may be missing from the tree).
    pub fn present(
        &self,
        zone: ZoneId,
        message: &str,
        origin: Origin,
    ) -> FsResult<(CheckpointRow, i64)> {
        let repo = self.repo.lock().expect("not poisoned");
        let taken = self.create_locked(&repo, zone, None, message, origin, Unchanged::UseLatest)?;
        Ok((taken.row, taken.journal_pos))
    }

    /// Whether a checkpoint of `zone` would hold each of `paths` (relative): not excluded by
    /// `checkpoints.exclude`, the zone's `.gitignore` files or `.git/`, and a name git stores.
    pub fn would_keep(&self, zone: ZoneId, paths: &[String]) -> FsResult<Vec<bool>> {
        let Ok(z) = self.zones.local(zone) else {
            return Ok(vec![false; paths.len()]);
        };
        let root = z.root().to_path_buf();
        let filter = super::Filter::new(&root, &self.cfg)?;
        Ok(paths
            .iter()
            .map(|rel| {
                let mut dirs = rel.match_indices('/').map(|(i, _)| &rel[..i]);
                super::storable(rel)
                    && !dirs.any(|d| filter.skips(d, true))
                    && !filter.skips(rel, false)
            })
            .collect())
    }

    /// The regular files and symlinks of checkpoint tree `tree` (hex), with their modes.
    pub fn tree_files(&self, tree: &str) -> FsResult<Vec<TreeFile>> {
        let repo = self.repo.lock().expect("not poisoned");
        let t = repo.find_tree(oid(tree)?).map_err(store_err)?;
        let mut out = Vec::new();
        t.walk(TreeWalkMode::PreOrder, |dir, e| {
            if e.kind() == Some(ObjectType::Blob) {
                if let Ok(name) = e.name() {
                    out.push(TreeFile {
                        path: format!("{dir}{name}"),
                        mode: e.filemode(),
                        blob: e.id(),
                    });
                }
            }
            TreeWalkResult::Ok
        })
        .map_err(store_err)?;
        Ok(out)
    }

    /// The file at `rel` in checkpoint tree `tree` (hex): its content and git mode, or `None`
    /// when the tree has no file there (content over `checkpoints.max_file_bytes` is not kept:
    /// `None` as well).
    pub fn tree_file(&self, tree: &str, rel: &str) -> FsResult<Option<(Vec<u8>, i32)>> {
        let repo = self.repo.lock().expect("not poisoned");
        let t = repo.find_tree(oid(tree)?).map_err(store_err)?;
        let Ok(entry) = t.get_path(std::path::Path::new(rel)) else {
            return Ok(None);
        };
        if entry.kind() != Some(ObjectType::Blob) {
            return Ok(None);
        }
        let blob = repo.find_blob(entry.id()).map_err(store_err)?;
        if blob.content().starts_with(super::NOT_KEPT) {
            return Ok(None);
        }
        Ok(Some((blob.content().to_vec(), entry.filemode())))
    }

    /// The exact permission bits checkpoint `row` keeps (read once, asked per file).
    pub fn exact_modes(&self, row: &CheckpointRow) -> FsResult<ExactModes> {
        let repo = self.repo.lock().expect("not poisoned");
        Ok(ExactModes(super::Modes::of(&repo, row)?))
    }

    /// Merges the changes from `base` to `theirs` into `ours` (trees, hex) as git merges trees:
    /// text joined where the changes do not touch, everything else a conflict.
    pub fn merge_trees(&self, base: &str, ours: &str, theirs: &str) -> FsResult<TreeMerge> {
        self.merge_settled(base, ours, theirs, &Settle::default())
    }

    /// Merges as [`Checkpoints::merge_trees`] does, then settles the conflicts as `settle`
    /// says. A path `settle` gives a side for that is not a conflict, or given both sides, is
    /// refused (INVALID_ARGUMENT naming it).
    pub fn merge_settled(
        &self,
        base: &str,
        ours: &str,
        theirs: &str,
        settle: &Settle,
    ) -> FsResult<TreeMerge> {
        let repo = self.repo.lock().expect("not poisoned");
        let find = |hex: &str| repo.find_tree(oid(hex)?).map_err(store_err);
        let (b, o, t) = (find(base)?, find(ours)?, find(theirs)?);
        let mut opts = MergeOptions::new();
        opts.find_renames(false);
        let mut index = repo
            .merge_trees(&b, &o, &t, Some(&opts))
            .map_err(store_err)?;
        let found: Vec<git2::IndexConflict> = index
            .conflicts()
            .map_err(store_err)?
            .collect::<Result<_, _>>()
            .map_err(store_err)?;
        let found: Vec<(MergeConflict, git2::IndexConflict)> = found
            .into_iter()
            .map(|c| (conflict_of(&repo, &c), c))
            .collect();
        check_settle(settle, &found)?;
        // The index's paths, for names beside that are free (none are made without `beside`).
        let taken = match settle.beside {
            Some(_) => taken_paths(&index),
            None => Default::default(),
        };
        let (mut conflicts, mut settled, steps) = plan(found, settle, taken);
        if conflicts.is_empty() && !steps.is_empty() {
            conflicts = files_over_entries(&index, &steps);
        }
        conflicts.sort_by(|a, b| a.path.cmp(&b.path));
        settled.sort_by(|a, b| a.conflict.path.cmp(&b.conflict.path));
        let tree = if conflicts.is_empty() {
            for step in steps {
                step.apply(&mut index)?;
            }
            Some(index.write_tree_to(&repo).map_err(store_err)?.to_string())
        } else {
            None
        };
        Ok(TreeMerge {
            tree,
            conflicts,
            settled,
        })
    }

    /// Records the tree `tree` (hex; with the permission bits `modes`) as a checkpoint of
    /// `zone` that is not its latest: a fork's new fork point after an update. Its journal
    /// position is the journal's end. The zone's latest checkpoint is then recorded again
    /// (`again`: same tree, bits and journal position), so the zone's next checkpoint still
    /// starts from what the zone holds, not from `tree`. Both under the store's lock: no
    /// checkpoint of the zone is taken between them.
    pub fn record_point(
        &self,
        zone: ZoneId,
        tree: &str,
        modes: Option<&str>,
        message: &str,
        again: &str,
        origin: Origin,
    ) -> FsResult<CheckpointRow> {
        let repo = self.repo.lock().expect("not poisoned");
        let db = self.zones.db();
        let latest = db.checkpoint_last(zone.name()).map_err(state_err)?;
        let point = Recorded {
            tree,
            modes,
            files: super::count_files(&repo, &repo.find_tree(oid(tree)?).map_err(store_err)?),
            journal_pos: db.journal_last_id().map_err(state_err)?,
        };
        let row = self.record(zone, &point, message, origin)?;
        if let Some(l) = latest {
            let same = Recorded {
                tree: &l.tree,
                modes: l.modes.as_deref(),
                files: l.files,
                journal_pos: l.journal_pos,
            };
            self.record(zone, &same, again, origin)?;
        }
        Ok(row)
    }

    /// Records the tree `tree` (hex) as a checkpoint of `zone` (a merge's result) and puts the
    /// zone's `paths` (relative) as that tree has them, as a restore does: the present
    /// checkpointed first (`before` of the answer), every change through the core, a file changed
    /// meanwhile left alone and reported. `ours` is the tree the merge was computed against: a
    /// path whose entry in the present is no longer `ours`'s (another writer changed it since)
    /// is left alone too and listed in `conflicts`, and the recorded tree keeps the present's
    /// entry for it. The merge's checkpoint takes the journal position of the present's, so
    /// the zone's next checkpoint looks again at every path changed since.
    pub fn apply_tree(
        &self,
        zone: ZoneId,
        ours: &str,
        tree: &str,
        paths: &[String],
        message: &str,
        origin: Origin,
    ) -> FsResult<(CheckpointRow, super::RestoreResult)> {
        let repo = self.repo.lock().expect("not poisoned");
        let before = self.create_locked(
            &repo,
            zone,
            None,
            &format!("before {message}"),
            origin,
            Unchanged::UseLatest,
        )?;
        let moved: std::collections::HashSet<String> = diff_paths(&repo, ours, &before.row.tree)?
            .into_iter()
            .collect();
        let (left, apply): (Vec<String>, Vec<String>) =
            paths.iter().cloned().partition(|p| moved.contains(p));
        let tree = overlay(&repo, tree, &before.row.tree, &left)?;
        let merged = Recorded {
            tree: &tree,
            modes: None,
            files: super::count_files(&repo, &repo.find_tree(oid(&tree)?).map_err(store_err)?),
            journal_pos: before.row.journal_pos,
        };
        let row = self.record(zone, &merged, message, origin)?;
        let vp = |p: &String| format!("/{}/{p}", zone.name());
        let before_id = before.row.id;
        let mut result = if apply.is_empty() {
            super::RestoreResult {
                checkpoint: row.id,
                before: before_id,
                restored: Vec::new(),
                removed: Vec::new(),
                conflicts: Vec::new(),
                not_kept: Vec::new(),
                refused: Vec::new(),
            }
        } else {
            let vpaths: Vec<String> = apply.iter().map(vp).collect();
            self.restore_locked(&repo, &row, &apply, &vpaths, before, origin)?
        };
        result.conflicts.extend(left.iter().map(vp));
        Ok((row, result))
    }

    /// The tree `base` (hex) with `paths` (relative; a directory: everything beneath it) as
    /// `theirs` has them: a merge of some of a fork's changes.
    pub fn pick_paths(&self, base: &str, theirs: &str, paths: &[String]) -> FsResult<String> {
        let repo = self.repo.lock().expect("not poisoned");
        overlay(&repo, base, theirs, paths)
    }

    /// The paths whose entries differ between trees `a` and `b` (hex), relative to the zone.
    pub fn changed_paths(&self, a: &str, b: &str) -> FsResult<Vec<String>> {
        let repo = self.repo.lock().expect("not poisoned");
        diff_paths(&repo, a, b)
    }
}

/// The paths whose entries differ between trees `a` and `b` (hex).
fn diff_paths(repo: &git2::Repository, a: &str, b: &str) -> FsResult<Vec<String>> {
    let ta = repo.find_tree(oid(a)?).map_err(store_err)?;
    let tb = repo.find_tree(oid(b)?).map_err(store_err)?;
    let diff = repo
        .diff_tree_to_tree(Some(&ta), Some(&tb), None)
        .map_err(store_err)?;
    let mut out = Vec::new();
    for d in diff.deltas() {
        for f in [d.old_file(), d.new_file()] {
            if let Some(p) = f.path().and_then(|p| p.to_str()) {
                out.push(p.to_string());
            }
        }
    }
    out.dedup();
    Ok(out)
}

/// The tree `base` (hex) with each of `paths` as `from` has it (removed where `from` has none;
/// a path neither has is left as it is).
fn overlay(repo: &git2::Repository, base: &str, from: &str, paths: &[String]) -> FsResult<String> {
    let tb = repo.find_tree(oid(base)?).map_err(store_err)?;
    let tf = repo.find_tree(oid(from)?).map_err(store_err)?;
    let mut update = git2::build::TreeUpdateBuilder::new();
    for p in paths {
        let p = p.trim_matches('/');
        let path = std::path::Path::new(p);
        match tf.get_path(path) {
            Ok(e) => {
                update.upsert(p, e.id(), super::file_mode(e.filemode()));
            }
            Err(_) if tb.get_path(path).is_ok() => {
                update.remove(p);
            }
            Err(_) => {}
        }
    }
    let tree = update.create_updated(repo, &tb).map_err(store_err)?;
    Ok(tree.to_string())
}

/// Sorts the conflicts `found` into those left (no side and no `beside`) and those settled,
/// with the steps that settle them in the index; `taken` holds the index's paths, so a name
/// beside is never one in use.
fn plan(
    found: Vec<(MergeConflict, git2::IndexConflict)>,
    settle: &Settle,
    mut taken: std::collections::HashSet<String>,
) -> (Vec<MergeConflict>, Vec<Settled>, Vec<Step>) {
    let (mut conflicts, mut settled, mut steps) = (Vec::new(), Vec::new(), Vec::new());
    for (conflict, c) in found {
        let raw = raw_path(&c);
        let (keep, put) = if settle.ours.contains(&conflict.path) {
            (c.our, None)
        } else if settle.theirs.contains(&conflict.path) {
            (c.their, None)
        } else if let Some(suffix) = settle.beside {
            let name = c
                .their
                .as_ref()
                .and_then(|_| beside_name(&conflict.path, suffix, &taken));
            if let Some(n) = &name {
                taken.insert(n.clone());
            }
            (c.our, name.zip(c.their))
        } else {
            conflicts.push(conflict);
            continue;
        };
        let beside = put.as_ref().map(|(n, _)| n.clone());
        steps.push(Step { raw, keep, put });
        settled.push(Settled { conflict, beside });
    }
    (conflicts, settled, steps)
}

/// Refuses a [`Settle`] naming a side for a path that is not one of the conflicts `found`, or
/// both sides for one path.
fn check_settle(settle: &Settle, found: &[(MergeConflict, git2::IndexConflict)]) -> FsResult<()> {
    let sides = [("ours", &settle.ours), ("theirs", &settle.theirs)];
    for (field, paths) in sides {
        for p in paths.iter() {
            let shown = crate::core::text::name(p);
            if !found.iter().any(|(c, _)| &c.path == p) {
                return Err(crate::core::FsError::invalid(
                    field,
                    format!(
                        "`{shown}` does not conflict; `ours` and `theirs` settle conflicting \
                         paths only (to leave a path out, merge only the others)"
                    ),
                ));
            }
            if field == "ours" && settle.theirs.contains(p) {
                return Err(crate::core::FsError::invalid(
                    field,
                    format!("`{shown}` is given both `ours` and `theirs`: choose one side"),
                ));
            }
        }
    }
    Ok(())
}

/// The files the merged tree would hold (the entries of `index` merged cleanly, and those
/// `steps` put) that other entries are beneath: a file on one side where the other has a
/// directory, which settling a conflict by a side (or beside) can leave. No tree can hold both
/// (the index would drop one silently), so each is a `type` conflict.
fn files_over_entries(index: &git2::Index, steps: &[Step]) -> Vec<MergeConflict> {
    let merged = index
        .iter()
        .filter(|e| e.flags & GIT_INDEX_ENTRY_STAGEMASK == 0)
        .map(|e| String::from_utf8_lossy(&e.path).into_owned());
    let put = steps.iter().flat_map(|s| {
        let kept = s
            .keep
            .as_ref()
            .map(|_| String::from_utf8_lossy(&s.raw).into_owned());
        kept.into_iter()
            .chain(s.put.as_ref().map(|(n, _)| n.clone()))
    });
    let paths: Vec<String> = merged.chain(put).collect();
    let files: std::collections::HashSet<&str> = paths.iter().map(String::as_str).collect();
    let mut over: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
    for p in &paths {
        for (i, _) in p.match_indices('/') {
            if files.contains(&p[..i]) {
                over.insert(&p[..i]);
            }
        }
    }
    over.into_iter()
        .map(|p| MergeConflict {
            path: p.to_string(),
            kind: "type".into(),
        })
        .collect()
}

/// Every path in `index` (any stage), and every directory above one.
fn taken_paths(index: &git2::Index) -> std::collections::HashSet<String> {
    let mut taken = std::collections::HashSet::new();
    for e in index.iter() {
        let path = String::from_utf8_lossy(&e.path).into_owned();
        for (i, _) in path.match_indices('/') {
            taken.insert(path[..i].to_string());
        }
        taken.insert(path);
    }
    taken
}

/// A free name beside the conflicting `path`: `path` + `suffix`, or with `.2` … after it;
/// `None` when all are taken or the file's name would be longer than a name may be.
fn beside_name(
    path: &str,
    suffix: &str,
    taken: &std::collections::HashSet<String>,
) -> Option<String> {
    let name_len = path.rsplit('/').next().unwrap_or(path).len();
    (1..=MAX_BESIDE)
        .map(|n| match n {
            1 => format!("{path}{suffix}"),
            n => format!("{path}{suffix}.{n}"),
        })
        .filter(|b| name_len + b.len() - path.len() <= crate::core::path::MAX_NAME)
        .find(|b| !taken.contains(b))
}

/// How a conflict is settled: `keep` (one of its sides, or none) at its path `raw`, and
/// `put`'s entry (its other side) at the name it gives.
struct Step {
    raw: Vec<u8>,
    keep: Option<git2::IndexEntry>,
    put: Option<(String, git2::IndexEntry)>,
}

impl Step {
    /// Settles the conflict in `index` as the step says.
    fn apply(self, index: &mut git2::Index) -> FsResult<()> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::path::Path::new(std::ffi::OsStr::from_bytes(&self.raw));
        index.conflict_remove(path).map_err(store_err)?;
        if let Some(e) = &self.keep {
            index.add(&staged(e, self.raw.clone())).map_err(store_err)?;
        }
        if let Some((at, e)) = &self.put {
            index
                .add(&staged(e, at.as_bytes().to_vec()))
                .map_err(store_err)?;
        }
        Ok(())
    }
}

/// The path of the conflict `c`, as its entries hold it.
fn raw_path(c: &git2::IndexConflict) -> Vec<u8> {
    [&c.our, &c.their, &c.ancestor]
        .into_iter()
        .flatten()
        .next()
        .map(|e| e.path.clone())
        .unwrap_or_default()
}

/// The entry `e` at `path`, at stage 0: a merged entry, no longer one side of a conflict.
fn staged(e: &git2::IndexEntry, path: Vec<u8>) -> git2::IndexEntry {
    git2::IndexEntry {
        ctime: e.ctime,
        mtime: e.mtime,
        dev: e.dev,
        ino: e.ino,
        mode: e.mode,
        uid: e.uid,
        gid: e.gid,
        file_size: e.file_size,
        id: e.id,
        flags: e.flags & !GIT_INDEX_ENTRY_STAGEMASK,
        flags_extended: e.flags_extended,
        path,
    }
}

/// The stage bits of an index entry's flags (libgit2's `GIT_INDEX_ENTRY_STAGEMASK`).
const GIT_INDEX_ENTRY_STAGEMASK: u16 = 0x3000;

/// Names a conflict of a three-way merge and its kind.
fn conflict_of(repo: &git2::Repository, c: &git2::IndexConflict) -> MergeConflict {
    let path = [&c.our, &c.their, &c.ancestor]
        .into_iter()
        .flatten()
        .next()
        .map(|e| String::from_utf8_lossy(&e.path).into_owned())
        .unwrap_or_default();
    let kind = match (&c.ancestor, &c.our, &c.their) {
        (None, Some(_), Some(_)) => "add/add",
        // A file on one side only, where the other has a directory.
        (None, _, _) => "type",
        (Some(_), None, Some(_)) => "delete/modify",
        (Some(_), Some(_), None) => "modify/delete",
        (_, Some(o), Some(t)) if o.mode != t.mode && (o.mode | t.mode) & 0o170000 != 0o100000 => {
            "type"
        }
        (_, Some(o), Some(t)) if is_binary(repo, o.id) || is_binary(repo, t.id) => "binary",
        (Some(a), Some(o), Some(t)) if o.id == a.id || t.id == a.id || o.id == t.id => "mode",
        _ => "content",
    };
    MergeConflict {
        path,
        kind: kind.into(),
    }
}

fn is_binary(repo: &git2::Repository, id: Oid) -> bool {
    repo.find_blob(id).map(|b| b.is_binary()).unwrap_or(false)
}

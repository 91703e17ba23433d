//! The put-back of a restore, phase by phase ([`Checkpoints::put_back`]).
//!
//! The diff from the present's checkpoint to the target is taken change by change: each is
//! planned alone ([`plan_step`]: refused, held by size only, removed, written), and a removal is
//! done as it comes (removals first: a directory in the way of a file goes with its files).
//! Then the directories the removals emptied go, the files are written (the first alone, the
//! rest on several threads), and the empty directories of the target are made. A path changed
//! since the present's checkpoint read it is left alone and reported as a conflict.

use std::collections::BTreeSet;
use std::path::Path;

use git2::{Delta, DiffDelta, DiffOptions, FileMode, ObjectType, Oid, Repository};

use super::{
    empty_dirs, is_not_kept, mode_changes, oid, storable, store_err, threads_for, zone_of,
    Checkpoints, Done, Hashed, Modes, RestoreResult, Write,
};
use crate::core::gate;
use crate::core::{FsError, FsResult, VPath, ZoneId};
use crate::state::{CheckpointRow, Origin};

impl Checkpoints {
    /// Changes the zone from the tree of `before` to the tree of `target`, within `scope`.
    pub(super) fn put_back(
        &self,
        repo: &Repository,
        target: &CheckpointRow,
        before: &CheckpointRow,
        scope: &[String],
        hashed: &Hashed,
        origin: Origin,
    ) -> FsResult<RestoreResult> {
        let (id, zone) = (target.id, zone_of(target)?);
        let old = repo.find_tree(oid(&before.tree)?).map_err(store_err)?;
        let new = repo.find_tree(oid(&target.tree)?).map_err(store_err)?;
        let mut opts = DiffOptions::new();
        opts.include_typechange(true).disable_pathspec_match(true);
        for p in scope {
            opts.pathspec(p);
        }
        let diff = repo
            .diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts))
            .map_err(store_err)?;
        let mut run = PutBack {
            cps: self,
            repo,
            zone,
            scope,
            hashed,
            origin,
            modes: Modes::of(repo, target)?,
            res: RestoreResult {
                checkpoint: id,
                before: before.id,
                restored: Vec::new(),
                removed: Vec::new(),
                conflicts: Vec::new(),
                not_kept: Vec::new(),
                refused: Vec::new(),
            },
            old,
            new,
        };
        let (mut writes, emptied) = run.remove(&diff)?;
        writes.extend(mode_changes(
            repo,
            (&run.old, &run.new),
            (before, &run.modes),
            zone,
            scope,
        )?);
        run.remove_emptied(emptied);
        run.write_all(&writes)?;
        run.make_empty_dirs()?;
        Ok(run.res)
    }
}

/// One put-back under way: what each phase reads, and the answer so far.
struct PutBack<'a> {
    cps: &'a Checkpoints,
    repo: &'a Repository,
    zone: ZoneId,
    scope: &'a [String],
    /// What the pre-restore checkpoint read and hashed.
    hashed: &'a Hashed,
    origin: Origin,
    /// The target's exact permission bits.
    modes: Modes,
    res: RestoreResult,
    /// The tree of the pre-restore checkpoint (the present).
    old: git2::Tree<'a>,
    /// The tree of the target.
    new: git2::Tree<'a>,
}

/// What a restore does about one change between the present's tree and the target's.
enum Step {
    /// A path no restore writes ([`storable`]): reported, left alone.
    Refused(VPath),
    /// The present's checkpoint holds the file by size only: left as it is.
    NotKept(VPath),
    /// The path goes, if it still holds `blob` (with `mode`); then `then` is written in its
    /// place (a type change).
    Remove {
        vp: VPath,
        blob: Oid,
        mode: FileMode,
        then: Option<Write>,
    },
    /// The path is written.
    Write(Write),
    /// Nothing to do.
    Skip,
}

/// Plans one change of the diff: reads the store, never the zone. `modes` are the target's
/// exact permission bits, `hashed` what the pre-restore checkpoint read.
fn plan_step(
    repo: &Repository,
    zone: ZoneId,
    hashed: &Hashed,
    modes: &Modes,
    delta: &DiffDelta<'_>,
) -> FsResult<Step> {
    let (of, nf) = (delta.old_file(), delta.new_file());
    let rel = nf
        .path()
        .or_else(|| of.path())
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let vp = VPath::new(zone, &rel)
        .map_err(|_| FsError::Internal(format!("a checkpoint holds the path {rel:?}")))?;
    if !storable(&rel) {
        return Ok(Step::Refused(vp));
    }
    // What the pre-restore checkpoint just read from the file is its content, no marker.
    let read_now = hashed
        .get(&vp.to_string())
        .is_some_and(|(id, _)| *id == of.id());
    if !of.id().is_zero() && !read_now && is_not_kept(repo, of.id(), of.mode()) {
        return Ok(Step::NotKept(vp));
    }
    let write = |vp: VPath, removed_here: bool| Write {
        perm: modes.perm(&rel, nf.mode()),
        vp,
        blob: nf.id(),
        mode: nf.mode(),
        removed_here,
    };
    Ok(match delta.status() {
        Delta::Deleted => Step::Remove {
            vp,
            blob: of.id(),
            mode: of.mode(),
            then: None,
        },
        Delta::Typechange => Step::Remove {
            vp: vp.clone(),
            blob: of.id(),
            mode: of.mode(),
            then: Some(write(vp, true)),
        },
        Delta::Added | Delta::Modified => Step::Write(write(vp, false)),
        _ => Step::Skip,
    })
}

/// Adds `dir` and each directory above it (short of the zone's root) to `into`.
fn with_parents(mut dir: Option<VPath>, into: &mut BTreeSet<String>) {
    while let Some(d) = dir.filter(|d| !d.is_root()) {
        into.insert(d.rel().to_string());
        dir = d.parent();
    }
}

impl PutBack<'_> {
    /// Takes the diff's changes in order, removing as it goes what the target does not hold;
    /// returns the files to write, in order, and the directories the removals may have emptied.
    fn remove(&mut self, diff: &git2::Diff<'_>) -> FsResult<(Vec<Write>, BTreeSet<String>)> {
        let mut writes = Vec::new();
        let mut emptied = BTreeSet::new();
        for delta in diff.deltas() {
            match plan_step(self.repo, self.zone, self.hashed, &self.modes, &delta)? {
                Step::Refused(vp) => self.res.refused.push(vp.to_string()),
                Step::NotKept(vp) => self.res.not_kept.push(vp.to_string()),
                Step::Remove {
                    vp,
                    blob,
                    mode,
                    then,
                } => {
                    if self.remove_one(&vp, blob, mode)? {
                        with_parents(vp.parent(), &mut emptied);
                        // Removed just above: the type change's new entry goes in its place.
                        writes.extend(then);
                    }
                }
                Step::Write(w) => writes.push(w),
                Step::Skip => {}
            }
        }
        Ok((writes, emptied))
    }

    /// Removes `vp` if it still holds `blob` (with `mode`); false, a conflict noted, when it
    /// changed since the pre-restore checkpoint.
    fn remove_one(&mut self, vp: &VPath, blob: Oid, mode: FileMode) -> FsResult<bool> {
        let Some(seen) = self.cps.unchanged(self.repo, self.hashed, vp, blob, mode)? else {
            self.res.conflicts.push(vp.to_string());
            return Ok(false);
        };
        gate::hold("restore-expected");
        let zones = &self.cps.zones;
        let remove = |seen| zones.remove_entry(&vp.to_string(), seen, self.origin);
        match self
            .cps
            .while_unchanged(self.repo, vp, (blob, mode), seen, remove)?
        {
            Ok(()) => {
                self.res.removed.push(vp.to_string());
                Ok(true)
            }
            Err(FsError::Conflict { .. }) => {
                self.res.conflicts.push(vp.to_string());
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Removes the directories the target does not hold among those the removals `emptied` and
    /// the empty ones of the present, deepest first; one still holding something (an excluded
    /// file) stays.
    fn remove_emptied(&self, mut emptied: BTreeSet<String>) {
        for rel in empty_dirs(self.repo, &self.old, self.scope) {
            with_parents(VPath::new(self.zone, &rel).ok(), &mut emptied);
        }
        for dir in emptied.iter().rev() {
            let kept = self
                .new
                .get_path(Path::new(dir))
                .is_ok_and(|e| e.kind() == Some(ObjectType::Tree));
            if !kept {
                let _ = self.cps.zones.delete(
                    &format!("/{}/{dir}", self.zone.name()),
                    false,
                    self.origin,
                );
            }
        }
    }

    /// Writes the files back: the first alone (a test kills the daemon right after it: one file
    /// put back, the rest not yet), then the rest, on several threads when they are many.
    fn write_all(&mut self, writes: &[Write]) -> FsResult<()> {
        let mut rest = writes;
        while let Some((w, tail)) = rest.split_first() {
            rest = tail;
            let done = self.write(&self.old, w)?;
            self.res.note(&w.vp, done);
            if done == Done::Restored {
                gate::hold("restore-midway");
                break;
            }
        }
        let threads = threads_for(rest.len());
        if threads == 1 {
            for w in rest {
                let done = self.write(&self.old, w)?;
                self.res.note(&w.vp, done);
            }
            return Ok(());
        }
        let done = self.write_parallel(rest, threads)?;
        for (w, d) in rest.iter().zip(done) {
            self.res.note(&w.vp, d);
        }
        Ok(())
    }

    /// Writes one file back, against the present's tree `old` (of this thread's store handle).
    fn write(&self, old: &git2::Tree<'_>, w: &Write) -> FsResult<Done> {
        self.cps
            .write_one(self.repo, old, self.hashed, w, self.origin)
    }

    /// Writes `writes` back on `threads` threads, each with its own handle on the store and its
    /// journal rows in one transaction at its end; returns what became of each, in order.
    fn write_parallel(&self, writes: &[Write], threads: usize) -> FsResult<Vec<Done>> {
        let (cps, hashed, origin) = (self.cps, self.hashed, self.origin);
        let store = self.repo.path().to_path_buf();
        let old_id = self.old.id();
        let chunk = writes.len().div_ceil(threads);
        let parts = std::thread::scope(|scope| {
            let workers: Vec<_> = writes
                .chunks(chunk)
                .map(|part| {
                    let store = &store;
                    scope.spawn(move || -> FsResult<Vec<Done>> {
                        let repo = Repository::open_bare(store).map_err(store_err)?;
                        let old = repo.find_tree(old_id).map_err(store_err)?;
                        cps.zones.journal_batch(|| {
                            part.iter()
                                .map(|w| cps.write_one(&repo, &old, hashed, w, origin))
                                .collect()
                        })
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("a restore thread panicked"))
                .collect::<Vec<_>>()
        });
        let mut done = Vec::with_capacity(writes.len());
        for part in parts {
            done.extend(part?);
        }
        Ok(done)
    }

    /// Makes the empty directories the target holds (beyond a symlink of the present: a
    /// conflict, as for a file).
    fn make_empty_dirs(&mut self) -> FsResult<()> {
        for rel in empty_dirs(self.repo, &self.new, self.scope) {
            let path = format!("/{}/{rel}", self.zone.name());
            if self.cps.zones.plain_way(&path)? {
                let _ = self.cps.zones.mkdir_entry(&path, self.origin);
            } else {
                self.res.conflicts.push(path);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::NOT_KEPT;
    use super::*;
    use crate::core::Seen;
    use std::collections::BTreeMap;

    /// A tree of `entries` (name, content, mode) in `repo`.
    fn tree(repo: &Repository, entries: &[(&str, &[u8], FileMode)]) -> Oid {
        let mut b = repo.treebuilder(None).unwrap();
        for (name, content, mode) in entries {
            let blob = repo.blob(content).unwrap();
            b.insert(name, blob, i32::from(*mode)).unwrap();
        }
        b.write().unwrap()
    }

    /// Each change's plan, in the diff's order, as `kind path` (`then` for a type change's write).
    fn plans(repo: &Repository, old: Oid, new: Oid, hashed: &Hashed, modes: &Modes) -> Vec<String> {
        let (old, new) = (repo.find_tree(old).unwrap(), repo.find_tree(new).unwrap());
        let mut opts = DiffOptions::new();
        opts.include_typechange(true);
        let diff = repo
            .diff_tree_to_tree(Some(&old), Some(&new), Some(&mut opts))
            .unwrap();
        let write = |w: &Write| {
            format!(
                "{} {:o}{}",
                w.vp,
                w.perm,
                if w.removed_here { " here" } else { "" }
            )
        };
        diff.deltas()
            .map(
                |d| match plan_step(repo, ZoneId::Workspace, hashed, modes, &d).unwrap() {
                    Step::Refused(vp) => format!("refused {vp}"),
                    Step::NotKept(vp) => format!("not-kept {vp}"),
                    Step::Remove { vp, then, .. } => match then {
                        Some(w) => format!("remove {vp} then {}", write(&w)),
                        None => format!("remove {vp}"),
                    },
                    Step::Write(w) => format!("write {}", write(&w)),
                    Step::Skip => "skip".into(),
                },
            )
            .collect()
    }

    #[test]
    fn each_change_is_planned_from_the_store_alone() {
        let t = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(t.path()).unwrap();
        let marker = [NOT_KEPT, b"99"].concat();
        let old = tree(
            &repo,
            &[
                ("a", b"a", FileMode::Blob),
                ("big", &marker, FileMode::Blob),
                ("gone", b"g", FileMode::Blob),
                ("same", b"s", FileMode::Blob),
                ("t", b"x", FileMode::Blob),
            ],
        );
        let new = tree(
            &repo,
            &[
                ("a", b"a2", FileMode::Blob),
                ("big", b"b", FileMode::Blob),
                ("new", b"n", FileMode::BlobExecutable),
                ("same", b"s", FileMode::Blob),
                ("t", b"target", FileMode::Link),
            ],
        );
        let modes = Modes(BTreeMap::from([("a".to_string(), 0o600)]));
        assert_eq!(
            plans(&repo, old, new, &Hashed::new(), &modes),
            [
                "write /workspace/a 600",
                "not-kept /workspace/big",
                "remove /workspace/gone",
                "write /workspace/new 755",
                "remove /workspace/t then /workspace/t 644 here",
            ]
        );
        // A file the pre-restore checkpoint read just now holds its content, not the marker.
        let big = repo.find_tree(old).unwrap().get_name("big").unwrap().id();
        let hashed = Hashed::from([("/workspace/big".to_string(), (big, Seen::Unknown))]);
        assert_eq!(
            plans(&repo, old, new, &hashed, &Modes::default())[1],
            "write /workspace/big 644"
        );
    }

    #[test]
    fn a_removal_empties_each_directory_above_it_short_of_the_zone() {
        let mut emptied = BTreeSet::new();
        let vp = VPath::new(ZoneId::Workspace, "a/b/c").unwrap();
        with_parents(vp.parent(), &mut emptied);
        with_parents(VPath::new(ZoneId::Workspace, "").ok(), &mut emptied);
        assert_eq!(emptied.into_iter().collect::<Vec<_>>(), ["a", "a/b"]);
    }
}

//! `update`: moves a fork onto its parent's present, keeping its own changes: the reverse of a
//! merge, written into the fork instead of the parent.
//!
//! Both sides are checkpointed (the parent and the fork, as they are now), and the trees are
//! merged three-way against the fork point (as `git merge-tree` does), the fork's side as
//! "ours" and the parent's as "theirs". The merged tree is put in the fork as a merge puts one
//! in a parent: the fork checkpointed first (`before`: one restore undoes the update), every
//! change under the path locks and journaled, a file another writer changed meanwhile left
//! alone and reported.
//!
//! Unlike a merge, an update is not all or nothing: a path both sides changed in ways that
//! cannot be joined keeps **both** versions. The fork's stays at the path; the parent's is
//! written beside it as `PATH.parent` (`PATH.parent.2`, … when that name is taken; nothing when
//! the parent deleted the file) and the conflict is listed. Settle it in the fork: put what
//! should stay at `PATH` and delete `PATH.parent`.
//!
//! Then the fork's fork point moves to the parent's checkpoint just taken (recorded as a
//! checkpoint of the fork: [`Checkpoints::record_point`](crate::checkpoint::Checkpoints)), so
//! `changes` and the next merge compare with the parent as it was brought in. A path the update
//! did not write (left alone) keeps the old fork point's version there, so the next update
//! merges it again.

use serde::{Deserialize, Serialize};

use super::{state_err, Forks};
use crate::checkpoint::{Settle, Settled};
use crate::core::{FsError, FsResult, ZoneId};
use crate::state::{CheckpointRow, ForkRecord, Origin};

/// The suffix of the name a conflicting path's parent version is written at in the fork.
pub const BESIDE: &str = ".parent";

/// What an update did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UpdateResult {
    pub fork: String,
    /// The zone or fork the update brought in (the fork's parent).
    pub parent: String,
    /// The parent's checkpoint the fork was moved onto (the parent as it was brought in).
    pub onto: i64,
    /// The fork's fork point after the update: a checkpoint of the fork holding the parent's
    /// tree at `onto` (unchanged when the parent had not changed since the old one).
    pub base: i64,
    /// The checkpoint of the fork just before the update wrote: restore it to undo the update's
    /// writes. `null` when nothing was written.
    pub before: Option<i64>,
    /// The paths written in the fork (relative to it): the parent's changes, and the parent's
    /// versions of conflicting paths put beside them.
    pub changed: Vec<String>,
    /// The paths both sides changed in ways a three-way merge cannot join: the fork's version
    /// stays, the parent's is beside it (`parent_copy`). Settle each in the fork.
    pub conflicts: Vec<UpdateConflict>,
    /// Paths not written because another writer changed them in the fork while the update ran
    /// (or the store could not write them): the next update brings them again.
    pub left_alone: Vec<String>,
}

/// A path an update could not join, and where the parent's version went.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct UpdateConflict {
    /// Relative to the fork.
    pub path: String,
    /// As a merge names it, the parent's side first: `content`, `binary`, `mode`,
    /// `delete/modify` (the parent deleted it, the fork changed it), `modify/delete`, `add/add`
    /// or `type`.
    pub kind: String,
    /// Where the parent's version was written in the fork (`PATH.parent`, relative to it);
    /// `null` when the parent has none (it deleted the file) or no name was free.
    pub parent_copy: Option<String>,
}

impl UpdateConflict {
    /// The conflict `s` of a merge whose "ours" was the fork, named as a merge names it.
    fn of(s: Settled) -> UpdateConflict {
        let kind = match s.conflict.kind.as_str() {
            "delete/modify" => "modify/delete".to_string(),
            "modify/delete" => "delete/modify".to_string(),
            other => other.to_string(),
        };
        UpdateConflict {
            path: s.conflict.path,
            kind,
            parent_copy: s.beside,
        }
    }
}

/// Why an update wrote nothing: paths a file on one side and a directory on the other, where
/// no tree can keep both (the only conflicts an update does not settle).
fn unsettled(id: ZoneId, conflicts: &[crate::checkpoint::MergeConflict]) -> FsError {
    let first = conflicts
        .first()
        .map(|c| c.path.as_str())
        .unwrap_or_default();
    FsError::Conflict {
        path: format!("/{}/{first}", id.name()),
        reason: format!(
            "{} a file on one side and a directory on the other, which the fork cannot hold \
             both of; nothing was changed: move the fork's file or directory aside (or delete \
             it) and update again",
            match conflicts.len() {
                1 => "this path is".to_string(),
                n => format!("{n} paths are, from this one,"),
            }
        ),
    }
}

impl Forks {
    /// Moves the fork `name` onto its parent's present, keeping its own changes, as the module
    /// doc says. ZONE_UNAVAILABLE for a fork of a checkpoint (no parent to update from).
    pub fn update(&self, name: &str, origin: Origin) -> FsResult<UpdateResult> {
        let _busy = self.busy.lock().expect("not poisoned");
        let (rec, id) = self.get(name)?;
        let parent = self.parent_zone(&rec, "update from")?;
        let base = self.checkpoints.get(rec.base)?;
        let (theirs, _) = self.checkpoints.present(
            parent,
            &format!("/{} as fork {name} was updated from it", parent.name()),
            origin,
        )?;
        let (ours, _) =
            self.checkpoints
                .present(id, &format!("fork {name} as it was updated"), origin)?;
        let mut result = UpdateResult {
            fork: name.to_string(),
            parent: parent.name().to_string(),
            onto: theirs.id,
            base: base.id,
            before: None,
            changed: Vec::new(),
            conflicts: Vec::new(),
            left_alone: Vec::new(),
        };
        if theirs.tree == base.tree {
            return Ok(result);
        }
        let settle = Settle {
            beside: Some(BESIDE),
            ..Settle::default()
        };
        let merged =
            self.checkpoints
                .merge_settled(&base.tree, &ours.tree, &theirs.tree, &settle)?;
        let Some(tree) = merged.tree else {
            return Err(unsettled(id, &merged.conflicts));
        };
        result.conflicts = merged.settled.into_iter().map(UpdateConflict::of).collect();
        self.put_in_fork(id, &ours.tree, &tree, origin, &mut result)?;
        // Checkpoints of the fork up to this one hold it as it was before the update.
        let at = result.before.unwrap_or(ours.id);
        result.base =
            self.move_point(&rec, id, [&base, &theirs], at, &result.left_alone, origin)?;
        Ok(result)
    }

    /// Puts the merged tree `tree` in the fork `id` (whose tree was `ours`) as a restore does,
    /// and notes in `result` what it wrote, what it left alone, and the checkpoint before.
    fn put_in_fork(
        &self,
        id: ZoneId,
        ours: &str,
        tree: &str,
        origin: Origin,
        result: &mut UpdateResult,
    ) -> FsResult<()> {
        let changed = self.checkpoints.changed_paths(ours, tree)?;
        if changed.is_empty() {
            return Ok(());
        }
        let message = format!("update of fork {} from /{}", result.fork, result.parent);
        let (_, restored) = self
            .checkpoints
            .apply_tree(id, ours, tree, &changed, &message, origin)?;
        let prefix = format!("/{}/", id.name());
        let rel = |v: &String| v.strip_prefix(&prefix).unwrap_or(v).to_string();
        let not_written = [&restored.conflicts, &restored.not_kept, &restored.refused];
        result.left_alone = not_written.into_iter().flatten().map(rel).collect();
        result.left_alone.sort();
        result.left_alone.dedup();
        result.before = Some(restored.before);
        result.changed = changed;
        Ok(())
    }

    /// Records the fork's new fork point, the parent's tree `theirs` with the old fork point
    /// `base`'s version of each path in `left_alone`, and makes it the fork's `base` (a
    /// restore to a checkpoint up to `at` puts `base` back).
    fn move_point(
        &self,
        rec: &ForkRecord,
        id: ZoneId,
        [base, theirs]: [&CheckpointRow; 2],
        at: i64,
        left_alone: &[String],
        origin: Origin,
    ) -> FsResult<i64> {
        let tree = if left_alone.is_empty() {
            theirs.tree.clone()
        } else {
            self.checkpoints
                .pick_paths(&theirs.tree, &base.tree, left_alone)?
        };
        let name = &rec.name;
        let point = self.checkpoints.record_point(
            id,
            &tree,
            theirs.modes.as_deref(),
            &format!("fork point of {name}: /{} as it was brought in", rec.parent),
            &format!("fork {name} after its update"),
            origin,
        )?;
        self.zones
            .db()
            .fork_move_base(rec.id, rec.base, point.id, at)
            .map_err(state_err)?;
        Ok(point.id)
    }
}

//! Garbage collection of staging leftovers: rows of discarded staged commits past the journal's
//! retention, and `refs/wardfs/staged/*` refs that no live staged commit owns (a discard removes
//! its ref, but a daemon stopped between the two steps can leave one behind).
//!
//! Each mirror is swept under its own lock, the one `stage` holds while it writes a ref and its
//! row, so a commit being staged is never mistaken for a leftover.
//! A sweep fails only in the shared ways ([`GcError`]).

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::error::{libgit2, CommonError};
use super::Git;

/// Why a sweep failed: only in the ways every operation shares (the state database, a mirror).
pub type GcError = CommonError;

/// What [`Git::gc`] removed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GitGc {
    /// Ids of discarded staged commits whose rows were deleted.
    pub staged_commits: Vec<String>,
    /// Staged refs deleted, as `<mirror path>:<ref>`.
    pub refs: Vec<String>,
}

impl Git {
    /// Deletes discarded staged commits last changed before `before_ms` (none when `None`), then
    /// every staged ref whose commit is discarded or unknown.
    pub fn gc(&self, before_ms: Option<i64>) -> Result<GitGc, GcError> {
        let db = self.zones.db();
        let mut out = GitGc::default();
        if let Some(before) = before_ms {
            out.staged_commits = db.staged_prune_discarded(before)?;
        }
        let mirrors: BTreeSet<PathBuf> = db
            .repos()?
            .into_iter()
            .map(|r| PathBuf::from(r.mirror))
            .collect();
        for mirror_path in mirrors {
            if !mirror_path.join("HEAD").exists() {
                continue;
            }
            let lock = self.lock_for(&mirror_path);
            let _guard = lock.lock().expect("not poisoned");
            let mirror = self.open_mirror(&mirror_path)?;
            let names: Vec<String> = mirror
                .references_glob("refs/wardfs/staged/*")
                .map_err(libgit2("list staged refs"))?
                .names()
                .filter_map(|n| n.ok().map(str::to_string))
                .collect();
            for name in names {
                let id = name.trim_start_matches("refs/wardfs/staged/");
                let live = db.staged(id)?.is_some_and(|row| row.state != "discarded");
                if live {
                    continue;
                }
                if let Ok(mut r) = mirror.find_reference(&name) {
                    r.delete().map_err(libgit2("delete staged ref"))?;
                    out.refs.push(format!("{}:{name}", mirror_path.display()));
                }
            }
        }
        Ok(out)
    }
}

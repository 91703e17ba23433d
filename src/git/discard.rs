//! `discard`: drop a staged commit, optionally reverting its files where they were staged from
//! (the workspace, or the fork whose changes it holds; each replaced as itself,
//! compare-and-swapped like a pull's writes). [`DiscardError`] says why a discard failed.

use super::*;

/// What a discard did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DiscardResult {
    /// The discarded commit's id.
    pub id: String,
    /// Virtual paths put back to the base (empty without `revert`).
    pub reverted: Vec<String>,
    /// With `revert`: files left as they are (changed again since staging), and why.
    pub kept: Vec<PathNote>,
}

/// Why a discard failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscardError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error("no staged commit {id} (`wardfs staged list` shows them)")]
    NoStaged { id: String },
    #[error("staged commit {id} is {state}: {rule}")]
    WrongState {
        id: String,
        state: String,
        rule: String,
    },
    #[error("staged commit {id} was discarded already")]
    Discarded { id: String },
}

lift_common!(DiscardError);

impl GitFailure for DiscardError {
    fn code(&self) -> ErrorCode {
        match self {
            DiscardError::Common(e) => e.code(),
            DiscardError::NoStaged { .. } => ErrorCode::NotFound,
            DiscardError::WrongState { .. } | DiscardError::Discarded { .. } => ErrorCode::Conflict,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            DiscardError::Common(e) => e.path(),
            _ => None,
        }
    }
}

impl Git {
    /// Discards a staged commit; with `revert`, puts its files back to their base (files changed
    /// again since staging are kept and reported).
    pub fn discard(&self, id: &str, revert: bool) -> Result<DiscardResult, DiscardError> {
        let row = self
            .zones
            .db()
            .staged(id)?
            .ok_or_else(|| DiscardError::NoStaged { id: id.into() })?;
        if row.state == "pushed" {
            return Err(DiscardError::WrongState {
                id: id.into(),
                state: row.state,
                rule: "a pushed commit cannot be discarded".into(),
            });
        }
        if row.state == "discarded" {
            return Err(DiscardError::Discarded { id: id.into() });
        }
        let repo = self.repo_of(&row)?;
        let zone = ZoneId::from_name(&row.zone);
        if revert && zone.is_none() {
            // A fork removed since: there is nothing to revert in.
            let name = row.zone.rsplit('/').next().unwrap_or_default().to_string();
            return Err(CommonError::NoFork {
                path: format!("/{}", row.zone),
                name,
            }
            .into());
        }
        let zone = zone.unwrap_or(ZoneId::Workspace);
        let mirror_path = PathBuf::from(&repo.mirror);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let mut reverted = Vec::new();
        let mut kept = Vec::new();
        if revert {
            let base_tree = Oid::from_str(&row.base)
                .and_then(|o| mirror.find_commit(o))
                .and_then(|c| c.tree())
                .map_err(libgit2("read base"))?;
            // Reverted links are judged through the base tree's own links, as a pull judges them.
            let mut links = LinkResolver::new();
            base_tree
                .walk(TreeWalkMode::PreOrder, |root, e| {
                    if e.filemode() as u32 == MODE_LINK {
                        if let Some(target) =
                            e.to_object(&mirror).ok().and_then(|o| o.into_blob().ok())
                        {
                            links.add(
                                &format!("{root}{}", e.name().unwrap_or("")),
                                &String::from_utf8_lossy(target.content()),
                            );
                        }
                    }
                    TreeWalkResult::Ok
                })
                .map_err(libgit2("walk base tree"))?;
            for f in self.zones.db().staged_files(id)? {
                let v = vfile_in(&row.zone, &repo.dir, &f.path);
                let seen = self.zones.seen(&v)?;
                let now = self.local_blob(&v)?.map(|(o, _)| o.to_string());
                if now != f.oid {
                    kept.push(PathNote {
                        path: v,
                        reason: "changed again since it was staged; left as it is".into(),
                    });
                    continue;
                }
                match base_tree.get_path(Path::new(&f.path)) {
                    Ok(entry) => {
                        let blob = mirror.find_blob(entry.id()).map_err(libgit2("read blob"))?;
                        if let Err(Refusal::Changed(reason) | Refusal::Skipped(reason)) = self
                            .write_entry(
                                &v,
                                &f.path,
                                blob.content(),
                                entry.filemode() as u32,
                                seen,
                                &links,
                            )
                        {
                            kept.push(PathNote { path: v, reason });
                            continue;
                        }
                    }
                    Err(_) => {
                        if now.is_some() {
                            if let Err(e) = self.zones.remove_entry(&v, seen, origin_git()) {
                                kept.push(PathNote {
                                    path: v,
                                    reason: format!("not removed: {e}"),
                                });
                                continue;
                            }
                            self.prune_empty_parents(&row.zone, &repo.dir, &f.path, origin_git());
                        }
                    }
                }
                reverted.push(v);
            }
        }
        if let Ok(mut r) = mirror.find_reference(&staged_ref(id)) {
            r.delete().map_err(libgit2("delete staged ref"))?;
        }
        self.zones.db().set_staged_state(
            id,
            "discarded",
            None,
            &[],
            None,
            None,
            None,
            None,
            self.zones.now_ms(),
        )?;
        self.event_in(
            zone,
            &repo.dir,
            "git-discard",
            &format!("{id}{}", if revert { " (files reverted)" } else { "" }),
        );
        Ok(DiscardResult {
            id: id.into(),
            reverted,
            kept,
        })
    }
}

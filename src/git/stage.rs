//! `stage`: build a reviewable commit in the mirror's object store from the agent's changes (the
//! workspace is never touched), keep it at `refs/wardfs/staged/<id>` with per-file diffs; `list`
//! and `show` read staged commits back. Each has its error type: [`StageError`], [`ShowError`],
//! [`ListError`].

use super::*;

/// `stage`'s request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageRequest {
    /// The repository's workspace directory (optional when only one is pulled).
    #[serde(default)]
    pub repo: Option<String>,
    /// Files or directories to stage (virtual paths, or paths inside the repository); default:
    /// every change not already in a staged commit.
    #[serde(default)]
    pub files: Vec<String>,
    pub message: String,
    /// The branch to push to (default: the pulled branch).
    #[serde(default)]
    pub branch: Option<String>,
}

/// A staged commit as the API and CLI show it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagedCommit {
    pub id: String,
    /// The repository's workspace directory.
    pub repo: String,
    pub url: String,
    pub branch: String,
    pub message: String,
    pub base: String,
    pub commit: String,
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub conflicts: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub additions: u64,
    pub deletions: u64,
    pub files: Vec<StagedFile>,
}

/// One file of a staged commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StagedFile {
    pub path: String,
    pub operation: String,
    pub additions: u64,
    pub deletions: u64,
    pub binary: bool,
    pub oversized: bool,
    /// The git-format patch (absent for binary and oversized files, and in lists).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The patch's hunks with typed lines (in `show` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hunks: Option<Vec<diff::Hunk>>,
}

/// Why staging failed.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    #[error(transparent)]
    Common(#[from] CommonError),
    /// Nothing was left to stage (no changes, or all of them staged already).
    #[error("{0}")]
    Nothing(String),
    /// Chosen files are in conflict, or the same commit is staged already.
    #[error("{reason}: {}", paths.join(", "))]
    Conflict { reason: String, paths: Vec<String> },
}

lift_common!(StageError);

impl GitFailure for StageError {
    fn code(&self) -> ErrorCode {
        match self {
            StageError::Common(e) => e.code(),
            StageError::Nothing(_) => ErrorCode::NoMatch,
            StageError::Conflict { .. } => ErrorCode::Conflict,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            StageError::Common(e) => e.path(),
            _ => None,
        }
    }
}

/// Why showing a staged commit failed.
#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error("no staged commit {id} (`wardfs staged list` shows them)")]
    NoStaged { id: String },
}

lift_common!(ShowError);

impl GitFailure for ShowError {
    fn code(&self) -> ErrorCode {
        match self {
            ShowError::Common(e) => e.code(),
            ShowError::NoStaged { .. } => ErrorCode::NotFound,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            ShowError::Common(e) => e.path(),
            ShowError::NoStaged { .. } => None,
        }
    }
}

/// Why listing staged commits failed: only in the ways every operation shares (the state
/// database).
pub type ListError = CommonError;

impl Git {
    /// Builds a commit of the chosen changes on the repo's base, in the mirror only.
    pub fn stage(&self, req: &StageRequest) -> Result<StagedCommit, StageError> {
        let message = req.message.trim();
        if message.is_empty() {
            return Err(invalid("message", "must not be empty; say what the change does").into());
        }
        let repo = self.repo_for(req.repo.as_deref())?;
        let branch = req.branch.clone().unwrap_or_else(|| repo.branch.clone());
        check_branch(&branch)?;
        let st = self.refresh(&repo, false)?;
        let changes: Vec<(String, String)> = st
            .changes
            .iter()
            .map(|c| {
                let rel = c.path[vdir(&repo.dir).len()..].trim_start_matches('/');
                (rel.to_string(), c.state.clone())
            })
            .collect();
        let mut chosen: Vec<(String, String)> = Vec::new();
        if req.files.is_empty() {
            chosen = changes.clone();
        } else {
            for f in &req.files {
                let rel = if f.starts_with('/') {
                    let r = self.workspace_dir("files", f)?;
                    if !under(&r, &repo.dir) {
                        return Err(
                            invalid("files", format!("{f} is not in {}", vdir(&repo.dir))).into(),
                        );
                    }
                    if repo.dir.is_empty() {
                        r
                    } else {
                        r[repo.dir.len()..].trim_start_matches('/').to_string()
                    }
                } else {
                    repo_path("files", f)?
                };
                let hits: Vec<_> = changes.iter().filter(|(p, _)| under(p, &rel)).collect();
                if hits.is_empty() {
                    return Err(StageError::Nothing(format!(
                        "{} has no changes to stage",
                        vfile(&repo.dir, &rel)
                    )));
                }
                for h in hits {
                    if !chosen.contains(h) {
                        chosen.push(h.clone());
                    }
                }
            }
        }
        let conflicted: Vec<String> = chosen
            .iter()
            .filter(|(_, s)| s == "conflict")
            .map(|(p, _)| vfile(&repo.dir, p))
            .collect();
        if !conflicted.is_empty() {
            return Err(StageError::Conflict {
                reason: "these files changed upstream too (see the last pull); merge the upstream \
                         change into them, then `wardfs git resolve PATH`"
                    .into(),
                paths: conflicted,
            });
        }
        let mirror_path = PathBuf::from(&repo.mirror);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let base_oid = Oid::from_str(&repo.base).map_err(libgit2("base id"))?;
        let base = mirror.find_commit(base_oid).map_err(libgit2("read base"))?;
        let base_tree = base.tree().map_err(libgit2("read base tree"))?;
        let already: HashSet<(String, Option<String>)> = if req.files.is_empty() {
            self.zones
                .db()
                .staged_blobs(repo.id, &repo.base)?
                .into_iter()
                .collect()
        } else {
            HashSet::new()
        };
        let mut update = git2::build::TreeUpdateBuilder::new();
        let mut n = 0;
        for (path, _) in &chosen {
            match self.local_content(&vfile(&repo.dir, path))? {
                Some((bytes, mode)) => {
                    let oid = mirror.blob(&bytes).map_err(libgit2("write blob"))?;
                    if already.contains(&(path.clone(), Some(oid.to_string()))) {
                        continue;
                    }
                    update.upsert(path.as_str(), oid, file_mode(mode));
                }
                None => {
                    if already.contains(&(path.clone(), None)) {
                        continue;
                    }
                    update.remove(path.as_str());
                }
            }
            n += 1;
        }
        if n == 0 {
            return Err(StageError::Nothing(if changes.is_empty() {
                format!("nothing to stage: {} has no changes", vdir(&repo.dir))
            } else {
                "nothing to stage: every change is already in a staged commit (`wardfs staged list`)"
                    .into()
            }));
        }
        let tree_oid = update
            .create_updated(&mirror, &base_tree)
            .map_err(libgit2("build tree"))?;
        if tree_oid == base_tree.id() {
            return Err(StageError::Nothing(
                "nothing to stage: the files equal their base".into(),
            ));
        }
        let tree = mirror.find_tree(tree_oid).map_err(libgit2("read tree"))?;
        let now = self.zones.now_ms();
        let sig = self.signature(now)?;
        let commit = mirror
            .commit(None, &sig, &sig, message, &tree, &[&base])
            .map_err(libgit2("commit"))?;
        let id = commit.to_string()[..10].to_string();
        mirror
            .reference(&staged_ref(&id), commit, true, "wardfs: staged")
            .map_err(libgit2("keep staged commit"))?;
        let files = diff::file_patches(&mirror, &base_tree, &tree, self.settings.max_diff_bytes)?;
        let row = StagedRow {
            id: id.clone(),
            repo_id: repo.id,
            url: repo.url.clone(),
            branch,
            message: message.to_string(),
            base: repo.base.clone(),
            commit: commit.to_string(),
            state: "staged".into(),
            reason: None,
            conflicts: Vec::new(),
            pushed_commit: None,
            pushed_ref: None,
            url_pr: None,
            created_at: now,
            updated_at: now,
        };
        self.zones
            .db()
            .insert_staged(&row, &files)
            .map_err(|e| match e {
                crate::state::StateError::Sql(ref s)
                    if s.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) =>
                {
                    StageError::Conflict {
                        reason: "an identical commit is already staged".into(),
                        paths: vec![id.clone()],
                    }
                }
                e => e.into(),
            })?;
        self.event(
            &repo.dir,
            "git-stage",
            &format!("{id}: {} files: {message}", files.len()),
        );
        Ok(self.view(row, false)?)
    }

    pub(super) fn signature(&self, now_ms: i64) -> Result<git2::Signature<'static>, Libgit2Error> {
        git2::Signature::new(
            &self.settings.author_name,
            &self.settings.author_email,
            &git2::Time::new(now_ms / 1000, 0),
        )
        .map_err(libgit2("signature"))
    }

    /// Lists staged commits, newest first (only those in `state` when given).
    pub fn list(&self, state: Option<&str>) -> Result<Vec<StagedCommit>, ListError> {
        let rows = self.zones.db().staged_list(state)?;
        Ok(rows
            .into_iter()
            .map(|r| self.view(r, false))
            .collect::<Result<_, _>>()?)
    }

    /// Shows a staged commit; `full` includes each file's patch and hunks.
    pub fn show(&self, id: &str, full: bool) -> Result<StagedCommit, ShowError> {
        let row = self
            .zones
            .db()
            .staged(id)?
            .ok_or_else(|| ShowError::NoStaged { id: id.into() })?;
        Ok(self.view(row, full)?)
    }

    fn view(&self, r: StagedRow, full: bool) -> Result<StagedCommit, crate::state::StateError> {
        let repo = self.zones.db().repo(r.repo_id)?;
        let repo_dir = repo.as_ref().map(|x| x.dir.clone());
        let files: Vec<StagedFile> = self
            .zones
            .db()
            .staged_files(&r.id)?
            .into_iter()
            .map(|f| {
                let dir = repo.as_ref().map(|x| x.dir.as_str()).unwrap_or("");
                StagedFile {
                    path: vfile(dir, &f.path),
                    operation: f.operation,
                    additions: f.additions,
                    deletions: f.deletions,
                    binary: f.binary,
                    oversized: f.oversized,
                    hunks: if full {
                        f.diff.as_deref().map(diff::hunks)
                    } else {
                        None
                    },
                    diff: if full { f.diff } else { None },
                }
            })
            .collect();
        Ok(StagedCommit {
            id: r.id,
            repo: repo.map(|x| vdir(&x.dir)).unwrap_or_default(),
            url: r.url,
            branch: r.branch,
            message: r.message,
            base: r.base,
            commit: r.commit,
            state: r.state,
            reason: r.reason,
            conflicts: r
                .conflicts
                .iter()
                .map(|p| vfile(repo_dir.as_deref().unwrap_or(""), p))
                .collect(),
            pushed_commit: r.pushed_commit,
            pushed_ref: r.pushed_ref,
            pr_url: r.url_pr,
            created_at: r.created_at,
            updated_at: r.updated_at,
            additions: files.iter().map(|f| f.additions).sum(),
            deletions: files.iter().map(|f| f.deletions).sum(),
            files,
        })
    }
}

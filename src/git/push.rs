//! `push`: send a staged commit once a human approved it, with a lease; when the branch moved,
//! fetch it and rebase with a three-way tree merge first. [`PushError`] says why a push failed.

use super::*;

/// `push`'s request: which staged commit to push, and how.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    /// The staged commit's id.
    pub id: String,
    /// Push to the branch `wardfs/<id>` and open a GitHub pull request into the commit's branch
    /// instead of pushing to that branch. Needs a token in the environment variable named by
    /// `git.token_env` and a remote URL naming an owner and repository; the API is
    /// `git.github_api`.
    #[serde(default)]
    pub pr: bool,
    /// Stream progress as NDJSON (`application/x-ndjson`) instead of answering with one JSON
    /// object (API only).
    #[serde(default)]
    pub progress: bool,
}

/// What a push did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PushResult {
    /// The staged commit's id.
    pub id: String,
    /// Always `pushed`.
    pub state: String,
    /// The commit that reached the remote.
    pub commit_sha: String,
    /// The remote ref it was pushed to.
    pub pushed_ref: String,
    /// With `pr`: the pull request's URL (an existing one for the branch is reused). Left out
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// True when this call rebased the commit onto a remote that had moved (only other files
    /// changed) and pushed it. False when it was pushed as it was, including a commit rebased by
    /// an earlier call that answered REMOTE_MOVED.
    pub rebased: bool,
    /// How long the push took, in milliseconds.
    pub duration_ms: u64,
}

/// Why a push failed. A conflict, a rejection and a rebase that needs review are recorded on the
/// staged commit (its state says which).
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error(transparent)]
    PullRequest(#[from] PrError),
    #[error("no staged commit {id} (`wardfs staged list` shows them)")]
    NoStaged { id: String },
    #[error("staged commit {id} is {state}: {rule}")]
    WrongState {
        id: String,
        state: String,
        rule: String,
    },
    /// The remote branch moved and changed the same lines: nothing was pushed.
    #[error("{reason}: {}", paths.join(", "))]
    Conflict { reason: String, paths: Vec<String> },
    /// The lease broke: the remote branch is not where the push expected it.
    #[error("{branch} moved on the remote during the push (expected {expected}, found {found}); nothing was pushed")]
    RemoteMoved {
        branch: String,
        expected: String,
        found: String,
    },
    #[error("staged commit {id} was rebased onto the moved remote branch, which changed the same files ({}); review it again (`wardfs staged show {id}`) and push again", paths.join(", "))]
    NeedsReview { id: String, paths: Vec<String> },
    #[error("the remote rejected the push of {refname}: {reason}")]
    Rejected { refname: String, reason: String },
}

lift_common!(PushError);

impl GitFailure for PushError {
    fn code(&self) -> ErrorCode {
        match self {
            PushError::Common(e) => e.code(),
            PushError::Remote(e) => e.code(),
            PushError::PullRequest(e) => e.code(),
            PushError::NoStaged { .. } => ErrorCode::NotFound,
            PushError::WrongState { .. } | PushError::Conflict { .. } => ErrorCode::Conflict,
            PushError::RemoteMoved { .. } | PushError::NeedsReview { .. } => ErrorCode::RemoteMoved,
            PushError::Rejected { .. } => ErrorCode::Rejected,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            PushError::Common(e) => e.path(),
            _ => None,
        }
    }
}

/// The staged commit `row` if its state lets it be pushed (`staged`, `rebased`, `rejected`),
/// else CONFLICT saying why not.
fn pushable(row: StagedRow) -> Result<StagedRow, PushError> {
    if !matches!(row.state.as_str(), "staged" | "rebased" | "rejected") {
        return Err(PushError::WrongState {
            id: row.id,
            state: row.state.clone(),
            rule: match row.state.as_str() {
                "pushed" => "it was pushed already".into(),
                "discarded" => "it was discarded".into(),
                _ => "stage the change again after resolving the conflict".into(),
            },
        });
    }
    Ok(row)
}

/// The remote ref a push of `row` goes to: its branch, or with `pr` the branch `wardfs/<id>`.
fn target_ref(row: &StagedRow, pr: bool) -> String {
    if pr {
        format!("refs/heads/wardfs/{}", row.id)
    } else {
        format!("refs/heads/{}", row.branch)
    }
}

/// The state and conflicts a failed push leaves on `row`: `conflicted` with the conflicting
/// paths, `rejected`, `rebased` (to be reviewed again), else the state it had.
fn failed_state<'a>(e: &PushError, row: &'a StagedRow) -> (&'a str, Vec<String>) {
    match e {
        PushError::Conflict { paths, .. } => ("conflicted", paths.clone()),
        PushError::Rejected { .. } => ("rejected", Vec::new()),
        PushError::NeedsReview { .. } => ("rebased", Vec::new()),
        _ => (row.state.as_str(), row.conflicts.clone()),
    }
}

impl Git {
    /// Pushes a staged commit (a human's decision): to its branch, or with `pr` to
    /// `wardfs/<id>` with a pull request. A remote that moved is merged into (three-way); a
    /// conflict, a rejection or a lease broken twice leaves nothing pushed.
    pub fn push(
        &self,
        req: &PushRequest,
        progress: OnProgress<'_>,
    ) -> Result<PushResult, PushError> {
        let started = Instant::now();
        let row = self
            .zones
            .db()
            .staged(&req.id)?
            .ok_or_else(|| PushError::NoStaged { id: req.id.clone() })?;
        let row = pushable(row)?;
        let repo = self.repo_of(&row)?;
        let mirror_path = PathBuf::from(&repo.mirror);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let target = target_ref(&row, req.pr);
        // Everything a pull request needs is checked before anything is pushed.
        let pr_target = if req.pr {
            Some(pr::Target::new(&self.settings, &repo.url)?)
        } else {
            None
        };
        let outcome = self.push_attempts(&mirror, &repo, &row, &target, req.pr, progress);
        let now = self.zones.now_ms();
        let (commit, rebased) = match outcome {
            Ok((c, r)) => (c, r || row.state == "rebased"),
            Err(e) => return Err(self.record_failed_push(&repo, &row, e, now)?),
        };
        let url = match &pr_target {
            Some(t) => Some(self.open_pr(t, &row, &target, commit, now)?),
            None => None,
        };
        self.zones.db().set_staged_state(
            &row.id,
            "pushed",
            None,
            &[],
            Some(&commit.to_string()),
            Some(&commit.to_string()),
            Some(&target),
            url.as_deref(),
            now,
        )?;
        // A direct push of a commit built on the workspace's base moves the base: its files are
        // clean now. After a rebase the workspace lacks the upstream changes; a pull brings them.
        // A fork's commit leaves the base alone: the workspace does not hold the fork's changes
        // (until they are merged), and would read as undoing them.
        if !req.pr && !rebased && row.base == repo.base && row.zone == WORKSPACE {
            self.advance_base_to(&mirror, &repo, &row, commit)?;
        }
        self.event(
            &repo.dir,
            "git-push",
            &format!(
                "{}: {} to {target}{}",
                row.id,
                remote::short(commit),
                url.as_ref().map(|u| format!(" ({u})")).unwrap_or_default()
            ),
        );
        Ok(PushResult {
            id: row.id,
            state: "pushed".into(),
            commit_sha: commit.to_string(),
            pushed_ref: target,
            url,
            rebased,
            duration_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Pushes the staged commit to `target`, once more when the lease broke on the first try;
    /// returns the commit pushed and whether this call rebased it.
    fn push_attempts(
        &self,
        mirror: &Repository,
        repo: &RepoRow,
        row: &StagedRow,
        target: &str,
        pr: bool,
        progress: OnProgress<'_>,
    ) -> Result<(Oid, bool), PushError> {
        let src = staged_ref(&row.id);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = self.push_once(mirror, repo, row, target, &src, pr, progress);
            match r {
                Err(PushError::RemoteMoved { .. }) if attempt < 2 => continue,
                other => break other,
            }
        }
    }

    /// Records a failed push on the staged commit (its state as [`failed_state`] says, the
    /// error as its reason) and in the journal; returns the error to answer with.
    fn record_failed_push(
        &self,
        repo: &RepoRow,
        row: &StagedRow,
        e: PushError,
        now: i64,
    ) -> Result<PushError, PushError> {
        let (state, conflicts) = failed_state(&e, row);
        self.zones.db().set_staged_state(
            &row.id,
            state,
            Some(&e.to_string()),
            &conflicts,
            None,
            None,
            None,
            None,
            now,
        )?;
        self.event(&repo.dir, "git-push", &format!("{}: failed: {e}", row.id));
        Ok(e)
    }

    /// Opens the pull request for the pushed branch `wardfs/<id>`; returns its URL. On failure
    /// the staged commit says the branch is on the remote, so that a retry is understood.
    fn open_pr(
        &self,
        t: &pr::Target,
        row: &StagedRow,
        target: &str,
        commit: Oid,
        now: i64,
    ) -> Result<String, PushError> {
        let db = self.zones.db();
        let files = db.staged_files(&row.id)?;
        match t.open(&self.settings, row, &format!("wardfs/{}", row.id), &files) {
            Ok(u) => Ok(u),
            Err(e) => {
                db.set_staged_state(
                    &row.id,
                    &row.state,
                    Some(&format!(
                        "pushed to {target}, but the pull request failed: {e}"
                    )),
                    &[],
                    Some(&commit.to_string()),
                    None,
                    Some(target),
                    None,
                    now,
                )?;
                Err(e.into())
            }
        }
    }

    /// Moves the repository's base to the pushed `commit` (its files, with their modes as the
    /// commit holds them, are clean now) and pins it in the mirror.
    fn advance_base_to(
        &self,
        mirror: &Repository,
        repo: &RepoRow,
        row: &StagedRow,
        commit: Oid,
    ) -> Result<(), PushError> {
        let db = self.zones.db();
        let files: Vec<(String, Option<String>, Option<u32>)> = db
            .staged_files(&row.id)?
            .into_iter()
            .map(|f| {
                let mode = f.oid.as_ref().and_then(|_| {
                    mirror
                        .find_commit(commit)
                        .ok()
                        .and_then(|c| c.tree().ok())
                        .and_then(|t| t.get_path(Path::new(&f.path)).ok())
                        .map(|e| e.filemode() as u32)
                });
                (f.path, f.oid, mode)
            })
            .collect();
        db.advance_base(repo.id, &commit.to_string(), &files)?;
        mirror
            .reference(&base_ref(&repo.dir), commit, true, "wardfs: pushed")
            .map_err(libgit2("pin base"))?;
        Ok(())
    }

    /// One push attempt: fetch the target, rebase when it moved, push with a lease.
    #[allow(clippy::too_many_arguments)]
    fn push_once(
        &self,
        mirror: &Repository,
        repo: &RepoRow,
        row: &StagedRow,
        target: &str,
        src: &str,
        pr: bool,
        progress: OnProgress<'_>,
    ) -> Result<(Oid, bool), PushError> {
        if mirror.is_shallow() {
            // libgit2 cannot build a pack on top of a shallow boundary (it walks the base's
            // missing parents): fetch the branch's history once, at the first push.
            let b = &repo.branch;
            remote::fetch(
                mirror,
                &repo.url,
                &[format!("+refs/heads/{b}:refs/wardfs/remote/{b}")],
                remote::UNSHALLOW,
                &self.settings,
                self.object_cap(),
                progress,
            )?;
        }
        let (refs, _) = remote::ls_remote(mirror, &repo.url, &self.settings)?;
        let remote_tip = refs.get(target).copied().unwrap_or(Oid::ZERO_SHA1);
        let staged = mirror
            .refname_to_id(src)
            .map_err(libgit2("find staged commit"))?;
        let base = Oid::from_str(&row.base).map_err(libgit2("base id"))?;
        let mut commit = staged;
        let mut rebased = false;
        if !pr && !remote_tip.is_zero() && remote_tip != base {
            let staged_commit = mirror.find_commit(staged).map_err(libgit2("read"))?;
            if staged_commit.parent_id(0).ok() == Some(remote_tip) {
                // Already rebased onto this tip (a re-reviewed commit).
            } else {
                let tracking = format!("refs/wardfs/remote/{}", row.branch);
                remote::fetch(
                    mirror,
                    &repo.url,
                    &[format!("+{target}:{tracking}")],
                    1,
                    &self.settings,
                    self.object_cap(),
                    progress,
                )?;
                let tip = mirror.refname_to_id(&tracking).map_err(libgit2("tip"))?;
                let (new_commit, overlap) = self.rebase(mirror, base, tip, staged_commit)?;
                mirror
                    .reference(src, new_commit, true, "wardfs: rebased")
                    .map_err(libgit2("keep rebased commit"))?;
                // The rebased commit is what will be reviewed and pushed from now on.
                let tip_tree = mirror
                    .find_commit(tip)
                    .and_then(|c| c.tree())
                    .map_err(libgit2("read tip"))?;
                let new_tree = mirror
                    .find_commit(new_commit)
                    .and_then(|c| c.tree())
                    .map_err(libgit2("read rebased"))?;
                let files =
                    diff::file_patches(mirror, &tip_tree, &new_tree, self.settings.max_diff_bytes)?;
                self.zones.db().rebase_staged(
                    &row.id,
                    &tip.to_string(),
                    &new_commit.to_string(),
                    &files,
                    self.zones.now_ms(),
                )?;
                if !overlap.is_empty() {
                    return Err(PushError::NeedsReview {
                        id: row.id.clone(),
                        paths: overlap,
                    });
                }
                commit = new_commit;
                rebased = true;
                // Push against the tip we merged with.
                return remote::push(
                    mirror,
                    &repo.url,
                    src,
                    target,
                    tip,
                    &self.settings,
                    progress,
                )
                .map(|_| (commit, rebased));
            }
            commit = staged;
        }
        remote::push(
            mirror,
            &repo.url,
            src,
            target,
            remote_tip,
            &self.settings,
            progress,
        )?;
        Ok((commit, rebased))
    }

    /// Three-way merges `staged` (built on `base`) onto `tip`; returns the new commit and the
    /// paths both sides changed. A conflict is an error naming the paths.
    fn rebase(
        &self,
        mirror: &Repository,
        base: Oid,
        tip: Oid,
        staged: git2::Commit<'_>,
    ) -> Result<(Oid, Vec<String>), PushError> {
        let read_tree = |o: Oid| {
            mirror
                .find_commit(o)
                .and_then(|c| c.tree())
                .map_err(libgit2("read tree"))
        };
        let base_tree = read_tree(base)?;
        let tip_tree = read_tree(tip)?;
        let staged_tree = staged.tree().map_err(libgit2("read tree"))?;
        let mut index = mirror
            .merge_trees(&base_tree, &tip_tree, &staged_tree, None)
            .map_err(libgit2("merge"))?;
        if index.has_conflicts() {
            let mut paths: Vec<String> = index
                .conflicts()
                .map_err(libgit2("merge"))?
                .flatten()
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .collect();
            paths.sort();
            paths.dedup();
            return Err(PushError::Conflict {
                reason: format!(
                    "the remote branch moved to {} and changed the same lines; nothing was pushed",
                    remote::short(tip)
                ),
                paths,
            });
        }
        let changed =
            |a: &git2::Tree<'_>, b: &git2::Tree<'_>| -> Result<HashSet<String>, Libgit2Error> {
                let d = mirror
                    .diff_tree_to_tree(Some(a), Some(b), None)
                    .map_err(libgit2("diff"))?;
                Ok(d.deltas()
                    .filter_map(|x| x.new_file().path().or_else(|| x.old_file().path()))
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect())
            };
        let upstream = changed(&base_tree, &tip_tree)?;
        let ours = changed(&base_tree, &staged_tree)?;
        let mut overlap: Vec<String> = upstream.intersection(&ours).cloned().collect();
        overlap.sort();
        let tree_oid = index
            .write_tree_to(mirror)
            .map_err(libgit2("write merged tree"))?;
        let tree = mirror.find_tree(tree_oid).map_err(libgit2("read"))?;
        let tip_commit = mirror.find_commit(tip).map_err(libgit2("read tip"))?;
        let committer = self.signature(self.zones.now_ms())?;
        let new = mirror
            .commit(
                None,
                &staged.author(),
                &committer,
                staged.message().unwrap_or(""),
                &tree,
                &[&tip_commit],
            )
            .map_err(libgit2("commit"))?;
        Ok((new, overlap))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: &str) -> StagedRow {
        StagedRow {
            id: "0123456789".into(),
            repo_id: 1,
            url: "https://example.invalid/o/r".into(),
            branch: "main".into(),
            message: "m".into(),
            base: "b".into(),
            commit: "c".into(),
            zone: WORKSPACE.into(),
            state: state.into(),
            reason: None,
            conflicts: vec!["old.rs".into()],
            pushed_commit: None,
            pushed_ref: None,
            url_pr: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn only_a_staged_rebased_or_rejected_commit_is_pushed() {
        for s in ["staged", "rebased", "rejected"] {
            assert_eq!(pushable(row(s)).unwrap().state, s);
        }
        for (s, rule) in [
            ("pushed", "it was pushed already"),
            ("discarded", "it was discarded"),
            (
                "conflicted",
                "stage the change again after resolving the conflict",
            ),
        ] {
            let e = pushable(row(s)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::Conflict);
            assert_eq!(
                e.to_string(),
                format!("staged commit 0123456789 is {s}: {rule}")
            );
        }
    }

    #[test]
    fn a_push_goes_to_the_branch_or_with_pr_to_its_own_branch() {
        assert_eq!(target_ref(&row("staged"), false), "refs/heads/main");
        assert_eq!(
            target_ref(&row("staged"), true),
            "refs/heads/wardfs/0123456789"
        );
    }

    #[test]
    fn a_failed_push_leaves_the_state_its_error_says() {
        let r = row("rejected");
        let conflict = PushError::Conflict {
            reason: "moved".into(),
            paths: vec!["a.rs".into()],
        };
        assert_eq!(
            failed_state(&conflict, &r),
            ("conflicted", vec!["a.rs".to_string()])
        );
        let rejected = PushError::Rejected {
            refname: "refs/heads/main".into(),
            reason: "hook".into(),
        };
        assert_eq!(failed_state(&rejected, &r), ("rejected", vec![]));
        let review = PushError::NeedsReview {
            id: r.id.clone(),
            paths: vec!["a.rs".into()],
        };
        assert_eq!(failed_state(&review, &row("staged")), ("rebased", vec![]));
        let moved = PushError::RemoteMoved {
            branch: "main".into(),
            expected: "a".into(),
            found: "b".into(),
        };
        assert_eq!(
            failed_state(&moved, &r),
            ("rejected", vec!["old.rs".to_string()])
        );
    }
}

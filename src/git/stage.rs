//! `stage`: build a reviewable commit in the mirror's object store from the agent's changes (the
//! workspace is never touched), keep it at `refs/wardfs/staged/<id>` with per-file diffs; `list`
//! and `show` read staged commits back. Each has its error type: [`StageError`], [`ShowError`],
//! [`ListError`]. A fork's changes stage the same way, read from the fork (`fork`); the commit
//! records the zone it was read from and each file's writers.

use super::place::Place;
use super::*;
use crate::core::text::count;

/// `stage`'s request: what to stage and how to describe it.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StageRequest {
    /// The repository's workspace directory (or a path in it). May be left out when only one
    /// repository is pulled; otherwise INVALID_ARGUMENT.
    #[serde(default)]
    pub repo: Option<String>,
    /// Files or directories to stage: virtual paths (`/workspace/demo/src`) or paths inside the
    /// repository (`src/main.rs`). Each must hold at least one change (else NO_MATCH). Default:
    /// every change not already in a staged commit built on the same base.
    #[serde(default)]
    pub files: Vec<String>,
    /// The commit message: first line a summary (the pull request's title with `pr`), then
    /// optionally a blank line and a body. Must not be blank.
    #[schemars(length(min = 1))]
    pub message: String,
    /// The branch it will be pushed to. Default: the pulled branch.
    #[serde(default)]
    pub branch: Option<String>,
    /// Stage the changes a fork holds (its name, e.g. `a` for `/forks/a`) instead of the
    /// workspace's: the fork's files of the repository, on the same base. Default: the fork
    /// `repo` or the first virtual path in `files` lies in, else the workspace. NOT_FOUND when
    /// no such fork exists.
    #[serde(default)]
    pub fork: Option<String>,
}

/// A staged commit as the API and CLI show it: a commit built in wardfs's mirror of the remote
/// (never in the workspace or anyone's checkout), kept for review. Optional fields are left out
/// when empty.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StagedCommit {
    /// Its id: the first 10 hex digits of the commit as first staged (it stays the same after a
    /// rebase).
    pub id: String,
    /// The repository's directory in the zone its files were read from (`/workspace/demo`, or
    /// `/forks/a/demo` for a fork's changes).
    pub repo: String,
    /// The zone its files were read from: `workspace`, or `forks/NAME` for the changes of the
    /// fork NAME.
    #[serde(default = "workspace_zone")]
    pub zone: String,
    /// The remote URL.
    pub url: String,
    /// The branch it is pushed to (with `pr`: the pull request's base).
    pub branch: String,
    /// The commit message.
    pub message: String,
    /// The parent commit: the pulled base, or after a rebase the remote tip it was rebased onto.
    pub base: String,
    /// The commit itself (changes when rebased).
    pub commit: String,
    /// Where it stands. `staged`: waiting for review. `rebased`: a push found the remote branch
    /// moved and rebased the commit onto it, touching files the remote also changed; review it
    /// again (show) before pushing again. `pushed`: on the remote (final). `conflicted`: the
    /// rebase hit conflicting lines (see `conflicts`); nothing was pushed and it cannot be
    /// pushed: discard it, pull, merge, resolve and stage again. `rejected`: the remote refused
    /// the push (see `reason`); it may be pushed again. `discarded`: dropped (final).
    pub state: String,
    /// Why the last push failed (left out once pushed or discarded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// State `conflicted`: the conflicting files, as paths inside the repository (`src/lib.rs`,
    /// not virtual paths).
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub conflicts: Vec<String>,
    /// The commit that reached the remote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_commit: Option<String>,
    /// The remote ref it was pushed to (`refs/heads/main`, or `refs/heads/wardfs/<id>` with
    /// `pr`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_ref: Option<String>,
    /// The pull request opened for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pr_url: Option<String>,
    /// When it was staged (milliseconds since the Unix epoch).
    pub created_at: i64,
    /// When its state last changed (milliseconds since the Unix epoch).
    pub updated_at: i64,
    /// Lines added, all files.
    pub additions: u64,
    /// Lines deleted, all files.
    pub deletions: u64,
    /// Its files, sorted by path; with `diff` and `hunks` only in show.
    pub files: Vec<StagedFile>,
    /// Only in stage's answer: paths beneath what was staged that the commit leaves out, and
    /// why: a name that is not UTF-8 (escaped as git quotes it, as in status), a directory that
    /// could not be read. The first 1,000 are named.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<PathNote>,
    /// Only in stage's answer: the number of such paths (`skipped` names the first 1,000).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub skipped_total: usize,
}

fn workspace_zone() -> String {
    WORKSPACE.into()
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One file of a staged commit.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StagedFile {
    /// The virtual path.
    pub path: String,
    /// What the commit does to it: `create`, `update` or `delete` (a rename is a delete and a
    /// create).
    pub operation: String,
    /// Lines added (0 for binary and oversized files).
    pub additions: u64,
    /// Lines deleted (0 for binary and oversized files).
    pub deletions: u64,
    /// Binary: no patch is shown.
    pub binary: bool,
    /// Over `git.max_diff_bytes` (1 MiB by default): no patch is shown.
    pub oversized: bool,
    /// The git-format unified patch (what GitHub will show). Only in POST
    /// /v1/git/staged/show, and absent for binary and oversized files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// The patch's hunks with numbered, typed lines. Present exactly when `diff` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hunks: Option<Vec<diff::Hunk>>,
    /// Who changed it, as the journal says, newest first (at most 8): in the zone the commit
    /// was read from, or for a file a fork did not change itself, in the zone it was forked
    /// from before the fork was made. Empty when the journal names nobody (a change made beside
    /// wardfs with no watcher, or journal rows pruned).
    #[serde(default)]
    pub writers: Vec<Writer>,
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

/// What a stage takes, decided before the mirror is touched.
struct StagePlan<'r> {
    /// The commit message, trimmed.
    message: &'r str,
    /// No files were named: every change not already in a staged commit on the same base.
    every: bool,
    place: Place,
    repo: RepoRow,
    branch: String,
    /// The repository's status in `place` (a fork's says what it left out).
    status: RepoStatus,
    /// Every change, as (repository path, state).
    changes: Vec<(String, String)>,
    selection: Selection,
}

/// The changes a stage chose, as (repository path, state), and the repository paths it was
/// asked for ("": all of it), for what is left out beneath them.
#[derive(Debug, Default, PartialEq)]
struct Selection {
    chosen: Vec<(String, String)>,
    roots: Vec<String>,
}

impl Selection {
    /// Every change, for a stage that names no files.
    fn all(changes: &[(String, String)]) -> Selection {
        Selection {
            chosen: changes.to_vec(),
            roots: vec![String::new()],
        }
    }

    /// Adds the changes at or beneath the repository path `rel` (each once); false when there
    /// are none.
    fn add(&mut self, changes: &[(String, String)], rel: &str) -> bool {
        let hits: Vec<_> = changes.iter().filter(|(p, _)| under(p, rel)).collect();
        self.roots.push(rel.to_string());
        if hits.is_empty() {
            return false;
        }
        for h in hits {
            if !self.chosen.contains(h) {
                self.chosen.push(h.clone());
            }
        }
        true
    }

    /// Refuses chosen files a pull found changed upstream too (CONFLICT naming them, as
    /// virtual paths of the repository at `dir` in `place`).
    fn refuse_conflicts(&self, place: &Place, dir: &str) -> Result<(), StageError> {
        let conflicted: Vec<String> = self
            .chosen
            .iter()
            .filter(|(_, s)| s == "conflict")
            .map(|(p, _)| place.vfile(dir, p))
            .collect();
        if !conflicted.is_empty() {
            return Err(StageError::Conflict {
                reason: "these files changed upstream too (see the last pull); merge the upstream \
                         change into them, then `wardfs git resolve PATH`"
                    .into(),
                paths: conflicted,
            });
        }
        Ok(())
    }
}

/// The tree a stage built in the mirror, on the base it was built on.
struct StageTree<'m> {
    base: git2::Commit<'m>,
    base_tree: git2::Tree<'m>,
    tree: git2::Tree<'m>,
    /// The writers of each file the tree takes, by repository path.
    writers: HashMap<String, Vec<Writer>>,
    /// What was left out beneath the paths asked for (the first 1,000), and how many.
    skipped: Vec<PathNote>,
    skipped_total: usize,
}

/// Why a stage found nothing to take from the repository at `vdir` (virtual path): no
/// changes, or all of them staged already; names the first path left out, if any.
fn nothing_to_stage(
    vdir: &str,
    changes: &[(String, String)],
    skipped: &[PathNote],
    skipped_total: usize,
) -> StageError {
    let mut why = if changes.is_empty() {
        format!("nothing to stage: {vdir} has no changes")
    } else {
        "nothing to stage: every change is already in a staged commit (`wardfs staged list`)".into()
    };
    if let Some(first) = skipped.first() {
        why.push_str(&format!(
            "; {} left out, e.g. {}: {} (`wardfs git status` names them)",
            count(skipped_total as u64, "path"),
            first.path,
            first.reason
        ));
    }
    StageError::Nothing(why)
}

/// A staged commit's id: the first 10 hex digits of the commit as first staged.
fn staged_id(commit: Oid) -> String {
    commit.to_string()[..10].to_string()
}

impl Git {
    /// Returns the repository a stage is for: the one named (`repo`), the one holding the first
    /// file named by its virtual path, the only one pulled, or the only one with changes; with
    /// changes in several, asks for `repo` and names them.
    fn repo_to_stage(&self, req: &StageRequest, place: &Place) -> Result<RepoRow, StageError> {
        if req.repo.is_some() {
            return Ok(self.repo_for(req.repo.as_deref())?);
        }
        if let Some(f) = req.files.iter().find(|f| f.starts_with('/')) {
            return Ok(self.repo_for(Some(f))?);
        }
        let repos = self.zones.db().repos().map_err(CommonError::from)?;
        if repos.len() <= 1 {
            return Ok(self.repo_for(None)?);
        }
        let mut changed = Vec::new();
        for r in repos {
            if self.has_unstaged(&r, place)? {
                changed.push(r);
            }
        }
        match changed.len() {
            1 => Ok(changed.remove(0)),
            0 => Err(StageError::Nothing(
                "none of the pulled repositories has changes to stage".into(),
            )),
            _ => Err(CommonError::WhichRepo(format!(
                "several pulled repositories have changes ({}); name the one to stage with \
                 --repo DIR (`repo` in the API)",
                changed
                    .iter()
                    .map(|r| vdir(&r.dir))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .into()),
        }
    }

    /// Returns whether `repo` as `place` holds it has a change that no staged commit holds yet.
    fn has_unstaged(&self, repo: &RepoRow, place: &Place) -> Result<bool, StageError> {
        let st = self.changes_in(place, repo, false)?;
        if st.changes.is_empty() {
            return Ok(false);
        }
        let staged: HashSet<(String, Option<String>)> = self
            .zones
            .db()
            .staged_blobs(repo.id, &repo.base)?
            .into_iter()
            .collect();
        for c in &st.changes {
            let rel = c.path[place.vdir(&repo.dir).len()..].trim_start_matches('/');
            let now = self.local_blob(&c.path)?.map(|(oid, _)| oid.to_string());
            if !staged.contains(&(rel.to_string(), now)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Builds a commit of the chosen changes on the repo's base, in the mirror only: plans what
    /// to take, then under the mirror's lock builds the tree, commits it and records it.
    pub fn stage(&self, req: &StageRequest) -> Result<StagedCommit, StageError> {
        let plan = self.plan_stage(req)?;
        let mirror_path = PathBuf::from(&plan.repo.mirror);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let built = self.build_stage_tree(&mirror, &plan)?;
        let (commit, now) = self.commit_staged(&mirror, &plan, &built)?;
        self.record_staged(&mirror, plan, built, commit, now)
    }

    /// Checks the request and decides what a stage takes: the zone, the repository, the branch
    /// and the chosen changes (none of them in conflict). Touches no mirror.
    fn plan_stage<'r>(&self, req: &'r StageRequest) -> Result<StagePlan<'r>, StageError> {
        let message = req.message.trim();
        if message.is_empty() {
            return Err(invalid("message", "must not be empty; say what the change does").into());
        }
        let named = req.repo.as_deref().or_else(|| {
            req.files
                .iter()
                .find(|f| f.starts_with('/'))
                .map(String::as_str)
        });
        let place = self.place(req.fork.as_deref(), named)?;
        let repo = self.repo_to_stage(req, &place)?;
        let branch = req.branch.clone().unwrap_or_else(|| repo.branch.clone());
        check_branch(&branch)?;
        let status = self.changes_in(&place, &repo, false)?;
        let changes: Vec<(String, String)> = status
            .changes
            .iter()
            .map(|c| {
                let rel = c.path[place.vdir(&repo.dir).len()..].trim_start_matches('/');
                (rel.to_string(), c.state.clone())
            })
            .collect();
        let selection = self.select(&req.files, &place, &repo, &changes)?;
        selection.refuse_conflicts(&place, &repo.dir)?;
        Ok(StagePlan {
            message,
            every: req.files.is_empty(),
            place,
            repo,
            branch,
            status,
            changes,
            selection,
        })
    }

    /// The changes `files` names (every change when it names none): each must hold at least
    /// one (else NO_MATCH).
    fn select(
        &self,
        files: &[String],
        place: &Place,
        repo: &RepoRow,
        changes: &[(String, String)],
    ) -> Result<Selection, StageError> {
        if files.is_empty() {
            return Ok(Selection::all(changes));
        }
        let mut selection = Selection::default();
        for f in files {
            let rel = self.file_to_stage(place, repo, f)?;
            if !selection.add(changes, &rel) {
                return Err(StageError::Nothing(format!(
                    "{} has no changes to stage",
                    place.vfile(&repo.dir, &rel)
                )));
            }
        }
        Ok(selection)
    }

    /// The repository path of one of `files`: a virtual path in `place` inside the repository,
    /// or a path inside the repository.
    fn file_to_stage(&self, place: &Place, repo: &RepoRow, f: &str) -> Result<String, StageError> {
        if !f.starts_with('/') {
            return Ok(repo_path("files", f)?);
        }
        let r = self.place_rel(place, "files", f)?;
        if !under(&r, &repo.dir) {
            return Err(
                invalid("files", format!("{f} is not in {}", place.vdir(&repo.dir))).into(),
            );
        }
        Ok(if repo.dir.is_empty() {
            r
        } else {
            r[repo.dir.len()..].trim_start_matches('/').to_string()
        })
    }

    /// Builds the plan's tree on the base in `mirror` (the caller holds its lock): every chosen
    /// change not already staged (when no files were named), with its writers. NO_MATCH when
    /// that leaves nothing, or a tree equal to the base.
    fn build_stage_tree<'m>(
        &self,
        mirror: &'m Repository,
        plan: &StagePlan<'_>,
    ) -> Result<StageTree<'m>, StageError> {
        let repo = &plan.repo;
        let base_oid = Oid::from_str(&repo.base).map_err(libgit2("base id"))?;
        let base = mirror.find_commit(base_oid).map_err(libgit2("read base"))?;
        let base_tree = base.tree().map_err(libgit2("read base tree"))?;
        let (mut update, writers) = self.tree_update(mirror, plan)?;
        let (skipped, skipped_total) = self.left_out_of_stage(plan);
        if writers.is_empty() {
            let dir = plan.place.vdir(&repo.dir);
            return Err(nothing_to_stage(
                &dir,
                &plan.changes,
                &skipped,
                skipped_total,
            ));
        }
        let tree_oid = update
            .create_updated(mirror, &base_tree)
            .map_err(libgit2("build tree"))?;
        if tree_oid == base_tree.id() {
            return Err(StageError::Nothing(
                "nothing to stage: the files equal their base".into(),
            ));
        }
        let tree = mirror.find_tree(tree_oid).map_err(libgit2("read tree"))?;
        Ok(StageTree {
            base,
            base_tree,
            tree,
            writers,
            skipped,
            skipped_total,
        })
    }

    /// The tree update of the plan's chosen changes, with the writers of each file it takes:
    /// their blobs stored in `mirror`, leaving out (when no files were named) a change already
    /// in a staged commit on the same base.
    fn tree_update(
        &self,
        mirror: &Repository,
        plan: &StagePlan<'_>,
    ) -> Result<(git2::build::TreeUpdateBuilder, HashMap<String, Vec<Writer>>), StageError> {
        let repo = &plan.repo;
        let already: HashSet<(String, Option<String>)> = if plan.every {
            self.zones
                .db()
                .staged_blobs(repo.id, &repo.base)?
                .into_iter()
                .collect()
        } else {
            HashSet::new()
        };
        let mut update = git2::build::TreeUpdateBuilder::new();
        let mut writers: HashMap<String, Vec<Writer>> = HashMap::new();
        for (path, _) in &plan.selection.chosen {
            match self.store_local(mirror, &plan.place.vfile(&repo.dir, path))? {
                Some((oid, mode)) => {
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
            writers.insert(path.clone(), self.writers_of(&plan.place, repo, path)?);
        }
        Ok((update, writers))
    }

    /// What a stage leaves out beneath the paths it was asked for: a fork's status says, the
    /// workspace's is kept per repository.
    fn left_out_of_stage(&self, plan: &StagePlan<'_>) -> (Vec<PathNote>, usize) {
        if plan.place.is_fork() {
            (plan.status.skipped.clone(), plan.status.skipped_total)
        } else {
            let roots: Vec<&str> = plan.selection.roots.iter().map(String::as_str).collect();
            self.left_out(&plan.repo, &roots)
        }
    }

    /// Commits the built tree on the base with the plan's message and keeps it at its staged
    /// ref; returns the commit and the time it was made.
    fn commit_staged(
        &self,
        mirror: &Repository,
        plan: &StagePlan<'_>,
        built: &StageTree<'_>,
    ) -> Result<(Oid, i64), StageError> {
        let now = self.zones.now_ms();
        let sig = self.signature(now)?;
        let commit = mirror
            .commit(None, &sig, &sig, plan.message, &built.tree, &[&built.base])
            .map_err(libgit2("commit"))?;
        let id = staged_id(commit);
        mirror
            .reference(&staged_ref(&id), commit, true, "wardfs: staged")
            .map_err(libgit2("keep staged commit"))?;
        Ok((commit, now))
    }

    /// Records the staged commit with its files' patches and writers (CONFLICT when an
    /// identical commit is staged already), journals it and returns it as the API shows it.
    fn record_staged(
        &self,
        mirror: &Repository,
        plan: StagePlan<'_>,
        built: StageTree<'_>,
        commit: Oid,
        now: i64,
    ) -> Result<StagedCommit, StageError> {
        let StageTree {
            base_tree,
            tree,
            mut writers,
            skipped,
            skipped_total,
            ..
        } = built;
        let id = staged_id(commit);
        let mut files =
            diff::file_patches(mirror, &base_tree, &tree, self.settings.max_diff_bytes)?;
        for f in &mut files {
            f.writers = writers.remove(&f.path).unwrap_or_default();
        }
        let row = StagedRow {
            id: id.clone(),
            repo_id: plan.repo.id,
            url: plan.repo.url.clone(),
            branch: plan.branch,
            message: plan.message.to_string(),
            base: plan.repo.base.clone(),
            commit: commit.to_string(),
            zone: plan.place.name().into(),
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
        self.event_in(
            plan.place.id,
            &plan.repo.dir,
            "git-stage",
            &format!(
                "{id}: {}: {}",
                count(files.len() as u64, "file"),
                plan.message
            ),
        );
        let mut staged = self.view(row, false)?;
        staged.skipped = skipped;
        staged.skipped_total = skipped_total;
        Ok(staged)
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
        let zone = r.zone.as_str();
        let files: Vec<StagedFile> = self
            .zones
            .db()
            .staged_files(&r.id)?
            .into_iter()
            .map(|f| {
                let dir = repo.as_ref().map(|x| x.dir.as_str()).unwrap_or("");
                StagedFile {
                    path: vfile_in(zone, dir, &f.path),
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
                    writers: f.writers,
                }
            })
            .collect();
        Ok(StagedCommit {
            id: r.id,
            repo: repo.map(|x| vdir_in(zone, &x.dir)).unwrap_or_default(),
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
                .map(|p| vfile_in(zone, repo_dir.as_deref().unwrap_or(""), p))
                .collect(),
            zone: r.zone.clone(),
            pushed_commit: r.pushed_commit,
            pushed_ref: r.pushed_ref,
            pr_url: r.url_pr,
            created_at: r.created_at,
            updated_at: r.updated_at,
            additions: files.iter().map(|f| f.additions).sum(),
            deletions: files.iter().map(|f| f.deletions).sum(),
            files,
            skipped: Vec::new(),
            skipped_total: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(p, s)| (p.to_string(), s.to_string()))
            .collect()
    }

    #[test]
    fn a_selection_takes_each_change_beneath_a_path_once_and_keeps_every_path_asked_for() {
        let all = changes(&[
            ("src/a.rs", "modified"),
            ("src/b.rs", "created"),
            ("srcx.rs", "deleted"),
            ("README", "modified"),
        ]);
        let mut s = Selection::default();
        assert!(s.add(&all, "src"));
        assert!(s.add(&all, "src/a.rs"));
        assert!(s.add(&all, "README"));
        assert_eq!(
            s.chosen,
            changes(&[
                ("src/a.rs", "modified"),
                ("src/b.rs", "created"),
                ("README", "modified")
            ])
        );
        assert!(!s.add(&all, "docs"));
        assert_eq!(s.roots, ["src", "src/a.rs", "README", "docs"]);
        let every = Selection::all(&all);
        assert_eq!(every.chosen, all);
        assert_eq!(every.roots, [""]);
    }

    #[test]
    fn a_selection_with_a_conflicted_file_is_refused_naming_only_those() {
        let place = Place::workspace();
        let ok = Selection::all(&changes(&[("a", "modified"), ("b", "created")]));
        assert!(ok.refuse_conflicts(&place, "demo").is_ok());
        let bad = Selection::all(&changes(&[
            ("a", "conflict"),
            ("b", "modified"),
            ("c/d", "conflict"),
        ]));
        match bad.refuse_conflicts(&place, "demo") {
            Err(StageError::Conflict { reason, paths }) => {
                assert_eq!(paths, ["/workspace/demo/a", "/workspace/demo/c/d"]);
                assert!(reason.contains("wardfs git resolve PATH"), "{reason}");
            }
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn nothing_to_stage_says_why_and_names_the_first_path_left_out() {
        let none = nothing_to_stage("/workspace/demo", &[], &[], 0);
        assert_eq!(
            none.to_string(),
            "nothing to stage: /workspace/demo has no changes"
        );
        assert_eq!(none.code(), ErrorCode::NoMatch);
        let note = PathNote {
            path: "/workspace/demo/\\377".into(),
            reason: "not UTF-8".into(),
        };
        let staged = nothing_to_stage(
            "/workspace/demo",
            &changes(&[("a", "modified")]),
            &[note],
            3,
        );
        assert_eq!(
            staged.to_string(),
            "nothing to stage: every change is already in a staged commit (`wardfs staged \
             list`); 3 paths left out, e.g. /workspace/demo/\\377: not UTF-8 (`wardfs git \
             status` names them)"
        );
    }

    #[test]
    fn a_staged_id_is_the_first_ten_hex_digits() {
        let oid = Oid::from_str("0123456789abcdef0123456789abcdef01234567").unwrap();
        assert_eq!(staged_id(oid), "0123456789");
    }
}

//! `pull`: fetch a branch into the repository's mirror and bring its files into a workspace
//! directory. Every tree entry's name is validated first (a hostile tree fails the pull before
//! anything is written); each file is replaced as itself, compare-and-swapped against what the
//! pull saw, so a write acknowledged meanwhile becomes a conflict with both sides kept; a path
//! the pull cannot read or replace (too big, an object that is not what its entry says, a path
//! the zone refuses) is skipped and named, not the whole pull, and the answer names the first
//! [`MAX_SKIPPED_SHOWN`] and counts the rest. libgit2 fetches and reads within a memory cap
//! ([`memory`]). [`PullError`] says why a pull failed.

use super::*;
use crate::core::text::count;
use crate::core::NotLocal;

/// `pull`'s request: what to pull and where.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// The remote: a URL (`https://`, `http://`, `git://`, `ssh://`, `user@host:path`), a local
    /// path to a repository, or `owner/repo` (shorthand for `<git.github_url>/owner/repo.git`).
    /// An https URL must not carry a password (INVALID_ARGUMENT): put the token in the
    /// environment variable named by `git.token_env`.
    #[schemars(length(min = 1))]
    pub remote: String,
    /// The branch to pull. Default: the remote's default branch (else `main` or `master`).
    #[serde(default)]
    pub branch: Option<String>,
    /// Only these files or directories of the repository (repository-relative, e.g. `src` or
    /// `docs/guide.md`; no `.` or `..`). Default: everything. A path missing upstream is
    /// NOT_FOUND.
    #[serde(default)]
    pub paths: Vec<String>,
    /// The workspace directory to pull into (a virtual path in /workspace). Default:
    /// `/workspace/<repository name>` (the URL's last segment without `.git`). A directory
    /// holds the pull of one remote only.
    #[serde(default)]
    pub into: Option<String>,
    /// Stream progress as NDJSON (`application/x-ndjson`) instead of answering with one JSON
    /// object (API only).
    #[serde(default)]
    pub progress: bool,
}

/// One path a pull did not write, or a discard did not revert, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct PathNote {
    /// The virtual path.
    pub path: String,
    /// Why, for people (e.g. `changed locally and upstream`).
    pub reason: String,
}

/// A file changed both upstream and locally, left as it is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct PullConflict {
    /// The virtual path of the local file.
    pub path: String,
    /// What happened on each side.
    pub reason: String,
    /// Where the upstream version was saved (under /cache/.wardfs-upstream/), to read and merge
    /// it. Absent when upstream deleted the file or /cache is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
}

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("{url} has no branch {branch:?}")]
    NoBranch { url: String, branch: String },
    /// The directory holds a pull of another remote.
    #[error("{dir} already holds a pull of {held}; pull {url} into another directory: {dir}")]
    Occupied {
        dir: String,
        held: String,
        url: String,
    },
    /// An entry of the fetched tree that must not be written (`..`, `.git`, a path leaving the
    /// pull directory): the whole pull is refused before anything is written.
    #[error("{url} {branch}: the tree holds {entry:?}, {rule}; nothing was written")]
    UnsafeTree {
        url: String,
        branch: String,
        entry: String,
        rule: String,
    },
}

lift_common!(PullError);

impl GitFailure for PullError {
    fn code(&self) -> ErrorCode {
        match self {
            PullError::Common(e) => e.code(),
            PullError::Remote(e) => e.code(),
            PullError::NoBranch { .. } => ErrorCode::NotFound,
            PullError::Occupied { .. } => ErrorCode::Conflict,
            PullError::UnsafeTree { .. } => ErrorCode::Rejected,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            PullError::Common(e) => e.path(),
            _ => None,
        }
    }
}

/// The most entries a pull's answer names in `skipped` (the rest are only counted).
pub const MAX_SKIPPED_SHOWN: usize = 1000;

/// What a pull did.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PullResult {
    /// The workspace directory pulled into (a virtual path). Pass it as `repo` to status and
    /// stage.
    pub repo: String,
    /// The remote URL (`owner/repo` expanded).
    pub url: String,
    /// The branch pulled.
    pub branch: String,
    /// The commit pulled: the new base of the directory's files.
    pub commit: String,
    /// The base before this pull; null on the first pull into the directory.
    pub previous: Option<String>,
    /// Files written (new, or changed upstream and untouched locally).
    pub written: usize,
    /// Files deleted because they are gone upstream (or no longer chosen by `paths`) and were
    /// untouched locally.
    pub deleted: usize,
    /// Files already up to date, or unchanged upstream (a local change is kept).
    pub unchanged: usize,
    /// Files changed both upstream and locally: left exactly as they are, reported here and as
    /// `conflict` by status. Stage refuses them (CONFLICT) until the agent has merged the
    /// upstream change into the file and called POST /v1/git/resolve. Each conflict names where
    /// the upstream version was saved (`upstream`, in /cache) so that it can be read and merged.
    pub conflicts: Vec<PullConflict>,
    /// Entries not written: submodules, symlinks pointing out of the repository, files over
    /// `limits.git_blob_bytes`, entries whose object is not what their mode says (a tree where
    /// a file or link should be), entries the zone refused. The first 1,000 are named here.
    pub skipped: Vec<PathNote>,
    /// Number of entries not written (all of them; `skipped` names the first 1,000).
    #[serde(default)]
    pub skipped_total: usize,
    /// How long the pull took, in milliseconds.
    pub duration_ms: u64,
}

/// What a pull is asked to do, checked: the expanded URL, the workspace-relative directory, the
/// repository paths chosen, and the directory's last pull.
struct Target {
    url: String,
    dir: String,
    paths: Vec<String>,
    previous: Option<RepoRow>,
}

/// The entries a pull did not write: the first [`MAX_SKIPPED_SHOWN`] named, all counted (a tree
/// of a million submodules must not make a million-row answer).
#[derive(Default)]
struct Skipped {
    shown: Vec<PathNote>,
    total: usize,
}

impl Skipped {
    fn push(&mut self, path: String, reason: String) {
        self.total += 1;
        if self.shown.len() < MAX_SKIPPED_SHOWN {
            self.shown.push(PathNote { path, reason });
        }
    }
}

/// What the pull takes from the fetched tree.
#[derive(Default)]
struct Upstream {
    /// The files chosen: repository path → (blob id, git mode).
    files: BTreeMap<String, (Oid, u32)>,
    /// Directory entries whose object could not be read as a tree (skipped and named): what
    /// was pulled beneath them before is left as it is, not deleted.
    unread: Vec<String>,
}

impl Upstream {
    /// Whether the pull leaves `path` alone because a directory above it could not be read.
    fn unread_above(&self, path: &str) -> bool {
        self.unread.iter().any(|d| under(path, d))
    }
}

/// An entry of the fetched tree that must not be written: (its path, the rule it breaks).
type UnsafeEntry = (String, String);

/// What the last pull into the directory left: its rows by path, and the (path, blob) pairs
/// pushed from it since (upstream's business now, not conflicts).
struct Before {
    rows: HashMap<String, FileRow>,
    pushed: HashSet<(String, String)>,
}

/// What a pull did so far: the rows to record and the counts and notes to answer with.
#[derive(Default)]
struct Tally {
    rows: Vec<FileRow>,
    conflicts: Vec<PullConflict>,
    skipped: Skipped,
    written: usize,
    deleted: usize,
    unchanged: usize,
    bytes_written: usize,
}

impl Tally {
    fn clean(&mut self, path: &str, (oid, mode): (Oid, u32)) {
        self.rows.push(FileRow {
            path: path.into(),
            base_oid: Some(oid.to_string()),
            base_mode: Some(mode),
            state: "clean".into(),
            upstream_oid: None,
        });
    }
}

impl Git {
    /// Pulls `req.branch` of `req.remote` into the workspace.
    pub fn pull(
        &self,
        req: &PullRequest,
        progress: OnProgress<'_>,
    ) -> Result<PullResult, PullError> {
        let started = Instant::now();
        let target = self.pull_target(req)?;
        let mirror_path = self.mirror_path(&target.url);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        // Everything libgit2 reads for this pull, fetch and files, is capped in memory.
        let _cap = memory::Cap::enter(self.object_cap());
        let mirror = self.open_mirror(&mirror_path)?;
        let branch = self.branch_to_pull(&mirror, &target.url, req.branch.as_deref())?;
        let tip = self.fetch_branch(&mirror, &target.url, &branch, progress)?;
        let mut tally = Tally::default();
        let upstream = upstream_of(&mirror, tip, &target, &branch, &mut tally.skipped)?;
        let links = tree_links(&mirror, &upstream)?;
        let journal_mark = self.zones.db().journal_max_id()?;
        let before = self.before(target.previous.as_ref())?;
        let dir = &target.dir;
        // Files gone upstream (or no longer chosen) go first: a link or file upstream turned into
        // a directory must be out of the way before anything is written beneath its name.
        // A path that cannot be looked at or replaced (an I/O error, an immutable file, an
        // object that is not what its entry says) is skipped and reported, keeping
        // what status knew of it; the rest of the pull lands and is recorded. Only a broken
        // mirror or state database stops a pull half-way, and then each write already made is in
        // the journal (and reached the mount) as it happened, and the journal says where the
        // pull stopped.
        self.remove_gone(dir, &upstream, &before, &mut tally);
        let applied = self
            .write_upstream(
                &mirror, dir, &upstream, &links, &before, &mut tally, progress,
            )
            .and_then(|()| {
                mirror
                    .reference(&base_ref(dir), tip, true, "wardfs: pulled")
                    .map(|_| ())
                    .map_err(libgit2("pin base"))
            });
        if let Err(e) = applied {
            self.event(
                dir,
                "git-pull",
                &format!(
                    "{} {branch} at {} stopped half-way: {} written, {} deleted before {e}; the \
                     next pull takes up from there",
                    target.url,
                    remote::short(tip),
                    tally.written,
                    tally.deleted,
                ),
            );
            return Err(e.into());
        }
        self.record(
            &target,
            &branch,
            tip,
            &mirror_path,
            journal_mark,
            &tally.rows,
        )?;
        self.event(
            dir,
            "git-pull",
            &format!(
                "{} {branch} at {}: {} written, {} deleted, {}",
                target.url,
                remote::short(tip),
                tally.written,
                tally.deleted,
                count(tally.conflicts.len() as u64, "conflict")
            ),
        );
        Ok(PullResult {
            repo: vdir(dir),
            url: target.url,
            branch,
            commit: tip.to_string(),
            previous: target.previous.map(|p| p.base),
            written: tally.written,
            deleted: tally.deleted,
            unchanged: tally.unchanged,
            conflicts: tally.conflicts,
            skipped: tally.skipped.shown,
            skipped_total: tally.skipped.total,
            duration_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Checks the request: the remote, the branch's name, the directory (in an available
    /// workspace, holding no other remote's pull) and the paths.
    fn pull_target(&self, req: &PullRequest) -> Result<Target, PullError> {
        let url = self.expand_remote(&req.remote)?;
        if let Some(b) = &req.branch {
            check_branch(b)?;
        }
        let into = match &req.into {
            Some(v) => v.clone(),
            None => format!("/workspace/{}", repo_name(&url)),
        };
        let dir = self.workspace_dir("into", &into)?;
        if let Err(NotLocal::Disabled(reason)) = self.zones.local(ZoneId::Workspace) {
            return Err(FsError::ZoneUnavailable {
                path: into,
                zone: "workspace".into(),
                reason: reason.to_string(),
            }
            .into());
        }
        let paths: Vec<String> = req
            .paths
            .iter()
            .map(|p| repo_path("paths", p))
            .collect::<Result<_, InvalidArg>>()?;
        let previous = self.zones.db().repo_by_dir(&dir)?;
        if let Some(prev) = &previous {
            if prev.url != url {
                return Err(PullError::Occupied {
                    dir: vdir(&dir),
                    held: prev.url.clone(),
                    url,
                });
            }
        }
        Ok(Target {
            url,
            dir,
            paths,
            previous,
        })
    }

    /// The branch asked for, else the remote's default branch, else `main` or `master`.
    fn branch_to_pull(
        &self,
        mirror: &Repository,
        url: &str,
        asked: Option<&str>,
    ) -> Result<String, PullError> {
        if let Some(b) = asked {
            return Ok(b.to_string());
        }
        let (refs, default) = remote::ls_remote(mirror, url, &self.settings)?;
        default
            .or_else(|| {
                ["main", "master"]
                    .into_iter()
                    .find(|b| refs.contains_key(&format!("refs/heads/{b}")))
                    .map(String::from)
            })
            .ok_or_else(|| {
                invalid("branch", format!("{url} has no default branch; name one")).into()
            })
    }

    /// Fetches `branch` of `url` into the mirror (depth 1) and returns its tip.
    fn fetch_branch(
        &self,
        mirror: &Repository,
        url: &str,
        branch: &str,
        progress: OnProgress<'_>,
    ) -> Result<Oid, PullError> {
        let tracking = format!("refs/wardfs/remote/{branch}");
        let no_branch = || PullError::NoBranch {
            url: url.into(),
            branch: branch.into(),
        };
        remote::fetch(
            mirror,
            url,
            &[format!("+refs/heads/{branch}:{tracking}")],
            1,
            &self.settings,
            self.object_cap(),
            progress,
        )
        .map_err(|e| match e {
            // Told apart by asking the remote for its branches, not by the error's text.
            RemoteError::Git(_) => match remote::ls_remote(mirror, url, &self.settings) {
                Ok((refs, _)) if !refs.contains_key(&format!("refs/heads/{branch}")) => no_branch(),
                _ => e.into(),
            },
            e => e.into(),
        })?;
        mirror.refname_to_id(&tracking).map_err(|_| no_branch())
    }

    /// What the directory's last pull left (nothing on the first pull).
    fn before(&self, previous: Option<&RepoRow>) -> Result<Before, PullError> {
        let Some(prev) = previous else {
            return Ok(Before {
                rows: HashMap::new(),
                pushed: HashSet::new(),
            });
        };
        let db = self.zones.db();
        Ok(Before {
            rows: db
                .repo_files(prev.id)?
                .into_iter()
                .map(|r| (r.path.clone(), r))
                .collect(),
            pushed: db.pushed_blobs(prev.id)?.into_iter().collect(),
        })
    }

    /// Deletes the files gone upstream (or no longer chosen) that are untouched locally; a
    /// local change makes a conflict, a path that cannot be looked at is skipped.
    fn remove_gone(&self, dir: &str, upstream: &Upstream, before: &Before, t: &mut Tally) {
        for (path, row) in &before.rows {
            if upstream.files.contains_key(path) {
                continue;
            }
            if upstream.unread_above(path) {
                t.rows.push(row.clone());
                continue;
            }
            let Some(base) = &row.base_oid else {
                t.rows.push(row.clone()); // created by the agent: still theirs
                continue;
            };
            let v = vfile(dir, path);
            let gone_here = |t: &mut Tally, reason: &str| {
                t.conflicts.push(PullConflict {
                    path: v.clone(),
                    reason: reason.into(),
                    upstream: None,
                });
                t.rows.push(FileRow {
                    path: path.clone(),
                    base_oid: None,
                    base_mode: None,
                    state: "created".into(),
                    upstream_oid: None,
                });
            };
            let left = |t: &mut Tally, e: &dyn std::fmt::Display| {
                t.skipped.push(
                    v.clone(),
                    format!("deleted upstream, but {e}; left as it is"),
                );
                t.rows.push(row.clone());
            };
            let (seen, local) = match self.look(&v) {
                Ok(l) => l,
                Err(e) => {
                    left(t, &e);
                    continue;
                }
            };
            match local {
                None => {}
                Some((l, lm)) if l.to_string() == *base && row.base_mode == Some(lm) => {
                    match self.zones.remove_entry(&v, seen, origin_git()) {
                        Ok(()) => {
                            self.prune_empty_parents(WORKSPACE, dir, path, origin_git());
                            t.deleted += 1;
                        }
                        Err(e) if e.code() == ErrorCode::Conflict => gone_here(
                            t,
                            "changed locally while the pull ran, deleted upstream; kept",
                        ),
                        Err(e) => left(t, &e),
                    }
                }
                Some(_) => gone_here(t, "changed locally, deleted upstream"),
            }
        }
    }

    /// Brings each upstream file into the directory: unchanged ones are counted, untouched ones
    /// replaced, locally changed ones become conflicts with the upstream version kept in /cache.
    #[allow(clippy::too_many_arguments)]
    fn write_upstream(
        &self,
        mirror: &Repository,
        dir: &str,
        upstream: &Upstream,
        links: &LinkResolver,
        before: &Before,
        t: &mut Tally,
        progress: OnProgress<'_>,
    ) -> Result<(), Libgit2Error> {
        let total = upstream.files.len();
        for (i, (path, &up)) in upstream.files.iter().enumerate() {
            if i % 256 == 0 {
                progress(&Progress {
                    phase: "write",
                    done: i,
                    total,
                    bytes: t.bytes_written,
                });
            }
            self.pull_file(mirror, dir, path, up, links, before, t)?;
        }
        progress(&Progress {
            phase: "write",
            done: total,
            total,
            bytes: t.bytes_written,
        });
        Ok(())
    }

    /// Brings one upstream file `path` (blob and mode `up`) into the directory.
    #[allow(clippy::too_many_arguments)]
    fn pull_file(
        &self,
        mirror: &Repository,
        dir: &str,
        path: &str,
        up: (Oid, u32),
        links: &LinkResolver,
        before: &Before,
        t: &mut Tally,
    ) -> Result<(), Libgit2Error> {
        let v = vfile(dir, path);
        let old = before.rows.get(path);
        // What is there now, before its contents are read: the write below replaces it only if
        // it is still this (a write acknowledged meanwhile becomes a conflict).
        let (seen, local) = match self.look(&v) {
            Ok(l) => l,
            Err(e) => {
                t.skipped.push(v, format!("{e}; not updated"));
                t.rows.extend(old.cloned());
                return Ok(());
            }
        };
        let base = old.and_then(|r| r.base_oid.clone());
        let base_mode = old.and_then(|r| r.base_mode);
        let up_s = (up.0.to_string(), up.1);
        let local_s = local.map(|(o, m)| (o.to_string(), m));
        if local_s.as_ref() == Some(&up_s) {
            t.unchanged += 1;
            t.clean(path, up);
            return Ok(());
        }
        if base.as_deref() == Some(up_s.0.as_str()) && base_mode == Some(up.1) {
            // Unchanged upstream: keep the agent's version and what status knew of it.
            t.unchanged += 1;
            t.rows.extend(old.cloned());
            return Ok(());
        }
        let untouched = match (&base, &local_s) {
            (None, None) => true,
            (Some(b), Some((l, lm))) => {
                (b == l && base_mode == Some(*lm))
                    || before.pushed.contains(&(path.to_string(), l.clone()))
            }
            _ => false,
        };
        let blob = match capped_blob(mirror, up.0, self.zones.limits().git_blob_bytes, up.1)? {
            Ok(blob) => blob,
            Err(reason) => {
                // Left as it is, and what status knew of it kept.
                t.skipped.push(v, reason);
                t.rows.extend(old.cloned());
                return Ok(());
            }
        };
        let mut changed_meanwhile = None;
        if untouched {
            match self.write_entry(&v, path, blob.content(), up.1, seen, links) {
                Ok(()) => {
                    t.written += 1;
                    t.bytes_written += blob.content().len();
                    t.clean(path, up);
                    return Ok(());
                }
                Err(Refusal::Changed(reason)) => changed_meanwhile = Some(reason),
                Err(Refusal::Skipped(reason)) => {
                    t.skipped.push(v, reason);
                    return Ok(());
                }
            }
        }
        let reason = changed_meanwhile.unwrap_or_else(|| {
            match (&base, &local_s) {
                (_, None) => "deleted locally, changed upstream",
                (None, Some(_)) => "created locally and upstream with different contents",
                _ => "changed locally and upstream",
            }
            .into()
        });
        t.conflicts.push(PullConflict {
            upstream: self.save_upstream(dir, path, blob.content()),
            path: v,
            reason,
        });
        t.rows.push(FileRow {
            path: path.into(),
            base_oid: Some(up_s.0.clone()),
            base_mode: Some(up.1),
            state: "conflict".into(),
            upstream_oid: Some(up_s.0),
        });
        Ok(())
    }

    /// Records the pull: the directory's new base and its files' rows.
    fn record(
        &self,
        target: &Target,
        branch: &str,
        tip: Oid,
        mirror_path: &Path,
        journal_mark: i64,
        rows: &[FileRow],
    ) -> Result<(), PullError> {
        // The pull's own writes agree with the rows just computed: status need not look at them,
        // unless someone else wrote meanwhile.
        let journal_mark = self
            .zones
            .db()
            .journal_mark_after_own(journal_mark, "git")?;
        let repo = RepoRow {
            id: target.previous.as_ref().map(|p| p.id).unwrap_or(0),
            url: target.url.clone(),
            branch: branch.into(),
            dir: target.dir.clone(),
            mirror: mirror_path.display().to_string(),
            base: tip.to_string(),
            paths: target.paths.clone(),
            pulled_at: self.zones.now_ms(),
            status_journal_id: journal_mark,
        };
        self.zones.db().record_pull(&repo, rows)?;
        Ok(())
    }

    /// Keeps the upstream version of a conflicted file in /cache (so an agent can read and merge
    /// it); returns its virtual path, or None when /cache cannot take it.
    fn save_upstream(&self, dir: &str, path: &str, content: &[u8]) -> Option<String> {
        let v = if dir.is_empty() {
            format!("/cache/.wardfs-upstream/{path}")
        } else {
            format!("/cache/.wardfs-upstream/{dir}/{path}")
        };
        match self.zones.write_bytes(&v, content, origin_git()) {
            Ok(_) => Some(v),
            Err(e) => {
                tracing::warn!(path = %v, error = %e, "cannot keep the upstream version of a conflicted file");
                None
            }
        }
    }
}

/// What the pull takes from `tip`'s tree, every entry validated as git's own `verify_path` would
/// (a hostile tree may hold `..`, `.git`, `/` or NUL): one bad entry fails the pull before
/// anything is written. A path of `target.paths` missing upstream is NOT_FOUND.
fn upstream_of(
    mirror: &Repository,
    tip: Oid,
    target: &Target,
    branch: &str,
    skipped: &mut Skipped,
) -> Result<Upstream, PullError> {
    let tree = mirror
        .find_commit(tip)
        .and_then(|c| c.tree())
        .map_err(libgit2("read tree"))?;
    let unsafe_tree = |(entry, rule): UnsafeEntry| PullError::UnsafeTree {
        url: target.url.clone(),
        branch: branch.into(),
        entry,
        rule,
    };
    let upstream = upstream_files(mirror, tree, target, skipped)?.map_err(unsafe_tree)?;
    let root = VPath::new(ZoneId::Workspace, &target.dir)?;
    check_beneath(&root, &target.dir, &upstream).map_err(unsafe_tree)?;
    for p in &target.paths {
        if !upstream.files.keys().any(|k| under(k, p)) {
            return Err(FsError::NotFound {
                path: format!("{p} in {} {branch}", target.url),
            }
            .into());
        }
    }
    Ok(upstream)
}

/// The files of `tree` that `target.paths` choose, each entry's name checked first (an unsafe
/// one is `Ok(Err(entry))`). Submodules, and entries whose object cannot be read as what their
/// mode says (a directory entry whose object is a blob, a missing object), are skipped and
/// named. Walked depth first, one tree read at a time.
fn upstream_files(
    mirror: &Repository,
    tree: git2::Tree<'_>,
    target: &Target,
    skipped: &mut Skipped,
) -> Result<Result<Upstream, UnsafeEntry>, Libgit2Error> {
    let paths = &target.paths;
    let chosen = |path: &str| paths.is_empty() || paths.iter().any(|p| under(path, p));
    let mut up = Upstream::default();
    let mut pending: Vec<(String, Oid)> = Vec::new();
    let mut next = Some((String::new(), tree));
    while let Some((root, tree)) = next.take() {
        for entry in tree.iter() {
            let name = entry.name_bytes();
            let path = format!("{root}{}", String::from_utf8_lossy(name));
            if let Err(e) = foreign::check_name(name, GitDir::Refuse) {
                return Ok(Err((path, e.rule.to_string())));
            }
            if !(chosen(&path) || paths.iter().any(|p| under(p, &path))) {
                continue;
            }
            match entry.kind() {
                Some(ObjectType::Tree) => pending.push((path, entry.id())),
                Some(ObjectType::Commit) => skipped.push(
                    vfile(&target.dir, &path),
                    "a submodule; wardfs does not pull submodules".into(),
                ),
                Some(ObjectType::Blob) if chosen(&path) => {
                    up.files.insert(path, (entry.id(), entry.filemode() as u32));
                }
                _ => {}
            }
        }
        while let Some((path, oid)) = pending.pop() {
            match capped_tree(mirror, oid)? {
                Ok(tree) => {
                    next = Some((format!("{path}/"), tree));
                    break;
                }
                Err(reason) => {
                    skipped.push(vfile(&target.dir, &path), reason);
                    up.unread.push(path);
                }
            }
        }
    }
    Ok(Ok(up))
}

/// Checks that each path lands beneath the pull directory `root` (`dir`): it does when every
/// name is plain; checked again on the joined path, the one the core will open.
fn check_beneath(root: &VPath, dir: &str, upstream: &Upstream) -> Result<(), UnsafeEntry> {
    for path in upstream.files.keys() {
        match VPath::new(ZoneId::Workspace, &format!("{dir}/{path}")) {
            Ok(v) if v.starts_with(root) && v != *root => {}
            _ => {
                return Err((
                    path.clone(),
                    format!("a path that does not lie beneath {}", vdir(dir)),
                ))
            }
        }
    }
    Ok(())
}

/// The tree's symlinks, to judge each by where it resolves through the tree's own links. A link
/// that cannot be read (no blob, or a target longer than `PATH_MAX`: no link to follow) is left
/// out here and skipped when its turn comes to be written.
fn tree_links(mirror: &Repository, upstream: &Upstream) -> Result<LinkResolver, Libgit2Error> {
    let mut links = LinkResolver::new();
    for (path, &(oid, mode)) in &upstream.files {
        if mode == MODE_LINK {
            if let Ok(blob) = capped_blob(mirror, oid, LINK_MAX, mode)? {
                links.add(path, &String::from_utf8_lossy(blob.content()));
            }
        }
    }
    Ok(links)
}

/// Longest symlink target a pull reads (Linux's `PATH_MAX`).
const LINK_MAX: u64 = 4096;

/// What an entry of git mode `mode` holds, for people.
fn entry_kind(mode: u32) -> &'static str {
    match mode {
        MODE_LINK => "a symlink",
        0o040000 => "a directory",
        _ => "a file",
    }
}

/// Reads blob `oid` (the object of an entry of mode `mode`) unless it is over `max` bytes or is
/// not a blob. libgit2 reads a blob whole (a packed object cannot be streamed), so its size and
/// type are looked up first in the object's header (for a delta, its result's size, without
/// applying it): a larger one, or a tree where a file should be, is `Err(why)`, never loaded.
fn capped_blob(
    mirror: &Repository,
    oid: Oid,
    max: u64,
    mode: u32,
) -> Result<Result<git2::Blob<'_>, String>, Libgit2Error> {
    let (size, kind) = match header(mirror, oid)? {
        Ok(h) => h,
        Err(reason) => return Ok(Err(reason)),
    };
    if kind != ObjectType::Blob {
        return Ok(Err(format!(
            "the tree says {} (mode {mode:o}), but its object {oid} is a {kind}; not pulled",
            entry_kind(mode)
        )));
    }
    if size > max {
        return Ok(Err(format!(
            "{size} bytes, over limits.git_blob_bytes ({max}); not pulled"
        )));
    }
    match mirror.find_blob(oid) {
        Ok(blob) => Ok(Ok(blob)),
        Err(e) => unreadable(e, oid, "read blob").map(Err),
    }
}

/// Reads tree `oid` (the object of a directory entry), unless its object is not a tree.
fn capped_tree(
    mirror: &Repository,
    oid: Oid,
) -> Result<Result<git2::Tree<'_>, String>, Libgit2Error> {
    match header(mirror, oid)? {
        Ok((_, ObjectType::Tree)) => {}
        Ok((_, kind)) => {
            return Ok(Err(format!(
                "the tree says a directory (mode 40000), but its object {oid} is a {kind}; not \
                 pulled"
            )))
        }
        Err(reason) => return Ok(Err(reason)),
    }
    match mirror.find_tree(oid) {
        Ok(tree) => Ok(Ok(tree)),
        Err(e) => unreadable(e, oid, "read tree").map(Err),
    }
}

/// The size and type of object `oid`, from its header; `Err(why)` when the repository is to
/// blame for not having it.
fn header(
    mirror: &Repository,
    oid: Oid,
) -> Result<Result<(u64, ObjectType), String>, Libgit2Error> {
    let odb = mirror.odb().map_err(libgit2("open object database"))?;
    match odb.read_header(oid) {
        Ok((size, kind)) => Ok(Ok((size as u64, kind))),
        Err(e) => unreadable(e, oid, "read object header").map(Err),
    }
}

/// Why object `oid` cannot be read, when the repository is to blame: it is missing from what
/// the remote sent, or reading it needs more memory at once than the pull's cap (a delta on a
/// far larger base). Any other failure is the mirror's, and fails the pull.
fn unreadable(e: git2::Error, oid: Oid, op: &str) -> Result<String, Libgit2Error> {
    if let Some(bytes) = memory::take_refused() {
        return Ok(format!(
            "reading its object {oid} needs {bytes} bytes in memory at once, over the cap \
             (limits.git_blob_bytes + 16 MiB); not pulled"
        ));
    }
    if e.code() == git2::ErrorCode::NotFound {
        return Ok(format!(
            "its object {oid} is not in what the remote sent; not pulled"
        ));
    }
    Err(libgit2(op)(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_entry_whose_object_is_a_blob_is_skipped_and_what_is_beneath_it_kept() {
        // git's own servers refuse to send such a tree; a hand-made server can.
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init_bare(dir.path()).unwrap();
        let blob = repo.blob(b"fine\n").unwrap();
        let mut raw = Vec::new();
        for (mode, name) in [("40000", "d"), ("100644", "ok.txt")] {
            raw.extend_from_slice(format!("{mode} {name}\0").as_bytes());
            raw.extend_from_slice(blob.as_bytes());
        }
        let tree_id = repo.odb().unwrap().write(ObjectType::Tree, &raw).unwrap();
        let target = Target {
            url: "up".into(),
            dir: "r".into(),
            paths: vec![],
            previous: None,
        };
        let mut skipped = Skipped::default();
        let tree = repo.find_tree(tree_id).unwrap();
        let up = upstream_files(&repo, tree, &target, &mut skipped)
            .unwrap()
            .unwrap();
        assert_eq!(up.files.keys().collect::<Vec<_>>(), ["ok.txt"]);
        assert_eq!(skipped.total, 1);
        assert_eq!(skipped.shown[0].path, "/workspace/r/d");
        assert!(
            skipped.shown[0].reason.contains("a directory (mode 40000)")
                && skipped.shown[0].reason.contains("is a blob"),
            "{}",
            skipped.shown[0].reason
        );
        // What an earlier pull put beneath it is left alone, not deleted as gone upstream.
        assert!(up.unread_above("d/x.txt") && !up.unread_above("dx.txt"));
    }

    #[test]
    fn skipped_entries_are_all_counted_and_the_first_thousand_named() {
        let mut s = Skipped::default();
        for i in 0..MAX_SKIPPED_SHOWN + 5 {
            s.push(format!("/workspace/m{i}"), "a submodule".into());
        }
        assert_eq!(s.total, MAX_SKIPPED_SHOWN + 5);
        assert_eq!(s.shown.len(), MAX_SKIPPED_SHOWN);
        assert_eq!(s.shown[0].path, "/workspace/m0");
    }
}

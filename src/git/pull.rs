//! `pull`: fetch a branch into the repository's mirror and bring its files into a workspace
//! directory. Every tree entry is validated first (a hostile tree fails the pull before anything
//! is written); each file is replaced as itself, compare-and-swapped against what the pull saw,
//! so a write acknowledged meanwhile becomes a conflict with both sides kept; a path the pull
//! cannot read or replace is skipped and named, not the whole pull. [`PullError`] says why a
//! pull failed.

use super::*;
use crate::core::text::count;

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
    /// Entries not written: submodules, symlinks pointing out of the repository, entries the
    /// zone refused.
    pub skipped: Vec<PathNote>,
    /// How long the pull took, in milliseconds.
    pub duration_ms: u64,
}

impl Git {
    /// Pulls `req.branch` of `req.remote` into the workspace.
    pub fn pull(
        &self,
        req: &PullRequest,
        progress: OnProgress<'_>,
    ) -> Result<PullResult, PullError> {
        let started = Instant::now();
        let url = self.expand_remote(&req.remote)?;
        if let Some(b) = &req.branch {
            check_branch(b)?;
        }
        let into = match &req.into {
            Some(v) => v.clone(),
            None => format!("/workspace/{}", repo_name(&url)),
        };
        let dir = self.workspace_dir("into", &into)?;
        if let Zone::Disabled(reason) = self.zones.zone(ZoneId::Workspace) {
            return Err(FsError::ZoneUnavailable {
                path: into,
                zone: "workspace".into(),
                reason: reason.clone(),
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
        let mirror_path = self.mirror_path(&url);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let branch = match &req.branch {
            Some(b) => b.clone(),
            None => {
                let (refs, default) = remote::ls_remote(&mirror, &url, &self.settings)?;
                default
                    .or_else(|| {
                        ["main", "master"]
                            .into_iter()
                            .find(|b| refs.contains_key(&format!("refs/heads/{b}")))
                            .map(String::from)
                    })
                    .ok_or_else(|| {
                        invalid("branch", format!("{url} has no default branch; name one"))
                    })?
            }
        };
        let tracking = format!("refs/wardfs/remote/{branch}");
        remote::fetch(
            &mirror,
            &url,
            &[format!("+refs/heads/{branch}:{tracking}")],
            1,
            &self.settings,
            progress,
        )
        .map_err(|e| match e {
            // Told apart by asking the remote for its branches, not by the error's text.
            RemoteError::Git(_) => match remote::ls_remote(&mirror, &url, &self.settings) {
                Ok((refs, _)) if !refs.contains_key(&format!("refs/heads/{branch}")) => {
                    PullError::NoBranch {
                        url: url.clone(),
                        branch: branch.clone(),
                    }
                }
                _ => e.into(),
            },
            e => e.into(),
        })?;
        let tip = mirror
            .refname_to_id(&tracking)
            .map_err(|_| PullError::NoBranch {
                url: url.clone(),
                branch: branch.clone(),
            })?;
        let tip_commit = mirror.find_commit(tip).map_err(libgit2("read commit"))?;
        let tree = tip_commit.tree().map_err(libgit2("read tree"))?;

        // The upstream files, filtered by `paths`. Every entry is validated as git's own
        // `verify_path` would (a hostile tree may hold `..`, `.git`, `/` or NUL): one bad entry
        // fails the pull before anything is written.
        let mut upstream: BTreeMap<String, (Oid, u32)> = BTreeMap::new();
        let mut skipped = Vec::new();
        let mut bad: Option<(String, String)> = None;
        tree.walk(TreeWalkMode::PreOrder, |root, entry| {
            let name = entry.name_bytes();
            if let Err(e) = foreign::check_name(name, GitDir::Refuse) {
                bad = Some((
                    format!("{root}{}", String::from_utf8_lossy(name)),
                    e.rule.to_string(),
                ));
                return TreeWalkResult::Abort;
            }
            let path = format!("{root}{}", String::from_utf8_lossy(name));
            let wanted =
                paths.is_empty() || paths.iter().any(|p| under(&path, p) || under(p, &path));
            if !wanted {
                return TreeWalkResult::Skip;
            }
            match entry.kind() {
                Some(ObjectType::Blob)
                    if paths.is_empty() || paths.iter().any(|p| under(&path, p)) =>
                {
                    upstream.insert(path, (entry.id(), entry.filemode() as u32));
                }
                Some(ObjectType::Commit) => skipped.push(PathNote {
                    path: vfile(&dir, &path),
                    reason: "a submodule; wardfs does not pull submodules".into(),
                }),
                _ => {}
            }
            TreeWalkResult::Ok
        })
        .or_else(|e| if bad.is_some() { Ok(()) } else { Err(e) })
        .map_err(libgit2("walk tree"))?;
        let unsafe_tree = |entry: String, rule: String| PullError::UnsafeTree {
            url: url.clone(),
            branch: branch.clone(),
            entry,
            rule,
        };
        if let Some((entry, rule)) = bad {
            return Err(unsafe_tree(entry, rule));
        }
        // Each path must land beneath the pull directory (it does when every name is plain;
        // checked again on the joined path, the one the core will open).
        let root = VPath::new(ZoneId::Workspace, &dir)?;
        for path in upstream.keys() {
            match VPath::new(ZoneId::Workspace, &format!("{dir}/{path}")) {
                Ok(v) if v.starts_with(&root) && v != root => {}
                _ => {
                    return Err(unsafe_tree(
                        path.clone(),
                        format!("a path that does not lie beneath {}", vdir(&dir)),
                    ))
                }
            }
        }
        // Symlinks are judged by where they resolve through the tree's own links.
        let mut links = LinkResolver::new();
        for (path, (oid, mode)) in &upstream {
            if *mode == MODE_LINK {
                // A link's target is a path: one longer than PATH_MAX is no link to follow.
                if let Ok(blob) = capped_blob(&mirror, *oid, LINK_MAX)? {
                    links.add(path, &String::from_utf8_lossy(blob.content()));
                }
            }
        }
        for p in &paths {
            if !upstream.keys().any(|k| under(k, p)) {
                return Err(FsError::NotFound {
                    path: format!("{p} in {url} {branch}"),
                }
                .into());
            }
        }

        let journal_mark = self.zones.db().journal_max_id()?;
        let old_rows: HashMap<String, FileRow> = match &previous {
            Some(prev) => self
                .zones
                .db()
                .repo_files(prev.id)?
                .into_iter()
                .map(|r| (r.path.clone(), r))
                .collect(),
            None => HashMap::new(),
        };
        // Local versions that were pushed already are upstream's business now, not conflicts.
        let pushed: HashSet<(String, String)> = match &previous {
            Some(prev) => self.zones.db().pushed_blobs(prev.id)?.into_iter().collect(),
            None => HashSet::new(),
        };
        let origin = origin_git();
        let blob_max = self.zones.limits().git_blob_bytes;
        let mut rows = Vec::with_capacity(upstream.len());
        let mut conflicts = Vec::new();
        let (mut written, mut deleted, mut unchanged) = (0, 0, 0);
        // Files gone upstream (or no longer chosen) go first: a link or file upstream turned into
        // a directory must be out of the way before anything is written beneath its name.
        // A path that cannot be looked at or replaced (an I/O error, a hard link the config
        // refuses) is skipped and reported, keeping what status knew of it; the rest of the pull
        // lands and is recorded. Only a broken mirror or state database stops a pull half-way,
        // and then each write already made is in the journal (and reached the mount) as it
        // happened, and the journal says where the pull stopped.
        let mut apply = || -> Result<(), Libgit2Error> {
            for (path, row) in &old_rows {
                if upstream.contains_key(path) {
                    continue;
                }
                let v = vfile(&dir, path);
                let Some(base) = &row.base_oid else {
                    rows.push(row.clone()); // created by the agent: still theirs
                    continue;
                };
                let (seen, local) = match self.look(&v) {
                    Ok(l) => l,
                    Err(e) => {
                        skipped.push(PathNote {
                            path: v,
                            reason: format!("deleted upstream, but {e}; left as it is"),
                        });
                        rows.push(row.clone());
                        continue;
                    }
                };
                let changed =
                    |reason: &str, conflicts: &mut Vec<PullConflict>, rows: &mut Vec<FileRow>| {
                        conflicts.push(PullConflict {
                            path: v.clone(),
                            reason: reason.into(),
                            upstream: None,
                        });
                        rows.push(FileRow {
                            path: path.clone(),
                            base_oid: None,
                            base_mode: None,
                            state: "created".into(),
                            upstream_oid: None,
                        });
                    };
                match local {
                    None => {}
                    Some((l, lm)) if l.to_string() == *base && row.base_mode == Some(lm) => {
                        match self.zones.remove_entry(&v, seen, origin) {
                            Ok(()) => {
                                self.prune_empty_parents(&dir, path, origin);
                                deleted += 1;
                            }
                            Err(e) if e.code() == ErrorCode::Conflict => changed(
                                "changed locally while the pull ran, deleted upstream; kept",
                                &mut conflicts,
                                &mut rows,
                            ),
                            Err(e) => {
                                skipped.push(PathNote {
                                    path: v.clone(),
                                    reason: format!("deleted upstream, but {e}; left as it is"),
                                });
                                rows.push(row.clone());
                            }
                        }
                    }
                    Some(_) => changed(
                        "changed locally, deleted upstream",
                        &mut conflicts,
                        &mut rows,
                    ),
                }
            }
            let total = upstream.len();
            let mut bytes_written = 0;
            for (i, (path, (oid, mode))) in upstream.iter().enumerate() {
                if i % 256 == 0 {
                    progress(&Progress {
                        phase: "write",
                        done: i,
                        total,
                        bytes: bytes_written,
                    });
                }
                let v = vfile(&dir, path);
                // What is there now, before its contents are read: the write below replaces it only
                // if it is still this (a write acknowledged meanwhile becomes a conflict).
                let (seen, local) = match self.look(&v) {
                    Ok(l) => l,
                    Err(e) => {
                        skipped.push(PathNote {
                            path: v,
                            reason: format!("{e}; not updated"),
                        });
                        if let Some(row) = old_rows.get(path) {
                            rows.push(row.clone());
                        }
                        continue;
                    }
                };
                let base = old_rows.get(path).and_then(|r| r.base_oid.clone());
                let up = (oid.to_string(), *mode);
                let local_s = local.as_ref().map(|(o, m)| (o.to_string(), *m));
                let clean_row = |r: &mut Vec<FileRow>| {
                    r.push(FileRow {
                        path: path.clone(),
                        base_oid: Some(up.0.clone()),
                        base_mode: Some(up.1),
                        state: "clean".into(),
                        upstream_oid: None,
                    })
                };
                if local_s.as_ref() == Some(&up) {
                    unchanged += 1;
                    clean_row(&mut rows);
                    continue;
                }
                let untouched = match (&base, &local_s) {
                    (None, None) => true,
                    (Some(b), Some((l, lm))) => {
                        (Some(b) == Some(l)
                            && old_rows.get(path).and_then(|r| r.base_mode) == Some(*lm))
                            || pushed.contains(&(path.clone(), l.clone()))
                    }
                    _ => false,
                };
                if base.as_deref() == Some(up.0.as_str())
                    && old_rows.get(path).and_then(|r| r.base_mode) == Some(up.1)
                {
                    // Unchanged upstream: keep the agent's version and what status knew of it.
                    unchanged += 1;
                    rows.push(old_rows[path].clone());
                    continue;
                }
                let mut changed_meanwhile = None;
                let blob = match capped_blob(&mirror, *oid, blob_max)? {
                    Ok(blob) => blob,
                    Err(reason) => {
                        skipped.push(PathNote { path: v, reason });
                        continue;
                    }
                };
                if untouched {
                    match self.write_entry(&v, &dir, path, blob.content(), *mode, seen, &links) {
                        Ok(()) => {
                            written += 1;
                            bytes_written += blob.content().len();
                            clean_row(&mut rows);
                            continue;
                        }
                        Err(Refusal::Changed(reason)) => changed_meanwhile = Some(reason),
                        Err(Refusal::Skipped(reason)) => {
                            skipped.push(PathNote { path: v, reason });
                            continue;
                        }
                    }
                }
                {
                    let upstream_copy = self.save_upstream(&dir, path, blob.content());
                    conflicts.push(PullConflict {
                        path: v,
                        upstream: upstream_copy,
                        reason: changed_meanwhile.unwrap_or_else(|| match (&base, &local_s) {
                            (_, None) => "deleted locally, changed upstream".into(),
                            (None, Some(_)) => {
                                "created locally and upstream with different contents".into()
                            }
                            _ => "changed locally and upstream".into(),
                        }),
                    });
                    rows.push(FileRow {
                        path: path.clone(),
                        base_oid: Some(up.0.clone()),
                        base_mode: Some(up.1),
                        state: "conflict".into(),
                        upstream_oid: Some(up.0.clone()),
                    });
                }
            }
            progress(&Progress {
                phase: "write",
                done: total,
                total,
                bytes: bytes_written,
            });
            mirror
                .reference(&base_ref(&dir), tip, true, "wardfs: pulled")
                .map_err(libgit2("pin base"))?;
            Ok(())
        };
        if let Err(e) = apply() {
            self.event(
                &dir,
                "git-pull",
                &format!(
                    "{url} {branch} at {} stopped half-way: {written} written, {deleted} deleted \
                     before {e}; the next pull takes up from there",
                    remote::short(tip)
                ),
            );
            return Err(e.into());
        }
        // The pull's own writes agree with the rows just computed: status need not look at them,
        // unless someone else wrote meanwhile.
        let journal_mark = self
            .zones
            .db()
            .journal_mark_after_own(journal_mark, "git")?;
        let repo = RepoRow {
            id: previous.as_ref().map(|p| p.id).unwrap_or(0),
            url: url.clone(),
            branch: branch.clone(),
            dir: dir.clone(),
            mirror: mirror_path.display().to_string(),
            base: tip.to_string(),
            paths: paths.clone(),
            pulled_at: self.zones.now_ms(),
            status_journal_id: journal_mark,
        };
        self.zones.db().record_pull(&repo, &rows)?;
        let result = PullResult {
            repo: vdir(&dir),
            url: url.clone(),
            branch: branch.clone(),
            commit: tip.to_string(),
            previous: previous.map(|p| p.base),
            written,
            deleted,
            unchanged,
            conflicts,
            skipped,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        self.event(
            &dir,
            "git-pull",
            &format!(
                "{url} {branch} at {}: {written} written, {deleted} deleted, {}",
                remote::short(tip),
                count(result.conflicts.len() as u64, "conflict")
            ),
        );
        Ok(result)
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

/// Longest symlink target a pull reads (Linux's `PATH_MAX`).
const LINK_MAX: u64 = 4096;

/// Reads blob `oid` unless it is over `max` bytes. libgit2 reads a blob whole (a packed object
/// cannot be streamed), so its size is looked up first in the object's header; a larger one is
/// `Err(why)`, never loaded: a hostile repository's huge file costs no memory.
fn capped_blob(
    mirror: &git2::Repository,
    oid: git2::Oid,
    max: u64,
) -> Result<Result<git2::Blob<'_>, String>, Libgit2Error> {
    let (size, _) = mirror
        .odb()
        .and_then(|odb| odb.read_header(oid))
        .map_err(libgit2("read blob header"))?;
    if size as u64 > max {
        return Ok(Err(format!(
            "{size} bytes, over limits.git_blob_bytes ({max}); not pulled"
        )));
    }
    mirror.find_blob(oid).map(Ok).map_err(libgit2("read blob"))
}

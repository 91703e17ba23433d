//! Git sync: pull a branch into the workspace, track what the agent changed, stage the changes as
//! reviewable commits, and push them (with a lease) once a human says so.
//!
//! Each remote has a daemon-owned bare mirror under `<state_dir>/git/`, fetched shallowly (depth
//! 1). A pull writes the chosen paths into a workspace directory through the core (same path
//! rules, same journal) and records each file's base blob. `status` re-hashes only the paths the
//! journal says changed since it last looked. `stage` builds a commit in the mirror's object store
//! only (blobs → tree update → commit on the base), keeps it at `refs/sandfs/staged/<id>` and
//! records it with per-file git-format diffs; the workspace and anyone's own checkout are never
//! touched. `push` fetches the target, rebases with a three-way tree merge when it moved, and
//! pushes with a lease; [`pr`] opens pull requests. Every step lands in the journal.
//!
//! One file per operation, moving out of this one: `pull` is in `pull.rs`; status, stage, push and
//! discard still live here. [`remote`] talks to git servers, [`diff`] reads and writes patches,
//! [`prune`] sweeps staging leftovers.

pub mod diff;
pub mod error;
pub mod pr;
pub mod prune;
mod pull;
pub mod remote;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};
use serde::{Deserialize, Serialize};

pub use error::{GitError, GitResult};
pub use pull::{PathNote, PullConflict, PullRequest, PullResult};
pub use remote::{OnProgress, Progress};

use crate::config::{GitSection, Settings};
use crate::core::foreign::{self, GitDir, LinkResolver};
use crate::core::{EntryKind, ErrorCode, FsError, Replacement, Seen, VPath, Zone, ZoneId, Zones};
use crate::state::{FileRow, Origin, RepoRow, StagedRow, Via};

const MODE_FILE: u32 = 0o100644;
const MODE_EXEC: u32 = 0o100755;
const MODE_LINK: u32 = 0o120000;

/// The git service: one per daemon.
pub struct Git {
    zones: Arc<Zones>,
    settings: GitSection,
    mirrors: PathBuf,
    locks: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
}

/// One changed file in `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Change {
    /// The virtual path.
    pub path: String,
    /// `created`, `modified`, `deleted` or `conflict` (changed upstream and locally).
    pub state: String,
}

/// The status of one pulled repository.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepoStatus {
    pub repo: String,
    pub url: String,
    pub branch: String,
    pub base: String,
    pub changes: Vec<Change>,
    /// Paths re-hashed (0 when nothing changed since the last look).
    pub examined: usize,
}

/// `status`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StatusResult {
    pub repos: Vec<RepoStatus>,
}

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

/// `push`'s request.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    pub id: String,
    /// Push to `sandfs/<id>` and open a pull request instead of pushing to the branch.
    #[serde(default)]
    pub pr: bool,
    /// Stream progress as NDJSON (API only).
    #[serde(default)]
    pub progress: bool,
}

/// What a push did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PushResult {
    pub id: String,
    pub state: String,
    /// The commit that reached the remote.
    pub commit_sha: String,
    /// The remote ref it was pushed to.
    pub pushed_ref: String,
    /// The pull request, with `pr`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// True when the commit was rebased onto a remote that had moved.
    pub rebased: bool,
    pub duration_ms: u64,
}

/// What a discard did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiscardResult {
    pub id: String,
    pub reverted: Vec<String>,
    /// Files `revert` left alone (changed again since staging).
    pub kept: Vec<PathNote>,
}

fn origin_git() -> Origin {
    Origin {
        via: Via::Git,
        pid: None,
        uid: None,
    }
}

/// The virtual path of a workspace-relative directory.
fn vdir(dir: &str) -> String {
    if dir.is_empty() {
        "/workspace".into()
    } else {
        format!("/workspace/{dir}")
    }
}

fn vfile(dir: &str, path: &str) -> String {
    if dir.is_empty() {
        format!("/workspace/{path}")
    } else {
        format!("/workspace/{dir}/{path}")
    }
}

/// Normalizes a repository path given by a user: relative, `/`-separated, no `.`/`..`.
fn repo_path(name: &str, p: &str) -> GitResult<String> {
    let t = p.trim_matches('/');
    if t.is_empty() {
        return Ok(String::new());
    }
    if p.contains('\0') || t.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(GitError::invalid(
            name,
            format!("{p:?} must be a path inside the repository, without `.`, `..` or `//`"),
        ));
    }
    Ok(t.to_string())
}

/// Whether `path` is `prefix` or lies beneath it (`prefix` "" matches everything).
fn under(path: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || path == prefix
        || (path.len() > prefix.len()
            && path.starts_with(prefix)
            && path.as_bytes()[prefix.len()] == b'/')
}

impl Git {
    /// Creates the service; mirrors live under `<state_dir>/git/`.
    pub fn new(zones: Arc<Zones>, settings: &Settings) -> Git {
        Git {
            zones,
            settings: settings.git.clone(),
            mirrors: settings.state_dir.join("git"),
            locks: Mutex::new(HashMap::new()),
        }
    }

    fn lock_for(&self, mirror: &Path) -> Arc<Mutex<()>> {
        self.locks
            .lock()
            .expect("not poisoned")
            .entry(mirror.to_path_buf())
            .or_default()
            .clone()
    }

    /// Expands `owner/repo` and refuses URLs carrying a password.
    pub fn expand_remote(&self, spec: &str) -> GitResult<String> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(GitError::invalid("remote", "must not be empty"));
        }
        let shorthand = spec.split('/').count() == 2
            && !spec.contains(':')
            && !spec.starts_with('.')
            && !spec.starts_with('/')
            && spec
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        if shorthand {
            return Ok(format!(
                "{}/{}.git",
                self.settings.github_url.trim_end_matches('/'),
                spec.trim_end_matches(".git")
            ));
        }
        if let Some(rest) = spec
            .strip_prefix("https://")
            .or_else(|| spec.strip_prefix("http://"))
        {
            let authority = rest.split('/').next().unwrap_or("");
            if let Some((userinfo, _)) = authority.rsplit_once('@') {
                if userinfo.contains(':') {
                    return Err(GitError::invalid(
                        "remote",
                        format!(
                            "the URL carries a password; remove it and put the token in the \
                             environment variable named by git.token_env (now {})",
                            self.settings.token_env.as_deref().unwrap_or("unset")
                        ),
                    ));
                }
            }
        }
        Ok(spec.to_string())
    }

    fn mirror_path(&self, url: &str) -> PathBuf {
        let hash = Oid::hash_object(ObjectType::Blob, url.as_bytes())
            .map(|o| o.to_string()[..16].to_string())
            .unwrap_or_default();
        let name: String = repo_name(url)
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.mirrors.join(format!("{name}-{hash}.git"))
    }

    fn open_mirror(&self, path: &Path) -> GitResult<Repository> {
        if path.join("HEAD").exists() {
            Repository::open_bare(path)
                .map_err(GitError::git(format!("open mirror {}", path.display())))
        } else {
            std::fs::create_dir_all(path).map_err(|e| {
                GitError::Fs(FsError::Io {
                    path: path.display().to_string(),
                    op: "create mirror",
                    source: e,
                })
            })?;
            Repository::init_bare(path)
                .map_err(GitError::git(format!("create mirror {}", path.display())))
        }
    }

    /// The workspace-relative directory for a virtual path (which must be in /workspace).
    fn workspace_dir(&self, name: &str, v: &str) -> GitResult<String> {
        match crate::core::path::parse(v)? {
            crate::core::Target::Zone(vp) if vp.zone() == ZoneId::Workspace => {
                Ok(vp.rel().to_string())
            }
            _ => Err(GitError::invalid(
                name,
                format!("{v:?} must be a directory in /workspace"),
            )),
        }
    }

    fn event(&self, dir: &str, op: &str, detail: &str) {
        if let Ok(vp) = VPath::new(ZoneId::Workspace, dir) {
            self.zones.record_event(&vp, op, detail, origin_git());
        }
    }

    /// Removes directories left empty by deleting `path` (best effort, up to the repo dir).
    fn prune_empty_parents(&self, dir: &str, path: &str, origin: Origin) {
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('/') {
            if self
                .zones
                .delete(&vfile(dir, parent), false, origin)
                .is_err()
            {
                break;
            }
            p = parent;
        }
    }

    /// Writes one pulled entry at `v` (`path` in the repository at `dir`) as itself: a symlink
    /// there is replaced, never written through, and only if the entry is still what `seen`
    /// recorded. A symlink is written only when it resolves beneath the repository through the
    /// tree's own links; nothing is written beneath a parent that is a symlink locally.
    #[allow(clippy::too_many_arguments)]
    fn write_entry(
        &self,
        v: &str,
        dir: &str,
        path: &str,
        content: &[u8],
        mode: u32,
        seen: Seen,
        links: &LinkResolver,
    ) -> Result<(), Refusal> {
        let mut parent = path;
        while let Some((p, _)) = parent.rsplit_once('/') {
            if let Ok(st) = self.zones.stat(&vfile(dir, p)) {
                if st.kind != EntryKind::Dir {
                    return Err(Refusal::Changed(format!(
                        "{} is a {} locally, a directory upstream",
                        vfile(dir, p),
                        if st.kind == EntryKind::Symlink {
                            "symlink"
                        } else {
                            "file"
                        }
                    )));
                }
            }
            parent = p;
        }
        let res = if mode == MODE_LINK {
            let Ok(target) = std::str::from_utf8(content) else {
                return Err(Refusal::Skipped(
                    "a symlink whose target is not UTF-8".into(),
                ));
            };
            if let Err(e) = links.resolve(path, target) {
                return Err(Refusal::Skipped(format!(
                    "a symlink to {target:?}: {}; not written",
                    e.rule
                )));
            }
            self.zones
                .replace_entry(v, Replacement::Symlink(target), Some(seen), origin_git())
        } else {
            let perm = if mode == MODE_EXEC { 0o755 } else { 0o644 };
            let mut bytes = content;
            self.zones.replace_entry(
                v,
                Replacement::File {
                    content: &mut bytes,
                    mode: perm,
                },
                Some(seen),
                origin_git(),
            )
        };
        match res {
            Ok(_) => Ok(()),
            Err(e) if e.code() == ErrorCode::Conflict => Err(Refusal::Changed(
                "changed locally while the pull ran; both versions kept".into(),
            )),
            Err(e) if e.code() == ErrorCode::IsDir => Err(Refusal::Changed(
                "a directory locally, a file upstream".into(),
            )),
            Err(e) => Err(Refusal::Skipped(e.to_string())),
        }
    }

    /// What is at `v` now: its identity (for a later compare-and-swap), then its blob id and mode.
    fn look(&self, v: &str) -> GitResult<(Seen, Option<(Oid, u32)>)> {
        let seen = self.zones.seen(v)?;
        Ok((seen, self.local_blob(v)?))
    }

    /// The blob id and git mode of what is at `v` now (None: nothing, or a directory). A file is
    /// hashed as it streams by, so its size does not matter.
    fn local_blob(&self, v: &str) -> GitResult<Option<(Oid, u32)>> {
        let st = match self.zones.stat(v) {
            Ok(st) => st,
            Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::NotDir) => {
                return Ok(None)
            }
            Err(e) => return Err(e.into()),
        };
        match st.kind {
            EntryKind::File => {
                use sha1::Digest;
                use std::io::Read;
                let (f, size) = self.zones.read_binary(v)?;
                let mut hasher = sha1::Sha1::new();
                hasher.update(format!("blob {size}\0").as_bytes());
                let mut f = f.take(size);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match f.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) => hasher.update(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Err(FsError::Io {
                                path: v.into(),
                                op: "read",
                                source: e,
                            }
                            .into())
                        }
                    }
                }
                let oid = Oid::from_bytes(&hasher.finalize()).expect("20 bytes");
                let mode = if st.mode & 0o111 != 0 {
                    MODE_EXEC
                } else {
                    MODE_FILE
                };
                Ok(Some((oid, mode)))
            }
            EntryKind::Symlink => Ok(Some((
                hash_blob(self.zones.readlink(v)?.as_bytes()),
                MODE_LINK,
            ))),
            _ => Ok(None),
        }
    }

    /// The bytes (a symlink's target) and git mode of what is at `v` now.
    fn local_content(&self, v: &str) -> GitResult<Option<(Vec<u8>, u32)>> {
        let st = match self.zones.stat(v) {
            Ok(st) => st,
            Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::NotDir) => {
                return Ok(None)
            }
            Err(e) => return Err(e.into()),
        };
        match st.kind {
            EntryKind::File => {
                use std::io::Read;
                let (mut f, size) = self.zones.read_binary(v)?;
                let mut bytes = Vec::with_capacity(size as usize);
                f.read_to_end(&mut bytes).map_err(|e| FsError::Io {
                    path: v.into(),
                    op: "read",
                    source: e,
                })?;
                let mode = if st.mode & 0o111 != 0 {
                    MODE_EXEC
                } else {
                    MODE_FILE
                };
                Ok(Some((bytes, mode)))
            }
            EntryKind::Symlink => Ok(Some((self.zones.readlink(v)?.into_bytes(), MODE_LINK))),
            _ => Ok(None),
        }
    }

    /// Finds the repo `v` (a virtual path) belongs to, or the only repo when `v` is None.
    pub fn repo_for(&self, v: Option<&str>) -> GitResult<RepoRow> {
        let repos = self.zones.db().repos()?;
        match v {
            Some(v) => {
                let rel = self.workspace_dir("repo", v)?;
                repos
                    .into_iter()
                    .filter(|r| under(&rel, &r.dir))
                    .max_by_key(|r| r.dir.len())
                    .ok_or(GitError::NoRepo { dir: v.to_string() })
            }
            None => match repos.len() {
                0 => Err(GitError::NoRepo {
                    dir: "/workspace".into(),
                }),
                1 => Ok(repos.into_iter().next().expect("one")),
                _ => Err(GitError::WhichRepo(format!(
                    "several repositories are pulled ({}); name one",
                    repos
                        .iter()
                        .map(|r| vdir(&r.dir))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            },
        }
    }

    /// Lists created, modified and deleted files of every pulled repo (or the one holding `v`).
    /// Only paths the journal mentions since the last look are re-hashed; `rescan` re-hashes
    /// everything (for changes made beside sandfs, which the journal cannot see).
    pub fn status(&self, v: Option<&str>, rescan: bool) -> GitResult<StatusResult> {
        let repos = match v {
            Some(_) => vec![self.repo_for(v)?],
            None => self.zones.db().repos()?,
        };
        let mut out = Vec::with_capacity(repos.len());
        for repo in repos {
            out.push(self.refresh(&repo, rescan)?);
        }
        Ok(StatusResult { repos: out })
    }

    fn refresh(&self, repo: &RepoRow, rescan: bool) -> GitResult<RepoStatus> {
        let db = self.zones.db();
        let (paths, last) = db.journal_paths_since(repo.status_journal_id, &repo.dir)?;
        let mut candidates: HashSet<String> = HashSet::new();
        let mut full = rescan;
        for p in &paths {
            if under(&repo.dir, p) {
                full = true; // the repo dir itself (or a parent) changed
                break;
            }
            let rel = if repo.dir.is_empty() {
                p.as_str()
            } else {
                &p[repo.dir.len() + 1..]
            };
            candidates.insert(rel.to_string());
        }
        let mut examined = candidates.len();
        // Many candidates: read every row once; few: ask the index for each.
        let all: Option<BTreeMap<String, FileRow>> = if full || candidates.len() > 64 {
            Some(
                db.repo_files(repo.id)?
                    .into_iter()
                    .map(|r| (r.path.clone(), r))
                    .collect(),
            )
        } else {
            None
        };
        let mut expanded: HashSet<String> = HashSet::new();
        if full {
            expanded.extend(all.iter().flat_map(|m| m.keys().cloned()));
            expanded.extend(self.walk_files(&repo.dir, "")?);
        } else {
            for c in &candidates {
                expanded.insert(c.clone());
                match &all {
                    Some(m) => expanded.extend(
                        m.range::<str, _>((
                            std::ops::Bound::Excluded(format!("{c}/").as_str()),
                            std::ops::Bound::Excluded(format!("{c}0").as_str()),
                        ))
                        .map(|(k, _)| k.clone()),
                    ),
                    None => expanded
                        .extend(db.repo_files_under(repo.id, c)?.into_iter().map(|r| r.path)),
                }
                expanded.extend(self.walk_files(&repo.dir, c)?);
            }
        }
        if full {
            examined = expanded.len();
        }
        if !expanded.is_empty() || last > repo.status_journal_id {
            let rows: HashMap<String, FileRow> = if let Some(m) = all {
                m.into_iter().collect()
            } else {
                let mut m = HashMap::new();
                for p in &expanded {
                    for r in db.repo_files_under(repo.id, p)? {
                        if &r.path == p {
                            m.insert(r.path.clone(), r);
                        }
                    }
                }
                m
            };
            let ignore = self.ignore_matcher(&repo.dir);
            let mut states = Vec::with_capacity(expanded.len());
            for p in expanded {
                let local = self.local_blob(&vfile(&repo.dir, &p))?;
                let row = rows.get(&p);
                let state = match (row.and_then(|r| r.base_oid.as_ref()), local) {
                    (None, None) => None,
                    (None, Some(_)) => {
                        if ignore
                            .as_ref()
                            .is_some_and(|g| g.matched_path_or_any_parents(&p, false).is_ignore())
                        {
                            None
                        } else {
                            Some("created")
                        }
                    }
                    (Some(_), None) => Some("deleted"),
                    (Some(b), Some((o, m))) => {
                        if *b == o.to_string() && row.and_then(|r| r.base_mode) == Some(m) {
                            Some("clean")
                        } else {
                            Some("modified")
                        }
                    }
                };
                states.push((p, state.map(String::from)));
            }
            db.update_status(repo.id, &states, last)?;
        }
        let changes = db
            .repo_changes(repo.id)?
            .into_iter()
            .map(|r| Change {
                path: vfile(&repo.dir, &r.path),
                state: r.state,
            })
            .collect();
        Ok(RepoStatus {
            repo: vdir(&repo.dir),
            url: repo.url.clone(),
            branch: repo.branch.clone(),
            base: repo.base.clone(),
            changes,
            examined,
        })
    }

    /// The repo's root `.gitignore`, as a matcher.
    fn ignore_matcher(&self, dir: &str) -> Option<ignore::gitignore::Gitignore> {
        let Zone::Local(z) = self.zones.zone(ZoneId::Workspace) else {
            return None;
        };
        let root = if dir.is_empty() {
            z.root().to_path_buf()
        } else {
            z.root().join(dir)
        };
        let mut b = ignore::gitignore::GitignoreBuilder::new(&root);
        b.add(root.join(".gitignore"));
        b.build().ok()
    }

    /// Files (and symlinks) at `sub` or beneath it in the repo dir, as repository paths.
    fn walk_files(&self, dir: &str, sub: &str) -> GitResult<Vec<String>> {
        let Zone::Local(z) = self.zones.zone(ZoneId::Workspace) else {
            return Ok(Vec::new());
        };
        let base = if dir.is_empty() {
            z.root().to_path_buf()
        } else {
            z.root().join(dir)
        };
        let start = if sub.is_empty() {
            base.clone()
        } else {
            base.join(sub)
        };
        match std::fs::symlink_metadata(&start) {
            Ok(md) if md.is_dir() => {}
            _ => return Ok(Vec::new()),
        }
        let mut out = Vec::new();
        let walker = ignore::WalkBuilder::new(&start)
            .hidden(false)
            .git_ignore(false)
            .git_exclude(false)
            .git_global(false)
            .ignore(false)
            .parents(false)
            .follow_links(false)
            .filter_entry(|e| e.file_name() != ".git")
            .build();
        for e in walker.flatten() {
            let Some(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                continue;
            }
            if let Ok(rel) = e.path().strip_prefix(&base) {
                if let Some(s) = rel.to_str() {
                    if !s.contains(".sandfs-tmp-") {
                        out.push(s.to_string());
                    }
                }
            }
        }
        Ok(out)
    }

    /// Marks a conflicted file (reported by a pull) as resolved.
    pub fn resolve(&self, v: &str) -> GitResult<Change> {
        let repo = self.repo_for(Some(v))?;
        let rel = self.workspace_dir("path", v)?;
        let path = if repo.dir.is_empty() {
            rel
        } else {
            rel[repo.dir.len()..].trim_start_matches('/').to_string()
        };
        if !self.zones.db().resolve_conflict(repo.id, &path)? {
            return Err(GitError::Nothing(format!(
                "{v} is not in conflict (`sandfs git status` lists conflicts)"
            )));
        }
        Ok(Change {
            path: v.into(),
            state: "modified".into(),
        })
    }

    /// Builds a commit of the chosen changes on the repo's base, in the mirror only.
    pub fn stage(&self, req: &StageRequest) -> GitResult<StagedCommit> {
        let message = req.message.trim();
        if message.is_empty() {
            return Err(GitError::invalid(
                "message",
                "must not be empty; say what the change does",
            ));
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
                        return Err(GitError::invalid(
                            "files",
                            format!("{f} is not in {}", vdir(&repo.dir)),
                        ));
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
                    return Err(GitError::Nothing(format!(
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
            return Err(GitError::Conflict {
                reason: "these files changed upstream too (see the last pull); merge the upstream \
                         change into them, then `sandfs git resolve PATH`"
                    .into(),
                paths: conflicted,
            });
        }
        let mirror_path = PathBuf::from(&repo.mirror);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let base_oid = Oid::from_str(&repo.base).map_err(GitError::git("base id"))?;
        let base = mirror
            .find_commit(base_oid)
            .map_err(GitError::git("read base"))?;
        let base_tree = base.tree().map_err(GitError::git("read base tree"))?;
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
                    let oid = mirror.blob(&bytes).map_err(GitError::git("write blob"))?;
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
            return Err(GitError::Nothing(if changes.is_empty() {
                format!("nothing to stage: {} has no changes", vdir(&repo.dir))
            } else {
                "nothing to stage: every change is already in a staged commit (`sandfs staged list`)"
                    .into()
            }));
        }
        let tree_oid = update
            .create_updated(&mirror, &base_tree)
            .map_err(GitError::git("build tree"))?;
        if tree_oid == base_tree.id() {
            return Err(GitError::Nothing(
                "nothing to stage: the files equal their base".into(),
            ));
        }
        let tree = mirror
            .find_tree(tree_oid)
            .map_err(GitError::git("read tree"))?;
        let now = self.zones.now_ms();
        let sig = self.signature(now)?;
        let commit = mirror
            .commit(None, &sig, &sig, message, &tree, &[&base])
            .map_err(GitError::git("commit"))?;
        let id = commit.to_string()[..10].to_string();
        mirror
            .reference(&staged_ref(&id), commit, true, "sandfs: staged")
            .map_err(GitError::git("keep staged commit"))?;
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
                    GitError::Conflict {
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
        self.show(&id, false)
    }

    fn signature(&self, now_ms: i64) -> GitResult<git2::Signature<'static>> {
        git2::Signature::new(
            &self.settings.author_name,
            &self.settings.author_email,
            &git2::Time::new(now_ms / 1000, 0),
        )
        .map_err(GitError::git("signature"))
    }

    /// Lists staged commits, newest first (only those in `state` when given).
    pub fn list(&self, state: Option<&str>) -> GitResult<Vec<StagedCommit>> {
        let rows = self.zones.db().staged_list(state)?;
        rows.into_iter().map(|r| self.view(r, false)).collect()
    }

    /// Shows a staged commit; `full` includes each file's patch and hunks.
    pub fn show(&self, id: &str, full: bool) -> GitResult<StagedCommit> {
        let row = self
            .zones
            .db()
            .staged(id)?
            .ok_or_else(|| GitError::NoStaged { id: id.into() })?;
        self.view(row, full)
    }

    fn view(&self, r: StagedRow, full: bool) -> GitResult<StagedCommit> {
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

    /// Pushes a staged commit (a human's decision): to its branch, or with `pr` to
    /// `sandfs/<id>` with a pull request. A remote that moved is merged into (three-way); a
    /// conflict, a rejection or a lease broken twice leaves nothing pushed.
    pub fn push(&self, req: &PushRequest, progress: OnProgress<'_>) -> GitResult<PushResult> {
        let started = Instant::now();
        let row = self
            .zones
            .db()
            .staged(&req.id)?
            .ok_or_else(|| GitError::NoStaged { id: req.id.clone() })?;
        if !matches!(row.state.as_str(), "staged" | "rebased" | "rejected") {
            return Err(GitError::WrongState {
                id: row.id,
                state: row.state.clone(),
                rule: match row.state.as_str() {
                    "pushed" => "it was pushed already".into(),
                    "discarded" => "it was discarded".into(),
                    _ => "stage the change again after resolving the conflict".into(),
                },
            });
        }
        let repo = self
            .zones
            .db()
            .repo(row.repo_id)?
            .ok_or_else(|| GitError::NoRepo {
                dir: "(repository of this staged commit)".into(),
            })?;
        let mirror_path = PathBuf::from(&repo.mirror);
        let lock = self.lock_for(&mirror_path);
        let _guard = lock.lock().expect("not poisoned");
        let mirror = self.open_mirror(&mirror_path)?;
        let target = if req.pr {
            format!("refs/heads/sandfs/{}", row.id)
        } else {
            format!("refs/heads/{}", row.branch)
        };
        // Everything a pull request needs is checked before anything is pushed.
        let pr_target = if req.pr {
            Some(pr::Target::new(&self.settings, &repo.url)?)
        } else {
            None
        };
        let src = staged_ref(&row.id);
        let mut attempt = 0;
        let outcome = loop {
            attempt += 1;
            let r = self.push_once(&mirror, &repo, &row, &target, &src, req.pr, progress);
            match r {
                Err(GitError::RemoteMoved { .. }) if attempt < 2 => continue,
                other => break other,
            }
        };
        let now = self.zones.now_ms();
        let db = self.zones.db();
        let (commit, rebased) = match outcome {
            Ok((c, r)) => (c, r || row.state == "rebased"),
            Err(e) => {
                let (state, conflicts) = match &e {
                    GitError::Conflict { paths, .. } => ("conflicted", paths.clone()),
                    GitError::Rejected { .. } => ("rejected", Vec::new()),
                    GitError::NeedsReview { .. } => ("rebased", Vec::new()),
                    _ => (row.state.as_str(), row.conflicts.clone()),
                };
                db.set_staged_state(
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
                return Err(e);
            }
        };
        let mut url = None;
        if let Some(t) = &pr_target {
            let files = db.staged_files(&row.id)?;
            match t.open(&self.settings, &row, &format!("sandfs/{}", row.id), &files) {
                Ok(u) => url = Some(u),
                Err(e) => {
                    // The branch is on the remote; say so, so that a retry is understood.
                    db.set_staged_state(
                        &row.id,
                        &row.state,
                        Some(&format!(
                            "pushed to {target}, but the pull request failed: {e}"
                        )),
                        &[],
                        Some(&commit.to_string()),
                        None,
                        Some(&target),
                        None,
                        now,
                    )?;
                    return Err(e);
                }
            }
        }
        db.set_staged_state(
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
        if !req.pr && !rebased && row.base == repo.base {
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
                .reference(&base_ref(&repo.dir), commit, true, "sandfs: pushed")
                .map_err(GitError::git("pin base"))?;
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
    ) -> GitResult<(Oid, bool)> {
        if mirror.is_shallow() {
            // libgit2 cannot build a pack on top of a shallow boundary (it walks the base's
            // missing parents): fetch the branch's history once, at the first push.
            let b = &repo.branch;
            remote::fetch(
                mirror,
                &repo.url,
                &[format!("+refs/heads/{b}:refs/sandfs/remote/{b}")],
                remote::UNSHALLOW,
                &self.settings,
                progress,
            )?;
        }
        let (refs, _) = remote::ls_remote(mirror, &repo.url, &self.settings)?;
        let remote_tip = refs.get(target).copied().unwrap_or(Oid::ZERO_SHA1);
        let staged = mirror
            .refname_to_id(src)
            .map_err(GitError::git("find staged commit"))?;
        let base = Oid::from_str(&row.base).map_err(GitError::git("base id"))?;
        let mut commit = staged;
        let mut rebased = false;
        if !pr && !remote_tip.is_zero() && remote_tip != base {
            let staged_commit = mirror.find_commit(staged).map_err(GitError::git("read"))?;
            if staged_commit.parent_id(0).ok() == Some(remote_tip) {
                // Already rebased onto this tip (a re-reviewed commit).
            } else {
                let tracking = format!("refs/sandfs/remote/{}", row.branch);
                remote::fetch(
                    mirror,
                    &repo.url,
                    &[format!("+{target}:{tracking}")],
                    1,
                    &self.settings,
                    progress,
                )?;
                let tip = mirror
                    .refname_to_id(&tracking)
                    .map_err(GitError::git("tip"))?;
                let (new_commit, overlap) = self.rebase(mirror, base, tip, staged_commit)?;
                mirror
                    .reference(src, new_commit, true, "sandfs: rebased")
                    .map_err(GitError::git("keep rebased commit"))?;
                // The rebased commit is what will be reviewed and pushed from now on.
                let tip_tree = mirror
                    .find_commit(tip)
                    .and_then(|c| c.tree())
                    .map_err(GitError::git("read tip"))?;
                let new_tree = mirror
                    .find_commit(new_commit)
                    .and_then(|c| c.tree())
                    .map_err(GitError::git("read rebased"))?;
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
                    return Err(GitError::NeedsReview {
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
    ) -> GitResult<(Oid, Vec<String>)> {
        let read_tree = |o: Oid| {
            mirror
                .find_commit(o)
                .and_then(|c| c.tree())
                .map_err(GitError::git("read tree"))
        };
        let base_tree = read_tree(base)?;
        let tip_tree = read_tree(tip)?;
        let staged_tree = staged.tree().map_err(GitError::git("read tree"))?;
        let mut index = mirror
            .merge_trees(&base_tree, &tip_tree, &staged_tree, None)
            .map_err(GitError::git("merge"))?;
        if index.has_conflicts() {
            let mut paths: Vec<String> = index
                .conflicts()
                .map_err(GitError::git("merge"))?
                .flatten()
                .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                .collect();
            paths.sort();
            paths.dedup();
            return Err(GitError::Conflict {
                reason: format!(
                    "the remote branch moved to {} and changed the same lines; nothing was pushed",
                    remote::short(tip)
                ),
                paths,
            });
        }
        let changed = |a: &git2::Tree<'_>, b: &git2::Tree<'_>| -> GitResult<HashSet<String>> {
            let d = mirror
                .diff_tree_to_tree(Some(a), Some(b), None)
                .map_err(GitError::git("diff"))?;
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
            .map_err(GitError::git("write merged tree"))?;
        let tree = mirror.find_tree(tree_oid).map_err(GitError::git("read"))?;
        let tip_commit = mirror.find_commit(tip).map_err(GitError::git("read tip"))?;
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
            .map_err(GitError::git("commit"))?;
        Ok((new, overlap))
    }

    /// Discards a staged commit; with `revert`, puts its files back to their base (files changed
    /// again since staging are kept and reported).
    pub fn discard(&self, id: &str, revert: bool) -> GitResult<DiscardResult> {
        let row = self
            .zones
            .db()
            .staged(id)?
            .ok_or_else(|| GitError::NoStaged { id: id.into() })?;
        if row.state == "pushed" {
            return Err(GitError::WrongState {
                id: id.into(),
                state: row.state,
                rule: "a pushed commit cannot be discarded".into(),
            });
        }
        if row.state == "discarded" {
            return Err(GitError::Discarded { id: id.into() });
        }
        let repo = self.zones.db().repo(row.repo_id)?.ok_or(GitError::NoRepo {
            dir: "(repository of this staged commit)".into(),
        })?;
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
                .map_err(GitError::git("read base"))?;
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
                .map_err(GitError::git("walk base tree"))?;
            for f in self.zones.db().staged_files(id)? {
                let v = vfile(&repo.dir, &f.path);
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
                        let blob = mirror
                            .find_blob(entry.id())
                            .map_err(GitError::git("read blob"))?;
                        if let Err(Refusal::Changed(reason) | Refusal::Skipped(reason)) = self
                            .write_entry(
                                &v,
                                &repo.dir,
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
                            self.prune_empty_parents(&repo.dir, &f.path, origin_git());
                        }
                    }
                }
                reverted.push(v);
            }
        }
        if let Ok(mut r) = mirror.find_reference(&staged_ref(id)) {
            r.delete().map_err(GitError::git("delete staged ref"))?;
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
        self.event(
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

/// Why a pulled or reverted entry was not written.
enum Refusal {
    /// The local entry is not what the pull expected (changed meanwhile, or of another type):
    /// a conflict, both sides kept.
    Changed(String),
    /// The entry cannot be written at all (a symlink out of the repository, a bad target).
    Skipped(String),
}

fn file_mode(mode: u32) -> git2::FileMode {
    match mode {
        MODE_EXEC => git2::FileMode::BlobExecutable,
        MODE_LINK => git2::FileMode::Link,
        _ => git2::FileMode::Blob,
    }
}

fn hash_blob(bytes: &[u8]) -> Oid {
    Oid::hash_object(ObjectType::Blob, bytes).expect("hashing memory cannot fail")
}

fn staged_ref(id: &str) -> String {
    format!("refs/sandfs/staged/{id}")
}

fn base_ref(dir: &str) -> String {
    let h = hash_blob(dir.as_bytes()).to_string();
    format!("refs/sandfs/base/{}", &h[..16])
}

/// The repository's name: the last path segment of its URL, without `.git`.
pub fn repo_name(url: &str) -> String {
    let last = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo");
    let name = last.trim_end_matches(".git");
    if name.is_empty() {
        "repo".into()
    } else {
        name.into()
    }
}

fn check_branch(b: &str) -> GitResult<()> {
    let bad = b.is_empty()
        || b.starts_with('-')
        || b.starts_with('/')
        || b.ends_with('/')
        || b.ends_with(".lock")
        || b.contains("..")
        || b.contains("//")
        || b.contains("@{")
        || b.chars()
            .any(|c| c.is_ascii_control() || " ~^:?*[\\".contains(c));
    if bad {
        return Err(GitError::invalid(
            "branch",
            format!("{b:?} is not a valid branch name"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare repository at `dir/up.git` whose `main` holds `files`, committed on top of the
    /// previous tip; returns its path.
    fn commit_files(dir: &Path, files: &[(&str, &str)]) -> PathBuf {
        let path = dir.join("up.git");
        let repo = Repository::open_bare(&path)
            .or_else(|_| Repository::init_bare(&path))
            .unwrap();
        let mut tb = repo.treebuilder(None).unwrap();
        for (name, content) in files {
            let oid = repo.blob(content.as_bytes()).unwrap();
            tb.insert(name, oid, 0o100644).unwrap();
        }
        let tree = repo.find_tree(tb.write().unwrap()).unwrap();
        let sig = git2::Signature::new("t", "t@example.invalid", &git2::Time::new(0, 0)).unwrap();
        let parent = repo
            .refname_to_id("refs/heads/main")
            .ok()
            .map(|o| repo.find_commit(o).unwrap());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        repo.commit(Some("refs/heads/main"), &sig, &sig, "c", &tree, &parents)
            .unwrap();
        path
    }

    /// Zones under `dir/z`, a git service over them, and a pull request of `dir/up.git` (made
    /// with `first`) into /workspace/r, pulled once.
    fn pulled(dir: &Path, first: &[(&str, &str)]) -> (Arc<Zones>, Git, PullRequest) {
        let settings = Settings::from_str("[zones]\nroot = \"z\"\n", "test", dir, None).unwrap();
        let zones = Arc::new(
            Zones::open(
                &settings,
                Arc::new(crate::state::Db::open_in_memory().unwrap()),
                crate::core::system_clock(),
            )
            .unwrap(),
        );
        let git = Git::new(zones.clone(), &settings);
        let up = commit_files(dir, first);
        let req = PullRequest {
            remote: up.display().to_string(),
            branch: Some("main".into()),
            paths: vec![],
            into: Some("/workspace/r".into()),
            progress: false,
        };
        git.pull(&req, &|_| {}).unwrap();
        (zones, git, req)
    }

    #[test]
    fn a_write_acknowledged_during_a_pull_is_a_conflict_not_a_lost_write() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let (zones, git, req) = pulled(dir.path(), &[("f.txt", "v1\n")]);
        commit_files(dir.path(), &[("f.txt", "v2\n")]);
        // The agent's write lands after the pull checked f.txt and before it replaces it.
        let real = dir.path().join("z/workspace/r/f.txt");
        let once = Arc::new(AtomicBool::new(false));
        let (writer, flag) = (real.clone(), once.clone());
        *zones.before_replace.lock().unwrap() = Some(Box::new(move || {
            if !flag.swap(true, Ordering::SeqCst) {
                std::fs::write(&writer, "acknowledged\n").unwrap();
            }
        }));
        let r = git.pull(&req, &|_| {}).unwrap();
        *zones.before_replace.lock().unwrap() = None;
        assert!(once.load(Ordering::SeqCst), "the hook ran");
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "acknowledged\n");
        assert_eq!(r.written, 0, "{r:?}");
        assert_eq!(r.conflicts.len(), 1, "{r:?}");
        assert!(
            r.conflicts[0].reason.contains("while the pull ran"),
            "{r:?}"
        );
        let kept = r.conflicts[0]
            .upstream
            .as_deref()
            .expect("upstream copy kept");
        assert_eq!(zones.read(kept, None, None).unwrap().content, "v2\n");
    }

    #[test]
    fn a_write_acknowledged_before_a_pull_deletes_the_file_is_kept() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let (zones, git, req) = pulled(dir.path(), &[("f.txt", "v1\n"), ("g.txt", "g\n")]);
        commit_files(dir.path(), &[("g.txt", "g\n")]); // f.txt deleted upstream
        let real = dir.path().join("z/workspace/r/f.txt");
        let once = Arc::new(AtomicBool::new(false));
        let (writer, flag) = (real.clone(), once.clone());
        *zones.before_replace.lock().unwrap() = Some(Box::new(move || {
            if !flag.swap(true, Ordering::SeqCst) {
                std::fs::write(&writer, "acknowledged\n").unwrap();
            }
        }));
        let r = git.pull(&req, &|_| {}).unwrap();
        *zones.before_replace.lock().unwrap() = None;
        assert!(once.load(Ordering::SeqCst), "the hook ran");
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "acknowledged\n");
        assert_eq!(r.deleted, 0, "{r:?}");
        assert_eq!(r.conflicts.len(), 1, "{r:?}");
        assert!(
            r.conflicts[0].reason.contains("while the pull ran"),
            "{r:?}"
        );
    }

    #[test]
    fn a_path_that_cannot_be_read_is_skipped_and_the_rest_of_the_pull_lands() {
        let dir = tempfile::tempdir().unwrap();
        let (zones, git, req) = pulled(dir.path(), &[("a.txt", "a1\n"), ("b.txt", "b1\n")]);
        // b.txt gains a second link outside the zone: the default config refuses to read it.
        let b = dir.path().join("z/workspace/r/b.txt");
        std::fs::hard_link(&b, dir.path().join("outside.txt")).unwrap();
        assert!(zones.read("/workspace/r/b.txt", None, None).is_err());
        let tip = commit_files(dir.path(), &[("a.txt", "a2\n"), ("b.txt", "b2\n")]);
        let r = git.pull(&req, &|_| {}).unwrap();
        assert_eq!(r.written, 1, "{r:?}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("z/workspace/r/a.txt")).unwrap(),
            "a2\n"
        );
        assert_eq!(r.skipped.len(), 1, "{r:?}");
        assert_eq!(r.skipped[0].path, "/workspace/r/b.txt", "{r:?}");
        assert_eq!(
            std::fs::read_to_string(&b).unwrap(),
            "b1\n",
            "left as it was"
        );
        // The pull was recorded: its base is the new tip.
        let upstream = Repository::open_bare(&tip).unwrap();
        let head = upstream
            .refname_to_id("refs/heads/main")
            .unwrap()
            .to_string();
        assert_eq!(zones.db().repo_by_dir("r").unwrap().unwrap().base, head);
    }

    #[test]
    fn names_links_and_paths() {
        assert_eq!(repo_name("https://h/o/r.git"), "r");
        assert_eq!(repo_name("git@h:o/r.git"), "r");
        assert_eq!(repo_name("/srv/r/"), "r");
        assert!(repo_path("p", "../x").is_err());
        assert_eq!(repo_path("p", "/src/").unwrap(), "src");
        assert!(check_branch("main").is_ok());
        assert!(check_branch("feat/x").is_ok());
        assert!(check_branch("a..b").is_err());
        assert!(check_branch("-x").is_err());
        assert!(under("a/b", "a") && !under("ab", "a") && under("x", ""));
    }
}

//! Git sync: pull a branch into the workspace, track what the agent changed, stage the changes as
//! reviewable commits, and push them (with a lease) once a human says so.
//!
//! Each remote has a daemon-owned bare mirror under `<state_dir>/git/`, fetched shallowly (depth
//! 1). A pull writes the chosen paths into a workspace directory through the core (same path
//! rules, same journal) and records each file's base blob. `status` re-hashes only the paths the
//! journal says changed since it last looked. `stage` builds a commit in the mirror's object store
//! only (blobs → tree update → commit on the base), keeps it at `refs/wardfs/staged/<id>` and
//! records it with per-file git-format diffs; the workspace and anyone's own checkout are never
//! touched. `push` fetches the target, rebases with a three-way tree merge when it moved, and
//! pushes with a lease; [`pr`] opens pull requests. Every step lands in the journal.
//!
//! A fork of the workspace (`/forks/NAME`) holds the pulled repositories too: status and stage
//! read a fork's files in place of the workspace's (`--fork NAME`, or a path in the fork) and
//! stage its changes on the same base; a staged commit records the zone it was read from and
//! the writers of each file ([`place`]).
//!
//! One file per operation: `pull.rs`, `status.rs` (with `resolve`), `stage.rs` (with `list` and
//! `show`), `push.rs`, `discard.rs`, each with its request, result and error types; this file
//! keeps the service, the helpers they share and the path rules. [`error`] holds the failures
//! the operations share, [`remote`] talks to git servers, [`diff`] reads and writes patches,
//! [`pr`] opens pull requests, [`prune`] sweeps staging leftovers, [`memory`] caps what libgit2
//! allocates at once while it reads what a remote sent. [`fsmonitor`] answers git's file-system
//! monitor hook for a person's own checkout inside a zone, from the journal.
//!
//! May import `core`, `state` and `config`; never an adapter or `sandbox` (`tests/rules` checks
//! the imports).

pub mod diff;
mod discard;
pub mod error;
pub mod fsmonitor;
pub mod memory;
mod place;
pub mod pr;
pub mod prune;
mod pull;
mod push;
pub mod remote;
mod stage;
mod status;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use git2::{ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};
use serde::{Deserialize, Serialize};

/// Who changed a staged file (the journal's row writer), as a staged commit records it.
pub use crate::state::Writer;
pub use discard::{DiscardError, DiscardResult};
pub use error::{CommonError, GitFailure, InvalidArg, Libgit2Error, RemoteError};
pub use pr::PrError;
pub use prune::GcError;
pub use pull::{PathNote, PullConflict, PullError, PullRequest, PullResult};
pub use push::{PushError, PushRequest, PushResult};
pub use remote::{OnProgress, Progress};
pub use stage::{ListError, ShowError, StageError, StageRequest, StagedCommit, StagedFile};
pub use status::{Change, RepoStatus, ResolveError, StatusError, StatusResult};

use crate::config::{GitSection, Settings};
use crate::core::foreign::{self, GitDir, LinkResolver};
use crate::core::{EntryKind, ErrorCode, FsError, Replacement, Seen, VPath, ZoneId, Zones};
use crate::state::{FileRow, Origin, RepoRow, StagedRow, Via};
use error::{invalid, libgit2, lift_common};

const MODE_FILE: u32 = 0o100644;
const MODE_EXEC: u32 = 0o100755;
const MODE_LINK: u32 = 0o120000;

/// The git service: one per daemon.
pub struct Git {
    zones: Arc<Zones>,
    settings: GitSection,
    mirrors: PathBuf,
    locks: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    /// What status could not look at, per repository.
    left_out: status::LeftOut,
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
    vdir_in(WORKSPACE, dir)
}

fn vfile(dir: &str, path: &str) -> String {
    vfile_in(WORKSPACE, dir, path)
}

/// The zone a repository is pulled into (and a staged commit's zone unless a fork's).
const WORKSPACE: &str = "workspace";

/// The virtual path of the directory `dir` of the zone named `zone` (`workspace`, `forks/a`).
fn vdir_in(zone: &str, dir: &str) -> String {
    if dir.is_empty() {
        format!("/{zone}")
    } else {
        format!("/{zone}/{dir}")
    }
}

/// The virtual path of the file `path` of the repository at `dir` of the zone named `zone`.
fn vfile_in(zone: &str, dir: &str, path: &str) -> String {
    if dir.is_empty() {
        format!("/{zone}/{path}")
    } else {
        format!("/{zone}/{dir}/{path}")
    }
}

/// Normalizes a repository path given by a user: relative, `/`-separated, no `.`/`..`.
fn repo_path(name: &str, p: &str) -> Result<String, InvalidArg> {
    let t = p.trim_matches('/');
    if t.is_empty() {
        return Ok(String::new());
    }
    if p.contains('\0') || t.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return Err(invalid(
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
        memory::install();
        Git {
            zones,
            settings: settings.git.clone(),
            mirrors: settings.state_dir.join("git"),
            locks: Mutex::new(HashMap::new()),
            left_out: status::LeftOut::default(),
        }
    }

    /// The most libgit2 may allocate at once while it fetches, or reads what a pull takes
    /// ([`memory::Cap`]): the largest file a pull takes plus libgit2's own buffers.
    fn object_cap(&self) -> u64 {
        self.zones
            .limits()
            .git_blob_bytes
            .saturating_add(memory::HEADROOM)
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
    pub fn expand_remote(&self, spec: &str) -> Result<String, InvalidArg> {
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(invalid("remote", "must not be empty"));
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
                    return Err(invalid(
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

    fn open_mirror(&self, path: &Path) -> Result<Repository, CommonError> {
        let mirror = if path.join("HEAD").exists() {
            Repository::open_bare(path)
                .map_err(libgit2(format!("open mirror {}", path.display())))?
        } else {
            std::fs::create_dir_all(path).map_err(|e| FsError::Io {
                path: path.display().to_string(),
                op: "create mirror",
                source: e,
            })?;
            Repository::init_bare(path)
                .map_err(libgit2(format!("create mirror {}", path.display())))?
        };
        Ok(mirror)
    }

    /// The workspace-relative directory for a virtual path (which must be in /workspace).
    fn workspace_dir(&self, name: &str, v: &str) -> Result<String, CommonError> {
        match crate::core::path::parse(v)? {
            crate::core::Target::Zone(vp) if vp.zone() == ZoneId::Workspace => {
                Ok(vp.rel().to_string())
            }
            _ => Err(invalid(name, format!("{v:?} must be a directory in /workspace")).into()),
        }
    }

    fn event(&self, dir: &str, op: &str, detail: &str) {
        self.event_in(ZoneId::Workspace, dir, op, detail);
    }

    /// Journals a git event on the directory `dir` of `zone` (a fork's stage is the fork's).
    fn event_in(&self, zone: ZoneId, dir: &str, op: &str, detail: &str) {
        if let Ok(vp) = VPath::new(zone, dir) {
            self.zones.record_event(&vp, op, detail, origin_git());
        }
    }

    /// Removes directories left empty by deleting `path` (best effort, up to the repo dir) of
    /// the zone named `zone`.
    fn prune_empty_parents(&self, zone: &str, dir: &str, path: &str, origin: Origin) {
        let mut p = path;
        while let Some((parent, _)) = p.rsplit_once('/') {
            if self
                .zones
                .delete(&vfile_in(zone, dir, parent), false, origin)
                .is_err()
            {
                break;
            }
            p = parent;
        }
    }

    /// Writes one pulled entry at `v` (`path` in its repository) as itself: a symlink
    /// there is replaced, never written through, and only if the entry is still what `seen`
    /// recorded. A symlink is written only when it resolves beneath the repository through the
    /// tree's own links; nothing is written beneath a parent that is a symlink locally.
    fn write_entry(
        &self,
        v: &str,
        path: &str,
        content: &[u8],
        mode: u32,
        seen: Seen,
        links: &LinkResolver,
    ) -> Result<(), Refusal> {
        // The parents of `path` in the repository, as virtual paths: `v` one level up at a time.
        let (mut parent, mut vparent) = (path, v);
        while let Some((p, _)) = parent.rsplit_once('/') {
            vparent = vparent.rsplit_once('/').map_or(vparent, |(up, _)| up);
            if let Ok(st) = self.zones.stat(vparent) {
                if st.kind != EntryKind::Dir {
                    return Err(Refusal::Changed(format!(
                        "{vparent} is a {} locally, a directory upstream",
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
    fn look(&self, v: &str) -> Result<(Seen, Option<(Oid, u32)>), FsError> {
        let seen = self.zones.seen(v)?;
        Ok((seen, self.local_blob(v)?))
    }

    /// The blob id and git mode of what is at `v` now (None: nothing, or a directory). A file is
    /// hashed as it streams by, so its size does not matter.
    fn local_blob(&self, v: &str) -> Result<Option<(Oid, u32)>, FsError> {
        let st = match self.zones.stat(v) {
            Ok(st) => st,
            Err(e) if matches!(e.code(), ErrorCode::NotFound | ErrorCode::NotDir) => {
                return Ok(None)
            }
            Err(e) => return Err(e),
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
                            })
                        }
                    }
                }
                let oid = Oid::from_bytes(&hasher.finalize()).expect("20 bytes");
                Ok(Some((oid, git_mode(st.mode))))
            }
            EntryKind::Symlink => Ok(Some((
                hash_blob(self.zones.readlink(v)?.as_bytes()),
                MODE_LINK,
            ))),
            _ => Ok(None),
        }
    }

    /// Writes what is at `v` now into `mirror`'s object database and returns its blob id and
    /// git mode (None: nothing, or a directory). A file is streamed into the object database as
    /// it is read, so its size does not matter.
    fn store_local(&self, mirror: &Repository, v: &str) -> Result<Option<(Oid, u32)>, CommonError> {
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
                let (f, size) = self.zones.read_binary(v)?;
                let odb = mirror.odb().map_err(libgit2("open object database"))?;
                let mut blob = odb
                    .writer(size as usize, ObjectType::Blob)
                    .map_err(libgit2(format!("write blob of {v}")))?;
                let copied =
                    std::io::copy(&mut f.take(size), &mut blob).map_err(|e| FsError::Io {
                        path: v.into(),
                        op: "read",
                        source: e,
                    })?;
                if copied != size {
                    return Err(FsError::Io {
                        path: v.into(),
                        op: "read",
                        source: std::io::Error::other(format!(
                            "the file shrank from {size} to {copied} bytes while it was staged"
                        )),
                    }
                    .into());
                }
                let oid = blob
                    .finalize()
                    .map_err(libgit2(format!("write blob of {v}")))?;
                Ok(Some((oid, git_mode(st.mode))))
            }
            EntryKind::Symlink => {
                let target = self.zones.readlink(v)?;
                let oid = mirror
                    .blob(target.as_bytes())
                    .map_err(libgit2("write blob"))?;
                Ok(Some((oid, MODE_LINK)))
            }
            _ => Ok(None),
        }
    }

    /// The pulled repository a staged commit belongs to.
    fn repo_of(&self, row: &StagedRow) -> Result<RepoRow, CommonError> {
        self.zones
            .db()
            .repo(row.repo_id)?
            .ok_or_else(|| CommonError::NoRepo {
                dir: "(repository of this staged commit)".into(),
            })
    }

    /// Finds the repo `v` (a virtual path, in /workspace or in a fork) belongs to, or the only
    /// repo when `v` is None.
    pub fn repo_for(&self, v: Option<&str>) -> Result<RepoRow, CommonError> {
        let repos = self.zones.db().repos()?;
        match v {
            Some(v) => {
                let rel = self.repo_dir("repo", v)?;
                repos
                    .into_iter()
                    .filter(|r| under(&rel, &r.dir))
                    .max_by_key(|r| r.dir.len())
                    .ok_or(CommonError::NoRepo { dir: v.to_string() })
            }
            None => match repos.len() {
                0 => Err(CommonError::NoRepo {
                    dir: "/workspace".into(),
                }),
                1 => Ok(repos.into_iter().next().expect("one")),
                _ => Err(CommonError::WhichRepo(format!(
                    "several repositories are pulled ({}); name one with --repo DIR (`repo` \
                     in the API)",
                    repos
                        .iter()
                        .map(|r| vdir(&r.dir))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            },
        }
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

/// The git mode of a regular file of permission bits `mode`.
fn git_mode(mode: u32) -> u32 {
    if mode & 0o111 != 0 {
        MODE_EXEC
    } else {
        MODE_FILE
    }
}

fn hash_blob(bytes: &[u8]) -> Oid {
    Oid::hash_object(ObjectType::Blob, bytes).expect("hashing memory cannot fail")
}

fn staged_ref(id: &str) -> String {
    format!("refs/wardfs/staged/{id}")
}

fn base_ref(dir: &str) -> String {
    let h = hash_blob(dir.as_bytes()).to_string();
    format!("refs/wardfs/base/{}", &h[..16])
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

fn check_branch(b: &str) -> Result<(), InvalidArg> {
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
        return Err(invalid(
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
        pulled_with(dir, first, "")
    }

    /// [`pulled`] with `extra` appended to the config.
    fn pulled_with(
        dir: &Path,
        first: &[(&str, &str)],
        extra: &str,
    ) -> (Arc<Zones>, Git, PullRequest) {
        let config = format!(
            "[zones]\nroot = \"z\"\n[git]\nlocal_remotes = [\"{}\"]\n{extra}",
            dir.display()
        );
        let settings = Settings::from_str(&config, "test", dir, None).unwrap();
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

    /// Pulls again while the agent writes `r/f.txt` (acknowledged) after the pull checked it and
    /// before the pull replaces or removes it; checks the write ran and is still there.
    fn pull_with_a_write_in_between(
        dir: &Path,
        zones: &Zones,
        git: &Git,
        req: &PullRequest,
    ) -> PullResult {
        use std::sync::atomic::{AtomicBool, Ordering};
        let real = dir.join("z/workspace/r/f.txt");
        let once = Arc::new(AtomicBool::new(false));
        let (writer, flag) = (real.clone(), once.clone());
        *zones.before_replace.lock().unwrap() = Some(Box::new(move || {
            if !flag.swap(true, Ordering::SeqCst) {
                std::fs::write(&writer, "acknowledged\n").unwrap();
            }
        }));
        let r = git.pull(req, &|_| {}).unwrap();
        *zones.before_replace.lock().unwrap() = None;
        assert!(once.load(Ordering::SeqCst), "the hook ran");
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "acknowledged\n");
        r
    }

    #[test]
    fn a_write_acknowledged_during_a_pull_is_a_conflict_not_a_lost_write() {
        let dir = tempfile::tempdir().unwrap();
        let (zones, git, req) = pulled(dir.path(), &[("f.txt", "v1\n")]);
        commit_files(dir.path(), &[("f.txt", "v2\n")]);
        // The agent's write lands after the pull checked f.txt and before it replaces it.
        let r = pull_with_a_write_in_between(dir.path(), &zones, &git, &req);
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
        let dir = tempfile::tempdir().unwrap();
        let (zones, git, req) = pulled(dir.path(), &[("f.txt", "v1\n"), ("g.txt", "g\n")]);
        commit_files(dir.path(), &[("g.txt", "g\n")]); // f.txt deleted upstream
        let r = pull_with_a_write_in_between(dir.path(), &zones, &git, &req);
        assert_eq!(r.deleted, 0, "{r:?}");
        assert_eq!(r.conflicts.len(), 1, "{r:?}");
        assert!(
            r.conflicts[0].reason.contains("while the pull ran"),
            "{r:?}"
        );
    }

    #[test]
    fn a_path_that_cannot_be_replaced_is_skipped_and_the_rest_of_the_pull_lands() {
        let dir = tempfile::tempdir().unwrap();
        let (zones, git, req) = pulled(dir.path(), &[("a.txt", "a1\n"), ("b.txt", "b1\n")]);
        // b.txt is made immutable (`chattr +i`): not even root may replace it.
        let b = dir.path().join("z/workspace/r/b.txt");
        let immutable = |on: bool| {
            let f = std::fs::File::open(&b).unwrap();
            let flags = rustix::fs::ioctl_getflags(&f).unwrap();
            let flags = match on {
                true => flags | rustix::fs::IFlags::IMMUTABLE,
                false => flags - rustix::fs::IFlags::IMMUTABLE,
            };
            rustix::fs::ioctl_setflags(&f, flags).unwrap();
        };
        immutable(true);
        let tip = commit_files(dir.path(), &[("a.txt", "a2\n"), ("b.txt", "b2\n")]);
        let r = git.pull(&req, &|_| {});
        immutable(false);
        let r = r.unwrap();
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
    fn a_file_over_the_blob_limit_is_skipped_unread_and_the_rest_lands() {
        let dir = tempfile::tempdir().unwrap();
        let big = "x".repeat(5000);
        let (zones, git, req) = pulled_with(
            dir.path(),
            &[("a.txt", "a1\n")],
            "[limits]\ngit_blob_bytes = 4096\n",
        );
        commit_files(dir.path(), &[("a.txt", "a2\n"), ("big.bin", &big)]);
        let r = git.pull(&req, &|_| {}).unwrap();
        assert_eq!(r.written, 1, "{r:?}");
        assert_eq!(
            zones
                .read("/workspace/r/a.txt", None, None)
                .unwrap()
                .content,
            "a2\n"
        );
        assert_eq!(r.skipped.len(), 1, "{r:?}");
        assert_eq!(r.skipped[0].path, "/workspace/r/big.bin");
        assert!(
            r.skipped[0].reason.contains("5000 bytes")
                && r.skipped[0].reason.contains("limits.git_blob_bytes"),
            "{r:?}"
        );
        assert!(!dir.path().join("z/workspace/r/big.bin").exists());
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

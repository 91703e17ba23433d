//! `status`: what the agent changed in each pulled repository since its base. Only the paths the
//! journal names since the last look are hashed again (`rescan` hashes everything); `resolve`
//! marks a conflicted file as merged. [`StatusError`] and [`ResolveError`] say why they failed.
//!
//! What status cannot look at is named, never dropped: a name that is not UTF-8 (every wardfs
//! and git path here is; made beside wardfs or through the mount) or a directory that could not
//! be read. [`LeftOut`] keeps what the walks found, per repository, so that every status and
//! stage names it until it is gone, not only the call whose walk came across it.

use std::os::unix::ffi::OsStrExt as _;

use super::*;
use crate::core::text;

/// One changed file in `status`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Change {
    /// The virtual path.
    pub path: String,
    /// `created`, `modified`, `deleted` (relative to the pulled base), or `conflict`: changed
    /// upstream and locally (reported by a pull; resolve it before staging).
    pub state: String,
}

/// The changes of one pulled repository.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RepoStatus {
    /// The repository's workspace directory.
    pub repo: String,
    /// The remote URL.
    pub url: String,
    /// The branch pulled.
    pub branch: String,
    /// The commit the files are compared with (the last pull, or the last direct push of a
    /// commit built on it).
    pub base: String,
    /// Every file that differs from the base, sorted by path (empty when clean). Files already
    /// in a staged commit are still listed until pushed or reverted.
    pub changes: Vec<Change>,
    /// Paths from the journal re-hashed by this call; 0 when nothing changed, and also after a
    /// full re-hash (`rescan`, or a change to the directory itself).
    pub examined: usize,
    /// What status cannot look at, so cannot report or stage, and why: a name that is not UTF-8
    /// (made beside wardfs or through the mount; escaped as git quotes it, the path from the zone
    /// on in quotes: `/workspace/"r/bad\377.txt"`), a directory that could not be read. Sorted;
    /// the first 1,000 are named.
    #[serde(default)]
    pub skipped: Vec<PathNote>,
    /// Number of such paths (all of them; `skipped` names the first 1,000).
    #[serde(default)]
    pub skipped_total: usize,
}

/// `status`'s answer: the status of the pulled repositories.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StatusResult {
    /// One entry per repository (none pulled: empty).
    pub repos: Vec<RepoStatus>,
}

/// Why `status` failed: only in the ways every operation shares (a path outside /workspace, no
/// repository there, the workspace or the state database).
pub type StatusError = CommonError;

/// Why `resolve` failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error(transparent)]
    Common(#[from] CommonError),
    #[error("{path} is not in conflict (`wardfs git status` lists conflicts)")]
    NotInConflict { path: String },
}

lift_common!(ResolveError);

/// The most paths [`LeftOut`] keeps per repository (the rest are only counted): a tree of ten
/// million such names must not hold the daemon's memory.
const MAX_LEFT_OUT: usize = 10_000;

/// Why a name that is not UTF-8 is left out.
const NOT_UTF8: &str = "a name that is not UTF-8 (every wardfs path is); rename it to stage it";

/// Why a directory whose name is not UTF-8 is left out, with what it holds.
const DIR_NOT_UTF8: &str = "a directory whose name is not UTF-8 (every wardfs path is): \
                            nothing beneath it is looked at; rename it to stage what it holds";

/// What a walk beneath a repository directory found: its files and symlinks (repository paths)
/// and what it could not look at.
#[derive(Default)]
pub(super) struct Walked {
    pub(super) files: Vec<String>,
    pub(super) left_out: Vec<(Vec<u8>, String)>,
    /// Paths left out past [`MAX_LEFT_OUT`], counted only.
    pub(super) more: usize,
}

impl Walked {
    fn leave_out(&mut self, path: Vec<u8>, reason: String) {
        if self.left_out.len() < MAX_LEFT_OUT {
            self.left_out.push((path, reason));
        } else {
            self.more += 1;
        }
    }
}

/// What status could not look at in each repository, by repository id: repository paths (as
/// bytes: they may not be UTF-8) and why. Each walk replaces what it covers; a repository not
/// walked since the daemon started has no entry, and its next status walks it for names.
#[derive(Default)]
pub(super) struct LeftOut {
    repos: Mutex<HashMap<i64, RepoLeftOut>>,
}

#[derive(Default)]
struct RepoLeftOut {
    paths: BTreeMap<Vec<u8>, String>,
    /// Paths found past [`MAX_LEFT_OUT`] by the walks since the last full one, counted only.
    more: usize,
}

impl LeftOut {
    fn known(&self, repo: i64) -> bool {
        self.repos.lock().expect("not poisoned").contains_key(&repo)
    }

    /// Notes what a walk of `sub` (beneath it all when `deep`, else only its own entries) found,
    /// in place of what was noted there before.
    fn note(&self, repo: i64, sub: &str, deep: bool, walked: &mut Walked) {
        let mut repos = self.repos.lock().expect("not poisoned");
        let r = repos.entry(repo).or_default();
        r.paths.retain(|k, _| !covered(k, sub.as_bytes(), deep));
        if sub.is_empty() && deep {
            r.more = 0;
        }
        for (path, reason) in walked.left_out.drain(..) {
            if r.paths.len() < MAX_LEFT_OUT || r.paths.contains_key(&path) {
                r.paths.insert(path, reason);
            } else {
                r.more += 1;
            }
        }
        r.more += walked.more;
    }

    /// What is left out beneath any of `roots` (repository paths; `""` is all of it): the first
    /// `shown` as (path, reason), and how many in all.
    fn beneath(&self, repo: i64, roots: &[&str], shown: usize) -> (Vec<(Vec<u8>, String)>, usize) {
        let repos = self.repos.lock().expect("not poisoned");
        let Some(r) = repos.get(&repo) else {
            return (Vec::new(), 0);
        };
        let mut named = Vec::new();
        let mut total = 0;
        for (k, reason) in &r.paths {
            if roots.iter().any(|root| covered(k, root.as_bytes(), true)) {
                total += 1;
                if named.len() < shown {
                    named.push((k.clone(), reason.clone()));
                }
            }
        }
        if roots.contains(&"") {
            total += r.more;
        }
        (named, total)
    }
}

/// Whether the repository path `path` is `sub` or beneath it (only directly beneath it when not
/// `deep`).
fn covered(path: &[u8], sub: &[u8], deep: bool) -> bool {
    if path == sub {
        return true;
    }
    let rest = if sub.is_empty() {
        path
    } else {
        match path.strip_prefix(sub).and_then(|r| r.strip_prefix(b"/")) {
            Some(r) => r,
            None => return false,
        }
    };
    deep || !rest.contains(&b'/')
}

/// The directory to scan for a journal path holding U+FFFD: the mount journals a name that is
/// not UTF-8 lossily, so the name itself cannot be looked up; its directory can. `None` when the
/// path holds no U+FFFD.
fn lossy_parent(path: &str) -> Option<&str> {
    let at = path.find('\u{FFFD}')?;
    Some(path[..at].rsplit_once('/').map_or("", |(dir, _)| dir))
}

/// The virtual path a person is shown for the repository path `rel` of the repository at `dir`
/// of the zone named `zone`: the path from the zone on escaped as git quotes it when it is not
/// UTF-8 (the convention of grep's and glob's `skipped`).
pub(super) fn shown(zone: &str, dir: &str, rel: &[u8]) -> String {
    let mut full = dir.as_bytes().to_vec();
    if !full.is_empty() && !rel.is_empty() {
        full.push(b'/');
    }
    full.extend_from_slice(rel);
    format!("/{zone}/{}", text::name_bytes(&full))
}

/// What a file is against its base (`row`, None: no row) now that it is `local` (blob and git
/// mode; None: nothing there): `created`, `modified`, `deleted` or `clean`; None when there is
/// nothing on either side, or a new file `ignored` (by the repository's `.gitignore`) says is
/// ignored.
pub(super) fn state_of(
    row: Option<&FileRow>,
    local: Option<(Oid, u32)>,
    ignored: impl FnOnce() -> bool,
) -> Option<&'static str> {
    match (row.and_then(|r| r.base_oid.as_ref()), local) {
        (None, None) => None,
        (None, Some(_)) => (!ignored()).then_some("created"),
        (Some(_), None) => Some("deleted"),
        (Some(b), Some((o, m))) => {
            if *b == o.to_string() && row.and_then(|r| r.base_mode) == Some(m) {
                Some("clean")
            } else {
                Some("modified")
            }
        }
    }
}

impl GitFailure for ResolveError {
    fn code(&self) -> ErrorCode {
        match self {
            ResolveError::Common(e) => e.code(),
            ResolveError::NotInConflict { .. } => ErrorCode::NoMatch,
        }
    }

    fn path(&self) -> Option<&str> {
        match self {
            ResolveError::Common(e) => e.path(),
            ResolveError::NotInConflict { .. } => None,
        }
    }
}

impl Git {
    /// Lists created, modified and deleted files of every pulled repo (or the one holding `v`).
    /// Only paths the journal mentions since the last look are re-hashed; `rescan` re-hashes
    /// everything (for changes made beside wardfs, which the journal cannot see).
    pub fn status(&self, v: Option<&str>, rescan: bool) -> Result<StatusResult, StatusError> {
        self.status_at(None, v, rescan)
    }

    /// [`Git::status`] of the files a fork holds: the fork `fork` names, or the one `v` lies in
    /// (the workspace's when neither names one). NOT_FOUND for a fork that does not exist;
    /// CONFLICT for a fork made before the repository's base last moved.
    pub fn status_at(
        &self,
        fork: Option<&str>,
        v: Option<&str>,
        rescan: bool,
    ) -> Result<StatusResult, StatusError> {
        let place = self.place(fork, v)?;
        let repos = match v {
            Some(_) => vec![self.repo_for(v)?],
            None => self.zones.db().repos()?,
        };
        let mut out = Vec::with_capacity(repos.len());
        for repo in repos {
            out.push(self.changes_in(&place, &repo, rescan)?);
        }
        Ok(StatusResult { repos: out })
    }

    pub(super) fn refresh(&self, repo: &RepoRow, rescan: bool) -> Result<RepoStatus, CommonError> {
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
            let mut w = self.walk_files(ZoneId::Workspace, &repo.dir, "", true);
            expanded.extend(std::mem::take(&mut w.files));
            self.left_out.note(repo.id, "", true, &mut w);
        } else {
            if !self.left_out.known(repo.id) {
                // The first look since the daemon started: what it cannot look at, named.
                let mut w = self.walk_files(ZoneId::Workspace, &repo.dir, "", true);
                w.files.clear();
                self.left_out.note(repo.id, "", true, &mut w);
            }
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
                let mut w = self.walk_files(ZoneId::Workspace, &repo.dir, c, true);
                expanded.extend(std::mem::take(&mut w.files));
                self.left_out.note(repo.id, c, true, &mut w);
                if let Some(parent) = lossy_parent(c) {
                    let mut w = self.walk_files(ZoneId::Workspace, &repo.dir, parent, false);
                    w.files.clear();
                    self.left_out.note(repo.id, parent, false, &mut w);
                }
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
            let ignore = self.ignore_matcher(ZoneId::Workspace, &repo.dir);
            let mut states = Vec::with_capacity(expanded.len());
            for p in expanded {
                let local = self.local_blob(&vfile(&repo.dir, &p))?;
                let ignored = || {
                    ignore
                        .as_ref()
                        .is_some_and(|g| g.matched_path_or_any_parents(&p, false).is_ignore())
                };
                let state = state_of(rows.get(&p), local, ignored);
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
        let (skipped, skipped_total) = self.left_out(repo, &[""]);
        Ok(RepoStatus {
            repo: vdir(&repo.dir),
            url: repo.url.clone(),
            branch: repo.branch.clone(),
            base: repo.base.clone(),
            changes,
            examined,
            skipped,
            skipped_total,
        })
    }

    /// What the last walks of `repo` could not look at beneath any of `roots` (repository
    /// paths; `""` is all of it): the first [`MAX_SKIPPED_SHOWN`] named, and how many in all.
    pub(super) fn left_out(&self, repo: &RepoRow, roots: &[&str]) -> (Vec<PathNote>, usize) {
        let (named, total) = self
            .left_out
            .beneath(repo.id, roots, pull::MAX_SKIPPED_SHOWN);
        let notes = named
            .into_iter()
            .map(|(path, reason)| PathNote {
                path: shown(WORKSPACE, &repo.dir, &path),
                reason,
            })
            .collect();
        (notes, total)
    }

    /// The root `.gitignore` of the repo at `dir` of `zone`, as a matcher.
    pub(super) fn ignore_matcher(
        &self,
        zone: ZoneId,
        dir: &str,
    ) -> Option<ignore::gitignore::Gitignore> {
        let z = self.zones.local(zone).ok()?;
        let root = if dir.is_empty() {
            z.root().to_path_buf()
        } else {
            z.root().join(dir)
        };
        let mut b = ignore::gitignore::GitignoreBuilder::new(&root);
        b.add(root.join(".gitignore"));
        b.build().ok()
    }

    /// Files (and symlinks) at `sub` or beneath it in the repo dir `dir` of `zone` (only
    /// directly in it when not `deep`), as repository paths, and what the walk could not look
    /// at: a name that is not UTF-8 (a directory of such a name is not entered), a directory that
    /// could not be read. `.git` and wardfs's temp files are not looked at.
    pub(super) fn walk_files(&self, zone: ZoneId, dir: &str, sub: &str, deep: bool) -> Walked {
        let mut out = Walked::default();
        let Ok(z) = self.zones.local(zone) else {
            return out;
        };
        let base = if dir.is_empty() {
            z.root().to_path_buf()
        } else {
            z.root().join(dir)
        };
        match std::fs::symlink_metadata(base.join(sub)) {
            Ok(md) if md.is_dir() => {}
            _ => return out,
        }
        let mut dirs = vec![sub.to_string()];
        while let Some(rel) = dirs.pop() {
            let entries = match std::fs::read_dir(base.join(&rel)) {
                Ok(entries) => entries,
                Err(e) => {
                    out.leave_out(
                        rel.into_bytes(),
                        format!("a directory that could not be read ({e})"),
                    );
                    continue;
                }
            };
            for entry in entries {
                let entry = match entry {
                    Ok(entry) => entry,
                    Err(e) => {
                        out.leave_out(
                            rel.clone().into_bytes(),
                            format!("a directory that could not be read whole ({e})"),
                        );
                        break;
                    }
                };
                let Ok(ft) = entry.file_type() else { continue };
                let name = entry.file_name();
                let Some(name) = name.to_str() else {
                    let mut path = rel.as_bytes().to_vec();
                    if !path.is_empty() {
                        path.push(b'/');
                    }
                    path.extend_from_slice(name.as_bytes());
                    let why = if ft.is_dir() { DIR_NOT_UTF8 } else { NOT_UTF8 };
                    out.leave_out(path, why.into());
                    continue;
                };
                if name == ".git" || name.contains(crate::core::retention::TMP_PREFIX) {
                    continue;
                }
                let path = if rel.is_empty() {
                    name.to_string()
                } else {
                    format!("{rel}/{name}")
                };
                if !ft.is_dir() {
                    out.files.push(path);
                } else if deep {
                    dirs.push(path);
                }
            }
        }
        out
    }

    /// Marks a conflicted file (reported by a pull) as resolved.
    pub fn resolve(&self, v: &str) -> Result<Change, ResolveError> {
        let repo = self.repo_for(Some(v))?;
        let rel = self.workspace_dir("path", v)?;
        let path = if repo.dir.is_empty() {
            rel
        } else {
            rel[repo.dir.len()..].trim_start_matches('/').to_string()
        };
        if !self.zones.db().resolve_conflict(repo.id, &path)? {
            return Err(ResolveError::NotInConflict { path: v.into() });
        }
        Ok(Change {
            path: v.into(),
            state: "modified".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{lossy_parent, shown, LeftOut, Walked, MAX_LEFT_OUT};

    fn walked(paths: &[&[u8]]) -> Walked {
        let mut w = Walked::default();
        for p in paths {
            w.leave_out(p.to_vec(), "why".into());
        }
        w
    }

    #[test]
    fn a_walk_replaces_what_it_covers_and_only_that() {
        let book = LeftOut::default();
        assert!(!book.known(1));
        book.note(
            1,
            "",
            true,
            &mut walked(&[b"a\xff", b"d/b\xfe", b"d/e/c\xfd"]),
        );
        assert!(book.known(1));
        assert_eq!(book.beneath(1, &[""], 10).1, 3);
        // A deep walk of d finds only one of its two now.
        book.note(1, "d", true, &mut walked(&[b"d/b\xfe"]));
        let (named, total) = book.beneath(1, &[""], 10);
        assert_eq!(total, 2);
        assert_eq!(named[1].0, b"d/b\xfe");
        // A shallow scan of the root replaces only the root's own entries.
        book.note(1, "", false, &mut walked(&[]));
        let (named, _) = book.beneath(1, &[""], 10);
        assert_eq!(named.len(), 1);
        assert_eq!(named[0].0, b"d/b\xfe");
        assert_eq!(book.beneath(1, &["d"], 10).1, 1);
        assert_eq!(book.beneath(1, &["dx"], 10).1, 0);
        assert_eq!(book.beneath(2, &[""], 10).1, 0);
    }

    #[test]
    fn a_flood_of_bad_names_is_kept_up_to_the_cap_and_counted_past_it() {
        let mut w = Walked::default();
        for i in 0..MAX_LEFT_OUT + 7 {
            w.leave_out(format!("f{i}\u{1}").into_bytes(), "why".into());
        }
        assert_eq!((w.left_out.len(), w.more), (MAX_LEFT_OUT, 7));
        let book = LeftOut::default();
        book.note(1, "", true, &mut w);
        let (named, total) = book.beneath(1, &[""], 1000);
        assert_eq!((named.len(), total), (1000, MAX_LEFT_OUT + 7));
    }

    #[test]
    fn a_lossy_journal_path_points_at_the_directory_to_scan() {
        assert_eq!(lossy_parent("bad\u{FFFD}.txt"), Some(""));
        assert_eq!(lossy_parent("d/sub\u{FFFD}/x.txt"), Some("d"));
        assert_eq!(lossy_parent("d/e/ok.txt"), None);
        assert_eq!(
            shown("workspace", "r", b"bad\xff.txt"),
            "/workspace/\"r/bad\\377.txt\""
        );
        assert_eq!(shown("workspace", "", b"ok/d"), "/workspace/ok/d");
        assert_eq!(shown("forks/a", "r", b"x"), "/forks/a/r/x");
    }
}

//! `status`: what the agent changed in each pulled repository since its base. Only the paths the
//! journal names since the last look are hashed again (`rescan` hashes everything); `resolve`
//! marks a conflicted file as merged. [`StatusError`] and [`ResolveError`] say why they failed.

use super::*;

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
            expanded.extend(self.walk_files(&repo.dir, ""));
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
                expanded.extend(self.walk_files(&repo.dir, c));
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
    fn walk_files(&self, dir: &str, sub: &str) -> Vec<String> {
        let Zone::Local(z) = self.zones.zone(ZoneId::Workspace) else {
            return Vec::new();
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
            _ => return Vec::new(),
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
                    if !s.contains(".wardfs-tmp-") {
                        out.push(s.to_string());
                    }
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

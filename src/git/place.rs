//! Where a pulled repository's files are read: the workspace it was pulled into, or a fork of
//! the workspace (`/forks/NAME`, issue 30), which holds the same directories.
//!
//! A fork's status compares the fork's files with the repository's base, as the workspace's
//! does, without keeping state of its own: a file the fork still shares with the workspace (the
//! same inode: forks are filled with hard links, and either side replaces a file it writes)
//! that the workspace's status finds clean is clean, so only the files the fork or the
//! workspace changed are hashed. A fork made before the workspace's base last moved (a pull, a
//! push) holds files of the older base: status and stage refuse it (CONFLICT) until the fork is
//! updated, since staged on the new base its files would undo what the base brought.
//!
//! The writers of each staged file come from the journal: the rows of the zone it was staged
//! from, or for a file a fork did not change itself, of the zone the fork was made from before
//! the fork was made (and so on up its parents).

use std::os::unix::fs::MetadataExt as _;

use super::status::{shown, state_of, Walked};
use super::*;
use crate::core::text;
use crate::state::{ForkRecord, WriterScope};

/// Writers named per file at most (newest first).
const MAX_WRITERS: usize = 8;

/// Forks of forks followed at most to find where a file's files were taken from.
const MAX_LINEAGE: usize = 16;

/// The zone a status or stage reads a repository's files from.
pub(super) struct Place {
    pub(super) id: ZoneId,
    /// The fork's record; None for the workspace.
    fork: Option<ForkRecord>,
}

impl Place {
    pub(super) fn workspace() -> Place {
        Place {
            id: ZoneId::Workspace,
            fork: None,
        }
    }

    /// The zone's name: `workspace` or `forks/NAME`.
    pub(super) fn name(&self) -> &'static str {
        self.id.name()
    }

    pub(super) fn is_fork(&self) -> bool {
        self.fork.is_some()
    }

    /// The virtual path of the repository directory `dir` here.
    pub(super) fn vdir(&self, dir: &str) -> String {
        vdir_in(self.name(), dir)
    }

    /// The virtual path of the file `path` of the repository at `dir` here.
    pub(super) fn vfile(&self, dir: &str, path: &str) -> String {
        vfile_in(self.name(), dir, path)
    }
}

/// The fork a path names, if it is a path in a fork (`/forks/NAME/...`), else None.
fn fork_of_path(v: &str) -> Option<&str> {
    let rest = v
        .trim_start_matches('/')
        .strip_prefix(crate::config::FORKS_DIR)?
        .strip_prefix('/')?;
    Some(rest.split('/').next().unwrap_or(rest)).filter(|n| !n.is_empty())
}

impl Git {
    /// The zone to read from: the fork `fork` names, else the fork `v` (a virtual path, e.g. a
    /// repository's directory) lies in, else the workspace. NOT_FOUND for a fork that does not
    /// exist; INVALID_ARGUMENT when `fork` and `v` name different forks.
    pub(super) fn place(&self, fork: Option<&str>, v: Option<&str>) -> Result<Place, CommonError> {
        let implied = v.and_then(fork_of_path);
        let name = match (fork, implied) {
            (Some(f), Some(i)) if f != i => {
                return Err(invalid(
                    "fork",
                    format!(
                        "`{}` is not the fork {} lies in",
                        text::name(f),
                        text::name(v.unwrap_or_default())
                    ),
                )
                .into())
            }
            (Some(f), _) => f,
            (None, Some(i)) => i,
            (None, None) => return Ok(Place::workspace()),
        };
        let no_fork = || CommonError::NoFork {
            name: name.to_string(),
            path: format!("/{}/{name}", crate::config::FORKS_DIR),
        };
        let rec = self.zones.db().fork_get(name)?.ok_or_else(no_fork)?;
        let id = ZoneId::fork(name).ok_or_else(no_fork)?;
        Ok(Place {
            id,
            fork: Some(rec),
        })
    }

    /// The zone-relative directory of a virtual path in /workspace or in a fork.
    pub(super) fn repo_dir(&self, name: &str, v: &str) -> Result<String, CommonError> {
        match crate::core::path::parse(v)? {
            crate::core::Target::Zone(vp)
                if vp.zone() == ZoneId::Workspace || vp.zone().fork_name().is_some() =>
            {
                Ok(vp.rel().to_string())
            }
            _ => Err(invalid(
                name,
                format!("{v:?} must be a directory in /workspace or in a fork (/forks/NAME)"),
            )
            .into()),
        }
    }

    /// The zone-relative path of `v`, which must lie in `place` (`name` is the request's field).
    pub(super) fn place_rel(
        &self,
        place: &Place,
        name: &str,
        v: &str,
    ) -> Result<String, CommonError> {
        match crate::core::path::parse(v)? {
            crate::core::Target::Zone(vp) if vp.zone() == place.id => Ok(vp.rel().to_string()),
            _ => Err(invalid(
                name,
                format!("{} must be a path in /{}", text::name(v), place.name()),
            )
            .into()),
        }
    }

    /// What changed in `repo` as `place` holds it: the workspace's status, or a fork's.
    pub(super) fn changes_in(
        &self,
        place: &Place,
        repo: &RepoRow,
        rescan: bool,
    ) -> Result<RepoStatus, CommonError> {
        match &place.fork {
            None => self.refresh(repo, rescan),
            Some(rec) => self.fork_status(place, rec, repo, rescan),
        }
    }

    /// A fork's status of `repo`, as the module doc says.
    fn fork_status(
        &self,
        place: &Place,
        rec: &ForkRecord,
        repo: &RepoRow,
        rescan: bool,
    ) -> Result<RepoStatus, CommonError> {
        self.check_fresh(rec, repo)?;
        // The workspace's states, brought up to date: what the fork shares is clean with them.
        self.refresh(repo, false)?;
        let rows: HashMap<String, FileRow> = self
            .zones
            .db()
            .repo_files(repo.id)?
            .into_iter()
            .map(|r| (r.path.clone(), r))
            .collect();
        let walked = self.walk_files(place.id, &repo.dir, "", true);
        let mut paths: std::collections::BTreeSet<&str> =
            walked.files.iter().map(String::as_str).collect();
        paths.extend(
            rows.values()
                .filter(|r| r.base_oid.is_some())
                .map(|r| r.path.as_str()),
        );
        let roots = (self.root_of(ZoneId::Workspace), self.root_of(place.id));
        let ignore = self.ignore_matcher(place.id, &repo.dir);
        let mut changes = Vec::new();
        let mut examined = 0;
        for p in paths {
            let row = rows.get(p);
            let shared = match &roots {
                (Some(ws), Some(fork)) => same_file(ws, fork, &repo.dir, p),
                _ => false,
            };
            if !rescan && shared && row.is_some_and(|r| r.state == "clean") {
                continue;
            }
            examined += 1;
            let local = self.local_blob(&place.vfile(&repo.dir, p))?;
            let ignored = || {
                ignore
                    .as_ref()
                    .is_some_and(|g| g.matched_path_or_any_parents(p, false).is_ignore())
            };
            let state = match state_of(row, local, ignored) {
                None | Some("clean") => continue,
                // Changed here and upstream (a pull said so): a conflict here too.
                Some("modified") if row.is_some_and(|r| r.state == "conflict") => "conflict",
                Some(s) => s,
            };
            changes.push(Change {
                path: place.vfile(&repo.dir, p),
                state: state.into(),
            });
        }
        let (skipped, skipped_total) = left_out_of(place, &repo.dir, walked);
        Ok(RepoStatus {
            repo: place.vdir(&repo.dir),
            url: repo.url.clone(),
            branch: repo.branch.clone(),
            base: repo.base.clone(),
            changes,
            examined,
            skipped,
            skipped_total,
        })
    }

    /// The directory a local zone's files are in (None: not a local zone now).
    fn root_of(&self, zone: ZoneId) -> Option<PathBuf> {
        self.zones.local(zone).ok().map(|z| z.root().to_path_buf())
    }

    /// Refuses a fork whose files of `repo` were taken before the repository's base last moved.
    fn check_fresh(&self, rec: &ForkRecord, repo: &RepoRow) -> Result<(), CommonError> {
        let moved = self.zones.db().repo_based_at(repo.id)?;
        if self.taken_at(rec)? < moved {
            return Err(CommonError::StaleFork {
                fork: rec.name.clone(),
                repo: vdir(&repo.dir),
            });
        }
        Ok(())
    }

    /// The journal position the files of the fork `rec` were taken at: its fork point, or
    /// where its parent fork's were taken when earlier, or the checkpoint's it was made from.
    fn taken_at(&self, rec: &ForkRecord) -> Result<i64, CommonError> {
        let db = self.zones.db();
        let pos_of = |checkpoint: i64| -> Result<i64, CommonError> {
            Ok(db.checkpoint_get(checkpoint)?.map_or(0, |c| c.journal_pos))
        };
        let mut rec = rec.clone();
        let mut pos = i64::MAX;
        for _ in 0..MAX_LINEAGE {
            pos = pos.min(pos_of(rec.base)?);
            if let Some(id) = rec.parent.strip_prefix("checkpoint ") {
                return Ok(pos.min(pos_of(id.parse().unwrap_or(0))?));
            }
            let parent = match fork_of_path(&rec.parent) {
                Some(name) => db.fork_get(name)?.filter(|p| p.id < rec.id),
                None => None,
            };
            match parent {
                Some(p) => rec = p,
                None => break,
            }
        }
        Ok(pos)
    }

    /// Who changed the file `path` of `repo` as `place` holds it, newest first: the journal's
    /// writers in the zone, or for a file a fork did not change itself, in the zone it was made
    /// from before it was made (and so on up its parents).
    pub(super) fn writers_of(
        &self,
        place: &Place,
        repo: &RepoRow,
        path: &str,
    ) -> Result<Vec<Writer>, CommonError> {
        let rel = if repo.dir.is_empty() {
            path.to_string()
        } else {
            format!("{}/{path}", repo.dir)
        };
        let db = self.zones.db();
        for (zone, since_ms, until_ms) in self.lineage(place)? {
            let found = db.journal_writers(
                &WriterScope {
                    zone: &zone,
                    path: &rel,
                    since_ms,
                    until_ms,
                },
                MAX_WRITERS,
            )?;
            if !found.is_empty() {
                return Ok(found);
            }
        }
        Ok(Vec::new())
    }

    /// The zones `place`'s files came from, each with the span of its changes they hold
    /// (milliseconds, the end inclusive): the zone itself (a fork: since it was made), then
    /// for a fork its parent until the fork was made, and so on up; a fork of a checkpoint
    /// ends the line.
    fn lineage(&self, place: &Place) -> Result<Vec<(String, i64, Option<i64>)>, CommonError> {
        let Some(first) = &place.fork else {
            return Ok(vec![(WORKSPACE.to_string(), 0, None)]);
        };
        let db = self.zones.db();
        let mut out = vec![(place.name().to_string(), first.created_ms, None)];
        let mut rec = first.clone();
        while out.len() < MAX_LINEAGE {
            let until = Some(rec.created_ms);
            match fork_of_path(&rec.parent) {
                Some(name) => match db.fork_get(name)?.filter(|p| p.id < rec.id) {
                    Some(parent) => {
                        out.push((rec.parent.clone(), parent.created_ms, until));
                        rec = parent;
                    }
                    None => break,
                },
                None if rec.parent.starts_with("checkpoint ") => break,
                None => {
                    out.push((rec.parent.clone(), 0, until));
                    break;
                }
            }
        }
        Ok(out)
    }
}

/// Whether `path` of the repository at `dir` is one file (the same inode) in the directories
/// `a` and `b` of two zones.
fn same_file(a: &Path, b: &Path, dir: &str, path: &str) -> bool {
    let rel = Path::new(dir).join(path);
    match (
        std::fs::symlink_metadata(a.join(&rel)),
        std::fs::symlink_metadata(b.join(&rel)),
    ) {
        (Ok(x), Ok(y)) => x.is_file() && x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// What a walk of a fork's repository could not look at: the first [`pull::MAX_SKIPPED_SHOWN`]
/// named, and how many in all.
fn left_out_of(place: &Place, dir: &str, walked: Walked) -> (Vec<PathNote>, usize) {
    let total = walked.left_out.len() + walked.more;
    let mut notes: Vec<PathNote> = walked
        .left_out
        .into_iter()
        .map(|(path, reason)| PathNote {
            path: shown(place.name(), dir, &path),
            reason,
        })
        .collect();
    notes.sort_by(|a, b| a.path.cmp(&b.path));
    notes.truncate(pull::MAX_SKIPPED_SHOWN);
    (notes, total)
}

#[cfg(test)]
mod tests {
    use super::fork_of_path;

    #[test]
    fn a_path_names_its_fork() {
        assert_eq!(fork_of_path("/forks/a/proj/x"), Some("a"));
        assert_eq!(fork_of_path("forks/b"), Some("b"));
        assert_eq!(fork_of_path("/forks/"), None);
        assert_eq!(fork_of_path("/workspace/forks/a"), None);
        assert_eq!(fork_of_path("/forksx/a"), None);
    }
}

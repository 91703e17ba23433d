//! Git state: pulled repositories, the base of every pulled file, and staged commits.
//!
//! A repo row says which remote branch was pulled into which workspace directory and from which
//! commit (`base`). `workspace_files` holds, per file of that directory, the blob it was pulled as
//! and what `status` last found (`clean`, `modified`, `deleted`, `created`, `conflict`), so status
//! only re-hashes what the journal says changed. Staged commits and their files are immutable once
//! written, except for their `state` and push results. No credential is ever stored here.
//!
//! A staged commit records the zone its files were read from (`workspace`, or `forks/NAME` for a
//! fork's changes) and, per file, the [`Writer`]s the journal names for it. A repo row records
//! the journal position at which its base last moved (a pull, a push), so that a fork made
//! before that is known to hold files of an older base.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{Db, StateError};

/// A pulled repository.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RepoRow {
    pub id: i64,
    /// The remote URL as given (never with credentials).
    pub url: String,
    pub branch: String,
    /// Workspace-relative directory the repo is pulled into ("" is the zone root).
    pub dir: String,
    /// The bare mirror's path.
    pub mirror: String,
    /// The commit the workspace files are based on.
    pub base: String,
    /// The paths chosen at pull (empty: all).
    pub paths: Vec<String>,
    pub pulled_at: i64,
    /// The last journal row `status` has taken into account.
    pub status_journal_id: i64,
}

/// What `status` knows about one file of a repo.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileRow {
    /// Path inside the repo (as in the git tree).
    pub path: String,
    /// The blob pulled (None for a file the agent created).
    pub base_oid: Option<String>,
    /// The git file mode pulled (0o100644, 0o100755, 0o120000).
    pub base_mode: Option<u32>,
    /// clean | modified | deleted | created | conflict
    pub state: String,
    /// For `conflict`: the upstream blob the local file does not contain.
    pub upstream_oid: Option<String>,
}

/// A staged commit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StagedRow {
    pub id: String,
    pub repo_id: i64,
    pub url: String,
    /// The branch it will be pushed to.
    pub branch: String,
    pub message: String,
    /// The commit it was built on.
    pub base: String,
    /// The commit in the mirror (`refs/wardfs/staged/<id>`).
    pub commit: String,
    /// The zone its files were read from: `workspace`, or `forks/NAME` for a fork's changes.
    pub zone: String,
    /// staged | rebased | pushed | conflicted | rejected | discarded
    pub state: String,
    /// Why it is conflicted, rejected or needs re-review.
    pub reason: Option<String>,
    /// Paths in conflict (state `conflicted`).
    pub conflicts: Vec<String>,
    /// The commit that reached the remote.
    pub pushed_commit: Option<String>,
    /// The branch it was pushed to, when not `branch` (a pull request's head).
    pub pushed_ref: Option<String>,
    /// The pull request's address.
    pub url_pr: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One file of a staged commit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StagedFileRow {
    pub path: String,
    /// create | update | delete
    pub operation: String,
    pub additions: u64,
    pub deletions: u64,
    pub binary: bool,
    pub oversized: bool,
    /// The blob committed (None for a delete).
    pub oid: Option<String>,
    /// A git-format unified patch (None for binary and oversized files).
    pub diff: Option<String>,
    /// Who changed it, as the journal says (newest first).
    pub writers: Vec<Writer>,
}

/// One writer of a file, from the journal: who changed it in which zone.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Writer {
    /// The zone the change was made in: `workspace`, or `forks/NAME`. For a file a fork did not
    /// change itself, the zone it was forked from (the change came with the fork).
    pub zone: String,
    /// The adapter the change came through: `api`, `fuse`, `watcher`, `mirror`, `sandbox` or `internal`.
    pub via: String,
    /// Process id of the client that made the change, when known.
    pub pid: Option<u32>,
    /// User id of the client that made the change, when known.
    pub uid: Option<u32>,
    /// How many changes of the file it made.
    pub changes: u64,
    /// When it last changed the file, in milliseconds since the Unix epoch.
    pub last_ms: i64,
}

impl std::fmt::Display for Writer {
    /// `fuse pid 4242 uid 1000`: the adapter, then the process and user where known (the zone
    /// is said apart).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.via)?;
        if let Some(pid) = self.pid {
            write!(f, " pid {pid}")?;
        }
        if let Some(uid) = self.uid {
            write!(f, " uid {uid}")?;
        }
        Ok(())
    }
}

/// Which journal rows [`Db::journal_writers`] looks at: the changes of one path of a zone,
/// made from `since_ms` until `until_ms` (inclusive).
#[derive(Debug, Clone, Copy)]
pub struct WriterScope<'a> {
    pub zone: &'a str,
    pub path: &'a str,
    pub since_ms: i64,
    pub until_ms: Option<i64>,
}

fn repo_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<RepoRow> {
    let paths: String = r.get(6)?;
    Ok(RepoRow {
        id: r.get(0)?,
        url: r.get(1)?,
        branch: r.get(2)?,
        dir: r.get(3)?,
        mirror: r.get(4)?,
        base: r.get(5)?,
        paths: serde_json::from_str(&paths).unwrap_or_default(),
        pulled_at: r.get(7)?,
        status_journal_id: r.get(8)?,
    })
}

/// The workspace's journal rows after a position, oldest first ([`Db::journal_paths_since`]):
/// through the `(zone, id)` index (see the test
/// `state::tests::a_zones_rows_after_a_position_are_found_through_the_zone_id_index`).
pub(super) const WORKSPACE_ROWS_SINCE: &str =
    "SELECT id, path, to_path, op FROM journal WHERE id > ?1 AND zone = 'workspace' ORDER BY id";

const REPO_COLS: &str = "id, url, branch, dir, mirror, base, paths, pulled_at, status_journal_id";

fn staged_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<StagedRow> {
    let conflicts: Option<String> = r.get(9)?;
    Ok(StagedRow {
        id: r.get(0)?,
        repo_id: r.get(1)?,
        url: r.get(15)?,
        branch: r.get(2)?,
        message: r.get(3)?,
        base: r.get(4)?,
        commit: r.get(5)?,
        state: r.get(6)?,
        reason: r.get(7)?,
        pushed_commit: r.get(8)?,
        conflicts: conflicts
            .map(|c| serde_json::from_str(&c).unwrap_or_default())
            .unwrap_or_default(),
        pushed_ref: r.get(10)?,
        url_pr: r.get(11)?,
        created_at: r.get(12)?,
        updated_at: r.get(13)?,
        zone: r.get(16)?,
    })
}

const STAGED_SELECT: &str = "SELECT s.id, s.repo_id, s.branch, s.message, s.base, s.commit_oid,
    s.state, s.reason, s.pushed_commit, s.conflicts, s.pushed_ref, s.pr_url, s.created_at,
    s.updated_at, s.repo_id, r.url, coalesce(s.zone, 'workspace')
    FROM staged_commits s JOIN repos r ON r.id = s.repo_id";

impl Db {
    /// Returns the repo pulled into `dir`, if any.
    pub fn repo_by_dir(&self, dir: &str) -> Result<Option<RepoRow>, StateError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {REPO_COLS} FROM repos WHERE dir = ?1"),
                [dir],
                repo_from,
            )
            .optional()?)
    }

    /// Returns the repo with this id.
    pub fn repo(&self, id: i64) -> Result<Option<RepoRow>, StateError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("SELECT {REPO_COLS} FROM repos WHERE id = ?1"),
                [id],
                repo_from,
            )
            .optional()?)
    }

    /// Returns every pulled repo, by directory.
    pub fn repos(&self) -> Result<Vec<RepoRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare(&format!("SELECT {REPO_COLS} FROM repos ORDER BY dir"))?;
        let rows = st.query_map([], repo_from)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Records a pull: creates or updates the repo row and replaces its file rows, in one
    /// transaction. Returns the repo id.
    pub fn record_pull(&self, repo: &RepoRow, files: &[FileRow]) -> Result<i64, StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let paths = serde_json::to_string(&repo.paths).expect("strings serialize");
        let id: i64 = tx.query_row(
            "INSERT INTO repos (url, branch, dir, mirror, base, paths, pulled_at, status_journal_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
             ON CONFLICT(dir) DO UPDATE SET url = ?1, branch = ?2, mirror = ?4, base = ?5,
                 paths = ?6, pulled_at = ?7, status_journal_id = ?8
             RETURNING id",
            params![
                repo.url,
                repo.branch,
                repo.dir,
                repo.mirror,
                repo.base,
                paths,
                repo.pulled_at,
                repo.status_journal_id
            ],
            |r| r.get(0),
        )?;
        tx.execute("DELETE FROM workspace_files WHERE repo_id = ?1", [id])?;
        mark_base_moved(&tx, id)?;
        {
            let mut st = tx.prepare(
                "INSERT INTO workspace_files (repo_id, path, base_oid, base_mode, state, upstream_oid)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?;
            for f in files {
                st.execute(params![
                    id,
                    f.path,
                    f.base_oid,
                    f.base_mode,
                    f.state,
                    f.upstream_oid
                ])?;
            }
        }
        tx.commit()?;
        Ok(id)
    }

    /// Returns the file rows of a repo, by path.
    pub fn repo_files(&self, repo_id: i64) -> Result<Vec<FileRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT path, base_oid, base_mode, state, upstream_oid FROM workspace_files
             WHERE repo_id = ?1 ORDER BY path",
        )?;
        let rows = st.query_map([repo_id], file_from)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Returns the file rows of a repo that are not clean, by path.
    pub fn repo_changes(&self, repo_id: i64) -> Result<Vec<FileRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT path, base_oid, base_mode, state, upstream_oid FROM workspace_files
             WHERE repo_id = ?1 AND state != 'clean' ORDER BY path",
        )?;
        let rows = st.query_map([repo_id], file_from)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Returns the file rows at `path` or beneath it.
    pub fn repo_files_under(&self, repo_id: i64, path: &str) -> Result<Vec<FileRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT path, base_oid, base_mode, state, upstream_oid FROM workspace_files
             WHERE repo_id = ?1 AND (?2 = '' OR path = ?2 OR (path > ?2 || '/' AND path < ?2 || '0'))",
        )?;
        let rows = st.query_map(params![repo_id, path], file_from)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Applies status findings: sets each file's state (created files get a row, files that are
    /// gone and had no base lose theirs) and advances the journal mark, in one transaction.
    pub fn update_status(
        &self,
        repo_id: i64,
        states: &[(String, Option<String>)],
        journal_id: i64,
    ) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        {
            let mut set = tx.prepare_cached(
                "INSERT INTO workspace_files (repo_id, path, base_oid, base_mode, state)
                 VALUES (?1, ?2, NULL, NULL, ?3)
                 ON CONFLICT(repo_id, path) DO UPDATE SET state =
                    CASE WHEN workspace_files.state = 'conflict' AND ?3 = 'modified'
                         THEN 'conflict' ELSE ?3 END",
            )?;
            let mut drop_created = tx.prepare_cached(
                "DELETE FROM workspace_files WHERE repo_id = ?1 AND path = ?2 AND base_oid IS NULL",
            )?;
            for (path, state) in states {
                match state {
                    Some(s) => {
                        set.execute(params![repo_id, path, s])?;
                    }
                    None => {
                        drop_created.execute(params![repo_id, path])?;
                    }
                }
            }
        }
        tx.execute(
            "UPDATE repos SET status_journal_id = max(status_journal_id, ?2) WHERE id = ?1",
            params![repo_id, journal_id],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Marks a conflicted file resolved: it counts as modified from now on.
    pub fn resolve_conflict(&self, repo_id: i64, path: &str) -> Result<bool, StateError> {
        let n = self.lock().execute(
            "UPDATE workspace_files SET state = 'modified', upstream_oid = NULL
             WHERE repo_id = ?1 AND path = ?2 AND state = 'conflict'",
            params![repo_id, path],
        )?;
        Ok(n == 1)
    }

    /// Moves a repo's base after a push of a commit built on it: the given files now have these
    /// blobs as their base (None: deleted) and are clean.
    pub fn advance_base(
        &self,
        repo_id: i64,
        new_base: &str,
        files: &[(String, Option<String>, Option<u32>)],
    ) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE repos SET base = ?2 WHERE id = ?1",
            params![repo_id, new_base],
        )?;
        mark_base_moved(&tx, repo_id)?;
        for (path, oid, mode) in files {
            match oid {
                Some(oid) => tx.execute(
                    "INSERT INTO workspace_files (repo_id, path, base_oid, base_mode, state)
                     VALUES (?1, ?2, ?3, ?4, 'clean')
                     ON CONFLICT(repo_id, path) DO UPDATE SET base_oid = ?3, base_mode = ?4,
                        state = 'clean', upstream_oid = NULL",
                    params![repo_id, path, oid, mode],
                )?,
                None => tx.execute(
                    "DELETE FROM workspace_files WHERE repo_id = ?1 AND path = ?2",
                    params![repo_id, path],
                )?,
            };
        }
        tx.commit()?;
        Ok(())
    }

    /// Returns the last journal row id if every row after `mark` came through `via` (the caller's
    /// own writes), else `mark`.
    pub fn journal_mark_after_own(&self, mark: i64, via: &str) -> Result<i64, StateError> {
        let conn = self.lock();
        let (max, others): (i64, i64) = conn.query_row(
            "SELECT coalesce(max(id), ?1), count(*) FILTER (WHERE via != ?2)
             FROM journal WHERE id > ?1",
            params![mark, via],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(if others == 0 { max } else { mark })
    }

    /// Returns the highest journal row id (0 when empty).
    pub fn journal_max_id(&self) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .query_row("SELECT coalesce(max(id), 0) FROM journal", [], |r| r.get(0))?)
    }

    /// Returns the workspace paths (and move destinations) changed after journal row `after`,
    /// at `dir` or beneath it, with the last row id seen.
    pub fn journal_paths_since(
        &self,
        after: i64,
        dir: &str,
    ) -> Result<(Vec<String>, i64), StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(WORKSPACE_ROWS_SINCE)?;
        let mut last = after;
        let mut out = Vec::new();
        let under = |p: &str| {
            dir.is_empty()
                || p == dir
                || (p.len() > dir.len() && p.starts_with(dir) && p.as_bytes()[dir.len()] == b'/')
                || (dir.len() > p.len() && dir.starts_with(p) && dir.as_bytes()[p.len()] == b'/')
                || p.is_empty()
        };
        let rows = st.query_map([after], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        for row in rows {
            let (id, path, to, op) = row?;
            last = id;
            // Git's own events (pull, stage, push) are not file changes.
            if op.starts_with("git-") {
                continue;
            }
            if under(&path) {
                out.push(path);
            }
            if let Some(to) = to.filter(|t| under(t)) {
                out.push(to);
            }
        }
        Ok((out, last))
    }

    /// Records a staged commit with its files.
    pub fn insert_staged(&self, s: &StagedRow, files: &[StagedFileRow]) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO staged_commits (id, repo_id, branch, message, base, commit_oid, state,
                 reason, conflicts, created_at, updated_at, zone)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, NULL, ?9, ?9, ?10)",
            params![
                s.id,
                s.repo_id,
                s.branch,
                s.message,
                s.base,
                s.commit,
                s.state,
                s.reason,
                s.created_at,
                s.zone
            ],
        )?;
        {
            let mut st = tx.prepare(
                "INSERT INTO staged_files (commit_id, path, operation, additions, deletions,
                     binary, oversized, oid, orig_oid, diff, writers)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?8, ?9, ?10)",
            )?;
            for f in files {
                st.execute(params![
                    s.id,
                    f.path,
                    f.operation,
                    f.additions as i64,
                    f.deletions as i64,
                    f.binary,
                    f.oversized,
                    f.oid,
                    f.diff,
                    writers_json(&f.writers)
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Returns staged commits, newest first (all states unless `state` is given).
    pub fn staged_list(&self, state: Option<&str>) -> Result<Vec<StagedRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare(&format!(
            "{STAGED_SELECT} WHERE (?1 IS NULL OR s.state = ?1) ORDER BY s.created_at DESC, s.id DESC"
        ))?;
        let rows = st.query_map([state], staged_from)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Counts the staged commits that wait for a human: staged, rebased, conflicted or rejected.
    pub fn staged_awaiting_review(&self) -> Result<u64, StateError> {
        let conn = self.lock();
        Ok(conn.query_row(
            "SELECT COUNT(*) FROM staged_commits
             WHERE state IN ('staged', 'rebased', 'conflicted', 'rejected')",
            [],
            |r| r.get::<_, i64>(0),
        )? as u64)
    }

    /// Returns one staged commit.
    pub fn staged(&self, id: &str) -> Result<Option<StagedRow>, StateError> {
        let conn = self.lock();
        Ok(conn
            .query_row(
                &format!("{STAGED_SELECT} WHERE s.id = ?1"),
                [id],
                staged_from,
            )
            .optional()?)
    }

    /// Returns the files of a staged commit, by path.
    pub fn staged_files(&self, id: &str) -> Result<Vec<StagedFileRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare(
            "SELECT path, operation, additions, deletions, binary, oversized, oid, diff, writers
             FROM staged_files WHERE commit_id = ?1 ORDER BY path",
        )?;
        let rows = st.query_map([id], |r| {
            let writers: Option<String> = r.get(8)?;
            Ok(StagedFileRow {
                path: r.get(0)?,
                operation: r.get(1)?,
                additions: r.get::<_, i64>(2)? as u64,
                deletions: r.get::<_, i64>(3)? as u64,
                binary: r.get(4)?,
                oversized: r.get(5)?,
                oid: r.get(6)?,
                diff: r.get(7)?,
                writers: writers
                    .and_then(|w| serde_json::from_str(&w).ok())
                    .unwrap_or_default(),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Returns (path, blob) of the files in a repo's staged or pushed commits on its current base.
    pub fn staged_blobs(
        &self,
        repo_id: i64,
        base: &str,
    ) -> Result<Vec<(String, Option<String>)>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT f.path, f.oid FROM staged_files f JOIN staged_commits s ON s.id = f.commit_id
             WHERE s.repo_id = ?1 AND s.base = ?2 AND s.state IN ('staged', 'rebased', 'pushed')",
        )?;
        let rows = st.query_map(params![repo_id, base], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Replaces a staged commit's base, commit and files after a rebase onto a moved remote.
    pub fn rebase_staged(
        &self,
        id: &str,
        base: &str,
        commit: &str,
        files: &[StagedFileRow],
        now: i64,
    ) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "UPDATE staged_commits SET base = ?2, commit_oid = ?3, updated_at = ?4 WHERE id = ?1",
            params![id, base, commit, now],
        )?;
        // The agent's own versions (orig_oid) outlive rebases: a later pull recognizes them;
        // so do the writers of each file.
        type Kept = (Option<String>, Option<String>);
        let orig: std::collections::HashMap<String, Kept> = {
            let mut st = tx
                .prepare("SELECT path, orig_oid, writers FROM staged_files WHERE commit_id = ?1")?;
            let rows = st.query_map([id], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?;
            rows.collect::<Result<_, _>>()?
        };
        tx.execute("DELETE FROM staged_files WHERE commit_id = ?1", [id])?;
        {
            let mut st = tx.prepare(
                "INSERT INTO staged_files (commit_id, path, operation, additions, deletions,
                     binary, oversized, oid, orig_oid, diff, writers)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?;
            for f in files {
                let (orig_oid, writers) = orig.get(&f.path).cloned().unwrap_or_default();
                st.execute(params![
                    id,
                    f.path,
                    f.operation,
                    f.additions as i64,
                    f.deletions as i64,
                    f.binary,
                    f.oversized,
                    f.oid,
                    orig_oid.or(f.oid.clone()),
                    f.diff,
                    writers
                ])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Returns (path, blob) of every file in a repo's pushed commits (changes already upstream).
    pub fn pushed_blobs(&self, repo_id: i64) -> Result<Vec<(String, String)>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT f.path, f.oid FROM staged_files f JOIN staged_commits s ON s.id = f.commit_id
             WHERE s.repo_id = ?1 AND s.state = 'pushed' AND f.oid IS NOT NULL
             UNION SELECT f.path, f.orig_oid FROM staged_files f
                JOIN staged_commits s ON s.id = f.commit_id
             WHERE s.repo_id = ?1 AND s.state = 'pushed' AND f.orig_oid IS NOT NULL",
        )?;
        let rows = st.query_map(params![repo_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Sets a staged commit's state and the fields that go with it.
    #[allow(clippy::too_many_arguments)]
    pub fn set_staged_state(
        &self,
        id: &str,
        state: &str,
        reason: Option<&str>,
        conflicts: &[String],
        commit: Option<&str>,
        pushed_commit: Option<&str>,
        pushed_ref: Option<&str>,
        pr_url: Option<&str>,
        now: i64,
    ) -> Result<(), StateError> {
        let conflicts = (!conflicts.is_empty())
            .then(|| serde_json::to_string(conflicts).expect("strings serialize"));
        self.lock().execute(
            "UPDATE staged_commits SET state = ?2, reason = ?3, conflicts = ?4,
                 commit_oid = coalesce(?5, commit_oid), pushed_commit = coalesce(?6, pushed_commit),
                 pushed_ref = coalesce(?7, pushed_ref), pr_url = coalesce(?8, pr_url), updated_at = ?9
             WHERE id = ?1",
            params![id, state, reason, conflicts, commit, pushed_commit, pushed_ref, pr_url, now],
        )?;
        Ok(())
    }
}

impl Db {
    /// Deletes discarded staged commits (and their files) last changed before `before_ms`;
    /// returns their ids.
    pub fn staged_prune_discarded(&self, before_ms: i64) -> Result<Vec<String>, StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let ids: Vec<String> = {
            let mut st = tx.prepare(
                "SELECT id FROM staged_commits WHERE state = 'discarded' AND updated_at < ?1
                 ORDER BY id",
            )?;
            let rows = st.query_map(params![before_ms], |r| r.get(0))?;
            rows.collect::<Result<_, _>>()?
        };
        for id in &ids {
            tx.execute("DELETE FROM staged_files WHERE commit_id = ?1", params![id])?;
            tx.execute("DELETE FROM staged_commits WHERE id = ?1", params![id])?;
        }
        tx.commit()?;
        Ok(ids)
    }
}

impl Db {
    /// The journal position at which the base of repo `repo_id` last moved (a pull, a direct
    /// push); 0 when not known (a repo pulled before wardfs recorded it).
    pub fn repo_based_at(&self, repo_id: i64) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .query_row(
                "SELECT base_journal_id FROM repos WHERE id = ?1",
                [repo_id],
                |r| r.get(0),
            )
            .optional()?
            .unwrap_or(0))
    }

    /// Who changed `scope.path` of `scope.zone` (written, deleted, moved there or away) in its
    /// time span, newest first, at most `limit`: one [`Writer`] per (via, pid, uid). Git's own
    /// writes (a pull, a revert) and events are not changes of the agent's and are left out.
    pub fn journal_writers(
        &self,
        scope: &WriterScope<'_>,
        limit: usize,
    ) -> Result<Vec<Writer>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT via, pid, uid, count(*), max(time_ms), max(id) FROM (
                 SELECT id, via, pid, uid, time_ms, op, detail FROM journal
                     WHERE zone = ?1 AND path = ?2
                 UNION ALL
                 SELECT id, via, pid, uid, time_ms, op, detail FROM journal
                     WHERE zone = ?1 AND to_path = ?2)
             WHERE detail IS NULL AND via != 'git' AND time_ms >= ?3
                 AND (?4 IS NULL OR time_ms <= ?4)
             GROUP BY via, pid, uid ORDER BY max(id) DESC LIMIT ?5",
        )?;
        let rows = st.query_map(
            params![
                scope.zone,
                scope.path,
                scope.since_ms,
                scope.until_ms,
                limit.max(1) as i64
            ],
            |r| {
                Ok(Writer {
                    zone: scope.zone.to_string(),
                    via: r.get(0)?,
                    pid: r.get(1)?,
                    uid: r.get(2)?,
                    changes: r.get::<_, i64>(3)? as u64,
                    last_ms: r.get(4)?,
                })
            },
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Records that repo `id`'s base moved now: at the journal's last row.
fn mark_base_moved(tx: &rusqlite::Transaction<'_>, id: i64) -> Result<(), StateError> {
    tx.execute(
        "UPDATE repos SET base_journal_id = (SELECT coalesce(max(id), 0) FROM journal)
         WHERE id = ?1",
        [id],
    )?;
    Ok(())
}

/// A file's writers as stored (JSON; NULL when none are known).
fn writers_json(w: &[Writer]) -> Option<String> {
    (!w.is_empty()).then(|| serde_json::to_string(w).expect("writers serialize"))
}

fn file_from(r: &rusqlite::Row<'_>) -> rusqlite::Result<FileRow> {
    Ok(FileRow {
        path: r.get(0)?,
        base_oid: r.get(1)?,
        base_mode: r.get(2)?,
        state: r.get(3)?,
        upstream_oid: r.get(4)?,
    })
}

/// The git tables (migration 2).
pub(super) const MIGRATION: &str = "
    CREATE TABLE repos (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        url TEXT NOT NULL,
        branch TEXT NOT NULL,
        dir TEXT NOT NULL UNIQUE,
        mirror TEXT NOT NULL,
        base TEXT NOT NULL,
        paths TEXT NOT NULL,
        pulled_at INTEGER NOT NULL,
        status_journal_id INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE workspace_files (
        repo_id INTEGER NOT NULL REFERENCES repos(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        base_oid TEXT,
        base_mode INTEGER,
        state TEXT NOT NULL,
        upstream_oid TEXT,
        PRIMARY KEY (repo_id, path)
    );
    CREATE INDEX workspace_files_state ON workspace_files(repo_id, state);
    CREATE TABLE staged_commits (
        id TEXT PRIMARY KEY,
        repo_id INTEGER NOT NULL REFERENCES repos(id),
        branch TEXT NOT NULL,
        message TEXT NOT NULL,
        base TEXT NOT NULL,
        commit_oid TEXT NOT NULL,
        state TEXT NOT NULL,
        reason TEXT,
        conflicts TEXT,
        pushed_commit TEXT,
        pushed_ref TEXT,
        pr_url TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    );
    CREATE TABLE staged_files (
        commit_id TEXT NOT NULL REFERENCES staged_commits(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        operation TEXT NOT NULL,
        additions INTEGER NOT NULL,
        deletions INTEGER NOT NULL,
        binary INTEGER NOT NULL,
        oversized INTEGER NOT NULL,
        oid TEXT,
        orig_oid TEXT,
        diff TEXT,
        PRIMARY KEY (commit_id, path)
    );";

/// Migration 11: where a staged commit's files were read from and who wrote each; when a repo's
/// base last moved; an index to find a move by its destination (for a file's writers).
pub(super) const MIGRATION_PROVENANCE: &str = "
    ALTER TABLE staged_commits ADD COLUMN zone TEXT;
    ALTER TABLE staged_files ADD COLUMN writers TEXT;
    ALTER TABLE repos ADD COLUMN base_journal_id INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX journal_zone_to_path ON journal(zone, to_path) WHERE to_path IS NOT NULL;";

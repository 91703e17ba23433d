//! Checkpoints: one row per snapshot of a zone, pointing at a tree in the daemon's object store
//! (`crate::checkpoint`), and the journal positions that make the next one incremental; and one
//! row per restore, written before it changes a file and marked when it ends, so that a restore
//! a crash cut short is found (and finished) at the next start.

use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::{Db, Origin, StateError};

/// The table (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION: &str = "CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        zone TEXT NOT NULL,
        tree TEXT NOT NULL,
        parent INTEGER,
        message TEXT NOT NULL,
        via TEXT NOT NULL,
        pid INTEGER,
        uid INTEGER,
        time_ms INTEGER NOT NULL,
        journal_pos INTEGER NOT NULL,
        files INTEGER NOT NULL,
        not_kept INTEGER NOT NULL
    );
    CREATE INDEX checkpoints_zone ON checkpoints(zone, id);";

/// The paths a zone's journal rows after a position name ([`Db::journal_zone_paths_since`]):
/// through the `(zone, id)` index (see the test
/// `state::tests::a_zones_rows_after_a_position_are_found_through_the_zone_id_index`).
pub(super) const ZONE_PATHS_SINCE: &str = "SELECT path FROM journal WHERE zone = ?1 AND id > ?2
     UNION SELECT to_path FROM journal WHERE zone = ?1 AND id > ?2 AND to_path IS NOT NULL
     LIMIT ?3";

/// The exact permission bits of a checkpoint's files (appended to the migrations).
pub(super) const MIGRATION_MODES: &str = "ALTER TABLE checkpoints ADD COLUMN modes TEXT;";

/// The scope of a checkpoint of a directory, and the restores (appended to the migrations).
pub(super) const MIGRATION_RESTORES: &str = "ALTER TABLE checkpoints ADD COLUMN scope TEXT;
    CREATE TABLE restores (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        checkpoint INTEGER NOT NULL,
        before INTEGER NOT NULL,
        zone TEXT NOT NULL,
        paths TEXT NOT NULL,
        via TEXT NOT NULL,
        pid INTEGER,
        uid INTEGER,
        started_ms INTEGER NOT NULL,
        finished_ms INTEGER,
        state TEXT NOT NULL,
        detail TEXT
    );";

/// Where each zone was last found to be its latest checkpoint's tree by a check that recorded
/// nothing (appended to the migrations): one row per zone, so that after a start the next check
/// reads the journal from there, not from the checkpoint's own position.
pub(super) const MIGRATION_CHECKED: &str = "CREATE TABLE checkpoint_checks (
        zone TEXT PRIMARY KEY,
        checkpoint INTEGER NOT NULL,
        journal_pos INTEGER NOT NULL
    );";

/// A checkpoint to record.
#[derive(Debug, Clone)]
pub struct NewCheckpoint<'a> {
    pub zone: &'a str,
    /// The tree's object id (hex).
    pub tree: &'a str,
    pub parent: Option<i64>,
    pub message: &'a str,
    pub origin: Origin,
    pub time_ms: i64,
    /// The last journal row the tree includes.
    pub journal_pos: i64,
    pub files: u64,
    /// Files recorded by size only (over `checkpoints.max_file_bytes`).
    pub not_kept: u64,
    /// The directory (relative to the zone) it was taken of; `None`: the whole zone.
    pub scope: Option<&'a str>,
    /// The blob (hex) listing the permission bits of files whose bits the tree's modes do not
    /// tell (anything but 0644 and 0755); `None`: there are none.
    pub modes: Option<&'a str>,
}

/// A checkpoint: a snapshot of a zone in the daemon's object store.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "Checkpoint")]
pub struct CheckpointRow {
    pub id: i64,
    /// `workspace` or `cache`.
    pub zone: String,
    /// The git tree id of the snapshot.
    pub tree: String,
    /// The previous checkpoint of the zone.
    pub parent: Option<i64>,
    /// What it is for, as given (the daemon's own say why: `auto`, `before git pull of …`).
    pub message: String,
    /// Who asked: `api`, `fuse`, `git`, `mirror`, `watcher` or `internal`.
    pub via: String,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    /// When it was taken, milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// The last journal row the snapshot includes.
    pub journal_pos: i64,
    /// Files and symlinks in the snapshot.
    pub files: u64,
    /// Files of the changes it recorded that are over `checkpoints.max_file_bytes`: recorded by
    /// size only.
    pub not_kept: u64,
    /// The directory (relative to the zone) it was taken of, which a restore and a diff cover
    /// unless told otherwise; null: the whole zone. (The tree is the whole zone's either way.)
    #[serde(default)]
    pub scope: Option<String>,
    /// The blob (hex) of the exact permission bits of its files, where the tree's modes fall
    /// short (the daemon's own; not part of the API).
    #[serde(skip)]
    #[schemars(skip)]
    pub modes: Option<String>,
}

const COLUMNS: &str =
    "id, zone, tree, parent, message, via, pid, uid, time_ms, journal_pos, files, \
     not_kept, scope, modes";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<CheckpointRow> {
    Ok(CheckpointRow {
        id: r.get(0)?,
        zone: r.get(1)?,
        tree: r.get(2)?,
        parent: r.get(3)?,
        message: r.get(4)?,
        via: r.get(5)?,
        pid: r.get(6)?,
        uid: r.get(7)?,
        time_ms: r.get(8)?,
        journal_pos: r.get(9)?,
        files: r.get::<_, i64>(10)? as u64,
        not_kept: r.get::<_, i64>(11)? as u64,
        scope: r.get(12)?,
        modes: r.get(13)?,
    })
}

/// A restore: `running` from before its first change until it ends (`done`, or `failed` with
/// the error in `detail`); one found `running` at start was cut short by a crash and is marked
/// `interrupted`, then `resumed` (with what the finishing restore did in `detail`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[schemars(rename = "Restore")]
pub struct RestoreRow {
    pub id: i64,
    /// The checkpoint restored.
    pub checkpoint: i64,
    /// The checkpoint of the zone taken just before (restoring it undoes the restore).
    pub before: i64,
    /// `workspace` or `cache`.
    pub zone: String,
    /// The virtual paths asked for, as given; empty: all of the checkpoint's scope.
    pub paths: Vec<String>,
    /// Who asked: `api`, `fuse`, `git`, `mirror`, `watcher` or `internal`.
    pub via: String,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    /// When it began, milliseconds since the Unix epoch.
    pub started_ms: i64,
    /// When it ended; null while it runs.
    pub finished_ms: Option<i64>,
    /// `running`, `done`, `failed`, `interrupted` or `resumed`.
    pub state: String,
    /// What it did (counts and the undo checkpoint), or the error that stopped it.
    pub detail: Option<String>,
}

const RESTORE_COLUMNS: &str =
    "id, checkpoint, before, zone, paths, via, pid, uid, started_ms, finished_ms, state, detail";

fn restore_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RestoreRow> {
    let paths: String = r.get(4)?;
    Ok(RestoreRow {
        id: r.get(0)?,
        checkpoint: r.get(1)?,
        before: r.get(2)?,
        zone: r.get(3)?,
        paths: serde_json::from_str(&paths).unwrap_or_default(),
        via: r.get(5)?,
        pid: r.get(6)?,
        uid: r.get(7)?,
        started_ms: r.get(8)?,
        finished_ms: r.get(9)?,
        state: r.get(10)?,
        detail: r.get(11)?,
    })
}

impl Db {
    /// Records a checkpoint; returns its id.
    pub fn checkpoint_insert(&self, c: &NewCheckpoint<'_>) -> Result<i64, StateError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO checkpoints (zone, tree, parent, message, via, pid, uid, time_ms,
                journal_pos, files, not_kept, scope, modes)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                c.zone,
                c.tree,
                c.parent,
                c.message,
                c.origin.via.as_str(),
                c.origin.pid,
                c.origin.uid,
                c.time_ms,
                c.journal_pos,
                c.files as i64,
                c.not_kept as i64,
                c.scope,
                c.modes,
            ],
        )?;
        let id = conn.last_insert_rowid();
        drop(conn);
        self.announce();
        Ok(id)
    }

    /// Records that a restore of checkpoint `checkpoint` starts (state `running`); returns its
    /// id. Written before the restore changes anything.
    #[allow(clippy::too_many_arguments)]
    pub fn restore_begin(
        &self,
        checkpoint: i64,
        before: i64,
        zone: &str,
        paths: &[String],
        origin: Origin,
        now_ms: i64,
    ) -> Result<i64, StateError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO restores (checkpoint, before, zone, paths, via, pid, uid, started_ms, state)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 'running')",
            params![
                checkpoint,
                before,
                zone,
                serde_json::to_string(paths).expect("strings serialize"),
                origin.via.as_str(),
                origin.pid,
                origin.uid,
                now_ms,
            ],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// Marks restore `id` ended in `state`, with `detail`.
    pub fn restore_end(
        &self,
        id: i64,
        state: &str,
        detail: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StateError> {
        self.lock().execute(
            "UPDATE restores SET state = ?2, detail = ?3, finished_ms = ?4 WHERE id = ?1",
            params![id, state, detail, now_ms],
        )?;
        Ok(())
    }

    /// Restores, newest first (`running` ones only with `running`).
    pub fn restore_list(&self, running: bool, limit: usize) -> Result<Vec<RestoreRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {RESTORE_COLUMNS} FROM restores WHERE (?1 = 0 OR state = 'running')
             ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = st.query_map(params![running as i64, limit.max(1) as i64], restore_row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Notes that `zone` was checkpoint `checkpoint`'s tree at journal position `journal_pos`
    /// (replacing what was noted of the zone before).
    pub fn checkpoint_checked_set(
        &self,
        zone: &str,
        checkpoint: i64,
        journal_pos: i64,
    ) -> Result<(), StateError> {
        self.lock()
            .prepare_cached(
                "INSERT INTO checkpoint_checks (zone, checkpoint, journal_pos) VALUES (?1, ?2, ?3)
                 ON CONFLICT(zone) DO UPDATE SET checkpoint = ?2, journal_pos = ?3",
            )?
            .execute(params![zone, checkpoint, journal_pos])?;
        Ok(())
    }

    /// What [`Db::checkpoint_checked_set`] noted of each zone: (zone, checkpoint, journal position).
    pub fn checkpoint_checked_all(&self) -> Result<Vec<(String, i64, i64)>, StateError> {
        let conn = self.lock();
        let mut st =
            conn.prepare_cached("SELECT zone, checkpoint, journal_pos FROM checkpoint_checks")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The zones that have checkpoints (removed forks' included).
    pub fn checkpoint_zones(&self) -> Result<Vec<String>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached("SELECT DISTINCT zone FROM checkpoints")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The checkpoint `id`.
    pub fn checkpoint_get(&self, id: i64) -> Result<Option<CheckpointRow>, StateError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {COLUMNS} FROM checkpoints WHERE id = ?1"),
                params![id],
                row,
            )
            .optional()?)
    }

    /// The newest checkpoint of `zone`.
    pub fn checkpoint_last(&self, zone: &str) -> Result<Option<CheckpointRow>, StateError> {
        Ok(self
            .lock()
            .query_row(
                &format!(
                    "SELECT {COLUMNS} FROM checkpoints WHERE zone = ?1 ORDER BY id DESC LIMIT 1"
                ),
                params![zone],
                row,
            )
            .optional()?)
    }

    /// Checkpoints, newest first (of one zone, or of all).
    pub fn checkpoint_list(
        &self,
        zone: Option<&str>,
        limit: usize,
    ) -> Result<Vec<CheckpointRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM checkpoints WHERE (?1 IS NULL OR zone = ?1)
             ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = st.query_map(params![zone, limit.max(1) as i64], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Deletes the checkpoints of `zone` past the newest `keep` (0: no limit) and those made
    /// before `before_ms`, never the newest nor a live fork's fork point; returns how many went.
    pub fn checkpoint_prune(
        &self,
        zone: &str,
        keep: u32,
        before_ms: Option<i64>,
    ) -> Result<u64, StateError> {
        let conn = self.lock();
        let mut n = 0;
        if keep > 0 {
            n += conn.execute(
                &format!(
                    "DELETE FROM checkpoints WHERE zone = ?1 AND id NOT IN
                       (SELECT id FROM checkpoints WHERE zone = ?1 ORDER BY id DESC LIMIT ?2)
                       AND id NOT IN ({FORK_POINTS})"
                ),
                params![zone, keep as i64],
            )?;
        }
        if let Some(before) = before_ms {
            n += conn.execute(
                &format!(
                    "DELETE FROM checkpoints WHERE zone = ?1 AND time_ms < ?2
                       AND id <> (SELECT max(id) FROM checkpoints WHERE zone = ?1)
                       AND id NOT IN ({FORK_POINTS})"
                ),
                params![zone, before],
            )?;
        }
        Ok(n as u64)
    }

    /// The trees of every checkpoint kept.
    pub fn checkpoint_trees(&self) -> Result<Vec<String>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached("SELECT DISTINCT tree FROM checkpoints")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The blobs of exact permission bits the checkpoints name (their `modes`).
    pub fn checkpoint_modes(&self) -> Result<Vec<String>, StateError> {
        let conn = self.lock();
        let mut st =
            conn.prepare_cached("SELECT DISTINCT modes FROM checkpoints WHERE modes IS NOT NULL")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The id of the newest journal row (0 when the journal is empty).
    pub fn journal_last_id(&self) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .query_row("SELECT coalesce(max(id), 0) FROM journal", [], |r| r.get(0))?)
    }

    /// The id of the oldest journal row still kept (`None` when the journal is empty).
    pub fn journal_first_id(&self) -> Result<Option<i64>, StateError> {
        Ok(self
            .lock()
            .query_row("SELECT min(id) FROM journal", [], |r| r.get(0))?)
    }

    /// The paths of `zone` the journal names after row `after` (a move names both ends), each
    /// once, at most `limit` (`None` past it: too many to list).
    pub fn journal_zone_paths_since(
        &self,
        zone: &str,
        after: i64,
        limit: usize,
    ) -> Result<Option<Vec<String>>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(ZONE_PATHS_SINCE)?;
        let rows = st.query_map(params![zone, after, limit as i64 + 1], |r| {
            r.get::<_, String>(0)
        })?;
        let paths: Vec<String> = rows.collect::<Result<_, _>>()?;
        Ok((paths.len() <= limit).then_some(paths))
    }
}

/// Returns the checkpoints recorded after checkpoint `after`, oldest first, at most `limit`.
pub(super) fn checkpoints_after(
    conn: &rusqlite::Connection,
    after: i64,
    limit: usize,
) -> Result<Vec<CheckpointRow>, StateError> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM checkpoints WHERE id > ?1 ORDER BY id LIMIT ?2"
    ))?;
    let rows = st.query_map(params![after, limit.max(1) as i64], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The checkpoints retention keeps whatever their age: each live fork's fork point (merge,
/// update and changes start from it) and those it had, which a restore puts back.
const FORK_POINTS: &str = "SELECT base FROM forks WHERE removed_ms IS NULL
    UNION SELECT m.old_base FROM fork_moves m JOIN forks f ON f.id = m.fork
      WHERE f.removed_ms IS NULL";

//! Checkpoints: one row per snapshot of a zone, pointing at a tree in the daemon's object store
//! (`crate::checkpoint`), and the journal positions that make the next one incremental.

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
}

/// A recorded checkpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CheckpointRow {
    pub id: i64,
    pub zone: String,
    pub tree: String,
    pub parent: Option<i64>,
    pub message: String,
    pub via: String,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    pub time_ms: i64,
    pub journal_pos: i64,
    pub files: u64,
    pub not_kept: u64,
}

const COLUMNS: &str =
    "id, zone, tree, parent, message, via, pid, uid, time_ms, journal_pos, files, not_kept";

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
    })
}

impl Db {
    /// Records a checkpoint; returns its id.
    pub fn checkpoint_insert(&self, c: &NewCheckpoint<'_>) -> Result<i64, StateError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO checkpoints (zone, tree, parent, message, via, pid, uid, time_ms,
                journal_pos, files, not_kept)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
            ],
        )?;
        let id = conn.last_insert_rowid();
        drop(conn);
        self.announce();
        Ok(id)
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
    /// before `before_ms`, never the newest; returns how many went.
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
                "DELETE FROM checkpoints WHERE zone = ?1 AND id NOT IN
                   (SELECT id FROM checkpoints WHERE zone = ?1 ORDER BY id DESC LIMIT ?2)",
                params![zone, keep as i64],
            )?;
        }
        if let Some(before) = before_ms {
            n += conn.execute(
                "DELETE FROM checkpoints WHERE zone = ?1 AND time_ms < ?2
                   AND id <> (SELECT max(id) FROM checkpoints WHERE zone = ?1)",
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
        let mut st = conn.prepare_cached(
            "SELECT path FROM journal WHERE zone = ?1 AND id > ?2
             UNION SELECT to_path FROM journal WHERE zone = ?1 AND id > ?2 AND to_path IS NOT NULL
             LIMIT ?3",
        )?;
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

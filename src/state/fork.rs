//! Forks: one row per fork of a zone (issue 30): its name, the zone or fork it was made from,
//! the checkpoint that is its fork point, where its files live, and when it was removed.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use super::{Db, Origin, StateError};

/// The table (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION: &str = "CREATE TABLE forks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        parent TEXT NOT NULL,
        base INTEGER NOT NULL,
        dir TEXT NOT NULL,
        via TEXT NOT NULL,
        pid INTEGER,
        uid INTEGER,
        created_ms INTEGER NOT NULL,
        removed_ms INTEGER,
        last_checkpoint INTEGER
    );
    CREATE UNIQUE INDEX forks_alive ON forks(name) WHERE removed_ms IS NULL;";

/// A fork to record.
#[derive(Debug, Clone)]
pub struct NewFork<'a> {
    pub name: &'a str,
    /// The zone it was made from, as paths name it (`workspace`, `forks/a`).
    pub parent: &'a str,
    /// The checkpoint holding its fork point (of the parent; of the fork itself after an update).
    pub base: i64,
    /// The directory holding its files.
    pub dir: &'a str,
    pub origin: Origin,
    pub created_ms: i64,
}

/// A fork as recorded.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ForkRecord {
    pub id: i64,
    pub name: String,
    pub parent: String,
    pub base: i64,
    pub dir: String,
    pub via: String,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
    pub created_ms: i64,
    pub removed_ms: Option<i64>,
    /// The checkpoint that keeps its changes after its removal.
    pub last_checkpoint: Option<i64>,
}

const COLUMNS: &str =
    "id, name, parent, base, dir, via, pid, uid, created_ms, removed_ms, last_checkpoint";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ForkRecord> {
    Ok(ForkRecord {
        id: r.get(0)?,
        name: r.get(1)?,
        parent: r.get(2)?,
        base: r.get(3)?,
        dir: r.get(4)?,
        via: r.get(5)?,
        pid: r.get(6)?,
        uid: r.get(7)?,
        created_ms: r.get(8)?,
        removed_ms: r.get(9)?,
        last_checkpoint: r.get(10)?,
    })
}

impl Db {
    /// Records a new fork; `EXISTS`-like failure (a constraint error) when one of that name
    /// exists.
    pub fn fork_insert(&self, f: &NewFork<'_>) -> Result<i64, StateError> {
        let conn = self.lock();
        conn.execute(
            "INSERT INTO forks (name, parent, base, dir, via, pid, uid, created_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                f.name,
                f.parent,
                f.base,
                f.dir,
                f.origin.via.as_str(),
                f.origin.pid,
                f.origin.uid,
                f.created_ms
            ],
        )?;
        Ok(conn.last_insert_rowid())
    }

    /// The fork named `name` that exists now.
    pub fn fork_get(&self, name: &str) -> Result<Option<ForkRecord>, StateError> {
        Ok(self
            .lock()
            .query_row(
                &format!("SELECT {COLUMNS} FROM forks WHERE name = ?1 AND removed_ms IS NULL"),
                params![name],
                row,
            )
            .optional()?)
    }

    /// The forks that exist now, oldest first.
    pub fn fork_list(&self) -> Result<Vec<ForkRecord>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM forks WHERE removed_ms IS NULL ORDER BY id"
        ))?;
        let rows = st.query_map([], row)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Moves the fork `id`'s fork point to the checkpoint `base` (after an update).
    pub fn fork_set_base(&self, id: i64, base: i64) -> Result<(), StateError> {
        self.lock().execute(
            "UPDATE forks SET base = ?2 WHERE id = ?1",
            params![id, base],
        )?;
        Ok(())
    }

    /// Marks the fork `id` removed at `time_ms`, its changes kept in `last_checkpoint`.
    pub fn fork_remove(
        &self,
        id: i64,
        time_ms: i64,
        last_checkpoint: Option<i64>,
    ) -> Result<(), StateError> {
        self.lock().execute(
            "UPDATE forks SET removed_ms = ?2, last_checkpoint = ?3 WHERE id = ?1",
            params![id, time_ms, last_checkpoint],
        )?;
        Ok(())
    }
}

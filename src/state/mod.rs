//! The state database: SQLite (bundled), WAL, schema migrations by `user_version`.
//!
//! [`Db`] owns one connection behind a mutex (writes are short; WAL lets readers of other
//! connections proceed). Migrations are an ordered list of SQL batches; `user_version` records how
//! many have run, so opening an older database upgrades it in place and a newer one is refused.
//!
//! Owns the SQLite database. May import only `config` (`tests/rules` checks the imports).

mod checkpoint;
mod events;
mod git;
mod journal;
mod mirror;
mod sandbox;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

pub use checkpoint::{CheckpointRow, NewCheckpoint, RestoreRow};
pub use events::{Cursor, Event, EventBatch, EventBounds};
pub use git::{FileRow, RepoRow, StagedFileRow, StagedRow};
pub use journal::{JournalEntry, JournalFilter, JournalRow, Origin, Via, SANDBOX_ZONE};
pub use mirror::MirrorEntryRow;
pub use sandbox::SandboxRow;

/// A state database that could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("state database {path} has schema version {found}, newer than this sandfs ({known}); upgrade sandfs")]
    TooNew {
        path: String,
        found: i64,
        known: i64,
    },
    #[error("state database: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("state directory {path}: {source}")]
    Dir {
        path: String,
        source: std::io::Error,
    },
}

/// Schema migrations, in order. Never edit one that has shipped: append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: the change journal.
    "CREATE TABLE journal (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time_ms INTEGER NOT NULL,
        zone TEXT NOT NULL,
        path TEXT NOT NULL,
        op TEXT NOT NULL,
        bytes INTEGER,
        to_path TEXT,
        via TEXT NOT NULL,
        pid INTEGER,
        uid INTEGER
    );
    CREATE INDEX journal_zone_path ON journal(zone, path);
    CREATE INDEX journal_time ON journal(time_ms);",
    // 2: git: pulled repos, their files' bases, staged commits; a detail column for journal events.
    git::MIGRATION,
    "ALTER TABLE journal ADD COLUMN detail TEXT;",
    // 4: mirrors of zones into sandboxes and their manifests.
    mirror::MIGRATION,
    // 5: remote sandboxes and their sessions.
    sandbox::MIGRATION,
    // 6: checkpoints of zones.
    checkpoint::MIGRATION,
    // 7: checkpoints of a directory in a zone; restores, so that one a crash cut short is found.
    checkpoint::MIGRATION_RESTORES,
    // 8: provisioned sandboxes: what their provider calls them, their volume and snapshot.
    sandbox::MIGRATION_PROVISION,
];

/// The state database.
pub struct Db {
    conn: Mutex<rusqlite::Connection>,
    path: String,
    /// Counts the journal rows and checkpoints appended, so followers of the events
    /// ([`Db::subscribe`]) wake when there is something new instead of polling.
    appended: tokio::sync::watch::Sender<u64>,
}

impl Db {
    /// Opens (creating if needed) `dir/state.db` and runs pending migrations.
    pub fn open_in(dir: &Path) -> Result<Db, StateError> {
        std::fs::create_dir_all(dir).map_err(|e| StateError::Dir {
            path: dir.display().to_string(),
            source: e,
        })?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        Db::open(&dir.join("state.db"))
    }

    /// Opens (creating if needed) the database file at `path` and runs pending migrations.
    pub fn open(path: &Path) -> Result<Db, StateError> {
        let display = path.display().to_string();
        let conn = rusqlite::Connection::open(path).map_err(|e| StateError::Open {
            path: display.clone(),
            source: e,
        })?;
        Db::init(conn, display)
    }

    /// Opens a private in-memory database (tests).
    pub fn open_in_memory() -> Result<Db, StateError> {
        Db::init(rusqlite::Connection::open_in_memory()?, ":memory:".into())
    }

    fn init(mut conn: rusqlite::Connection, path: String) -> Result<Db, StateError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(StateError::TooNew {
                path,
                found: version,
                known,
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = conn.transaction()?;
            tx.execute_batch(sql)?;
            tx.pragma_update(None, "user_version", (i + 1) as i64)?;
            tx.commit()?;
        }
        Ok(Db {
            conn: Mutex::new(conn),
            path,
            appended: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Returns the database's file path (or `:memory:`).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Returns the schema version.
    pub fn schema_version(&self) -> Result<i64, StateError> {
        Ok(self
            .lock()
            .pragma_query_value(None, "user_version", |r| r.get(0))?)
    }

    /// Returns a receiver that sees a change each time a journal row or a checkpoint is
    /// appended (by this `Db`: another process's appends are not seen).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.appended.subscribe()
    }

    /// Wakes the receivers of [`Db::subscribe`]; called once the appended row is committed.
    fn announce(&self) {
        self.appended.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, rusqlite::Connection> {
        // A panic while holding the lock leaves the connection usable: SQLite rolls back.
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_run_once_and_newer_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.db");
        let db = Db::open(&p).unwrap();
        assert_eq!(db.schema_version().unwrap(), MIGRATIONS.len() as i64);
        drop(db);
        let db = Db::open(&p).unwrap();
        assert_eq!(db.schema_version().unwrap(), MIGRATIONS.len() as i64);
        db.lock().pragma_update(None, "user_version", 999).unwrap();
        drop(db);
        let err = Db::open(&p).err().unwrap().to_string();
        assert!(err.contains("999") && err.contains("newer"), "{err}");
    }
}

//! The state database: SQLite (bundled), WAL, schema migrations by `user_version`.
//!
//! [`Db`] owns one connection behind a mutex (writes are short; WAL lets readers of other
//! connections proceed). Journal rows of the busiest writers (the mount, the watcher) may be
//! appended deferred ([`Db::journal_append_deferred`]): they wait in memory and go in together,
//! one transaction, when the connection is next taken for anything (so every read sees them,
//! in order), when enough have gathered, or 25 ms later (the flusher thread of
//! [`Db::start_flusher`]). A crash loses the rows still waiting, never a file: the start-up
//! catch-up (`Checkpoints::catch_up`) journals again whatever changed since the last
//! checkpoint. Migrations are an ordered list of SQL batches; `user_version` records how
//! many have run, so opening an older database upgrades it in place and a newer one is refused.
//!
//! Owns the SQLite database. May import only `config` (`tests/rules` checks the imports).

mod checkpoint;
mod events;
mod fork;
mod git;
mod journal;
mod lock;
mod mirror;
#[cfg(test)]
#[path = "../../tests/support/page_cache.rs"]
pub(crate) mod page_cache;
mod run;
mod sandbox;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

pub use checkpoint::{CheckpointRow, NewCheckpoint, RestoreRow};
pub use events::{Cursor, Event, EventBatch, EventBounds};
pub use fork::{ForkRecord, NewFork};
pub use git::{FileRow, RepoRow, StagedFileRow, StagedRow, Writer, WriterScope};
pub use journal::{
    JournalEntry, JournalFilter, JournalRow, Origin, OwnedEntry, Via, ZoneChange, ZoneRow,
    SANDBOX_ZONE,
};
pub use lock::DirLock;
pub use mirror::MirrorEntryRow;
pub use run::{RunRow, RUN_OUTPUT_KEPT};
pub use sandbox::SandboxRow;

/// A state database that could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state database {path}: {source}")]
    Open {
        path: String,
        source: rusqlite::Error,
    },
    #[error("state database {path} has schema version {found}, newer than this wardfs ({known}); upgrade wardfs")]
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
    #[error("another wardfs daemon{} uses the state directory {path}; stop it first, or give this one a state_dir of its own", pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    InUse { path: String, pid: Option<u32> },
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
    // 9: the exact permission bits of a checkpoint's files, where a git tree's modes fall short.
    checkpoint::MIGRATION_MODES,
    // 10: forks of zones.
    fork::MIGRATION,
    // 11: the zone a staged commit was read from and the writers of each file; when a repo's
    // base last moved; moves found by their destination.
    git::MIGRATION_PROVENANCE,
    // 12: the moves of forks' fork points, so a restore puts back the one it was taken with.
    fork::MIGRATION_MOVES,
    // 13: runs of commands in sandboxes.
    run::MIGRATION,
    // 14: the last bytes of a run's output.
    run::MIGRATION_OUTPUT,
    // 15: where each zone was last found to be its latest checkpoint's tree.
    checkpoint::MIGRATION_CHECKED,
    // 16: a zone's journal rows after a position, found by an index.
    journal::MIGRATION_ZONE_ID,
];

/// The state database.
pub struct Db {
    conn: Mutex<rusqlite::Connection>,
    /// The database's file (`None` in memory), which [`Db::warm_up`] reads ahead.
    file: Option<std::path::PathBuf>,
    /// Counts the journal rows and checkpoints appended, so followers of the events
    /// ([`Db::subscribe`]) wake when there is something new instead of polling.
    appended: tokio::sync::watch::Sender<u64>,
    /// Journal rows appended deferred, oldest first, not yet in the database.
    deferred: Mutex<Vec<journal::OwnedEntry>>,
    /// How many rows `deferred` holds (read without its lock on every [`Db::lock`]).
    deferred_n: AtomicUsize,
    /// Wakes the flusher when `deferred` gets its first row.
    deferred_wake: Condvar,
}

/// Deferred journal rows past this many go in at once, by the appender (a ring thread: the
/// database then sits on a request's path, so this is well above what [`DEFERRED_GATHER`]
/// gathers in a burst of an untar, about 400 rows).
const DEFERRED_MAX_ROWS: usize = 4096;

/// The most of the database file, and of its write-ahead log, [`Db::warm_up`] asks the kernel
/// to read: a journal kept for weeks can outgrow what is worth holding in memory.
const WARM_MAX_BYTES: u64 = 256 << 20;

/// How long the flusher lets deferred rows gather before it writes them: fewer, larger
/// transactions (5 ms before: the journal's thread spent a fifth more CPU on an untar,
/// docs/benchmarks.md, issue 32).
const DEFERRED_GATHER: Duration = Duration::from_millis(25);

/// How the database at `file` is named to people (`:memory:` for one in memory).
fn path_name(file: Option<&Path>) -> String {
    file.map_or_else(|| ":memory:".into(), |f| f.display().to_string())
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
        let conn = rusqlite::Connection::open(path).map_err(|e| StateError::Open {
            path: path.display().to_string(),
            source: e,
        })?;
        Db::init(conn, Some(path.to_path_buf()))
    }

    /// Opens a private in-memory database (tests).
    pub fn open_in_memory() -> Result<Db, StateError> {
        Db::init(rusqlite::Connection::open_in_memory()?, None)
    }

    fn init(
        mut conn: rusqlite::Connection,
        file: Option<std::path::PathBuf>,
    ) -> Result<Db, StateError> {
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(StateError::TooNew {
                path: path_name(file.as_deref()),
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
            file,
            appended: tokio::sync::watch::Sender::new(0),
            deferred: Mutex::default(),
            deferred_n: AtomicUsize::new(0),
            deferred_wake: Condvar::new(),
        })
    }

    /// Starts the thread that writes deferred journal rows a few milliseconds after they were
    /// appended (without it they go in when the connection is next used or enough gathered).
    /// It first asks the kernel to read the database ahead ([`Db::warm_up`]). It ends when the
    /// last `Arc` of the database is dropped.
    pub fn start_flusher(db: &Arc<Db>) {
        let weak: Weak<Db> = Arc::downgrade(db);
        let spawned = std::thread::Builder::new()
            .name("wardfs-journal".into())
            .spawn(move || {
                if let Some(db) = weak.upgrade() {
                    db.warm_up();
                }
                loop {
                    {
                        let Some(db) = weak.upgrade() else { return };
                        let rows = db.deferred.lock().unwrap_or_else(|p| p.into_inner());
                        if rows.is_empty() {
                            // Wakes for the first row, or once a second to see whether the
                            // database is still there.
                            let _ = db
                                .deferred_wake
                                .wait_timeout(rows, Duration::from_secs(1))
                                .unwrap_or_else(|p| p.into_inner());
                            continue;
                        }
                    }
                    std::thread::sleep(DEFERRED_GATHER);
                    let Some(db) = weak.upgrade() else { return };
                    drop(db.lock());
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(
                "cannot start the journal's flusher thread (rows go in on the next use): {e}"
            );
        }
    }

    /// Writes the deferred journal rows through `conn` (held), in one transaction.
    fn flush_deferred(&self, conn: &mut rusqlite::Connection) {
        let rows = {
            let mut d = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            self.deferred_n.store(0, Ordering::Release);
            std::mem::take(&mut *d)
        };
        if rows.is_empty() {
            return;
        }
        match journal::insert_deferred(conn, &rows) {
            Ok(()) => self.announce(),
            Err(e) => tracing::error!(rows = rows.len(), "could not record in the journal: {e}"),
        }
    }

    /// Asks the kernel to read the database file and its write-ahead log into the page
    /// cache (at most [`WARM_MAX_BYTES`] of each), without waiting for it. After a boot, the
    /// journal's rows otherwise read the `(zone, path)` index a page at a time as they go in:
    /// 37-49 MiB in random 4 KiB reads during the first `npm ci` through the mount, on a
    /// database of 667k rows (docs/benchmarks.md, issue 32).
    pub fn warm_up(&self) {
        let Some(file) = &self.file else { return };
        let mut wal = file.clone().into_os_string();
        wal.push("-wal");
        for p in [file.as_path(), Path::new(&wal)] {
            let Ok(f) = std::fs::File::open(p) else {
                continue;
            };
            let len = f.metadata().map_or(0, |m| m.len()).min(WARM_MAX_BYTES);
            let _ = rustix::fs::fadvise(
                &f,
                0,
                std::num::NonZeroU64::new(len),
                rustix::fs::Advice::WillNeed,
            );
        }
    }

    /// Returns the database's file path (or `:memory:`).
    pub fn path(&self) -> String {
        path_name(self.file.as_deref())
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

    /// Takes the connection, after writing any deferred journal rows through it (so whatever
    /// is read or written next comes after them).
    pub(crate) fn lock(&self) -> MutexGuard<'_, rusqlite::Connection> {
        // A panic while holding the lock leaves the connection usable: SQLite rolls back.
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if self.deferred_n.load(Ordering::Acquire) > 0 {
            self.flush_deferred(&mut conn);
        }
        conn
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        drop(self.lock());
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

    /// The queries for a zone's journal rows after a position read them through the
    /// `(zone, id)` index, from that position on. With only the `(zone, path)` index, SQLite's
    /// planner (with no statistics) read every row the zone ever journaled to find the few after
    /// the position, at each automatic check and holding the database (667k rows: 86 ms warm,
    /// 53 MB read from the disk cold); by row id alone, a zone with no checkpoint (the `cache`)
    /// read every row of every zone (issue 32).
    #[test]
    fn a_zones_rows_after_a_position_are_found_through_the_zone_id_index() {
        let db = Db::open_in_memory().unwrap();
        for sql in [
            checkpoint::ZONE_PATHS_SINCE,
            fork::PARENT_PATHS_SINCE,
            git::WORKSPACE_ROWS_SINCE,
        ] {
            let conn = db.lock();
            let mut st = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let n = st.parameter_count();
            let args: Vec<rusqlite::types::Value> =
                (0..n).map(|_| rusqlite::types::Value::Integer(1)).collect();
            let plan: Vec<String> = st
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let reads: Vec<&String> = plan.iter().filter(|l| l.contains("journal ")).collect();
            assert!(!reads.is_empty(), "{sql}: {plan:?}");
            for l in reads {
                assert!(
                    l.contains("INDEX journal_zone_id (zone=? AND id>?)"),
                    "{sql}: {plan:?}"
                );
            }
        }
    }

    /// The journal's thread has the kernel read the database into the page cache when it
    /// starts, not a page at a time as the first rows go in.
    #[test]
    fn the_journals_thread_reads_the_database_ahead_when_it_starts() {
        use super::page_cache::{becomes_resident, evict, resident};
        // On the build's disk: a page cache that can be dropped (/tmp may be a tmpfs).
        let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp");
        std::fs::create_dir_all(&base).unwrap();
        let dir = tempfile::tempdir_in(&base).unwrap();
        let db = Db::open_in(dir.path()).unwrap();
        let paths: Vec<String> = (0..20_000)
            .map(|i| format!("npm/node_modules/package-{i}/lib/some/deeper/file-{i}.js"))
            .collect();
        let rows: Vec<_> = paths
            .iter()
            .map(|p| journal::OwnedEntry::of(&row(p, Via::Fuse)))
            .collect();
        db.journal_append_many(&rows).unwrap();
        drop(db); // the last connection moves the write-ahead log into the file
        let file = dir.path().join("state.db");
        evict(&file);
        let db = Arc::new(Db::open_in(dir.path()).unwrap());
        let (cached, pages) = resident(&file);
        assert!(pages > 500, "{pages} pages");
        assert!(
            cached < pages / 2,
            "{cached} of {pages} pages cached before"
        );
        Db::start_flusher(&db);
        assert!(
            becomes_resident(&file),
            "{:?} of the pages",
            resident(&file)
        );
    }

    fn row<'a>(path: &'a str, via: Via) -> JournalEntry<'a> {
        JournalEntry {
            time_ms: 1,
            zone: "workspace",
            path,
            op: "write",
            bytes: None,
            to_path: None,
            origin: Origin {
                via,
                pid: None,
                uid: None,
            },
            detail: None,
        }
    }

    fn paths(db: &Db) -> Vec<String> {
        let mut rows = db
            .journal_query(&JournalFilter {
                limit: 10_000,
                ..JournalFilter::default()
            })
            .unwrap();
        rows.reverse();
        rows.into_iter().map(|r| r.path).collect()
    }

    #[test]
    fn attribute_changes_one_after_another_by_one_caller_are_one_row_and_nothing_else_merges() {
        let db = Db::open_in_memory().unwrap();
        let at = |path: &'static str, op: &'static str, time_ms: i64, pid: u32| JournalEntry {
            time_ms,
            op,
            origin: Origin {
                via: Via::Fuse,
                pid: Some(pid),
                uid: None,
            },
            ..row(path, Via::Fuse)
        };
        // tar: create, write, then owner, mode and times of the file: three setattrs.
        db.journal_append_deferred(&at("f", "create", 1, 7));
        db.journal_append_deferred(&at("f", "write", 2, 7));
        for t in 3..6 {
            db.journal_append_deferred(&at("f", "setattr", t, 7));
        }
        // Not repeats: another path, another caller, a setattr after another change.
        db.journal_append_deferred(&at("g", "setattr", 6, 7));
        db.journal_append_deferred(&at("g", "setattr", 7, 8));
        db.journal_append_deferred(&at("g", "write", 8, 8));
        db.journal_append_deferred(&at("g", "setattr", 9, 8));
        db.journal_append_deferred(&at("g", "write", 10, 8));
        db.journal_append_deferred(&at("g", "write", 11, 8));
        let rows = db
            .journal_query(&JournalFilter {
                limit: 100,
                ..JournalFilter::default()
            })
            .unwrap();
        let got: Vec<(String, String, i64)> = rows
            .iter()
            .rev()
            .map(|r| (r.path.clone(), r.op.clone(), r.time_ms))
            .collect();
        let want: Vec<(String, String, i64)> = [
            ("f", "create", 1),
            ("f", "write", 2),
            ("f", "setattr", 5),
            ("g", "setattr", 6),
            ("g", "setattr", 7),
            ("g", "write", 8),
            ("g", "setattr", 9),
            ("g", "write", 10),
            ("g", "write", 11),
        ]
        .iter()
        .map(|(p, o, t)| (p.to_string(), o.to_string(), *t))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn deferred_rows_are_seen_by_every_read_in_order_and_written_by_the_flusher_or_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.db");
        let db = Arc::new(Db::open(&p).unwrap());
        db.journal_append_deferred(&row("a", Via::Fuse));
        db.journal_append(&row("b", Via::Api)).unwrap();
        db.journal_append_deferred(&row("c", Via::Watcher));
        // A read takes the connection: the deferred rows go in first, in the order appended.
        assert_eq!(paths(&db), ["a", "b", "c"]);

        // More than a batch goes in by the appender itself.
        for i in 0..DEFERRED_MAX_ROWS {
            db.journal_append_deferred(&row(&format!("m{i}"), Via::Fuse));
        }
        assert_eq!(db.deferred_n.load(Ordering::Acquire), 0);

        // The flusher writes a lone row within milliseconds and wakes the followers.
        Db::start_flusher(&db);
        let mut followers = db.subscribe();
        followers.mark_unchanged();
        db.journal_append_deferred(&row("late", Via::Fuse));
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !followers.has_changed().unwrap() {
            assert!(
                std::time::Instant::now() < deadline,
                "the flusher did not run"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(db.deferred_n.load(Ordering::Acquire), 0);

        // Rows still waiting when the database closes are written, not lost.
        let other = Db::open(&p).unwrap();
        other.journal_append_deferred(&row("last", Via::Fuse));
        drop(other);
        drop(db);
        let db = Db::open(&p).unwrap();
        let all = paths(&db);
        assert_eq!(all.len(), 3 + DEFERRED_MAX_ROWS + 2);
        assert_eq!(all[all.len() - 2..], ["late", "last"]);
    }
}

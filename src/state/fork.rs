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

/// The moves of forks' fork points (a merge, an update, a restore undoing one), so that a
/// restore puts back the fork point a checkpoint was taken with; the journal rows a fork's merge
/// wrote in its parent, which are the fork's own changes and no overlap with it.
pub(super) const MIGRATION_MOVES: &str = "CREATE TABLE fork_moves (
        fork INTEGER NOT NULL,
        old_base INTEGER NOT NULL,
        new_base INTEGER NOT NULL,
        at INTEGER NOT NULL
    );
    CREATE INDEX fork_moves_fork ON fork_moves(fork, at);
    CREATE TABLE fork_merged_rows (fork INTEGER NOT NULL, journal_id INTEGER NOT NULL);
    CREATE INDEX fork_merged_rows_fork ON fork_merged_rows(fork);";

/// The paths a fork's parent's journal rows after a position name, but for those its merges
/// wrote ([`Db::fork_parent_paths_since`]): through the `(zone, id)` index (see the
/// test `state::tests::a_zones_rows_after_a_position_are_found_through_the_zone_id_index`).
pub(super) const PARENT_PATHS_SINCE: &str = "SELECT path FROM journal WHERE zone = ?1 AND id > ?2
       AND id NOT IN (SELECT journal_id FROM fork_merged_rows WHERE fork = ?4)
     UNION SELECT to_path FROM journal WHERE zone = ?1 AND id > ?2 AND to_path IS NOT NULL
     LIMIT ?3";

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

    /// Moves the fork `id`'s fork point from the checkpoint `old` to `new` (a merge or an
    /// update), remembering the move: checkpoints up to `at` were taken while `old` was the
    /// fork point, so a restore to one of them puts `old` back ([`Db::forks_follow_restore`]).
    pub fn fork_move_base(&self, id: i64, old: i64, new: i64, at: i64) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        move_base(&tx, id, old, new, at)?;
        tx.commit()?;
        Ok(())
    }

    /// Notes the journal rows of the merge of the fork `id` into `parent`: for each of `paths`
    /// (relative to the zones) the first row of `parent` after the journal position `after`,
    /// the merge's own write (another writer's earlier one would have made the merge leave the
    /// path alone). [`Db::fork_parent_paths_since`] leaves them out.
    pub fn fork_note_merged(
        &self,
        id: i64,
        parent: &str,
        after: i64,
        paths: &[String],
    ) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        {
            let mut st = tx.prepare_cached(
                "INSERT INTO fork_merged_rows (fork, journal_id)
                   SELECT ?1, min(id) FROM journal WHERE zone = ?2 AND id > ?3 AND path = ?4
                   HAVING min(id) IS NOT NULL",
            )?;
            for p in paths {
                st.execute(params![id, parent, after, p])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The paths the journal names as changed in `parent` after the position `after`, but for
    /// the rows the merges of the fork `id` wrote there (at most `limit`; `None` past it).
    pub fn fork_parent_paths_since(
        &self,
        id: i64,
        parent: &str,
        after: i64,
        limit: usize,
    ) -> Result<Option<Vec<String>>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(PARENT_PATHS_SINCE)?;
        let rows = st.query_map(params![parent, after, limit as i64 + 1, id], |r| {
            r.get::<_, String>(0)
        })?;
        let paths: Vec<String> = rows.collect::<Result<_, _>>()?;
        Ok((paths.len() <= limit).then_some(paths))
    }

    /// A restore of `zone` (`workspace`, `forks/a`) to the checkpoint `target`, the present
    /// kept in the checkpoint `before`, puts back the fork point of each fork it concerns (the
    /// fork `zone` is, and the forks made from `zone`) as it was when `target` was taken: undoing
    /// an update or a merge undoes the move of the fork point it made, and undoing that undo
    /// moves it again. Returns the names of the forks whose point moved.
    pub fn forks_follow_restore(
        &self,
        zone: &str,
        target: i64,
        before: i64,
    ) -> Result<Vec<String>, StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        let concerned: Vec<(i64, String, i64)> = {
            let mut st = tx.prepare_cached(
                "SELECT id, name, base FROM forks WHERE removed_ms IS NULL
                   AND ('forks/' || name = ?1 OR parent = ?1)",
            )?;
            let rows = st.query_map(params![zone], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect::<Result<_, _>>()?
        };
        let mut moved = Vec::new();
        for (id, name, base) in concerned {
            match base_at(&tx, id, target)? {
                Some(then) if then != base => {
                    move_base(&tx, id, base, then, before)?;
                    moved.push(name);
                }
                _ => {}
            }
        }
        tx.commit()?;
        Ok(moved)
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

fn move_base(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    old: i64,
    new: i64,
    at: i64,
) -> rusqlite::Result<()> {
    tx.execute("UPDATE forks SET base = ?2 WHERE id = ?1", params![id, new])?;
    tx.execute(
        "INSERT INTO fork_moves (fork, old_base, new_base, at) VALUES (?1, ?2, ?3, ?4)",
        params![id, old, new, at],
    )?;
    Ok(())
}

/// The fork point the fork `id` had when the checkpoint `checkpoint` was taken: the point the
/// last move before it set, else the point the first move after it left; `None` when the
/// point never moved.
fn base_at(
    tx: &rusqlite::Transaction<'_>,
    id: i64,
    checkpoint: i64,
) -> rusqlite::Result<Option<i64>> {
    let set_before = tx
        .query_row(
            "SELECT new_base FROM fork_moves WHERE fork = ?1 AND at < ?2
               ORDER BY at DESC, rowid DESC LIMIT 1",
            params![id, checkpoint],
            |r| r.get(0),
        )
        .optional()?;
    if set_before.is_some() {
        return Ok(set_before);
    }
    tx.query_row(
        "SELECT old_base FROM fork_moves WHERE fork = ?1 ORDER BY at, rowid LIMIT 1",
        params![id],
        |r| r.get(0),
    )
    .optional()
}

//! Mirror state: per (zone, sandbox, remote root) the manifest of what was last pushed.
//!
//! A `mirrors` row names one mirror; its `mirror_entries` hold, per path below the remote root,
//! what the remote holds as far as wardfs knows (content hash, size, mode, link target), the
//! local stat it was taken from (a cheap "unchanged" check) and the remote fingerprint (size,
//! remote mtime) read or set right after the transfer. Rows are written only after the remote
//! confirmed the transfer, so the manifest is never ahead of the remote. Times come from the
//! caller's clock; nothing in here reads "now".

use rusqlite::{params, OptionalExtension};

use super::{Db, StateError};

/// The tables (appended to the migrations in `state::MIGRATIONS`).
pub(super) const MIGRATION: &str = "CREATE TABLE mirrors (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        zone TEXT NOT NULL,
        sandbox TEXT NOT NULL,
        remote_root TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        pushed_at INTEGER,
        pulled_at INTEGER,
        UNIQUE (zone, sandbox, remote_root)
    );
    CREATE TABLE mirror_entries (
        mirror_id INTEGER NOT NULL REFERENCES mirrors(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        kind TEXT NOT NULL,
        hash TEXT,
        size INTEGER NOT NULL,
        mode INTEGER NOT NULL,
        link_target TEXT,
        local_size INTEGER,
        local_mtime_ns INTEGER,
        remote_size INTEGER,
        remote_mtime_ns INTEGER,
        PRIMARY KEY (mirror_id, path)
    ) WITHOUT ROWID;";

/// One path of a mirror's manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorEntryRow {
    /// Path relative to the zone directory and to the remote root, `/`-separated.
    pub path: String,
    /// `file`, `dir` or `symlink`.
    pub kind: String,
    /// BLAKE3 of the content (files only).
    pub hash: Option<String>,
    pub size: u64,
    pub mode: u32,
    pub link_target: Option<String>,
    /// The local stat the hash was taken from.
    pub local_size: Option<u64>,
    pub local_mtime_ns: Option<i64>,
    /// The remote fingerprint right after the transfer.
    pub remote_size: Option<u64>,
    pub remote_mtime_ns: Option<i64>,
}

impl Db {
    /// Returns the id of the mirror (zone, sandbox, remote root), creating it at `now_ms`.
    pub fn mirror_id(
        &self,
        zone: &str,
        sandbox: &str,
        remote_root: &str,
        now_ms: i64,
    ) -> Result<i64, StateError> {
        let conn = self.lock();
        conn.execute(
            "INSERT OR IGNORE INTO mirrors (zone, sandbox, remote_root, created_at)
             VALUES (?1, ?2, ?3, ?4)",
            params![zone, sandbox, remote_root, now_ms],
        )?;
        Ok(conn.query_row(
            "SELECT id FROM mirrors WHERE zone = ?1 AND sandbox = ?2 AND remote_root = ?3",
            params![zone, sandbox, remote_root],
            |r| r.get(0),
        )?)
    }

    /// Forgets every manifest of the mirrors into `sandbox` (a new sandbox holds none of what
    /// was pushed to the one before); returns how many mirrors were forgotten.
    pub fn forget_mirrors_of(&self, sandbox: &str) -> Result<usize, StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "DELETE FROM mirror_entries WHERE mirror_id IN (SELECT id FROM mirrors WHERE sandbox = ?1)",
            [sandbox],
        )?;
        let n = tx.execute("DELETE FROM mirrors WHERE sandbox = ?1", [sandbox])?;
        tx.commit()?;
        Ok(n)
    }

    /// Returns the mirror's id when it exists.
    pub fn find_mirror(
        &self,
        zone: &str,
        sandbox: &str,
        remote_root: &str,
    ) -> Result<Option<i64>, StateError> {
        Ok(self
            .lock()
            .query_row(
                "SELECT id FROM mirrors WHERE zone = ?1 AND sandbox = ?2 AND remote_root = ?3",
                params![zone, sandbox, remote_root],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Returns every manifest entry of a mirror, sorted by path.
    pub fn mirror_entries(&self, mirror_id: i64) -> Result<Vec<MirrorEntryRow>, StateError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT path, kind, hash, size, mode, link_target, local_size, local_mtime_ns,
                    remote_size, remote_mtime_ns
             FROM mirror_entries WHERE mirror_id = ?1 ORDER BY path",
        )?;
        let rows = stmt.query_map([mirror_id], |r| {
            Ok(MirrorEntryRow {
                path: r.get(0)?,
                kind: r.get(1)?,
                hash: r.get(2)?,
                size: r.get::<_, i64>(3)? as u64,
                mode: r.get(4)?,
                link_target: r.get(5)?,
                local_size: r.get::<_, Option<i64>>(6)?.map(|v| v as u64),
                local_mtime_ns: r.get(7)?,
                remote_size: r.get::<_, Option<i64>>(8)?.map(|v| v as u64),
                remote_mtime_ns: r.get(9)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Writes (inserts or replaces) entries and removes the paths in `removed`, in one
    /// transaction.
    pub fn update_mirror_entries(
        &self,
        mirror_id: i64,
        upserts: &[MirrorEntryRow],
        removed: &[String],
    ) -> Result<(), StateError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        {
            let mut put = tx.prepare(
                "INSERT OR REPLACE INTO mirror_entries (mirror_id, path, kind, hash, size, mode,
                     link_target, local_size, local_mtime_ns, remote_size, remote_mtime_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?;
            for e in upserts {
                put.execute(params![
                    mirror_id,
                    e.path,
                    e.kind,
                    e.hash,
                    e.size as i64,
                    e.mode,
                    e.link_target,
                    e.local_size.map(|v| v as i64),
                    e.local_mtime_ns,
                    e.remote_size.map(|v| v as i64),
                    e.remote_mtime_ns,
                ])?;
            }
            let mut del =
                tx.prepare("DELETE FROM mirror_entries WHERE mirror_id = ?1 AND path = ?2")?;
            for path in removed {
                del.execute(params![mirror_id, path])?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Records when the mirror was last pushed (`pushed`) or pulled.
    pub fn touch_mirror(&self, mirror_id: i64, pushed: bool, at_ms: i64) -> Result<(), StateError> {
        let sql = if pushed {
            "UPDATE mirrors SET pushed_at = ?2 WHERE id = ?1"
        } else {
            "UPDATE mirrors SET pulled_at = ?2 WHERE id = ?1"
        };
        self.lock().execute(sql, params![mirror_id, at_ms])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_per_mirror() {
        let db = Db::open_in_memory().unwrap();
        let a = db.mirror_id("workspace", "dev", "/home/u/p", 1).unwrap();
        assert_eq!(db.mirror_id("workspace", "dev", "/home/u/p", 2).unwrap(), a);
        let b = db.mirror_id("workspace", "other", "/home/u/p", 3).unwrap();
        assert_ne!(a, b);
        assert_eq!(
            db.find_mirror("workspace", "dev", "/home/u/p").unwrap(),
            Some(a)
        );
        let row = MirrorEntryRow {
            path: "src/lib.rs".into(),
            kind: "file".into(),
            hash: Some("ab".into()),
            size: 3,
            mode: 0o644,
            link_target: None,
            local_size: Some(3),
            local_mtime_ns: Some(5),
            remote_size: Some(3),
            remote_mtime_ns: Some(7_000_000_000),
        };
        db.update_mirror_entries(a, std::slice::from_ref(&row), &[])
            .unwrap();
        assert_eq!(db.mirror_entries(a).unwrap(), vec![row.clone()]);
        assert!(db.mirror_entries(b).unwrap().is_empty());
        db.update_mirror_entries(a, &[], std::slice::from_ref(&row.path))
            .unwrap();
        assert!(db.mirror_entries(a).unwrap().is_empty());
        db.touch_mirror(a, true, 9).unwrap();
    }
}

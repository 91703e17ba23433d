//! The append-only change journal: one row per mutation, whoever made it.
//!
//! Rows are only ever inserted (and, later, pruned by age). Times come from the caller's clock;
//! nothing in here reads "now".

use rusqlite::params;
use serde::{Deserialize, Serialize};

use std::sync::atomic::Ordering;

use super::{Db, StateError, DEFERRED_MAX_ROWS};

/// The journal's zone for the lifecycle of provisioned sandboxes: such a row's path is the
/// sandbox's name, its op `sandbox-created`, `sandbox-paused`, … and its detail the provider's id
/// and why (`GET /v1/log?zone=sandboxes`).
pub const SANDBOX_ZONE: &str = "sandboxes";

/// Which adapter a change came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Api,
    Fuse,
    Watcher,
    Git,
    Mirror,
    /// Brought back by a run in a sandbox (`wardfs run --sandbox`).
    Sandbox,
    Internal,
}

impl Via {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Via::Api => "api",
            Via::Fuse => "fuse",
            Via::Watcher => "watcher",
            Via::Git => "git",
            Via::Mirror => "mirror",
            Via::Sandbox => "sandbox",
            Via::Internal => "internal",
        }
    }
}

/// Who asked for a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Origin {
    pub via: Via,
    pub pid: Option<u32>,
    pub uid: Option<u32>,
}

impl Origin {
    /// An origin inside the daemon itself.
    pub const INTERNAL: Origin = Origin {
        via: Via::Internal,
        pid: None,
        uid: None,
    };
}

/// A mutation to record.
#[derive(Debug, Clone)]
pub struct JournalEntry<'a> {
    pub time_ms: i64,
    pub zone: &'a str,
    pub path: &'a str,
    pub op: &'a str,
    pub bytes: Option<u64>,
    pub to_path: Option<&'a str>,
    pub origin: Origin,
    /// What happened, for events that are not a plain file change (a git push, …).
    pub detail: Option<&'a str>,
}

/// A recorded mutation or event. Every field but `detail` is always present; unknown values are
/// null.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct JournalRow {
    /// Row id; increases with every change (rows are returned by decreasing id).
    pub id: i64,
    /// When the change happened, in milliseconds since the Unix epoch.
    pub time_ms: i64,
    /// `workspace` or `cache`; `sandboxes` for the lifecycle of provisioned sandboxes (then
    /// `path` is the sandbox's name and `op` `sandbox-created`, `sandbox-paused`, …).
    pub zone: String,
    /// The changed path relative to the zone root, without a leading slash (`docs/notes.md`);
    /// the virtual path is `/<zone>/<path>`.
    pub path: String,
    /// What happened: `write`, `edit`, `delete`, `mkdir`, `move` (API and FUSE), from the FUSE
    /// mount also `create`, `symlink`, `link`, `setxattr`, and git events on a pulled
    /// repository's directory: `git-pull`, `git-stage`, `git-push` (also failed attempts),
    /// `git-discard`. Files a pull writes or deletes are recorded as ordinary changes with `via`
    /// `git`.
    pub op: String,
    /// Bytes written (write, edit, create), else null.
    pub bytes: Option<u64>,
    /// For `move`: the destination, relative to its zone root (the destination zone is not
    /// recorded). Null otherwise.
    pub to_path: Option<String>,
    /// The adapter the change came through: `api`, `fuse`, `watcher`, `git`, `mirror`,
    /// `sandbox` (brought back by a run in a sandbox) or `internal`.
    pub via: String,
    /// Process id of the client that made the change, when known.
    pub pid: Option<u32>,
    /// User id of the client that made the change, when known.
    pub uid: Option<u32>,
    /// Present only on events that are not a plain file change: what happened, e.g.
    /// `7c28e432b4: 1 files: Greet the world` (git-stage) or `b737395fc3: failed: the remote
    /// rejected the push ...` (git-push).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A journal row as [`Db::journal_zone_rows_after`] returns it: its id, and what it changed
/// when it is a row of the zone asked about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRow {
    pub id: i64,
    pub change: Option<ZoneChange>,
}

/// What a journal row of a zone changed: its op, its path and, for a move, its destination
/// (both relative to the zone root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneChange {
    pub op: String,
    pub path: String,
    pub to_path: Option<String>,
}

/// Which rows to return, newest first.
#[derive(Debug, Clone, Default)]
pub struct JournalFilter {
    pub zone: Option<String>,
    /// Rows whose path is this path or lies beneath it.
    pub path_prefix: Option<String>,
    pub since_ms: Option<i64>,
    /// Rows after this journal id (exclusive).
    pub after_id: Option<i64>,
    /// Rows up to this journal id (inclusive): with `after_id`, the changes a checkpoint took in.
    pub until_id: Option<i64>,
    pub limit: usize,
}

/// A [`JournalEntry`] that owns its text: a row held in memory until it goes in (deferred by
/// [`Db::journal_append_deferred`], or batched by the core).
#[derive(Debug, Clone)]
pub struct OwnedEntry {
    time_ms: i64,
    zone: String,
    path: String,
    op: String,
    bytes: Option<u64>,
    to_path: Option<String>,
    origin: Origin,
    detail: Option<String>,
}

impl OwnedEntry {
    pub fn of(e: &JournalEntry<'_>) -> OwnedEntry {
        OwnedEntry {
            time_ms: e.time_ms,
            zone: e.zone.to_string(),
            path: e.path.to_string(),
            op: e.op.to_string(),
            bytes: e.bytes,
            to_path: e.to_path.map(str::to_string),
            origin: e.origin,
            detail: e.detail.map(str::to_string),
        }
    }

    /// Whether `e` only repeats this row, not yet written: an attribute change of the same
    /// path by the same caller right after this one (`tar` sets owner, mode and times of each
    /// file it unpacks: three system calls, one row).
    fn repeated_by(&self, e: &JournalEntry<'_>) -> bool {
        e.op == "setattr"
            && self.op == e.op
            && self.path == e.path
            && self.zone == e.zone
            && self.origin == e.origin
            && self.to_path.is_none()
            && e.to_path.is_none()
            && self.detail.is_none()
            && e.detail.is_none()
            && self.bytes == e.bytes
    }

    pub fn entry(&self) -> JournalEntry<'_> {
        JournalEntry {
            time_ms: self.time_ms,
            zone: &self.zone,
            path: &self.path,
            op: &self.op,
            bytes: self.bytes,
            to_path: self.to_path.as_deref(),
            origin: self.origin,
            detail: self.detail.as_deref(),
        }
    }
}

/// Inserts rows in one transaction, in order.
fn insert_all<'a>(
    conn: &mut rusqlite::Connection,
    rows: impl IntoIterator<Item = JournalEntry<'a>>,
) -> Result<(), StateError> {
    let tx = conn.transaction()?;
    for e in rows {
        insert(&tx, &e)?;
    }
    tx.commit()?;
    Ok(())
}

/// Inserts deferred rows in one transaction, in the order they were appended.
pub(super) fn insert_deferred(
    conn: &mut rusqlite::Connection,
    rows: &[OwnedEntry],
) -> Result<(), StateError> {
    insert_all(conn, rows.iter().map(OwnedEntry::entry))
}

impl Db {
    /// Appends one row to the journal later, together with others (see the module docs of
    /// `state`): for the mount's and the watcher's changes, one per system call. Every read of
    /// the database sees the row; a crash may lose it before it is written.
    pub fn journal_append_deferred(&self, e: &JournalEntry<'_>) {
        let n = {
            let mut d = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(last) = d.last_mut().filter(|l| l.repeated_by(e)) {
                last.time_ms = e.time_ms;
                return;
            }
            d.push(OwnedEntry::of(e));
            self.deferred_n.store(d.len(), Ordering::Release);
            d.len()
        };
        if n == 1 {
            self.deferred_wake.notify_one();
        } else if n >= DEFERRED_MAX_ROWS {
            drop(self.lock());
        }
    }

    /// Appends one row to the journal.
    pub fn journal_append(&self, e: &JournalEntry<'_>) -> Result<i64, StateError> {
        let conn = self.lock();
        insert(&conn, e)?;
        let id = conn.last_insert_rowid();
        drop(conn);
        self.announce();
        Ok(id)
    }

    /// Appends rows to the journal in one transaction.
    pub fn journal_append_many(&self, rows: &[OwnedEntry]) -> Result<(), StateError> {
        let mut conn = self.lock();
        insert_all(&mut conn, rows.iter().map(OwnedEntry::entry))?;
        drop(conn);
        self.announce();
        Ok(())
    }

    /// Returns journal rows matching `f`, newest first.
    pub fn journal_query(&self, f: &JournalFilter) -> Result<Vec<JournalRow>, StateError> {
        rows_after(&self.lock(), f, f.after_id.unwrap_or(0), Order::NewestFirst)
    }

    /// Deletes the journal rows recorded before `before_ms`; returns how many went.
    pub fn journal_prune(&self, before_ms: i64) -> Result<u64, StateError> {
        let n = self
            .lock()
            .execute("DELETE FROM journal WHERE time_ms < ?1", params![before_ms])?;
        Ok(n as u64)
    }

    /// Returns the journal rows after row `after`, oldest first, at most `limit`: every row's id
    /// (so that a caller can tell whether rows are missing), and for the rows of zone `zone` their
    /// op and paths. What git's file-system monitor reads (`git::fsmonitor`).
    pub fn journal_zone_rows_after(
        &self,
        zone: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<ZoneRow>, StateError> {
        let conn = self.lock();
        let mut st = conn.prepare_cached(
            "SELECT id, zone = ?2, op, path, to_path FROM journal WHERE id > ?1 ORDER BY id LIMIT ?3",
        )?;
        let rows = st.query_map(params![after, zone, limit as i64], |r| {
            let id: i64 = r.get(0)?;
            let change = if r.get::<_, bool>(1)? {
                Some(ZoneChange {
                    op: r.get(2)?,
                    path: r.get(3)?,
                    to_path: r.get(4)?,
                })
            } else {
                None
            };
            Ok(ZoneRow { id, change })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Returns the number of journal rows.
    pub fn journal_len(&self) -> Result<u64, StateError> {
        Ok(self
            .lock()
            .query_row("SELECT count(*) FROM journal", [], |r| r.get::<_, i64>(0))?
            as u64)
    }
}

/// The index that finds a zone's rows after a position (appended to the migrations): an
/// automatic check asks for them at every quiet moment.
pub(super) const MIGRATION_ZONE_ID: &str = "CREATE INDEX journal_zone_id ON journal(zone, id);";

/// In which order [`rows_after`] returns rows.
#[derive(Debug, Clone, Copy)]
pub(super) enum Order {
    NewestFirst,
    OldestFirst,
}

/// Returns the rows matching `f` after row `after` (ids start at 1), at most `f.limit`.
/// Inserts one journal row.
fn insert(conn: &rusqlite::Connection, e: &JournalEntry<'_>) -> Result<(), StateError> {
    let mut st = conn.prepare_cached(
        "INSERT INTO journal (time_ms, zone, path, op, bytes, to_path, via, pid, uid, detail)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    st.execute(params![
        e.time_ms,
        e.zone,
        e.path,
        e.op,
        e.bytes.map(|b| b as i64),
        e.to_path,
        e.origin.via.as_str(),
        e.origin.pid,
        e.origin.uid,
        e.detail,
    ])?;
    Ok(())
}

pub(super) fn rows_after(
    conn: &rusqlite::Connection,
    f: &JournalFilter,
    after: i64,
    order: Order,
) -> Result<Vec<JournalRow>, StateError> {
    let prefix_like = f.path_prefix.as_ref().map(|p| {
        let escaped = p
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("{}/%", escaped.trim_end_matches('/'))
    });
    let mut st = conn.prepare_cached(&format!(
        "SELECT id, time_ms, zone, path, op, bytes, to_path, via, pid, uid, detail FROM journal
         WHERE (?1 IS NULL OR zone = ?1)
           AND (?2 IS NULL OR path = ?2 OR path LIKE ?3 ESCAPE '\\')
           AND (?4 IS NULL OR time_ms >= ?4)
           AND id > ?5
           AND (?7 IS NULL OR id <= ?7)
         ORDER BY id {} LIMIT ?6",
        match order {
            Order::NewestFirst => "DESC",
            Order::OldestFirst => "ASC",
        }
    ))?;
    let rows = st.query_map(
        params![
            f.zone,
            f.path_prefix,
            prefix_like,
            f.since_ms,
            after.max(f.after_id.unwrap_or(0)),
            f.limit.max(1) as i64,
            f.until_id
        ],
        |r| {
            Ok(JournalRow {
                id: r.get(0)?,
                time_ms: r.get(1)?,
                zone: r.get(2)?,
                path: r.get(3)?,
                op: r.get(4)?,
                bytes: r.get::<_, Option<i64>>(5)?.map(|b| b as u64),
                to_path: r.get(6)?,
                via: r.get(7)?,
                pid: r.get(8)?,
                uid: r.get(9)?,
                detail: r.get(10)?,
            })
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_and_filter() {
        let db = Db::open_in_memory().unwrap();
        for (i, p) in ["a/b", "a/b/c", "a/bc", "x"].iter().enumerate() {
            db.journal_append(&JournalEntry {
                time_ms: i as i64,
                zone: "workspace",
                path: p,
                op: "write",
                bytes: Some(3),
                to_path: None,
                origin: Origin {
                    via: Via::Api,
                    pid: Some(7),
                    uid: Some(0),
                },
                detail: None,
            })
            .unwrap();
        }
        let rows = db
            .journal_query(&JournalFilter {
                path_prefix: Some("a/b".into()),
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        let paths: Vec<_> = rows.iter().map(|r| r.path.as_str()).collect();
        assert_eq!(paths, ["a/b/c", "a/b"]);
        assert_eq!(db.journal_len().unwrap(), 4);
        assert_eq!(rows[0].pid, Some(7));
        // A range of journal ids: after 1 (exclusive) up to 3 (inclusive).
        let ids: Vec<_> = db
            .journal_query(&JournalFilter {
                after_id: Some(1),
                until_id: Some(3),
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .into_iter()
            .map(|r| r.id)
            .collect();
        assert_eq!(ids, [3, 2]);
        // Rows at times 0 and 1 are older than 2; the rows at 2 and 3 stay.
        assert_eq!(db.journal_prune(2).unwrap(), 2);
        let left: Vec<_> = db
            .journal_query(&JournalFilter {
                limit: 10,
                ..Default::default()
            })
            .unwrap()
            .into_iter()
            .map(|r| r.time_ms)
            .collect();
        assert_eq!(left, [3, 2]);
    }

    #[test]
    fn zone_rows_after_a_position_name_every_id_and_only_the_zones_changes() {
        let db = Db::open_in_memory().unwrap();
        for (i, (zone, path, to)) in [
            ("workspace", "a", None),
            ("cache", "c", None),
            ("workspace", "b", Some("d")),
            ("forks/x", "a", None),
        ]
        .iter()
        .enumerate()
        {
            db.journal_append(&JournalEntry {
                time_ms: i as i64,
                zone,
                path,
                op: if to.is_some() { "move" } else { "write" },
                bytes: None,
                to_path: *to,
                origin: Origin::INTERNAL,
                detail: None,
            })
            .unwrap();
        }
        let rows = db.journal_zone_rows_after("workspace", 1, 10).unwrap();
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        assert_eq!(ids, [2, 3, 4]);
        assert_eq!(rows[0].change, None);
        assert_eq!(
            rows[1].change,
            Some(ZoneChange {
                op: "move".into(),
                path: "b".into(),
                to_path: Some("d".into())
            })
        );
        assert_eq!(rows[2].change, None);
        assert_eq!(
            db.journal_zone_rows_after("workspace", 0, 2).unwrap().len(),
            2
        );
    }
}

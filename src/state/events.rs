//! The events: journal rows and checkpoints in one order, read after a [`Cursor`].
//!
//! Both tables number their rows with AUTOINCREMENT: ids only grow, and an id pruned stays gone.
//! A cursor is the pair (last journal row, last checkpoint) a reader has been given or passed
//! over; what follows it is every journal row and every checkpoint with a greater id. So resuming
//! from a cursor repeats nothing and skips nothing, however the two were interleaved.
//!
//! The order: each table's rows by id; a checkpoint comes right after the last journal row it
//! includes (its `journal_pos`). A checkpoint recorded after the reader had already passed later
//! rows (they were journaled while its snapshot was taken) comes as soon as it is read.

use std::fmt;
use std::str::FromStr;

use rusqlite::OptionalExtension;

use super::checkpoint::checkpoints_after;
use super::journal::{rows_after, Order};
use super::{CheckpointRow, Db, JournalFilter, JournalRow, StateError};

/// A position in the events: the last journal row and the last checkpoint before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub journal: i64,
    pub checkpoint: i64,
}

impl Cursor {
    /// Before everything (`0`).
    pub const START: Cursor = Cursor {
        journal: 0,
        checkpoint: 0,
    };
}

/// Written `<journal row>-<checkpoint>`, e.g. `1042-7`.
impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.journal, self.checkpoint)
    }
}

/// Reads `<journal row>-<checkpoint>` (two numbers from 0) or `0` ([`Cursor::START`]); the
/// error says the rule.
impl FromStr for Cursor {
    type Err = String;

    fn from_str(s: &str) -> Result<Cursor, String> {
        if s == "0" {
            return Ok(Cursor::START);
        }
        let number = |n: &str| {
            Some(n)
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<i64>().ok())
        };
        match s.split_once('-') {
            Some((j, c)) => match (number(j), number(c)) {
                (Some(journal), Some(checkpoint)) => Ok(Cursor {
                    journal,
                    checkpoint,
                }),
                _ => Err(Cursor::rule(s)),
            },
            None => Err(Cursor::rule(s)),
        }
    }
}

impl Cursor {
    fn rule(s: &str) -> String {
        format!(
            "{s:?} is not a cursor: pass the `cursor` of an event line (`<journal row>-<checkpoint>`, \
             two numbers, e.g. 1042-7), 0 for the oldest event kept, or nothing for new events only"
        )
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A journal row: a change, or a git event.
    Change(JournalRow),
    /// A checkpoint was recorded.
    Checkpoint(CheckpointRow),
}

/// What one read of the events found.
#[derive(Debug)]
pub struct EventBatch {
    /// The events that match the filter, in order, each with the cursor just after it.
    pub events: Vec<(Cursor, Event)>,
    /// The cursor after everything read, matching or not.
    pub end: Cursor,
    /// Whether more may follow at once (a batch was full): read again before waiting.
    pub more: bool,
}

/// Where the events begin and end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventBounds {
    /// The oldest journal row still kept (one past the newest when none is).
    pub journal_first: i64,
    /// The newest journal row ever recorded, kept or pruned (0: none yet).
    pub journal_last: i64,
    /// The newest checkpoint ever recorded (0: none yet).
    pub checkpoint_last: i64,
}

impl EventBounds {
    /// The cursor after every event recorded so far.
    pub fn now(&self) -> Cursor {
        Cursor {
            journal: self.journal_last,
            checkpoint: self.checkpoint_last,
        }
    }
}

impl Db {
    /// Returns where the events begin and end.
    pub fn event_bounds(&self) -> Result<EventBounds, StateError> {
        bounds(&self.lock())
    }

    /// Returns the events after `from`: journal rows matching `f` and checkpoints of `f.zone`
    /// (every zone's when it is `None`), at most `f.limit` of each table per call.
    pub fn events_after(&self, from: Cursor, f: &JournalFilter) -> Result<EventBatch, StateError> {
        let limit = f.limit.max(1);
        // One look at both tables: every row and checkpoint up to the bounds is in what is read,
        // unless a batch is full.
        let (bounds, rows, checkpoints) = {
            let conn = self.lock();
            (
                bounds(&conn)?,
                rows_after(&conn, f, from.journal, Order::OldestFirst)?,
                checkpoints_after(&conn, from.checkpoint, limit)?,
            )
        };
        let rows_full = rows.len() >= limit;
        let checkpoints_full = checkpoints.len() >= limit;
        // Every matching journal row up to here has been read.
        let journal_read = match rows.last() {
            Some(r) if rows_full => r.id,
            _ => bounds.journal_last.max(from.journal),
        };
        let mut rows = rows.into_iter().peekable();
        let mut checkpoints = checkpoints.into_iter().peekable();
        let mut at = from;
        let mut events = Vec::new();
        loop {
            let next_row = rows.peek().map_or(journal_read + 1, |r| r.id);
            if let Some(c) = checkpoints.next_if(|c| c.journal_pos < next_row) {
                // Every matching row the checkpoint includes has been given.
                at.journal = at.journal.max(c.journal_pos);
                at.checkpoint = c.id;
                if f.zone.as_deref().is_none_or(|z| z == c.zone) {
                    events.push((at, Event::Checkpoint(c)));
                }
                continue;
            }
            // A checkpoint not read yet may come before the next row.
            if checkpoints_full && checkpoints.peek().is_none() {
                break;
            }
            match rows.next() {
                Some(r) => {
                    at.journal = r.id;
                    events.push((at, Event::Change(r)));
                }
                None => break,
            }
        }
        if rows.peek().is_none() {
            at.journal = at.journal.max(journal_read);
        }
        if !checkpoints_full && checkpoints.peek().is_none() {
            at.checkpoint = at.checkpoint.max(bounds.checkpoint_last);
        }
        Ok(EventBatch {
            events,
            end: at,
            more: rows_full || checkpoints_full,
        })
    }
}

fn bounds(conn: &rusqlite::Connection) -> Result<EventBounds, StateError> {
    let seq = |table: &str| -> Result<i64, StateError> {
        Ok(conn
            .query_row(
                "SELECT seq FROM sqlite_sequence WHERE name = ?1",
                [table],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .unwrap_or(0))
    };
    let journal_last = seq("journal")?;
    let checkpoint_last = seq("checkpoints")?;
    let first: Option<i64> = conn.query_row("SELECT min(id) FROM journal", [], |r| r.get(0))?;
    Ok(EventBounds {
        journal_first: first.unwrap_or(journal_last + 1),
        journal_last,
        checkpoint_last,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{JournalEntry, NewCheckpoint, Origin, Via};

    fn change(db: &Db, zone: &str, path: &str) -> i64 {
        db.journal_append(&JournalEntry {
            time_ms: 1,
            zone,
            path,
            op: "write",
            bytes: Some(1),
            to_path: None,
            origin: Origin {
                via: Via::Api,
                pid: None,
                uid: None,
            },
            detail: None,
        })
        .unwrap()
    }

    fn checkpoint(db: &Db, zone: &str, journal_pos: i64) -> i64 {
        db.checkpoint_insert(&NewCheckpoint {
            zone,
            tree: "t",
            parent: None,
            message: "m",
            origin: Origin::INTERNAL,
            time_ms: 1,
            journal_pos,
            files: 0,
            not_kept: 0,
            scope: None,
            modes: None,
        })
        .unwrap()
    }

    /// Every event after `from`, read `limit` at a time: (cursor, "r<id>" or "c<id>").
    fn read_all(db: &Db, from: Cursor, zone: Option<&str>, limit: usize) -> Vec<(Cursor, String)> {
        let f = JournalFilter {
            zone: zone.map(str::to_string),
            limit,
            ..Default::default()
        };
        let mut at = from;
        let mut out = Vec::new();
        for _ in 0..1000 {
            let b = db.events_after(at, &f).unwrap();
            for (c, e) in b.events {
                out.push((
                    c,
                    match e {
                        Event::Change(r) => format!("r{}", r.id),
                        Event::Checkpoint(k) => format!("c{}", k.id),
                    },
                ));
            }
            at = b.end;
            if !b.more {
                return out;
            }
        }
        panic!("events_after never caught up");
    }

    fn names(events: &[(Cursor, String)]) -> Vec<&str> {
        events.iter().map(|(_, n)| n.as_str()).collect()
    }

    #[test]
    fn a_checkpoint_follows_the_last_row_it_includes_in_any_batch_size() {
        let db = Db::open_in_memory().unwrap();
        checkpoint(&db, "workspace", 0);
        for _ in 0..3 {
            change(&db, "workspace", "a");
        }
        checkpoint(&db, "workspace", 2);
        checkpoint(&db, "cache", 3);
        change(&db, "workspace", "b");
        let want = ["c1", "r1", "r2", "c2", "r3", "c3", "r4"];
        for limit in [1, 2, 3, 100] {
            let all = read_all(&db, Cursor::START, None, limit);
            assert_eq!(names(&all), want, "batches of {limit}");
            // Resuming from each cursor gives exactly the rest.
            for (i, (c, _)) in all.iter().enumerate() {
                assert_eq!(
                    names(&read_all(&db, *c, None, limit)),
                    want[i + 1..],
                    "from {c} in batches of {limit}"
                );
            }
        }
        assert_eq!(all_cursor(&db), "4-3");
    }

    fn all_cursor(db: &Db) -> String {
        read_all(db, Cursor::START, None, 100)
            .last()
            .unwrap()
            .0
            .to_string()
    }

    #[test]
    fn a_checkpoint_recorded_after_later_rows_were_read_is_not_missed() {
        let db = Db::open_in_memory().unwrap();
        change(&db, "workspace", "a");
        change(&db, "workspace", "b");
        let first = read_all(&db, Cursor::START, None, 100);
        assert_eq!(names(&first), ["r1", "r2"]);
        // Its snapshot was taken after row 1; row 2 was journaled (and read) before it was recorded.
        checkpoint(&db, "workspace", 1);
        let at = first.last().unwrap().0;
        assert_eq!(names(&read_all(&db, at, None, 100)), ["c1"]);
        assert_eq!(read_all(&db, at, None, 100)[0].0.to_string(), "2-1");
    }

    #[test]
    fn a_filter_skips_other_zones_and_its_end_passes_them() {
        let db = Db::open_in_memory().unwrap();
        change(&db, "cache", "x");
        change(&db, "workspace", "a");
        checkpoint(&db, "cache", 2);
        change(&db, "cache", "y");
        for limit in [1, 100] {
            let ws = read_all(&db, Cursor::START, Some("workspace"), limit);
            assert_eq!(names(&ws), ["r2"], "batches of {limit}");
            let f = JournalFilter {
                zone: Some("workspace".into()),
                limit,
                ..Default::default()
            };
            let mut at = Cursor::START;
            loop {
                let b = db.events_after(at, &f).unwrap();
                at = b.end;
                if !b.more {
                    break;
                }
            }
            assert_eq!(at.to_string(), "3-1", "batches of {limit}");
        }
        assert_eq!(
            names(&read_all(&db, Cursor::START, Some("cache"), 1)),
            ["r1", "c1", "r3"]
        );
    }

    #[test]
    fn bounds_tell_pruned_rows_and_the_newest_ids() {
        let db = Db::open_in_memory().unwrap();
        let empty = db.event_bounds().unwrap();
        assert_eq!((empty.journal_first, empty.now()), (1, Cursor::START));
        for _ in 0..3 {
            change(&db, "workspace", "a");
        }
        checkpoint(&db, "workspace", 3);
        db.lock().execute("DELETE FROM journal", []).unwrap();
        let b = db.event_bounds().unwrap();
        // Ids are never reused: the next row is 4, and rows 1 to 3 are gone.
        assert_eq!(
            (b.journal_first, b.journal_last, b.checkpoint_last),
            (4, 3, 1)
        );
        assert_eq!(b.now().to_string(), "3-1");
    }

    #[test]
    fn cursors_read_back_and_bad_ones_say_the_rule() {
        assert_eq!("0".parse::<Cursor>(), Ok(Cursor::START));
        let c: Cursor = "1042-7".parse().unwrap();
        assert_eq!(
            (c.journal, c.checkpoint, c.to_string()),
            (1042, 7, "1042-7".into())
        );
        for bad in [
            "",
            "12",
            "-1-2",
            "1-",
            "a-b",
            "1-2-3",
            "+1-2",
            "99999999999999999999-1",
        ] {
            let e = bad.parse::<Cursor>().unwrap_err();
            assert!(
                e.contains("is not a cursor") && e.contains("1042-7"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn subscribers_wake_on_rows_and_checkpoints() {
        let db = Db::open_in_memory().unwrap();
        let mut rx = db.subscribe();
        assert!(!rx.has_changed().unwrap());
        change(&db, "workspace", "a");
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        checkpoint(&db, "workspace", 1);
        assert!(rx.has_changed().unwrap());
    }
}

//! `GET /v1/events`: the journal's changes and the checkpoints as they happen, one JSON object
//! per line (`application/x-ndjson`), resumable from any line's `cursor`.
//!
//! The order and the cursor are the state's (`crate::state::Cursor`: the last journal row and
//! the last checkpoint given, so a resumed stream repeats nothing and skips nothing). A stream
//! reads in bounded batches, however long the backlog, and waits for the state database's
//! announcement of a new row or checkpoint (`Db::subscribe`) instead of polling. It sends a
//! heartbeat line, carrying the cursor it has reached, when it opens and after every
//! [`HEARTBEAT`] without a line, so a client that went away is noticed; it ends when its client
//! goes, when the daemon stops (`AppState::stopping`), or, with `follow=false`, once it has sent
//! what exists.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::time::Instant;

use super::error::ApiError;
use super::AppState;
use crate::core::{ErrorCode, FsError};
use crate::state::{CheckpointRow, Cursor, Db, Event, EventBounds, JournalFilter, JournalRow};

/// How long a stream stays silent before it sends a heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// The most journal rows, and the most checkpoints, one read takes from the database.
const BATCH: usize = 256;

/// Query of `/v1/events`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    /// Where to start: the `cursor` of a line already seen (`<journal row>-<checkpoint>`, e.g.
    /// `1042-7`) for the events after it; `0` for the oldest event the journal keeps. Absent:
    /// only events from now on.
    #[schemars(length(max = 64))]
    since: Option<String>,
    /// Only the changes and checkpoints of this zone (`workspace`, `cache`, or `sandboxes` for
    /// the sandboxes' lifecycle). Ignored when `path` names a place inside a zone (the path's
    /// zone is used).
    zone: Option<String>,
    /// Only changes to this virtual path or paths beneath it, e.g. `/workspace/src`, and the
    /// checkpoints of its zone. `/` (or a zone root) means no path filter.
    #[schemars(length(min = 1, max = 4096))]
    path: Option<String>,
    /// `true` (the default): keep the stream open and send new events as they happen. `false`:
    /// send the events there are, then a heartbeat with the cursor reached, and end.
    #[schemars(extend("default" = true))]
    follow: Option<bool>,
}

pub(super) async fn events(
    State(app): State<Arc<AppState>>,
    q: Result<Query<EventsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(q) = q.map_err(|e| FsError::invalid("query", e.body_text()))?;
    let filter = JournalFilter {
        limit: BATCH,
        ..super::journal_filter(q.zone.as_deref(), q.path.as_deref())?
    };
    let since = match q.since.as_deref() {
        Some(s) => Some(
            s.parse::<Cursor>()
                .map_err(|rule| FsError::invalid("since", rule))?,
        ),
        None => None,
    };
    let db = app.zones.db().clone();
    // Subscribed before "now" is read: whatever is appended from here on wakes the stream.
    let appended = db.subscribe();
    let bounds = {
        let db = db.clone();
        tokio::task::spawn_blocking(move || db.event_bounds())
            .await
            .map_err(|e| FsError::Internal(format!("worker failed: {e}")))?
            .map_err(|e| FsError::Internal(e.to_string()))?
    };
    let at = start(since, bounds, app.settings.journal.keep_days)?;
    let follow = q.follow.unwrap_or(true);
    let stream = Stream {
        db,
        filter,
        at,
        follow,
        unread: true,
        pending: follow.then(|| heartbeat(at)),
        appended,
        stopping: app.stopping.subscribe(),
        heartbeat_at: Instant::now() + HEARTBEAT,
        ended: false,
    };
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        let chunk = s.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), s))
    });
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-ndjson"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        axum::body::Body::from_stream(body),
    )
        .into_response())
}

/// Returns where a stream asked to start `since` begins: now when not given; refuses a cursor
/// past the newest event or one whose next journal rows were pruned.
fn start(since: Option<Cursor>, b: EventBounds, keep_days: u32) -> Result<Cursor, FsError> {
    let Some(c) = since else {
        return Ok(b.now());
    };
    if c == Cursor::START {
        return Ok(c);
    }
    if c.journal > b.journal_last || c.checkpoint > b.checkpoint_last {
        return Err(FsError::invalid(
            "since",
            format!(
                "cursor {c} is past the newest event ({}): a cursor is only good for the daemon \
                 (and state database) whose events gave it; start again with since=0",
                b.now()
            ),
        ));
    }
    if c.journal + 1 < b.journal_first {
        return Err(FsError::invalid(
            "since",
            format!(
                "cursor {c} is older than the journal keeps: rows {} to {} were pruned \
                 (`journal.keep_days` = {keep_days}); start again with since=0, the oldest event kept",
                c.journal + 1,
                b.journal_first - 1
            ),
        ));
    }
    Ok(c)
}

/// One open stream.
struct Stream {
    db: Arc<Db>,
    filter: JournalFilter,
    /// The cursor after the last event read, sent or filtered out.
    at: Cursor,
    follow: bool,
    /// Whether the database may hold events not read yet.
    unread: bool,
    /// A line to send before anything else (the opening heartbeat).
    pending: Option<Bytes>,
    appended: watch::Receiver<u64>,
    stopping: watch::Receiver<bool>,
    heartbeat_at: Instant,
    ended: bool,
}

/// What a stream waiting for events woke for.
enum Wake {
    Appended,
    Heartbeat,
    End,
}

impl Stream {
    /// Returns the next lines to send, or `None` when the stream is over.
    async fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(line) = self.pending.take() {
            return Some(line);
        }
        while !self.ended {
            if self.unread {
                // Marked seen before the read: an append during it wakes the wait below.
                self.appended.mark_unchanged();
                match self.read().await {
                    Ok(Some(lines)) => {
                        self.heartbeat_at = Instant::now() + HEARTBEAT;
                        return Some(lines);
                    }
                    Ok(None) => continue,
                    Err(e) => {
                        self.ended = true;
                        return Some(error_line(&e));
                    }
                }
            }
            if !self.follow {
                self.ended = true;
                return Some(heartbeat(self.at));
            }
            let wake = tokio::select! {
                r = self.appended.changed() => if r.is_ok() { Wake::Appended } else { Wake::End },
                _ = self.stopping.wait_for(|stop| *stop) => Wake::End,
                _ = tokio::time::sleep_until(self.heartbeat_at) => Wake::Heartbeat,
            };
            match wake {
                Wake::Appended => self.unread = true,
                Wake::End => self.ended = true,
                Wake::Heartbeat => {
                    self.heartbeat_at = Instant::now() + HEARTBEAT;
                    return Some(heartbeat(self.at));
                }
            }
        }
        None
    }

    /// Reads one batch; returns its lines, or `None` when nothing in it matched.
    async fn read(&mut self) -> Result<Option<Bytes>, FsError> {
        let (db, filter, at) = (self.db.clone(), self.filter.clone(), self.at);
        let batch = tokio::task::spawn_blocking(move || db.events_after(at, &filter))
            .await
            .map_err(|e| FsError::Internal(format!("worker failed: {e}")))?
            .map_err(|e| FsError::Internal(e.to_string()))?;
        self.at = batch.end;
        self.unread = batch.more;
        if batch.events.is_empty() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for (cursor, event) in &batch.events {
            let cursor = &cursor.to_string();
            push_line(
                &mut out,
                &match event {
                    Event::Change(row) => EventLine::Change { cursor, row },
                    Event::Checkpoint(row) => EventLine::Checkpoint { cursor, row },
                },
            );
        }
        Ok(Some(Bytes::from(out)))
    }
}

/// One line of `/v1/events`, with its `kind` and, but for an error, the `cursor` after it
/// (`<journal row>-<checkpoint>`): pass the last one seen as `since` to resume with no event
/// repeated and none missed (a heartbeat's cursor also passes events the filters left out).
#[derive(Serialize, schemars::JsonSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(super) enum EventLine<'a> {
    /// A change: the fields of a `/v1/log` entry.
    Change {
        /// The position after this line.
        cursor: &'a str,
        #[serde(flatten)]
        row: &'a JournalRow,
    },
    /// A checkpoint, right after the last change it includes: the fields of a
    /// `/v1/checkpoints` item.
    Checkpoint {
        /// The position after this line.
        cursor: &'a str,
        #[serde(flatten)]
        row: &'a CheckpointRow,
    },
    /// Only the cursor the stream has reached: once when a following stream opens, after every
    /// 15 s without a line, and as the last line with `follow=false`.
    Heartbeat {
        /// The position reached.
        cursor: &'a str,
    },
    /// The last line of a stream that failed after it began (its status is already 200).
    Error { code: ErrorCode, message: String },
}

fn push_line(out: &mut Vec<u8>, line: &EventLine<'_>) {
    // A row of plain strings and numbers always serializes.
    if serde_json::to_writer(&mut *out, line).is_ok() {
        out.push(b'\n');
    }
}

fn heartbeat(at: Cursor) -> Bytes {
    let mut out = Vec::new();
    push_line(
        &mut out,
        &EventLine::Heartbeat {
            cursor: &at.to_string(),
        },
    );
    Bytes::from(out)
}

fn error_line(e: &FsError) -> Bytes {
    let mut out = Vec::new();
    push_line(
        &mut out,
        &EventLine::Error {
            code: e.code(),
            message: e.to_string(),
        },
    );
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bounds(first: i64, last: i64, checkpoint: i64) -> EventBounds {
        EventBounds {
            journal_first: first,
            journal_last: last,
            checkpoint_last: checkpoint,
        }
    }

    #[test]
    fn a_stream_starts_now_from_the_start_or_after_a_kept_cursor() {
        let b = bounds(5, 9, 2);
        assert_eq!(start(None, b, 30).unwrap().to_string(), "9-2");
        assert_eq!(start(Some(Cursor::START), b, 30).unwrap(), Cursor::START);
        // Row 5 is the oldest kept: a reader who saw row 4 has missed nothing.
        let c: Cursor = "4-1".parse().unwrap();
        assert_eq!(start(Some(c), b, 30).unwrap(), c);
        let e = start(Some("3-1".parse().unwrap()), b, 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("3-1") && e.contains("rows 4 to 4 were pruned") && e.contains("keep_days"),
            "{e}"
        );
        let e = start(Some("10-0".parse().unwrap()), b, 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("10-0") && e.contains("past the newest event (9-2)"),
            "{e}"
        );
        assert!(start(Some("9-3".parse().unwrap()), b, 30).is_err());
    }

    #[test]
    fn lines_carry_the_kind_and_cursor_before_the_row() {
        let line = heartbeat("3-1".parse().unwrap());
        assert_eq!(&line[..], b"{\"kind\":\"heartbeat\",\"cursor\":\"3-1\"}\n");
    }
}

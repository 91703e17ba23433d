//! A run's events as it goes, for whoever follows it: the client that started it, one that
//! reconnects with the run's id (`GET /v1/runs/{id}/events`), and the review page.
//!
//! Each event gets a sequence number (from 1). The log keeps the newest [`LOG_BYTES`] of
//! events that every follower has read; while a follower lags further behind, the run stops
//! polling the command's output (a slow reader slows the run, it never grows the daemon), and
//! with no follower at all the oldest events are dropped (a follower that comes back is told
//! which ones, by a [`Line::Skipped`]). The end (how the run ended, with the last bytes of each
//! stream) is kept with the log.
//!
//! A run whose followers are all gone waits `limits.run_reconnect_secs` for one to come back,
//! then stops its command ([`Stop::Abandoned`]); [`RunLog::cancel`] stops it at once.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{RunEvent, RunResult};
use crate::core::ErrorCode;

/// Bytes of events a log keeps at most beyond what its followers have read.
pub const LOG_BYTES: usize = 256 * 1024;

/// How a run ended, as its followers are told.
#[derive(Debug, Clone)]
pub enum RunEnd {
    /// The command ended (or was killed) and the pull after it is done.
    Exited(RunResult),
    /// The run failed after its command started (the sandbox lost, the pull refused).
    Failed { code: ErrorCode, message: String },
}

/// What a follower reads next.
#[derive(Debug, Clone)]
pub enum Line {
    Event {
        seq: u64,
        event: RunEvent,
    },
    /// Events `from..=to` were dropped before this follower read them.
    Skipped {
        from: u64,
        to: u64,
    },
    End(RunEnd),
}

/// Why a run stops its command early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Someone asked (`POST /v1/runs/{id}/cancel`, Ctrl-C in `wardfs run`).
    Cancelled,
    /// Every follower went away and none came back in time.
    Abandoned,
}

/// One run's log (see the module).
pub struct RunLog {
    /// The run's id.
    pub id: String,
    /// The sandbox it runs in.
    pub sandbox: String,
    state: Mutex<State>,
    bumped: watch::Sender<u64>,
}

struct State {
    /// (sequence, event, its bytes), oldest first.
    events: VecDeque<(u64, RunEvent, usize)>,
    next_seq: u64,
    bytes: usize,
    end: Option<RunEnd>,
    /// The last sequence each follower read, by follower.
    followers: BTreeMap<u64, u64>,
    next_follower: u64,
    /// Since when nobody follows.
    alone_since: Option<Instant>,
    cancelled: bool,
}

fn size(event: &RunEvent) -> usize {
    match event {
        RunEvent::Stdout { data } | RunEvent::Stderr { data } => data.len() + 32,
        _ => 256,
    }
}

impl RunLog {
    pub(super) fn new(id: String, sandbox: String) -> Arc<RunLog> {
        Arc::new(RunLog {
            id,
            sandbox,
            state: Mutex::new(State {
                events: VecDeque::new(),
                next_seq: 1,
                bytes: 0,
                end: None,
                followers: BTreeMap::new(),
                next_follower: 0,
                alone_since: Some(Instant::now()),
                cancelled: false,
            }),
            bumped: watch::Sender::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.bumped.send_modify(|n| *n += 1);
    }

    /// Appends an event.
    pub(super) fn push(&self, event: RunEvent) {
        {
            let mut s = self.lock();
            let seq = s.next_seq;
            s.next_seq += 1;
            let n = size(&event);
            s.bytes += n;
            s.events.push_back((seq, event, n));
            s.trim();
        }
        self.bump();
    }

    /// Records how the run ended.
    pub(super) fn end(&self, end: RunEnd) {
        self.lock().end = Some(end);
        self.bump();
    }

    /// How the run ended, once it did.
    pub fn ended(&self) -> Option<RunEnd> {
        self.lock().end.clone()
    }

    /// Whether the run ended.
    pub fn is_ended(&self) -> bool {
        self.lock().end.is_some()
    }

    /// Asks the run to stop its command now; false when it had ended already.
    pub fn cancel(&self) -> bool {
        let ended = {
            let mut s = self.lock();
            s.cancelled = true;
            s.end.is_some()
        };
        self.bump();
        !ended
    }

    /// Whether the run should stop its command: cancelled, or alone for `grace`.
    pub(super) fn stop(&self, grace: Duration) -> Option<Stop> {
        let s = self.lock();
        if s.cancelled {
            Some(Stop::Cancelled)
        } else if s.alone_since.is_some_and(|t| t.elapsed() >= grace) {
            Some(Stop::Abandoned)
        } else {
            None
        }
    }

    /// Waits (at most `wait`) while a follower lags more than [`LOG_BYTES`] behind.
    pub(super) async fn room(&self, wait: Duration) {
        let mut rx = self.bumped.subscribe();
        let until = tokio::time::Instant::now() + wait;
        loop {
            rx.borrow_and_update();
            {
                let s = self.lock();
                if s.bytes <= LOG_BYTES || s.cancelled || s.followers.is_empty() {
                    return;
                }
            }
            if tokio::time::timeout_at(until, rx.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Starts following the log after sequence `after` (0: from the start).
    pub fn follow(self: &Arc<Self>, after: u64) -> Follower {
        let id = {
            let mut s = self.lock();
            let id = s.next_follower;
            s.next_follower += 1;
            s.followers.insert(id, after);
            s.alone_since = None;
            id
        };
        Follower {
            log: self.clone(),
            rx: self.bumped.subscribe(),
            id,
            cursor: after,
            end_sent: false,
        }
    }
}

impl State {
    /// Drops the oldest events past [`LOG_BYTES`] that every follower has read.
    fn trim(&mut self) {
        let read = self.followers.values().min().copied().unwrap_or(u64::MAX);
        while self.bytes > LOG_BYTES {
            match self.events.front() {
                Some(&(seq, _, n)) if seq <= read => {
                    self.bytes -= n;
                    self.events.pop_front();
                }
                _ => break,
            }
        }
    }

    /// The line after `cursor`, if there is one yet, and the last sequence it covers.
    fn after(&self, cursor: u64) -> Option<(Line, u64)> {
        let first = self.events.front().map_or(self.next_seq, |e| e.0);
        // A client's `after` may be anything, u64::MAX included.
        let next = cursor.saturating_add(1);
        if next < first {
            let to = first - 1;
            return Some((Line::Skipped { from: next, to }, to));
        }
        let (seq, event, _) = self.events.get(usize::try_from(next - first).ok()?)?;
        let line = Line::Event {
            seq: *seq,
            event: event.clone(),
        };
        Some((line, *seq))
    }
}

/// A reader of a [`RunLog`]; while it lives, the run has someone to answer to.
pub struct Follower {
    log: Arc<RunLog>,
    rx: watch::Receiver<u64>,
    id: u64,
    cursor: u64,
    end_sent: bool,
}

impl Follower {
    /// The run's id.
    pub fn run_id(&self) -> &str {
        &self.log.id
    }

    /// The next line, waiting for it; `None` after the end was read.
    pub async fn next(&mut self) -> Option<Line> {
        loop {
            self.rx.borrow_and_update();
            {
                let mut s = self.log.lock();
                if let Some((line, read)) = s.after(self.cursor) {
                    self.cursor = read;
                    s.followers.insert(self.id, read);
                    let full = s.bytes > LOG_BYTES;
                    s.trim();
                    drop(s);
                    if full {
                        // The run may be waiting for room.
                        self.log.bump();
                    }
                    return Some(line);
                }
                if let Some(end) = &s.end {
                    if self.end_sent {
                        return None;
                    }
                    self.end_sent = true;
                    return Some(Line::End(end.clone()));
                }
            }
            if self.rx.changed().await.is_err() {
                return None;
            }
        }
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        {
            let mut s = self.log.lock();
            s.followers.remove(&self.id);
            if s.followers.is_empty() {
                s.alone_since = Some(Instant::now());
            }
            s.trim();
        }
        // The run may be waiting for room this follower was keeping.
        self.log.bump();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(s: &str) -> RunEvent {
        RunEvent::Stdout { data: s.into() }
    }

    fn data(l: Option<Line>) -> String {
        match l {
            Some(Line::Event {
                event: RunEvent::Stdout { data },
                ..
            }) => data,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_follower_reads_every_event_then_the_end_once() {
        let log = RunLog::new("r".into(), "dev".into());
        let mut f = log.follow(0);
        log.push(out("a"));
        log.push(out("b"));
        assert_eq!(data(f.next().await), "a");
        assert_eq!(data(f.next().await), "b");
        log.end(RunEnd::Failed {
            code: ErrorCode::SandboxUnavailable,
            message: "gone".into(),
        });
        assert!(matches!(f.next().await, Some(Line::End(_))));
        assert!(f.next().await.is_none());
        // A follower that comes after reads it all again, from where it says.
        let mut again = log.follow(1);
        assert_eq!(data(again.next().await), "b");
        assert!(matches!(again.next().await, Some(Line::End(_))));
    }

    #[tokio::test]
    async fn unread_events_are_kept_and_unfollowed_ones_dropped_past_the_bound() {
        let log = RunLog::new("r".into(), "dev".into());
        let chunk = "x".repeat(64 * 1024);
        let mut f = log.follow(0);
        for _ in 0..8 {
            log.push(out(&chunk));
        }
        // A follower behind keeps what it has not read; the run is told to wait for room.
        assert_eq!(log.lock().events.len(), 8);
        let waited = Instant::now();
        log.room(Duration::from_millis(50)).await;
        assert!(waited.elapsed() >= Duration::from_millis(40));
        assert_eq!(data(f.next().await).len(), chunk.len());
        drop(f);
        // Nobody follows: only the newest LOG_BYTES stay; a newcomer is told what it missed.
        assert!(log.lock().bytes <= LOG_BYTES);
        let mut late = log.follow(0);
        match late.next().await {
            Some(Line::Skipped { from: 1, to }) => assert!(to >= 4, "{to}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_run_waiting_for_room_goes_on_when_its_lagging_follower_leaves() {
        let log = RunLog::new("r".into(), "dev".into());
        let f = log.follow(0);
        for _ in 0..8 {
            log.push(out(&"x".repeat(64 * 1024)));
        }
        let waiting = {
            let log = log.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                log.room(Duration::from_secs(30)).await;
                t.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(f);
        let waited = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the run still waits for room nobody keeps")
            .unwrap();
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    #[tokio::test]
    async fn a_follower_from_past_the_end_reads_only_the_end() {
        let log = RunLog::new("r".into(), "dev".into());
        log.push(out("a"));
        log.end(RunEnd::Failed {
            code: ErrorCode::Internal,
            message: String::new(),
        });
        for after in [u64::MAX, u64::MAX - 1, 2, 1] {
            let mut f = log.follow(after);
            assert!(matches!(f.next().await, Some(Line::End(_))), "{after}");
            assert!(f.next().await.is_none(), "{after}");
        }
    }

    #[test]
    fn a_run_alone_past_its_grace_or_cancelled_is_told_to_stop() {
        let log = RunLog::new("r".into(), "dev".into());
        let f = log.follow(0);
        assert_eq!(log.stop(Duration::ZERO), None, "followed");
        drop(f);
        assert_eq!(log.stop(Duration::from_secs(60)), None, "within its grace");
        assert_eq!(log.stop(Duration::ZERO), Some(Stop::Abandoned));
        log.cancel();
        assert_eq!(log.stop(Duration::from_secs(60)), Some(Stop::Cancelled));
    }
}

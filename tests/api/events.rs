//! `GET /v1/events` (and `wardfs events`): changes made through the API, the mount and beside
//! wardfs, and checkpoints, arriving while a stream is open; resuming from any cursor; filters;
//! refusals; streams that end with `follow=false`, with their client, or with the daemon.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::api::code;
use crate::support::tools::require_tool;
use crate::support::Daemon;

/// No automatic checkpoints: the events are only the test's own.
const QUIET: &str = "[checkpoints]\nauto_quiet_ms = 0\n";

/// How long a line may take to come when the test waits for one.
const WAIT: Duration = Duration::from_secs(10);

/// `curl -N` reading `/v1/events` as the documentation shows; its lines, parsed, as they come.
/// Killed on drop.
struct Stream {
    curl: Child,
    lines: mpsc::Receiver<Value>,
}

impl Stream {
    fn open(d: &Daemon, query: &str) -> Stream {
        let mut curl = Command::new(require_tool("curl", "curl"))
            .args(["-sSN", "--unix-socket"])
            .arg(&d.socket)
            .arg(format!("http://x/v1/events{query}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = curl.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let v = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
                if tx.send(v).is_err() {
                    break;
                }
            }
        });
        Stream { curl, lines }
    }

    /// The next line; fails the test when none comes within [`WAIT`].
    fn next(&self) -> Value {
        self.lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|e| panic!("no event line within {WAIT:?}: {e}"))
    }

    /// Lines until one matches `want` (the last one returned).
    fn until(&self, want: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let v = self.next();
            let done = want(&v);
            seen.push(v);
            if done {
                return seen;
            }
        }
    }

    /// Every line until the daemon ends the stream, which it must do within [`WAIT`].
    fn to_end(&self) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        let mut all = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => all.push(v),
                Err(mpsc::RecvTimeoutError::Disconnected) => return all,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("the stream did not end within {WAIT:?}; so far: {all:?}")
                }
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.curl.kill();
        let _ = self.curl.wait();
    }
}

fn is_change(path: &'static str) -> impl Fn(&Value) -> bool {
    move |v| v["kind"] == "change" && v["path"] == path
}

/// The events of a list of lines (no heartbeats) as (kind, id).
fn ids(lines: &[Value]) -> Vec<(String, i64)> {
    lines
        .iter()
        .filter(|v| v["kind"] != "heartbeat")
        .map(|v| {
            (
                v["kind"].as_str().unwrap().to_string(),
                v["id"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// An event as [`ids`] lists it.
fn event(kind: &str, id: &Value) -> (String, i64) {
    (kind.to_string(), id.as_i64().unwrap())
}

fn cursor(v: &Value) -> String {
    v["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("no cursor: {v}"))
        .to_string()
}

/// What `since=<from>&follow=false` gives, up to and including the event `last`, as a set
/// (nothing after it): nothing twice, and ended by a heartbeat.
fn resumed(d: &Daemon, from: &str, last: &(String, i64)) -> BTreeSet<(String, i64)> {
    let lines = Stream::open(d, &format!("?since={from}&follow=false")).to_end();
    assert_eq!(lines.last().unwrap()["kind"], "heartbeat", "{lines:?}");
    let all = ids(&lines);
    // Resumed from `last` itself, everything listed came after it (a change journaled later:
    // the mount's write of a file, journaled once its writer is idle).
    let upto = all.iter().position(|e| e == last).map_or(0, |i| i + 1);
    let set: BTreeSet<_> = all[..upto].iter().cloned().collect();
    assert_eq!(set.len(), upto, "an event came twice: {lines:?}");
    set
}

#[test]
fn changes_from_the_api_the_mount_and_beside_wardfs_and_checkpoints_arrive_live_and_resume_exactly()
{
    let d = Daemon::mounted(QUIET);
    let s = Stream::open(&d, "");
    let opened = s.next();
    assert_eq!(opened["kind"], "heartbeat", "{opened}");
    let mut live = Vec::new();

    d.write("/workspace/api.txt", "a");
    let written = Instant::now();
    live.extend(s.until(is_change("api.txt")));
    assert!(
        written.elapsed() < Duration::from_secs(1),
        "an API change took {:?} to arrive",
        written.elapsed()
    );
    let api = live.last().unwrap().clone();
    assert_eq!(
        (&api["zone"], &api["op"], &api["via"], &api["bytes"]),
        (
            &json!("workspace"),
            &json!("write"),
            &json!("api"),
            &json!(1)
        ),
        "{api}"
    );
    assert!(api["pid"].is_u64() && api["time_ms"].is_i64(), "{api}");

    std::fs::write(d.ws().join("mount.txt"), "bb").unwrap();
    live.extend(s.until(is_change("mount.txt")));
    assert_eq!(live.last().unwrap()["via"], "fuse", "{live:?}");

    std::fs::write(d.workspace().join("beside.txt"), "ccc").unwrap();
    live.extend(s.until(is_change("beside.txt")));
    assert_eq!(live.last().unwrap()["via"], "watcher", "{live:?}");

    let cp = d.ok("/v1/checkpoints", json!({"message": "after three writes"}));
    live.extend(s.until(|v| v["kind"] == "checkpoint"));
    let line = live.last().unwrap();
    assert_eq!(
        (
            &line["id"],
            &line["zone"],
            &line["message"],
            &line["journal_pos"],
            &line["via"]
        ),
        (
            &cp["id"],
            &json!("workspace"),
            &json!("after three writes"),
            &cp["journal_pos"],
            &json!("api")
        ),
        "{line}"
    );
    // A change after the checkpoint marks the end of what both streams must agree on.
    d.write("/workspace/end.txt", "e");
    live.extend(s.until(is_change("end.txt")));
    let live: Vec<Value> = live
        .into_iter()
        .filter(|v| v["kind"] != "heartbeat")
        .collect();
    let events = ids(&live);
    let last = events.last().unwrap().clone();
    assert_eq!(
        events.iter().collect::<BTreeSet<_>>().len(),
        events.len(),
        "an event came twice: {live:?}"
    );

    // Resuming from the opening heartbeat or from any line gives exactly the events after it.
    assert_eq!(
        resumed(&d, &cursor(&opened), &last),
        events.iter().cloned().collect()
    );
    for (i, v) in live.iter().enumerate() {
        assert_eq!(
            resumed(&d, &cursor(v), &last),
            events[i + 1..].iter().cloned().collect(),
            "resumed after {v}"
        );
    }
}

#[test]
fn follow_false_ends_filters_pass_other_events_and_bad_input_is_refused() {
    let d = Daemon::start(QUIET);
    d.write("/workspace/a.txt", "a");
    d.ok(
        "/v1/fs/write",
        json!({"path": "/cache/c.txt", "content": "c"}),
    );
    let ws = d.ok("/v1/checkpoints", json!({"zone": "workspace"}));
    let cache = d.ok("/v1/checkpoints", json!({"zone": "cache"}));

    let all = Stream::open(&d, "?since=0&follow=false").to_end();
    assert_eq!(
        ids(&all),
        [
            event("change", &json!(1)),
            event("change", &json!(2)),
            event("checkpoint", &ws["id"]),
            event("checkpoint", &cache["id"]),
        ],
        "{all:?}"
    );
    let end = all.last().unwrap();
    assert_eq!(
        (&end["kind"], &end["cursor"]),
        (&json!("heartbeat"), &all[3]["cursor"])
    );

    // A filter leaves the other zone's events out, but its last cursor passes them too.
    let cache_only = Stream::open(&d, "?since=0&follow=false&zone=cache").to_end();
    assert_eq!(
        ids(&cache_only),
        [
            event("change", &json!(2)),
            event("checkpoint", &cache["id"])
        ],
        "{cache_only:?}"
    );
    assert_eq!(cache_only.last().unwrap()["cursor"], end["cursor"]);
    let one_path = Stream::open(&d, "?since=0&follow=false&path=/workspace/a.txt").to_end();
    assert_eq!(
        ids(&one_path),
        [event("change", &json!(1)), event("checkpoint", &ws["id"])],
        "{one_path:?}"
    );
    // Without `since`, from now: nothing yet.
    let now = Stream::open(&d, "?follow=false").to_end();
    assert_eq!(now, [json!({"kind": "heartbeat", "cursor": end["cursor"]})]);

    // The CLI: one line per event, or the stream's lines with --json.
    let text = d.cli_ok(&["events", "--since", "0", "--no-follow"]);
    assert!(
        text.contains("write  /workspace/a.txt (1 bytes) [api")
            && text.contains("checkpoint 2 of /cache"),
        "{text}"
    );
    let json_lines = d.cli_ok(&["--json", "events", "--since", "0", "--no-follow", "/cache"]);
    let parsed: Vec<Value> = json_lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ids(&parsed), ids(&cache_only), "{json_lines}");

    for (query, want, names) in [
        (
            "?since=yesterday",
            "INVALID_ARGUMENT",
            &["since", "yesterday", "is not a cursor"][..],
        ),
        (
            "?since=12",
            "INVALID_ARGUMENT",
            &["\"12\"", "<journal row>-<checkpoint>"],
        ),
        (
            "?since=99-0",
            "INVALID_ARGUMENT",
            &["99-0", "past the newest event"],
        ),
        ("?zone=tmp", "INVALID_ARGUMENT", &["zone", "tmp"]),
        ("?path=/etc/passwd", "INVALID_PATH", &["/etc/passwd"]),
        ("?follow=maybe", "INVALID_ARGUMENT", &["follow"]),
        ("?bogus=1", "INVALID_ARGUMENT", &["bogus"]),
    ] {
        let (status, body) = d.curl("GET", &format!("/v1/events{query}"), None);
        let v: Value = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!(
                "{query}: not JSON ({e}): {}",
                String::from_utf8_lossy(&body)
            )
        });
        assert_eq!((status, code(&v)), (400, want), "{query}: {v}");
        let message = v["message"].as_str().unwrap();
        for n in names {
            assert!(
                message.contains(n),
                "{query}: {message:?} does not name {n}"
            );
        }
    }
    let out = d.cli(&["events", "--since", "yesterday"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("yesterday"));

    // Once the rows after a cursor are pruned, resuming from it would skip them: refused.
    let db = wardfs::state::Db::open(&d.dir.path().join("state/state.db")).unwrap();
    assert_eq!(db.journal_prune(i64::MAX).unwrap(), 2);
    let (status, body) = d.curl("GET", "/v1/events?since=1-0", None);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let message = v["message"].as_str().unwrap();
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    assert!(
        message.contains("1-0") && message.contains("pruned") && message.contains("keep_days"),
        "{message}"
    );
    // From the oldest kept, what is left: the checkpoints.
    let kept = Stream::open(&d, "?since=0&follow=false").to_end();
    assert_eq!(ids(&kept), ids(&all)[2..], "{kept:?}");
}

#[test]
fn a_client_gone_or_a_stream_open_does_not_hold_the_daemon() {
    let mut d = Daemon::start(QUIET);
    // A client that leaves as soon as its stream opened.
    let gone = Stream::open(&d, "");
    assert_eq!(gone.next()["kind"], "heartbeat");
    drop(gone);
    let mut open = Stream::open(&d, "?since=0");
    assert_eq!(open.next()["kind"], "heartbeat");
    d.write("/workspace/x.txt", "x");
    assert_eq!(open.next()["path"], "x.txt");
    let asked = Instant::now();
    d.stop();
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "the daemon took {:?} to stop with a stream open",
        asked.elapsed()
    );
    // The stream ended cleanly (the last chunk sent), not cut.
    assert!(open.to_end().is_empty());
    let status = open.curl.wait().unwrap();
    assert!(status.success(), "curl: {status}");
}

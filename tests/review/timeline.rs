//! The review page's timeline end to end, in a real browser: a mounted daemon whose workspace
//! is changed through the API, through the mount (a shell's redirect) and beside wardfs (the
//! watcher), with a checkpoint before and after; `wardfs review` serves the page and headless
//! Chromium (`timeline.js`) reads who changed what (and when, relative to now, the exact time in
//! a tooltip), compares the two checkpoints (a diff without git's header lines), restores the
//! older one through its button, and undoes that by restoring the files of a diff. Nothing
//! changed since the newer checkpoint, so the first restore records no checkpoint before it and
//! names the newer one as its undo; the undo, from a changed zone, records one. The outcome is
//! checked where it matters: through the daemon's API and on disk. The restore route is refused
//! without the token and from another origin, and bad input is refused with what was wrong,
//! before any browser runs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{get, post, require_browser, run_script, status_of, Review};
use crate::support::Daemon;

/// A file name and content that would run script if the timeline did not escape them.
const HOSTILE_NAME: &str = "<img src=x onerror=\"window.__pwned=3\">.md";
const HOSTILE_CONTENT: &str = "<script>window.__pwned = 4</script>\n";

/// Waits until the journal has a `via` row about `path` (relative to /workspace).
fn journaled(d: &Daemon, via: &str, path: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let log = d.get("/v1/log?zone=workspace&limit=100");
        let row = log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["via"] == via && r["path"] == path && r["op"] == "write");
        if let Some(r) = row {
            return r.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no {via} write of {path} in the journal: {log}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn checkpoint(d: &Daemon, message: &str) -> i64 {
    d.ok("/v1/checkpoints", json!({ "message": message }))["id"]
        .as_i64()
        .unwrap()
}

/// The status of a POST to the review server that carries the token and the page's origin.
fn post_as_page(review: &Review, target: &str, body: &str) -> u16 {
    let addr = review.addr();
    post(
        addr,
        &format!("{target}?token={}", review.token()),
        &format!("Content-Type: application/json\r\nOrigin: http://{addr}\r\n"),
        body,
    )
}

#[test]
fn review_timeline_shows_who_changed_what_diffs_and_restores_in_chromium() {
    require_browser();
    let d = Daemon::options()
        .prefix("wardfs-review")
        .mount()
        .extra("[checkpoints]\nauto_quiet_ms = 0\n")
        .start();
    d.write("/workspace/notes.md", "first\n");
    d.write("/workspace/src/lib.rs", "pub fn f() {}\n");
    let older = checkpoint(&d, "first draft");

    d.write("/workspace/notes.md", "second\n");
    d.write(&format!("/workspace/{HOSTILE_NAME}"), HOSTILE_CONTENT);
    let mounted = d.ws().join("from-mount.txt");
    let mut sh = Command::new("sh")
        .arg("-c")
        .arg("printf 'written through the mount\\n' > \"$1\"")
        .arg("sh")
        .arg(&mounted)
        .spawn()
        .unwrap();
    let mount_pid = sh.id();
    assert!(sh.wait().unwrap().success());
    std::fs::write(d.workspace().join("beside.txt"), "written beside wardfs\n").unwrap();
    assert_eq!(
        journaled(&d, "fuse", "from-mount.txt")["pid"],
        json!(mount_pid)
    );
    journaled(&d, "watcher", "beside.txt");
    let newer = checkpoint(&d, "second <b>draft</b>");

    let review = Review::start(&d);
    let addr = review.addr().to_string();
    let token = review.token().to_string();
    let restore = format!("{{\"id\":{older}}}");

    // The restore is guarded as push and discard are: token, then same-origin JSON.
    assert_eq!(get(&addr, "/timeline"), 403);
    assert_eq!(
        get(&addr, "/timeline?token=0123456789abcdef0123456789abcdef"),
        403
    );
    assert_eq!(
        post(
            &addr,
            "/api/restore",
            &format!("Content-Type: application/json\r\nOrigin: http://{addr}\r\n"),
            &restore
        ),
        403,
        "a restore without the token"
    );
    assert_eq!(
        post(
            &addr,
            &format!("/api/restore?token={token}"),
            "Content-Type: application/json\r\nOrigin: http://evil.test\r\n",
            &restore
        ),
        403,
        "a cross-origin restore with the token"
    );
    assert_eq!(
        status_of(
            &addr,
            &format!(
                "POST /api/restore HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
                 X-Wardfs-Token: {token}\r\nContent-Type: application/json\r\n\
                 Origin: http://{addr}\r\nSec-Fetch-Site: cross-site\r\n\
                 Content-Length: {}\r\n\r\n{restore}",
                restore.len()
            )
        ),
        403,
        "a restore from another site"
    );
    assert_eq!(
        post(
            &addr,
            &format!("/api/restore?token={token}"),
            "Content-Type: text/plain\r\n",
            &restore
        ),
        403,
        "a restore without Origin"
    );
    // Bad input is refused, saying what was wrong; nothing was restored by any of it.
    assert_eq!(post_as_page(&review, "/api/restore", "{\"id\":\"x\"}"), 400);
    assert_eq!(
        post_as_page(&review, "/api/restore", "{\"id\":1,\"all\":true}"),
        400
    );
    assert_eq!(
        post_as_page(&review, "/api/restore", "{\"id\":999999}"),
        404
    );
    assert_eq!(get(&addr, &format!("/timeline?token={token}&from=x")), 400);
    assert_eq!(
        get(&addr, &format!("/timeline?token={token}&zone=tmp")),
        400
    );
    assert_eq!(
        get(&addr, &format!("/timeline?token={token}&from=999999")),
        404
    );
    assert_eq!(d.read("notes.md").as_deref(), Some(&b"second\n"[..]));
    let listed = d.get("/v1/checkpoints?zone=workspace");
    assert_eq!(
        listed["checkpoints"].as_array().unwrap().len(),
        2,
        "{listed}"
    );

    let shots = tempfile::tempdir().unwrap();
    let shot = shots.path().join("timeline.png");
    let stdout = run_script(
        &d,
        "timeline.js",
        &review,
        &[
            ("OLD_ID", older.to_string()),
            ("NEW_ID", newer.to_string()),
            ("API_PID", std::process::id().to_string()),
            ("MOUNT_PID", mount_pid.to_string()),
            ("SCREENSHOT", shot.display().to_string()),
        ],
    );
    eprintln!("{stdout}");
    let said: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let before = said["before"].as_i64().unwrap();
    let undone_by = said["undone_by"].as_i64().unwrap();
    assert_eq!(said["files"], 4, "{said}");

    // Nothing changed since the newer checkpoint, so the restore recorded none before it: the
    // page named the newer one as its undo. The undo itself found the zone changed (at the older
    // state) and checkpointed it first: that checkpoint holds exactly what the older one does.
    assert_eq!(before, newer, "{said}");
    let diff = |from: i64, to: i64| d.ok("/v1/checkpoints/diff", json!({ "from": from, "to": to }));
    let restored = diff(older, undone_by);
    assert_eq!(restored["files"], json!([]), "{restored}");
    let cps = d.get("/v1/checkpoints?zone=workspace");
    let messages: Vec<(i64, &str)> = cps["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_i64().unwrap(), c["message"].as_str().unwrap()))
        .collect();
    let u = format!("before restoring checkpoint {newer}");
    assert_eq!(
        messages,
        [
            (undone_by, u.as_str()),
            (newer, "second <b>draft</b>"),
            (older, "first draft")
        ]
    );
    // The undo (the files of the diff shown) put the newer state back, on disk and in the mount.
    assert_eq!(d.read("notes.md").as_deref(), Some(&b"second\n"[..]));
    assert_eq!(
        std::fs::read_to_string(d.ws().join("notes.md")).unwrap(),
        "second\n"
    );
    assert_eq!(
        d.read(HOSTILE_NAME).as_deref(),
        Some(HOSTILE_CONTENT.as_bytes())
    );
    assert_eq!(
        d.read("from-mount.txt").as_deref(),
        Some(&b"written through the mount\n"[..])
    );
    assert_eq!(
        d.read("beside.txt").as_deref(),
        Some(&b"written beside wardfs\n"[..])
    );
    // The restores' changes are journaled as the review page's: through the API.
    let log = d.get("/v1/log?zone=workspace&path=/workspace/notes.md&limit=1");
    assert_eq!(log["entries"][0]["via"], "api", "{log}");

    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    if let Some(dir) = std::env::var_os("WARDFS_REVIEW_SCREENSHOT_DIR") {
        for name in ["timeline.png", "timeline-restored.png"] {
            std::fs::copy(shots.path().join(name), Path::new(&dir).join(name)).unwrap();
        }
    }
}

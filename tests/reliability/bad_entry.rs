//! One bad entry never breaks the whole zone (issue 29): a file an agent names so that git's
//! trees refuse it (`.GIT/x`, `.git::$INDEX_ALLOCATION/x`, `git~1/x`) is left out of checkpoints
//! and named in the log, and every checkpoint, restore and pull after it still works. A path
//! deeper than the kernel takes at once, or a name that is not UTF-8, made beside wardfs, is
//! named in every answer that leaves it out (list, grep, glob, the checkpoint's log, git status
//! and stage), never silently dropped, and never fails the zone.

use serde_json::json;

use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::Daemon;

#[test]
fn a_name_git_refuses_is_left_out_of_checkpoints_and_nothing_else_fails() {
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::new_in(base.path(), "p");
    repo.seed(&[("a.txt", b"a\n")]);
    let server = GitDaemon::start(base.path());
    let d = Daemon::git("", None);
    for bad in [
        ".GIT/x",
        ".git::$INDEX_ALLOCATION/x",
        "git~1/y",
        "d/.Git./z",
    ] {
        d.ok(
            "/v1/fs/write",
            json!({ "path": format!("/workspace/{bad}"), "content": "agent\n" }),
        );
    }
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/keep.txt", "content": "v1\n" }),
    );
    let first = d.ok("/v1/checkpoints", json!({ "message": "with bad names" }));
    let id = first["id"].as_i64().unwrap();
    assert_eq!(first["files"], 1, "only keep.txt is stored: {first}");
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(
        log.contains("not checkpointed") && log.contains(".GIT") && log.contains("git~1"),
        "named in the log: {log}"
    );
    // A restore of it works, and leaves the files it never held alone.
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/keep.txt", "content": "v2\n" }),
    );
    let r = d.ok("/v1/checkpoints/restore", json!({ "id": id }));
    assert!(r["conflicts"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!(d.read("keep.txt").unwrap(), b"v1\n");
    assert_eq!(d.read(".GIT/x").unwrap(), b"agent\n");
    // A pull (which checkpoints first) works too.
    let p = d.ok("/v1/git/pull", json!({ "remote": server.url("p") }));
    assert_eq!(p["written"], 1, "{p}");
}

/// Makes `levels` nested directories `d` beneath `root` beside wardfs, each relative to the fd
/// of the one above (the whole path is longer than the kernel takes at once), and `deep.txt`
/// holding `needle` at the bottom.
fn deep_tree(root: &std::path::Path, levels: usize) {
    use rustix::fs::{Mode, OFlags};
    let mut dir = rustix::fs::open(root, OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    for _ in 0..levels {
        rustix::fs::mkdirat(&dir, "d", Mode::from_raw_mode(0o755)).unwrap();
        dir =
            rustix::fs::openat(&dir, "d", OFlags::PATH | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    let dir =
        rustix::fs::openat(&dir, ".", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    let f = rustix::fs::openat(
        &dir,
        "deep.txt",
        OFlags::WRONLY | OFlags::CREATE,
        Mode::from_raw_mode(0o644),
    )
    .unwrap();
    rustix::io::write(&f, b"needle\n").unwrap();
}

#[test]
fn a_path_deeper_than_the_kernel_takes_never_fails_the_zone() {
    let d = Daemon::start("");
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/keep.txt", "content": "needle v1\n" }),
    );
    deep_tree(&d.workspace(), 2200);
    let first = d.ok("/v1/checkpoints", json!({ "message": "deep" }));
    assert_eq!(first["files"], 1, "keep.txt alone: {first}");
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(
        log.contains("not checkpointed") && log.contains("longer than the 4096 bytes"),
        "the deep path is named in the log"
    );
    // grep and glob find what they can reach and name the directory they cannot read.
    for (route, body) in [
        (
            "/v1/fs/grep",
            json!({ "pattern": "needle", "path": "/workspace" }),
        ),
        (
            "/v1/fs/glob",
            json!({ "pattern": "*.txt", "path": "/workspace" }),
        ),
    ] {
        let r = d.ok(route, body);
        assert_eq!(r["total"], 1, "{route}: keep.txt found");
        assert!(r["skipped_total"].as_u64().unwrap() >= 1, "{route}: {r}");
        let skip = &r["skipped"][0];
        assert!(
            skip["path"]
                .as_str()
                .unwrap()
                .starts_with("/workspace/d/d/d/")
                && skip["reason"]
                    .as_str()
                    .unwrap()
                    .contains("could not be read"),
            "{route}: {skip}"
        );
    }
    // A restore (which checkpoints first) works and leaves the deep tree alone.
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/keep.txt", "content": "v2\n" }),
    );
    let r = d.ok("/v1/checkpoints/restore", json!({ "id": first["id"] }));
    assert_eq!(d.read("keep.txt").unwrap(), b"needle v1\n", "{r}");
    assert!(d.workspace().join("d/d/d").is_dir());
}

#[test]
fn a_name_that_is_not_utf8_is_named_never_silently_dropped() {
    use std::os::unix::ffi::OsStrExt as _;
    let d = Daemon::start("");
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/ok.txt", "content": "needle\n" }),
    );
    // Made beside wardfs: Latin-1 bytes, and a control character for good measure.
    let ws = d.workspace();
    std::fs::write(
        ws.join(std::ffi::OsStr::from_bytes(b"caf\xe9\x1b.txt")),
        "needle\n",
    )
    .unwrap();
    let shown = "\"caf\\351\\033.txt\"";
    let ls = d.ok("/v1/fs/list", json!({ "path": "/workspace" }));
    assert_eq!(ls["skipped"], json!([shown]), "{ls}");
    assert_eq!(ls["entries"].as_array().unwrap().len(), 1, "{ls}");
    for (route, body) in [
        (
            "/v1/fs/grep",
            json!({ "pattern": "needle", "path": "/workspace" }),
        ),
        (
            "/v1/fs/glob",
            json!({ "pattern": "*.txt", "path": "/workspace" }),
        ),
    ] {
        let r = d.ok(route, body);
        assert_eq!(r["skipped_total"], 1, "{route}: {r}");
        assert_eq!(
            r["skipped"][0]["path"],
            format!("/workspace/{shown}"),
            "{route}: {r}"
        );
    }
    let out = d.cli(&["ls", "/workspace"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not UTF-8") && err.contains("caf\\351\\033.txt") && !err.contains('\x1b'),
        "{err}"
    );
    d.ok("/v1/checkpoints", json!({ "message": "latin-1" }));
    let log = std::fs::read_to_string(&d.log).unwrap();
    assert!(
        log.contains("not checkpointed") && log.contains("caf\\351"),
        "named in the log"
    );
}

/// An agent makes files whose names are not UTF-8 in a pulled repository (beside wardfs here;
/// through the mount they are journaled the same way): `git status` names each in `skipped`,
/// escaped as git quotes it (the CLI on stderr), without a rescan and on every status after,
/// `git stage` names them in its answer, and every other change still stages. Before, status
/// never showed them and stage committed without them, and nobody was told.
#[test]
fn a_name_that_is_not_utf8_is_named_by_git_status_and_stage_and_the_rest_stages() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::new_in(base.path(), "p");
    repo.seed(&[("a.txt", b"a\n"), ("b.txt", b"b\n")]);
    let server = GitDaemon::start(base.path());
    let d = Daemon::git("", None);
    d.ok(
        "/v1/git/pull",
        json!({ "remote": server.url("p"), "into": "/workspace/p" }),
    );
    let clean = d.ok("/v1/git/status", json!({}));
    assert_eq!(clean["repos"][0]["skipped_total"], 0, "{clean}");

    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/p/a.txt", "content": "a, changed\n" }),
    );
    let p = d.workspace().join("p");
    std::fs::write(p.join(OsStr::from_bytes(b"bad\xff.txt")), "secret plan\n").unwrap();
    let dir = p.join(OsStr::from_bytes(b"sub\xfe"));
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("x.txt"), "x\n").unwrap();
    let (bad, sub) = ("/workspace/\"p/bad\\377.txt\"", "/workspace/\"p/sub\\376\"");

    // Without a rescan: the watcher journals the change, status looks at its directory.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let status = loop {
        let s = d.ok("/v1/git/status", json!({}));
        if s["repos"][0]["skipped_total"] == 2 || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let r = &status["repos"][0];
    assert_eq!(r["skipped_total"], 2, "{status}");
    let skipped = r["skipped"].as_array().unwrap();
    assert_eq!(skipped[0]["path"], bad, "{status}");
    assert_eq!(skipped[1]["path"], sub, "{status}");
    assert!(
        skipped
            .iter()
            .all(|s| s["reason"].as_str().unwrap().contains("not UTF-8")),
        "{status}"
    );
    assert_eq!(
        r["changes"],
        json!([{ "path": "/workspace/p/a.txt", "state": "modified" }]),
        "{status}"
    );
    // Every status names them until they are gone, not only the one that came across them.
    let again = d.ok("/v1/git/status", json!({}));
    assert_eq!(again["repos"][0]["skipped"], r["skipped"], "{again}");

    // The CLI: the changes on stdout, what was not looked at on stderr.
    let out = d.cli(&["git", "status"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("M /workspace/p/a.txt"), "{stdout}");
    assert!(
        stderr.contains("\"p/bad\\377.txt\"") && stderr.contains("\"p/sub\\376\""),
        "{stderr}"
    );
    assert!(stderr.contains("not UTF-8"), "{stderr}");

    // Stage: the other change is committed, what it leaves out is named.
    let staged = d.ok("/v1/git/stage", json!({ "message": "edit a" }));
    let files: Vec<&str> = staged["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["/workspace/p/a.txt"], "{staged}");
    assert_eq!(staged["skipped_total"], 2, "{staged}");
    assert_eq!(staged["skipped"][0]["path"], bad, "{staged}");
    // The CLI's stage says so on stderr too.
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/p/b.txt", "content": "b, changed\n" }),
    );
    let out = d.cli(&["git", "stage", "-m", "edit b"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("\"p/bad\\377.txt\""), "{stderr}");

    // Renamed to a UTF-8 name: no longer skipped, and now a change like any other.
    std::fs::rename(
        p.join(OsStr::from_bytes(b"bad\xff.txt")),
        p.join("plan.txt"),
    )
    .unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let s = d.ok("/v1/git/status", json!({ "rescan": true }));
    assert_eq!(s["repos"][0]["skipped_total"], 0, "{s}");
    assert!(
        s["repos"][0]["changes"]
            .as_array()
            .unwrap()
            .contains(&json!({ "path": "/workspace/p/plan.txt", "state": "created" })),
        "{s}"
    );
}

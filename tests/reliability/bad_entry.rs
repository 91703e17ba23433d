//! One bad entry never breaks the whole zone (issue 29): a file an agent names so that git's
//! trees refuse it (`.GIT/x`, `.git::$INDEX_ALLOCATION/x`, `git~1/x`) is left out of checkpoints
//! and named in the log, and every checkpoint, restore and pull after it still works. A path
//! deeper than the kernel takes at once, or a name that is not UTF-8, made beside wardfs, is
//! named in every answer that leaves it out (list, grep, glob, the checkpoint's log), never
//! silently dropped, and never fails the zone.

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

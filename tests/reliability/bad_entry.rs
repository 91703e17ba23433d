//! One bad entry never breaks the whole zone (issue 29): a file an agent names so that git's
//! trees refuse it (`.GIT/x`, `.git::$INDEX_ALLOCATION/x`, `git~1/x`) is left out of checkpoints
//! and named in the log, and every checkpoint, restore and pull after it still works.

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

//! Git sync end to end: a real daemon pulls from, and pushes to, real git servers on loopback.

use serde_json::{json, Value};
use wardfs::core::ErrorCode;

use crate::support::daemon::GIT_TOKEN_VAR;
use crate::support::files::contains;
use crate::support::git_servers::{BareRepo, GitDaemon, HttpGit};
use crate::support::Daemon;

const LIB: &str = "line1\nline2\nline3\nline4\nline5\nline6\nline7\nline8\nline9\nline10\n";

/// A repository with a README, a source file, an executable script and a doc on `main`.
fn seeded() -> BareRepo {
    let (repo, work) = (BareRepo::new("proj"), work_tree());
    let w = work.path();
    for (p, c) in [
        ("README.md", "# proj\n"),
        ("src/lib.rs", LIB),
        ("bin/run.sh", "#!/bin/sh\necho run\n"),
        ("docs/old.md", "old docs\n"),
    ] {
        std::fs::create_dir_all(w.join(p).parent().unwrap()).unwrap();
        std::fs::write(w.join(p), c).unwrap();
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(w.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Some history below the tip: a shallow mirror must still push on top of it.
    std::fs::write(w.join("HISTORY.md"), "v0\n").unwrap();
    crate::support::git_servers::run_git(w, &["add", "-A"]);
    crate::support::git_servers::run_git(w, &["commit", "-qm", "older commit"]);
    std::fs::remove_file(w.join("HISTORY.md")).unwrap();
    commit_and_push(w, &repo, "initial commit");
    repo
}

/// Pulls `url` into /workspace/proj.
fn pull(d: &Daemon, url: &str) -> Value {
    d.ok("/v1/git/pull", json!({ "remote": url }))
}

fn changes(d: &Daemon) -> Vec<(String, String)> {
    let s = d.ok("/v1/git/status", json!({}));
    s["repos"][0]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn stage(d: &Daemon, message: &str) -> String {
    let c = d.ok("/v1/git/stage", json!({ "message": message }));
    c["id"].as_str().unwrap().to_string()
}

fn state_of(d: &Daemon, id: &str) -> Value {
    d.ok("/v1/git/staged/show", json!({ "id": id }))
}

#[test]
fn pull_edit_stage_review_push_lands_exactly_that_commit() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let seed = repo.head("main").unwrap();
    let r = pull(&d, &server.url("proj"));
    assert_eq!(r["repo"], "/workspace/proj");
    assert_eq!(r["commit"], seed.as_str());
    assert_eq!(r["written"], 4);
    assert_eq!(d.read("proj/src/lib.rs").unwrap(), LIB.as_bytes());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(d.workspace().join("proj/bin/run.sh"))
        .unwrap()
        .permissions()
        .mode();
    assert!(mode & 0o111 != 0, "executable bit lost: {mode:o}");
    assert!(changes(&d).is_empty());
    // The workspace was checkpointed just before the pull: `wardfs restore` undoes it.
    let (status, body) = d.curl("GET", "/v1/checkpoints", None);
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{v}");
    let before_pull = v["checkpoints"].as_array().unwrap().iter().any(|c| {
        c["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("before git pull of "))
    });
    assert!(before_pull, "{v}");

    // The agent edits, creates and deletes through the API.
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "line2", "new": "LINE2"}),
    );
    d.write("/workspace/proj/notes/new.txt", "fresh\n");
    d.ok(
        "/v1/fs/delete",
        json!({"path": "/workspace/proj/docs/old.md"}),
    );
    assert_eq!(
        changes(&d),
        [
            ("/workspace/proj/docs/old.md".into(), "deleted".into()),
            ("/workspace/proj/notes/new.txt".into(), "created".into()),
            ("/workspace/proj/src/lib.rs".into(), "modified".into()),
        ]
    );
    // Staging checks its input.
    let (code, msg) = d.err("/v1/git/stage", json!({ "message": "  " }));
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    let (code, _) = d.err(
        "/v1/git/stage",
        json!({ "message": "x", "files": ["/workspace/proj/README.md"] }),
    );
    assert_eq!(code, ErrorCode::NoMatch);

    let id = stage(&d, "Shout line two\n\nAnd add notes.");
    let c = state_of(&d, &id);
    assert_eq!(c["state"], "staged");
    assert_eq!(c["base"], seed.as_str());
    let files = c["files"].as_array().unwrap();
    let ops: Vec<(&str, &str)> = files
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("/workspace/proj/docs/old.md", "delete"),
            ("/workspace/proj/notes/new.txt", "create"),
            ("/workspace/proj/src/lib.rs", "update"),
        ]
    );
    let lib = &files[2];
    let diff = lib["diff"].as_str().unwrap();
    assert!(
        diff.starts_with("diff --git a/src/lib.rs b/src/lib.rs"),
        "{diff}"
    );
    assert!(diff.contains("-line2\n+LINE2\n"), "{diff}");
    assert_eq!(
        (lib["additions"].as_u64(), lib["deletions"].as_u64()),
        (Some(1), Some(1))
    );
    let kinds: Vec<&str> = lib["hunks"][0]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"add") && kinds.contains(&"delete") && kinds.contains(&"context"));
    // Nothing reached the remote by staging.
    assert_eq!(repo.head("main").unwrap(), seed);
    // The staged commit is immutable: later edits do not change it.
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "line3", "new": "LINE3"}),
    );
    assert_eq!(
        state_of(&d, &id)["files"][2]["diff"].as_str().unwrap(),
        diff
    );
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "LINE3", "new": "line3"}),
    );
    // The CLI shows the same.
    let out = d.cli(&["staged", "show", &id, "--no-pager"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("+LINE2"), "{text}");

    let p = d.ok("/v1/git/push", json!({ "id": id }));
    let sha = p["commit_sha"].as_str().unwrap();
    assert_eq!(p["rebased"], false);
    assert_eq!(repo.head("main").unwrap(), sha);
    assert_eq!(repo.parents(sha), std::slice::from_ref(&seed));
    assert_eq!(repo.log("main")[0].1, "Shout line two");
    assert_eq!(
        repo.read_file("main", "src/lib.rs").unwrap(),
        LIB.replace("line2", "LINE2").as_bytes()
    );
    assert_eq!(repo.read_file("main", "notes/new.txt").unwrap(), b"fresh\n");
    assert!(repo.read_file("main", "docs/old.md").is_none());
    assert_eq!(state_of(&d, &id)["state"], "pushed");
    // The workspace's base moved: nothing is left to stage.
    assert!(changes(&d).is_empty(), "{:?}", changes(&d));
    // Pushing twice is refused.
    let (code, _) = d.err("/v1/git/push", json!({ "id": id }));
    assert_eq!(code, ErrorCode::Conflict);
    // Every step is in the journal.
    let log = d.get("/v1/log?limit=1000");
    let ops: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["op"].as_str().unwrap())
        .collect();
    for op in ["git-pull", "git-stage", "git-push"] {
        assert!(ops.contains(&op), "{op} missing from {ops:?}");
    }
}

#[test]
fn a_moved_remote_is_rebased_onto_or_reported() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    pull(&d, &server.url("proj"));

    // 1. Moved without overlap: rebased and pushed.
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "line2", "new": "LINE2"}),
    );
    let a = stage(&d, "ours");
    let theirs = repo.commit_files("main", &[("other.txt", Some(b"upstream\n"))], "theirs");
    let p = d.ok("/v1/git/push", json!({ "id": a }));
    assert_eq!(p["rebased"], true);
    let head = repo.head("main").unwrap();
    assert_eq!(head, p["commit_sha"].as_str().unwrap());
    assert_eq!(repo.parents(&head), std::slice::from_ref(&theirs));
    assert_eq!(repo.read_file("main", "other.txt").unwrap(), b"upstream\n");
    assert!(
        String::from_utf8(repo.read_file("main", "src/lib.rs").unwrap())
            .unwrap()
            .contains("LINE2")
    );

    // 2. Moved in the same file, other lines: merged cleanly but held for re-review.
    d.ok("/v1/git/pull", json!({ "remote": server.url("proj") }));
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "line4", "new": "LINE4"}),
    );
    let b = stage(&d, "line four");
    let upstream_lib = String::from_utf8(repo.read_file("main", "src/lib.rs").unwrap())
        .unwrap()
        .replace("line9", "LINE9");
    let moved = repo.commit_files(
        "main",
        &[("src/lib.rs", Some(upstream_lib.as_bytes()))],
        "line nine",
    );
    let (code, msg) = d.err("/v1/git/push", json!({ "id": b }));
    assert_eq!(code, ErrorCode::RemoteMoved, "{msg}");
    assert!(
        msg.contains("src/lib.rs") && msg.contains("review"),
        "{msg}"
    );
    assert_eq!(repo.head("main").unwrap(), moved, "pushed before re-review");
    let c = state_of(&d, &b);
    assert_eq!(c["state"], "rebased");
    assert_eq!(
        c["base"],
        moved.as_str(),
        "the review shows the diff against the new tip"
    );
    let diff = c["files"][0]["diff"].as_str().unwrap();
    assert!(
        diff.contains("+LINE4") && !diff.contains("+LINE9"),
        "{diff}"
    );
    // A human reviewed it again: push.
    let p = d.ok("/v1/git/push", json!({ "id": b }));
    let head = repo.head("main").unwrap();
    assert_eq!(head, p["commit_sha"].as_str().unwrap());
    let lib = String::from_utf8(repo.read_file("main", "src/lib.rs").unwrap()).unwrap();
    assert!(lib.contains("LINE4") && lib.contains("LINE9"), "{lib}");

    // 3. Moved with the same lines changed: a conflict, nothing pushed.
    d.ok("/v1/git/pull", json!({ "remote": server.url("proj") }));
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "line6", "new": "ours6"}),
    );
    let c3 = stage(&d, "six");
    let up = String::from_utf8(repo.read_file("main", "src/lib.rs").unwrap())
        .unwrap()
        .replace("line6", "theirs6");
    let tip = repo.commit_files("main", &[("src/lib.rs", Some(up.as_bytes()))], "six too");
    let (code, msg) = d.err("/v1/git/push", json!({ "id": c3 }));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    assert_eq!(
        repo.head("main").unwrap(),
        tip,
        "a conflict pushed something"
    );
    let c = state_of(&d, &c3);
    assert_eq!(c["state"], "conflicted");
    assert_eq!(c["conflicts"], json!(["/workspace/proj/src/lib.rs"]));
    let (code, _) = d.err("/v1/git/push", json!({ "id": c3 }));
    assert_eq!(code, ErrorCode::Conflict);
}

#[test]
fn hook_rejections_are_reported_and_nothing_moves() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    pull(&d, &server.url("proj"));
    d.write("/workspace/proj/x.txt", "x\n");
    let id = stage(&d, "x");
    let before = repo.head("main").unwrap();
    repo.reject_pushes("pushes are frozen today");
    let (code, msg) = d.err("/v1/git/push", json!({ "id": id }));
    assert_eq!(code, ErrorCode::Rejected, "{msg}");
    assert!(msg.contains("pushes are frozen today"), "{msg}");
    assert_eq!(repo.head("main").unwrap(), before);
    let c = state_of(&d, &id);
    assert_eq!(c["state"], "rejected");
    assert!(c["reason"].as_str().unwrap().contains("frozen"));
    // Once the hook is gone, the same commit goes through.
    repo.remove_hook("pre-receive");
    d.ok("/v1/git/push", json!({ "id": id }));
    assert_eq!(repo.read_file("main", "x.txt").unwrap(), b"x\n");
}

#[test]
fn http_credentials_come_from_the_environment_and_never_leak() {
    let repo = seeded();
    let server = HttpGit::serve(&repo);
    let url = server.url("proj");
    // Right token: pull and push work.
    let d = Daemon::git("", Some(server.password()));
    pull(&d, &url);
    d.write("/workspace/proj/http.txt", "over http\n");
    let id = stage(&d, "over http");
    d.ok("/v1/git/push", json!({ "id": id }));
    assert_eq!(repo.read_file("main", "http.txt").unwrap(), b"over http\n");
    let written = d.everything_written();
    assert!(
        !contains(&written, server.password().as_bytes()),
        "the token was written to the log or the state database"
    );
    let ps = std::process::Command::new("ps")
        .args(["-eo", "args"])
        .output()
        .unwrap();
    assert!(!contains(&ps.stdout, server.password().as_bytes()));
    // Wrong token: AUTH_FAILED, promptly (the callback gives up).
    let bad = Daemon::git("", Some("not-the-token"));
    let t = std::time::Instant::now();
    let (code, msg) = bad.err("/v1/git/pull", json!({ "remote": url }));
    assert_eq!(code, ErrorCode::AuthFailed, "{msg}");
    assert!(t.elapsed().as_secs() < 20);
    assert!(!msg.contains("not-the-token"), "{msg}");
    // No token: AUTH_FAILED naming the variable to set.
    let none = Daemon::git("", None);
    let (code, msg) = none.err("/v1/git/pull", json!({ "remote": url }));
    assert_eq!(code, ErrorCode::AuthFailed, "{msg}");
    assert!(msg.contains(GIT_TOKEN_VAR), "{msg}");
    // A branch that does not exist, a remote that is not there, a path that is no repository.
    let (code, msg) = d.err(
        "/v1/git/pull",
        json!({ "remote": url, "branch": "nope", "into": "/workspace/p3" }),
    );
    assert_eq!(code, ErrorCode::NotFound, "{msg}");
    assert!(msg.contains("nope"), "{msg}");
    let (code, msg) = d.err(
        "/v1/git/pull",
        json!({ "remote": "http://127.0.0.1:9/x.git", "into": "/workspace/p4" }),
    );
    assert_eq!(code, ErrorCode::RemoteUnavailable, "{msg}");
    let (code, msg) = d.err(
        "/v1/git/pull",
        json!({ "remote": "/nonexistent/repo.git", "into": "/workspace/p5" }),
    );
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    // A password in the URL is refused, and not echoed.
    let with_pw = url.replace("http://", "http://wardfs:hunter2@");
    let (code, msg) = d.err(
        "/v1/git/pull",
        json!({ "remote": with_pw, "into": "/workspace/p2" }),
    );
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(!msg.contains("hunter2"), "{msg}");
}

#[test]
fn discard_keeps_or_reverts_and_staged_commits_survive_a_restart() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let mut d = Daemon::git("", None);
    pull(&d, &server.url("proj"));
    d.write("/workspace/proj/README.md", "# changed\n");
    d.write("/workspace/proj/added.txt", "added\n");
    d.ok(
        "/v1/fs/delete",
        json!({"path": "/workspace/proj/docs/old.md"}),
    );
    assert_eq!(d.get("/v1/status")["staged_awaiting_review"], 0);
    let a = stage(&d, "to discard");
    assert_eq!(d.get("/v1/status")["staged_awaiting_review"], 1);
    // Without revert: the files stay as they are.
    let r = d.ok("/v1/git/discard", json!({ "id": a }));
    assert_eq!(d.get("/v1/status")["staged_awaiting_review"], 0);
    assert!(r["reverted"].as_array().unwrap().is_empty());
    assert_eq!(d.read("proj/README.md").unwrap(), b"# changed\n");
    assert_eq!(state_of(&d, &a)["state"], "discarded");
    let (code, _) = d.err("/v1/git/discard", json!({ "id": a }));
    assert_eq!(code, ErrorCode::Conflict, "discarded twice");
    let (code, _) = d.err("/v1/git/push", json!({ "id": a }));
    assert_eq!(code, ErrorCode::Conflict);
    // With revert: back to the base (a created file removed, a deleted one restored).
    let b = stage(&d, "to revert");
    d.restart();
    assert_eq!(state_of(&d, &b)["state"], "staged", "lost in the restart");
    let r = d.ok("/v1/git/discard", json!({ "id": b, "revert": true }));
    assert_eq!(r["reverted"].as_array().unwrap().len(), 3, "{r}");
    assert_eq!(d.read("proj/README.md").unwrap(), b"# proj\n");
    assert!(d.read("proj/added.txt").is_none());
    assert_eq!(d.read("proj/docs/old.md").unwrap(), b"old docs\n");
    assert!(changes(&d).is_empty(), "{:?}", changes(&d));
    // A commit staged before a restart is pushed after it.
    d.write("/workspace/proj/after.txt", "after\n");
    let c = stage(&d, "survives");
    d.restart();
    d.ok("/v1/git/push", json!({ "id": c }));
    assert_eq!(repo.read_file("main", "after.txt").unwrap(), b"after\n");
    let (code, _) = d.err("/v1/git/discard", json!({ "id": c }));
    assert_eq!(code, ErrorCode::Conflict, "a pushed commit was discarded");
    let (code, _) = d.err("/v1/git/discard", json!({ "id": "nope" }));
    assert_eq!(code, ErrorCode::NotFound);
}

#[test]
fn binary_rename_symlink_and_a_thousand_files() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    pull(&d, &server.url("proj"));
    // Made beside wardfs: only a rescan sees them.
    let png: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(d.workspace().join("proj/logo.png"), &png).unwrap();
    assert!(changes(&d).is_empty());
    d.ok("/v1/git/status", json!({ "rescan": true }));
    assert_eq!(
        changes(&d),
        [("/workspace/proj/logo.png".into(), "created".into())]
    );
    // A rename is a delete and a create.
    d.ok(
        "/v1/fs/move",
        json!({"from": "/workspace/proj/README.md", "to": "/workspace/proj/READ.md"}),
    );
    // 1,000 new files.
    for i in 0..1000 {
        d.write(
            &format!("/workspace/proj/many/f{i:04}.txt"),
            &format!("{i}\n"),
        );
    }
    let c = d.ok("/v1/git/stage", json!({ "message": "big" }));
    let files = c["files"].as_array().unwrap();
    assert_eq!(files.len(), 1003, "{}", files.len());
    let by_path = |p: &str| files.iter().find(|f| f["path"] == p).unwrap().clone();
    let logo = by_path("/workspace/proj/logo.png");
    assert_eq!(logo["binary"], true);
    assert!(logo.get("diff").is_none(), "binary dumped: {logo}");
    assert_eq!(by_path("/workspace/proj/README.md")["operation"], "delete");
    assert_eq!(by_path("/workspace/proj/READ.md")["operation"], "create");
    let id = c["id"].as_str().unwrap();
    d.ok("/v1/git/push", json!({ "id": id }));
    assert_eq!(repo.read_file("main", "logo.png").unwrap(), png);
    assert_eq!(repo.read_file("main", "many/f0999.txt").unwrap(), b"999\n");
    assert!(repo.read_file("main", "README.md").is_none());
    assert_eq!(repo.file_mode("main", "bin/run.sh").unwrap(), "100755");
}

/// A checkpoint of the workspace: (id, parent, message, journal position).
type Cp = (i64, Option<i64>, String, i64);

/// The workspace's checkpoints, newest first.
fn workspace_checkpoints(d: &Daemon) -> Vec<Cp> {
    let list = d.get("/v1/checkpoints?zone=workspace&limit=100");
    list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_i64().unwrap(),
                c["parent"].as_i64(),
                c["message"].as_str().unwrap().to_string(),
                c["journal_pos"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The workspace's journal rows after position `after`, oldest first: (id, op).
fn journal_after(d: &Daemon, after: i64) -> Vec<(i64, String)> {
    let log = d.get(&format!(
        "/v1/log?zone=workspace&after_id={after}&limit=1000"
    ));
    let mut rows: Vec<(i64, String)> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["op"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    rows.reverse();
    rows
}

/// Waits until an automatic checkpoint includes every workspace change so far; returns the
/// checkpoints then.
fn wait_for_auto(d: &Daemon) -> Vec<Cp> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let cps = workspace_checkpoints(d);
        if let Some((_, _, message, pos)) = cps.first() {
            if message == "auto" && journal_after(d, *pos).is_empty() {
                return cps;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no automatic checkpoint of every change: {cps:?}\n{}",
            d.log_text()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_stage_and_a_pull_that_change_nothing_make_no_checkpoint_and_a_change_does() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    // Automatic checkpoints 100 ms after the journal goes quiet.
    let d = Daemon::git("[checkpoints]\nauto_quiet_ms = 100\n", None);
    pull(&d, &server.url("proj"));
    let cps = wait_for_auto(&d);
    // The oldest holds the empty workspace from before the pull.
    assert!(
        cps.last().unwrap().2.starts_with("before git pull of "),
        "{cps:?}"
    );
    d.write("/workspace/proj/README.md", "# proj, edited\n");
    let settled = wait_for_auto(&d);
    assert!(settled.len() > cps.len(), "{settled:?}");
    let latest = settled[0].clone();

    // Staging, and pulling a remote that did not move, journal events and change no file.
    stage(&d, "Edit the README");
    let again = pull(&d, &server.url("proj"));
    assert_eq!(again["written"], 0, "{again}");
    let ops: Vec<String> = journal_after(&d, latest.3)
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert!(
        ops.contains(&"git-stage".into()) && ops.contains(&"git-pull".into()),
        "journaled since the latest checkpoint: {ops:?}"
    );
    // Neither the checkpoint before the pull nor an automatic one after them is recorded: the
    // latest checkpoint holds the workspace as it is. (Ten quiet periods: time for one; the sleep
    // must stay, only quiet time shows that none comes.)
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert_eq!(workspace_checkpoints(&d), settled);

    // A real change is checkpointed, on top of the latest one.
    d.write("/workspace/proj/notes.txt", "new\n");
    let after = wait_for_auto(&d);
    assert_eq!(after.len(), settled.len() + 1, "{after:?}");
    assert_eq!((after[0].1, after[0].2.as_str()), (Some(latest.0), "auto"));
}

#[test]
fn pulling_again_fast_forwards_untouched_files_and_reports_conflicts() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    pull(&d, &server.url("proj"));
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/proj/src/lib.rs", "old": "line1\n", "new": "mine\n"}),
    );
    let lib = LIB.replacen("line1\n", "theirs\n", 1);
    repo.commit_files(
        "main",
        &[
            ("README.md", Some(b"# proj v2\n")),
            ("src/lib.rs", Some(lib.as_bytes())),
            ("docs/old.md", None),
        ],
        "upstream work",
    );
    let r = pull(&d, &server.url("proj"));
    assert_eq!(d.read("proj/README.md").unwrap(), b"# proj v2\n");
    assert!(
        d.read("proj/docs/old.md").is_none(),
        "deleted upstream, untouched here"
    );
    assert_eq!(
        d.read("proj/src/lib.rs").unwrap(),
        LIB.replacen("line1\n", "mine\n", 1).as_bytes(),
        "a local change was overwritten"
    );
    assert_eq!(
        r["conflicts"][0]["path"], "/workspace/proj/src/lib.rs",
        "{r}"
    );
    // The upstream version is kept in /cache for the merge.
    let up = r["conflicts"][0]["upstream"].as_str().unwrap();
    let read = d.ok("/v1/fs/read", json!({ "path": up }));
    assert!(
        read["content"].as_str().unwrap().starts_with("theirs\n"),
        "{read}"
    );
    assert_eq!(
        changes(&d),
        [("/workspace/proj/src/lib.rs".into(), "conflict".into())]
    );
    // A conflicted file cannot be staged until it is resolved.
    let (code, msg) = d.err("/v1/git/stage", json!({ "message": "x" }));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    assert!(
        msg.contains("src/lib.rs") && msg.contains("resolve"),
        "{msg}"
    );
    d.ok(
        "/v1/git/resolve",
        json!({ "path": "/workspace/proj/src/lib.rs" }),
    );
    let id = stage(&d, "mine wins");
    d.ok("/v1/git/push", json!({ "id": id }));
    assert!(
        String::from_utf8(repo.read_file("main", "src/lib.rs").unwrap())
            .unwrap()
            .starts_with("mine\n")
    );
}

#[test]
fn symlinks_pointing_out_of_the_repository_are_not_written() {
    let repo = BareRepo::new("links");
    // Seed with symlinks via the CLI: one inside, one to /etc, one climbing out.
    let work = tempfile::tempdir().unwrap();
    crate::support::git_servers::run_git(work.path(), &["init", "-q", "-b", "main", "."]);
    std::fs::write(work.path().join("a.txt"), "a\n").unwrap();
    std::os::unix::fs::symlink("a.txt", work.path().join("in")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", work.path().join("abs")).unwrap();
    std::os::unix::fs::symlink("../../../etc", work.path().join("up")).unwrap();
    crate::support::git_servers::run_git(work.path(), &["add", "-A"]);
    crate::support::git_servers::run_git(work.path(), &["commit", "-qm", "links"]);
    crate::support::git_servers::run_git(
        work.path(),
        &["push", "-q", repo.path().to_str().unwrap(), "main"],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let r = d.ok("/v1/git/pull", json!({ "remote": server.url("links") }));
    let skipped: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        skipped,
        ["/workspace/links/abs", "/workspace/links/up"],
        "{r}"
    );
    assert_eq!(
        std::fs::read_link(d.workspace().join("links/in")).unwrap(),
        std::path::Path::new("a.txt")
    );
    assert!(std::fs::symlink_metadata(d.workspace().join("links/abs")).is_err());
}

/// A GitHub REST stand-in (wiremock) for pull requests.
struct FakeGitHub {
    rt: tokio::runtime::Runtime,
    server: wiremock::MockServer,
}

impl FakeGitHub {
    fn start() -> FakeGitHub {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(wiremock::MockServer::start());
        FakeGitHub { rt, server }
    }

    fn mount(&self, m: wiremock::Mock) {
        self.rt.block_on(m.mount(&self.server));
    }

    fn requests(&self) -> Vec<wiremock::Request> {
        self.rt
            .block_on(self.server.received_requests())
            .unwrap_or_default()
    }
}

fn pr_json(number: u64, head: &str) -> Value {
    json!({
        "id": number, "number": number, "url": format!("https://api.test/pulls/{number}"),
        "html_url": format!("https://github.test/o/proj/pull/{number}"),
        "head": {"ref": head, "sha": "0000000000000000000000000000000000000000"},
        "base": {"ref": "main", "sha": "0000000000000000000000000000000000000000"},
    })
}

#[test]
fn pull_requests_are_opened_found_again_or_refused() {
    use wiremock::matchers::{header, method, path, query_param};
    use wiremock::{Mock, ResponseTemplate};
    // The repository lives at o/proj so that it names an owner and a repository.
    let base = tempfile::tempdir().unwrap();
    std::fs::create_dir(base.path().join("o")).unwrap();
    let repo = BareRepo::new_in(&base.path().join("o"), "proj");
    repo.seed(&[("README.md", b"# proj\n")]);
    let server = GitDaemon::start(base.path());
    let url = format!("git://127.0.0.1:{}/o/proj.git", server.port());
    let gh = FakeGitHub::start();
    let d = Daemon::git(
        &format!("github_api = \"{}\"\n", gh.server.uri()),
        Some("gh-test-token"),
    );
    d.ok("/v1/git/pull", json!({ "remote": url }));

    // Created.
    d.write("/workspace/proj/a.txt", "a\n");
    let a = stage(&d, "Add a\n\nWith a body.");
    gh.mount(
        Mock::given(method("POST"))
            .and(path("/repos/o/proj/pulls"))
            .and(header("authorization", "Bearer gh-test-token"))
            .respond_with(ResponseTemplate::new(201).set_body_json(pr_json(7, "x")))
            .up_to_n_times(1),
    );
    let p = d.ok("/v1/git/push", json!({ "id": a, "pr": true }));
    assert_eq!(p["url"], "https://github.test/o/proj/pull/7");
    assert_eq!(p["pushed_ref"], format!("refs/heads/wardfs/{a}"));
    assert_eq!(
        repo.read_file(&format!("wardfs/{a}"), "a.txt").unwrap(),
        b"a\n"
    );
    assert!(
        repo.read_file("main", "a.txt").is_none(),
        "a PR push touched main"
    );
    let reqs = gh.requests();
    let body: Value = serde_json::from_slice(&reqs[0].body).unwrap();
    assert_eq!(body["title"], "Add a");
    assert_eq!(body["head"], format!("wardfs/{a}"));
    assert_eq!(body["base"], "main");
    assert!(body["body"].as_str().unwrap().contains("With a body."));
    assert!(body["body"].as_str().unwrap().contains("`a.txt`"));
    assert_eq!(
        state_of(&d, &a)["pr_url"],
        "https://github.test/o/proj/pull/7"
    );

    // Already exists (422): found and reused.
    d.write("/workspace/proj/b.txt", "b\n");
    let b = stage(&d, "Add b");
    gh.mount(
        Mock::given(method("POST"))
            .and(path("/repos/o/proj/pulls"))
            .respond_with(ResponseTemplate::new(422).set_body_json(json!({
                "message": "Validation Failed",
                "errors": [{"message": "A pull request already exists for o:wardfs/x."}],
            })))
            .up_to_n_times(1),
    );
    gh.mount(
        Mock::given(method("GET"))
            .and(path("/repos/o/proj/pulls"))
            .and(query_param("head", format!("o:wardfs/{b}")))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(json!([pr_json(9, "wardfs/b")])),
            ),
    );
    let p = d.ok("/v1/git/push", json!({ "id": b, "pr": true }));
    assert_eq!(p["url"], "https://github.test/o/proj/pull/9");

    // Bad credentials (401): AUTH_FAILED, token not echoed.
    d.write("/workspace/proj/c.txt", "c\n");
    let c = stage(&d, "Add c");
    gh.mount(
        Mock::given(method("POST"))
            .and(path("/repos/o/proj/pulls"))
            .respond_with(
                ResponseTemplate::new(401).set_body_json(json!({"message": "Bad credentials"})),
            ),
    );
    let (code, msg) = d.err("/v1/git/push", json!({ "id": c, "pr": true }));
    assert_eq!(code, ErrorCode::AuthFailed, "{msg}");
    assert!(
        msg.contains("Bad credentials") && !msg.contains("gh-test-token"),
        "{msg}"
    );
    assert!(!contains(&d.everything_written(), b"gh-test-token"));
    // Without a token nothing is pushed at all.
    let no_token = Daemon::git(&format!("github_api = \"{}\"\n", gh.server.uri()), None);
    no_token.ok(
        "/v1/git/pull",
        json!({ "remote": url, "into": "/workspace/q" }),
    );
    no_token.write("/workspace/q/e.txt", "e\n");
    let e = stage(&no_token, "Add e");
    let (code, msg) = no_token.err("/v1/git/push", json!({ "id": e, "pr": true }));
    assert_eq!(code, ErrorCode::AuthFailed, "{msg}");
    assert!(
        !repo.branches().contains(&format!("wardfs/{e}")),
        "pushed before checking"
    );
}

#[test]
fn pull_and_push_stream_progress_and_the_cli_drives_it_all() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    // NDJSON progress then one result line.
    let mut lines = Vec::new();
    let c = wardfs::client::Client::new(&d.socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r: Value = rt
        .block_on(c.post_progress(
            "/v1/git/pull",
            &json!({"remote": server.url("proj"), "progress": true}),
            |p| lines.push(p.clone()),
        ))
        .unwrap();
    assert_eq!(r["written"], 4);
    assert!(
        lines
            .iter()
            .any(|p| p["phase"] == "fetch" || p["phase"] == "write"),
        "{lines:?}"
    );
    // The CLI: status, stage, list, show --stat, push.
    std::fs::write(d.workspace().join("proj/README.md"), "# cli\n").unwrap();
    let out = d.cli(&["git", "status", "--rescan"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("M /workspace/proj/README.md"), "{text}");
    let out = d.cli(&["git", "stage", "-m", "from the cli"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = d.cli(&["--json", "staged", "list", "--state", "staged"]);
    let v: Value = serde_json::from_slice(&list.stdout).unwrap();
    let id = v["staged"][0]["id"].as_str().unwrap().to_string();
    let out = d.cli(&["staged", "show", &id, "--stat"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("update README.md") || text.contains("/workspace/proj/README.md"),
        "{text}"
    );
    let out = d.cli(&["staged", "push", &id]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(repo.read_file("main", "README.md").unwrap(), b"# cli\n");
    // Error classes reach the exit code: pushing again is refused (5: conflict class).
    let out = d.cli(&["staged", "push", &id]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = d.cli(&["staged", "show", "nope"]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn gc_drops_old_discarded_commits_and_stray_refs_and_keeps_live_ones() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("[journal]\nkeep_days = 1\n", None);
    pull(&d, &server.url("proj"));
    d.write("/workspace/proj/README.md", "# old discard\n");
    let old = stage(&d, "discarded two days ago");
    d.ok("/v1/git/discard", json!({ "id": old }));
    d.write("/workspace/proj/README.md", "# recent discard\n");
    let recent = stage(&d, "discarded just now");
    d.ok("/v1/git/discard", json!({ "id": recent }));
    d.write("/workspace/proj/README.md", "# live\n");
    let live = stage(&d, "waiting for review");

    // Age the first discard by two days, and leave a ref behind as a daemon stopped between a
    // discard's two steps would.
    let db = rusqlite::Connection::open(d.dir.path().join("state/state.db")).unwrap();
    db.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    let aged = db
        .execute(
            "UPDATE staged_commits SET updated_at = updated_at - 2 * 86400000 WHERE id = ?1",
            [&old],
        )
        .unwrap();
    assert_eq!(aged, 1);
    let mirror: String = db
        .query_row("SELECT mirror FROM repos", [], |r| r.get(0))
        .unwrap();
    let m = git2::Repository::open_bare(&mirror).unwrap();
    let live_ref = format!("refs/wardfs/staged/{live}");
    let target = m.refname_to_id(&live_ref).unwrap();
    m.reference("refs/wardfs/staged/stray", target, false, "test")
        .unwrap();

    let out = d.cli(&["gc", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["staged_commits"], json!([old]), "{r}");
    assert_eq!(
        r["refs"],
        json!([format!("{mirror}:refs/wardfs/staged/stray")]),
        "{r}"
    );
    // The recent discard's row and the live commit (row and ref) stay.
    assert_eq!(state_of(&d, &recent)["state"], "discarded");
    assert_eq!(state_of(&d, &live)["state"], "staged");
    assert!(m.refname_to_id(&live_ref).is_ok());
    assert!(m.refname_to_id("refs/wardfs/staged/stray").is_err());
    let (code, _) = d.err("/v1/git/staged/show", json!({ "id": old }));
    assert_eq!(code, ErrorCode::NotFound);
}

/// An empty work tree on `main`, to build commits for a bare repository.
fn work_tree() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    crate::support::git_servers::run_git(work.path(), &["init", "-q", "-b", "main", "."]);
    work
}

/// Commits everything in the work tree `w` and pushes it to `main` of `repo`.
fn commit_and_push(w: &std::path::Path, repo: &BareRepo, message: &str) {
    crate::support::git_servers::run_git(w, &["add", "-A"]);
    crate::support::git_servers::run_git(w, &["commit", "-qm", message]);
    crate::support::git_servers::run_git(w, &["push", "-q", repo.path().to_str().unwrap(), "main"]);
}

/// Writes a raw object into a bare repository, unchecked (`git hash-object --literally`): the
/// way an attacker crafts a tree git's own tools would refuse to build.
pub(super) fn raw_object(repo: &BareRepo, kind: &str, bytes: &[u8]) -> String {
    use std::io::Write;
    let mut child = crate::support::git_servers::git_command()
        .current_dir(repo.path())
        .args(["hash-object", "-t", kind, "--literally", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "hash-object failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// One raw tree entry: `<mode> <name>\0<20-byte id>`.
pub(super) fn tree_entry(mode: &str, name: &[u8], hex: &str) -> Vec<u8> {
    let mut e = format!("{mode} ").into_bytes();
    e.extend_from_slice(name);
    e.push(0);
    e.extend((0..20).map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap()));
    e
}

/// Points `main` of `repo` at a commit of the raw root tree `entries`.
pub(super) fn commit_raw_tree(repo: &BareRepo, entries: &[Vec<u8>]) {
    let tree = raw_object(repo, "tree", &entries.concat());
    let commit = repo.git(&["commit-tree", &tree, "-m", "crafted"]);
    repo.git(&["update-ref", "refs/heads/main", &commit]);
}

#[test]
fn a_tree_entry_named_dotdot_fails_the_pull_and_writes_nothing() {
    let repo = BareRepo::new("evil");
    let blob = raw_object(&repo, "blob", b"planted\n");
    let inner = raw_object(&repo, "tree", &tree_entry("100644", b"x.txt", &blob));
    commit_raw_tree(
        &repo,
        &[
            tree_entry("40000", b"..", &inner),
            tree_entry("100644", b"ok.txt", &blob),
        ],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let (code, msg) = d.err(
        "/v1/git/pull",
        json!({ "remote": server.url("evil"), "into": "/workspace/deep/r" }),
    );
    assert_eq!(code, ErrorCode::Rejected, "{msg}");
    assert!(
        msg.contains("\"..\"") && msg.contains("nothing was written"),
        "{msg}"
    );
    assert!(
        !d.workspace().join("deep/x.txt").exists(),
        "wrote outside the pull dir"
    );
    assert!(
        !d.workspace().join("deep/r/ok.txt").exists(),
        "wrote part of a refused tree"
    );
}

#[test]
fn a_dot_git_entry_in_any_case_at_any_depth_fails_the_pull() {
    let repo = BareRepo::new("hooks");
    let blob = raw_object(&repo, "blob", b"#!/bin/sh\necho owned\n");
    let hooks = raw_object(
        &repo,
        "tree",
        &tree_entry("100755", b"post-checkout", &blob),
    );
    let dotgit = raw_object(&repo, "tree", &tree_entry("40000", b"hooks", &hooks));
    let sub = raw_object(&repo, "tree", &tree_entry("40000", b".GiT", &dotgit));
    commit_raw_tree(
        &repo,
        &[
            tree_entry("100644", b"a.txt", &blob),
            tree_entry("40000", b"sub", &sub),
        ],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let (code, msg) = d.err("/v1/git/pull", json!({ "remote": server.url("hooks") }));
    assert_eq!(code, ErrorCode::Rejected, "{msg}");
    assert!(msg.contains("sub/.GiT") && msg.contains(".git"), "{msg}");
    assert!(
        !d.workspace().join("hooks").exists(),
        "nothing may be written"
    );
}

#[test]
fn a_symlink_is_judged_through_the_trees_own_links() {
    let (repo, work) = (BareRepo::new("chain"), work_tree());
    let w = work.path();
    std::fs::create_dir(w.join("d")).unwrap();
    // `d/p -> ..` stays inside; `e` counts as inside by its `..`s alone, but through `d/p`
    // it climbs out of the repository.
    std::os::unix::fs::symlink("..", w.join("d/p")).unwrap();
    std::os::unix::fs::symlink("d/p/d/p/d/p/../../etc/passwd", w.join("e")).unwrap();
    std::fs::write(w.join("f.txt"), "f\n").unwrap();
    commit_and_push(w, &repo, "chain");
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let r = d.ok("/v1/git/pull", json!({ "remote": server.url("chain") }));
    let skipped: Vec<&str> = r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["path"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["/workspace/chain/e"], "{r}");
    assert!(std::fs::symlink_metadata(d.workspace().join("chain/e")).is_err());
    assert_eq!(
        std::fs::read_link(d.workspace().join("chain/d/p")).unwrap(),
        std::path::Path::new("..")
    );
}

#[test]
fn a_link_turned_into_a_file_upstream_is_replaced_as_itself() {
    let (repo, work) = (BareRepo::new("turn"), work_tree());
    let w = work.path();
    std::fs::write(w.join("target.txt"), "target\n").unwrap();
    std::os::unix::fs::symlink("target.txt", w.join("link")).unwrap();
    commit_and_push(w, &repo, "link");
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    d.ok("/v1/git/pull", json!({ "remote": server.url("turn") }));
    // The agent edits the link's target; upstream turns the link into a regular file.
    d.ok(
        "/v1/fs/write",
        json!({ "path": "/workspace/turn/target.txt", "content": "the agent's edit\n" }),
    );
    std::fs::remove_file(w.join("link")).unwrap();
    std::fs::write(w.join("link"), "now a file\n").unwrap();
    commit_and_push(w, &repo, "file");
    let r = d.ok("/v1/git/pull", json!({ "remote": server.url("turn") }));
    assert_eq!(r["conflicts"].as_array().unwrap().len(), 0, "{r}");
    let link = d.workspace().join("turn/link");
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_file());
    assert_eq!(std::fs::read_to_string(&link).unwrap(), "now a file\n");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("turn/target.txt")).unwrap(),
        "the agent's edit\n",
        "the pull wrote through the old link"
    );
    // And a file turned into a directory upstream, where the agent left the file alone.
    std::fs::remove_file(w.join("link")).unwrap();
    std::fs::create_dir(w.join("link")).unwrap();
    std::fs::write(w.join("link/inner.txt"), "inner\n").unwrap();
    commit_and_push(w, &repo, "dir");
    let r = d.ok("/v1/git/pull", json!({ "remote": server.url("turn") }));
    assert_eq!(r["conflicts"].as_array().unwrap().len(), 0, "{r}");
    assert_eq!(
        std::fs::read_to_string(link.join("inner.txt")).unwrap(),
        "inner\n"
    );
}

#[test]
fn discard_revert_replaces_a_symlink_as_itself() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    pull(&d, &server.url("proj"));
    // The agent turns README.md into a link to another pulled file, and stages that.
    let readme = d.workspace().join("proj/README.md");
    std::fs::remove_file(&readme).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", &readme).unwrap();
    d.ok("/v1/git/status", json!({ "rescan": true }));
    let id = stage(&d, "a link");
    let r = d.ok("/v1/git/discard", json!({ "id": id, "revert": true }));
    assert!(
        r["reverted"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p == "/workspace/proj/README.md"),
        "{r}"
    );
    assert!(std::fs::symlink_metadata(&readme)
        .unwrap()
        .file_type()
        .is_file());
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), "# proj\n");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("proj/src/lib.rs")).unwrap(),
        LIB,
        "the revert wrote through the link"
    );
}

/// A file hard-linked into the zone from outside (made beside wardfs: no agent can make one) is
/// a file of the zone like any other to `stage`, as to `read` (the hard-link rule guards
/// changes only, docs/reliability.md); staging it never changes the outside file.
#[test]
fn stage_takes_a_file_hard_linked_from_outside_as_it_is_and_never_changes_it() {
    let repo = seeded();
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    pull(&d, &server.url("proj"));
    let outside = tempfile::tempdir().unwrap();
    let shared = outside.path().join("shared.txt");
    std::fs::write(&shared, "HARD-LINKED\n").unwrap();
    // A change the journal knows of, then swapped for a hard link to the outside file.
    d.write("/workspace/proj/linked.txt", "harmless\n");
    std::fs::remove_file(d.workspace().join("proj/linked.txt")).unwrap();
    std::fs::hard_link(&shared, d.workspace().join("proj/linked.txt")).unwrap();
    let id = stage(&d, "linked");
    let shown = state_of(&d, &id).to_string();
    assert!(
        shown.contains("/workspace/proj/linked.txt") && shown.contains("HARD-LINKED"),
        "{shown}"
    );
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "HARD-LINKED\n");
    assert_eq!(d.get("/v1/status")["staged_awaiting_review"], 1);
}

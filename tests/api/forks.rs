//! Forks through a real daemon's API and CLI (`/v1/forks`, `wardfs fork`, `forks`, `changes`,
//! `merge`): a fork and its parent never see each other's writes, `changes` lists exactly the
//! fork's, a merge applies them (and its `before` undoes it) or, on a conflict, applies
//! nothing; removal, restarts, forks of forks and of checkpoints, and hostile names.

use std::path::PathBuf;

use serde_json::{json, Value};
use wardfs::core::ErrorCode;

use crate::support::Daemon;

/// No automatic checkpoints: the checkpoints are the test's and the forks' own.
const QUIET: &str = "[checkpoints]\nauto_quiet_ms = 0\n";

fn daemon() -> Daemon {
    Daemon::start(QUIET)
}

/// Makes the fork `name` of `from` (the workspace when `None`); returns the answer.
fn fork(d: &Daemon, name: &str, from: Option<&str>) -> Value {
    let mut body = json!({ "name": name });
    if let Some(f) = from {
        body["from"] = json!(f);
    }
    d.ok("/v1/forks", body)
}

/// A file's content through the API, or the code of the error reading it.
fn read(d: &Daemon, path: &str) -> String {
    match d.call("/v1/fs/read", json!({ "path": path })) {
        Ok(v) => v["content"].as_str().unwrap().to_string(),
        Err((code, _)) => format!("<{}>", code.as_str()),
    }
}

/// GETs a route; the answer or the error's code.
fn get(d: &Daemon, route: &str) -> Result<Value, ErrorCode> {
    d.api()
        .get(route)
        .map_err(|(code, message)| code.unwrap_or_else(|| panic!("{route}: no answer: {message}")))
}

/// `DELETE /v1/forks/{name}` (the name as it goes in the URL); (status, answer).
fn remove(d: &Daemon, name_in_url: &str) -> (u16, Value) {
    let (status, body) = d.curl("DELETE", &format!("/v1/forks/{name_in_url}"), None);
    (status, serde_json::from_slice(&body).unwrap())
}

/// The fork's changes as (path, status), in the order given.
fn changes(d: &Daemon, name: &str) -> Vec<(String, String)> {
    let v = get(d, &format!("/v1/forks/{name}/changes")).unwrap();
    v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// The forks `GET /v1/forks` lists, by name.
fn listed(d: &Daemon) -> Vec<Value> {
    get(d, "/v1/forks").unwrap()["forks"]
        .as_array()
        .unwrap()
        .clone()
}

/// Merges the fork `name` (only `paths` when not empty).
fn merge(d: &Daemon, name: &str, paths: &[&str]) -> Value {
    d.ok(
        &format!("/v1/forks/{name}/merge"),
        json!({ "paths": paths }),
    )
}

/// The directories of the forks in the daemon's state (not the spares: `.spare-*`).
fn fork_dirs(d: &Daemon) -> Vec<PathBuf> {
    match std::fs::read_dir(d.dir.path().join("state/forks")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_fork_and_its_parent_never_see_each_others_writes_and_changes_lists_the_forks() {
    let d = daemon();
    d.write("/workspace/a.txt", "one\ntwo\n");
    d.write("/workspace/d/b.txt", "bee\n");
    d.write("/workspace/c.txt", "sea\n");
    d.write("/workspace/e.txt", "parent's\n");
    d.write("/workspace/node_modules/x.js", "shared\n");
    let made = fork(&d, "f", None);
    let f = &made["fork"];
    assert_eq!(
        (f["name"].as_str(), f["path"].as_str(), f["parent"].as_str()),
        (Some("f"), Some("/forks/f"), Some("workspace")),
        "{made}"
    );
    assert_eq!(
        (made["linked"].as_u64(), made["copied"].as_u64()),
        (Some(5), Some(0)),
        "{made}"
    );
    // Shared, not copied: the fork's file is the parent's, a second link to it (a third is
    // the spare the daemon fills after a fork, `forks.spare`, once it is there).
    let st = d.ok("/v1/fs/stat", json!({"path": "/forks/f/c.txt"}));
    assert!(matches!(st["nlink"].as_u64(), Some(2..=3)), "{st}");
    assert_eq!(read(&d, "/forks/f/node_modules/x.js"), "shared\n");

    // The fork writes, edits, deletes and adds; the parent sees none of it.
    d.write("/forks/f/a.txt", "one\nTWO\n");
    d.ok(
        "/v1/fs/edit",
        json!({"path": "/forks/f/d/b.txt", "old": "bee", "new": "BEE"}),
    );
    d.ok("/v1/fs/delete", json!({"path": "/forks/f/c.txt"}));
    d.write("/forks/f/new.txt", "new\n");
    d.write("/forks/f/node_modules/x.js", "the fork's\n");
    assert_eq!(d.read("a.txt").unwrap(), b"one\ntwo\n");
    assert_eq!(d.read("d/b.txt").unwrap(), b"bee\n");
    assert_eq!(d.read("c.txt").unwrap(), b"sea\n");
    assert!(d.read("new.txt").is_none());
    assert_eq!(d.read("node_modules/x.js").unwrap(), b"shared\n");
    // The parent changes a file after the fork; the fork keeps the fork point's.
    d.write("/workspace/e.txt", "parent's, later\n");
    d.write("/workspace/only-parent.txt", "p\n");
    assert_eq!(read(&d, "/forks/f/e.txt"), "parent's\n");
    assert_eq!(read(&d, "/forks/f/only-parent.txt"), "<NOT_FOUND>");
    assert_eq!(read(&d, "/forks/f/a.txt"), "one\nTWO\n");

    // Exactly the fork's changes: not the parent's, not the excluded node_modules.
    assert_eq!(
        changes(&d, "f"),
        pairs(&[
            ("a.txt", "modified"),
            ("c.txt", "deleted"),
            ("d/b.txt", "modified"),
            ("new.txt", "added"),
        ])
    );
    let plain = get(&d, "/v1/forks/f/changes").unwrap();
    assert_eq!(plain["patch"], "", "no patch unless asked");
    let patched = get(&d, "/v1/forks/f/changes?patch=true").unwrap();
    let patch = patched["patch"].as_str().unwrap();
    assert!(
        patch.contains("-two\n+TWO\n") && patch.contains("+new\n"),
        "{patch}"
    );
    assert_eq!(
        get(&d, "/v1/forks/f/changes?patch=maybe").unwrap_err(),
        ErrorCode::InvalidArgument
    );
    // The fork's writes are journaled as its own zone's.
    let log = get(&d, "/v1/log?zone=forks/f").unwrap();
    let paths: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&"a.txt") && paths.contains(&"new.txt"),
        "{log}"
    );
    let mine = listed(&d);
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["name"], "f");
    assert_eq!(mine[0]["base"], f["base"]);
}

#[test]
fn a_merge_brings_the_forks_changes_keeps_the_parents_and_before_undoes_it() {
    let d = daemon();
    d.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n7\n8\n");
    d.write("/workspace/gone.txt", "x\n");
    fork(&d, "m", None);
    d.write("/forks/m/a.txt", "ONE\n2\n3\n4\n5\n6\n7\n8\n");
    d.write("/forks/m/src/new.rs", "fn new() {}\n");
    d.ok("/v1/fs/delete", json!({"path": "/forks/m/gone.txt"}));
    // The parent's own changes since the fork point, in the same file and beside it.
    d.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n");
    d.write("/workspace/mine.txt", "parent's\n");

    let m = merge(&d, "m", &[]);
    assert_eq!(m["applied"], true, "{m}");
    assert_eq!(m["conflicts"], json!([]));
    assert_eq!(
        (m["fork"].as_str(), m["parent"].as_str()),
        (Some("m"), Some("workspace"))
    );
    let mut changed: Vec<&str> = m["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    changed.sort();
    assert_eq!(changed, ["a.txt", "gone.txt", "src/new.rs"]);
    assert_eq!(d.read("a.txt").unwrap(), b"ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n");
    assert_eq!(d.read("src/new.rs").unwrap(), b"fn new() {}\n");
    assert!(d.read("gone.txt").is_none());
    assert_eq!(d.read("mine.txt").unwrap(), b"parent's\n");
    // The merge's writes are journaled in the parent.
    let log = get(&d, "/v1/log?zone=workspace&limit=20").unwrap();
    assert!(
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"] == "src/new.rs"),
        "{log}"
    );
    // One restore undoes it, and keeps the parent's own changes.
    let before = m["before"]
        .as_i64()
        .expect("a merge that applied names `before`");
    d.ok("/v1/checkpoints/restore", json!({ "id": before }));
    assert_eq!(d.read("a.txt").unwrap(), b"1\n2\n3\n4\n5\n6\n7\nEIGHT\n");
    assert!(d.read("src/new.rs").is_none());
    assert_eq!(d.read("gone.txt").unwrap(), b"x\n");
    assert_eq!(d.read("mine.txt").unwrap(), b"parent's\n");
    // The fork is as it was.
    assert_eq!(read(&d, "/forks/m/a.txt"), "ONE\n2\n3\n4\n5\n6\n7\n8\n");
}

#[test]
fn a_conflict_applies_nothing_and_a_merge_of_some_paths_applies_only_them() {
    let d = daemon();
    d.write("/workspace/a.txt", "base\n");
    d.write("/workspace/b.txt", "base\n");
    fork(&d, "c", None);
    d.write("/forks/c/a.txt", "the fork's\n");
    d.write("/forks/c/b.txt", "the fork's\n");
    d.write("/forks/c/c.txt", "new in the fork\n");
    d.write("/forks/c/dir/d.txt", "new in the fork\n");
    d.write("/workspace/a.txt", "the parent's\n");

    let m = merge(&d, "c", &[]);
    assert_eq!(m["applied"], false, "{m}");
    assert_eq!(
        m["conflicts"],
        json!([{"path": "a.txt", "kind": "content"}])
    );
    assert_eq!(
        (m["before"].clone(), m["changed"].clone()),
        (Value::Null, json!([]))
    );
    // All or nothing: the paths that merge cleanly were not applied either.
    assert_eq!(d.read("a.txt").unwrap(), b"the parent's\n");
    assert_eq!(d.read("b.txt").unwrap(), b"base\n");
    assert!(d.read("c.txt").is_none());

    // Only some paths: relative to the fork, in the fork, in the parent; a directory brings
    // what is beneath it.
    let m = merge(&d, "c", &["c.txt", "/forks/c/dir"]);
    assert_eq!(m["applied"], true, "{m}");
    assert_eq!(d.read("c.txt").unwrap(), b"new in the fork\n");
    assert_eq!(d.read("dir/d.txt").unwrap(), b"new in the fork\n");
    assert_eq!(d.read("b.txt").unwrap(), b"base\n");
    let m = merge(&d, "c", &["/workspace/b.txt"]);
    assert_eq!(m["changed"], json!(["b.txt"]), "{m}");
    assert_eq!(d.read("b.txt").unwrap(), b"the fork's\n");
    assert_eq!(d.read("a.txt").unwrap(), b"the parent's\n");
    // A path the fork did not change (here in neither tree) has nothing to merge.
    let m = merge(&d, "c", &["never/was\u{11}.txt", "dir/none"]);
    assert_eq!(
        (
            m["applied"].clone(),
            m["changed"].clone(),
            m["before"].clone()
        ),
        (json!(true), json!([]), Value::Null),
        "{m}"
    );
    // A path in neither the fork nor its parent, or that climbs out, is refused.
    let (code, msg) = d.err("/v1/forks/c/merge", json!({"paths": ["/cache/x"]}));
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    let (code, _) = d.err("/v1/forks/c/merge", json!({"paths": ["../../x"]}));
    assert_eq!(code, ErrorCode::OutsideZone);
    let (code, _) = d.err("/v1/forks/nope/merge", json!({}));
    assert_eq!(code, ErrorCode::NotFound);
}

#[test]
fn a_removed_fork_is_gone_its_name_free_and_its_state_kept_in_a_checkpoint() {
    let d = daemon();
    d.write("/workspace/a.txt", "v1\n");
    fork(&d, "r", None);
    d.write("/forks/r/a.txt", "the fork's\n");
    assert_eq!(fork_dirs(&d).len(), 1);
    let (status, gone) = remove(&d, "r");
    assert_eq!(status, 200, "{gone}");
    assert_eq!(gone["name"], "r");
    let kept = gone["checkpoint"].as_i64().unwrap();
    assert_eq!(read(&d, "/forks/r/a.txt"), "<NOT_FOUND>");
    assert_eq!(
        get(&d, "/v1/forks/r/changes").unwrap_err(),
        ErrorCode::NotFound
    );
    assert_eq!(d.err("/v1/forks/r/merge", json!({})).0, ErrorCode::NotFound);
    let (status, again) = remove(&d, "r");
    assert_eq!((status, again["code"].as_str()), (404, Some("NOT_FOUND")));
    assert!(listed(&d).is_empty());
    assert!(fork_dirs(&d).is_empty(), "its directory is deleted");
    // The name is free: a new fork of it starts from the workspace's present.
    d.write("/workspace/a.txt", "v2\n");
    fork(&d, "r", None);
    assert_eq!(read(&d, "/forks/r/a.txt"), "v2\n");
    assert!(changes(&d, "r").is_empty());
    // The removed fork's last state comes back from its checkpoint.
    fork(&d, "back", Some(&kept.to_string()));
    assert_eq!(read(&d, "/forks/back/a.txt"), "the fork's\n");
}

#[test]
fn forks_survive_a_restart() {
    let mut d = daemon();
    d.write("/workspace/a.txt", "base\n");
    fork(&d, "kept", None);
    d.write("/forks/kept/a.txt", "the fork's\n");
    d.write("/forks/kept/b.txt", "new\n");
    d.restart();
    assert_eq!(read(&d, "/forks/kept/a.txt"), "the fork's\n");
    assert_eq!(read(&d, "/workspace/a.txt"), "base\n");
    assert_eq!(listed(&d)[0]["name"], "kept");
    assert_eq!(
        changes(&d, "kept"),
        pairs(&[("a.txt", "modified"), ("b.txt", "added")])
    );
    // Still a zone of its own after the restart.
    d.write("/forks/kept/c.txt", "after\n");
    assert!(d.read("c.txt").is_none());
    let m = merge(&d, "kept", &[]);
    assert_eq!(m["applied"], true, "{m}");
    assert_eq!(d.read("c.txt").unwrap(), b"after\n");
    assert_eq!(d.read("a.txt").unwrap(), b"the fork's\n");
}

#[test]
fn hostile_fork_names_are_refused_and_nothing_is_made() {
    let d = daemon();
    d.write("/workspace/a.txt", "a\n");
    let long = "x".repeat(65);
    for name in [
        "../x",
        "a/b",
        "a\u{1b}]0;owned\u{7}",
        "a\nb",
        &long,
        ".git",
        "-rf",
        "",
        ".",
        "..",
    ] {
        let (code, msg) = d.err("/v1/forks", json!({ "name": name }));
        assert_eq!(code, ErrorCode::InvalidArgument, "{name:?}: {msg}");
        assert!(
            !msg.chars().any(|c| c.is_control()),
            "the message quotes a control character raw: {msg:?}"
        );
    }
    let (code, msg) = d.err("/v1/forks", json!({"name": "ok", "from": "../../etc"}));
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    let (code, _) = d.err("/v1/forks", json!({"name": "ok", "from": "nope"}));
    assert_eq!(code, ErrorCode::InvalidArgument);
    let (code, _) = d.err("/v1/forks", json!({"name": "ok", "from": "999999"}));
    assert_eq!(code, ErrorCode::NotFound);
    assert!(listed(&d).is_empty());
    assert!(fork_dirs(&d).is_empty(), "{:?}", fork_dirs(&d));
    // In the URL: an encoded slash, a control character, `..`.
    for name in ["..%2Fx", "a%1Bb", "..", "%2E%2E"] {
        let (status, v) = remove(&d, name);
        assert!(
            status == 400 || status == 404,
            "DELETE {name}: {status} {v}"
        );
    }
    // 64 characters is the longest name, and a fork of the same name twice is EXISTS.
    let longest = "y".repeat(64);
    fork(&d, &longest, None);
    let (code, _) = d.err("/v1/forks", json!({ "name": longest }));
    assert_eq!(code, ErrorCode::Exists);
    assert_eq!(read(&d, &format!("/forks/{longest}/a.txt")), "a\n");
}

#[test]
fn a_fork_of_a_fork_merges_into_that_fork_and_a_fork_of_a_checkpoint_starts_there() {
    let d = daemon();
    d.write("/workspace/a.txt", "v1\n");
    let cp = d.ok("/v1/checkpoints", json!({"message": "v1"}))["id"]
        .as_i64()
        .unwrap();
    d.write("/workspace/a.txt", "v2\n");
    fork(&d, "outer", None);
    d.write("/forks/outer/outer.txt", "outer\n");
    let inner = fork(&d, "inner", Some("outer"));
    assert_eq!(inner["fork"]["parent"], "forks/outer", "{inner}");
    assert_eq!(read(&d, "/forks/inner/outer.txt"), "outer\n");
    d.write("/forks/inner/inner.txt", "inner\n");
    assert_eq!(changes(&d, "inner"), pairs(&[("inner.txt", "added")]));
    let m = merge(&d, "inner", &[]);
    assert_eq!(
        (m["applied"].as_bool(), m["parent"].as_str()),
        (Some(true), Some("forks/outer")),
        "{m}"
    );
    assert_eq!(read(&d, "/forks/outer/inner.txt"), "inner\n");
    assert!(
        d.read("inner.txt").is_none(),
        "the workspace is not the inner fork's parent"
    );
    // From `forks/NAME` too.
    fork(&d, "inner2", Some("forks/outer"));
    assert_eq!(read(&d, "/forks/inner2/inner.txt"), "inner\n");
    // Its parent removed and the name used again: the new fork is not its parent.
    assert_eq!(remove(&d, "outer").0, 200);
    fork(&d, "outer", None);
    d.write("/forks/inner/late.txt", "late\n");
    let (code, msg) = d.err("/v1/forks/inner/merge", json!({}));
    assert_eq!(code, ErrorCode::ZoneUnavailable, "{msg}");
    assert_eq!(read(&d, "/forks/outer/late.txt"), "<NOT_FOUND>");

    let old = fork(&d, "old", Some(&cp.to_string()));
    assert_eq!(old["fork"]["parent"], format!("checkpoint {cp}"));
    assert_eq!(read(&d, "/forks/old/a.txt"), "v1\n");
    d.write("/forks/old/a.txt", "v1, changed\n");
    assert_eq!(changes(&d, "old"), pairs(&[("a.txt", "modified")]));
    // A fork of a checkpoint has no zone to merge into.
    let (code, _) = d.err("/v1/forks/old/merge", json!({}));
    assert_eq!(code, ErrorCode::ZoneUnavailable);
    assert_eq!(d.read("a.txt").unwrap(), b"v2\n");
}

// -- the CLI -------------------------------------------------------------------------------

/// Runs the CLI; (exit code, stdout, stderr).
fn cli(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let out = d.cli(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn the_cli_makes_lists_shows_merges_and_removes_forks_for_people() {
    let d = daemon();
    d.write("/workspace/a.txt", "one\ntwo\n");
    d.write("/workspace/b.txt", "bee\n");
    let (rc, out, err) = cli(&d, &["fork", "try"]);
    assert_eq!(rc, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("made fork try of workspace in ")
            && lines[0].ends_with(" ms: 2 files shared with it, 0 files copied"),
        "{out}"
    );
    assert_eq!(lines[1], "  path:       /forks/try");
    let base = listed(&d)[0]["base"].as_i64().unwrap();
    assert_eq!(lines[2], format!("  fork point: checkpoint {base}"));
    // Taken again: EXISTS, exit 4; a bad name: exit 2.
    assert_eq!(cli(&d, &["fork", "try"]).0, 4);
    let (rc, _, err) = cli(&d, &["fork", "bad\u{1b}[31mname"]);
    assert_eq!(rc, 2);
    assert!(
        err.contains("bad\\033[31mname") && !err.contains('\u{1b}'),
        "{err:?}"
    );

    // The file operations take the fork's virtual paths.
    d.cli_ok(&["write", "/forks/try/a.txt", "one\nTWO\n"]);
    d.cli_ok(&["write", "/forks/try/evil\u{1b}]0;x\u{7}.txt", "x\n"]);
    let (rc, out, _) = cli(&d, &["forks"]);
    assert_eq!(rc, 0);
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "PARENT", "BASE", "CHANGED", "OVERLAPS", "CREATED", "WRITER"]
    );
    assert_eq!(
        rows[1][..5],
        ["try", "workspace", &base.to_string(), "2", "0"],
        "{out}"
    );
    assert_eq!(rows[1][6], "api", "{out}");
    assert_eq!(rows.len(), 2, "no overlaps listed: {out}");

    let (rc, out, _) = cli(&d, &["changes", "try"]);
    assert_eq!(rc, 0);
    assert_eq!(
        out,
        "modified      +1     -1     a.txt\nadded         +1     -0     \"evil\\033]0;x\\a.txt\"\n"
    );
    let (_, out, _) = cli(&d, &["changes", "try", "--patch"]);
    assert!(
        out.contains("\n-two\n+TWO\n") && !out.contains('\u{1b}'),
        "{out:?}"
    );
    let v: Value = serde_json::from_str(&d.cli_ok(&["--json", "changes", "try"])).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 2);
    assert_eq!(cli(&d, &["changes", "nope"]).0, 3);

    // The parent changes what the fork changed: an overlap, seen before any merge.
    let (_, out, _) = cli(&d, &["changes", "try", "--overlaps"]);
    assert_eq!(
        out,
        "no path fork try changed was changed elsewhere since its fork point\n"
    );
    d.write("/workspace/a.txt", "one\nthe parent's\n");
    let (rc, out, _) = cli(&d, &["changes", "try", "--overlaps"]);
    assert_eq!(rc, 0);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "1 path of fork try also changed elsewhere since its fork point:"
    );
    assert!(
        lines[1].starts_with("  /forks/try/a.txt  (") && lines[1].contains("workspace: api"),
        "{out}"
    );
    let (_, out, _) = cli(&d, &["forks"]);
    assert!(
        out.contains("\n1 path of fork try also changed elsewhere"),
        "{out}"
    );
    // A conflict: exit 5, each conflict listed, nothing applied.
    let (rc, out, err) = cli(&d, &["merge", "try"]);
    assert_eq!(rc, 5, "{out}{err}");
    assert_eq!(
        out,
        "merge of fork try into /workspace: 1 conflict, nothing applied:\n  content        /workspace/a.txt\n"
    );
    assert!(
        err.starts_with("wardfs: nothing merged: 1 path of fork try and /workspace conflict"),
        "{err}"
    );
    let out = d.cli(&["--json", "merge", "try"]);
    assert_eq!(out.status.code(), Some(5));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["applied"], false);
    assert!(d.read("evil\u{1b}]0;x\u{7}.txt").is_none());

    // Only the path that does not conflict, given as the fork's virtual path.
    let (rc, out, err) = cli(&d, &["merge", "try", "/forks/try/evil\u{1b}]0;x\u{7}.txt"]);
    assert_eq!(rc, 0, "{err}");
    let head = "merged fork try into /workspace: 1 path changed (undo: wardfs restore ";
    let (first, rest) = out.split_once('\n').unwrap();
    let before = first
        .strip_prefix(head)
        .and_then(|t| t.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(rest, "  \"/workspace/evil\\033]0;x\\a.txt\"\n");
    assert_eq!(d.read("evil\u{1b}]0;x\u{7}.txt").unwrap(), b"x\n");
    assert_eq!(d.read("a.txt").unwrap(), b"one\nthe parent's\n");
    // The undo it names undoes it.
    d.cli_ok(&["restore", before]);
    assert!(d.read("evil\u{1b}]0;x\u{7}.txt").is_none());
    assert_eq!(d.read("a.txt").unwrap(), b"one\nthe parent's\n");

    let (rc, out, _) = cli(&d, &["fork", "rm", "try"]);
    assert_eq!(rc, 0);
    assert!(
        out.starts_with("removed fork try; its last state is checkpoint "),
        "{out}"
    );
    assert_eq!(cli(&d, &["fork", "rm", "try"]).0, 3);
    assert_eq!(
        cli(&d, &["forks"]).1,
        "no forks: `wardfs fork NAME` makes one\n"
    );
    // --help teaches: what a fork is, and examples.
    let help = d.cli_ok(&["fork", "--help"]);
    assert!(
        help.contains("copy-on-write") && help.contains("wardfs fork try-b --from try-a"),
        "{help}"
    );
}

// -- update, and merges settled by --ours / --theirs ----------------------------------------

/// Updates the fork `name` from its parent.
fn update(d: &Daemon, name: &str) -> Value {
    d.ok(&format!("/v1/forks/{name}/update"), json!({}))
}

/// The strings of a JSON array.
fn strings(v: &Value) -> Vec<String> {
    let mut out: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect();
    out.sort();
    out
}

#[test]
fn an_update_brings_the_parents_changes_into_the_fork_and_keeps_both_sides_of_a_conflict() {
    let d = daemon();
    d.write("/workspace/parent.txt", "base\n");
    d.write("/workspace/fork.txt", "base\n");
    d.write("/workspace/both.txt", "base\n");
    fork(&d, "u", None);
    // The parent changes one file, the fork another; both change a third.
    d.write("/workspace/parent.txt", "the parent's\n");
    d.write("/forks/u/fork.txt", "the fork's\n");
    d.write("/workspace/both.txt", "the parent's\n");
    d.write("/forks/u/both.txt", "the fork's\n");

    let u = update(&d, "u");
    assert_eq!(
        (u["fork"].as_str(), u["parent"].as_str()),
        (Some("u"), Some("workspace")),
        "{u}"
    );
    assert_eq!(
        u["conflicts"],
        json!([{"path": "both.txt", "kind": "content", "parent_copy": "both.txt.parent"}])
    );
    assert_eq!(strings(&u["changed"]), ["both.txt.parent", "parent.txt"]);
    assert_eq!(u["left_alone"], json!([]));
    // Both ends in the fork; both sides of the conflict are kept.
    assert_eq!(read(&d, "/forks/u/parent.txt"), "the parent's\n");
    assert_eq!(read(&d, "/forks/u/fork.txt"), "the fork's\n");
    assert_eq!(read(&d, "/forks/u/both.txt"), "the fork's\n");
    assert_eq!(read(&d, "/forks/u/both.txt.parent"), "the parent's\n");
    // The parent is not touched.
    assert_eq!(d.read("fork.txt").unwrap(), b"base\n");
    assert_eq!(d.read("both.txt").unwrap(), b"the parent's\n");
    assert!(d.read("both.txt.parent").is_none());
    // The fork point moved to the parent as brought in: `changes` is the fork's own.
    assert_eq!(listed(&d)[0]["base"], u["base"]);
    assert_eq!(
        changes(&d, "u"),
        pairs(&[
            ("both.txt", "modified"),
            ("both.txt.parent", "added"),
            ("fork.txt", "modified"),
        ])
    );
    // The update's writes are journaled in the fork.
    let log = get(&d, "/v1/log?zone=forks/u&limit=20").unwrap();
    assert!(
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["path"] == "parent.txt"),
        "{log}"
    );
    // Settled in the fork, a merge brings exactly the fork's own.
    d.write("/forks/u/both.txt", "joined\n");
    d.ok("/v1/fs/delete", json!({"path": "/forks/u/both.txt.parent"}));
    let m = merge(&d, "u", &[]);
    assert_eq!(m["applied"], true, "{m}");
    assert_eq!(strings(&m["changed"]), ["both.txt", "fork.txt"]);
    assert_eq!(d.read("both.txt").unwrap(), b"joined\n");
    // Nothing new in the parent: nothing to do.
    let again = update(&d, "u");
    assert_eq!(
        (again["before"].clone(), again["changed"].clone()),
        (Value::Null, json!([]))
    );
}

#[test]
fn before_undoes_an_update_and_refusals_name_the_rule() {
    let d = daemon();
    d.write("/workspace/a.txt", "base\n");
    fork(&d, "v", None);
    d.write("/workspace/a.txt", "the parent's\n");
    let u = update(&d, "v");
    assert_eq!(read(&d, "/forks/v/a.txt"), "the parent's\n");
    let before = u["before"]
        .as_i64()
        .expect("an update that wrote names `before`");
    d.ok("/v1/checkpoints/restore", json!({ "id": before }));
    assert_eq!(read(&d, "/forks/v/a.txt"), "base\n");
    assert_eq!(d.read("a.txt").unwrap(), b"the parent's\n");

    // No such fork; a fork of a checkpoint has no parent zone; hostile names; a body with
    // something it does not take.
    let (code, _) = d.err("/v1/forks/nope/update", json!({}));
    assert_eq!(code, ErrorCode::NotFound);
    fork(&d, "old", Some(&u["onto"].to_string()));
    let (code, msg) = d.err("/v1/forks/old/update", json!({}));
    assert_eq!(code, ErrorCode::ZoneUnavailable, "{msg}");
    assert!(msg.contains("update from"), "{msg}");
    for bad in ["..%2Fx", "%1B%5B2J", "-rf", ".git"] {
        let (status, body) = d.curl("POST", &format!("/v1/forks/{bad}/update"), Some(b"{}"));
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status, v["code"].as_str()),
            (400, Some("INVALID_ARGUMENT")),
            "{bad}: {v}"
        );
        assert!(!v.to_string().contains('\u{1b}'), "{v}");
    }
    let (code, _) = d.err("/v1/forks/v/update", json!({"ours": ["a.txt"]}));
    assert_eq!(code, ErrorCode::InvalidArgument);
}

#[test]
fn ours_and_theirs_settle_a_merges_conflicts_and_hostile_paths_are_refused() {
    let d = daemon();
    for p in ["a.txt", "b.txt", "c.txt"] {
        d.write(&format!("/workspace/{p}"), "base\n");
    }
    fork(&d, "s", None);
    for p in ["a.txt", "b.txt", "c.txt"] {
        d.write(&format!("/forks/s/{p}"), "the fork's\n");
    }
    d.write("/workspace/a.txt", "the parent's\n");
    d.write("/workspace/b.txt", "the parent's\n");
    let route = "/v1/forks/s/merge";
    // One side given, the other conflict left: all or nothing still.
    let m = d.ok(route, json!({"ours": ["a.txt"]}));
    assert_eq!(m["applied"], false, "{m}");
    assert_eq!(
        m["conflicts"],
        json!([{"path": "b.txt", "kind": "content"}])
    );
    assert_eq!(d.read("c.txt").unwrap(), b"base\n");
    // Paths that are not conflicts, climb out, hold a NUL, name another zone or the whole
    // fork, or are given both sides: refused, nothing applied.
    for (body, want) in [
        (
            json!({"ours": ["a.txt", "c.txt"], "theirs": ["b.txt"]}),
            ErrorCode::InvalidArgument,
        ),
        (
            json!({"ours": ["a.txt"], "theirs": ["../../etc/passwd"]}),
            ErrorCode::OutsideZone,
        ),
        (
            json!({"ours": ["a.txt"], "theirs": ["/workspace/../../b.txt"]}),
            ErrorCode::OutsideZone,
        ),
        (
            json!({"ours": ["a.txt"], "theirs": ["b.txt\u{0}"]}),
            ErrorCode::InvalidPath,
        ),
        (
            json!({"ours": ["a.txt"], "theirs": ["/cache/b.txt"]}),
            ErrorCode::InvalidArgument,
        ),
        (
            json!({"ours": ["a.txt"], "theirs": ["/forks/s"]}),
            ErrorCode::InvalidArgument,
        ),
        (
            json!({"ours": ["a.txt", "b.txt"], "theirs": ["b.txt"]}),
            ErrorCode::InvalidArgument,
        ),
        (
            json!({"ours": ["a.txt"], "theirs": ["x\u{1b}[2J"]}),
            ErrorCode::InvalidArgument,
        ),
    ] {
        let (code, msg) = d.err(route, body.clone());
        assert_eq!(code, want, "{body}: {msg}");
        assert!(!msg.contains('\u{1b}'), "{msg:?}");
    }
    assert_eq!(d.read("c.txt").unwrap(), b"base\n", "nothing applied");
    // Written as any merge path: relative, in the fork, in the parent; folded.
    let m = d.ok(
        route,
        json!({"ours": ["/workspace/./a.txt"], "theirs": ["/forks/s//b.txt"]}),
    );
    assert_eq!(m["applied"], true, "{m}");
    assert_eq!(
        m["settled"],
        json!([{"path": "a.txt", "kind": "content"}, {"path": "b.txt", "kind": "content"}])
    );
    assert_eq!(d.read("a.txt").unwrap(), b"the parent's\n");
    assert_eq!(d.read("b.txt").unwrap(), b"the fork's\n");
    assert_eq!(d.read("c.txt").unwrap(), b"the fork's\n");
}

#[test]
fn the_cli_updates_a_fork_and_settles_a_merge_with_ours_and_theirs() {
    let d = daemon();
    for p in ["a.txt", "b.txt", "c.txt"] {
        d.write(&format!("/workspace/{p}"), "base\n");
    }
    fork(&d, "t", None);
    d.write("/workspace/a.txt", "the parent's\n");
    d.write("/workspace/b\u{1b}[31m.txt", "the parent's\n");
    d.write("/forks/t/a.txt", "the fork's\n");
    let (rc, out, err) = cli(&d, &["update", "t"]);
    assert_eq!(rc, 5, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0]
            .starts_with("updated fork t from /workspace: 2 paths changed (undo: wardfs restore "),
        "{out}"
    );
    assert!(!out.contains('\u{1b}'), "{out:?}");
    assert!(out.contains("  \"/forks/t/b\\033[31m.txt\"\n"), "{out}");
    assert!(
        out.contains("  conflict content        /forks/t/a.txt (the parent's version at /forks/t/a.txt.parent)\n"),
        "{out}"
    );
    assert!(
        err.starts_with("wardfs: 1 path of fork t and /workspace conflict"),
        "{err}"
    );
    let (rc, out, _) = cli(&d, &["update", "t"]);
    assert_eq!(rc, 0);
    assert!(
        out.starts_with("fork t is up to date with /workspace"),
        "{out}"
    );
    let out = d.cli(&["--json", "update", "t"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["changed"], json!([]), "{v}");

    // A merge that conflicts, settled from the command line. (a.txt is no conflict now: the
    // update brought the parent's version, the fork's stays, and a merge takes the fork's.)
    for p in ["b.txt", "c.txt"] {
        d.write(&format!("/workspace/{p}"), "the parent's\n");
        d.write(&format!("/forks/t/{p}"), "the fork's\n");
    }
    let (rc, out, _) = cli(&d, &["merge", "t"]);
    assert_eq!(rc, 5, "{out}");
    let (rc, _, err) = cli(&d, &["merge", "t", "--ours", "b.txt", "--theirs", "a.txt"]);
    assert_eq!(rc, 2, "{err}");
    assert!(
        err.contains("a.txt") && err.contains("does not conflict"),
        "{err}"
    );
    let (rc, out, err) = cli(
        &d,
        &[
            "merge",
            "t",
            "--ours",
            "b.txt",
            "--theirs",
            "/forks/t/c.txt",
        ],
    );
    assert_eq!(rc, 0, "{out}{err}");
    assert!(
        out.contains("  settled as asked (content): /workspace/b.txt\n"),
        "{out}"
    );
    assert_eq!(d.read("a.txt").unwrap(), b"the fork's\n");
    assert_eq!(d.read("b.txt").unwrap(), b"the parent's\n");
    assert_eq!(d.read("c.txt").unwrap(), b"the fork's\n");
    let help = d.cli_ok(&["update", "--help"]);
    assert!(
        help.contains("PATH.parent") && help.contains("wardfs update try-a"),
        "{help}"
    );
    let help = d.cli_ok(&["merge", "--help"]);
    assert!(
        help.contains("--ours <PATH>") && help.contains("--theirs <PATH>"),
        "{help}"
    );
}

/// GETs a route that must fail; the error's code and message.
fn get_err(d: &Daemon, route: &str) -> (ErrorCode, String) {
    match d.api().get(route) {
        Ok(v) => panic!("{route} succeeded: {v}"),
        Err((code, message)) => (
            code.unwrap_or_else(|| panic!("{route}: no answer: {message}")),
            message,
        ),
    }
}

#[test]
fn changes_lists_renames_and_compares_with_another_fork_or_a_checkpoint() {
    let d = daemon();
    d.write("/workspace/a.txt", "moved\n");
    d.write("/workspace/x.txt", "base\n");
    fork(&d, "a", None);
    fork(&d, "b", None);
    d.ok(
        "/v1/fs/move",
        json!({"from": "/forks/a/a.txt", "to": "/forks/a/d/b.txt"}),
    );
    d.write("/forks/a/x.txt", "base\nfrom a\n");
    d.write("/forks/b/x.txt", "b's\n");
    d.write("/forks/b/y.txt", "only b\n");

    // A rename is one row naming the path it had; a row without a rename or a mode change has
    // the fields it always had, no more.
    let plain = get(&d, "/v1/forks/a/changes").unwrap();
    assert_eq!(
        plain["files"],
        json!([
            {"path": "d/b.txt", "status": "renamed", "old_path": "a.txt",
             "additions": 0, "deletions": 0},
            {"path": "x.txt", "status": "modified", "additions": 1, "deletions": 0},
        ])
    );
    let patch = get(&d, "/v1/forks/a/changes?patch=true").unwrap()["patch"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        patch.contains("rename from a.txt\nrename to d/b.txt\n") && patch.contains("+from a\n"),
        "{patch}"
    );

    // Against fork b as it is now: b's own changes show as the difference.
    let since_b = get(&d, "/v1/forks/a/changes?since=b").unwrap();
    let expected = json!([
        {"path": "d/b.txt", "status": "renamed", "old_path": "a.txt",
         "additions": 0, "deletions": 0},
        {"path": "x.txt", "status": "modified", "additions": 2, "deletions": 1},
        {"path": "y.txt", "status": "deleted", "additions": 0, "deletions": 1},
    ]);
    assert_eq!(since_b["files"], expected);
    let from = since_b["from"].as_i64().unwrap();
    assert_ne!(from, plain["from"].as_i64().unwrap());
    let cps = get(&d, "/v1/checkpoints?zone=forks/b").unwrap();
    assert!(
        cps["checkpoints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == from && c["zone"] == "forks/b"),
        "{cps}"
    );
    let spelled = get(&d, "/v1/forks/a/changes?since=%2Fforks%2Fb").unwrap();
    assert_eq!(spelled["files"], expected);
    // Since that checkpoint: b as it was then, whatever b does after.
    d.write("/forks/b/y.txt", "changed again\n");
    let by_id = get(&d, &format!("/v1/forks/a/changes?since={from}")).unwrap();
    assert_eq!((&by_id["files"], &by_id["from"]), (&expected, &json!(from)));
    // The workspace did not change since the fork point: the same as no `since`.
    let ws = get(&d, "/v1/forks/a/changes?since=workspace").unwrap();
    assert_eq!(ws["files"], plain["files"]);

    // Hostile `since`: refused, named, and never quoted raw.
    for bad in [
        "..%2F..%2Fetc",
        "a%1B%5B2J",
        "",
        "nope",
        "forks%2F..%2Fb",
        "a%0Ab",
    ] {
        let (code, msg) = get_err(&d, &format!("/v1/forks/a/changes?since={bad}"));
        assert_eq!(code, ErrorCode::InvalidArgument, "{bad}: {msg}");
        assert!(msg.contains("since"), "{bad}: {msg}");
        assert!(!msg.chars().any(|c| c.is_control()), "{bad}: {msg:?}");
    }
    for missing in ["999999999", "-5", "9223372036854775807"] {
        let (code, msg) = get_err(&d, &format!("/v1/forks/a/changes?since={missing}"));
        assert_eq!(code, ErrorCode::NotFound, "{missing}: {msg}");
    }
    let (code, _) = get_err(&d, "/v1/forks/a/changes?sinse=b");
    assert_eq!(code, ErrorCode::InvalidArgument);
    let (code, _) = get_err(&d, "/v1/forks/..%2Fa/changes?since=b");
    assert_eq!(code, ErrorCode::InvalidArgument);

    // The checkpoint diff answers as it did: a rename is a delete and an add there.
    let diff = d.ok(
        "/v1/checkpoints/diff",
        json!({ "from": plain["from"], "to": null }),
    );
    let rows: Vec<(String, Vec<String>)> = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let keys = f.as_object().unwrap().keys().cloned().collect();
            (format!("{} {}", f["status"], f["path"]), keys)
        })
        .collect();
    let keys: Vec<String> = ["additions", "deletions", "path", "status"]
        .map(String::from)
        .to_vec();
    assert_eq!(
        rows,
        [
            ("\"deleted\" \"a.txt\"".to_string(), keys.clone()),
            ("\"added\" \"d/b.txt\"".to_string(), keys.clone()),
            ("\"modified\" \"x.txt\"".to_string(), keys),
        ]
    );

    // The CLI shows the rename and names what it compared with.
    let (rc, out, err) = cli(&d, &["changes", "a", "--since", "b"]);
    assert_eq!(rc, 0, "{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("renamed") && l.ends_with(" a.txt -> d/b.txt")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("deleted") && l.ends_with(" y.txt")),
        "{out}"
    );
    let (rc, out, err) = cli(&d, &["changes", "a", "--since", "a\u{1b}[2J"]);
    assert_eq!(rc, 2, "{out}{err}");
    assert!(!err.contains('\u{1b}') && err.contains("since"), "{err:?}");
}

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

/// The directories of the forks in the daemon's state.
fn fork_dirs(d: &Daemon) -> Vec<PathBuf> {
    match std::fs::read_dir(d.dir.path().join("state/forks")) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
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
    // Shared, not copied: the fork's file is the parent's, a second link to it.
    let st = d.ok("/v1/fs/stat", json!({"path": "/forks/f/c.txt"}));
    assert_eq!(st["nlink"], 2, "{st}");
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

//! The path-escape corpus: every way out of a zone, through every entry point, gets a clear error
//! and touches nothing outside the zone.

use std::os::unix::fs::symlink;

use serde_json::{json, Value};

use crate::support::api::code;
use crate::support::files::snapshot;
use crate::support::Daemon;

/// A daemon whose workspace is surrounded by traps pointing at `outside/`.
fn trapped() -> (Daemon, std::path::PathBuf) {
    trapped_with("")
}

/// [`trapped`], with `extra` config.
fn trapped_with(extra: &str) -> (Daemon, std::path::PathBuf) {
    let d = Daemon::start(extra);
    let outside = d.dir.path().join("outside");
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET\n").unwrap();
    std::fs::write(outside.join("hard.txt"), "HARD-SECRET\n").unwrap();
    arm(&d, &outside);
    (d, outside)
}

/// (Re)creates the traps; operations on a trap itself (deleting a symlink) may remove them.
fn arm(d: &Daemon, outside: &std::path::Path) {
    arm_in(&d.zone_dir("workspace"), outside);
}

/// [`arm`] in the zone whose directory is `ws` (two levels below the daemon's temp dir).
fn arm_in(ws: &std::path::Path, outside: &std::path::Path) {
    for name in [
        "abs_link",
        "rel_link",
        "chain1",
        "chain2",
        "dir_link",
        "proc_link",
        "cwd_link",
        "hard_link",
        "inner_link",
        "stolen",
    ] {
        let _ = std::fs::remove_file(ws.join(name));
    }
    // ws = <tmp>/root/workspace, so ../../outside leaves the zone.
    symlink(outside.join("secret.txt"), ws.join("abs_link")).unwrap();
    symlink("../../outside/secret.txt", ws.join("rel_link")).unwrap();
    symlink("chain2", ws.join("chain1")).unwrap();
    symlink("../../outside", ws.join("chain2")).unwrap();
    symlink(outside, ws.join("dir_link")).unwrap();
    symlink("/proc/self/root", ws.join("proc_link")).unwrap();
    symlink("/proc/self/cwd", ws.join("cwd_link")).unwrap();
    std::fs::hard_link(outside.join("hard.txt"), ws.join("hard_link")).unwrap();
    std::fs::create_dir_all(ws.join("inner")).unwrap();
    std::fs::write(ws.join("inner/ok.txt"), "fine\n").unwrap();
    symlink("inner/ok.txt", ws.join("inner_link")).unwrap();
}

const OUT_CODES: &[&str] = &["OUTSIDE_ZONE", "INVALID_PATH"];

/// The escapes of zone `/workspace`, each in the zone `zone` (`/forks/f`) instead.
fn escape_paths_in(zone: &str) -> Vec<String> {
    escape_paths()
        .into_iter()
        .map(|p| {
            p.replace("/workspace", zone)
                .replacen("workspace/", &format!("{}/", &zone[1..]), 1)
        })
        .collect()
}

fn escape_paths() -> Vec<String> {
    let mut v: Vec<String> = [
        "/workspace/..",
        "/workspace/../outside/secret.txt",
        "/workspace/../../outside/secret.txt",
        "/workspace/a/../../outside/secret.txt",
        "/workspace/./../workspace/../..",
        "workspace/../../../../etc/passwd",
        "/../../etc/passwd",
        "//workspace//..//..//etc/passwd",
        "/workspace/abs_link",
        "/workspace/rel_link",
        "/workspace/chain1/secret.txt",
        "/workspace/dir_link/secret.txt",
        "/workspace/dir_link/sub",
        "/workspace/proc_link/etc/passwd",
        "/workspace/cwd_link/x",
        "/workspace/a\u{0}b",
        "/etc/passwd",
        "/proc/self/root/etc/passwd",
        "",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.push(format!("/workspace/{}", "n".repeat(300)));
    v.push(format!("/workspace/{}", "d/".repeat(2100)));
    v
}

#[test]
fn every_operation_refuses_every_escape_and_nothing_outside_changes() {
    let (d, outside) = trapped();
    let ws = d.zone_dir("workspace");
    refuses_every_escape(&d, &outside, "/workspace", &ws);
}

/// The same corpus in a fork of the trapped workspace: a fork is a zone of its own, and every
/// rule of the workspace's holds in it (its traps made again in its directory, as the fork
/// copied them).
#[test]
fn every_operation_refuses_every_escape_in_a_fork_too() {
    // No spare: it would add a link to the outside file the workspace links (counted below).
    let (d, outside) = trapped_with("[forks]\nspare = false\n");
    d.ok("/v1/forks", json!({"name": "f"}));
    let forks = d.dir.path().join("state/forks");
    let dir = std::fs::read_dir(&forks)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("f-"))
        .unwrap_or_else(|| panic!("no directory of fork f in {}", forks.display()));
    refuses_every_escape(&d, &outside, "/forks/f", &dir);
}

/// Every operation on every escape of `zone` (whose directory is `dir`) fails with a path error,
/// and nothing outside the zone changes.
fn refuses_every_escape(d: &Daemon, outside: &std::path::Path, zone: &str, dir: &std::path::Path) {
    let before = snapshot(outside);
    let tmp_before: Vec<_> = std::fs::read_dir(d.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let links = [format!("{zone}/abs_link"), format!("{zone}/rel_link")];
    for p in escape_paths_in(zone) {
        arm_in(dir, outside);
        let calls: Vec<(&str, Value)> = vec![
            ("/v1/fs/read", json!({"path": p})),
            ("/v1/fs/write", json!({"path": p, "content": "pwned"})),
            (
                "/v1/fs/edit",
                json!({"path": p, "old": "SECRET", "new": "pwned"}),
            ),
            ("/v1/fs/delete", json!({"path": p, "recursive": true})),
            (
                "/v1/fs/mkdir",
                json!({"path": format!("{p}/newdir"), "parents": true}),
            ),
            (
                "/v1/fs/move",
                json!({"from": p, "to": format!("{zone}/stolen")}),
            ),
            (
                "/v1/fs/move",
                json!({"from": format!("{zone}/inner/ok.txt"), "to": p}),
            ),
            ("/v1/fs/list", json!({"path": p})),
            ("/v1/fs/stat", json!({"path": format!("{p}/x")})),
            ("/v1/fs/glob", json!({"pattern": "*", "path": p})),
            ("/v1/fs/grep", json!({"pattern": "SECRET", "path": p})),
            ("/v1/fs/resolve", json!({"path": format!("{p}/x")})),
        ];
        for (route, body) in calls {
            arm_in(dir, outside);
            let (status, v) = d.post(route, &body);
            // Deleting or moving the symlink itself is an operation inside the zone; everything
            // else must fail with a path error, never succeed and never be a 5xx.
            if status == 200 {
                let link_itself = links.contains(&p)
                    && (route == "/v1/fs/delete"
                        || route == "/v1/fs/move"
                        || route == "/v1/fs/write");
                assert!(link_itself, "{route} {body} succeeded: {v}");
                continue;
            }
            assert!(status < 500, "{route} {body}: {status} {v}");
            let c = code(&v);
            let renaming_onto_a_link = route == "/v1/fs/move" && body["to"] == p && c == "EXISTS";
            assert!(
                OUT_CODES.contains(&c) || renaming_onto_a_link,
                "{route} {body}: unexpected {c}: {v}"
            );
            assert!(!v["message"].as_str().unwrap().is_empty());
        }
        // The raw routes take the path as a query string.
        let q = wardfs::client::encode(&p);
        let (status, body) = d.curl("GET", &format!("/v1/fs/raw?path={q}"), None);
        assert!(
            (400..500).contains(&status),
            "raw GET {p:?}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        arm_in(dir, outside);
        let (status, _) = d.curl("PUT", &format!("/v1/fs/raw?path={q}"), Some(b"pwned"));
        assert!((400..500).contains(&status), "raw PUT {p:?}: {status}");
    }
    assert_eq!(
        snapshot(outside),
        before,
        "something outside the zone changed"
    );
    let tmp_after: Vec<_> = std::fs::read_dir(d.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(tmp_before, tmp_after, "a file appeared beside the zones");
    assert!(std::path::Path::new("/etc/passwd").exists());
}

#[test]
fn symlink_writes_refuse_to_leave_and_hard_links_are_never_written_through() {
    let (d, outside) = trapped();
    let before = snapshot(&outside);
    for p in [
        "/workspace/abs_link",
        "/workspace/rel_link",
        "/workspace/chain1/secret.txt",
    ] {
        let (status, v) = d.post("/v1/fs/write", &json!({"path": p, "content": "pwned"}));
        assert_eq!((status, code(&v)), (403, "OUTSIDE_ZONE"), "{p}: {v}");
    }
    // A hard link to an outside file (made beside wardfs, never by an agent): read as it is
    // (docs/reliability.md says why), and every change replaces the name only.
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace/hard_link"}));
    assert_eq!(
        (status, v["content"].as_str()),
        (200, Some("HARD-SECRET\n")),
        "{v}"
    );
    let (status, v) = d.post(
        "/v1/fs/edit",
        &json!({"path": "/workspace/hard_link", "old": "HARD", "new": "x"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("hard_link")).unwrap(),
        "x-SECRET\n"
    );
    let (status, _) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/hard_link", "content": "mine"}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        std::fs::read_to_string(outside.join("hard.txt")).unwrap(),
        "HARD-SECRET\n"
    );
    // Symlinks that stay inside the zone work.
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace/inner_link"}));
    assert_eq!((status, v["content"].as_str()), (200, Some("fine\n")));
    let (status, _) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/inner_link", "content": "through\n"}),
    );
    assert_eq!(status, 200);
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("inner/ok.txt")).unwrap(),
        "through\n"
    );
    assert!(
        std::fs::symlink_metadata(d.zone_dir("workspace").join("inner_link"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // Searches never follow links out.
    let (_, v) = d.post(
        "/v1/fs/grep",
        &json!({"pattern": "TOP-SECRET", "hidden": true, "gitignore": false}),
    );
    assert_eq!(v["total"], 0, "{v}");
    assert_eq!(snapshot(&outside).len(), before.len());
    assert_eq!(
        std::fs::read_to_string(outside.join("secret.txt")).unwrap(),
        "TOP-SECRET\n"
    );
}

#[test]
fn grep_searches_a_hard_linked_file_in_every_mode_as_read_does() {
    let (d, outside) = trapped();
    for mode in ["content", "files", "count"] {
        let (status, v) = d.post(
            "/v1/fs/grep",
            &json!({"pattern": "HARD", "path": "/workspace/hard_link", "mode": mode}),
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["total"], 1, "{mode}: {v}");
        assert_eq!(v["files_searched"], 1, "{mode}: {v}");
        assert!(v.get("skipped").is_none(), "{v}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("hard.txt")).unwrap(),
        "HARD-SECRET\n"
    );
}

#[test]
fn percent_encoding_is_a_name_not_a_traversal() {
    let d = Daemon::start("");
    // In JSON, %2e%2e is a literal name inside the zone.
    let (status, v) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/%2e%2e/x.txt", "content": "lit"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("%2e%2e/x.txt")).unwrap(),
        "lit"
    );
    // In a query string it is decoded exactly once.
    let (status, _) = d.curl(
        "GET",
        "/v1/fs/raw?path=/workspace/%2e%2e/%2e%2e/etc/passwd",
        None,
    );
    assert_eq!(status, 403);
    let (status, body) = d.curl("GET", "/v1/fs/raw?path=/workspace/%252e%252e/x.txt", None);
    assert_eq!((status, body.as_slice()), (200, b"lit".as_slice()));
}

#[test]
fn api_rejects_paths_that_are_not_utf8() {
    let d = Daemon::start("");
    // A lone surrogate escape is the only way to smuggle non-UTF-8 into a JSON string.
    let (status, body) = d.curl(
        "POST",
        "/v1/fs/write",
        Some(br#"{"path":"/workspace/\udcff","content":"x"}"#),
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (status, _) = d.curl("GET", "/v1/fs/raw?path=/workspace/%FF%FE", None);
    assert_eq!(status, 400);
    assert_eq!(
        std::fs::read_dir(d.zone_dir("workspace")).unwrap().count(),
        0
    );
}

#[test]
fn cli_rejects_escapes_and_invalid_utf8() {
    let (d, outside) = trapped();
    let before = snapshot(&outside);
    for p in [
        "/workspace/../outside/secret.txt",
        "/workspace/abs_link",
        "/workspace/dir_link/secret.txt",
    ] {
        let out = d.cli(&["read", p]);
        assert_eq!(out.status.code(), Some(6), "{p}");
        let out = d.cli(&["write", p, "pwned"]);
        assert_eq!(out.status.code(), Some(6), "{p}");
    }
    use std::os::unix::ffi::OsStrExt;
    let bad = std::ffi::OsStr::from_bytes(b"/workspace/\xff\xfe");
    let out = std::process::Command::new(crate::support::BIN)
        .arg("--socket")
        .arg(&d.socket)
        .arg("read")
        .arg(bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("UTF-8"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(snapshot(&outside), before);
}

//! A fork's changes to a pulled repository staged for review (issue 30): a real daemon pulls from
//! a real `git daemon` on loopback, a fork of the workspace is changed through the API, `wardfs
//! git status --fork` and `git stage --fork` read the fork's files, the staged commit names the
//! fork and each file's writer, and the push lands exactly the fork's change on the remote while
//! the workspace's files and base stay as they were, until the fork is merged. A fork made
//! before the workspace pulled again is refused (its files are of the older base) until it is
//! updated; a `--fork` naming no fork, or a hostile name, is NOT_FOUND with the name quoted.

use serde_json::{json, Value};
use wardfs::core::ErrorCode;

use crate::mcp::confined::Session;
use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::Daemon;

const LIB: &str = "pub fn one() -> u32 {\n    1\n}\n";
const LIB_FORK: &str = "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    2\n}\n";

/// A repository `proj` with a README and a source file, served by `git daemon`, pulled into
/// /workspace/proj of a fresh daemon.
fn pulled() -> (BareRepo, GitDaemon, Daemon) {
    let repo = BareRepo::seeded(
        "proj",
        &[("README.md", b"# proj\n"), ("src/lib.rs", LIB.as_bytes())],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    d.ok("/v1/git/pull", json!({ "remote": server.url("proj") }));
    (repo, server, d)
}

/// The (path, state) pairs of a status answer's only repository.
fn changes(status: &Value) -> Vec<(String, String)> {
    status["repos"][0]["changes"]
        .as_array()
        .unwrap_or_else(|| panic!("no changes in {status}"))
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect()
}

#[test]
fn a_forks_change_stages_names_its_fork_and_writer_and_pushes_leaving_the_workspace_alone() {
    let (repo, _server, d) = pulled();
    let seed = repo.head("main").unwrap();
    d.ok("/v1/forks", json!({ "name": "a" }));
    d.write("/forks/a/proj/src/lib.rs", LIB_FORK);
    d.write("/forks/a/proj/NOTES.md", "from the fork\n");

    // The workspace has no changes; the fork has its two, named by their paths in the fork,
    // whether the fork is named or the repository is given by its path in the fork.
    assert!(changes(&d.ok("/v1/git/status", json!({}))).is_empty());
    let want = pairs(&[
        ("/forks/a/proj/NOTES.md", "created"),
        ("/forks/a/proj/src/lib.rs", "modified"),
    ]);
    let by_name = d.ok("/v1/git/status", json!({ "fork": "a" }));
    assert_eq!(changes(&by_name), want, "{by_name}");
    // Only what the fork changed was hashed: README.md is still the workspace's clean file.
    assert_eq!(by_name["repos"][0]["examined"], 2, "{by_name}");
    assert_eq!(by_name["repos"][0]["repo"], "/forks/a/proj");
    let by_path = d.ok("/v1/git/status", json!({ "repo": "/forks/a/proj" }));
    assert_eq!(changes(&by_path), want, "{by_path}");
    let text = d.cli_ok(&["git", "status", "--fork", "a"]);
    assert!(
        text.contains("M /forks/a/proj/src/lib.rs") && text.contains("A /forks/a/proj/NOTES.md"),
        "{text}"
    );

    // Staged through the CLI: the commit is the fork's, each file names who wrote it.
    let c = d.cli_json(&["git", "stage", "--fork", "a", "-m", "Add two, from fork a"]);
    assert_eq!(c["zone"], "forks/a", "{c}");
    assert_eq!(c["repo"], "/forks/a/proj");
    assert_eq!(c["base"], seed.as_str());
    let files = c["files"].as_array().unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(
        paths,
        ["/forks/a/proj/NOTES.md", "/forks/a/proj/src/lib.rs"]
    );
    for f in files {
        let w = &f["writers"][0];
        assert_eq!(w["zone"], "forks/a", "{f}");
        assert_eq!(w["via"], "api", "{f}");
        assert_eq!(w["pid"], std::process::id(), "{f}");
        assert_eq!(f["writers"].as_array().unwrap().len(), 1, "{f}");
    }
    let id = c["id"].as_str().unwrap().to_string();
    let shown = d.ok("/v1/git/staged/show", json!({ "id": id }));
    let lib = &shown["files"][1];
    assert!(
        lib["diff"]
            .as_str()
            .unwrap()
            .contains("+pub fn two() -> u32 {"),
        "{lib}"
    );
    let text = d.cli_ok(&["staged", "show", &id, "--no-pager"]);
    assert!(text.contains("from:    forks/a"), "{text}");
    assert!(
        text.contains(&format!("by forks/a: api pid {}", std::process::id())),
        "{text}"
    );
    // The stage is journaled in the fork, not the workspace.
    let log = d.get("/v1/log?zone=forks/a&limit=50");
    assert!(
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["op"] == "git-stage" && e["path"] == "proj"),
        "{log}"
    );

    // Pushed after review: the remote holds exactly the fork's change on the seed.
    let pushed = d.ok("/v1/git/push", json!({ "id": id }));
    let sha = pushed["commit_sha"].as_str().unwrap();
    assert_eq!(repo.head("main").as_deref(), Some(sha));
    assert_eq!(repo.parents(sha), std::slice::from_ref(&seed));
    assert_eq!(
        repo.read_file("main", "src/lib.rs").as_deref(),
        Some(LIB_FORK.as_bytes())
    );
    assert_eq!(
        repo.read_file("main", "NOTES.md").as_deref(),
        Some(&b"from the fork\n"[..])
    );

    // The workspace is untouched: its files, its base, its (empty) status.
    assert_eq!(d.read("proj/src/lib.rs").unwrap(), LIB.as_bytes());
    assert!(d.read("proj/NOTES.md").is_none());
    let ws = d.ok("/v1/git/status", json!({}));
    assert!(changes(&ws).is_empty(), "{ws}");
    assert_eq!(ws["repos"][0]["base"], seed.as_str());
    // The fork's change is upstream now: staging it again finds nothing new.
    let (code, msg) = d.err("/v1/git/stage", json!({ "fork": "a", "message": "again" }));
    assert_eq!(code, ErrorCode::NoMatch, "{msg}");

    // Merged into the workspace, the change is there, and already pushed: nothing to stage.
    let merged = d.ok("/v1/forks/a/merge", json!({}));
    assert_eq!(merged["applied"], true, "{merged}");
    assert_eq!(d.read("proj/src/lib.rs").unwrap(), LIB_FORK.as_bytes());
    let (code, msg) = d.err("/v1/git/stage", json!({ "message": "merged" }));
    assert_eq!(code, ErrorCode::NoMatch, "{msg}");
    assert!(msg.contains("already in a staged commit"), "{msg}");
}

#[test]
fn an_agent_confined_to_its_fork_sees_and_stages_only_the_forks_changes() {
    let (_repo, _server, d) = pulled();
    d.ok("/v1/forks", json!({ "name": "a" }));
    d.ok("/v1/forks", json!({ "name": "b" }));
    d.write("/forks/b/proj/src/lib.rs", "the other fork's\n");
    d.write("/workspace/proj/README.md", "the workspace's\n");
    let mut s = Session::start(&d, "a");
    s.ok(
        "write",
        json!({"path": "/proj/src/lib.rs", "content": LIB_FORK}),
    );

    // Its status is the fork's, by default and given its repository by its path in the fork;
    // the answer names paths from the fork's root.
    let want = pairs(&[("/proj/src/lib.rs", "modified")]);
    for args in [json!({}), json!({"repo": "/proj"}), json!({"fork": "a"})] {
        let st = s.ok("git_status", args.clone());
        assert_eq!(changes(&st), want, "{args}: {st}");
        assert_eq!(st["repos"][0]["repo"], "/proj", "{st}");
    }
    // Another fork, or the workspace's repository, is out of reach.
    let e = s.err("git_status", json!({"fork": "b"}));
    assert_eq!(e["code"], "OUTSIDE_ZONE", "{e}");
    let e = s.err("git_status", json!({"repo": "/workspace/proj"}));
    assert_ne!(e["code"], json!(null), "{e}");
    let e = s.err(
        "git_stage",
        json!({"message": "x", "files": ["/forks/b/proj/src/lib.rs"]}),
    );
    assert_ne!(e["code"], json!(null), "{e}");

    // What it stages is the fork's change alone, for a person to review.
    let c = s.ok(
        "git_stage",
        json!({"message": "Add two, from a confined agent"}),
    );
    assert_eq!(c["zone"], "forks/a", "{c}");
    assert_eq!(c["repo"], "/proj", "{c}");
    let files: Vec<&str> = c["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["/proj/src/lib.rs"], "{c}");
    let shown = d.ok(
        "/v1/git/staged/show",
        json!({ "id": c["id"].as_str().unwrap() }),
    );
    let diff = shown["files"][0]["diff"].as_str().unwrap();
    assert!(diff.contains("+pub fn two() -> u32 {"), "{diff}");
    assert!(
        !diff.contains("other fork") && !diff.contains("workspace's"),
        "{diff}"
    );
}

#[test]
fn a_fork_made_before_the_workspace_pulled_again_is_refused_not_staged_as_a_revert() {
    let (repo, server, d) = pulled();
    d.ok("/v1/forks", json!({ "name": "early" }));
    d.write("/forks/early/proj/NOTES.md", "early notes\n");
    // Upstream moves README.md; the workspace pulls it. The fork still holds the old README:
    // staged on the new base it would undo upstream's change.
    repo.commit_files(
        "main",
        &[("README.md", Some(&b"# proj, moved on\n"[..]))],
        "upstream moves",
    );
    d.ok("/v1/git/pull", json!({ "remote": server.url("proj") }));
    for (route, body) in [
        ("/v1/git/status", json!({ "fork": "early" })),
        ("/v1/git/stage", json!({ "fork": "early", "message": "m" })),
    ] {
        let (code, msg) = d.err(route, body);
        assert_eq!(code, ErrorCode::Conflict, "{route}: {msg}");
        assert!(
            msg.contains("fork early") && msg.contains("older than the repository's base"),
            "{route}: {msg}"
        );
    }
    // Updated onto the workspace's present, the fork holds the new README: it stages its own
    // change only.
    let up = d.ok("/v1/forks/early/update", json!({}));
    assert!(up["conflicts"].as_array().unwrap().is_empty(), "{up}");
    let c = d.ok(
        "/v1/git/stage",
        json!({ "fork": "early", "message": "notes" }),
    );
    let paths: Vec<&str> = c["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["/forks/early/proj/NOTES.md"], "{c}");
    // A fork made after the pull stages on the new base: its own change, and the workspace's
    // it was made with, each naming the zone it was written in.
    d.write("/workspace/proj/src/lib.rs", LIB_FORK);
    d.ok("/v1/forks", json!({ "name": "late" }));
    d.write("/forks/late/proj/NOTES.md", "late notes\n");
    let c = d.ok("/v1/git/stage", json!({ "fork": "late", "message": "m" }));
    assert_eq!(c["base"], repo.head("main").unwrap().as_str(), "{c}");
    let files: Vec<(&str, &str)> = c["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap(),
                f["writers"][0]["zone"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        [
            ("/forks/late/proj/NOTES.md", "forks/late"),
            ("/forks/late/proj/src/lib.rs", "workspace")
        ],
        "{c}"
    );
}

#[test]
fn a_fork_name_that_names_no_fork_is_not_found_and_quoted() {
    let (_repo, _server, d) = pulled();
    d.ok("/v1/forks", json!({ "name": "a" }));
    let hostile = "<script>x</script>\u{1b}[2J\u{202e}";
    for name in ["nope", "../workspace", "a/../../workspace", hostile] {
        for (route, body) in [
            ("/v1/git/status", json!({ "fork": name })),
            ("/v1/git/stage", json!({ "fork": name, "message": "m" })),
        ] {
            let (code, msg) = d.err(route, body);
            assert_eq!(code, ErrorCode::NotFound, "{route} {name:?}: {msg}");
            assert!(msg.starts_with("no fork "), "{route} {name:?}: {msg}");
            assert!(
                !msg.contains('\u{1b}') && !msg.contains('\u{202e}'),
                "{route}: the message carries the name raw: {msg:?}"
            );
        }
    }
    let (status, body) = d.post("/v1/git/status", &json!({ "fork": hostile }));
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "NOT_FOUND");
    assert_eq!(body["path"], format!("/forks/{hostile}"), "{body}");
    // The CLI says so on one line, the name escaped, and fails.
    let out = d.cli(&["git", "stage", "--fork", hostile, "-m", "m"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("no fork \"<script>x</script>\\033[2J\\u{202e}\" exists"),
        "{err}"
    );
    // A path in one fork with another named is refused; a path in a fork that does not exist
    // is not found.
    let (code, msg) = d.err(
        "/v1/git/status",
        json!({ "fork": "a", "repo": "/forks/b/proj" }),
    );
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    let (code, msg) = d.err("/v1/git/status", json!({ "repo": "/forks/b/proj" }));
    assert_eq!(code, ErrorCode::NotFound, "{msg}");
    // A file of the workspace is not a file of the fork staged from.
    d.write("/forks/a/proj/NOTES.md", "n\n");
    let (code, msg) = d.err(
        "/v1/git/stage",
        json!({ "fork": "a", "message": "m", "files": ["/workspace/proj/NOTES.md"] }),
    );
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
}

//! `wardfs mcp --fork NAME`: an agent confined to its fork, spoken to as an MCP client does
//! (JSON-RPC lines on the real `wardfs mcp` process's stdio, a real daemon with its mount).
//! A normal session works in the fork as if it were the whole filesystem (its root is `/`,
//! every path answered relative to it) and never sees the workspace; then an attacker's session
//! tries every way out it can think of (`..`, other zones' and forks' paths, encodings,
//! symlinks made through the mount that point out, zone and fork arguments, other zones'
//! checkpoints, the tools that act on other zones) and the workspace and the other fork must
//! end exactly as they were, with none of their contents in any answer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support::mcp::McpClient;
use crate::support::{Daemon, BIN};

/// What only the workspace holds (written after the forks were made).
const WORKSPACE_SECRET: &str = "WORKSPACE-ONLY";
/// What only the other fork holds.
const OTHER_SECRET: &str = "OTHER-FORK-ONLY";

/// The tools a server confined to a fork offers.
const CONFINED_TOOLS: [&str; 18] = [
    "changes",
    "checkpoint",
    "checkpoint_diff",
    "checkpoint_list",
    "edit",
    "events",
    "forks",
    "git_stage",
    "git_status",
    "glob",
    "grep",
    "ls",
    "mv",
    "read",
    "restore",
    "rm",
    "stat",
    "write",
];

/// One `wardfs mcp --fork NAME` process, past its handshake.
pub(crate) struct Session {
    client: McpClient,
    instructions: String,
}

impl Session {
    pub(crate) fn start(d: &Daemon, fork: &str) -> Session {
        let client = McpClient::start(d, &["--fork", fork]);
        let instructions = client.init["instructions"]
            .as_str()
            .unwrap_or_else(|| panic!("no instructions: {}", client.init))
            .to_string();
        Session {
            client,
            instructions,
        }
    }

    /// Calls a tool; returns the whole answer (`result` or a JSON-RPC `error`).
    fn raw(&mut self, tool: &str, args: Value) -> Value {
        self.client.call(tool, args)
    }

    /// Calls a tool that must succeed; returns its structured content.
    pub(crate) fn ok(&mut self, tool: &str, args: Value) -> Value {
        let a = self.raw(tool, args.clone());
        assert!(
            a["result"].is_object() && a["result"]["isError"] != true,
            "{tool} {args} failed: {a}"
        );
        a["result"]["structuredContent"].clone()
    }

    /// Calls a tool that must fail with a tool error; returns its error object.
    pub(crate) fn err(&mut self, tool: &str, args: Value) -> Value {
        let a = self.raw(tool, args.clone());
        assert_eq!(a["result"]["isError"], true, "{tool} {args} succeeded: {a}");
        a["result"]["structuredContent"].clone()
    }

    fn tools(&mut self) -> Vec<String> {
        let list = self.client.request("tools/list", json!({}));
        let mut names: Vec<String> = list["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    }
}

/// A mounted daemon with forks `a` and `b` of a workspace holding `shared.txt`; after they
/// were made the workspace got `after.txt` and fork b `other.txt`, each with its secret.
fn forked() -> Daemon {
    let d = Daemon::mounted("");
    d.write("/workspace/shared.txt", "before the forks\n");
    for name in ["a", "b"] {
        let made = d.ok("/v1/forks", json!({ "name": name }));
        assert_eq!(made["fork"]["name"], name, "{made}");
    }
    d.write("/workspace/after.txt", &format!("{WORKSPACE_SECRET}\n"));
    d.write("/forks/b/other.txt", &format!("{OTHER_SECRET}\n"));
    d
}

/// Every file under `dir` (through the mount) with its bytes; symlinks by their target.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            if md.is_dir() {
                out.insert(rel, b"<dir>".to_vec());
                stack.push(p);
            } else if md.file_type().is_symlink() {
                let target = std::fs::read_link(&p).unwrap();
                out.insert(rel, target.into_os_string().into_encoded_bytes());
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Asserts that no secret of another zone is in `answer`.
fn no_secret(what: &str, answer: &Value) {
    let text = answer.to_string();
    for secret in [WORKSPACE_SECRET, OTHER_SECRET] {
        assert!(!text.contains(secret), "{what} leaked {secret}: {text}");
    }
}

/// Asserts that every path member of `v` names a place in fork a as the agent sees it: from
/// `/`, never as the daemon names it (`/forks/a/...`).
fn paths_from_root(what: &str, v: &Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if k == "path" || k == "to_path" || k == "scope" {
                    if let Some(p) = child.as_str() {
                        assert!(
                            p.starts_with('/') && !p.starts_with("/forks/a/") && p != "/forks/a",
                            "{what}: {k} = {p}"
                        );
                    }
                }
                paths_from_root(what, child);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| paths_from_root(what, i)),
        _ => {}
    }
}

#[test]
fn a_confined_session_works_in_its_fork_as_its_root_and_never_sees_the_workspace() {
    let d = forked();
    // Rows of other zones that the lists must leave out: a checkpoint and a restore of the
    // workspace.
    let w = d.ok("/v1/checkpoints", json!({}))["id"].as_i64().unwrap();
    d.ok("/v1/checkpoints/restore", json!({ "id": w }));
    let mut s = Session::start(&d, "a");
    assert_eq!(s.tools(), CONFINED_TOOLS);
    assert!(s.instructions.contains("fork a"), "{}", s.instructions);
    let start = s.ok("events", json!({}))["cursor"]
        .as_str()
        .unwrap()
        .to_string();

    let w = s.ok(
        "write",
        json!({"path": "/notes/plan.md", "content": "plan\n"}),
    );
    assert_eq!(
        w,
        json!({"path": "/notes/plan.md", "bytes": 5, "created": true})
    );
    let r = s.ok("read", json!({"path": "/notes/plan.md"}));
    assert_eq!(
        (r["path"].as_str(), r["content"].as_str()),
        (Some("/notes/plan.md"), Some("plan\n"))
    );
    let e = s.ok(
        "edit",
        json!({"path": "notes/plan.md", "old": "plan", "new": "the plan"}),
    );
    assert_eq!(e["path"], "/notes/plan.md", "{e}");
    d.write("/workspace/meanwhile.txt", &format!("{WORKSPACE_SECRET}\n"));

    // The root lists the fork: its copy of the workspace as it was, and its own files.
    for args in [json!({}), json!({"path": "/"})] {
        let l = s.ok("ls", args);
        let names: Vec<&str> = l["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["notes", "shared.txt"], "{l}");
        assert_eq!(l["path"], "/", "{l}");
    }
    let g = s.ok("glob", json!({"pattern": "*"}));
    let mut found: Vec<&str> = g["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    found.sort();
    assert_eq!(found, ["/notes/plan.md", "/shared.txt"], "{g}");
    let g = s.ok("grep", json!({"pattern": "the plan|before the forks"}));
    let hits: Vec<(&str, u64)> = g["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["path"].as_str().unwrap(), l["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(hits, [("/notes/plan.md", 1), ("/shared.txt", 1)], "{g}");
    let g = s.ok(
        "grep",
        json!({"pattern": WORKSPACE_SECRET, "mode": "files", "hidden": true, "gitignore": false}),
    );
    assert!(g.get("files").is_none_or(|f| f == &json!([])), "{g}");
    assert_eq!(
        s.ok("stat", json!({"path": "/notes/plan.md"}))["path"],
        "/notes/plan.md"
    );
    let m = s.ok(
        "mv",
        json!({"from": "/notes/plan.md", "to": "/notes/done.md"}),
    );
    assert_eq!(m, json!({"path": "/notes/done.md", "ok": true}));

    // Checkpoints are the fork's, their scope named from its root; a restore names its paths so.
    let whole = s.ok("checkpoint", json!({"message": "mine"}));
    assert_eq!(
        (whole["zone"].as_str(), &whole["scope"]),
        (Some("forks/a"), &Value::Null),
        "{whole}"
    );
    let notes = s.ok("checkpoint", json!({"path": "/notes"}));
    assert_eq!(notes["scope"], "/notes", "{notes}");
    s.ok(
        "write",
        json!({"path": "/notes/done.md", "content": "changed\n"}),
    );
    let list = s.ok("checkpoint_list", json!({}));
    let ids: Vec<i64> = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert!(
        ids.contains(&whole["id"].as_i64().unwrap())
            && ids.contains(&notes["id"].as_i64().unwrap()),
        "{list}"
    );
    for key in ["checkpoints", "restores"] {
        assert!(
            list[key]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["zone"] == "forks/a"),
            "{key} of other zones: {list}"
        );
    }
    let diff = s.ok("checkpoint_diff", json!({"from": whole["id"]}));
    assert_eq!(diff["files"][0]["path"], "notes/done.md", "{diff}");
    let r = s.ok(
        "restore",
        json!({"id": whole["id"], "paths": ["/notes/done.md"]}),
    );
    assert_eq!(r["restored"], json!(["/notes/done.md"]), "{r}");
    assert_eq!(
        s.ok("read", json!({"path": "/notes/done.md"}))["content"],
        "the plan\n"
    );

    // What it did is in its events, named from its root; the workspace's writes are not.
    let ev = s.ok("events", json!({"since": start, "limit": 1000}));
    let rows = ev["events"].as_array().unwrap();
    assert!(!rows.is_empty(), "{ev}");
    assert!(rows.iter().all(|e| e["zone"] == "forks/a"), "{ev}");
    assert!(
        rows.iter().any(|e| e["op"] == "move"
            && e["path"] == "/notes/plan.md"
            && e["to_path"] == "/notes/done.md"),
        "{ev}"
    );
    let all = s.ok("events", json!({"since": "0", "limit": 1000}));
    assert!(
        all["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["zone"] == "forks/a"),
        "{all}"
    );
    for answer in [&ev, &all, &list, &g] {
        paths_from_root("answer", answer);
        no_secret("answer", answer);
    }

    // Its own changes and its own entry among the forks.
    let ch = s.ok("changes", json!({"name": "a"}));
    let changed: Vec<&str> = ch["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(changed, ["notes/done.md"], "{ch}");
    let forks = s.ok("forks", json!({}));
    let listed = forks["forks"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{forks}");
    assert_eq!(
        (listed[0]["name"].as_str(), listed[0]["path"].as_str()),
        (Some("a"), Some("/"))
    );

    // Through the daemon: the writes are the fork's, and the workspace has none of them.
    assert_eq!(
        d.ok("/v1/fs/read", json!({"path": "/forks/a/notes/done.md"}))["content"],
        "the plan\n"
    );
    assert!(!d.workspace().join("notes").exists());
}

/// How many of [`HOSTILE`], first, climb above the root with `..`.
const CLIMBING: usize = 6;

/// Paths an attacker tries: out through `..`, other zones' and forks' virtual paths, and
/// encodings that a careless decoder would turn into `..` or `/`.
const HOSTILE: &[&str] = &[
    "../workspace/after.txt",
    "/../workspace/after.txt",
    "/../../workspace/after.txt",
    "/src/../../workspace/after.txt",
    "/./../forks/b/other.txt",
    "//../workspace/after.txt",
    "/workspace/after.txt",
    "/forks/b/other.txt",
    "/forks/a/../b/other.txt",
    "/%2e%2e/workspace/after.txt",
    "/%2e%2e%2fworkspace%2fafter.txt",
    "/%252e%252e/workspace/after.txt",
    "\\..\\workspace\\after.txt",
    "/\u{2025}/workspace/after.txt",
    "/\u{ff0e}\u{ff0e}/workspace/after.txt",
    "/..\u{0}/../workspace/after.txt",
    "/.. /workspace/after.txt",
];

/// Whether one of the arguments `args` is `p`, or a path beneath it.
fn gives(args: &Value, p: &str) -> bool {
    match args {
        Value::String(s) => s.starts_with(p),
        Value::Array(items) => items.iter().any(|i| gives(i, p)),
        Value::Object(map) => map.values().any(|v| gives(v, p)),
        _ => false,
    }
}

/// Makes, through the mount, symlinks in fork a that point out of it: at the workspace's
/// file (its backing file, through the mount, as a virtual path, relative at every depth)
/// and at directories above the fork. Returns their names.
fn links_out(d: &Daemon) -> Vec<String> {
    let fork = d.mnt.join("forks/a");
    let mut links: Vec<(String, PathBuf)> = vec![
        ("abs-backing".into(), d.workspace().join("after.txt")),
        ("abs-mount".into(), d.mnt.join("workspace/after.txt")),
        ("virtual".into(), PathBuf::from("/workspace/after.txt")),
        ("up-dir".into(), PathBuf::from("../../..")),
    ];
    for depth in 1..=6 {
        let up = "../".repeat(depth);
        links.push((
            format!("rel-{depth}"),
            PathBuf::from(format!("{up}workspace/after.txt")),
        ));
        links.push((
            format!("root-{depth}"),
            PathBuf::from(format!("{up}root/workspace/after.txt")),
        ));
    }
    for (name, target) in &links {
        std::os::unix::fs::symlink(target, fork.join(name)).unwrap_or_else(|e| {
            panic!("ln -s {} {name} in the fork's mount: {e}", target.display())
        });
    }
    // The links are real ways out: the kernel, following them, reads the workspace's file.
    for name in ["abs-backing", "abs-mount", "rel-2"] {
        let read = std::fs::read_to_string(fork.join(name)).unwrap();
        assert_eq!(read.trim(), WORKSPACE_SECRET, "{name}");
    }
    links.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn an_agent_confined_to_a_fork_reaches_nothing_outside_it() {
    let d = forked();
    let links = links_out(&d);
    let w = d.ok("/v1/checkpoints", json!({}))["id"].as_i64().unwrap();
    let b = d.ok("/v1/checkpoints", json!({"zone": "forks/b"}))["id"]
        .as_i64()
        .unwrap();
    let workspace_before = tree(&d.ws());
    let other_before = tree(&d.mnt.join("forks/b"));
    let checkpoints_of = |zone: &str| {
        d.get(&format!("/v1/checkpoints?zone={zone}&limit=10000"))["checkpoints"]
            .as_array()
            .unwrap()
            .len()
    };
    let outside_checkpoints = (checkpoints_of("workspace"), checkpoints_of("forks/b"));
    let mut s = Session::start(&d, "a");
    let own = s.ok("checkpoint", json!({}))["id"].as_i64().unwrap();
    // A link is a file of the fork: what it points to is never read through it (below).
    let st = s.ok("stat", json!({"path": "/abs-backing"}));
    assert_eq!(st["kind"], "symlink", "{st}");
    for link in ["/abs-backing", "/abs-mount", "/rel-2", "/up-dir/root"] {
        let e = s.err("read", json!({ "path": link }));
        assert_eq!(e["code"], "OUTSIDE_ZONE", "{link}: {e}");
    }

    // Every path argument of every tool, with every hostile path: nothing outside answers.
    for (i, p) in HOSTILE
        .iter()
        .copied()
        .chain(links.iter().map(String::as_str))
        .enumerate()
    {
        let climbs = i < CLIMBING;
        let link = links.iter().any(|l| l == p);
        let p = if link { format!("/{p}") } else { p.to_string() };
        let deep = format!("{p}/x");
        for (tool, args) in [
            ("read", json!({"path": p})),
            ("stat", json!({"path": p})),
            ("ls", json!({"path": p})),
            ("glob", json!({"pattern": "*", "path": p})),
            ("grep", json!({"pattern": ".", "path": p})),
            (
                "edit",
                json!({"path": p, "old": WORKSPACE_SECRET, "new": "PWNED"}),
            ),
            ("write", json!({"path": deep, "content": "PWNED\n"})),
            ("mv", json!({"from": "/shared.txt", "to": deep})),
            ("checkpoint", json!({"path": p})),
            ("events", json!({"path": p, "since": "0"})),
            ("restore", json!({"id": own, "paths": [p]})),
            ("mv", json!({"from": p, "to": "/stolen.txt"})),
            ("rm", json!({"path": "/stolen.txt"})),
            ("rm", json!({"path": p})),
        ] {
            let a = s.raw(tool, args.clone());
            let what = format!("{tool} {args}");
            no_secret(&what, &a);
            let result = &a["result"]["structuredContent"];
            if a["result"]["isError"] == true {
                // An error names the path as given; never as the daemon names it.
                let text = a.to_string();
                assert!(
                    !text.contains("/forks/a/") || p.contains("/forks/a/"),
                    "{what}: {text}"
                );
            } else {
                paths_from_root(&what, result);
            }
            // A `..` above the root is refused as such by every tool, before the daemon is asked.
            if climbs && gives(&args, &p) {
                assert_eq!(result["code"], "OUTSIDE_ZONE", "{what}: {a}");
            }
            if tool == "read" && a["result"]["isError"] != true {
                panic!("{what} read something: {a}");
            }
        }
    }
    for p in ["/../workspace/after.txt", "../workspace/after.txt"] {
        let e = s.err("read", json!({"path": p}));
        assert_eq!(e["code"], "OUTSIDE_ZONE", "{e}");
        assert_eq!(e["path"], p, "{e}");
    }

    // Zones, forks and checkpoints that are not this fork's.
    for (tool, args) in [
        ("checkpoint", json!({"zone": "workspace"})),
        ("checkpoint", json!({"zone": "forks/b"})),
        ("checkpoint_list", json!({"zone": "workspace"})),
        ("events", json!({"zone": "workspace", "since": "0"})),
        ("events", json!({"zone": "sandboxes", "since": "0"})),
        ("changes", json!({"name": "b"})),
        ("changes", json!({"name": "../a"})),
    ] {
        let e = s.err(tool, args.clone());
        assert_eq!(e["code"], "OUTSIDE_ZONE", "{tool} {args}: {e}");
    }
    for (tool, args) in [
        ("checkpoint_diff", json!({"from": w})),
        ("checkpoint_diff", json!({"from": own, "to": b})),
        ("restore", json!({"id": w})),
        ("restore", json!({"id": b, "paths": ["/other.txt"]})),
    ] {
        let e = s.err(tool, args.clone());
        assert_eq!(e["code"], "NOT_FOUND", "{tool} {args}: {e}");
        no_secret(tool, &e);
    }
    // An optional argument given as null is left out: the fork's default, never the daemon's.
    let l = s.ok("ls", json!({"path": null}));
    assert_eq!(l["path"], "/", "{l}");
    no_secret(
        "ls null",
        &s.ok("grep", json!({"pattern": ".", "path": null})),
    );
    let c = s.ok("checkpoint", json!({"zone": null, "path": null}));
    assert_eq!(c["zone"], "forks/a", "{c}");
    let ev = s.ok("events", json!({"zone": null, "path": null, "since": "0"}));
    assert!(
        ev["events"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["zone"] == "forks/a"),
        "{ev}"
    );
    // An argument the confined tool does not know, even one its schema has not.
    let e = s.err("read", json!({"path": "/shared.txt", "zone": "workspace"}));
    assert_eq!(e["code"], "INVALID_ARGUMENT", "{e}");

    // The tools that act on other zones are not there to call.
    for (tool, args) in [
        ("fork", json!({"name": "c"})),
        ("merge", json!({"name": "a"})),
        ("update", json!({"name": "a"})),
        ("git_push", json!({"id": "x"})),
        ("git_status", json!({"fork": "b"})),
        ("git_stage", json!({"message": "x", "fork": "b"})),
        ("staged_list", json!({})),
        ("mirror_push", json!({"sandbox": "dev"})),
        ("sandbox_list", json!({})),
    ] {
        let a = s.raw(tool, args);
        assert!(
            a.get("error").is_some() || a["result"]["isError"] == true,
            "{tool} answered: {a}"
        );
    }

    // The fork's own file still reads; everything outside is as it was.
    assert_eq!(
        s.ok("read", json!({"path": "/shared.txt"}))["content"],
        "before the forks\n"
    );
    drop(s);
    assert_eq!(tree(&d.ws()), workspace_before, "the workspace changed");
    // Nothing written landed anywhere on the host but in fork a's own directory.
    let fork_dir = std::fs::read_dir(d.dir.path().join("state/forks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("a-"))
        .expect("fork a's directory");
    let mut stack = vec![d.dir.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p == d.mnt || p == fork_dir {
                continue;
            }
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p);
            } else if md.is_file() {
                let bytes = std::fs::read(&p).unwrap();
                assert!(
                    !bytes.windows(5).any(|w| w == b"PWNED"),
                    "an attacker's write landed in {}",
                    p.display()
                );
            }
        }
    }
    assert_eq!(tree(&d.mnt.join("forks/b")), other_before, "fork b changed");
    assert_eq!(
        (checkpoints_of("workspace"), checkpoints_of("forks/b")),
        outside_checkpoints,
        "a checkpoint of another zone was taken"
    );
    let forks = d.get("/v1/forks");
    let names: Vec<&str> = forks["forks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"], "{forks}");
}

#[test]
fn mcp_refuses_to_serve_a_fork_it_cannot_have() {
    let d = Daemon::start("");
    for (name, says) in [
        ("../workspace", "not a fork name"),
        ("nope", "no fork nope"),
    ] {
        let out = Command::new(BIN)
            .arg("--socket")
            .arg(&d.socket)
            .args(["mcp", "--fork", name])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(says), "{name}: {err}");
        assert!(
            out.stdout.is_empty(),
            "{name}: the protocol's stdout got {:?}",
            out.stdout
        );
    }
}

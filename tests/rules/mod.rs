//! Each rule of the core driven through every entry point: the API (the CLI over the socket),
//! MCP (`wardfs mcp` over stdio, spoken here as JSON-RPC), and the mount. The rule lives in one
//! function of the core, so the three must agree: the same refusal (named by its code, or the
//! errno the code maps to), nothing changed on disk, and the journal naming who changed what.
//!
//! Path locks are driven through the API and MCP at once here (edits of one file take turns
//! instead of conflicting), through the API and the mount here (a gate holds an API edit inside
//! its lock while a rename through the mount waits for it), through the mount's node operations
//! in `core::node_tests`, and through the API alone in `api::concurrency`.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::gates::Gates;
use crate::support::mcp::McpClient;
use crate::support::sandbox_agent::AgentServer;
use crate::support::wait::{wait_for, wait_until};
use crate::support::{Daemon as Mounted, BIN};

/// `wardfs mcp` against a daemon, spoken to as an MCP client does; tool calls give the error
/// code when they fail.
struct Mcp {
    client: McpClient,
}

impl Mcp {
    fn start(m: &Mounted) -> Mcp {
        let client = McpClient::start(m, &[]);
        assert_eq!(
            client.init["serverInfo"]["name"], "wardfs",
            "{}",
            client.init
        );
        Mcp { client }
    }

    /// Calls a tool; returns the error code when it failed (from its structured content).
    fn call(&mut self, tool: &str, args: Value) -> Result<Value, String> {
        let r = self.client.call(tool, args);
        let result = &r["result"];
        assert!(result.is_object(), "{tool}: no result: {r}");
        if result["isError"] == true {
            let code = result["structuredContent"]["code"]
                .as_str()
                .unwrap_or_else(|| panic!("{tool}: an error without a code: {r}"));
            return Err(code.to_string());
        }
        Ok(result["structuredContent"].clone())
    }

    fn pid(&self) -> u32 {
        self.client.pid()
    }
}

/// Runs the CLI against the daemon; returns the error text when it fails.
fn api(m: &Mounted, args: &[&str]) -> Result<String, String> {
    let out = Command::new(BIN)
        .arg("--socket")
        .arg(&m.socket)
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The errno of an I/O error, for assertions.
fn errno<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("the mount must refuse")
        .raw_os_error()
        .unwrap()
}

#[test]
fn read_only_is_refused_alike_by_the_api_mcp_and_the_mount() {
    let m = Mounted::mounted("[zones.cache]\nread_only = true\n");
    std::fs::write(m.zone_dir("cache").join("r.txt"), "data").unwrap();
    let mut mcp = Mcp::start(&m);

    let e = api(&m, &["write", "/cache/r.txt", "api"]).unwrap_err();
    assert!(e.contains("read-only"), "API: {e}");
    let e = api(&m, &["mkdir", "/cache/d"]).unwrap_err();
    assert!(e.contains("read-only"), "API: {e}");
    assert_eq!(
        mcp.call("write", json!({"path": "/cache/r.txt", "content": "mcp"})),
        Err("READ_ONLY".into())
    );
    assert_eq!(
        mcp.call("rm", json!({"path": "/cache/r.txt"})),
        Err("READ_ONLY".into())
    );
    assert_eq!(
        errno(std::fs::write(m.mnt.join("cache/r.txt"), "fuse")),
        libc::EROFS
    );
    assert_eq!(
        errno(std::fs::create_dir(m.mnt.join("cache/d"))),
        libc::EROFS
    );
    assert_eq!(
        errno(std::fs::remove_file(m.mnt.join("cache/r.txt"))),
        libc::EROFS
    );
    // Reads still work everywhere, and nothing changed.
    assert_eq!(api(&m, &["cat", "/cache/r.txt"]).unwrap(), "data");
    assert_eq!(
        mcp.call("read", json!({"path": "/cache/r.txt"})).unwrap()["content"],
        "data"
    );
    assert_eq!(
        std::fs::read_to_string(m.mnt.join("cache/r.txt")).unwrap(),
        "data"
    );
    assert_eq!(
        std::fs::read_to_string(m.zone_dir("cache").join("r.txt")).unwrap(),
        "data"
    );
    assert!(!m.zone_dir("cache").join("d").exists());
    // The setup's write beside wardfs is journaled by the watcher once it has been quiet (on a
    // loaded machine, before this check); no refused change may be.
    assert!(
        m.journal(200)
            .iter()
            .filter(|r| r.0 != "watcher")
            .all(|r| r.2 != "r.txt" && r.2 != "d"),
        "a refused change was journaled: {:?}",
        m.journal(200)
    );
}

/// The hard-link rule (`LocalZone::breaks_links`): a file linked into the zone from outside is
/// read as it is, and a change through any entry point lands in a file of the name's own (the
/// API and MCP replace the name, the mount copies the file first), never in the outside file.
#[test]
fn a_file_hard_linked_from_outside_is_read_alike_and_changed_only_under_its_name_by_all_three() {
    let m = Mounted::mounted("");
    let outside = m.dir.path().join("outside-secret.txt");
    std::fs::write(&outside, "SECRET\n").unwrap();
    for name in ["api.txt", "mcp.txt", "mount.txt"] {
        std::fs::hard_link(&outside, m.zone_dir("workspace").join(name)).unwrap();
    }
    let mut mcp = Mcp::start(&m);

    assert_eq!(api(&m, &["cat", "/workspace/api.txt"]).unwrap(), "SECRET\n");
    let r = mcp
        .call("read", json!({"path": "/workspace/mcp.txt"}))
        .unwrap();
    assert!(r.to_string().contains("SECRET"), "MCP: {r}");
    let mount = m.ws().join("mount.txt");
    assert_eq!(std::fs::read_to_string(&mount).unwrap(), "SECRET\n");

    api(&m, &["edit", "/workspace/api.txt", "SECRET", "api"]).unwrap();
    let edit = json!({"path": "/workspace/mcp.txt", "old": "SECRET", "new": "mcp"});
    mcp.call("edit", edit).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&mount)
        .unwrap();
    f.write_all(b"mount!").unwrap();
    f.sync_all().unwrap();
    drop(f);
    for (name, want) in [
        ("api.txt", "api\n"),
        ("mcp.txt", "mcp\n"),
        ("mount.txt", "mount!\n"),
    ] {
        let got = std::fs::read_to_string(m.zone_dir("workspace").join(name)).unwrap();
        assert_eq!(got, want, "{name}");
    }
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "SECRET\n");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&outside).unwrap().nlink(), 1);
    // A link through the mount would not share its writes: refused, as on a filesystem
    // without hard links.
    assert_eq!(
        errno(std::fs::hard_link(&mount, m.ws().join("second.txt"))),
        libc::EPERM,
        "mount link"
    );
}

#[test]
fn every_change_is_journaled_with_who_made_it_through_the_api_mcp_and_the_mount() {
    let m = Mounted::mounted("");
    let mut mcp = Mcp::start(&m);
    api(&m, &["write", "/workspace/by-api.txt", "a"]).unwrap();
    mcp.call(
        "write",
        json!({"path": "/workspace/by-mcp.txt", "content": "m"}),
    )
    .unwrap();
    let writer = Command::new("sh")
        .arg("-c")
        .arg(format!("echo f > {}/by-fuse.txt", m.ws().display()))
        .spawn()
        .unwrap();
    let writer_pid = writer.id();
    assert!(writer.wait_with_output().unwrap().status.success());
    std::fs::write(m.zone_dir("workspace").join("beside.txt"), "b").unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let rows = m.journal(200);
        let row = |path: &str| rows.iter().find(|r| r.2 == path).cloned();
        if let (Some(api_row), Some(mcp_row), Some(fuse_row), Some(beside_row)) = (
            row("by-api.txt"),
            row("by-mcp.txt"),
            row("by-fuse.txt"),
            row("beside.txt"),
        ) {
            assert_eq!((api_row.0.as_str(), api_row.1.as_str()), ("api", "write"));
            // MCP reaches the core through the API, as the `wardfs mcp` process.
            assert_eq!((mcp_row.0.as_str(), mcp_row.3), ("api", mcp.pid() as u64));
            assert_eq!(fuse_row.0, "fuse");
            assert_eq!(
                fuse_row.3, writer_pid as u64,
                "the writing process: {rows:?}"
            );
            assert_eq!(
                (beside_row.0.as_str(), beside_row.1.as_str()),
                ("watcher", "write")
            );
            // Each change once: the watcher does not journal what wardfs did itself. A change
            // beside wardfs made now is journaled after any the watcher took from those above.
            std::fs::write(m.zone_dir("workspace").join("barrier.txt"), "b").unwrap();
            let rows = wait_for(
                "barrier.txt journaled by the watcher",
                Duration::from_secs(10),
                || {
                    let rows = m.journal(200);
                    rows.iter().any(|r| r.2 == "barrier.txt").then_some(rows)
                },
            );
            for p in ["by-api.txt", "by-mcp.txt", "by-fuse.txt"] {
                assert!(
                    !rows.iter().any(|r| r.2 == p && r.0 == "watcher"),
                    "{p} journaled by the watcher too: {rows:?}"
                );
            }
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not every change journaled within 10 s: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn edits_of_one_file_through_the_api_and_mcp_at_once_take_turns_and_lose_nothing() {
    let m = Mounted::start("");
    const ROUNDS: usize = 8;
    let slots = ["api-0", "api-1", "mcp-0", "mcp-1"];
    let seed: String = slots.iter().map(|s| format!("{s}=0\n")).collect();
    std::fs::write(m.zone_dir("workspace").join("shared.txt"), &seed).unwrap();
    std::thread::scope(|scope| {
        for slot in slots {
            let m = &m;
            scope.spawn(move || {
                // The lock is held from the read to the replacement: an edit never finds the
                // file changed under it (CONFLICT) and never loses another's edit.
                let mut mcp = slot.starts_with("mcp").then(|| Mcp::start(m));
                for k in 0..ROUNDS {
                    let (old, new) = (format!("{slot}={k}\n"), format!("{slot}={}\n", k + 1));
                    let r = match mcp.as_mut() {
                        Some(mcp) => mcp
                            .call(
                                "edit",
                                json!({"path": "/workspace/shared.txt", "old": old, "new": new}),
                            )
                            .map(|_| ()),
                        None => api(m, &["edit", "/workspace/shared.txt", &old, &new]).map(|_| ()),
                    };
                    r.unwrap_or_else(|e| panic!("{slot} round {k}: {e}"));
                }
            });
        }
    });
    let want: String = slots.iter().map(|s| format!("{s}={ROUNDS}\n")).collect();
    assert_eq!(
        std::fs::read_to_string(m.zone_dir("workspace").join("shared.txt")).unwrap(),
        want
    );
}

#[test]
fn a_rename_through_the_mount_waits_for_an_api_edit_holding_the_path_lock() {
    // A gate holds the edit between its read and its replacement, lock held: the rename through
    // the mount must wait for it, then move the edited file. Without the lock on the mount's side
    // the rename would land inside the edit, which would then fail (CONFLICT) or recreate the
    // old name beside the moved file.
    let gates = Gates::new();
    let (key, dir) = gates.env();
    let m = Mounted::options()
        .prefix("wardfs-fuse")
        .mount()
        .env(key, &dir)
        .start();
    let backing = m.zone_dir("workspace");
    std::fs::write(backing.join("held.txt"), "value = 1\n").unwrap();
    gates.arm("edit-locked");
    let renamed = std::sync::atomic::AtomicBool::new(false);
    let mnt = m.mnt.join("workspace");
    std::thread::scope(|scope| {
        let edit = scope.spawn(|| {
            api(
                &m,
                &["edit", "/workspace/held.txt", "value = 1", "value = 2"],
            )
        });
        gates.wait_held("edit-locked", Duration::from_secs(20));
        let rename = scope.spawn(|| {
            let r = std::fs::rename(mnt.join("held.txt"), mnt.join("moved.txt"));
            renamed.store(true, std::sync::atomic::Ordering::SeqCst);
            r
        });
        // Must stay: it shows the rename waits, which only time without the rename can show.
        std::thread::sleep(Duration::from_millis(700));
        assert!(
            !renamed.load(std::sync::atomic::Ordering::SeqCst),
            "the rename through the mount went through while an API edit held the path"
        );
        assert!(backing.join("held.txt").exists() && !backing.join("moved.txt").exists());
        gates.release("edit-locked");
        edit.join().unwrap().expect("the edit, released, succeeds");
        rename.join().unwrap().expect("the rename, then, succeeds");
    });
    assert_eq!(
        std::fs::read_to_string(backing.join("moved.txt")).unwrap(),
        "value = 2\n",
        "the rename moved the edited file"
    );
    assert!(
        !backing.join("held.txt").exists(),
        "nothing was left at the old name"
    );
    let rows = m.journal(200);
    let pos = |op: &str, path: &str| {
        rows.iter()
            .position(|(_, o, p, _)| o == op && p == path)
            .unwrap_or_else(|| panic!("no {op} of {path} journaled: {rows:?}"))
    };
    // Newest first: the rename was journaled after the edit.
    assert!(
        pos("move", "held.txt") < pos("edit", "held.txt"),
        "{rows:?}"
    );
}

#[test]
fn a_checkpoint_holds_every_writers_changes_and_a_restore_puts_them_back_through_the_mount() {
    let m = Mounted::mounted("");
    let mut mcp = Mcp::start(&m);
    let ws = m.ws();
    let backing = m.zone_dir("workspace");
    api(&m, &["write", "/workspace/by-api.txt", "api 1"]).unwrap();
    mcp.call(
        "write",
        json!({"path": "/workspace/by-mcp.txt", "content": "mcp 1"}),
    )
    .unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/by-fuse.rs"), "fuse 1").unwrap();
    std::fs::write(backing.join("beside.txt"), "beside 1").unwrap();
    // The watcher journals a change beside wardfs once it has settled (250 ms).
    let settled = |path: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.journal(200).iter().any(|r| r.2 == path) {
            assert!(Instant::now() < deadline, "{path} not journaled");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    settled("beside.txt");
    let out = api(&m, &["--json", "checkpoint", "-m", "one"]).unwrap();
    let first: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(first["files"], 4, "{first}");

    let rows_of = |path: &str| m.journal(200).iter().filter(|r| r.2 == path).count();
    let beside_rows = rows_of("beside.txt");
    api(&m, &["write", "/workspace/by-api.txt", "api 2"]).unwrap();
    mcp.call("rm", json!({"path": "/workspace/by-mcp.txt"}))
        .unwrap();
    std::fs::write(ws.join("src/by-fuse.rs"), "fuse 2").unwrap();
    std::fs::write(ws.join("src/new.rs"), "new").unwrap();
    std::fs::write(backing.join("beside.txt"), "beside 2").unwrap();
    std::fs::write(backing.join("beside-new.txt"), "x").unwrap();
    settled("beside-new.txt");
    wait_until(
        "the second change to beside.txt journaled",
        Duration::from_secs(10),
        || rows_of("beside.txt") > beside_rows,
    );
    let diff = api(
        &m,
        &["checkpoint", "diff", &first["id"].to_string(), "--stat"],
    )
    .unwrap();
    for p in [
        "by-api.txt",
        "by-mcp.txt",
        "src/by-fuse.rs",
        "src/new.rs",
        "beside.txt",
    ] {
        assert!(diff.contains(p), "{p} missing from the diff:\n{diff}");
    }

    let out = api(&m, &["--json", "restore", &first["id"].to_string()]).unwrap();
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["conflicts"], json!([]), "{r}");
    // Seen through the mount at once: the restore went through the core.
    let read = |p: &str| std::fs::read_to_string(ws.join(p)).ok();
    assert_eq!(read("by-api.txt").as_deref(), Some("api 1"));
    assert_eq!(read("by-mcp.txt").as_deref(), Some("mcp 1"));
    assert_eq!(read("src/by-fuse.rs").as_deref(), Some("fuse 1"));
    assert_eq!(read("beside.txt").as_deref(), Some("beside 1"));
    assert_eq!(read("src/new.rs"), None);
    assert_eq!(read("beside-new.txt"), None);
    // And undone by restoring the checkpoint it made first.
    api(&m, &["restore", &r["before"].to_string()]).unwrap();
    assert_eq!(read("by-api.txt").as_deref(), Some("api 2"));
    assert_eq!(read("by-mcp.txt"), None);
    assert_eq!(read("src/new.rs").as_deref(), Some("new"));
    assert_eq!(read("beside-new.txt").as_deref(), Some("x"));
    // Bad input names the input and the rule.
    let e = api(&m, &["restore", "9999"]).unwrap_err();
    assert!(e.contains("checkpoint 9999"), "{e}");
    let e = api(&m, &["restore", &first["id"].to_string(), "/cache/x"]).unwrap_err();
    assert!(e.contains("not in /workspace"), "{e}");
}

#[test]
fn a_zone_is_checkpointed_on_its_own_once_changes_have_been_quiet() {
    let m = Mounted::start("[checkpoints]\nauto_quiet_ms = 300\n");
    let list = || -> Vec<Value> {
        let out = api(&m, &["--json", "checkpoint", "list"]).unwrap();
        serde_json::from_str::<Value>(&out).unwrap()["checkpoints"]
            .as_array()
            .unwrap()
            .clone()
    };
    let wait_for = |n: usize| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let l = list();
            if l.len() >= n {
                return l;
            }
            assert!(Instant::now() < deadline, "no automatic checkpoint: {l:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    api(&m, &["write", "/workspace/a.txt", "one"]).unwrap();
    let l = wait_for(1);
    assert_eq!(
        (l[0]["message"].as_str(), l[0]["files"].as_u64()),
        (Some("auto"), Some(1))
    );
    // Nothing changed: no new checkpoint. Must stay: only a quiet time longer than
    // auto_quiet_ms shows that none comes.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(list().len(), 1);
    api(&m, &["write", "/workspace/b.txt", "two"]).unwrap();
    let l = wait_for(2);
    assert_eq!(l[0]["files"], 2);
    assert_eq!(l[0]["parent"], l[1]["id"]);
}

#[test]
fn a_sandbox_file_over_the_size_limit_is_refused_alike_by_the_api_mcp_and_the_mount() {
    let server = AgentServer::start();
    let token = server.token().to_string();
    let m = Mounted::options()
        .prefix("wardfs-fuse")
        .mount()
        .extra(&format!(
            "[limits]\nsandbox_file_bytes = 4096\n\
             [zones.workspace]\nsandbox = \"dev\"\npath = \"{}\"\nattr_ttl_ms = 200\n\
             [sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\n\
             token_env = \"WARDFS_RULES_TOKEN\"\nrequest_timeout_secs = 5\n",
            server.root(),
            server.url()
        ))
        .env("WARDFS_RULES_TOKEN", &token)
        .start();
    std::fs::write(server.work().join("big.txt"), "x".repeat(8192)).unwrap();
    std::fs::write(server.work().join("small.txt"), "small").unwrap();
    let mut mcp = Mcp::start(&m);

    let e = api(&m, &["read", "/workspace/big.txt"]).unwrap_err();
    assert!(e.contains("limits.sandbox_file_bytes"), "API: {e}");
    assert_eq!(
        mcp.call("read", json!({"path": "/workspace/big.txt"})),
        Err("TOO_LARGE".into())
    );
    assert_eq!(
        errno(std::fs::read(m.ws().join("big.txt"))),
        libc::EFBIG,
        "mount open"
    );
    // A write through the mount may not make a file the sandbox zone would refuse to open.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.ws().join("small.txt"))
        .unwrap();
    use std::os::unix::fs::FileExt;
    assert_eq!(
        errno(f.write_all_at(b"y", 5000)),
        libc::EFBIG,
        "mount write past the limit"
    );
    drop(f);
    // Under the limit, all three read it.
    assert_eq!(api(&m, &["cat", "/workspace/small.txt"]).unwrap(), "small");
    assert_eq!(
        mcp.call("read", json!({"path": "/workspace/small.txt"}))
            .unwrap()["content"],
        "small"
    );
    assert_eq!(
        std::fs::read_to_string(m.ws().join("small.txt")).unwrap(),
        "small"
    );
    assert_eq!(
        std::fs::read_to_string(server.work().join("big.txt"))
            .unwrap()
            .len(),
        8192
    );
}

/// What each room of `src/` may import from the others (docs/architecture.md): dependencies point
/// down only, and no adapter reaches around the core.
const ALLOWED: &[(&str, &[&str])] = &[
    ("config", &[]),
    ("state", &["config"]),
    ("core", &["config", "state"]),
    ("git", &["config", "core", "state"]),
    ("checkpoint", &["config", "core", "state"]),
    ("fork", &["checkpoint", "config", "core", "state"]),
    ("sandbox", &["config", "core", "state"]),
    ("fuse", &["config", "core", "state"]),
    // The answers both the API and its clients read (`/v1/status`, `/v1/gc`).
    ("proto", &["core"]),
    (
        "api",
        &[
            "checkpoint",
            "config",
            "core",
            "fork",
            "git",
            "proto",
            "sandbox",
            "state",
        ],
    ),
    ("client", &["core"]),
    // The reply types of the rooms below, for the tools' output schemas; calls go through
    // `client`.
    (
        "mcp",
        &[
            "checkpoint",
            "client",
            "core",
            "fork",
            "git",
            "sandbox",
            "state",
        ],
    ),
    // The reply types of the rooms below, for their shape (`state::RunRow`); calls go through
    // `client`.
    ("review", &["client", "core", "git", "state"]),
    // The command line talks to the daemon through `client`; the reply types it prints come
    // from the rooms that define them, for their shape; `fuse`'s unmount, binds and doctor
    // checks run in its own process; `daemon` only from `cmd/serve.rs` (see ONLY_FROM).
    (
        "cli",
        &[
            "checkpoint",
            "client",
            "config",
            "core",
            "daemon",
            "fork",
            "fuse",
            "git",
            "mcp",
            "proto",
            "review",
            "sandbox",
            "state",
        ],
    ),
    (
        "daemon",
        &["api", "config", "core", "fuse", "git", "sandbox", "state"],
    ),
];

/// Rooms that one file alone may import: the daemon is started by `wardfs serve` and by no
/// other part of the program.
const ONLY_FROM: &[(&str, &str)] = &[("daemon", "cli/cmd/serve.rs")];

#[test]
fn each_room_imports_only_the_rooms_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (room, allowed) in ALLOWED {
        let dir = src.join(room);
        let files: Vec<std::path::PathBuf> = if dir.is_dir() {
            walk(&dir)
        } else {
            vec![src.join(format!("{room}.rs"))]
        };
        assert!(!files.is_empty(), "no source for room {room}");
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for (i, _) in code.match_indices("crate::") {
                    let used: String = code[i + 7..]
                        .chars()
                        .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                        .collect();
                    if used != *room && !allowed.contains(&used.as_str()) {
                        broken.push(format!("{}:{}: {room} imports {used}", f.display(), n + 1));
                    }
                    let only = ONLY_FROM.iter().find(|(r, _)| *r == used);
                    if only.is_some_and(|(_, file)| !f.ends_with(file)) {
                        broken.push(format!(
                            "{}:{}: only {} may import {used}",
                            f.display(),
                            n + 1,
                            only.unwrap().1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "imports against docs/architecture.md:\n{}",
        broken.join("\n")
    );
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out
}

//! Path escapes through the entry points not covered elsewhere: the MCP server, a mirror pull of
//! a sandbox holding a symlink to `/etc`, and the mount.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::symlink;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use crate::support::api::code;
use crate::support::sandbox_agent::AgentServer;
use crate::support::{Daemon, BIN};

/// Sends `requests` (JSON-RPC lines) to `wardfs mcp` and returns the answer with id `want`.
fn mcp_call(d: &Daemon, requests: &[Value], want: u64) -> Value {
    let mut child = Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .arg("mcp")
        .env_remove("WARDFS_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start wardfs mcp");
    let mut stdin = child.stdin.take().unwrap();
    for r in requests {
        writeln!(stdin, "{r}").unwrap();
    }
    stdin.flush().unwrap();
    let mut found = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let v: Value = serde_json::from_str(&line.unwrap()).expect("JSON-RPC line");
        if v["id"] == want {
            found = Some(v);
            break;
        }
    }
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    found.expect("no answer from wardfs mcp")
}

#[test]
fn mcp_read_of_a_path_out_of_the_zone_is_refused() {
    let d = Daemon::start("");
    std::fs::write(d.zone_dir("workspace").join("ok.txt"), "fine\n").unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "security-test", "version": "0"}}});
    let inited = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call = |id: u64, path: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "read", "arguments": {"path": path}}})
    };
    let paths = [
        "../../etc/passwd",
        "/workspace/../../etc/passwd",
        "/etc/passwd",
        "/workspace/a\u{0}b",
    ];
    let mut requests = vec![init, inited, call(2, "/workspace/ok.txt")];
    for (i, p) in paths.iter().enumerate() {
        requests.push(call(10 + i as u64, p));
    }
    let ok = mcp_call(&d, &requests, 2);
    assert_eq!(ok["result"]["isError"], json!(false), "{ok}");
    assert!(ok.to_string().contains("fine"), "{ok}");
    for (i, p) in paths.iter().enumerate() {
        let v = mcp_call(&d, &requests, 10 + i as u64);
        let text = v.to_string();
        assert_eq!(v["result"]["isError"], json!(true), "{p}: {v}");
        assert!(
            text.contains("OUTSIDE_ZONE") || text.contains("INVALID_PATH"),
            "{p}: {v}"
        );
        assert!(!text.contains("root:x:0:0"), "{p} leaked /etc/passwd: {v}");
    }
}

#[test]
fn a_mirror_pull_of_a_symlink_to_etc_never_reads_etc() {
    const VAR: &str = "WARDFS_SECURITY_PULL_TOKEN";
    let server = AgentServer::start();
    // Server side: a symlink to /etc, one to a file in it, and a plain file.
    let work = server.work();
    symlink("/etc", work.join("etc_link")).unwrap();
    symlink("/etc/passwd", work.join("passwd_link")).unwrap();
    symlink("../../../../../../../etc/hostname", work.join("climb_link")).unwrap();
    std::fs::write(work.join("plain.txt"), "plain\n").unwrap();
    std::env::set_var(VAR, server.token());
    let d = Daemon::start(&format!(
        "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\ntoken_env = \"{VAR}\"\nroot = \"{}\"\nretries = 1\n",
        server.url(),
        server.root()
    ));
    let (status, v) = d.post("/v1/mirror/pull", &json!({"sandbox": "dev"}));
    assert_eq!(status, 200, "{v}\n{}", d.log_text());
    let ws = d.zone_dir("workspace");
    assert_eq!(
        std::fs::read_to_string(ws.join("plain.txt")).unwrap(),
        "plain\n"
    );
    // The links lead out of the pulled directory: the pull skips and reports them, and copies
    // nothing from /etc (no entry at all by those names).
    let skipped: Vec<&str> = v["skipped"]
        .as_array()
        .expect("a skipped list")
        .iter()
        .filter_map(|e| e["path"].as_str())
        .collect();
    for name in ["etc_link", "passwd_link", "climb_link"] {
        assert!(
            skipped.iter().any(|p| p.ends_with(name)),
            "{name} not skipped: {v}"
        );
        assert!(
            std::fs::symlink_metadata(ws.join(name)).is_err(),
            "{name} was written"
        );
    }
    // Reading by those names finds nothing, and never what /etc holds.
    for path in [
        "/workspace/etc_link/passwd",
        "/workspace/passwd_link",
        "/workspace/climb_link",
    ] {
        let (status, v) = d.post("/v1/fs/read", &json!({"path": path}));
        assert_eq!(status, 404, "{path}: {v}");
        assert_eq!(code(&v), "NOT_FOUND", "{path}: {v}");
        assert!(!v.to_string().contains("root:x:0:0"), "{v}");
    }
    // A push back does not follow them either: the sandbox's /etc is left alone.
    let (status, v) = d.post("/v1/mirror/push", &json!({"sandbox": "dev"}));
    assert_eq!(status, 200, "{v}");
    assert!(std::fs::symlink_metadata(work.join("etc_link"))
        .unwrap()
        .file_type()
        .is_symlink());
}

/// Through the mount a symlink out of the zone is an ordinary symlink: stored verbatim,
/// resolved by the kernel for the caller, never followed by the daemon (README, "Zones"). So a
/// write through it lands outside without passing through wardfs (nothing journaled), and the
/// API refuses the same path.
#[test]
fn a_symlink_out_through_the_mount_is_never_followed_by_the_daemon() {
    let m = Daemon::mounted("");
    let outside = m.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "TOP-SECRET\n").unwrap();
    let ws = m.ws();
    symlink(&outside, ws.join("out")).unwrap();
    symlink("../../outside/secret.txt", ws.join("rel_out")).unwrap();
    // Stored verbatim in the backing directory.
    assert_eq!(std::fs::read_link(ws.join("out")).unwrap(), outside);
    assert_eq!(
        std::fs::read_link(m.zone_dir("workspace").join("out")).unwrap(),
        outside
    );
    // The kernel follows it for this process (which may read `outside` anyway).
    assert_eq!(
        std::fs::read_to_string(ws.join("out/secret.txt")).unwrap(),
        "TOP-SECRET\n"
    );
    std::fs::write(ws.join("out/new.txt"), "written through a link\n").unwrap();
    assert!(outside.join("new.txt").is_file());
    let client = wardfs::client::Client::new(&m.socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let log: Value = rt
        .block_on(client.get("/v1/log?limit=1000"))
        .expect("GET /v1/log");
    let rows = log.to_string();
    assert!(
        rows.contains(r#""path":"out""#),
        "the symlink's creation is journaled: {rows}"
    );
    assert!(
        !rows.contains("new.txt"),
        "a write outside was journaled: {rows}"
    );
    // The API refuses to follow it.
    for path in ["/workspace/out/secret.txt", "/workspace/rel_out"] {
        let err = rt
            .block_on(client.post::<_, Value>("/v1/fs/read", &json!({"path": path})))
            .expect_err("a read through a link out of the zone");
        let text = format!("{err:?}");
        assert_eq!(
            err.code(),
            Some(wardfs::core::ErrorCode::OutsideZone),
            "{path}: {text}"
        );
        assert!(!text.contains("TOP-SECRET"), "{text}");
    }
}

/// An agent on the socket asks the daemon to pull a repository the daemon's user can read
/// anywhere (a path, a `file://` URL, a symlink into it): refused unless a person listed a
/// directory holding it in `git.local_remotes`, and nothing of it reaches the workspace.
#[test]
fn a_pull_of_a_local_repository_outside_git_local_remotes_is_refused() {
    let secrets = crate::support::git_servers::BareRepo::seeded(
        "secrets",
        &[("id_rsa", b"-----BEGIN PRIVATE KEY-----\n")],
    );
    let allowed = tempfile::tempdir().unwrap();
    let mine = crate::support::git_servers::BareRepo::new_in(allowed.path(), "mine");
    mine.seed(&[("a.txt", b"mine\n")]);
    symlink(secrets.path(), allowed.path().join("sneaky.git")).unwrap();
    let d = Daemon::git(
        &format!("local_remotes = [\"{}\"]\n", allowed.path().display()),
        None,
    );
    let refused = [
        secrets.path().display().to_string(),
        secrets.file_url(),
        allowed.path().join("sneaky.git").display().to_string(),
        format!("file://{}/sneaky.git", allowed.path().display()),
    ];
    for (i, remote) in refused.iter().enumerate() {
        let into = format!("/workspace/r{i}");
        let (status, body) = d.post("/v1/git/pull", &json!({ "remote": remote, "into": into }));
        assert_eq!(status, 400, "{remote}: {body}");
        assert_eq!(code(&body), "INVALID_ARGUMENT", "{body}");
        assert!(
            body["message"]
                .as_str()
                .unwrap()
                .contains("git.local_remotes"),
            "{body}"
        );
        assert!(!d.zone_dir("workspace").join(format!("r{i}")).exists());
    }
    // What a person listed is pulled.
    let r = d.ok(
        "/v1/git/pull",
        json!({ "remote": mine.path().display().to_string(), "into": "/workspace/mine" }),
    );
    assert_eq!(r["written"], 1);
    // And with nothing listed (the default), nothing local is pulled at all.
    let plain = Daemon::git("", None);
    let (status, body) = plain.post(
        "/v1/git/pull",
        &json!({ "remote": mine.path().display().to_string() }),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("refused"),
        "{body}"
    );
}

//! The sandbox wiring end to end: a real wardfs daemon (`wardfs serve --no-mount`) configured
//! with sandboxes that point at real sandbox-agents (started by `AgentServer` with --token and
//! --no-telemetry), driven through its CLI and API.
//! Tokens reach the daemon only through environment variables set on its process.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wardfs::core::ErrorCode;

use crate::support::sandbox_agent::AgentServer;
use crate::support::{Daemon, BIN};

/// The variables holding the tokens, in the daemon's environment only.
const TOKEN_A: &str = "WARDFS_TEST_SANDBOX_TOKEN_A";
const TOKEN_B: &str = "WARDFS_TEST_SANDBOX_TOKEN_B";

/// Starts a daemon (sandboxed zones under a temp dir, not mounted) with `extra` config appended
/// and `env` in its otherwise cleared environment; its log runs on across restarts.
fn daemon(extra: &str, env: &[(&str, &str)]) -> Daemon {
    Daemon::options()
        .prefix("wardfs-sbx")
        .config(&format!(
            "[api]\nsandbox_token_envs = [\"{TOKEN_A}\", \"{TOKEN_B}\", \"WARDFS_TEST_UNSET_VAR\"]\n\
             [zones]\nroot = \"root\"\n{extra}"
        ))
        .hermetic()
        .envs(env)
        .append_log()
        .start()
}

/// `[sandboxes.<name>]` for `server`, its token in `var`, with short retries and timeouts.
fn sandbox_config(name: &str, server: &AgentServer, var: &str) -> String {
    format!(
        "[sandboxes.{name}]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\ntoken_env = \"{var}\"\nroot = \"{}\"\nretries = 1\nretry_backoff_ms = 100\nrequest_timeout_secs = 2\n",
        server.url(),
        server.root()
    )
}

#[test]
fn sandboxes_are_added_checked_and_mirrored_and_survive_a_restart() {
    let a = AgentServer::start();
    let b = AgentServer::start();
    let mut d = daemon(
        &sandbox_config("dev", &a, TOKEN_A),
        &[(TOKEN_A, a.token()), (TOKEN_B, b.token())],
    );

    // The config's sandbox is listed before it is used; one is added at run time.
    assert_eq!(d.sandbox("dev")["status"], "creating");
    assert_eq!(d.sandbox("dev")["origin"], "config");
    let added = d.cli_json(&[
        "sandbox",
        "add",
        "other",
        "--provider",
        "sandbox-agent",
        "--url",
        &b.url(),
        "--token-env",
        TOKEN_B,
        "--root",
        &b.root(),
    ]);
    assert_eq!(added["origin"], "added");
    assert_eq!(added["token_env"], TOKEN_B);
    let list = d.cli_json(&["sandbox", "list"]);
    let names: Vec<&str> = list["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["dev", "other"]);
    let checked = d.cli_json(&["sandbox", "check", "dev"]);
    assert_eq!(checked["status"], "active", "{checked}");
    assert!(checked["last_accessed_at"].as_i64().unwrap() > 0);
    let checked = d.cli_json(&["sandbox", "check", "other"]);
    assert_eq!(checked["status"], "active", "{checked}");
    let status = d.cli_json(&["status"]);
    assert_eq!(
        status["sandboxes"],
        serde_json::json!([{"name": "dev", "status": "active"}, {"name": "other", "status": "active"}]),
        "{status}"
    );
    // A config sandbox is changed in the config, not by `sandbox add`.
    let (code, msg) = d.err(
        "/v1/sandboxes/add",
        json!({"name": "dev", "url": b.url(), "token_env": TOKEN_B}),
    );
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    let (code, msg) = d.err("/v1/sandboxes/check", json!({"name": "nope"}));
    assert_eq!(code, ErrorCode::NotFound);
    assert!(msg.contains("nope"), "{msg}");
    let (code, msg) = d.err(
        "/v1/sandboxes/add",
        json!({"name": "bad", "url": "http://x", "token_env": "sk-secret-value"}),
    );
    assert_eq!(code, ErrorCode::InvalidArgument);
    assert!(
        msg.contains("token_env") && !msg.contains("sk-secret-value"),
        "{msg}"
    );

    // First push: everything; after one edit through the API: exactly one file.
    for (p, c) in [
        ("/workspace/src/main.rs", "fn main() {}\n"),
        ("/workspace/src/lib.rs", "pub fn f() {}\n"),
        ("/workspace/README.md", "# demo\n"),
    ] {
        d.ok("/v1/fs/write", json!({"path": p, "content": c}));
    }
    let first = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(first["files_sent"], 3, "{first}");
    assert_eq!(
        std::fs::read_to_string(a.work().join("src/lib.rs")).unwrap(),
        "pub fn f() {}\n"
    );
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/src/lib.rs", "content": "pub fn f() -> u8 { 1 }\n"}),
    );
    let second = d.cli_json(&["mirror", "push", "dev", "--zone", "workspace"]);
    assert_eq!(second["files_sent"], 1, "{second}");
    assert_eq!(second["deleted"], 0, "{second}");
    assert_eq!(second["renamed"], 0, "{second}");
    assert_eq!(second["conflicts"], json!([]), "{second}");
    assert!(second["bytes_sent"].as_u64().unwrap() > 0);
    assert!(second["duration_ms"].is_u64());
    assert_eq!(
        std::fs::read_to_string(a.work().join("src/lib.rs")).unwrap(),
        "pub fn f() -> u8 { 1 }\n"
    );

    // The API streams progress when asked, ending with the summary.
    let c = d.client();
    let mut phases = Vec::new();
    let streamed: Value = d
        .rt()
        .block_on(c.post_progress(
            "/v1/mirror/push",
            &json!({"sandbox": "dev", "progress": true}),
            |p| phases.push(p["phase"].as_str().unwrap_or("").to_string()),
        ))
        .unwrap();
    assert_eq!(streamed["files_sent"], 0, "{streamed}");
    assert_eq!(phases, ["attach", "scan", "send"]);
    // With something to send, the counts run up to the totals (the cache zone into a directory
    // of its own, leaving the workspace's mirror as it is).
    d.ok(
        "/v1/fs/write",
        json!({"path": "/cache/streamed.txt", "content": "12345"}),
    );
    let cache_copy = format!("{}-cache", a.root());
    let mut lines: Vec<Value> = Vec::new();
    let streamed: Value = d
        .rt()
        .block_on(c.post_progress(
            "/v1/mirror/push",
            &json!({"sandbox": "dev", "zone": "cache", "to": cache_copy, "progress": true}),
            |p| lines.push(p.clone()),
        ))
        .unwrap();
    assert_eq!(streamed["files_sent"], 1, "{streamed}");
    let first_send = lines.iter().find(|p| p["phase"] == "send").unwrap();
    assert_eq!(
        (
            &first_send["files_done"],
            &first_send["files_total"],
            &first_send["bytes_total"]
        ),
        (&json!(0), &json!(1), &json!(5)),
        "{lines:?}"
    );
    let last = lines.last().unwrap();
    assert_eq!(
        (&last["phase"], &last["files_done"], &last["bytes_done"]),
        (&json!("send"), &json!(1), &json!(5)),
        "{lines:?}"
    );

    // The sandbox changes a file: pull brings exactly that one.
    std::fs::write(
        a.work().join("README.md"),
        "# demo, changed in the sandbox\n",
    )
    .unwrap();
    let pulled = d.cli_json(&["mirror", "pull", "dev"]);
    assert_eq!(pulled["files_received"], 1, "{pulled}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("README.md")).unwrap(),
        "# demo, changed in the sandbox\n"
    );
    // The pull is in the journal, like any change, naming the mirror as its origin.
    let log = d.cli_json(&["log", "--limit", "5"]).to_string();
    assert!(
        log.contains("README.md") && log.contains("mirror"),
        "the pulled file is not in the journal: {log}"
    );
    // A push to another remote directory is a mirror of its own.
    let to = format!("{}/elsewhere", b.root());
    let other = d.cli_json(&["mirror", "push", "other", "--to", &to]);
    assert_eq!(other["files_sent"], 3, "{other}");
    assert!(b.work().join("elsewhere/src/main.rs").is_file());

    // Restart: sessions and manifests survive; a push sends nothing.
    d.restart();
    let dev = d.sandbox("dev");
    assert_eq!(dev["status"], "paused", "{dev}");
    assert_eq!(dev["attached"], false, "{dev}");
    assert_eq!(d.sandbox("other")["origin"], "added");
    let again = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(again["files_sent"], 0, "{again}");
    assert_eq!(again["deleted"], 0, "{again}");
    let again = d.cli_json(&["mirror", "push", "other", "--to", &to]);
    assert_eq!(again["files_sent"], 0, "{again}");

    // Remove: only an added sandbox; the config's stays.
    d.cli_json(&["sandbox", "remove", "other"]);
    let (code, _) = d.err("/v1/sandboxes/check", json!({"name": "other"}));
    assert_eq!(code, ErrorCode::NotFound);
    let (code, _) = d.err("/v1/sandboxes/remove", json!({"name": "dev"}));
    assert_eq!(code, ErrorCode::InvalidArgument);
    let out = d.cli(&["mirror", "push", "other"]);
    assert_eq!(out.status.code(), Some(3), "NOT_FOUND exits 3");

    // The tokens are in no log line and no state file.
    let written = d.everything_written();
    for t in [a.token(), b.token()] {
        assert!(
            !written.windows(t.len()).any(|w| w == t.as_bytes()),
            "a token was written"
        );
    }
}

#[test]
fn a_wrong_token_is_auth_failed_at_once_and_never_retried() {
    let server = AgentServer::start();
    // Retries with a long backoff: a retry loop would take seconds.
    let config = format!(
        "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\ntoken_env = \"{TOKEN_A}\"\nroot = \"{}\"\nretries = 5\nretry_backoff_ms = 2000\n",
        server.url(),
        server.root()
    );
    let d = daemon(&config, &[(TOKEN_A, "wrong-token-42")]);
    let started = Instant::now();
    let (code, msg) = d.err("/v1/sandboxes/check", json!({"name": "dev"}));
    assert_eq!(code, ErrorCode::AuthFailed, "{msg}");
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "took {:?}",
        started.elapsed()
    );
    assert!(!msg.contains("wrong-token-42"), "{msg}");
    let dev = d.sandbox("dev");
    assert_eq!(dev["status"], "error", "{dev}");
    assert_eq!(dev["resume_fail_count"], 1, "{dev}");
    assert!(
        dev["last_error"].as_str().unwrap().contains("refused"),
        "{dev}"
    );
    // A push is refused the same way, and the CLI exits with the AUTH_FAILED class.
    let out = d.cli(&["mirror", "push", "dev"]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    // A variable that is not set is AUTH_FAILED too, naming the variable.
    d.ok(
        "/v1/sandboxes/add",
        json!({"name": "unset", "url": server.url(), "token_env": "WARDFS_TEST_UNSET_VAR"}),
    );
    let (code, msg) = d.err("/v1/sandboxes/check", json!({"name": "unset"}));
    assert_eq!(code, ErrorCode::AuthFailed, "{msg}");
    assert!(msg.contains("WARDFS_TEST_UNSET_VAR"), "{msg}");
}

#[test]
fn a_server_down_is_unavailable_in_time_and_recovers() {
    let a = AgentServer::start();
    let mut b = AgentServer::start();
    let d = daemon(
        &sandbox_config("dev", &a, TOKEN_A),
        &[(TOKEN_A, a.token()), (TOKEN_B, b.token())],
    );
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/a.txt", "content": "a\n"}),
    );
    assert_eq!(
        d.ok("/v1/mirror/push", json!({"sandbox": "dev"}))["files_sent"],
        1
    );

    // A hung server: every attempt times out (2 s), one retry, then SANDBOX_UNAVAILABLE.
    a.pause();
    let started = Instant::now();
    let (code, msg) = d.err("/v1/mirror/push", json!({"sandbox": "dev"}));
    let took = started.elapsed();
    assert_eq!(code, ErrorCode::SandboxUnavailable, "{msg}");
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(msg.contains("2 attempts"), "{msg}");
    let dev = d.sandbox("dev");
    assert_eq!(dev["status"], "error", "{dev}");
    assert!(dev["last_error"].as_str().is_some(), "{dev}");
    // Back: the next use recovers (the failure count resets).
    a.resume();
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/b.txt", "content": "b\n"}),
    );
    let pushed = d.ok("/v1/mirror/push", json!({"sandbox": "dev"}));
    assert_eq!(pushed["files_sent"], 1, "{pushed}");
    let dev = d.sandbox("dev");
    assert_eq!(dev["status"], "active", "{dev}");
    assert_eq!(dev["resume_fail_count"], 0, "{dev}");
    assert_eq!(dev["last_error"], Value::Null, "{dev}");

    // A killed server is unavailable at once; a new server under the same name takes over.
    d.ok(
        "/v1/sandboxes/add",
        json!({"name": "live", "url": b.url(), "token_env": TOKEN_B, "root": b.root(),
               "retries": 1, "retry_backoff_ms": 50}),
    );
    assert_eq!(
        d.ok("/v1/mirror/push", json!({"sandbox": "live"}))["files_sent"],
        2
    );
    b.kill();
    let started = Instant::now();
    let (code, msg) = d.err("/v1/mirror/push", json!({"sandbox": "live"}));
    assert_eq!(code, ErrorCode::SandboxUnavailable, "{msg}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let out = d.cli(&["sandbox", "check", "live"]);
    assert_eq!(out.status.code(), Some(8), "{out:?}");
    assert_eq!(d.sandbox("live")["status"], "error");
    d.ok(
        "/v1/sandboxes/add",
        json!({"name": "live", "url": a.url(), "token_env": TOKEN_A, "root": format!("{}/live", a.root())}),
    );
    let checked = d.ok("/v1/sandboxes/check", json!({"name": "live"}));
    assert_eq!(checked["status"], "active", "{checked}");
    let pushed = d.ok("/v1/mirror/push", json!({"sandbox": "live"}));
    assert_eq!(pushed["files_sent"], 2, "{pushed}");
    assert!(a.work().join("live/b.txt").is_file());
}

#[test]
fn mirror_push_watch_pushes_each_settled_change_until_interrupted() {
    let a = AgentServer::start();
    let d = daemon(&sandbox_config("dev", &a, TOKEN_A), &[(TOKEN_A, a.token())]);
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/first.txt", "content": "one\n"}),
    );
    let mut watcher = Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args([
            "--json",
            "mirror",
            "push",
            "dev",
            "--watch",
            "--debounce-ms",
            "200",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let remote = PathBuf::from(a.root());
    let within = |what: &str, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if check() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what} did not reach the sandbox within 10 s");
    };
    within("the first push", &|| remote.join("first.txt").exists());
    // A burst of edits through the API: pushed once they settle.
    for i in 0..5 {
        d.ok(
            "/v1/fs/write",
            json!({"path": "/workspace/second.txt", "content": format!("v{i}\n")}),
        );
    }
    within("the settled burst", &|| {
        std::fs::read_to_string(remote.join("second.txt"))
            .ok()
            .as_deref()
            == Some("v4\n")
    });
    d.ok("/v1/fs/delete", json!({"path": "/workspace/first.txt"}));
    within("a delete", &|| !remote.join("first.txt").exists());
    // Ctrl-C ends the watch with success; every push printed its summary.
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&watcher),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(st) = watcher.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "--watch did not stop on SIGINT");
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = watcher.wait_with_output().unwrap();
    assert!(
        status.success(),
        "{status}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summaries: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(summaries.len() >= 3, "{summaries:?}");
    assert_eq!(summaries[0]["files_sent"], 1, "{summaries:?}");
    let sent: u64 = summaries
        .iter()
        .map(|s| s["files_sent"].as_u64().unwrap())
        .sum();
    let deleted: u64 = summaries
        .iter()
        .map(|s| s["deleted"].as_u64().unwrap())
        .sum();
    // The burst of five writes went out as few pushes, not five.
    assert!(sent <= 3, "{summaries:?}");
    assert_eq!(deleted, 1, "{summaries:?}");
}

//! Secrets: the sandbox token and the git token reach the daemon only through its environment
//! and must never show up in its log, its state database, an error message, or the command
//! line and environment of anything it runs.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::support::api::code;
use crate::support::sandbox_agent::AgentServer;
use crate::support::tools::random_hex;
use crate::support::Daemon;

/// Every file under `dir`, read whole (the state database, its WAL and everything else).
fn files_under(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            files_under(&p, out);
        } else if meta.is_file() {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The pids of `pid`'s children, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let list = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            out.extend(
                list.split_whitespace()
                    .filter_map(|s| s.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// Asserts that none of `secrets` is in the daemon's log, state dir, or any process it runs.
fn assert_nowhere(d: &Daemon, secrets: &[String]) {
    let log = d.log_text();
    let mut files = Vec::new();
    files_under(&d.dir.path().join("state"), &mut files);
    assert!(
        files.iter().any(|(p, _)| p.ends_with("state.db")),
        "no state.db under the state dir: {:?}",
        files.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", d.pid())).unwrap();
    for s in secrets {
        assert!(
            !log.contains(s.as_str()),
            "secret in the daemon log:\n{log}"
        );
        for (p, bytes) in &files {
            assert!(!contains(bytes, s), "secret in {p}");
        }
        assert!(
            !contains(&cmdline, s),
            "secret in the daemon's command line"
        );
        for child in children(d.pid()) {
            for what in ["cmdline", "environ"] {
                let bytes = std::fs::read(format!("/proc/{child}/{what}")).unwrap_or_default();
                assert!(!contains(&bytes, s), "secret in /proc/{child}/{what}");
            }
        }
    }
}

/// A git "server" that answers every request with 401 and a Basic challenge, recording the
/// requests, so the daemon's credential callback sends (and keeps being refused) the token.
fn refusing_git_server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { return };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !contains(&buf, "\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            record
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf).into_owned());
            let _ = s.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\n\
                  Content-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    (port, seen)
}

#[test]
fn tokens_never_reach_logs_the_database_errors_or_processes() {
    const SANDBOX_VAR: &str = "WARDFS_SECURITY_SANDBOX_TOKEN";
    const WRONG_VAR: &str = "WARDFS_SECURITY_WRONG_TOKEN";
    const GIT_VAR: &str = "WARDFS_SECURITY_GIT_TOKEN";
    let server = AgentServer::start();
    let wrong = format!("wrong-sandbox-token-{}", random_hex());
    let git_token = format!("git-token-{}", random_hex());
    std::env::set_var(SANDBOX_VAR, server.token());
    std::env::set_var(WRONG_VAR, &wrong);
    std::env::set_var(GIT_VAR, &git_token);
    let (git_port, git_requests) = refusing_git_server();
    let d = Daemon::start(&format!(
        "[git]\ntoken_env = \"{GIT_VAR}\"\ntoken_hosts = [\"127.0.0.1\"]\ntoken_over_http = true\n\
         [sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{url}\"\ntoken_env = \"{SANDBOX_VAR}\"\nroot = \"{root}\"\nretries = 1\n\
         [sandboxes.wrong]\nprovider = \"sandbox-agent\"\nurl = \"{url}\"\ntoken_env = \"{WRONG_VAR}\"\nroot = \"{root}\"\nretries = 1\n",
        url = server.url(),
        root = server.root()
    ));

    // The right token works: a push and a pull.
    let (status, v) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/a.txt", "content": "a\n"}),
    );
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.post("/v1/mirror/push", &json!({"sandbox": "dev"}));
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.post("/v1/mirror/pull", &json!({"sandbox": "dev"}));
    assert_eq!(status, 200, "{v}");
    let (status, v) = d.post("/v1/sandboxes/check", &json!({"name": "dev"}));
    assert_eq!(status, 200, "{v}");
    // A wrong token is refused; the error does not echo it.
    let (status, v) = d.post("/v1/sandboxes/check", &json!({"name": "wrong"}));
    assert_eq!(code(&v), "AUTH_FAILED", "{status} {v}");
    let (_, list) = d.curl("GET", "/v1/sandboxes", None);
    let list = String::from_utf8_lossy(&list).into_owned();
    let cli = d.cli(&["mirror", "push", "wrong"]);
    assert!(!cli.status.success());

    // Git: the token is sent (Basic auth) and refused; nothing repeats it.
    let remote = format!("http://127.0.0.1:{git_port}/secret/repo.git");
    let (status, git_err) = d.post("/v1/git/pull", &json!({"remote": remote}));
    assert!(status >= 400, "{git_err}");
    assert_eq!(code(&git_err), "AUTH_FAILED", "{git_err}");
    let sent = git_requests.lock().unwrap().join("\n");
    assert!(
        sent.to_ascii_lowercase().contains("authorization: basic"),
        "the git token was never offered, so this test proves nothing:\n{sent}"
    );
    let git_cli = d.cli(&["git", "pull", &remote]);
    assert!(!git_cli.status.success());

    let mut secrets = vec![server.token().to_string(), wrong, git_token];
    // The Basic-auth form of the git token too.
    for line in sent.lines() {
        if let Some(b64) = line.strip_prefix("Authorization: Basic ") {
            secrets.push(b64.trim().to_string());
        }
    }
    for s in &secrets {
        for text in [
            v.to_string(),
            list.to_string(),
            git_err.to_string(),
            String::from_utf8_lossy(&cli.stdout).into_owned(),
            String::from_utf8_lossy(&cli.stderr).into_owned(),
            String::from_utf8_lossy(&git_cli.stdout).into_owned(),
            String::from_utf8_lossy(&git_cli.stderr).into_owned(),
        ] {
            assert!(!text.contains(s.as_str()), "secret in an answer: {text}");
        }
    }
    assert_nowhere(&d, &secrets);
}

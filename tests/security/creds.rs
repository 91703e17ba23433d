//! Credentials are bound to their hosts: an agent that can reach the socket must not be able to
//! make the daemon send the person's tokens to a server of its choosing (issue 11, item 5).
//!
//! Each test runs a capture server on loopback that records every request it receives, points
//! the daemon at it the way an agent could, and asserts the token never arrives; a positive
//! control in each shows the capture would have seen it.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::support::api::code;
use crate::support::tools::random_hex;
use crate::support::Daemon;

/// A loopback server answering every request with `answer` (built from its own port), recording
/// each request's head (request line and headers).
struct Capture {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Capture {
    fn start(answer: impl Fn(u16) -> String + Send + 'static) -> Capture {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 1 << 20 {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                record
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buf).into_owned());
                let _ = s.write_all(answer(port).as_bytes());
            }
        });
        Capture { port, seen }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything received so far, one request head after another.
    fn received(&self) -> String {
        self.seen.lock().unwrap().join("\n")
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// A JSON 200 answer, as a healthy server would give.
fn ok_answer(_: u16) -> String {
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
        .to_string()
}

/// A 401 with a Basic challenge: what makes libgit2 ask the credential callback.
fn basic_challenge(_: u16) -> String {
    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        .to_string()
}

#[test]
fn an_agent_cannot_point_a_sandbox_at_the_persons_token() {
    // The person's GitHub token, in the daemon's environment, as in the report.
    let token = format!("ghp_{}", random_hex());
    std::env::set_var("GITHUB_TOKEN", &token);
    const AGENT_VAR: &str = "WARDFS_SECURITY_AGENT_SANDBOX_TOKEN";
    let agent_token = format!("agent-sandbox-token-{}", random_hex());
    std::env::set_var(AGENT_VAR, &agent_token);
    let evil = Capture::start(ok_answer);
    let mut d = Daemon::start(&format!("[api]\nsandbox_token_envs = [\"{AGENT_VAR}\"]\n"));

    // Through the API: refused, naming the variable and the rule.
    let (status, v) = d.post(
        "/v1/sandboxes/add",
        &json!({"name": "evil", "url": evil.url(), "token_env": "GITHUB_TOKEN"}),
    );
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("GITHUB_TOKEN") && msg.contains("api.sandbox_token_envs"),
        "{msg}"
    );
    // Through the CLI (which goes through the API): the same.
    let out = d.cli(&[
        "sandbox",
        "add",
        "evil",
        "--url",
        &evil.url(),
        "--token-env",
        "GITHUB_TOKEN",
    ]);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("api.sandbox_token_envs"),
        "{out:?}"
    );
    let (status, v) = d.post("/v1/sandboxes/check", &json!({"name": "evil"}));
    assert_eq!((status, code(&v)), (404, "NOT_FOUND"), "{v}");
    // Plain http to a host that is not loopback is refused too, before anything is sent.
    let (status, v) = d.post(
        "/v1/sandboxes/add",
        &json!({"name": "far", "url": "http://192.0.2.7:2468"}),
    );
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("api.sandbox_http_hosts"),
        "{v}"
    );
    assert_eq!(evil.requests(), 0, "{}", evil.received());

    // Positive control: a variable the config allows is added and its token is sent.
    let (status, v) = d.post(
        "/v1/sandboxes/add",
        &json!({"name": "allowed", "url": evil.url(), "token_env": AGENT_VAR}),
    );
    assert_eq!(status, 200, "{v}");
    let _ = d.post("/v1/sandboxes/check", &json!({"name": "allowed"}));
    assert!(
        evil.received().contains(&agent_token),
        "the capture never saw the allowed token, so it proves nothing:\n{}",
        evil.received()
    );

    // A sandbox added while the config allowed GITHUB_TOKEN stays in the state database; once
    // the config no longer allows it, it is not used with that token any more.
    let config = d.dir.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace(
            &format!("[\"{AGENT_VAR}\"]"),
            &format!("[\"{AGENT_VAR}\", \"GITHUB_TOKEN\"]"),
        ),
    )
    .unwrap();
    d.respawn();
    let (status, v) = d.post(
        "/v1/sandboxes/add",
        &json!({"name": "stale", "url": evil.url(), "token_env": "GITHUB_TOKEN"}),
    );
    assert_eq!(status, 200, "{v}");
    std::fs::write(&config, text).unwrap();
    d.respawn();
    let before = evil.requests();
    let (status, v) = d.post("/v1/sandboxes/check", &json!({"name": "stale"}));
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("GITHUB_TOKEN"),
        "{v}"
    );
    assert_eq!(evil.requests(), before, "{}", evil.received());
    assert!(
        !evil.received().contains(&token),
        "the person's token reached the agent's server:\n{}",
        evil.received()
    );
}

#[test]
fn a_sandbox_redirect_never_carries_its_token_elsewhere() {
    const VAR: &str = "WARDFS_SECURITY_REDIRECTED_TOKEN";
    let token = format!("sandbox-token-{}", random_hex());
    std::env::set_var(VAR, &token);
    let elsewhere = Capture::start(ok_answer);
    let target = elsewhere.port;
    // The sandbox's server sends every request on to another host:port.
    let sandbox = Capture::start(move |_| {
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:{target}/v1/health\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    });
    let d = Daemon::start(&format!(
        "[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\ntoken_env = \"{VAR}\"\nretries = 0\nrequest_timeout_secs = 5\n",
        sandbox.url()
    ));
    let (status, v) = d.post("/v1/sandboxes/check", &json!({"name": "dev"}));
    assert!(status >= 400, "a redirect is no healthy answer: {v}");
    assert!(
        sandbox.received().contains(&token),
        "the sandbox's own server never got its token, so this proves nothing:\n{}",
        sandbox.received()
    );
    assert!(
        !elsewhere.received().contains(&token),
        "the token followed the redirect:\n{}",
        elsewhere.received()
    );
}

#[test]
fn the_git_token_goes_only_to_listed_hosts_over_https() {
    const VAR: &str = "WARDFS_SECURITY_BOUND_GIT_TOKEN";
    let token = format!("git-token-{}", random_hex());
    std::env::set_var(VAR, &token);
    let server = Capture::start(basic_challenge);
    let remote = format!("{}/o/r.git", server.url());
    let pull = |d: &Daemon| d.post("/v1/git/pull", &json!({"remote": remote}));

    // The default: the token goes to github.com over https only.
    let d = Daemon::start(&format!("[git]\ntoken_env = \"{VAR}\"\n"));
    let (status, v) = pull(&d);
    assert_eq!((status, code(&v)), (401, "AUTH_FAILED"), "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("git.token_hosts"),
        "{v}"
    );
    // Another host listed, and http allowed for loopback: still not this one.
    let d = Daemon::start(&format!(
        "[git]\ntoken_env = \"{VAR}\"\ntoken_hosts = [\"127.0.0.2\", \"127.0.0.1:1\"]\ntoken_over_http = true\n"
    ));
    let (status, v) = pull(&d);
    assert_eq!((status, code(&v)), (401, "AUTH_FAILED"), "{v}");
    // This host listed, but plain http not allowed: no token either.
    let d = Daemon::start(&format!(
        "[git]\ntoken_env = \"{VAR}\"\ntoken_hosts = [\"127.0.0.1\"]\n"
    ));
    let (status, v) = pull(&d);
    assert_eq!((status, code(&v)), (401, "AUTH_FAILED"), "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("git.token_over_http"),
        "{v}"
    );
    assert!(server.requests() >= 3, "{}", server.received());
    assert!(
        !server
            .received()
            .to_ascii_lowercase()
            .contains("authorization:"),
        "credentials went to a host the config does not list:\n{}",
        server.received()
    );

    // Positive control: listed and allowed over loopback http, the token is offered.
    let d = Daemon::start(&format!(
        "[git]\ntoken_env = \"{VAR}\"\ntoken_hosts = [\"127.0.0.1\"]\ntoken_over_http = true\n"
    ));
    let (status, v) = pull(&d);
    assert_eq!((status, code(&v)), (401, "AUTH_FAILED"), "{v}");
    assert!(
        server
            .received()
            .to_ascii_lowercase()
            .contains("authorization: basic"),
        "the listed host never got the token, so this test proves nothing:\n{}",
        server.received()
    );

    // Plain http to a host that is not loopback is refused before anything is sent.
    let (status, v) = d.post(
        "/v1/git/pull",
        &json!({"remote": "http://192.0.2.7/o/r.git"}),
    );
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    assert!(
        v["message"].as_str().unwrap().contains("git.http_hosts"),
        "{v}"
    );
}

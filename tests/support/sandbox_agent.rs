//! The real `sandbox-agent` 0.4.2 server for the tests that mirror to a sandbox (the sandbox,
//! reliability and security areas), started with --no-telemetry:
//! the only safe way (`--token`, 127.0.0.1, a loopback-only namespace).
//!
//! sandbox-agent beacons to the internet unless told not to, and some of its routes download
//! coding agents. So every server here is started
//! * from the binary `.ci/install-deps test` installs (checked to be version 0.4.2),
//! * with `server --token <random> --no-telemetry --host 127.0.0.1 --port <free port>`,
//! * with a cleared environment (only `HOME`, a fresh temp dir, and `PATH`),
//! * inside a network namespace that has nothing but loopback, shared with this test process:
//!   [`require_loopback_only`] checks that before anything starts and fails the test, loudly and
//!   with the command to use, when it is not so. Nothing is ever skipped.
//!
//! Each [`AgentServer`] has its own temp dir (`home/` for the server, `work/` for the test's
//! files — the server runs on this machine, so a test can check with `std::fs` what the
//! provider did), runs in its own process group, and is killed (`SIGKILL`, by PID) and reaped
//! when dropped, also when the test panics. The tests never call `/v1/agents` or `/v1/acp`.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wardfs::sandbox::{SandboxAgent, SandboxAgentConfig, Token};

use super::tools::{free_port, random_hex};

/// The version the provider was measured against.
pub const AGENT_VERSION: &str = "0.4.2";
/// How long a server may take to answer its health check after starting.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a start is retried when the free port was taken in the meantime.
const START_ATTEMPTS: usize = 5;

const HOW_TO_RUN: &str = "run the sandbox tests inside a loopback-only network namespace \
(as root): `cargo test --test main sandbox:: --no-run && unshare -n sh -c 'ip link set lo up && exec \
cargo test --offline --test main sandbox::'` — `make test` does this for the whole suite";

/// Panics unless this process is in a network namespace whose only interface is `lo`, and
/// `lo` is up: the real sandbox-agent must never be able to reach anything but this machine.
pub fn require_loopback_only() {
    // /proc/self/net follows the process's network namespace (sysfs would show the namespace
    // it was mounted in).
    let dev = std::fs::read_to_string("/proc/self/net/dev")
        .unwrap_or_else(|e| panic!("cannot read /proc/self/net/dev ({e}); {HOW_TO_RUN}"));
    let interfaces: Vec<&str> = dev
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    if interfaces != ["lo"] {
        panic!(
            "refusing to start sandbox-agent: this test process can reach network interfaces \
             {interfaces:?}, not only loopback; {HOW_TO_RUN}"
        );
    }
    let probe = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| TcpStream::connect(l.local_addr()?));
    if let Err(e) = probe {
        panic!("loopback is down in this network namespace ({e}): `ip link set lo up` first; {HOW_TO_RUN}");
    }
}

/// Returns the sandbox-agent binary: `$SANDBOX_AGENT_BIN`, else the one on `PATH`, else the
/// places `.ci/install-deps test` installs it; checked to be version 0.4.2.
pub fn agent_binary() -> PathBuf {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(bin) = std::env::var_os("SANDBOX_AGENT_BIN") {
        candidates.push(bin.into());
    }
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("sandbox-agent")));
    }
    candidates.push("/usr/local/bin/sandbox-agent".into());
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".local/bin/sandbox-agent"));
    }
    let Some(bin) = candidates.into_iter().find(|p| p.is_file()) else {
        panic!("sandbox-agent is not installed: run `.ci/install-deps test` (it installs {AGENT_VERSION} from npm)");
    };
    // `--version` starts no server and sends nothing; `--no-telemetry` is a flag of `server` only
    // (the CLI refuses it here). It still runs only in the loopback-only namespace, with a cleared
    // environment and a temp HOME, like the server.
    require_loopback_only();
    let home = tempfile::tempdir().expect("temp dir");
    let out = Command::new(&bin)
        .arg("--version")
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .current_dir(home.path())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()));
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        version,
        format!("sandbox-agent {AGENT_VERSION}"),
        "{} is not sandbox-agent {AGENT_VERSION}: run `.ci/install-deps test`",
        bin.display()
    );
    bin
}

/// One running sandbox-agent (--token, --no-telemetry, 127.0.0.1) with its temp dir.
pub struct AgentServer {
    child: Option<Child>,
    port: u16,
    token: String,
    dir: tempfile::TempDir,
}

impl AgentServer {
    /// Starts a server (after checking the network namespace) and waits until it answers.
    pub fn start() -> AgentServer {
        AgentServer::start_with_token(&random_hex())
    }

    /// Like [`AgentServer::start`], with the token a provider chose (what a provisioner passes
    /// to `sandbox-agent server --token` inside a sandbox).
    pub fn start_with_token(token: &str) -> AgentServer {
        let bin = agent_binary();
        let mut dir = tempfile::tempdir().expect("temp dir");
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        let token = token.to_string();
        for attempt in 1..=START_ATTEMPTS {
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("server.log")).unwrap();
            let child = Command::new(&bin)
                .args([
                    "server",
                    "--token",
                    &token,
                    "--no-telemetry",
                    "--host",
                    "127.0.0.1",
                ])
                .args(["--port", &port.to_string()])
                .env_clear()
                .env("HOME", &home)
                .env("PATH", "/usr/bin:/bin")
                .current_dir(&home)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let mut server = AgentServer {
                child: Some(child),
                port,
                token: token.clone(),
                dir,
            };
            if server.wait_ready() {
                return server;
            }
            let log = server.log();
            server.kill();
            assert!(
                attempt < START_ATTEMPTS,
                "sandbox-agent did not come up on 127.0.0.1:{port}; its log:\n{log}"
            );
            dir = std::mem::replace(&mut server.dir, tempfile::tempdir().unwrap());
        }
        unreachable!()
    }

    /// Polls the health route until it answers 200; false when the server died or timed out.
    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    return false;
                }
            }
            if self.health_status() == Some(200) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Sends `GET /v1/health` with the token over a plain socket; returns the status.
    fn health_status(&self) -> Option<u16> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        write!(
            s,
            "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            self.token
        )
        .ok()?;
        let mut answer = String::new();
        s.read_to_string(&mut answer).ok()?;
        answer.split_whitespace().nth(1)?.parse().ok()
    }

    /// Returns the server's base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Returns the token the server accepts.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Returns the directory the tests work in (the same path for the server and for `std::fs`).
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// Returns [`AgentServer::work`] as the remote path string the provider takes.
    pub fn root(&self) -> String {
        self.work().to_str().expect("UTF-8 temp dir").to_string()
    }

    /// Returns a provider config for this server with short timeouts (5 s per request).
    pub fn config(&self) -> SandboxAgentConfig {
        let mut config = SandboxAgentConfig::new(self.url());
        config.request_timeout = Duration::from_secs(5);
        config.connect_timeout = Duration::from_secs(2);
        config.exec_timeout = Duration::from_secs(30);
        config
    }

    /// Returns a provider for this server with the right token.
    pub fn provider(&self) -> SandboxAgent {
        SandboxAgent::with_token(&self.config(), Some(Token::new(self.token.clone())))
            .expect("provider")
    }

    /// Returns the server's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // The server runs in its own process group; signal all of it.
            unsafe { libc::kill(-(child.id() as i32), signal) };
        }
    }

    /// Stops the server without ending it (`SIGSTOP`): it accepts connections and never answers.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
        // kill() returns before the target has stopped; wait until it has.
        let Some(child) = &self.child else { return };
        let status = format!("/proc/{}/status", child.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            let state = std::fs::read_to_string(&status).unwrap_or_default();
            if state
                .lines()
                .any(|l| l.starts_with("State:") && l.contains("stopped"))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("sandbox-agent did not stop after SIGSTOP");
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Kills the server (`SIGKILL`, by PID, the whole group) and reaps it.
    pub fn kill(&mut self) {
        self.signal(libc::SIGKILL);
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for AgentServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a [`HostileServer`] answers to one request.
pub enum Answer {
    /// `200 OK` with a chunked JSON body that never ends (until the client hangs up).
    Endless,
    /// `200 OK` with this JSON body.
    Json(String),
    /// `200 OK` with this body (its length announced), sent one byte a second.
    Drip(&'static str),
    /// `200 OK` with a walk listing of about this many bytes (chunked): `find -printf` records
    /// of files with distinct names, as short as they come (`f 644 1 1 n1f\0\0`, 16–19 bytes).
    Listing(u64),
}

/// A fake sandbox-agent on 127.0.0.1 that answers as `answer` says (from the request line,
/// `GET /v1/fs/stat?path=/x HTTP/1.1`): the hostile sandbox of the memory and name tests.
/// `sent` counts the body bytes it managed to write, so a test can tell that the client stopped
/// reading. Its threads end when their client hangs up; the listener lives with the process.
pub struct HostileServer {
    pub url: String,
    pub sent: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl HostileServer {
    pub fn start(answer: fn(&str) -> Answer) -> HostileServer {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let url = format!("http://{}", listener.local_addr().unwrap());
        let sent = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = sent.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let counter = counter.clone();
                std::thread::spawn(move || serve_hostile(stream, answer, &counter));
            }
        });
        HostileServer { url, sent }
    }

    /// A provider for this server, with `max_answer` as its answer cap.
    pub fn provider(&self, max_answer: u64) -> SandboxAgent {
        let mut config = SandboxAgentConfig::new(self.url.clone());
        config.request_timeout = Duration::from_secs(20);
        config.connect_timeout = Duration::from_secs(2);
        config.max_answer_bytes = max_answer;
        SandboxAgent::with_token(&config, None).expect("provider")
    }
}

fn serve_hostile(
    mut stream: TcpStream,
    answer: fn(&str) -> Answer,
    sent: &std::sync::atomic::AtomicU64,
) {
    use std::sync::atomic::Ordering;
    loop {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte) {
                Ok(1) => head.push(byte[0]),
                _ => return,
            }
        }
        let text = String::from_utf8_lossy(&head);
        let line = text.lines().next().unwrap_or("").to_string();
        match answer(&line) {
            Answer::Json(body) => {
                let reply = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if stream.write_all(reply.as_bytes()).is_err() {
                    return;
                }
                sent.fetch_add(body.len() as u64, Ordering::Relaxed);
            }
            Answer::Drip(body) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for byte in body.bytes() {
                    std::thread::sleep(Duration::from_secs(1));
                    if stream.write_all(&[byte]).is_err() {
                        return;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            Answer::Listing(bytes) => {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let (mut n, mut written) = (0u64, 0u64);
                let mut chunk = String::new();
                while written < bytes {
                    chunk.clear();
                    while chunk.len() < 64 << 10 {
                        chunk.push_str(&format!("f 644 1 1 n{n:x}\0\0"));
                        n += 1;
                    }
                    let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                    if stream.write_all(framed.as_bytes()).is_err() {
                        return;
                    }
                    written += chunk.len() as u64;
                    sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
                if stream.write_all(b"0\r\n\r\n").is_err() {
                    return;
                }
            }
            Answer::Endless => {
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n[\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let chunk = "{\"name\":\"a\",\"entryType\":\"file\",\"size\":1},".repeat(1500);
                let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
                while stream.write_all(framed.as_bytes()).is_ok() {
                    sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
                return;
            }
        }
    }
}

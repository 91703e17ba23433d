//! A sandfs daemon for the git tests: private config, socket, state and a hermetic environment
//! (temp HOME, no user git config, the token variable only when a test sets it); killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sandfs::client::{Client, ClientError};
use sandfs::core::ErrorCode;
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_sandfs");

/// The variable the tests' config names in `git.token_env`.
pub const TOKEN_VAR: &str = "SANDFS_TEST_GIT_TOKEN";

pub struct Daemon {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
    token: Option<String>,
    rt: tokio::runtime::Runtime,
}

impl Daemon {
    /// Starts a daemon (sandboxed zones under a temp dir) with `extra` config appended; `token`
    /// is put in the daemon's environment as [`TOKEN_VAR`]. The test servers listen on
    /// 127.0.0.1 over plain http, so the config lets the token go there (`git.token_hosts`,
    /// `git.token_over_http`).
    pub fn start(extra: &str, token: Option<&str>) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sandfs-git")
            .tempdir()
            .unwrap();
        let socket = dir.path().join("run/s.sock");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = \"state\"\nsocket = \"{}\"\n[zones]\nroot = \"root\"\n[git]\ntoken_env = \"{TOKEN_VAR}\"\ntoken_user = \"sandfs\"\n\
                 token_hosts = [\"127.0.0.1\"]\ntoken_over_http = true\n{extra}",
                socket.display()
            ),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        let mut d = Daemon {
            child: None,
            log: dir.path().join("daemon.log"),
            dir,
            socket,
            config,
            token: token.map(String::from),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        };
        d.spawn();
        d
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--no-mount", "--config"])
            .arg(&self.config)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.dir.path().join("home"))
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(t) = &self.token {
            cmd.env(TOKEN_VAR, t);
        }
        self.child = Some(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {st}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon did not listen within 20 s: {}", self.log_text());
    }

    /// Stops the daemon (SIGTERM) and starts it again on the same state.
    pub fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            let _ = c.wait();
        }
        self.spawn();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The backing directory of /workspace.
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("root/workspace")
    }

    /// POSTs JSON to the API; the answer, or the error's code and message.
    pub fn post(&self, route: &str, body: Value) -> Result<Value, (ErrorCode, String)> {
        let c = Client::new(&self.socket);
        self.rt
            .block_on(c.post::<_, Value>(route, &body))
            .map_err(|e| match e {
                ClientError::Api { code, message, .. } => (code, message),
                other => panic!("{route}: {other}\n{}", self.log_text()),
            })
    }

    /// Like `post`, but the call must succeed.
    pub fn ok(&self, route: &str, body: Value) -> Value {
        self.post(route, body.clone())
            .unwrap_or_else(|e| panic!("{route} {body}: {e:?}\n{}", self.log_text()))
    }

    /// Like `post`, but the call must fail; returns the code and message.
    pub fn err(&self, route: &str, body: Value) -> (ErrorCode, String) {
        match self.post(route, body.clone()) {
            Ok(v) => panic!("{route} {body} succeeded: {v}"),
            Err(e) => e,
        }
    }

    /// GETs a route.
    pub fn get(&self, route: &str) -> Value {
        let c = Client::new(&self.socket);
        self.rt
            .block_on(c.get::<Value>(route))
            .unwrap_or_else(|e| panic!("{route}: {e}"))
    }

    /// Runs the CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap()
    }

    /// Writes a workspace file through the API.
    pub fn write(&self, path: &str, content: &str) {
        self.ok(
            "/v1/fs/write",
            serde_json::json!({ "path": path, "content": content }),
        );
    }

    /// Reads a workspace file from the backing dir.
    pub fn read(&self, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(self.workspace().join(rel)).ok()
    }

    /// Every byte the daemon wrote: its log and its state directory (to look for secrets).
    pub fn everything_written(&self) -> Vec<u8> {
        let mut out = std::fs::read(&self.log).unwrap_or_default();
        let mut stack = vec![self.dir.path().join("state")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if let Ok(b) = std::fs::read(&p) {
                    out.extend_from_slice(&b);
                }
            }
        }
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Whether `hay` contains `needle`.
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

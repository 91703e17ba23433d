//! Test harness: starts a daemon with a private config, socket and state, and kills it on drop.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_sandfs");

/// Fails the test with a message naming the tool to install.
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    found.unwrap_or_else(|| {
        panic!("`{name}` is not installed; install it with `apt-get install {package}` (make test does this)")
    })
}

/// A running daemon.
pub struct Daemon {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Starts a daemon in sandboxed mode under a temp dir; `extra` is appended to the config.
    pub fn start(extra: &str) -> Daemon {
        Daemon::start_config(&format!(
            "[zones]\nmode = \"sandboxed\"\nroot = \"root\"\n{extra}"
        ))
    }

    /// Starts a daemon with the given config text (relative paths resolve in the temp dir).
    pub fn start_config(config: &str) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sandfs-test")
            .tempdir()
            .unwrap();
        let socket = dir.path().join("run/sandfs.sock");
        let cfg_path = dir.path().join("config.toml");
        std::fs::write(
            &cfg_path,
            format!(
                "state_dir = \"state\"\nsocket = \"{}\"\n{config}",
                socket.display()
            ),
        )
        .unwrap();
        let mut d = Daemon {
            child: None,
            socket,
            config: cfg_path,
            log: dir.path().join("daemon.log"),
            dir,
        };
        d.spawn();
        d
    }

    /// Starts the daemon again with the same config (after a crash or a stop).
    pub fn respawn(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.spawn();
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--no-mount", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .env_remove("SANDFS_SOCKET")
            .env_remove("SANDFS_CONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {status}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("daemon did not listen within 15 s: {}", self.log_text());
    }

    /// Returns the daemon's log so far.
    pub fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    /// Returns the pid of the daemon.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// The real directory of a zone.
    pub fn zone_dir(&self, zone: &str) -> PathBuf {
        self.dir.path().join("root").join(zone)
    }

    /// Runs the CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_stdin(args, None)
    }

    /// Runs the CLI with bytes on stdin.
    pub fn cli_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.arg("--socket").arg(&self.socket).args(args);
        cmd.env_remove("SANDFS_CONFIG");
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(bytes) = stdin {
            use std::io::Write;
            let mut s = child.stdin.take().unwrap();
            s.write_all(bytes).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// Runs the CLI and expects success; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "sandfs {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Sends a raw HTTP request with curl; returns (status, body).
    pub fn curl(&self, method: &str, route: &str, body: Option<&[u8]>) -> (u16, Vec<u8>) {
        let curl = require_tool("curl", "curl");
        let mut cmd = Command::new(curl);
        cmd.args([
            "-sS",
            "--max-time",
            "60",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-X",
            method,
            "--unix-socket",
        ])
        .arg(&self.socket)
        .arg(format!("http://sandfs{route}"));
        if body.is_some() {
            cmd.args(["--data-binary", "@-"]);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        {
            use std::io::Write;
            let mut s = child.stdin.take().unwrap();
            if let Some(b) = body {
                s.write_all(b).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "curl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut bytes = out.stdout;
        let nl = bytes.iter().rposition(|b| *b == b'\n').unwrap();
        let code: u16 = std::str::from_utf8(&bytes[nl + 1..])
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        bytes.truncate(nl);
        (code, bytes)
    }

    /// POSTs JSON with curl and parses the JSON answer.
    pub fn post(&self, route: &str, body: &Value) -> (u16, Value) {
        let (code, bytes) = self.curl("POST", route, Some(body.to_string().as_bytes()));
        let v = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{route}: answer is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (code, v)
    }

    /// Returns a library client for this daemon.
    pub fn client(&self) -> sandfs::client::Client {
        sandfs::client::Client::new(&self.socket)
    }

    /// Stops the daemon with SIGTERM and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if c.try_wait().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            panic!("daemon did not stop on SIGTERM within 10 s");
        }
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

/// Returns the error code of a JSON error body.
pub fn code(v: &Value) -> &str {
    v["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {v}"))
}

/// Snapshot of every file under `dir`: path, kind, contents, mode, mtime.
pub fn snapshot(dir: &Path) -> Vec<(String, String)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            let desc = if md.is_dir() {
                stack.push(e.path());
                format!("dir {:o} {}", md.mode(), md.mtime_nsec())
            } else if md.file_type().is_symlink() {
                format!("link {}", std::fs::read_link(e.path()).unwrap().display())
            } else {
                format!(
                    "file {:o} {} {} {:?}",
                    md.mode(),
                    md.mtime_nsec(),
                    md.nlink(),
                    std::fs::read(e.path()).unwrap()
                )
            };
            out.push((rel, desc));
        }
    }
    out.sort();
    out
}

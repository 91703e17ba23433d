//! A daemon that mounts its zones; stopped and unmounted on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_sandfs");

/// A running daemon with its zones mounted.
pub struct Mounted {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    pub mnt: PathBuf,
    pub socket: PathBuf,
    config: PathBuf,
    log: PathBuf,
    /// `RLIMIT_NOFILE` (soft and hard) for the daemon, when lowered.
    nofile: Option<u64>,
    /// Variables added to the daemon's environment (tokens of sandboxes).
    env: Vec<(String, String)>,
}

fn mounted_at(path: &Path) -> bool {
    let Ok(canon) = std::fs::canonicalize(path) else {
        return false;
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| {
            s.lines()
                .filter_map(|l| l.split(' ').nth(4))
                .any(|mp| Path::new(mp) == canon)
        })
        .unwrap_or(false)
}

impl Mounted {
    /// Starts a daemon (sandboxed zones under the temp dir) mounted at `<tmp>/mnt`.
    pub fn start(extra: &str) -> Mounted {
        Mounted::start_with(extra, None)
    }

    /// Starts a daemon whose fd limit (soft and hard) is `nofile`.
    pub fn start_with_fd_limit(extra: &str, nofile: u64) -> Mounted {
        Mounted::start_with(extra, Some(nofile))
    }

    /// Starts a daemon with `env` added to its environment (the sandbox tests use it).
    #[allow(dead_code)]
    pub fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Mounted {
        Mounted::start_full(extra, None, env)
    }

    fn start_with(extra: &str, nofile: Option<u64>) -> Mounted {
        Mounted::start_full(extra, nofile, &[])
    }

    fn start_full(extra: &str, nofile: Option<u64>, env: &[(&str, &str)]) -> Mounted {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: FUSE tests need the fuse kernel module and `apt-get install fuse3`"
        );
        assert!(
            which("fusermount3"),
            "fusermount3 is not installed; install it with `apt-get install fuse3` (make test does this)"
        );
        let dir = tempfile::Builder::new()
            .prefix("sandfs-fuse")
            .tempdir()
            .unwrap();
        let mnt = dir.path().join("mnt");
        let socket = dir.path().join("run/s.sock");
        let config = dir.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = \"state\"\nsocket = \"{}\"\nmount = \"mnt\"\n[zones]\nroot = \"root\"\n{extra}",
                socket.display()
            ),
        )
        .unwrap();
        let mut m = Mounted {
            child: None,
            log: dir.path().join("daemon.log"),
            dir,
            mnt,
            socket,
            config,
            nofile,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        m.spawn();
        m
    }

    /// Starts the daemon (again) and waits until the mount answers.
    pub fn spawn(&mut self) {
        let log = std::fs::File::create(&self.log).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(n) = self.nofile {
            let lim = rustix::process::Rlimit {
                current: Some(n),
                maximum: Some(n),
            };
            // SAFETY: setrlimit is async-signal-safe and touches no memory of the parent.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    rustix::process::setrlimit(rustix::process::Resource::Nofile, lim)
                        .map_err(std::io::Error::from)
                });
            }
        }
        self.child = Some(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            // statfs is never answered from cache, and the socket must accept: a stale mount and a
            // stale socket left by a crash pass neither check.
            if mounted_at(&self.mnt)
                && rustix::fs::statvfs(self.mnt.join("workspace")).is_ok()
                && std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
            {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {st}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("not mounted within 20 s: {}", self.log_text());
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The mounted workspace zone.
    pub fn ws(&self) -> PathBuf {
        self.mnt.join("workspace")
    }

    /// The backing directory of a zone.
    pub fn backing(&self, zone: &str) -> PathBuf {
        self.dir.path().join("root").join(zone)
    }

    /// Sends SIGKILL and reaps the daemon (a crash).
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGKILL and returns the daemon's process without reaping it: a daemon killed while
    /// the kernel holds one of its threads may exit only once its mount is aborted.
    #[allow(dead_code)] // used by tests/reliability, which includes this file
    pub fn crash_unreaped(&mut self) -> Option<Child> {
        let mut c = self.child.take()?;
        let _ = c.kill();
        Some(c)
    }

    /// Stops the daemon with SIGTERM and waits for it to unmount and exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            )
            .unwrap();
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if c.try_wait().unwrap().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
            panic!(
                "daemon did not stop within 15 s of SIGTERM: {}",
                self.log_text()
            );
        }
    }

    /// Runs `sandfs doctor --json` with this daemon's config; returns (exit code, report).
    pub fn doctor(&self) -> (i32, serde_json::Value) {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .args(["doctor", "--json"])
            .output()
            .unwrap();
        let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "doctor printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (out.status.code().unwrap_or(-1), report)
    }

    /// Runs the CLI against this daemon; returns stdout.
    /// The daemon's process id (the load test samples its memory).
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Runs `sandfs --config <this daemon's config> ARGS` and returns its output.
    pub fn with_config(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .output()
            .unwrap()
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(BIN)
            .arg("--socket")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sandfs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && c.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if mounted_at(&self.mnt) {
            let _ = Command::new("fusermount3")
                .args(["-u", "-z"])
                .arg(&self.mnt)
                .status();
        }
    }
}

pub fn which(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
        .unwrap_or(false)
}

pub fn mounted(path: &Path) -> bool {
    mounted_at(path)
}

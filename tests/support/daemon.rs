//! The one daemon starter of the tests: [`Daemon`] runs `wardfs serve` ([`serve_command`], the
//! only place the tests build that command) with a private config, socket, state and log under a
//! temp dir, waits until it answers, and stops it on drop (a mounted daemon gets SIGTERM and its
//! mount is detached; any other is killed).
//!
//! [`Daemon::options`] says how: the config ([`Options::config`], [`Options::extra`]), with or
//! without the FUSE mount ([`Options::mount`]), an inherited or a hermetic environment
//! ([`Options::hermetic`]), variables for the daemon only ([`Options::env`]: tokens), an fd limit
//! ([`Options::fd_limit`]). The areas' usual daemons are shorthands: [`Daemon::start`] (no mount,
//! sandboxed zones), [`Daemon::mounted`], [`Daemon::git`] (hermetic, a token for the git test
//! servers).
//!
//! A running daemon is then driven through its CLI ([`Daemon::cli`], [`Daemon::cli_ok`],
//! [`Daemon::cli_json`]), raw HTTP with curl ([`Daemon::curl`], [`Daemon::post`]), or the
//! library's client ([`Daemon::call`], [`Daemon::ok`], [`Daemon::err`], [`Daemon::get`]);
//! stopped, crashed and started again ([`Daemon::stop`], [`Daemon::crash`],
//! [`Daemon::respawn`], [`Daemon::restart`]); and its log and state read back.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;
use wardfs::core::ErrorCode;

use super::api::Api;
use super::mount::{lazy_unmount, mounted, require_fuse};
use super::tools::require_tool;

/// The wardfs binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_wardfs");

/// The variable a [`Daemon::git`] config names in `git.token_env`.
pub const GIT_TOKEN_VAR: &str = "WARDFS_TEST_GIT_TOKEN";

/// How long a daemon may take to listen (and mount) after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The zones of a daemon whose config does not say otherwise: sandboxed, under `<tmp>/root`.
const ZONES: &str = "[zones]\nmode = \"sandboxed\"\nroot = \"root\"\n";

/// `wardfs serve`, without the variables that would point it at another daemon
/// (`WARDFS_SOCKET`, `WARDFS_CONFIG`): the only place the tests build this command. [`Daemon`]
/// starts through it; the tests of `serve`'s own start-up (a refused second start, a bad config,
/// the embedded default config, readiness notification) add their arguments and run it.
pub fn serve_command() -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .env_remove("WARDFS_SOCKET")
        .env_remove("WARDFS_CONFIG");
    cmd
}

/// How to start a [`Daemon`]; from [`Daemon::options`].
#[derive(Clone)]
pub struct Options {
    prefix: String,
    config: String,
    mount: bool,
    hermetic: bool,
    env: Vec<(String, String)>,
    fd_limit: Option<u64>,
    append_log: bool,
}

impl Options {
    /// The prefix of the daemon's temp dir (`wardfs-test` unless set).
    pub fn prefix(mut self, prefix: &str) -> Options {
        self.prefix = prefix.to_string();
        self
    }

    /// Replaces the config after `state_dir`, `socket` (and `mount`), which are always set; the
    /// default is sandboxed zones under `<tmp>/root`. Relative paths resolve in the temp dir.
    pub fn config(mut self, text: &str) -> Options {
        self.config = text.to_string();
        self
    }

    /// Appends `text` to the config.
    pub fn extra(mut self, text: &str) -> Options {
        self.config.push_str(text);
        self
    }

    /// Mounts the zones at `<tmp>/mnt` (FUSE): the start waits until the mount answers.
    pub fn mount(mut self) -> Options {
        self.mount = true;
        self
    }

    /// Starts the daemon in a cleared environment: only `PATH`, `HOME` (an empty `<tmp>/home`),
    /// `GIT_CONFIG_NOSYSTEM=1`, `RUST_LOG` and the [`Options::env`] variables. Otherwise it
    /// inherits the test's environment.
    pub fn hermetic(mut self) -> Options {
        self.hermetic = true;
        self
    }

    /// Adds a variable to the daemon's environment only (a token); the CLI runs without it.
    pub fn env(mut self, key: &str, value: &str) -> Options {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Adds variables to the daemon's environment only, as [`Options::env`] does.
    pub fn envs(self, vars: &[(&str, &str)]) -> Options {
        vars.iter().fold(self, |o, (k, v)| o.env(k, v))
    }

    /// Sets the daemon's `RLIMIT_NOFILE` (soft and hard) to `n`.
    pub fn fd_limit(mut self, n: u64) -> Options {
        self.fd_limit = Some(n);
        self
    }

    /// Appends each start's log to the last one's instead of starting a new log, so that
    /// [`Daemon::log_text`] and [`Daemon::everything_written`] cover every run.
    pub fn append_log(mut self) -> Options {
        self.append_log = true;
        self
    }

    /// Writes the config under a new temp dir and returns the daemon, not started
    /// ([`Daemon::respawn`] starts it).
    pub fn prepare(self) -> Daemon {
        if self.mount {
            require_fuse();
        }
        let dir = tempfile::Builder::new()
            .prefix(&self.prefix)
            .tempdir()
            .unwrap();
        let socket = dir.path().join("run/wardfs.sock");
        let config = dir.path().join("config.toml");
        let mount = if self.mount { "mount = \"mnt\"\n" } else { "" };
        std::fs::write(
            &config,
            format!(
                "state_dir = \"state\"\nsocket = \"{}\"\n{mount}{}",
                socket.display(),
                self.config
            ),
        )
        .unwrap();
        if self.hermetic {
            std::fs::create_dir_all(dir.path().join("home")).unwrap();
        }
        Daemon {
            child: None,
            mnt: dir.path().join("mnt"),
            log: dir.path().join("daemon.log"),
            dir,
            socket,
            config,
            opts: self,
            api: OnceLock::new(),
        }
    }

    /// Starts the daemon and waits until its socket accepts (and its mount answers).
    pub fn start(self) -> Daemon {
        let mut d = self.prepare();
        d.respawn();
        d
    }
}

/// A `wardfs serve` under a temp dir of its own; stopped on drop.
pub struct Daemon {
    child: Option<Child>,
    /// The temp dir: `config.toml`, `daemon.log`, `run/` (the socket), `state/`, `root/` (the
    /// zones, unless the config puts them elsewhere), `mnt/` (the mount), `home/` (hermetic).
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    /// Where the zones are mounted (with [`Options::mount`]).
    pub mnt: PathBuf,
    /// The daemon's stderr.
    pub log: PathBuf,
    opts: Options,
    api: OnceLock<Api>,
}

/// A journal row: (via, op, path, pid).
pub type JournalRow = (String, String, String, u64);

impl Daemon {
    /// How to start a daemon: sandboxed zones under the temp dir, no mount, the test's
    /// environment; change what the test needs and call [`Options::start`].
    pub fn options() -> Options {
        Options {
            prefix: "wardfs-test".into(),
            config: ZONES.into(),
            mount: false,
            hermetic: false,
            env: Vec::new(),
            fd_limit: None,
            append_log: false,
        }
    }

    /// Starts a daemon in sandboxed mode, not mounted; `extra` is appended to the config.
    pub fn start(extra: &str) -> Daemon {
        Daemon::options().extra(extra).start()
    }

    /// Starts a daemon, not mounted, with the given config text (relative paths resolve in the
    /// temp dir).
    pub fn start_config(config: &str) -> Daemon {
        Daemon::options().config(config).start()
    }

    /// Starts a daemon (sandboxed zones under the temp dir) mounted at `<tmp>/mnt`.
    pub fn mounted(extra: &str) -> Daemon {
        Daemon::options()
            .prefix("wardfs-fuse")
            .mount()
            .extra(extra)
            .start()
    }

    /// Starts a daemon for the git tests: hermetic, not mounted, `extra` appended to its `[git]`
    /// section. `token` is put in its environment as [`GIT_TOKEN_VAR`]; the test servers listen
    /// on 127.0.0.1 over plain http, so the config lets the token go there (`git.token_hosts`,
    /// `git.token_over_http`).
    pub fn git(extra: &str, token: Option<&str>) -> Daemon {
        let opts = Daemon::options()
            .prefix("wardfs-git")
            .config(&format!(
                "[zones]\nroot = \"root\"\n[git]\ntoken_env = \"{GIT_TOKEN_VAR}\"\n\
                 token_user = \"wardfs\"\ntoken_hosts = [\"127.0.0.1\"]\ntoken_over_http = true\n\
                 {extra}"
            ))
            .hermetic();
        match token {
            Some(t) => opts.env(GIT_TOKEN_VAR, t),
            None => opts,
        }
        .start()
    }

    /// Starts the daemon (again, after a crash or a stop: a daemon still running is killed
    /// first) with the same config, and waits until it answers.
    pub fn respawn(&mut self) {
        self.crash();
        let log = if self.opts.append_log {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
        } else {
            std::fs::File::create(&self.log)
        }
        .unwrap();
        let mut cmd = serve_command();
        if !self.opts.mount {
            cmd.arg("--no-mount");
        }
        cmd.arg("--config").arg(&self.config);
        if self.opts.hermetic {
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", self.dir.path().join("home"))
                .env("GIT_CONFIG_NOSYSTEM", "1");
        }
        cmd.env(
            "RUST_LOG",
            std::env::var("WARDFS_TEST_LOG").unwrap_or_else(|_| "info".into()),
        )
        .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(log);
        if let Some(n) = self.opts.fd_limit {
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
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if self.answers() {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("daemon exited with {st}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let what = if self.opts.mount { "mount" } else { "listen" };
        panic!(
            "daemon did not {what} within {} s: {}",
            START_TIMEOUT.as_secs(),
            self.log_text()
        );
    }

    /// Whether the daemon answers: its socket accepts, and with a mount, the mount answers
    /// statfs (never answered from cache: a stale mount and a stale socket left by a crash pass
    /// neither check).
    fn answers(&self) -> bool {
        (!self.opts.mount
            || (mounted(&self.mnt) && rustix::fs::statvfs(self.mnt.join("workspace")).is_ok()))
            && std::os::unix::net::UnixStream::connect(&self.socket).is_ok()
    }

    /// Stops the daemon (SIGTERM, waiting for it however long) and starts it again on the
    /// same state.
    pub fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&c),
                rustix::process::Signal::TERM,
            );
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
        self.respawn();
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
    pub fn crash_unreaped(&mut self) -> Option<Child> {
        let mut c = self.child.take()?;
        let _ = c.kill();
        Some(c)
    }

    /// Stops the daemon with SIGTERM and waits for it to exit (and unmount): at most 15 s with
    /// a mount, 10 s without, else the test fails.
    pub fn stop(&mut self) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&c),
            rustix::process::Signal::TERM,
        );
        let limit = Duration::from_secs(if self.opts.mount { 15 } else { 10 });
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if c.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = c.kill();
        let _ = c.wait();
        panic!(
            "daemon did not stop within {} s of SIGTERM: {}",
            limit.as_secs(),
            self.log_text()
        );
    }

    /// Returns the daemon's log so far.
    pub fn log_text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// The daemon's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// The real (backing) directory of a zone.
    pub fn zone_dir(&self, zone: &str) -> PathBuf {
        self.dir.path().join("root").join(zone)
    }

    /// The backing directory of /workspace.
    pub fn workspace(&self) -> PathBuf {
        self.zone_dir("workspace")
    }

    /// The mounted workspace zone (with [`Options::mount`]).
    pub fn ws(&self) -> PathBuf {
        self.mnt.join("workspace")
    }

    // -- the CLI ---------------------------------------------------------------------------

    /// Runs the CLI against this daemon (`--socket`), without the daemon's own variables.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_stdin(args, None)
    }

    /// Runs the CLI on a thread: it may wait at a gate while the test kills the daemon.
    pub fn cli_in_thread(&self, args: &[&str]) -> std::thread::JoinHandle<Output> {
        let socket = self.socket.clone();
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        std::thread::spawn(move || {
            Command::new(BIN)
                .arg("--socket")
                .arg(socket)
                .args(args)
                .output()
                .unwrap()
        })
    }

    /// Runs the CLI with bytes on stdin.
    pub fn cli_stdin(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut cmd = Command::new(BIN);
        cmd.arg("--socket").arg(&self.socket).args(args);
        cmd.env_remove("WARDFS_CONFIG");
        for (k, _) in &self.opts.env {
            cmd.env_remove(k);
        }
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        if let Some(bytes) = stdin {
            let mut s = child.stdin.take().unwrap();
            s.write_all(bytes).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// The journal's newest rows, at most `limit`, newest first.
    pub fn journal(&self, limit: usize) -> Vec<JournalRow> {
        let log: Value =
            serde_json::from_str(&self.cli_ok(&["--json", "log", "--limit", &limit.to_string()]))
                .unwrap();
        log["entries"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (
                    s("via"),
                    s("op"),
                    s("path"),
                    e["pid"].as_u64().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Runs the CLI and expects success; returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "wardfs {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs the CLI with `--json`; the command must succeed and print one JSON value.
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.cli(&all);
        assert!(
            out.status.success(),
            "wardfs {args:?}: {}\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.log_text()
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "wardfs {args:?} printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    /// Runs `wardfs --config <this daemon's config> ARGS` and returns its output.
    pub fn with_config(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs `wardfs doctor --json` with this daemon's config; returns (exit code, report).
    pub fn doctor(&self) -> (i32, Value) {
        let out = self.with_config(&["doctor", "--json"]);
        let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "doctor printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        (out.status.code().unwrap_or(-1), report)
    }

    // -- raw HTTP (curl) -------------------------------------------------------------------

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
        .arg(format!("http://wardfs{route}"));
        if body.is_some() {
            cmd.args(["--data-binary", "@-"]);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        {
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

    /// POSTs JSON with curl and parses the JSON answer; returns (status, answer).
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

    // -- the library's client --------------------------------------------------------------

    /// Returns a library client for this daemon.
    pub fn client(&self) -> wardfs::client::Client {
        wardfs::client::Client::new(&self.socket)
    }

    /// A blocking client of this daemon (made on first use).
    pub fn api(&self) -> &Api {
        self.api.get_or_init(|| Api::new(&self.socket))
    }

    /// The runtime [`Daemon::api`] blocks on, for the client's other calls.
    pub fn rt(&self) -> &tokio::runtime::Runtime {
        self.api().rt()
    }

    /// POSTs JSON to the API; the answer, or the error's code and message (no answer at all
    /// fails the test, with the daemon's log).
    pub fn call(&self, route: &str, body: Value) -> Result<Value, (ErrorCode, String)> {
        self.api()
            .post(route, &body)
            .map_err(|(code, message)| match code {
                Some(code) => (code, message),
                None => panic!("{route}: {message}\n{}", self.log_text()),
            })
    }

    /// Like [`Daemon::call`], but the call must succeed.
    pub fn ok(&self, route: &str, body: Value) -> Value {
        self.call(route, body.clone())
            .unwrap_or_else(|e| panic!("{route} {body}: {e:?}\n{}", self.log_text()))
    }

    /// Like [`Daemon::call`], but the call must fail; returns the code and message.
    pub fn err(&self, route: &str, body: Value) -> (ErrorCode, String) {
        match self.call(route, body.clone()) {
            Ok(v) => panic!("{route} {body} succeeded: {v}"),
            Err(e) => e,
        }
    }

    /// GETs a route; it must succeed.
    pub fn get(&self, route: &str) -> Value {
        self.api()
            .get(route)
            .unwrap_or_else(|e| panic!("{route}: {e:?}"))
    }

    /// The id of the journal's newest row (0 when empty).
    pub fn journal_head(&self) -> i64 {
        let log = self.get("/v1/log?limit=1");
        log["entries"][0]["id"].as_i64().unwrap_or(0)
    }

    /// Waits (up to 20 s) until the workspace's journal has a row newer than `after` (a
    /// [`Daemon::journal_head`]) about each of `paths` (relative to /workspace), as the watcher
    /// journals changes made beside the mount.
    pub fn until_journaled(&self, after: i64, paths: &[&str]) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = self.get("/v1/log?zone=workspace&limit=1000");
            let rows = log["entries"].as_array().cloned().unwrap_or_default();
            let newer = |r: &&Value| r["id"].as_i64().is_some_and(|id| id > after);
            let missing: Vec<&&str> = paths
                .iter()
                .filter(|p| !rows.iter().filter(newer).any(|r| r["path"] == **p))
                .collect();
            if missing.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{missing:?} not journaled after row {after} within 20 s: {log}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
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

    /// Returns the sandbox `name` as `GET /v1/sandboxes` lists it.
    pub fn sandbox(&self, name: &str) -> Value {
        let list = self.get("/v1/sandboxes");
        list["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no sandbox {name} in {list}"))
            .clone()
    }

    /// Every byte the daemon wrote: its log and its state directory (to look for secrets).
    pub fn everything_written(&self) -> Vec<u8> {
        let mut out = std::fs::read(&self.log).unwrap_or_default();
        for f in super::files::files_under(&self.dir.path().join("state")) {
            if let Ok(b) = std::fs::read(&f) {
                out.extend_from_slice(&b);
            }
        }
        out
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.opts.mount {
                // SIGTERM first, so that the daemon unmounts.
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_child(&c),
                    rustix::process::Signal::TERM,
                );
                let deadline = Instant::now() + Duration::from_secs(10);
                while Instant::now() < deadline && c.try_wait().ok().flatten().is_none() {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if self.opts.mount {
            lazy_unmount(&self.mnt);
        }
    }
}

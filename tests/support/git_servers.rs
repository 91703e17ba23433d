//! Real git servers on loopback for the tests of git sync (the git, review, load and reliability
//! areas), driven only through the `git` CLI and
//! Debian's `lighttpd` (no Rust git library here, so the harness cannot share a bug with the code
//! under test).
//!
//! * [`BareRepo`]: a fresh bare repository in its own temp dir, with helpers to seed it, to move
//!   it behind wardfs's back ([`BareRepo::commit_files`]), to inspect it ([`BareRepo::head`],
//!   [`BareRepo::read_file`], [`BareRepo::log`], ...) and to make it refuse pushes
//!   ([`BareRepo::install_pre_receive_hook`], [`BareRepo::set_config`]).
//! * [`GitDaemon`]: `git daemon` serving a directory of bare repos over `git://` (anonymous
//!   fetch *and* push).
//! * [`HttpGit`]: `git http-backend` behind `lighttpd` over `http://`, with HTTP Basic auth
//!   required on every request (a random password per server).
//!
//! Every server listens on `127.0.0.1` on a free port picked at start (never a fixed one), is
//! started in its own process group, and is killed (the whole group, `SIGKILL`) and reaped by PID
//! when its handle is dropped — also when the test panics. A missing tool fails the test with the
//! Debian package to install ([`require_tool`](super::tools::require_tool)); nothing is ever skipped.
//!
//! Every `git` child process runs with a hermetic environment ([`git_command`]): the
//! environment is cleared except `PATH`, `HOME` is an empty directory, `GIT_CONFIG_NOSYSTEM=1`,
//! `GIT_CONFIG_GLOBAL=/dev/null`, `GIT_TERMINAL_PROMPT=0`, `LC_ALL=C` (messages in English), and
//! `-c init.defaultBranch=main -c protocol.file.allow=always` plus a fixed committer identity.
//! The servers get the same environment, so their `upload-pack`/`receive-pack` and hooks do too.
//!
//! A server serves a directory; the directory must outlive the server. Typical use:
//!
//! ```ignore
//! let repo = BareRepo::seeded("demo", &[("README.md", b"hello\n")]);
//! let daemon = GitDaemon::serve(&repo);          // git://127.0.0.1:PORT/demo.git
//! let http = HttpGit::serve(&repo);              // http://127.0.0.1:PORT/git/demo.git
//! let url = http.url_with_credentials("demo");   // http://wardfs:TOKEN@127.0.0.1:PORT/git/demo.git
//! // ... wardfs pulls/pushes ...
//! assert_eq!(repo.read_file("main", "README.md").as_deref(), Some(&b"hello\n"[..]));
//! // drop order: servers first (declared last), then the repo
//! ```

use std::fmt::Write as _;
use std::io::Read as _;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::tools::{free_port, is_executable, random_hex, require_tool};

/// Name used for commits made by the harness (`user.name`).
pub const COMMITTER_NAME: &str = "wardfs-test";
/// E-mail used for commits made by the harness (`user.email`).
pub const COMMITTER_EMAIL: &str = "wardfs-test@example.invalid";

/// How long a server may take to start listening before the test fails.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How often a server start is retried when its free port was taken in the meantime.
const START_ATTEMPTS: usize = 5;

// ---------------------------------------------------------------------------------------------
// Tools and the hermetic git environment
// ---------------------------------------------------------------------------------------------

/// The `git` executable (checked once per process).
fn git_bin() -> &'static Path {
    static GIT: OnceLock<PathBuf> = OnceLock::new();
    GIT.get_or_init(|| require_tool("git", "git"))
}

/// An empty directory used as `HOME` by every git child process, so that no `~/.gitconfig`,
/// credential store or XDG config of the user running the tests has any influence. It lives in
/// cargo's per-target temp dir for integration tests and is never written to.
pub fn empty_home() -> &'static Path {
    static HOME: OnceLock<PathBuf> = OnceLock::new();
    HOME.get_or_init(|| {
        let home = Path::new(env!("CARGO_TARGET_TMPDIR")).join("git-empty-home");
        std::fs::create_dir_all(&home).unwrap();
        home
    })
}

/// Applies the hermetic environment (see the module docs) to `cmd`: clears the environment,
/// keeps `PATH` (plus the sbin directories), and sets `HOME`, `GIT_CONFIG_NOSYSTEM`,
/// `GIT_CONFIG_GLOBAL`, `GIT_TERMINAL_PROMPT=0` and `LC_ALL=C`.
pub fn hermetic_env(cmd: &mut Command) -> &mut Command {
    cmd.env_clear()
        .env("PATH", search_path())
        .env("HOME", empty_home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("LANG", "C")
}

fn search_path() -> String {
    let mut path = std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into());
    for extra in ["/usr/local/sbin", "/usr/sbin", "/sbin"] {
        if !path.split(':').any(|d| d == extra) {
            path.push(':');
            path.push_str(extra);
        }
    }
    path
}

/// A `git` command with the hermetic environment and the harness's `-c` options
/// (`init.defaultBranch=main`, `protocol.file.allow=always`, `user.name`/`user.email`,
/// `advice.detachedHead=false`). Add the subcommand and its arguments, and optionally
/// `current_dir`.
pub fn git_command() -> Command {
    let mut cmd = Command::new(git_bin());
    hermetic_env(&mut cmd);
    cmd.args([
        "-c",
        "init.defaultBranch=main",
        "-c",
        "protocol.file.allow=always",
        "-c",
        &format!("user.name={COMMITTER_NAME}"),
        "-c",
        &format!("user.email={COMMITTER_EMAIL}"),
        "-c",
        "advice.detachedHead=false",
    ]);
    cmd.stdin(Stdio::null());
    cmd
}

/// Runs `git <args>` in `cwd` (hermetic, see [`git_command`]) and returns its output whatever
/// its exit status (for commands that are expected to fail, e.g. a rejected push).
pub fn try_git(cwd: &Path, args: &[&str]) -> Output {
    git_command()
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run git {args:?}: {e}"))
}

/// Runs `git <args>` in `cwd` (hermetic, see [`git_command`]) and returns its stdout, trimmed
/// of the trailing newline.
///
/// # Panics
/// When git fails, with its stdout and stderr.
pub fn run_git(cwd: &Path, args: &[&str]) -> String {
    let out = try_git(cwd, args);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed ({}):\nstdout: {}\nstderr: {}",
        cwd.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim_end_matches('\n')
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Bare repositories
// ---------------------------------------------------------------------------------------------

/// A bare repository `<root>/<name>.git`, deleted on drop when it owns its temp dir.
///
/// All helpers use the `git` CLI on the bare path directly (no server involved), so they see
/// exactly what a server would serve.
pub struct BareRepo {
    /// Keeps the temp dir alive (None when created with [`BareRepo::new_in`]).
    _tmp: Option<tempfile::TempDir>,
    root: PathBuf,
    name: String,
    path: PathBuf,
}

impl BareRepo {
    /// Creates an empty bare repository `<name>.git` in a fresh temp dir. Its default branch
    /// (`HEAD`) is `main`.
    pub fn new(name: &str) -> BareRepo {
        let tmp = tempfile::Builder::new()
            .prefix("wardfs-git-repos")
            .tempdir()
            .unwrap();
        let mut repo = BareRepo::new_in(tmp.path(), name);
        repo._tmp = Some(tmp);
        repo
    }

    /// Creates an empty bare repository `<base>/<name>.git` in an existing directory (to serve
    /// several repositories from one server). The caller keeps `base` alive.
    ///
    /// # Panics
    /// When `<name>.git` already exists.
    pub fn new_in(base: &Path, name: &str) -> BareRepo {
        let name = name.strip_suffix(".git").unwrap_or(name).to_string();
        assert!(
            !name.is_empty() && !name.contains('/') && !name.starts_with('.'),
            "bad repository name {name:?}"
        );
        let path = base.join(format!("{name}.git"));
        assert!(!path.exists(), "{} already exists", path.display());
        run_git(
            base,
            &["init", "-q", "--bare", "-b", "main", path.to_str().unwrap()],
        );
        BareRepo {
            _tmp: None,
            root: base.to_path_buf(),
            name,
            path,
        }
    }

    /// [`BareRepo::new`] plus [`BareRepo::seed`]: a repository whose `main` has one commit with
    /// `files`.
    pub fn seeded(name: &str, files: &[(&str, &[u8])]) -> BareRepo {
        let repo = BareRepo::new(name);
        repo.seed(files);
        repo
    }

    /// The directory holding the repository: what a server serves ([`GitDaemon::start`],
    /// [`HttpGit::start`]).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The repository's name, without `.git` (what the servers' `url` take).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The path of the bare repository (`<root>/<name>.git`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A `file://` URL of the repository (no server involved).
    pub fn file_url(&self) -> String {
        format!("file://{}", self.path.display())
    }

    /// Runs `git --git-dir=<bare> <args>` and returns its trimmed stdout.
    ///
    /// # Panics
    /// When git fails.
    pub fn git(&self, args: &[&str]) -> String {
        let mut all = vec!["--git-dir", self.path.to_str().unwrap()];
        all.extend_from_slice(args);
        run_git(&self.root, &all)
    }

    /// Runs `git --git-dir=<bare> <args>` and returns its output whatever its status.
    pub fn try_git(&self, args: &[&str]) -> Output {
        let mut all = vec!["--git-dir", self.path.to_str().unwrap()];
        all.extend_from_slice(args);
        try_git(&self.root, &all)
    }

    /// Makes the initial commit ("initial commit") on `main` with `files` and returns its sha.
    /// Done with the CLI in a temp work tree (`git init -b main`, `commit`, `push` to the bare
    /// path).
    ///
    /// # Panics
    /// When `main` already exists.
    pub fn seed(&self, files: &[(&str, &[u8])]) -> String {
        assert!(
            self.head("main").is_none(),
            "seed: main already exists in {}",
            self.path.display()
        );
        let files: Vec<(&str, Option<&[u8]>)> = files.iter().map(|(p, b)| (*p, Some(*b))).collect();
        self.commit_files("main", &files, "initial commit")
    }

    /// Simulates "the remote moved": makes one commit on `branch` that writes the files given
    /// with `Some(bytes)` (creating parent directories) and deletes those given with `None`,
    /// pushes it to the bare repository with a plain `git push` and returns the new sha.
    ///
    /// A `branch` that does not exist yet starts from `main` (or as a root commit when the
    /// repository is empty). The commit is made even if it changes nothing (`--allow-empty`).
    /// The push goes through `receive-pack`, so hooks and `receive.*` settings apply to it.
    ///
    /// # Panics
    /// When a path is absolute or has `..`, when a deleted path does not exist, or when the push
    /// is refused (with git's stderr).
    pub fn commit_files(
        &self,
        branch: &str,
        files: &[(&str, Option<&[u8]>)],
        message: &str,
    ) -> String {
        let work = tempfile::Builder::new()
            .prefix("wardfs-git-work")
            .tempdir()
            .unwrap();
        let wt = work.path();
        let bare = self.path.to_str().unwrap();
        run_git(wt, &["init", "-q", "-b", branch, "."]);
        let start = if self.head(branch).is_some() {
            Some(branch)
        } else if self.head("main").is_some() {
            Some("main")
        } else {
            None
        };
        if let Some(start) = start {
            run_git(wt, &["fetch", "-q", bare, &format!("refs/heads/{start}")]);
            run_git(wt, &["reset", "-q", "--hard", "FETCH_HEAD"]);
        }
        for (path, content) in files {
            check_relative(path);
            let full = wt.join(path);
            match content {
                Some(bytes) => {
                    if let Some(parent) = full.parent() {
                        std::fs::create_dir_all(parent).unwrap();
                    }
                    std::fs::write(&full, bytes).unwrap();
                }
                None => {
                    assert!(
                        full.exists(),
                        "commit_files: cannot delete {path:?}: not on {branch}"
                    );
                    if full.is_dir() {
                        std::fs::remove_dir_all(&full).unwrap();
                    } else {
                        std::fs::remove_file(&full).unwrap();
                    }
                }
            }
        }
        run_git(wt, &["add", "-A"]);
        run_git(wt, &["commit", "-q", "--allow-empty", "-m", message]);
        let sha = run_git(wt, &["rev-parse", "HEAD"]);
        let out = try_git(
            wt,
            &["push", "-q", bare, &format!("HEAD:refs/heads/{branch}")],
        );
        assert!(
            out.status.success(),
            "commit_files: push to {branch} was refused:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        sha
    }

    /// The sha `refs/heads/<branch>` points to, or `None` when the branch does not exist.
    pub fn head(&self, branch: &str) -> Option<String> {
        let out = self.try_git(&[
            "rev-parse",
            "--verify",
            "-q",
            &format!("refs/heads/{branch}^{{commit}}"),
        ]);
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The branches of the repository (short names, sorted).
    pub fn branches(&self) -> Vec<String> {
        let out = self.git(&["for-each-ref", "--format=%(refname:short)", "refs/heads/"]);
        let mut v: Vec<String> = out.lines().map(str::to_string).collect();
        v.sort();
        v
    }

    /// The exact bytes of `path` on `branch` (`git cat-file blob branch:path`), or `None` when
    /// the branch or the path does not exist (or the path is a directory).
    pub fn read_file(&self, branch: &str, path: &str) -> Option<Vec<u8>> {
        let spec = format!("refs/heads/{branch}:{path}");
        let kind = self.try_git(&["cat-file", "-t", &spec]);
        if !kind.status.success() || kind.stdout != b"blob\n" {
            return None;
        }
        let out = self.try_git(&["cat-file", "blob", &spec]);
        out.status.success().then_some(out.stdout)
    }

    /// The file mode of `path` on `branch` as git records it (`100644`, `100755`, `120000` for a
    /// symlink, ...), or `None` when it does not exist.
    pub fn file_mode(&self, branch: &str, path: &str) -> Option<String> {
        let out = self.try_git(&["ls-tree", &format!("refs/heads/{branch}"), "--", path]);
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().next()?;
        Some(line.split(' ').next()?.to_string())
    }

    /// All file paths on `branch` (recursive, sorted as git sorts them); empty when the branch
    /// does not exist.
    pub fn files(&self, branch: &str) -> Vec<String> {
        let out = self.try_git(&[
            "ls-tree",
            "-r",
            "-z",
            "--name-only",
            &format!("refs/heads/{branch}"),
        ]);
        if !out.status.success() {
            return Vec::new();
        }
        out.stdout
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect()
    }

    /// The history of `branch`, newest first, as `(sha, subject)`; empty when the branch does
    /// not exist.
    pub fn log(&self, branch: &str) -> Vec<(String, String)> {
        let out = self.try_git(&["log", "--format=%H%x00%s", &format!("refs/heads/{branch}")]);
        if !out.status.success() {
            return Vec::new();
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('\0'))
            .map(|(sha, subject)| (sha.to_string(), subject.to_string()))
            .collect()
    }

    /// The parents of commit `rev` (a sha or `refs/heads/<branch>`), to check e.g. that a push
    /// was a merge or a fast-forward.
    pub fn parents(&self, rev: &str) -> Vec<String> {
        let line = self.git(&["rev-list", "--parents", "-n", "1", rev]);
        line.split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    }

    /// Sets `git config <key> <value>` in the bare repository, e.g. the receive options
    /// `receive.denyNonFastForwards true`, `receive.denyDeletes true`,
    /// `receive.advertisePushOptions true`, or `http.receivepack false`.
    pub fn set_config(&self, key: &str, value: &str) {
        self.git(&["config", key, value]);
    }

    /// Writes the executable hook `hooks/<name>` (e.g. `pre-receive`, `update`,
    /// `post-receive`) with `script` as its content; `script` should start with a shebang
    /// (`#!/bin/sh`). Replaces an existing hook. Hooks run with the servers' environment.
    pub fn install_hook(&self, name: &str, script: &str) {
        let hooks = self.path.join("hooks");
        std::fs::create_dir_all(&hooks).unwrap();
        // Write under another name and rename, so the hook is never seen half-written.
        let tmp = hooks.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, script).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(&tmp, hooks.join(name)).unwrap();
    }

    /// Installs a `pre-receive` hook (see [`BareRepo::install_hook`]). A hook that prints to
    /// stderr and exits non-zero rejects every push, and its message reaches the client
    /// (prefixed with `remote:`); [`BareRepo::reject_pushes`] writes one.
    pub fn install_pre_receive_hook(&self, script: &str) {
        self.install_hook("pre-receive", script);
    }

    /// Installs a `pre-receive` hook that rejects every push with `message` on stderr (exit 1).
    pub fn reject_pushes(&self, message: &str) {
        let quoted = message.replace('\'', r"'\''");
        self.install_pre_receive_hook(&format!("#!/bin/sh\necho '{quoted}' >&2\nexit 1\n"));
    }

    /// Removes `hooks/<name>` if present.
    pub fn remove_hook(&self, name: &str) {
        let _ = std::fs::remove_file(self.path.join("hooks").join(name));
    }
}

fn check_relative(path: &str) {
    let p = Path::new(path);
    assert!(
        !path.is_empty()
            && p.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir)),
        "bad repository path {path:?}: must be relative, without `..`"
    );
}

// ---------------------------------------------------------------------------------------------
// Processes
// ---------------------------------------------------------------------------------------------

/// A started server process in its own process group; the whole group is killed and the leader
/// reaped on drop.
struct ServerProcess {
    child: Child,
}

impl ServerProcess {
    /// Spawns `cmd` as the leader of a new process group, stdout and stderr to `log`.
    fn spawn(cmd: &mut Command, log: &Path) -> ServerProcess {
        let out = std::fs::File::create(log).unwrap();
        let err = out.try_clone().unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        ServerProcess { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the process listens on `127.0.0.1:port` and accepts a connection. Returns
    /// `Err(log)` if it exits first; panics (with `describe()`) at the deadline.
    fn wait_listening(&mut self, port: u16, describe: &dyn Fn() -> String) -> Result<(), String> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Err(format!("exited with {status}\n{}", describe()));
            }
            // The port must be ours: a connection could also reach another process that took
            // the free port in the meantime.
            if listens_on(self.pid(), port)
                && TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_ok()
            {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "server (pid {}) did not listen on {addr} within {START_TIMEOUT:?}\n{}",
                self.pid(),
                describe()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) has no memory-safety preconditions; -pid names the process group this
        // child leads (it is unreaped, so the id cannot have been reused).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The processes of process group `pgid` (from /proc/<pid>/stat).
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // Fields after the command name: state ppid pgrp ...
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(2)?.parse::<u32>().ok()
                })
                == Some(pgid)
        })
        .collect()
}

/// Whether a process of process group `pgid` holds a socket listening on 127.0.0.1:`port` (or
/// 0.0.0.0:`port`), from /proc/net/tcp and /proc/<pid>/fd. (`git daemon` runs `git-daemon` as
/// a child process, so the listener is not the leader.)
fn listens_on(pgid: u32, port: u16) -> bool {
    let Ok(tcp) = std::fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let wanted = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    let inodes: Vec<String> = tcp
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // local_address, state 0A = LISTEN, inode
            (f.len() > 9 && wanted.iter().any(|w| w == f[1]) && f[3] == "0A")
                .then(|| f[9].to_string())
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    group_members(pgid).into_iter().any(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.filter_map(Result::ok)
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter_map(|t| {
                t.to_str()?
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')
                    .map(str::to_string)
            })
            .any(|ino| inodes.contains(&ino))
    })
}

fn port_clash(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("unable to allocate")
}

/// Starts a server with `start(port)` on a free port, retrying with another port when the
/// first was taken in the meantime.
fn start_on_free_port(
    what: &str,
    mut start: impl FnMut(u16) -> (ServerProcess, Box<dyn Fn() -> String>),
) -> (ServerProcess, u16) {
    let mut last = String::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        let (mut proc, describe) = start(port);
        match proc.wait_listening(port, &*describe) {
            Ok(()) => return (proc, port),
            Err(log) if port_clash(&log) => last = log,
            Err(log) => panic!("{what} did not start on port {port}: {log}"),
        }
    }
    panic!("{what} did not start after {START_ATTEMPTS} attempts (port clashes): {last}");
}

fn read_lossy(p: &Path) -> String {
    let mut s = Vec::new();
    if let Ok(mut f) = std::fs::File::open(p) {
        let _ = f.read_to_end(&mut s);
    }
    String::from_utf8_lossy(&s).into_owned()
}

fn repo_name(name: &str) -> &str {
    name.strip_suffix(".git").unwrap_or(name)
}

// ---------------------------------------------------------------------------------------------
// git daemon
// ---------------------------------------------------------------------------------------------

/// `git daemon` serving every bare repository in a directory over `git://127.0.0.1:PORT/`,
/// fetch and push (`--enable=receive-pack`, no auth). Killed and reaped on drop.
pub struct GitDaemon {
    proc: ServerProcess,
    port: u16,
    _tmp: tempfile::TempDir,
    log: PathBuf,
}

impl GitDaemon {
    /// Serves the directory holding `repo` (see [`GitDaemon::start`]).
    pub fn serve(repo: &BareRepo) -> GitDaemon {
        GitDaemon::start(repo.root())
    }

    /// Starts `git daemon --reuseaddr --export-all --enable=receive-pack --informative-errors
    /// --verbose --base-path=<base> --listen=127.0.0.1 --port=<free> <base>` and waits until it
    /// accepts connections. `base` must outlive the daemon.
    ///
    /// # Panics
    /// When git is missing or the daemon does not come up (with its log).
    pub fn start(base: &Path) -> GitDaemon {
        let base = base
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", base.display()));
        let tmp = tempfile::Builder::new()
            .prefix("wardfs-git-daemon")
            .tempdir()
            .unwrap();
        let log = tmp.path().join("daemon.log");
        let (proc, port) = start_on_free_port("git daemon", |port| {
            let mut cmd = Command::new(git_bin());
            hermetic_env(&mut cmd).args([
                "daemon",
                "--reuseaddr",
                "--export-all",
                "--enable=receive-pack",
                "--informative-errors",
                "--verbose",
                &format!("--base-path={}", base.display()),
                "--listen=127.0.0.1",
                &format!("--port={port}"),
            ]);
            cmd.arg(&base);
            let proc = ServerProcess::spawn(&mut cmd, &log);
            let log = log.clone();
            (proc, Box::new(move || read_lossy(&log)))
        });
        GitDaemon {
            proc,
            port,
            _tmp: tmp,
            log,
        }
    }

    /// `git://127.0.0.1:PORT/<name>.git` (`name` with or without `.git`).
    pub fn url(&self, name: &str) -> String {
        format!("git://127.0.0.1:{}/{}.git", self.port, repo_name(name))
    }

    /// The port the daemon listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The daemon's process id (leader of its own process group).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// What the daemon wrote to stdout/stderr so far (one line per connection, errors): for
    /// debugging a failing test, which no test needs now.
    #[allow(dead_code)]
    pub fn log(&self) -> String {
        read_lossy(&self.log)
    }
}

// ---------------------------------------------------------------------------------------------
// git http-backend behind lighttpd
// ---------------------------------------------------------------------------------------------

/// `git http-backend` (CGI) behind `lighttpd` serving every bare repository in a directory over
/// `http://127.0.0.1:PORT/git/<name>.git`, with HTTP Basic auth required on every path (the
/// `info/refs` GET included). http-backend accepts pushes only from an authenticated user
/// (`REMOTE_USER`), so pushes work only with credentials. Killed and reaped on drop.
pub struct HttpGit {
    proc: ServerProcess,
    port: u16,
    user: String,
    password: String,
    tmp: tempfile::TempDir,
}

impl HttpGit {
    /// Serves the directory holding `repo` (see [`HttpGit::start`]).
    pub fn serve(repo: &BareRepo) -> HttpGit {
        HttpGit::start(repo.root())
    }

    /// Generates a lighttpd config in a temp dir (mod_alias + mod_cgi for
    /// `$(git --exec-path)/git-http-backend` at `/git/`, mod_setenv for `GIT_PROJECT_ROOT=<base>`
    /// and `GIT_HTTP_EXPORT_ALL=1` plus the hermetic git environment, mod_auth + mod_authn_file
    /// with a plain `user:password` file on `/`), checks it with `lighttpd -tt -f`, runs
    /// `lighttpd -D -f` on a free port of 127.0.0.1 and waits until it accepts connections.
    /// `base` must outlive the server.
    ///
    /// # Panics
    /// When git or lighttpd is missing, the config is refused, or the server does not come up
    /// (with lighttpd's messages and error log).
    pub fn start(base: &Path) -> HttpGit {
        let lighttpd = require_tool("lighttpd", "lighttpd");
        let backend = http_backend();
        let base = base
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", base.display()));
        let tmp = tempfile::Builder::new()
            .prefix("wardfs-git-http")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        for sub in ["htdocs", "uploads"] {
            std::fs::create_dir(dir.join(sub)).unwrap();
        }
        let user = "wardfs".to_string();
        let password = random_hex();
        std::fs::write(dir.join("users"), format!("{user}:{password}\n")).unwrap();

        let conf = dir.join("lighttpd.conf");
        let errorlog = dir.join("error.log");
        let stdout_log = dir.join("lighttpd.out");
        let (proc, port) = start_on_free_port("lighttpd", |port| {
            std::fs::write(&conf, lighttpd_conf(&dir, &base, &backend, port)).unwrap();
            let mut check = Command::new(&lighttpd);
            let out = hermetic_env(&mut check)
                .args(["-tt", "-f"])
                .arg(&conf)
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", lighttpd.display()));
            assert!(
                out.status.success(),
                "lighttpd refuses its config {}:\n{}{}\n--- config ---\n{}",
                conf.display(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                read_lossy(&conf)
            );
            let _ = std::fs::remove_file(&errorlog);
            let mut cmd = Command::new(&lighttpd);
            hermetic_env(&mut cmd).args(["-D", "-f"]).arg(&conf);
            let proc = ServerProcess::spawn(&mut cmd, &stdout_log);
            let (out, err) = (stdout_log.clone(), errorlog.clone());
            (
                proc,
                Box::new(move || {
                    format!(
                        "--- lighttpd output ---\n{}--- error.log ---\n{}",
                        read_lossy(&out),
                        read_lossy(&err)
                    )
                }),
            )
        });
        HttpGit {
            proc,
            port,
            user,
            password,
            tmp,
        }
    }

    /// `http://127.0.0.1:PORT/git/<name>.git` (`name` with or without `.git`), without
    /// credentials.
    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/git/{}.git", self.port, repo_name(name))
    }

    /// `http://USER:PASSWORD@127.0.0.1:PORT/git/<name>.git`: the URL with the right
    /// credentials (the password is hex, so it needs no escaping).
    pub fn url_with_credentials(&self, name: &str) -> String {
        format!(
            "http://{}:{}@127.0.0.1:{}/git/{}.git",
            self.user,
            self.password,
            self.port,
            repo_name(name)
        )
    }

    /// The user name accepted by the server.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password accepted by the server (a random hex token, new for every server).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The value of an `Authorization` header with the right credentials: `Basic <base64>`
    /// (for `git -c "http.extraHeader=Authorization: <this>"` or an HTTP client).
    pub fn basic_auth(&self) -> String {
        format!(
            "Basic {}",
            base64(format!("{}:{}", self.user, self.password).as_bytes())
        )
    }

    /// The port lighttpd listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// lighttpd's process id (leader of its own process group; the CGI children are in it).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// lighttpd's error log so far (startup messages, and everything http-backend and the hooks
    /// wrote to stderr): for debugging a failing test, which no test needs now.
    #[allow(dead_code)]
    pub fn error_log(&self) -> String {
        read_lossy(&self.tmp.path().join("error.log"))
    }
}

/// `$(git --exec-path)/git-http-backend`.
fn http_backend() -> PathBuf {
    let exec_path = run_git(Path::new("/"), &["--exec-path"]);
    let backend = Path::new(&exec_path).join("git-http-backend");
    assert!(
        is_executable(&backend),
        "{} is missing: install it with `apt-get install git` (make test does this)",
        backend.display()
    );
    backend
}

/// Quotes `s` as a lighttpd config string.
fn lq(s: impl AsRef<str>) -> String {
    let s = s.as_ref();
    assert!(
        !s.contains(['"', '\\', '\n']),
        "unexpected character in lighttpd config value {s:?}"
    );
    format!("\"{s}\"")
}

fn lp(p: &Path) -> String {
    lq(p.to_str().expect("non-UTF-8 path"))
}

fn lighttpd_conf(dir: &Path, base: &Path, backend: &Path, port: u16) -> String {
    let env = [
        ("GIT_PROJECT_ROOT", base.to_str().unwrap().to_string()),
        ("GIT_HTTP_EXPORT_ALL", "1".into()),
        ("GIT_CONFIG_NOSYSTEM", "1".into()),
        ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
        ("HOME", empty_home().to_str().unwrap().to_string()),
        ("PATH", search_path()),
        ("LC_ALL", "C".into()),
    ];
    let mut env_list = String::new();
    for (k, v) in env {
        let _ = writeln!(env_list, "        {} => {},", lq(k), lq(v));
    }
    format!(
        r#"# Generated by tests/git/servers.rs
server.modules = ( "mod_alias", "mod_auth", "mod_authn_file", "mod_setenv", "mod_cgi" )
server.document-root = {docroot}
server.bind = "127.0.0.1"
server.port = {port}
server.errorlog = {errorlog}
server.pid-file = {pidfile}
server.upload-dirs = ( {uploads} )

auth.backend = "plain"
auth.backend.plain.userfile = {users}
auth.require = ( "/" => (
    "method" => "basic",
    "realm" => "wardfs-git",
    "require" => "valid-user",
) )

alias.url = ( "/git" => {backend} )
$HTTP["url"] =~ "^/git" {{
    cgi.assign = ( "" => "" )
    setenv.set-environment = (
{env_list}    )
}}
"#,
        docroot = lp(&dir.join("htdocs")),
        errorlog = lp(&dir.join("error.log")),
        pidfile = lp(&dir.join("lighttpd.pid")),
        uploads = lp(&dir.join("uploads")),
        users = lp(&dir.join("users")),
        backend = lp(backend),
    )
}

/// Standard base64 with padding.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

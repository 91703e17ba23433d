//! Tests of `wardfs mcp` with a real MCP client: the official MCP Python SDK's stdio client
//! (`mcp` from PyPI, installed into a virtualenv by `.ci/install-deps test`) runs
//! `tests/mcp/client.py`, which spawns `wardfs mcp` against a real daemon started here, lists
//! the tools, calls each one and checks results, error shapes and that every answer matches its
//! tool's `outputSchema`. These tests assert on the script's exit status and output; a missing
//! Python or `mcp` package fails them, naming the fix.

pub(crate) mod confined;
mod limits;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::sandbox_agent::agent_binary;
use crate::support::{Daemon, BIN};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
/// The `mcp` version `.ci/install-deps test` installs.
const MCP_VERSION: &str = "2.3.0";

/// Returns the Python of the test virtualenv that has the `mcp` package, or fails with what to
/// install.
fn python() -> PathBuf {
    let candidates: Vec<PathBuf> = match std::env::var_os("WARDFS_TEST_VENV") {
        Some(v) => vec![PathBuf::from(v)],
        None => {
            let mut c = vec![PathBuf::from("/opt/wardfs-test-venv")];
            if let Some(home) = std::env::var_os("HOME") {
                c.push(Path::new(&home).join(".local/share/wardfs-test-venv"));
            }
            c
        }
    };
    let fix = format!(
        "run `.ci/install-deps test` (make test does), which makes a virtualenv with \
         `python3 -m venv /opt/wardfs-test-venv` (Debian: apt-get install python3-venv) and runs \
         `/opt/wardfs-test-venv/bin/pip install mcp=={MCP_VERSION}`; \
         $WARDFS_TEST_VENV names another virtualenv"
    );
    let Some(py) = candidates
        .iter()
        .map(|v| v.join("bin/python"))
        .find(|p| p.is_file())
    else {
        panic!("no test virtualenv with Python at {candidates:?}: {fix}");
    };
    let out = Command::new(&py)
        .args([
            "-c",
            "import importlib.metadata as m, mcp.client.stdio; print(m.version('mcp'))",
        ])
        .current_dir("/")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}; {fix}", py.display()));
    assert!(
        out.status.success(),
        "the `mcp` package is not importable by {}: {}; {fix}",
        py.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(
        version,
        MCP_VERSION,
        "{} has mcp {version}, the tests pin {MCP_VERSION}; {fix}",
        py.display()
    );
    py
}

/// Runs the client script in `mode` against `wardfs mcp --socket socket --config config`,
/// killing it after two minutes.
fn run_client(socket: &Path, config: &Path, mode: &str) -> Output {
    run_client_env(socket, config, mode, &[])
}

fn run_client_env(socket: &Path, config: &Path, mode: &str, env: &[(&str, &Path)]) -> Output {
    let py = python();
    let mut child = Command::new(py)
        .arg(SCRIPT)
        .arg(BIN)
        .arg(socket)
        .arg(config)
        .arg(mode)
        .env_remove("WARDFS_SOCKET")
        .env_remove("WARDFS_CONFIG")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// Asserts that the script's stdout says the answers of exactly `tools` were validated against
/// their `outputSchema`.
fn validated(stdout: &str, tools: &[&str]) {
    let mut want = tools.to_vec();
    want.sort();
    let line = format!(
        "ok answers validated against their outputSchema: {}",
        want.join(" ")
    );
    assert!(
        stdout.lines().any(|l| l == line),
        "no `{line}` in:\n{stdout}"
    );
}

/// Asserts that the script passed; returns its stdout.
fn passed(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && stdout.lines().last() == Some("PASS"),
        "client.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn every_tool_answers_a_real_mcp_client() {
    let d = Daemon::start("");
    let out = run_client(&d.socket, &d.config, "tools");
    let stdout = passed(&out);
    for line in [
        "ok tools are the 24, no git_push",
        "ok events gives the first two, in order, and says more",
        "ok events rows keep their kind and zone",
        "ok resuming from the cursor gives the rest, nothing repeated",
        "ok a move names both ends as virtual paths",
        "ok events error code is INVALID_ARGUMENT",
        "ok an error about no path leaves path out",
        "ok NOT_UNIQUE names the path",
        "ok read has an object outputSchema",
        "ok a wrong answer fails the schema",
        "ok an event without its row fails the schema",
        "ok read returns the text written",
        "ok a truncated read says how to go on",
        "ok edit error code is NOT_UNIQUE",
        "ok read error code is NOT_FOUND",
        "ok read error code is OUTSIDE_ZONE",
        "ok grep finds the match with path and line",
        "ok git_status lists no repositories",
        "ok staged_show error code is NOT_FOUND",
        "ok checkpoint_diff names the changed file",
        "ok restore puts the file back",
        "ok restoring the pre-restore checkpoint undoes it",
        "ok restore error code is NOT_FOUND",
        "ok a merge of a line both sides changed applies nothing and names the conflict",
        "ok changes error code is NOT_FOUND",
        "ok merge with ours settles the conflict, keeping the parent's version",
        "ok update keeps both sides of a conflict",
        "ok mirror_push without a sandbox is an error with a code",
        "ok mirror_pull without a sandbox is an error with a code",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no `{line}` in:\n{stdout}"
        );
    }
    validated(
        &stdout,
        &[
            "changes",
            "checkpoint",
            "checkpoint_diff",
            "checkpoint_list",
            "edit",
            "events",
            "fork",
            "forks",
            "git_status",
            "glob",
            "grep",
            "ls",
            "merge",
            "mv",
            "read",
            "restore",
            "rm",
            "staged_list",
            "stat",
            "update",
            "write",
        ],
    );
    // What the tools did went through the daemon: the files are in the zones' directories.
    let root = d.dir.path().join("root");
    assert_eq!(
        std::fs::read_to_string(root.join("cache/a.md")).unwrap(),
        "ALPHA\nBETA\ngamma BETA\n"
    );
    assert!(!root.join("workspace/notes").exists());
    assert!(root.join("workspace/src/main.rs").is_file());
}

#[test]
fn an_agent_rewinds_what_its_tools_and_its_shell_did_through_mcp_and_the_mount() {
    let d = Daemon::mounted("[checkpoints]\nauto_quiet_ms = 0\n");
    let mnt = d.ws();
    let out = run_client_env(&d.socket, &d.config, "rewind", &[("WARDFS_TEST_MNT", &mnt)]);
    let stdout = passed(&out);
    for line in [
        "ok checkpoint_diff names what the tools and the shell changed",
        "ok the shell's removal is undone, seen through the mount",
        "ok restoring the pre-restore checkpoint brings the astray state back: nothing is lost",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no `{line}` in:\n{stdout}"
        );
    }
    // The journal names both writers: the MCP tools (via the API) and the shell (the mount).
    let log = d.cli_ok(&["log", "--limit", "200"]);
    assert!(
        log.contains("[api pid") && log.contains("[fuse pid"),
        "{log}"
    );
}

/// Runs git in `dir` with a fixed identity and dates, failing the test when it fails.
fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@localhost"])
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
        .output()
        .unwrap_or_else(|e| panic!("cannot run git (apt-get install git): {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn git_tools_stage_a_commit_for_review() {
    // The repository is a local one in the daemon's temp dir: listed as allowed.
    let d = Daemon::start("[git]\nlocal_remotes = [\".\"]\n");
    let repo = d.dir.path().join("demo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(repo.join("README.md"), "# Demo\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "README.md"]);
    git(&repo, &["commit", "-q", "-m", "Start"]);
    let out = Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(["git", "pull", "--into", "/workspace/demo"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "wardfs git pull: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = passed(&run_client(&d.socket, &d.config, "git"));
    assert!(
        stdout.lines().any(|l| l == "ok staged_show has the diff"),
        "{stdout}"
    );
    validated(
        &stdout,
        &[
            "edit",
            "git_stage",
            "git_status",
            "staged_list",
            "staged_show",
            "write",
        ],
    );
}

#[test]
fn git_push_is_offered_only_when_the_config_allows_it_and_pushes() {
    let d = Daemon::start("[mcp]\nallow_push = true\n[git]\nlocal_remotes = [\".\"]\n");
    // A bare repository with one commit, pulled into the workspace.
    let bare = d.dir.path().join("demo.git");
    let seed = d.dir.path().join("seed");
    git(
        d.dir.path(),
        &["init", "-q", "--bare", "-b", "main", "demo.git"],
    );
    git(d.dir.path(), &["init", "-q", "-b", "main", "seed"]);
    std::fs::write(seed.join("README.md"), "# Demo\n").unwrap();
    git(&seed, &["add", "README.md"]);
    git(&seed, &["commit", "-q", "-m", "Start"]);
    git(&seed, &["push", "-q", bare.to_str().unwrap(), "main"]);
    let out = Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(["git", "pull", "--into", "/workspace/demo"])
        .arg(&bare)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "wardfs git pull: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = passed(&run_client(&d.socket, &d.config, "push"));
    for line in [
        "ok tools are the 24 plus git_push",
        "ok git_push pushes the staged commit",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no `{line}` in:\n{stdout}"
        );
    }
    validated(&stdout, &["edit", "git_push", "git_stage"]);
    // The push reached the remote.
    let shown = Command::new("git")
        .arg("--git-dir")
        .arg(&bare)
        .args(["show", "main:README.md"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "# Pushed\n");
}

#[test]
fn sandbox_tools_make_mirror_and_destroy_a_sandbox() {
    let d = Daemon::start(&format!(
        "[mcp]\nallow_sandboxes = true\nallow_run = true\n\
         [sandboxes.dev]\nprovider = \"local\"\nagent_bin = \"{}\"\n",
        agent_binary().display()
    ));
    let stdout = passed(&run_client(&d.socket, &d.config, "sandbox"));
    for line in [
        "ok sandbox_create makes it active",
        "ok mirror_push sends the file",
        "ok run sees the edit, passes the exit code and brings the change back",
        "ok the run's file is in the workspace",
        "ok sandbox_destroy destroys it",
        "ok a sandbox's events keep its name as their path",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no `{line}` in:\n{stdout}"
        );
    }
    validated(
        &stdout,
        &[
            "events",
            "mirror_pull",
            "mirror_push",
            "read",
            "run",
            "sandbox_create",
            "sandbox_destroy",
            "sandbox_list",
            "write",
        ],
    );
}

/// Returns the tool names `wardfs mcp --help` lists: the comma-separated names on the indented
/// lines under each `Tools …:` / `Only with …:` heading.
fn tools_in_help(help: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut in_list = false;
    for line in help.lines() {
        if line.starts_with("Tools ") || line.starts_with("Only with ") {
            in_list = true;
        } else if in_list && line.starts_with("  ") {
            names.extend(
                line.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string),
            );
        } else {
            in_list = false;
        }
    }
    names.sort();
    names
}

#[test]
fn the_help_names_exactly_the_tools_the_server_lists() {
    // Every switch on: tools/list then offers every tool there is.
    let d = Daemon::options()
        .extra("[mcp]\nallow_push = true\nallow_sandboxes = true\nallow_run = true\n")
        .prepare();
    let help = Command::new(BIN).args(["mcp", "--help"]).output().unwrap();
    assert!(help.status.success(), "{help:?}");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let stdout = passed(&run_client(&d.socket, &d.config, "list"));
    let listed: Vec<String> = stdout
        .lines()
        .find_map(|l| l.strip_prefix("listed "))
        .unwrap_or_else(|| panic!("no `listed` line in:\n{stdout}"))
        .split(' ')
        .map(str::to_string)
        .collect();
    assert_eq!(listed.len(), 30, "{stdout}");
    assert_eq!(tools_in_help(&help), listed, "{help}");
    // Each tool behind a switch is listed under its switch.
    let push = help.find("allow_push = true").unwrap();
    let sandboxes = help.find("allow_sandboxes = true").unwrap();
    assert!(push < help.find("git_push").unwrap(), "{help}");
    assert!(sandboxes < help.find("sandbox_create").unwrap(), "{help}");
    let run = help.find("allow_run = true").unwrap();
    assert_eq!(
        help[run..].lines().nth(1).map(str::trim),
        Some("run"),
        "{help}"
    );
}

#[test]
fn a_missing_daemon_is_a_tool_error_naming_the_socket() {
    // Configured, never started.
    let d = Daemon::options().prepare();
    let stdout = passed(&run_client(&d.socket, &d.config, "no-daemon"));
    for line in [
        "ok read error code is DAEMON_NOT_RUNNING",
        "ok DAEMON_NOT_RUNNING has no path",
    ] {
        assert!(
            stdout.lines().any(|l| l == line),
            "no `{line}` in:\n{stdout}"
        );
    }
}

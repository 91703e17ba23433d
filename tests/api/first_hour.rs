//! What a newcomer meets in the first hour (issue 28): paths typed the way they stand, errors
//! printed once with a code, one daemon per state directory, counts said right, and colour
//! only where NO_COLOR allows it. A real daemon, the real CLI.

use std::process::{Command, Output};

use serde_json::Value;

use crate::support::daemon::serve_command;
use crate::support::tools::require_tool;
use crate::support::{Daemon, BIN};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The CLI against `d`, run in `dir` (with `$PWD` saying so, as a shell would).
fn cli_in(d: &Daemon, dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .current_dir(dir)
        .env("PWD", dir)
        .env_remove("WARDFS_CONFIG")
        .output()
        .unwrap()
}

#[test]
fn paths_relative_to_where_one_stands_and_real_paths_of_a_zones_directory_name_the_file() {
    let d = Daemon::start("");
    d.cli_ok(&["write", "/workspace/src/lib.rs", "pub fn a() {}\n"]);
    let src = d.zone_dir("workspace").join("src");
    // Relative to the zone's directory beside the mount.
    let out = cli_in(&d, &src, &["read", "lib.rs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "pub fn a() {}\n");
    let out = cli_in(&d, &src, &["write", "../notes.md", "n\n"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "created /workspace/notes.md (2 bytes)");
    // `.` is the directory one stands in.
    let out = cli_in(&d, &src, &["ls", "."]);
    assert_eq!(stdout(&out), "lib.rs\n", "{}", stderr(&out));
    // A real path, from anywhere.
    let real = src.join("lib.rs");
    let out = cli_in(
        &d,
        std::path::Path::new("/"),
        &["stat", real.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let moved = cli_in(&d, &src, &["mv", "lib.rs", "/workspace/src/main.rs"]);
    assert!(moved.status.success(), "{}", stderr(&moved));
    assert!(src.join("main.rs").exists() && !src.join("lib.rs").exists());
    // Virtual paths work wherever one stands, the tolerated slash-less form outside the zones.
    let out = cli_in(&d, d.dir.path(), &["read", "workspace/notes.md"]);
    assert_eq!(stdout(&out), "n\n", "{}", stderr(&out));
}

#[test]
fn a_path_outside_every_zone_is_refused_naming_the_forms_that_work() {
    let d = Daemon::start("");
    let out = cli_in(&d, d.dir.path(), &["--json", "read", "notes.md"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["code"], "INVALID_PATH");
    let msg = v["message"].as_str().unwrap();
    assert!(
        msg.contains("is not in a zone") && msg.contains("/workspace"),
        "{msg}"
    );
    assert!(
        msg.contains(d.zone_dir("workspace").to_str().unwrap()),
        "names the zone's directory: {msg}"
    );
    // Nothing was written anywhere for it.
    assert!(!d.dir.path().join("notes.md").exists());
}

#[test]
fn a_config_error_is_printed_once_with_its_place_and_exits_2_from_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let bad_syntax = dir.path().join("syntax.toml");
    std::fs::write(&bad_syntax, "state_dir = \"s\"\nmount = [\n").unwrap();
    let bad_value = dir.path().join("value.toml");
    std::fs::write(
        &bad_value,
        "state_dir = \"s\"\n[limits]\nmax_read_bytes = 0\n",
    )
    .unwrap();
    let missing = dir.path().join("missing.toml");
    for (cfg, place) in [
        (&bad_syntax, "line 2, column"),
        (&bad_value, "line 3, column 1"),
        (&missing, "(os error 2)"),
    ] {
        let serve = serve_command()
            .args(["--no-mount", "--config"])
            .arg(cfg)
            .output()
            .unwrap();
        let client = Command::new(BIN)
            .arg("--config")
            .arg(cfg)
            .args(["ls", "/"])
            .env_remove("WARDFS_SOCKET")
            .output()
            .unwrap();
        for out in [&serve, &client] {
            let err = stderr(out);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert_eq!(err.matches("wardfs:").count(), 1, "printed once: {err}");
            assert_eq!(err.matches(place).count(), 1, "{place} once: {err}");
            assert!(!err.contains("ERROR"), "not also logged: {err}");
        }
        assert_eq!(
            stderr(&serve),
            stderr(&client),
            "one message for every command"
        );
    }
}

#[test]
fn json_errors_carry_a_code_even_when_the_daemon_is_down_and_unmount_speaks_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .arg("--socket")
        .arg(dir.path().join("none.sock"))
        .args(["--json", "read", "/workspace/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["code"], "DAEMON_NOT_RUNNING");
    assert!(v.get("path").is_none(), "no path key when none: {v}");
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[limits]\nmax_read_bytes = 0\n").unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["--json", "ls"])
        .env_remove("WARDFS_SOCKET")
        .output()
        .unwrap();
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["code"], "INVALID_CONFIG", "{v}");
    // An API error keeps its path.
    let d = Daemon::start("");
    let out = d.cli(&["--json", "read", "/workspace/none"]);
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (v["code"].as_str(), v["path"].as_str()),
        (Some("NOT_FOUND"), Some("/workspace/none"))
    );
    // unmount --json: one JSON object, whatever the state.
    let cfg = dir.path().join("m.toml");
    std::fs::write(
        &cfg,
        format!("mount = \"{}\"\n", dir.path().join("mnt").display()),
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&cfg)
        .args(["--json", "unmount"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v["state"], "not_mounted", "{v}");
}

#[test]
fn a_second_daemon_on_the_same_state_is_refused_naming_the_first_and_journals_nothing() {
    let d = Daemon::start("");
    d.cli_ok(&["write", "/workspace/kept.txt", "x"]);
    let rows_before = d.journal(1000).len();
    // Another socket, the same config (so the same state directory and zones).
    let other = d.dir.path().join("run/other.sock");
    let out = serve_command()
        .args(["--no-mount", "--socket"])
        .arg(&other)
        .arg("--config")
        .arg(&d.config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("(pid {})", d.pid())) && err.contains("state directory"),
        "{err}"
    );
    assert!(!other.exists(), "the second daemon never listened");
    assert_eq!(
        d.journal(1000).len(),
        rows_before,
        "nothing journaled by the second"
    );
    assert!(d.zone_dir("workspace").join("kept.txt").exists());
}

#[test]
fn a_checkpoint_says_what_it_made_and_counts_say_one_file() {
    let d = Daemon::start("");
    d.cli_ok(&["write", "/workspace/one.txt", "1"]);
    let out = d.cli_ok(&["checkpoint", "-m", "first"]);
    let id = d.cli_json(&["checkpoint", "list"])["checkpoints"][0]["id"]
        .as_i64()
        .unwrap();
    assert_eq!(
        out.trim(),
        format!("created checkpoint {id} of /workspace (1 file): first")
    );
    d.cli_ok(&["write", "/workspace/two.txt", "2"]);
    let out = d.cli_ok(&["checkpoint"]);
    assert!(out.trim().ends_with("(2 files)"), "{out}");
    let list = d.cli_ok(&["checkpoint", "list"]);
    assert!(
        list.contains(" 1 file ") && list.contains(" 2 files "),
        "{list}"
    );
    assert!(!list.contains("1 files"), "{list}");
}

/// Runs the shell command `cmd` on a terminal (`script`, `TERM=xterm`, `RUST_LOG=info`, no
/// WARDFS_* variables) with `NO_COLOR` set to `no_color` or unset; returns what it printed.
fn on_a_terminal(cmd: &str, no_color: Option<&str>) -> String {
    let mut c = Command::new("script");
    c.args(["-qec", cmd, "/dev/null"])
        .env("TERM", "xterm")
        .env("RUST_LOG", "info")
        .env_remove("WARDFS_SOCKET")
        .env_remove("WARDFS_CONFIG");
    match no_color {
        Some(v) => c.env("NO_COLOR", v),
        None => c.env_remove("NO_COLOR"),
    };
    stdout(&c.output().unwrap())
}

#[test]
fn no_color_turns_colour_off_on_a_terminal() {
    require_tool("script", "bsdutils");
    let d = Daemon::start("");
    // `script` gives doctor a terminal; its output then has colours unless NO_COLOR is set.
    let cmd = format!("{BIN} --config {} doctor", d.config.display());
    let doctor = |no_color: Option<&str>| on_a_terminal(&cmd, no_color);
    let coloured = doctor(None);
    assert!(
        coloured.contains("\x1b[32m"),
        "a terminal gets colour: {coloured:?}"
    );
    let plain = doctor(Some("1"));
    assert!(plain.contains("config"), "{plain:?}");
    assert!(!plain.contains("\x1b["), "NO_COLOR=1: {plain:?}");
    // no-color.org: an empty NO_COLOR does not count.
    assert!(doctor(Some("")).contains("\x1b[32m"));
}

#[test]
fn doctor_calls_a_healthy_daemon_healthy() {
    let d = Daemon::start("");
    let (code, report) = d.doctor();
    let daemon = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "daemon")
        .unwrap()
        .clone();
    assert_eq!(daemon["level"], "ok", "{report}");
    let detail = daemon["detail"].as_str().unwrap();
    assert!(detail.contains(&format!("pid {}", d.pid())), "{detail}");
    assert!(code == 0, "{report}");
}

#[test]
fn the_daemons_log_on_a_terminal_has_colour_unless_no_color_is_set() {
    require_tool("script", "bsdutils");
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"state\"\nsocket = \"{}\"\n[zones]\nroot = \"root\"\n",
            dir.path().join("run/w.sock").display()
        ),
    )
    .unwrap();
    // `script` gives the daemon a terminal; SIGINT after a second stops it cleanly.
    let log = |no_color: Option<&str>| {
        let cmd = format!(
            "timeout -s INT 1 {BIN} --config {} serve --no-mount",
            cfg.display()
        );
        on_a_terminal(&cmd, no_color)
    };
    let coloured = log(None);
    assert!(coloured.contains("zone ready"), "{coloured:?}");
    assert!(
        coloured.contains("\x1b["),
        "a terminal gets colour: {coloured:?}"
    );
    let plain = log(Some("1"));
    assert!(plain.contains("zone ready"), "{plain:?}");
    assert!(!plain.contains("\x1b["), "NO_COLOR=1: {plain:?}");
}

//! The CLI against a real daemon: every subcommand, human and JSON output, exit codes.

use serde_json::Value;

use crate::support::daemon::serve_command;
use crate::support::{Daemon, BIN};

fn json(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

#[test]
fn file_operations_round_trip() {
    let d = Daemon::start("");
    assert_eq!(
        d.cli_ok(&["write", "/workspace/src/a.txt", "one\ntwo\nthree\n"])
            .trim(),
        "created /workspace/src/a.txt (14 bytes)"
    );
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("src/a.txt")).unwrap(),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        d.cli_ok(&["read", "/workspace/src/a.txt"]),
        "one\ntwo\nthree\n"
    );
    assert_eq!(
        d.cli_ok(&[
            "read",
            "/workspace/src/a.txt",
            "--offset",
            "2",
            "--limit",
            "1"
        ]),
        "two\n"
    );
    let r = json(&d.cli_ok(&[
        "--json",
        "read",
        "/workspace/src/a.txt",
        "--offset",
        "2",
        "--limit",
        "1",
    ]));
    assert_eq!(r["total_lines"], 3);
    assert_eq!(r["truncated"], true);
    assert_eq!(r["lines"], 1);
    assert_eq!(
        d.cli_ok(&["read", "-n", "/workspace/src/a.txt", "--limit", "1"]),
        "     1\tone\n"
    );

    assert_eq!(
        d.cli_ok(&["edit", "/workspace/src/a.txt", "two", "2"])
            .trim(),
        "/workspace/src/a.txt: replaced 1 occurrence"
    );
    assert_eq!(
        d.cli_ok(&["read", "/workspace/src/a.txt"]),
        "one\n2\nthree\n"
    );

    d.cli_ok(&["mkdir", "-p", "/workspace/deep/er"]);
    assert!(d.zone_dir("workspace").join("deep/er").is_dir());
    d.cli_ok(&["mv", "/workspace/src/a.txt", "/workspace/deep/er/b.txt"]);
    assert_eq!(d.cli_ok(&["ls", "/workspace/deep/er"]), "b.txt\n");
    assert_eq!(d.cli_ok(&["ls"]), "cache/\nworkspace/\n");
    let ls = json(&d.cli_ok(&["--json", "ls", "/workspace"]));
    let names: Vec<_> = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["deep", "src"]);
    assert_eq!(ls["entries"][0]["kind"], "dir");

    let st = json(&d.cli_ok(&["--json", "stat", "/workspace/deep/er/b.txt"]));
    assert_eq!(st["kind"], "file");
    assert_eq!(st["size"], 12);
    assert_eq!(
        d.cli_ok(&["exists", "/workspace/deep/er/b.txt"]).trim(),
        "yes"
    );
    let out = d.cli(&["exists", "/workspace/nope"]);
    assert_eq!(out.status.code(), Some(1));

    let real = d.cli_ok(&["resolve", "/workspace/deep/er/b.txt"]);
    assert_eq!(
        real.trim(),
        std::fs::canonicalize(d.zone_dir("workspace").join("deep/er/b.txt"))
            .unwrap()
            .display()
            .to_string()
    );

    assert_eq!(
        d.cli_ok(&["grep", "thr", "/workspace"]),
        "/workspace/deep/er/b.txt:3:three\n"
    );
    assert_eq!(
        d.cli_ok(&["grep", "-l", "THR", "-i"]),
        "/workspace/deep/er/b.txt\n"
    );
    assert_eq!(
        d.cli_ok(&["grep", "-c", "e"]),
        "/workspace/deep/er/b.txt:2\n"
    );
    assert_eq!(d.cli_ok(&["glob", "*.txt"]), "/workspace/deep/er/b.txt\n");
    assert_eq!(d.cli(&["grep", "absent-string"]).status.code(), Some(1));
    assert_eq!(d.cli(&["glob", "*.nothing"]).status.code(), Some(1));

    d.cli_ok(&["rm", "/workspace/deep/er/b.txt"]);
    assert!(!d.zone_dir("workspace").join("deep/er/b.txt").exists());
    assert_eq!(
        d.cli(&["rm", "/workspace/deep"]).status.code(),
        Some(4),
        "non-empty dir needs -r"
    );
    d.cli_ok(&["rm", "-r", "/workspace/deep"]);
    assert!(!d.zone_dir("workspace").join("deep").exists());
}

#[test]
fn write_from_stdin_is_binary_safe_and_cat_streams_it_back() {
    let d = Daemon::start("");
    let bytes: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let out = d.cli_stdin(&["write", "/cache/blob.bin"], Some(&bytes));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read(d.zone_dir("cache").join("blob.bin")).unwrap(),
        bytes
    );
    let out = d.cli(&["cat", "/cache/blob.bin"]);
    assert!(out.status.success());
    assert_eq!(out.stdout, bytes);
    // Text reads of binary content get a clear error.
    let out = d.cli(&["read", "/cache/blob.bin"]);
    assert_eq!(out.status.code(), Some(7));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not UTF-8 text") && err.contains("/cache/blob.bin"),
        "{err}"
    );
}

#[test]
fn exit_codes_follow_the_error_class() {
    let d = Daemon::start("");
    d.cli_ok(&["write", "/workspace/f.txt", "a a b"]);
    let cases: &[(&[&str], i32, &str)] = &[
        (&["read", "/workspace/missing"], 3, "NOT_FOUND"),
        (&["read", "/nowhere/x"], 2, "INVALID_PATH"),
        (&["read", "/workspace/../x"], 6, "OUTSIDE_ZONE"),
        (&["edit", "/workspace/f.txt", "zzz", "y"], 5, "NO_MATCH"),
        (&["edit", "/workspace/f.txt", "a", "y"], 5, "NOT_UNIQUE"),
        (&["mkdir", "/workspace/f.txt"], 4, "EXISTS"),
        (
            &["read", "/workspace/f.txt", "--offset", "0"],
            2,
            "INVALID_ARGUMENT",
        ),
        (&["grep", "(unclosed", "/workspace"], 2, "INVALID_ARGUMENT"),
        (&["glob", "a[", "/workspace"], 2, "INVALID_ARGUMENT"),
    ];
    for (args, exit, code) in cases {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let out = d.cli(&full);
        assert_eq!(
            out.status.code(),
            Some(*exit),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v = json(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(v["code"], *code, "{args:?}");
        assert!(
            !String::from_utf8_lossy(&out.stderr).trim().is_empty(),
            "{args:?} printed no message"
        );
    }
    // A file left untouched by every failed edit.
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("f.txt")).unwrap(),
        "a a b"
    );
    assert_eq!(
        d.cli_ok(&["edit", "--all", "/workspace/f.txt", "a", "y"])
            .trim(),
        "/workspace/f.txt: replaced 2 occurrences"
    );
}

#[test]
fn daemon_not_running_is_exit_8_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["--socket"])
        .arg(dir.path().join("none.sock"))
        .args(["read", "/workspace/x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not running") && err.contains("wardfs serve"),
        "{err}"
    );
}

#[test]
fn journal_records_who_changed_what() {
    let d = Daemon::start("");
    let child = std::process::Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(["write", "/workspace/j.txt", "hello"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    assert!(child.wait_with_output().unwrap().status.success());
    d.cli_ok(&["edit", "/workspace/j.txt", "hello", "bye"]);
    d.cli_ok(&["mv", "/workspace/j.txt", "/workspace/k.txt"]);
    d.cli_ok(&["rm", "/workspace/k.txt"]);
    d.cli_ok(&["mkdir", "/cache/dl"]);
    let log = json(&d.cli_ok(&["--json", "log"]));
    let entries = log["entries"].as_array().unwrap();
    let ops: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["op"].as_str().unwrap(),
                e["zone"].as_str().unwrap(),
                e["path"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [
            ("mkdir", "cache", "dl"),
            ("delete", "workspace", "k.txt"),
            ("move", "workspace", "j.txt"),
            ("edit", "workspace", "j.txt"),
            ("write", "workspace", "j.txt"),
        ]
    );
    assert_eq!(entries[2]["to_path"], "k.txt");
    assert_eq!(entries[4]["pid"], pid);
    assert_eq!(entries[4]["bytes"], 5);
    assert_eq!(entries[4]["uid"], rustix::process::getuid().as_raw());
    assert_eq!(entries[4]["via"], "api");
    let human = d.cli_ok(&["log", "/workspace/k.txt"]);
    assert!(
        human.contains("delete") && human.contains("/workspace/k.txt"),
        "{human}"
    );
    assert!(!human.contains("mkdir"), "path filter: {human}");
    let st = d.cli_ok(&["status"]);
    assert!(
        st.contains("5 journal rows") && st.contains("zone /workspace"),
        "{st}"
    );
}

#[test]
fn help_teaches_shapes_and_exit_codes() {
    let out = std::process::Command::new(BIN)
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "serve",
        "read",
        "write",
        "edit",
        "grep",
        "glob",
        "resolve",
        "Exit codes",
        "/workspace",
    ] {
        assert!(help.contains(word), "--help lacks {word}: {help}");
    }
    let out = std::process::Command::new(BIN)
        .args(["grep", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("--context") && help.contains("--files-with-matches"),
        "{help}"
    );
}

#[test]
fn bad_config_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[limits]\nmax_read_bytes = 0\n").unwrap();
    let out = serve_command()
        .args(["--no-mount", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limits.max_read_bytes"), "{err}");
    std::fs::write(&cfg, "[zones]\nmood = \"x\"\n").unwrap();
    let out = serve_command()
        .args(["--no-mount", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mood"), "{err}");
}

#[test]
fn embedded_default_serves_dot_wardfs_in_the_current_dir() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let mut child = serve_command()
        .arg("--no-mount")
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", &run)
        .env("XDG_STATE_HOME", dir.path().join("state"))
        .env_remove("WARDFS_CONFIG")
        .env_remove("WARDFS_SOCKET")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let sock = run.join("wardfs/wardfs.sock");
    let start = std::time::Instant::now();
    while !sock.exists() && start.elapsed().as_secs() < 15 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // The CLI finds the socket the same way, with no flags.
    let out = std::process::Command::new(BIN)
        .args(["write", "/workspace/x.txt", "hi"])
        .current_dir(dir.path())
        .env("XDG_RUNTIME_DIR", &run)
        .env_remove("WARDFS_CONFIG")
        .env_remove("WARDFS_SOCKET")
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".wardfs/workspace/x.txt")).unwrap(),
        "hi"
    );
    assert!(dir.path().join(".wardfs/cache").is_dir());
    assert!(dir.path().join("state/wardfs/state.db").is_file());
}

#[test]
fn every_subcommand_exits_quietly_when_its_output_is_closed() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let d = Daemon::start("");
    // More than a pipe holds, so the writer meets the closed pipe whatever it buffers.
    let big = "line of text\n".repeat(100_000);
    std::fs::write(d.zone_dir("workspace").join("big.txt"), &big).unwrap();
    for args in [
        &["completions", "bash"][..],
        &["completions", "zsh"],
        &["completions", "fish"],
        &["doctor"],
        &["install-service", "--print"],
        &["--help"],
        &["read", "/workspace/big.txt"],
        &["cat", "/workspace/big.txt"],
        &["grep", "line", "/workspace"],
        &["ls", "/workspace"],
        &["log"],
    ] {
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(&d.config)
            .arg("--socket")
            .arg(&d.socket)
            .args(args)
            .env_remove("WARDFS_CONFIG")
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `| head -0`: the reader is gone before the first byte is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "wardfs {args:?} with its output closed: {stderr}"
        );
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "wardfs {args:?} with its output closed ended with {}: {stderr}",
            out.status
        );
    }
}

/// Journal rows as (via, op, path), oldest first.
fn journal_rows(d: &Daemon) -> Vec<(String, String, String)> {
    let log = json(&d.cli_ok(&["--json", "log", "--limit", "1000"]));
    let mut rows: Vec<(String, String, String)> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("via"), s("op"), s("path"))
        })
        .collect();
    rows.reverse();
    rows
}

#[test]
fn changes_beside_wardfs_are_journaled_by_the_watcher_and_its_own_are_not() {
    // No mount: the watcher is the daemon's, not the mount's.
    let d = Daemon::start("");
    let ws = d.zone_dir("workspace");
    d.cli_ok(&["write", "/workspace/api.txt", "one"]);
    d.cli_ok(&["write", "/workspace/deep/er/api2.txt", "two"]);
    d.cli_ok(&["edit", "/workspace/api.txt", "one", "uno"]);
    d.cli_ok(&["mkdir", "/workspace/tree"]);
    d.cli_ok(&["mkdir", "/workspace/tree/sub"]);
    d.cli_ok(&["write", "/workspace/tree/sub/x.txt", "x"]);
    d.cli_ok(&["rm", "-r", "/workspace/tree"]);
    // Beside wardfs: an editor, a build, `rm` on the zone's directory.
    std::fs::write(ws.join("beside.txt"), "made beside").unwrap();
    std::fs::create_dir_all(ws.join("gen/out")).unwrap();
    std::fs::write(ws.join("gen/out/obj.o"), "obj").unwrap();
    std::fs::write(ws.join("gone.txt"), "short-lived").unwrap();
    std::os::unix::fs::symlink("beside.txt", ws.join("link")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let want = [
        ("watcher", "write", "beside.txt"),
        ("watcher", "write", "gen/out/obj.o"),
        ("watcher", "write", "link"),
    ];
    loop {
        let rows = journal_rows(&d);
        let has = |w: &(&str, &str, &str)| {
            rows.iter()
                .any(|r| (r.0.as_str(), r.1.as_str(), r.2.as_str()) == *w)
        };
        if want.iter().all(has) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "changes beside wardfs not journaled within 10 s: {rows:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::fs::remove_file(ws.join("gone.txt")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !journal_rows(&d).contains(&("watcher".into(), "delete".into(), "gone.txt".into())) {
        assert!(
            std::time::Instant::now() < deadline,
            "a removal beside wardfs not journaled: {:?}",
            journal_rows(&d)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Past the watcher's settle time: nothing wardfs did itself shows up as the watcher's. (Must
    // stay: only time shows a row does not come.)
    std::thread::sleep(std::time::Duration::from_millis(800));
    let rows = journal_rows(&d);
    let watcher_paths: Vec<&str> = rows
        .iter()
        .filter(|r| r.0 == "watcher")
        .map(|r| r.2.as_str())
        .collect();
    for own in [
        "api.txt",
        "deep/er/api2.txt",
        "tree",
        "tree/sub",
        "tree/sub/x.txt",
    ] {
        assert!(
            !watcher_paths.contains(&own),
            "wardfs's own change to {own} journaled as the watcher's: {rows:?}"
        );
    }
    assert!(
        watcher_paths.iter().all(|p| !p.contains(".wardfs-tmp")),
        "a temp name was journaled: {rows:?}"
    );
    // Directories beside wardfs are not rows of their own; the files in them are.
    assert!(!watcher_paths.contains(&"gen"), "{rows:?}");
    let api_writes = rows
        .iter()
        .filter(|r| r.2 == "api.txt" && r.0 == "api")
        .count();
    assert_eq!(api_writes, 2, "write and edit, each once: {rows:?}");
}

//! Daily-use commands: shell completions, the systemd unit and its readiness notification, and
//! garbage collection of old journal rows and leftover temp files.

use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};

use crate::support::daemon::serve_command;
use crate::support::{Daemon, BIN};

#[test]
fn bash_completions_name_the_subcommands() {
    let out = Command::new(BIN)
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let script = String::from_utf8(out.stdout).unwrap();
    for sub in [
        "serve",
        "read",
        "grep",
        "staged",
        "gc",
        "install-service",
        "completions",
    ] {
        assert!(script.contains(sub), "bash completions miss `{sub}`");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn install_service_writes_the_unit_once_and_prints_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "").unwrap();
    let run = || {
        Command::new(BIN)
            .args(["install-service", "--config"])
            .arg(&config)
            .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
            .env_remove("WARDFS_CONFIG")
            .output()
            .unwrap()
    };
    let out = run();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let unit_path = dir.path().join("xdg/systemd/user/wardfs.service");
    assert!(
        text.starts_with(&format!("wrote {}", unit_path.display())),
        "{text}"
    );
    assert!(
        text.contains("systemctl --user enable --now wardfs"),
        "{text}"
    );
    let unit = std::fs::read_to_string(&unit_path).unwrap();
    let exe = std::fs::canonicalize(BIN).unwrap();
    assert!(
        unit.contains(&format!(
            "\nExecStart=\"{}\" serve --config \"{}\"\n",
            exe.display(),
            config.display()
        )),
        "{unit}"
    );
    for line in ["Type=notify", "Restart=on-failure", "LimitNOFILE=1048576"] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line}");
    }
    // Idempotent: a second run leaves the file as it is.
    let out = run();
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("unchanged:"));
    assert_eq!(std::fs::read_to_string(&unit_path).unwrap(), unit);
    // --print writes nothing.
    let out = Command::new(BIN)
        .args(["install-service", "--print"])
        .env("XDG_CONFIG_HOME", dir.path().join("elsewhere"))
        .env_remove("WARDFS_CONFIG")
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("[Service]"));
    assert!(!dir.path().join("elsewhere").exists());
}

/// Receives one datagram, or `None` after `wait`.
fn recv(sock: &UnixDatagram, wait: Duration) -> Option<String> {
    sock.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 4096];
    match sock.recv(&mut buf) {
        Ok(n) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Err(_) => None,
    }
}

#[test]
fn serve_notifies_ready_once_listening_and_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    let api = dir.path().join("run/wardfs.sock");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "state_dir = \"state\"\nsocket = \"{}\"\n[zones]\nmode = \"sandboxed\"\nroot = \"root\"\n",
            api.display()
        ),
    )
    .unwrap();
    let mut child = serve_command()
        .args(["--no-mount", "--config"])
        .arg(&config)
        .env("NOTIFY_SOCKET", &notify_path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let ready = loop {
        assert!(Instant::now() < deadline, "no READY=1 within 15 s");
        if let Some(msg) = recv(&notify, Duration::from_millis(200)) {
            break msg;
        }
        assert!(child.try_wait().unwrap().is_none(), "daemon exited");
    };
    // The moment READY=1 arrives, the API already accepts connections.
    assert!(
        UnixStream::connect(&api).is_ok(),
        "READY=1 before the socket listened"
    );
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let stopping = recv(&notify, Duration::from_secs(10)).expect("no STOPPING=1 after SIGTERM");
    assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "daemon did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!api.exists(), "the socket is removed on stop");
}

#[test]
fn gc_removes_exactly_the_old_journal_rows_and_temp_files() {
    let d = Daemon::start("[journal]\nkeep_days = 1\n");
    for p in ["old-a", "old-b", "new"] {
        let (status, _) = d.post(
            "/v1/fs/write",
            &json!({"path": format!("/workspace/{p}"), "content": p}),
        );
        assert_eq!(status, 200);
    }
    // Age the rows of old-a and old-b by two days, as if they had been written then.
    let db = rusqlite::Connection::open(d.dir.path().join("state/state.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let aged = db
        .execute(
            "UPDATE journal SET time_ms = time_ms - 2 * 86400000 WHERE path LIKE 'old-%'",
            [],
        )
        .unwrap();
    assert_eq!(aged, 2);
    let before: i64 = db
        .query_row("SELECT count(*) FROM journal", [], |r| r.get(0))
        .unwrap();
    // A temp file from an interrupted write two hours ago, and one being written now.
    let ws = d.zone_dir("workspace");
    std::fs::create_dir(ws.join("sub")).unwrap();
    let stale = ws.join("sub/.wardfs-tmp-1-1");
    std::fs::write(&stale, "x").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&stale)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(2 * 3600))
        .unwrap();
    let fresh = ws.join(".wardfs-tmp-1-2");
    std::fs::write(&fresh, "x").unwrap();

    let out = d.cli_ok(&["gc", "--json"]);
    let r: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(r["keep_days"], 1);
    assert_eq!(r["journal_rows"], 2, "{r}");
    assert_eq!(
        r["temp_files"],
        json!(["/workspace/sub/.wardfs-tmp-1-1"]),
        "{r}"
    );
    assert_eq!(r["staged_commits"], json!([]));
    assert!(!stale.exists() && fresh.exists());
    let after: i64 = db
        .query_row("SELECT count(*) FROM journal", [], |r| r.get(0))
        .unwrap();
    assert_eq!(after, before - 2);
    let left: i64 = db
        .query_row(
            "SELECT count(*) FROM journal WHERE path LIKE 'old-%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 0);
    let log = d.cli_ok(&["log"]);
    assert!(
        log.contains("/workspace/new") && !log.contains("old-"),
        "{log}"
    );

    // A second pass finds nothing; the human output says so.
    let out = d.cli_ok(&["gc"]);
    assert!(out.contains("removed 0 rows older than"), "{out}");
    assert!(out.contains("temp files: removed 0"), "{out}");
}

#[test]
fn gc_with_keep_days_zero_keeps_every_row() {
    let d = Daemon::start("[journal]\nkeep_days = 0\n");
    d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/a", "content": "a"}),
    );
    let db = rusqlite::Connection::open(d.dir.path().join("state/state.db")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute("UPDATE journal SET time_ms = 0", []).unwrap();
    let (status, r) = d.post("/v1/gc", &json!({}));
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["journal_rows"], 0);
    assert_eq!(r["before_ms"], Value::Null);
    let (status, r) = d.post("/v1/gc", &json!({"keep_days": 3}));
    assert_eq!(status, 400);
    assert!(r["message"].as_str().unwrap().contains("keep_days"), "{r}");
}

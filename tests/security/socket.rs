//! The socket: mode 0600 in a private (0700) directory, and a peer of another uid is refused by
//! its credentials (SO_PEERCRED) even when file permissions would let it connect.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

use crate::support::tools::require_tool;
use crate::support::Daemon;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

/// Runs curl against the socket as `nobody`; returns (exit status, stdout, stderr).
fn curl_as_nobody(socket: &std::path::Path) -> (Option<i32>, String, String) {
    let setpriv = require_tool("setpriv", "util-linux");
    let curl = require_tool("curl", "curl");
    let out = Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(curl)
        .args([
            "-sS",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            "--unix-socket",
        ])
        .arg(socket)
        .arg("http://wardfs/v1/health")
        .output()
        .expect("run curl through setpriv");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_socket_is_private_and_another_uid_is_refused_by_its_credentials() {
    assert_eq!(
        rustix::process::getuid().as_raw(),
        0,
        "the socket tests switch to `nobody`: run them as root (`make test` does)"
    );
    let d = Daemon::start("");
    assert_eq!(mode(&d.socket), 0o600, "socket mode");
    let dir = d.socket.parent().unwrap();
    assert_eq!(mode(dir), 0o700, "socket directory mode");

    // With the permissions as the daemon set them, nobody cannot even reach the socket.
    let (status, _, err) = curl_as_nobody(&d.socket);
    assert_ne!(status, Some(0), "nobody reached the socket: {err}");

    // Open every path up (a misconfigured deployment): the file permissions now let nobody
    // connect, so only the peer-credential check stands between it and the API.
    for p in [d.dir.path(), dir] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (status, out, err) = curl_as_nobody(&d.socket);
    assert_ne!(
        status,
        Some(0),
        "another uid got an HTTP answer: {out:?} {err}"
    );
    assert!(!out.contains("\"ok\""), "another uid got an answer: {out}");
    // The daemon says why, and still serves its own uid.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !d.log_text().contains("refused a connection") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        d.log_text().contains("refused a connection") && d.log_text().contains("65534"),
        "no refusal logged: {}",
        d.log_text()
    );
    let (code, body) = d.curl("GET", "/v1/health", None);
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
}

#[test]
fn an_allowed_uid_is_admitted() {
    let d = Daemon::start("[api]\nallowed_uids = [65534]\n");
    for p in [d.dir.path(), d.socket.parent().unwrap()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (status, out, err) = curl_as_nobody(&d.socket);
    assert_eq!(status, Some(0), "{out} {err}");
    assert!(out.ends_with("\n200"), "{out}");
}

/// Returns whether the process `pid` has ended (gone, or a zombie waiting to be reaped).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// A client that sends half a request head and then waits cannot keep the daemon alive: SIGTERM
/// stops it within the shutdown deadline (10 s) plus a margin, and the log says why it closed.
#[test]
fn a_client_holding_half_a_request_cannot_keep_the_daemon_from_stopping() {
    use std::io::Write as _;
    let mut d = Daemon::start("");
    let mut held = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    held.write_all(b"GET /v1/status HTTP/1.1\r\nHost: wardfs\r\n")
        .unwrap();
    // The connection is accepted and waits in the middle of its head.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = d.pid();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let start = std::time::Instant::now();
    while !ended(pid) && start.elapsed() < std::time::Duration::from_secs(16) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(
        ended(pid),
        "still running {} s after SIGTERM: {}",
        start.elapsed().as_secs(),
        d.log_text()
    );
    assert!(
        d.log_text().contains("closing them"),
        "the log says why: {}",
        d.log_text()
    );
    drop(held);
    d.stop();
}

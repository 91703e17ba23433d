//! The socket: mode 0600 in a private (0700) directory, and a peer of another uid is refused by
//! its credentials (SO_PEERCRED) even when file permissions would let it connect. And what a
//! client may do to it: hold connections while the daemon stops, flood it with idle or
//! half-open connections, post big bodies all at once.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;

use crate::support::tools::{ended, require_tool};
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

/// Clients holding connections cannot keep the daemon alive: SIGTERM closes at once one that
/// sent half a request head (it has no request in flight), and one that sent half a body (its
/// request is in flight) at the shutdown deadline (10 s); the daemon is gone within that plus a
/// margin, and the log says why it closed the second.
#[test]
fn a_client_holding_half_a_request_cannot_keep_the_daemon_from_stopping() {
    use std::io::Write as _;
    let mut d = Daemon::start("");
    let mut half_head = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    half_head
        .write_all(b"GET /v1/status HTTP/1.1\r\nHost: wardfs\r\n")
        .unwrap();
    let mut half_body = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    half_body
        .write_all(
            b"POST /v1/fs/write HTTP/1.1\r\nHost: wardfs\r\nContent-Length: 100\r\n\r\n{\"path\"",
        )
        .unwrap();
    // Both connections are accepted and wait in the middle of their request. Must stay: that
    // the daemon has read both heads shows nowhere outside it.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let pid = d.pid();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let start = std::time::Instant::now();
    // The half head is closed at once (an end of file, or a reset), long before the deadline.
    half_head
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    let mut byte = [0u8; 1];
    let got = std::io::Read::read(&mut half_head, &mut byte);
    let closed = match &got {
        Ok(n) => *n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(
        closed && start.elapsed() < std::time::Duration::from_secs(3),
        "the half head was not closed at once: {got:?} after {:?}",
        start.elapsed()
    );
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
    drop((half_head, half_body));
    d.stop();
}

// ---------------------------------------------------------------------------------------------
// Exhausting the daemon through the socket: connections and request bodies

/// The daemon's peak resident set so far, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// How many sockets process `pid` holds open.
fn sockets_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// Lets this test process hold `n` descriptors (the tests run as root).
fn allow_descriptors(n: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current.is_some_and(|c| c < n) {
        let max = lim.maximum.map(|m| m.max(n));
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(n),
                maximum: max,
            },
        )
        .expect("raise this test's descriptor limit (run as root)");
    }
}

/// Opens a connection to `socket` that sends nothing (`odd`) or half a request head.
fn idle_connection(socket: &std::path::Path, odd: bool) -> std::os::unix::net::UnixStream {
    use std::io::Write as _;
    let mut c = std::os::unix::net::UnixStream::connect(socket).expect("connect");
    if !odd {
        // The daemon may already have closed it to make room: a failed write is fine.
        let _ = c.write_all(b"GET /v1/status HTTP/1.1\r\nHost: wardfs\r\n");
    }
    c
}

/// The connection cap the test daemons get from their descriptor limit (`open_files` / 8).
const FLOOD_CAP: usize = 512 / 8;

/// An attacker floods the socket with 2,000 connections that send nothing or half a request
/// head (the 20,000 reached the descriptor limit: `status` got no answer in 10 s and
/// "accept failed" was logged 20 times a second). With the descriptor limit at 512, the daemon
/// serves at most 64 (an eighth), each newcomer closing the oldest idle one; the CLI's `status`
/// answers within a few seconds while the flood goes on; the idle and half-open connections
/// left are closed after `api.idle_timeout_secs`; and the log does not spin.
#[test]
fn a_flood_of_idle_and_half_open_connections_never_locks_out_the_cli() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::time::{Duration, Instant};
    allow_descriptors(8192);
    let d = Daemon::start("[limits]\nopen_files = 512\n[api]\nidle_timeout_secs = 3\n");
    let pid = d.pid();
    let quiet = sockets_of(pid);
    let mut held: Vec<_> = (0..2000)
        .map(|i| idle_connection(&d.socket, i % 2 == 1))
        .collect();
    // Those it closed to make room are gone once their tasks have run.
    let start = Instant::now();
    let mut during = sockets_of(pid);
    while during > quiet + FLOOD_CAP && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        during = sockets_of(pid);
    }
    assert!(
        during <= quiet + FLOOD_CAP,
        "the daemon holds {during} sockets (quiet: {quiet}, cap {FLOOD_CAP})"
    );
    // The flood goes on (a new connection every millisecond, the last 1,000 held open) while
    // the CLI asks three times.
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let opened = std::sync::Arc::new(AtomicUsize::new(0));
    let flood = {
        let (stop, opened, socket) = (stop.clone(), opened.clone(), d.socket.clone());
        std::thread::spawn(move || {
            let mut open = std::collections::VecDeque::new();
            while !stop.load(Ordering::Relaxed) {
                let n = opened.fetch_add(1, Ordering::Relaxed);
                open.push_back(idle_connection(&socket, n % 2 == 1));
                if open.len() > 1000 {
                    open.pop_front();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    while opened.load(Ordering::Relaxed) < 200 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before_status = opened.load(Ordering::Relaxed);
    for _ in 0..3 {
        let start = Instant::now();
        let status = d.cli_in_thread(&["status"]);
        while !status.is_finished() && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = start.elapsed();
        assert!(
            status.is_finished() && took < Duration::from_secs(5),
            "status took {took:?} during the flood"
        );
        let out = status.join().unwrap();
        assert!(
            out.status.success(),
            "status failed during the flood: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let during_status = opened.load(Ordering::Relaxed) - before_status;
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    assert!(during_status > 0, "the flood stopped while status ran");
    // Idle and half-open connections are closed after the idle timeout (3 s), ours still open.
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut after = sockets_of(pid);
    while after > quiet + 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        after = sockets_of(pid);
    }
    assert!(
        after <= quiet + 1,
        "{after} sockets left after the idle timeout (quiet: {quiet})"
    );
    let log = d.log_text();
    let accept_failed = log.matches("accept failed").count();
    let refused = log.matches("refused a new one").count();
    assert!(
        accept_failed <= 3 && refused <= 3,
        "the log spins: {accept_failed} accept failures, {refused} refusals"
    );
    held.clear();
}

/// Sends `head` (its lines, without the blank line) and `body` on a new connection with
/// `Connection: close`; returns the status and the JSON answer.
fn exchange(socket: &std::path::Path, head: &str, body: &[u8]) -> (u16, serde_json::Value) {
    use std::io::Write as _;
    let mut c = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let head = format!(
        "{head}\r\nHost: wardfs\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    answer(c)
}

/// Reads an answer to its end (the server closes: `Connection: close`).
fn answer(mut c: std::os::unix::net::UnixStream) -> (u16, serde_json::Value) {
    let mut all = Vec::new();
    std::io::Read::read_to_end(&mut c, &mut all).unwrap();
    let text = String::from_utf8_lossy(&all);
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let json = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    (status, json)
}

/// The JSON body of a write of `content` to `path`.
fn write_body(path: &str, content: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "path": path, "content": content })).unwrap()
}

/// Eight clients post a 6 MB write each at once (the attack, 8 × 190 MB, took the
/// daemon to 1.7–1.8 GB), against a body budget of 8 MiB: every write succeeds or gets BUSY
/// (503) and writes nothing; each that succeeded wrote its content exactly (escapes, accents,
/// a surrogate pair, control characters); and the daemon's peak resident set grew by less than
/// three budgets (what the budget lets in, plus what malloc keeps of freed bodies, one arena per
/// core), where eight bodies and their parsed copies are about 100 MB.
#[test]
fn big_writes_at_once_share_one_body_budget_and_none_loses_data() {
    const BUDGET: u64 = 8 << 20;
    let d = Daemon::start(&format!(
        "[limits]\nbody_memory_bytes = {BUDGET}\nbody_memory_wait_secs = 15\n"
    ));
    let pid = d.pid();
    let before = peak_kib(pid);
    // 6 MB of text, 100,000 of its characters escaped in JSON.
    let contents: Vec<String> = (0..8)
        .map(|i| {
            format!("{i}: é😀 \"q\" \\ \t\u{1}") + &"x".repeat(6_000_000) + &"\n".repeat(100_000)
        })
        .collect();
    let body_len = write_body("/workspace/w0", &contents[0]).len() as u64;
    let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let socket = d.socket.clone();
                s.spawn(move || {
                    let body = write_body(&format!("/workspace/w{i}"), c);
                    exchange(&socket, "POST /v1/fs/write HTTP/1.1", &body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut written = 0;
    for (i, (status, v)) in answers.iter().enumerate() {
        let file = d.workspace().join(format!("w{i}"));
        match status {
            200 => {
                assert_eq!(std::fs::read_to_string(&file).unwrap(), contents[i], "w{i}");
                written += 1;
            }
            503 => {
                assert_eq!(v["code"], "BUSY", "w{i}: {v}");
                assert!(!file.exists(), "w{i} was refused but written");
            }
            _ => panic!("w{i}: {status} {v}"),
        }
    }
    assert!(written >= 1, "no write got through: {answers:?}");
    let grew = peak_kib(pid).saturating_sub(before);
    eprintln!(
        "8 writes of {body_len} bytes: {written} written; the daemon's peak grew by {grew} KiB"
    );
    assert!(
        grew < 3 * BUDGET / 1024,
        "the daemon's peak grew by {grew} KiB for bodies of {body_len} bytes (budget {BUDGET})"
    );
}

/// A client declares a body of 3.5 MiB and sends half of it, holding most of a 4 MiB budget:
/// another write of 1 MiB waits `limits.body_memory_wait_secs` (2 s) and gets BUSY, writing
/// nothing; a small request (under 64 KiB) is answered at once meanwhile; once the first body
/// is complete it is written, and the refused write goes through when tried again.
#[test]
fn a_write_that_finds_the_budget_taken_waits_then_gets_busy_and_writes_nothing() {
    use std::io::Write as _;
    use std::time::{Duration, Instant};
    let d = Daemon::start("[limits]\nbody_memory_bytes = 4194304\nbody_memory_wait_secs = 2\n");
    let holder_body = write_body("/workspace/holder", &"h".repeat(3_500_000));
    let mut holder = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
    let head = format!(
        "POST /v1/fs/write HTTP/1.1\r\nHost: wardfs\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        holder_body.len()
    );
    holder.write_all(head.as_bytes()).unwrap();
    let half = holder_body.len() / 2;
    holder.write_all(&holder_body[..half]).unwrap();
    // Must stay: the slow client pauses mid-body, as a hostile one does.
    std::thread::sleep(Duration::from_millis(300));

    let start = Instant::now();
    let small = write_body("/workspace/small", "small");
    let (status, v) = exchange(&d.socket, "POST /v1/fs/write HTTP/1.1", &small);
    assert_eq!(
        (status, start.elapsed() < Duration::from_secs(1)),
        (200, true),
        "{v}"
    );

    let start = Instant::now();
    let late = write_body("/workspace/late", &"l".repeat(1 << 20));
    let (status, v) = exchange(&d.socket, "POST /v1/fs/write HTTP/1.1", &late);
    let waited = start.elapsed();
    assert_eq!((status, v["code"].as_str()), (503, Some("BUSY")), "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("limits.body_memory_bytes")),
        "{v}"
    );
    assert!(
        (Duration::from_millis(1900)..Duration::from_secs(6)).contains(&waited),
        "BUSY after {waited:?}"
    );
    assert!(
        !d.workspace().join("late").exists(),
        "a refused write wrote"
    );

    holder.write_all(&holder_body[half..]).unwrap();
    let (status, v) = answer(holder);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        std::fs::metadata(d.workspace().join("holder"))
            .unwrap()
            .len(),
        3_500_000
    );
    let (status, v) = exchange(&d.socket, "POST /v1/fs/write HTTP/1.1", &late);
    assert_eq!(status, 200, "{v}");
}

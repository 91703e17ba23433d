//! A zone served from a directory inside a real sandbox-agent (started by `AgentServer` with
//! --token and --no-telemetry, on 127.0.0.1, in the loopback-only namespace): a mounted daemon
//! reads, writes and lists it through the API and through the mount, and a sandbox that stops
//! answering gives `SANDBOX_UNAVAILABLE` (API) and `EIO` (mount) within the configured timeout,
//! never a hang. The server runs on this machine, so each step is checked with `std::fs` on the
//! sandbox's directory too.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wardfs::core::ErrorCode;

use crate::support::rng::noise;
use crate::support::sandbox_agent::AgentServer;
use crate::support::wait::{wait_for, wait_until};
use crate::support::Daemon;

const TOKEN: &str = "WARDFS_TEST_ZONE_TOKEN";

/// The workspace served from `server`'s work dir, attributes trusted for 200 ms, 2 s per request.
fn zone_config(server: &AgentServer) -> String {
    format!(
        "[zones.workspace]\nsandbox = \"dev\"\npath = \"{}\"\nattr_ttl_ms = 200\n\
         [sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\ntoken_env = \"{TOKEN}\"\n\
         retries = 1\nretry_backoff_ms = 100\nrequest_timeout_secs = 2\n",
        server.root(),
        server.url()
    )
}

/// A mounted daemon whose workspace is `server`'s, the token in its environment only.
fn start(server: &AgentServer) -> Daemon {
    mounted(&zone_config(server), server)
}

fn mounted(config: &str, server: &AgentServer) -> Daemon {
    Daemon::options()
        .prefix("wardfs-fuse")
        .mount()
        .extra(config)
        .env(TOKEN, server.token())
        .start()
}

#[test]
fn a_sandbox_directory_is_the_workspace_through_the_api_and_the_mount() {
    let server = AgentServer::start();
    let work = server.work();
    std::fs::write(work.join("hello.txt"), "hello\n").unwrap();
    std::fs::create_dir_all(work.join("src")).unwrap();
    std::fs::write(work.join("src/lib.rs"), "fn alpha() {}\nfn beta() {}\n").unwrap();
    let m = start(&server);

    // The API reads, lists, searches and changes the sandbox's files.
    let r = m.ok("/v1/fs/read", json!({"path": "/workspace/hello.txt"}));
    assert_eq!(r["content"], "hello\n", "{r}");
    let l = m.ok("/v1/fs/list", json!({"path": "/workspace"}));
    let names: Vec<&str> = l["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hello.txt", "src"], "{l}");
    m.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/new/deep.txt", "content": "deep\n"}),
    );
    assert_eq!(
        std::fs::read_to_string(work.join("new/deep.txt")).unwrap(),
        "deep\n"
    );
    let e = m.ok(
        "/v1/fs/edit",
        json!({"path": "/workspace/hello.txt", "old": "hello", "new": "hello world"}),
    );
    assert_eq!(e["replacements"], 1, "{e}");
    assert_eq!(
        std::fs::read_to_string(work.join("hello.txt")).unwrap(),
        "hello world\n"
    );
    let g = m.ok("/v1/fs/glob", json!({"pattern": "*.rs"}));
    assert_eq!(g["matches"][0]["path"], "/workspace/src/lib.rs", "{g}");
    let g = m.ok("/v1/fs/grep", json!({"pattern": "fn b\\w+"}));
    assert_eq!(g["lines"][0]["path"], "/workspace/src/lib.rs", "{g}");
    assert_eq!(g["lines"][0]["line"], 2, "{g}");
    m.ok(
        "/v1/fs/move",
        json!({"from": "/workspace/new/deep.txt", "to": "/workspace/moved.txt"}),
    );
    assert!(work.join("moved.txt").is_file() && !work.join("new/deep.txt").exists());
    // An empty directory is deleted without `recursive`.
    m.ok("/v1/fs/delete", json!({"path": "/workspace/new"}));
    assert!(!work.join("new").exists());
    let (code, _) = m
        .call("/v1/fs/read", json!({"path": "/workspace/missing.txt"}))
        .unwrap_err();
    assert_eq!(code, ErrorCode::NotFound);

    // The mount reads, lists and changes them too.
    let ws = m.ws();
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hello world\n"
    );
    let mut listed: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, ["hello.txt", "moved.txt", "src"]);
    std::fs::write(ws.join("from-mount.txt"), "written through the mount\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(work.join("from-mount.txt")).unwrap(),
        "written through the mount\n",
        "the file is written back to the sandbox on close"
    );
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.join("from-mount.txt"))
            .unwrap();
        f.write_all(b"appended\n").unwrap();
        f.sync_all().unwrap();
        // fsync writes back before close.
        assert_eq!(
            std::fs::read_to_string(work.join("from-mount.txt")).unwrap(),
            "written through the mount\nappended\n"
        );
    }
    {
        // A reader closing its descriptor (a flush) while a writer keeps writing loses nothing.
        use std::io::{Read as _, Write as _};
        let mut w = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.join("from-mount.txt"))
            .unwrap();
        w.write_all(b"second writer line\n").unwrap();
        let mut text = String::new();
        std::fs::File::open(ws.join("from-mount.txt"))
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert!(text.ends_with("second writer line\n"), "{text:?}");
        w.write_all(b"after the reader closed\n").unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(work.join("from-mount.txt")).unwrap(),
        "written through the mount\nappended\nsecond writer line\nafter the reader closed\n"
    );
    let big = noise(5 << 20, 7);
    std::fs::write(ws.join("big.bin"), &big).unwrap();
    assert!(
        std::fs::read(work.join("big.bin")).unwrap() == big,
        "5 MiB written back whole"
    );
    assert!(
        std::fs::read(ws.join("big.bin")).unwrap() == big,
        "and read back whole"
    );
    std::fs::create_dir(ws.join("dir")).unwrap();
    std::fs::rename(ws.join("moved.txt"), ws.join("dir/moved.txt")).unwrap();
    assert!(work.join("dir/moved.txt").is_file());
    std::fs::remove_file(ws.join("dir/moved.txt")).unwrap();
    std::fs::remove_dir(ws.join("dir")).unwrap();
    assert!(!work.join("dir").exists());
    assert_eq!(
        std::fs::metadata(ws.join("big.bin")).unwrap().len(),
        5 << 20
    );

    // A change made inside the sandbox shows through the mount once the 200 ms TTL has passed.
    std::fs::write(work.join("hello.txt"), "changed in the sandbox\n").unwrap();
    wait_until(
        "the change in the sandbox to show through the mount",
        Duration::from_secs(10),
        || std::fs::read_to_string(ws.join("hello.txt")).unwrap() == "changed in the sandbox\n",
    );
    // The journal names what the mount and the API did.
    let log: Value = m.get("/v1/log?limit=100");
    let text = log.to_string();
    for p in ["from-mount.txt", "moved.txt", "hello.txt"] {
        assert!(text.contains(p), "{p} not in the journal: {text}");
    }
}

#[test]
fn a_sandbox_that_stops_answering_gives_sandbox_unavailable_and_eio_never_a_hang() {
    let server = AgentServer::start();
    std::fs::write(server.work().join("a.txt"), "a\n").unwrap();
    let m = start(&server);
    assert_eq!(
        std::fs::read_to_string(m.ws().join("a.txt")).unwrap(),
        "a\n"
    );

    server.pause();
    // Until the 200 ms attribute TTL runs out the caches may answer; then the sandbox is asked,
    // and its silence must be an error, never a hang.
    let t = Instant::now();
    let (code, msg) = wait_for(
        "the API to find the sandbox gone",
        Duration::from_secs(10),
        || {
            m.call("/v1/fs/read", json!({"path": "/workspace/a.txt"}))
                .err()
        },
    );
    assert_eq!(code, ErrorCode::SandboxUnavailable, "{msg}");
    assert!(msg.contains("dev"), "the error names the sandbox: {msg}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the API answered after {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let err = wait_for(
        "the mount to find the sandbox gone",
        Duration::from_secs(10),
        || std::fs::read(m.ws().join("a.txt")).err(),
    );
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the mount answered after {:?}",
        t.elapsed()
    );
    let err = std::fs::metadata(m.ws().join("never-seen.txt")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(
        m.log_text().contains("sandbox"),
        "a log line names the failure: {}",
        m.log_text()
    );

    // Back up: everything works again, nothing was lost.
    server.resume();
    let r = wait_for(
        "the API to read through the sandbox again",
        Duration::from_secs(10),
        || {
            m.call("/v1/fs/read", json!({"path": "/workspace/a.txt"}))
                .ok()
        },
    );
    assert_eq!(r["content"], "a\n");
    std::fs::write(m.ws().join("b.txt"), "b\n").unwrap();
    assert_eq!(
        std::fs::read_to_string(server.work().join("b.txt")).unwrap(),
        "b\n"
    );
}

/// Closes `f` with close(2) itself, returning its error (std ignores it).
fn close(f: std::fs::File) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    // SAFETY: the fd was just taken out of its owner, so it is closed exactly once.
    match unsafe { libc::close(f.into_raw_fd()) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The files in the daemon's durable write-back queue of the workspace.
fn queued(m: &Daemon) -> Vec<String> {
    let dir = m.dir.path().join("state/remote-spool/workspace/pending");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Waits (at most 20 s) until `path` holds `want`; returns whether it did.
fn arrives(path: &Path, want: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|s| s == want) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

fn status(m: &Daemon) -> Value {
    m.get("/v1/status")
}

#[test]
fn a_write_back_the_sandbox_misses_is_queued_reported_and_delivered_even_after_a_restart() {
    use std::io::Write as _;
    let server = AgentServer::start();
    let work = server.work();
    let mut m = start(&server);

    // Created while the sandbox answers, written and closed while it does not.
    let mut f = std::fs::File::create(m.ws().join("kept.txt")).unwrap();
    server.pause();
    f.write_all(b"not lost\n").unwrap();
    let err = f.sync_all().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "fsync: {err}");
    let err = close(f).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "close: {err}");
    assert_eq!(
        std::fs::read_to_string(work.join("kept.txt")).unwrap(),
        "",
        "the sandbox did not get it yet"
    );
    let q = queued(&m);
    assert_eq!(q.len(), 2, "a record and its content are queued: {q:?}");
    let data = q.iter().find(|n| n.ends_with(".data")).unwrap();
    assert_eq!(
        std::fs::read_to_string(
            m.dir
                .path()
                .join("state/remote-spool/workspace/pending")
                .join(data)
        )
        .unwrap(),
        "not lost\n"
    );
    let s = status(&m);
    assert_eq!(
        s["pending_write_backs"][0]["path"], "/workspace/kept.txt",
        "{s}"
    );
    assert_eq!(s["pending_write_backs"][0]["bytes"], 9, "{s}");
    let text = m.cli_ok(&["status"]);
    assert!(text.contains("pending  /workspace/kept.txt"), "{text}");

    // The sandbox comes back: the queue delivers it, and the journal says so.
    server.resume();
    assert!(
        arrives(&work.join("kept.txt"), "not lost\n"),
        "never delivered: {}",
        m.log_text()
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !queued(&m).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(queued(&m).is_empty(), "{:?}", queued(&m));
    assert_eq!(status(&m)["pending_write_backs"], json!([]));
    let log: Value = m.get("/v1/log?limit=100");
    let ops: Vec<String> = log["entries"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .filter(|e| e["path"] == "kept.txt")
        .map(|e| e["op"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        ops.iter().any(|o| o == "write-back-queued") && ops.iter().any(|o| o == "write"),
        "{log}"
    );

    // Across a crash of the daemon: the queue on disk is delivered by the next run.
    let mut f = std::fs::File::create(m.ws().join("survives.txt")).unwrap();
    server.pause();
    f.write_all(b"after a restart\n").unwrap();
    assert_eq!(close(f).unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(queued(&m).len(), 2);
    m.crash();
    server.resume();
    assert_eq!(
        std::fs::read_to_string(work.join("survives.txt")).unwrap(),
        "",
        "nothing sent it before the restart"
    );
    m.respawn();
    assert!(
        arrives(&work.join("survives.txt"), "after a restart\n"),
        "never delivered after the restart: {}",
        m.log_text()
    );
}

/// The peak resident set of process `pid` so far, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn a_big_file_written_through_the_mount_is_streamed_to_the_sandbox() {
    use std::io::Write as _;
    let server = AgentServer::start();
    let m = start(&server);
    let before = peak_kib(m.pid());
    // 48 MiB, written in 1 MiB pieces: the daemon's spool file holds it, and the write-back
    // reads it piece by piece (it used to read the whole file into memory at every flush).
    let piece = noise(1 << 20, 11);
    let mut f = std::fs::File::create(m.ws().join("big.bin")).unwrap();
    for _ in 0..48 {
        f.write_all(&piece).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let grown = peak_kib(m.pid()).saturating_sub(before);
    let got = std::fs::metadata(server.work().join("big.bin"))
        .unwrap()
        .len();
    assert_eq!(got, 48 << 20, "the whole file reached the sandbox");
    let mut back = std::fs::File::open(server.work().join("big.bin")).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    for i in 0..48 {
        std::io::Read::read_exact(&mut back, &mut buf).unwrap();
        assert!(buf == piece, "piece {i} differs");
    }
    assert!(
        grown < 24 << 10,
        "writing 48 MiB back grew the daemon's peak by {grown} KiB"
    );
}

#[test]
fn remote_grep_streams_each_file_stops_at_the_limit_and_names_what_it_skips() {
    let server = AgentServer::start();
    let work = server.work();
    std::fs::write(work.join("many.txt"), "hit\n".repeat(100_000)).unwrap();
    std::fs::write(work.join("huge.txt"), "hit ".repeat(1 << 19)).unwrap(); // 2 MiB
    let m = mounted(
        &format!(
            "{}[limits]\nmax_read_bytes = 1048576\n",
            zone_config(&server)
        ),
        &server,
    );
    let g = m.ok("/v1/fs/grep", json!({"pattern": "hit", "limit": 3}));
    assert_eq!(g["lines"].as_array().unwrap().len(), 3, "{g}");
    assert_eq!(
        (g["total"].as_u64(), g["truncated"].as_bool()),
        (Some(3), Some(true))
    );
    assert_eq!(g["lines"][2]["line"], 3, "{g}");
    assert_eq!(g["skipped"][0]["path"], "/workspace/huge.txt", "{g}");
    assert!(
        g["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("limits.max_read_bytes"),
        "{g}"
    );
}

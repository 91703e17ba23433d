//! Fault injection: a full disk, a git connection dropped mid-push, a sandbox killed mid-transfer,
//! a sandbox that stops answering. Each fault gives a clear error, loses nothing, and the next
//! attempt on a healthy path succeeds.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde_json::json;
use wardfs::core::ErrorCode;

use crate::support::api::Api;
use crate::support::faults::{Fault, Proxy, Tmpfs};
use crate::support::files::temp_files;
use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::rng::noise;
use crate::support::sandbox_agent::AgentServer;
use crate::support::Daemon;

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

#[test]
fn a_full_disk_is_no_space_and_keeps_earlier_files() {
    let mut m = Daemon::mounted("");
    // The workspace zone moves onto a 2 MiB tmpfs (the daemon restarted on top of it).
    m.stop();
    let fs = Tmpfs::mount(&m.zone_dir("workspace"), "2m");
    m.respawn();
    let api = Api::new(&m.socket);
    api.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/keep.txt", "content": "kept\n"}),
    );
    std::fs::write(m.ws().join("keep-mount.txt"), "kept too\n").unwrap();

    let big = "x".repeat(3 << 20);
    let (code, msg) = api.err(
        "/v1/fs/write",
        json!({"path": "/workspace/big.txt", "content": big}),
    );
    assert_eq!(code, ErrorCode::NoSpace, "{msg}");
    assert!(msg.contains("/workspace/big.txt"), "{msg}");
    // An edit that grows a file past the space left fails the same way and leaves it as it was.
    api.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/grow.txt", "content": "seed\n"}),
    );
    let (code, msg) = api.err(
        "/v1/fs/edit",
        json!({"path": "/workspace/grow.txt", "old": "seed", "new": "y".repeat(3 << 20)}),
    );
    assert_eq!(code, ErrorCode::NoSpace, "{msg}");

    // Through the mount: ENOSPC at write or at fsync, never success.
    let through = (|| -> std::io::Result<()> {
        use std::io::Write as _;
        let mut f = std::fs::File::create(m.ws().join("big-mount.bin"))?;
        f.write_all(&vec![7u8; 3 << 20])?;
        f.sync_all()
    })();
    let e = through.expect_err("a 3 MiB write into a 2 MiB zone succeeded");
    assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
    std::fs::remove_file(m.ws().join("big-mount.bin")).unwrap();

    // Earlier files are intact, no temp file is left, and space freed is usable again.
    assert_eq!(
        std::fs::read_to_string(fs.dir.join("keep.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(m.ws().join("keep-mount.txt")).unwrap(),
        "kept too\n"
    );
    assert_eq!(
        std::fs::read_to_string(fs.dir.join("grow.txt")).unwrap(),
        "seed\n"
    );
    assert_eq!(temp_files(&fs.dir), Vec::<std::path::PathBuf>::new());
    // The removed file's space comes back once the kernel forgets its inode (FORGET, sent
    // after the unlink's reply): the mount holds the file until then, as an open descriptor
    // in any process would have to. Under load that takes a moment.
    let body = json!({"path": "/workspace/after.txt", "content": "fits\n"});
    let start = std::time::Instant::now();
    while api.post("/v1/fs/write", &body).is_err() && start.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    api.ok("/v1/fs/write", body);
    m.stop();
}

#[test]
fn a_git_connection_dropped_mid_push_fails_clearly_and_a_retry_succeeds() {
    let seed: Vec<(String, Vec<u8>)> = vec![("README.md".into(), b"hello\n".to_vec())];
    let files: Vec<(&str, &[u8])> = seed
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    let repo = BareRepo::seeded("proj", &files);
    let git = GitDaemon::serve(&repo);
    let proxy = Proxy::start(loopback(git.port()));
    let url = format!("git://127.0.0.1:{}/proj.git", proxy.port());
    let before = repo.head("main").unwrap();

    let m = Daemon::mounted("");
    let api = Api::new(&m.socket);
    api.ok("/v1/git/pull", json!({ "remote": url }));
    // A large incompressible file, so the push's pack is far longer than the cut.
    let blob: String = noise(600_000, 7)
        .iter()
        .map(|b| (b'a' + b % 26) as char)
        .collect();
    api.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/proj/data.txt", "content": blob}),
    );
    let id = api.ok("/v1/git/stage", json!({"message": "add data"}))["id"]
        .as_str()
        .unwrap()
        .to_string();

    proxy.set_fault(Fault::CutAfter(64 * 1024));
    let started = Instant::now();
    let (code, msg) = api.err("/v1/git/push", json!({ "id": id }));
    assert!(proxy.cuts() > 0, "the proxy never cut a connection");
    assert_eq!(code, ErrorCode::RemoteUnavailable, "{msg}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let shown = api.ok("/v1/git/staged/show", json!({ "id": id }));
    assert_eq!(shown["state"], "staged", "{shown}");
    assert_eq!(repo.head("main").as_deref(), Some(before.as_str()));

    proxy.set_fault(Fault::None);
    let pushed = api.ok("/v1/git/push", json!({ "id": id }));
    assert_eq!(pushed["state"], "pushed", "{pushed}");
    assert_eq!(
        repo.read_file("main", "data.txt").map(|d| d.len()),
        Some(600_000)
    );
}

/// A workspace of `n` incompressible files of `size` bytes, written through the API.
fn fill(api: &Api, n: usize, size: usize, salt: u64) {
    for i in 0..n {
        let content: String = noise(size, salt * 1000 + i as u64)
            .iter()
            .map(|b| (b'a' + b % 26) as char)
            .collect();
        api.ok(
            "/v1/fs/write",
            json!({"path": format!("/workspace/d/f{i}.txt"), "content": content}),
        );
    }
}

/// Checks that every manifest entry with a hash matches the file under `root`.
fn manifest_matches_remote(m: &Daemon, root: &std::path::Path) -> usize {
    let db = rusqlite::Connection::open_with_flags(
        m.dir.path().join("state/state.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let mut q = db
        .prepare("SELECT path, hash FROM mirror_entries WHERE kind = 'file' AND hash IS NOT NULL")
        .unwrap();
    let rows: Vec<(String, String)> = q
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (rel, hash) in &rows {
        let data = std::fs::read(root.join(rel)).unwrap_or_default();
        assert_eq!(
            blake3::hash(&data).to_hex().to_string(),
            *hash,
            "the manifest is ahead of the sandbox for {rel}"
        );
    }
    rows.len()
}

#[test]
fn a_sandbox_killed_mid_transfer_is_unavailable_and_the_next_push_completes() {
    const VAR: &str = "WARDFS_TEST_RELIABILITY_TOKEN_KILLED";
    const FILES: usize = 40;
    let mut a = AgentServer::start();
    let b = AgentServer::start();
    // Both servers run on this machine: the sandbox root is one directory both can write.
    let shared = tempfile::tempdir().unwrap();
    let root = shared.path().to_str().unwrap().to_string();
    let proxy = Proxy::start(loopback(port_of(&a.url())));
    // Each server has its own token: the daemon is restarted with the second one below.
    super::set_token(VAR, a.token());
    let mut m = Daemon::mounted(&super::sandbox_config(
        "dev",
        &format!("http://127.0.0.1:{}", proxy.port()),
        &root,
        VAR,
        5,
    ));
    let api = Api::new(&m.socket);
    fill(&api, FILES, 1 << 20, 1);

    let (code, msg) = std::thread::scope(|s| {
        let push = s.spawn(|| api.post("/v1/mirror/push", &json!({"sandbox": "dev"})));
        // Killed as soon as the first file reached the sandbox: mid-transfer.
        let deadline = Instant::now() + Duration::from_secs(20);
        let arrived = || {
            std::fs::read_dir(shared.path().join("d"))
                .map(|mut d| d.next().is_some())
                .unwrap_or(false)
        };
        while !arrived() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(arrived(), "nothing reached the sandbox within 20 s");
        a.kill();
        match push.join().unwrap() {
            Ok(v) => panic!("the push finished before the kill: {v}"),
            Err((Some(code), msg)) => (code, msg),
            Err((None, msg)) => panic!("no answer from the daemon: {msg}"),
        }
    });
    assert_eq!(code, ErrorCode::SandboxUnavailable, "{msg}");
    let confirmed = manifest_matches_remote(&m, shared.path());
    assert!(
        confirmed < FILES,
        "every file confirmed although the push failed"
    );

    // Another server takes over the same address (the proxy) and the same root.
    proxy.set_target(loopback(port_of(&b.url())));
    super::set_token(VAR, b.token());
    m.stop();
    m.respawn();
    let api = Api::new(&m.socket);
    let pushed = api.ok("/v1/mirror/push", json!({"sandbox": "dev"}));
    assert!(pushed["files_sent"].as_u64().unwrap() >= 1, "{pushed}");
    assert_eq!(manifest_matches_remote(&m, shared.path()), FILES);
    for i in 0..FILES {
        assert_eq!(
            std::fs::read(shared.path().join(format!("d/f{i}.txt"))).unwrap(),
            std::fs::read(m.zone_dir("workspace").join(format!("d/f{i}.txt"))).unwrap(),
            "f{i}.txt differs in the sandbox"
        );
    }
    let again = api.ok("/v1/mirror/push", json!({"sandbox": "dev"}));
    assert_eq!(again["files_sent"], 0, "{again}");
}

#[test]
fn a_sandbox_that_stops_answering_is_unavailable_within_the_timeout() {
    const VAR: &str = "WARDFS_TEST_RELIABILITY_TOKEN_SLOW";
    const TIMEOUT_SECS: u64 = 2;
    let server = AgentServer::start();
    super::set_token(VAR, server.token());
    let m = Daemon::mounted(&super::sandbox_config(
        "dev",
        &server.url(),
        &server.root(),
        VAR,
        TIMEOUT_SECS,
    ));
    let api = Api::new(&m.socket);
    api.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/a.txt", "content": "a\n"}),
    );
    assert_eq!(
        api.ok("/v1/mirror/push", json!({"sandbox": "dev"}))["files_sent"],
        1
    );

    server.pause();
    // retries = 0: one attempt of at most the timeout (plus a health check of as long).
    let bound = Duration::from_secs(3 * TIMEOUT_SECS + 2);
    api.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/b.txt", "content": "b\n"}),
    );
    for (route, body) in [
        ("/v1/mirror/push", json!({"sandbox": "dev"})),
        ("/v1/mirror/pull", json!({"sandbox": "dev"})),
        ("/v1/sandboxes/check", json!({"name": "dev"})),
    ] {
        let started = Instant::now();
        let (code, msg) = api.err(route, body);
        let took = started.elapsed();
        assert_eq!(code, ErrorCode::SandboxUnavailable, "{route}: {msg}");
        assert!(took < bound, "{route} took {took:?} (bound {bound:?})");
    }
    // The local zone is not held up by the hung sandbox.
    let started = Instant::now();
    api.ok("/v1/fs/read", json!({"path": "/workspace/a.txt"}));
    assert!(started.elapsed() < Duration::from_secs(1));
    server.resume();
    let pushed = api.ok("/v1/mirror/push", json!({"sandbox": "dev"}));
    assert_eq!(pushed["files_sent"], 1, "{pushed}");
    assert_eq!(
        std::fs::read_to_string(server.work().join("b.txt")).unwrap(),
        "b\n"
    );
}

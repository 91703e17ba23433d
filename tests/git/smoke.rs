//! Proves the harness of `support/git_servers.rs` with the git CLI alone: clone, commit and push through
//! each server, Basic auth enforced by lighttpd, hooks that reject, the `BareRepo` helpers, and
//! servers that really die on drop.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use crate::support::git_servers::{base64, run_git, try_git, BareRepo, GitDaemon, HttpGit};
use crate::support::tools::require_tool;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("wardfs-git-smoke")
        .tempdir()
        .unwrap()
}

/// Clones `url` into `<dir>/clone`, adds `file` with `content`, commits, pushes `main`, and
/// returns the new local head.
fn clone_commit_push(dir: &Path, url: &str, extra: &[&str], file: &str, content: &[u8]) -> String {
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["clone", "-q", url, "clone"]);
    run_git(dir, &args);
    let wt = dir.join("clone");
    std::fs::write(wt.join(file), content).unwrap();
    run_git(&wt, &["add", file]);
    run_git(&wt, &["commit", "-q", "-m", &format!("add {file}")]);
    let mut args: Vec<&str> = extra.to_vec();
    args.extend(["push", "-q", "origin", "main"]);
    run_git(&wt, &args);
    run_git(&wt, &["rev-parse", "HEAD"])
}

/// Bytes that do not compress, so a pack of them is as large as they are.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Sends one raw HTTP/1.0 GET and returns the status code.
fn http_status(port: u16, path: &str, authorization: Option<&str>) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n{auth}\r\n"
    )
    .unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let head = String::from_utf8_lossy(&resp);
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {head:?}"))
}

fn process_exists(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the process exists.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}

#[test]
fn daemon_clone_commit_push_moves_the_bare_head() {
    let repo = BareRepo::seeded("demo", &[("README.md", b"hello\n")]);
    let seeded = repo.head("main").unwrap();
    let daemon = GitDaemon::serve(&repo);
    assert_eq!(
        daemon.url("demo"),
        format!("git://127.0.0.1:{}/demo.git", daemon.port())
    );
    assert_eq!(daemon.url("demo.git"), daemon.url("demo"));

    let dir = tmp();
    let pushed = clone_commit_push(dir.path(), &daemon.url("demo"), &[], "new.txt", b"new\n");
    assert_ne!(pushed, seeded);
    assert_eq!(repo.head("main").as_deref(), Some(pushed.as_str()));
    assert_eq!(
        repo.read_file("main", "new.txt").as_deref(),
        Some(&b"new\n"[..])
    );
    assert_eq!(repo.parents(&pushed), vec![seeded.clone()]);
    let log = repo.log("main");
    assert_eq!(
        log,
        vec![
            (pushed, "add new.txt".to_string()),
            (seeded, "initial commit".to_string())
        ]
    );
}

#[test]
fn daemon_serves_several_repositories_and_reports_missing_ones() {
    let base = tmp();
    let a = BareRepo::new_in(base.path(), "a");
    let b = BareRepo::new_in(base.path(), "b.git");
    assert_eq!(b.name(), "b");
    a.seed(&[("a.txt", b"a")]);
    b.seed(&[("b.txt", b"b")]);
    let daemon = GitDaemon::start(base.path());
    let dir = tmp();
    run_git(dir.path(), &["clone", "-q", &daemon.url("a"), "a"]);
    run_git(dir.path(), &["clone", "-q", &daemon.url("b"), "b"]);
    assert_eq!(std::fs::read(dir.path().join("a/a.txt")).unwrap(), b"a");
    assert_eq!(std::fs::read(dir.path().join("b/b.txt")).unwrap(), b"b");

    let out = try_git(dir.path(), &["clone", "-q", &daemon.url("nope"), "nope"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no such repository"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn http_clone_and_push_with_credentials_in_the_url() {
    let repo = BareRepo::seeded("demo", &[("README.md", b"hello\n")]);
    let http = HttpGit::serve(&repo);
    assert_eq!(
        http.url("demo"),
        format!("http://127.0.0.1:{}/git/demo.git", http.port())
    );
    assert_eq!(
        http.url_with_credentials("demo"),
        format!(
            "http://{}:{}@127.0.0.1:{}/git/demo.git",
            http.user(),
            http.password(),
            http.port()
        )
    );
    assert_eq!(http.password().len(), 32);

    let dir = tmp();
    // 3 MiB that do not compress: larger than git's http.postBuffer (1 MiB), so the push is
    // sent with chunked transfer encoding, which lighttpd must pass on to the CGI.
    let big = noise(3 << 20);
    let pushed = clone_commit_push(
        dir.path(),
        &http.url_with_credentials("demo"),
        &[],
        "big.bin",
        &big,
    );
    assert_eq!(repo.head("main").as_deref(), Some(pushed.as_str()));
    assert!(repo.read_file("main", "big.bin").unwrap() == big);
}

#[test]
fn http_clone_and_push_with_an_authorization_header() {
    let repo = BareRepo::seeded("demo", &[("README.md", b"hello\n")]);
    let http = HttpGit::serve(&repo);
    let header = format!("http.extraHeader=Authorization: {}", http.basic_auth());
    let dir = tmp();
    let pushed = clone_commit_push(
        dir.path(),
        &http.url("demo"),
        &["-c", &header],
        "x.txt",
        b"x\n",
    );
    assert_eq!(repo.head("main").as_deref(), Some(pushed.as_str()));
}

#[test]
fn http_wrong_or_missing_credentials_get_401() {
    let repo = BareRepo::seeded("demo", &[("README.md", b"hello\n")]);
    let http = HttpGit::serve(&repo);
    let dir = tmp();

    let wrong = http
        .url_with_credentials("demo")
        .replace(http.password(), "wrong-password");
    let anonymous = http.url("demo");
    for (what, url) in [("wrong password", &wrong), ("no credentials", &anonymous)] {
        // GIT_CURL_VERBOSE shows the status line; GIT_TERMINAL_PROMPT=0 (always set by the
        // harness) makes git give up instead of asking for a password.
        let out = crate::support::git_servers::git_command()
            .current_dir(dir.path())
            .env("GIT_CURL_VERBOSE", "1")
            .args(["clone", "-q", url, "clone"])
            .output()
            .unwrap();
        let err = stderr(&out);
        assert!(!out.status.success(), "{what}: clone succeeded");
        assert!(
            err.contains("HTTP/1.1 401") || err.contains("Authentication failed"),
            "{what}: no 401 in\n{err}"
        );
        assert!(!dir.path().join("clone").exists(), "{what}");
    }

    // The same refusal without git in between, for every kind of request.
    let refs = "/git/demo.git/info/refs?service=git-upload-pack";
    let push_refs = "/git/demo.git/info/refs?service=git-receive-pack";
    let wrong_auth = format!("Basic {}", base64(b"wardfs:wrong"));
    for path in [refs, push_refs, "/git/demo.git/HEAD", "/"] {
        assert_eq!(http_status(http.port(), path, None), 401, "{path}");
        assert_eq!(
            http_status(http.port(), path, Some(&wrong_auth)),
            401,
            "{path}"
        );
    }
    let auth = http.basic_auth();
    assert_eq!(http_status(http.port(), refs, Some(&auth)), 200);
    assert_eq!(http_status(http.port(), push_refs, Some(&auth)), 200);
    assert_eq!(
        http_status(http.port(), "/git/nope.git/info/refs", Some(&auth)),
        404
    );
}

#[test]
fn pre_receive_hook_rejects_pushes_over_both_servers() {
    let repo = BareRepo::seeded("demo", &[("README.md", b"hello\n")]);
    let before = repo.head("main").unwrap();
    let daemon = GitDaemon::serve(&repo);
    let http = HttpGit::serve(&repo);
    repo.reject_pushes("pushes to this repo are frozen: it's a test");

    for url in [daemon.url("demo"), http.url_with_credentials("demo")] {
        let dir = tmp();
        run_git(dir.path(), &["clone", "-q", &url, "clone"]);
        let wt = dir.path().join("clone");
        std::fs::write(wt.join("f"), b"f").unwrap();
        run_git(&wt, &["add", "f"]);
        run_git(&wt, &["commit", "-q", "-m", "refused"]);
        let out = try_git(&wt, &["push", "origin", "main"]);
        let err = stderr(&out);
        assert!(!out.status.success(), "{url}: push succeeded:\n{err}");
        assert!(
            err.contains("remote: pushes to this repo are frozen: it's a test"),
            "{url}:\n{err}"
        );
        assert!(err.contains("pre-receive hook declined"), "{url}:\n{err}");
        assert_eq!(repo.head("main").as_deref(), Some(before.as_str()), "{url}");
    }

    repo.remove_hook("pre-receive");
    let dir = tmp();
    clone_commit_push(dir.path(), &daemon.url("demo"), &[], "ok", b"ok");
    assert_ne!(repo.head("main").unwrap(), before);
}

#[test]
fn bare_repo_helpers() {
    let repo = BareRepo::new("helpers");
    assert_eq!(repo.head("main"), None);
    assert!(repo.log("main").is_empty());
    assert!(repo.files("main").is_empty());
    assert_eq!(repo.read_file("main", "a"), None);

    let first = repo.seed(&[("a.txt", b"a\n"), ("dir/sub/b.bin", &[0, 1, 2, 255])]);
    assert_eq!(repo.head("main").as_deref(), Some(first.as_str()));
    assert_eq!(repo.files("main"), vec!["a.txt", "dir/sub/b.bin"]);
    assert_eq!(
        repo.read_file("main", "dir/sub/b.bin").as_deref(),
        Some(&[0u8, 1, 2, 255][..])
    );
    assert_eq!(
        repo.read_file("main", "dir"),
        None,
        "a directory is no file"
    );
    assert_eq!(repo.file_mode("main", "a.txt").as_deref(), Some("100644"));
    assert_eq!(repo.file_mode("main", "missing"), None);

    // The remote moves: update, create, delete.
    let second = repo.commit_files(
        "main",
        &[
            ("a.txt", Some(b"A\n")),
            ("c.txt", Some(b"c\n")),
            ("dir/sub/b.bin", None),
        ],
        "second",
    );
    assert_eq!(repo.files("main"), vec!["a.txt", "c.txt"]);
    assert_eq!(
        repo.read_file("main", "a.txt").as_deref(),
        Some(&b"A\n"[..])
    );
    assert_eq!(repo.parents(&second), vec![first.clone()]);
    assert_eq!(repo.log("main")[0], (second.clone(), "second".to_string()));

    // A new branch starts from main.
    let feature = repo.commit_files("feature", &[("f.txt", Some(b"f"))], "feature work");
    assert_eq!(repo.parents(&feature), vec![second.clone()]);
    assert_eq!(repo.branches(), vec!["feature", "main"]);
    assert_eq!(repo.head("main").as_deref(), Some(second.as_str()));
    assert_eq!(repo.read_file("main", "f.txt"), None);
    assert_eq!(
        repo.read_file("feature", "f.txt").as_deref(),
        Some(&b"f"[..])
    );

    // Receive options apply to commit_files too (it pushes).
    repo.set_config("receive.denyDeletes", "true");
    assert_eq!(repo.git(&["config", "receive.denyDeletes"]), "true");
    assert!(repo.file_url().starts_with("file:///"));
    assert!(repo.path().ends_with("helpers.git"));
}

#[test]
#[should_panic(expected = "push to main was refused")]
fn commit_files_goes_through_hooks() {
    let repo = BareRepo::seeded("hooked", &[("a", b"a")]);
    repo.reject_pushes("no");
    repo.commit_files("main", &[("b", Some(b"b"))], "refused");
}

#[test]
fn servers_are_killed_and_reaped_on_drop() {
    let repo = BareRepo::seeded("demo", &[("a", b"a")]);
    let daemon = GitDaemon::serve(&repo);
    let http = HttpGit::serve(&repo);
    assert_ne!(daemon.port(), http.port());
    // Exercise the CGI once so that lighttpd has had children.
    assert_eq!(
        http_status(
            http.port(),
            "/git/demo.git/info/refs?service=git-upload-pack",
            Some(&http.basic_auth())
        ),
        200
    );
    let pids = [daemon.pid(), http.pid()];
    let ports = [daemon.port(), http.port()];
    assert!(pids.iter().all(|p| process_exists(*p)));
    drop(daemon);
    drop(http);
    for (pid, port) in pids.into_iter().zip(ports) {
        assert!(!process_exists(pid), "pid {pid} still exists");
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "port {port} still accepts connections"
        );
    }
}

#[test]
fn servers_are_killed_when_a_test_panics() {
    let repo = BareRepo::seeded("demo", &[("a", b"a")]);
    let (tx, rx) = std::sync::mpsc::channel();
    let root = repo.root().to_path_buf();
    let result = std::thread::spawn(move || {
        let daemon = GitDaemon::start(&root);
        let http = HttpGit::start(&root);
        tx.send([daemon.pid(), http.pid()]).unwrap();
        panic!("test failure while the servers run");
    })
    .join();
    assert!(result.is_err());
    for pid in rx.recv().unwrap() {
        assert!(!process_exists(pid), "pid {pid} survived the panic");
    }
}

#[test]
fn require_tool_finds_sbin_tools() {
    assert!(require_tool("git", "git").is_file());
    assert!(require_tool("lighttpd", "lighttpd").is_file());
}

#[test]
#[should_panic(
    expected = "install it with `apt-get install no-such-package` (make test does this)"
)]
fn require_tool_fails_loudly() {
    require_tool("wardfs-no-such-tool", "no-such-package");
}

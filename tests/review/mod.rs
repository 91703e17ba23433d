//! The review web page end to end, in a real browser: a real daemon (`serve --no-mount`) pulls a
//! repository from a real `git daemon` on loopback, three commits are staged, `wardfs review` serves
//! the page, and headless Chromium (Debian's `chromium`, driven by `playwright-core` from npm
//! through `drive.js`) reads a diff (without git's header lines) and when each commit was staged,
//! discards one commit, cancels the confirmation of a push (nothing is sent), pushes another once
//! confirmed, sees why the server refused a third, and takes a screenshot. The outcome is then
//! checked where it matters: the daemon's API and the bare repository.
//!
//! The daemon and the git server come from the shared harness (`Daemon::git`,
//! `support::git_servers`). Nothing is skipped: a missing browser, node or playwright-core fails
//! the test with what to install. The browser scripts share `browser.js`; the timeline (the
//! checkpoints tab) is the second scenario, in [`timeline`]; a fork's staged change with its
//! fork, writers and overlaps (fetched over HTTP) the third, in [`forks`].

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::{Daemon, BIN};

mod forks;
mod timeline;

const CHROMIUM: &str = "/usr/bin/chromium";
const LIB: &str = "pub fn greeting() -> &'static str {\n    \"hello, world\"\n}\n";
const LIB_NEW: &str = "pub fn greeting() -> &'static str {\n    \"hello, review page\"\n}\n";
/// File content that would run script if the page did not escape diffs.
const NOTES_NEW: &str =
    "notes\n<script>window.__pwned = 1</script>\n<img src=x onerror=\"window.__pwned = 2\">\n";

/// `wardfs review`, killed on drop.
pub(crate) struct Review {
    child: Child,
    url: String,
}

impl Review {
    pub(crate) fn start(d: &Daemon) -> Review {
        let mut child = Command::new(BIN)
            .arg("--socket")
            .arg(&d.socket)
            .arg("review")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line.trim().to_string();
        assert!(
            url.starts_with("http://127.0.0.1:") && url.contains("/?token="),
            "review printed {line:?}"
        );
        Review { child, url }
    }

    pub(crate) fn token(&self) -> &str {
        self.url.split("token=").nth(1).unwrap()
    }

    pub(crate) fn addr(&self) -> &str {
        self.url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
    }
}

impl Drop for Review {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one raw HTTP/1.1 request and returns the status code.
fn status_of(addr: &str, request: &str) -> u16 {
    answer_of(addr, request).0
}

/// Sends one raw HTTP/1.1 request and returns the status code and the body.
pub(crate) fn answer_of(addr: &str, request: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (code, body)
}

fn get(addr: &str, target: &str) -> u16 {
    status_of(
        addr,
        &format!("GET {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"),
    )
}

fn post(addr: &str, target: &str, headers: &str, body: &str) -> u16 {
    status_of(
        addr,
        &format!(
            "POST {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{headers}\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// The directory holding `node_modules/playwright-core` (`.ci/install-deps test` puts it there).
fn playwright_dir() -> PathBuf {
    let dir = std::env::var_os("WARDFS_PLAYWRIGHT_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/playwright"));
    let module = dir.join("node_modules/playwright-core");
    assert!(
        module.join("package.json").is_file(),
        "playwright-core is not installed in {}: run `.ci/install-deps test` \
         (npm install --prefix {} playwright-core), or set WARDFS_PLAYWRIGHT_DIR",
        dir.display(),
        dir.display()
    );
    module
}

fn require_browser() -> (PathBuf, PathBuf) {
    let node = crate::support::tools::require_tool("node", "nodejs");
    assert!(
        Path::new(CHROMIUM).is_file(),
        "{CHROMIUM} is missing: install it with `apt-get install chromium` (make test does this)"
    );
    (node, playwright_dir())
}

/// Runs the browser scenario `script` (in this directory) against `review` with `vars` besides
/// the browser's and the page's URL; returns what it printed, failing the test with its output
/// and the daemon's log if it failed.
fn run_script(d: &Daemon, script: &str, review: &Review, vars: &[(&str, String)]) -> String {
    let (node, playwright) = require_browser();
    let out = Command::new(node)
        .arg(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/review")
                .join(script),
        )
        .env("PLAYWRIGHT_CORE", &playwright)
        .env("CHROMIUM", CHROMIUM)
        .env("REVIEW_URL", &review.url)
        .envs(vars.iter().map(|(k, v)| (*k, v)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{}\ndaemon log:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );
    stdout
}

fn state(d: &Daemon, id: &str) -> Value {
    d.ok("/v1/git/staged/show", json!({ "id": id }))
}

#[test]
fn review_page_shows_diffs_discards_and_pushes_in_chromium() {
    require_browser();
    let repo = BareRepo::seeded(
        "proj",
        &[
            ("README.md", b"# proj\n"),
            ("src/lib.rs", LIB.as_bytes()),
            ("notes.txt", b"notes\n"),
        ],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    d.ok("/v1/git/pull", json!({ "remote": server.url("proj") }));

    d.write("/workspace/proj/src/lib.rs", LIB_NEW);
    let keep = d.ok(
        "/v1/git/stage",
        json!({ "message": "Greet the review page\n\nA longer body." }),
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    d.write("/workspace/proj/notes.txt", NOTES_NEW);
    let drop = d.ok("/v1/git/stage", json!({ "message": "Notes with markup" }))["id"]
        .as_str()
        .unwrap()
        .to_string();

    d.write("/workspace/proj/README.md", "# proj, renamed\n");
    let blocked = d.ok("/v1/git/stage", json!({ "message": "Rename the project" }))["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The server refuses any push that touches README.md, with markup in its message.
    repo.install_pre_receive_hook(
        "#!/bin/sh\nwhile read old new ref; do\n  \
         if git diff --name-only \"$old\" \"$new\" -- README.md | grep -q .; then\n    \
         echo 'README.md is <b>frozen</b>' >&2; exit 1\n  fi\ndone\nexit 0\n",
    );

    let review = Review::start(&d);
    let addr = review.addr().to_string();
    let token = review.token().to_string();

    // Every request without the right token is refused, and so is a POST from elsewhere.
    assert_eq!(get(&addr, "/"), 403);
    assert_eq!(get(&addr, "/?token=0123456789abcdef0123456789abcdef"), 403);
    assert_eq!(get(&addr, &format!("/?token={}", &token[..31])), 403);
    assert_eq!(get(&addr, "/assets/review.js"), 403);
    let body = format!("{{\"id\":\"{drop}\"}}");
    assert_eq!(
        post(
            &addr,
            "/api/discard",
            "Content-Type: application/json\r\n",
            &body
        ),
        403
    );
    assert_eq!(
        post(
            &addr,
            &format!("/api/discard?token={token}"),
            "Content-Type: application/json\r\nOrigin: http://evil.test\r\n",
            &body
        ),
        403,
        "a cross-origin POST with the token"
    );
    assert_eq!(
        post(
            &addr,
            &format!("/api/discard?token={token}"),
            "Content-Type: application/json\r\n",
            &body
        ),
        403,
        "a POST without Origin"
    );
    assert_eq!(state(&d, &drop)["state"], "staged");
    assert_eq!(get(&addr, &format!("/?token={token}")), 200);

    let shots = tempfile::tempdir().unwrap();
    let shot = shots.path().join("review.png");
    let stdout = run_script(
        &d,
        "drive.js",
        &review,
        &[
            ("REMOTE", server.url("proj")),
            ("KEEP_ID", keep.clone()),
            ("DROP_ID", drop.clone()),
            ("BLOCKED_ID", blocked.clone()),
            ("SCREENSHOT", shot.display().to_string()),
        ],
    );
    eprintln!("{stdout}");

    // What the clicks did, seen through the API and in the bare repository.
    assert_eq!(state(&d, &drop)["state"], "discarded");
    let pushed = state(&d, &keep);
    assert_eq!(pushed["state"], "pushed", "{pushed}");
    let sha = pushed["pushed_commit"].as_str().unwrap();
    assert_eq!(repo.head("main").as_deref(), Some(sha));
    assert_eq!(
        repo.read_file("main", "src/lib.rs").as_deref(),
        Some(LIB_NEW.as_bytes())
    );
    assert_eq!(
        repo.read_file("main", "notes.txt").as_deref(),
        Some(&b"notes\n"[..])
    );

    let refused = state(&d, &blocked);
    assert_eq!(refused["state"], "rejected", "{refused}");
    assert!(refused["reason"].as_str().unwrap().contains("frozen"));
    assert_eq!(
        repo.read_file("main", "README.md").as_deref(),
        Some(&b"# proj\n"[..])
    );

    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("{}: {e}", shot.display()));
    assert!(png.len() > 1000, "screenshot is {} bytes", png.len());
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    if let Some(dir) = std::env::var_os("WARDFS_REVIEW_SCREENSHOT_DIR") {
        for name in ["review.png", "review-done.png"] {
            std::fs::copy(shots.path().join(name), Path::new(&dir).join(name)).unwrap();
        }
    }
}

//! git's file-system monitor from the journal (issue 31): `wardfs git watch` on a person's own
//! checkout in the workspace, then the real `git status` through a real mount, with
//! `GIT_TRACE_FSMONITOR=1`. git's trace names every path the hook answered
//! (`fsmonitor_refresh_callback 'PATH'`), so each test sees that the hook was asked and what it
//! said: a change listed by `git status` but not answered by the hook would be git's own full
//! look, and fails. Every writer's change shows in the very next `git status`: the API, MCP, the
//! mount, beside the mount in the zone's directory (no wait: the answer waits for the watcher),
//! a git pull, a restore, and a change made while the daemon was stopped. A token the daemon
//! cannot vouch for answers everything; a daemon that is down too, quietly. A `core.fsmonitor` an
//! agent plants in a checkout never runs from a wardfs command.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::support::git_servers::{git_command, run_git, BareRepo};
use crate::support::mcp::McpClient;
use crate::support::{Daemon, BIN};

/// The files of the checkouts: `src/f1.txt` … `src/f3.txt` and `README.md`.
const FILES: &[(&str, &str)] = &[
    ("README.md", "# app\n"),
    ("src/f1.txt", "one\n"),
    ("src/f2.txt", "two\n"),
    ("src/f3.txt", "three\n"),
];

/// A `git status --porcelain` and git's fsmonitor trace of it.
struct Status {
    porcelain: String,
    trace: String,
}

impl Status {
    /// The paths the hook answered (git invalidates each, and its trace names it).
    fn answered(&self) -> Vec<String> {
        self.trace
            .lines()
            .filter_map(|l| l.split_once("fsmonitor_refresh_callback '"))
            .filter_map(|(_, rest)| rest.split_once("' (pos "))
            .map(|(path, _)| path.to_string())
            .collect()
    }

    /// The token git wrote into the index (or read from it, when it wrote none).
    fn token(&self) -> String {
        let at = |what: &str| {
            self.trace
                .lines()
                .filter_map(|l| l.split_once(what))
                .filter_map(|(_, rest)| rest.strip_suffix('\''))
                .next_back()
                .map(str::to_string)
        };
        at("write fsmonitor extension successful '")
            .or_else(|| at("read fsmonitor extension successful '"))
            .unwrap_or_else(|| panic!("no token in the trace:\n{}", self.trace))
    }

    /// Asserts that git ran the hook and it answered.
    fn asked_the_hook(&self) {
        assert!(
            self.trace.contains("git fsmonitor-hook' returned success"),
            "git did not run the hook, or it failed:\n{}",
            self.trace
        );
    }
}

/// Runs `git status --porcelain` in `dir` (hermetic git, traced).
fn status(dir: &Path) -> Status {
    let out = git_command()
        .current_dir(dir)
        .env("GIT_TRACE_FSMONITOR", "1")
        .args(["status", "--porcelain"])
        .output()
        .unwrap();
    let trace = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "git status in {}: {trace}",
        dir.display()
    );
    Status {
        porcelain: String::from_utf8(out.stdout).unwrap(),
        trace,
    }
}

/// Asserts that the next `git status` in `dir` lists `line` and that the hook answered `path`.
fn lists(dir: &Path, line: &str, path: &str, writer: &str) -> Status {
    let s = status(dir);
    s.asked_the_hook();
    assert!(
        s.porcelain.lines().any(|l| l == line),
        "{writer}: git status does not list `{line}`:\n{}",
        s.porcelain
    );
    assert!(
        s.answered().iter().any(|p| p == path),
        "{writer}: the hook did not answer {path} (it answered {:?}); trace:\n{}",
        s.answered(),
        s.trace
    );
    s
}

/// Makes a repository of [`FILES`] at `dir` (one commit) and turns the monitor on for it with
/// `wardfs git watch`; the first `git status` (which looks at every file and gives the index its
/// first token) is clean.
fn watched_checkout(d: &Daemon, dir: &Path) {
    for (name, text) in FILES {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    run_git(dir, &["init", "-q"]);
    run_git(dir, &["add", "."]);
    run_git(dir, &["commit", "-qm", "start"]);
    let out = d.cli_ok(&["git", "watch", dir.to_str().unwrap()]);
    assert!(out.contains("asks wardfs what changed"), "{out}");
    let config = run_git(dir, &["config", "--local", "core.fsmonitor"]);
    assert!(
        config.starts_with(&format!(
            "'{}' --socket '",
            std::fs::canonicalize(BIN).unwrap().display()
        )) && config.ends_with("' git fsmonitor-hook"),
        "{config}"
    );
    assert_eq!(
        run_git(dir, &["config", "--local", "core.untrackedCache"]),
        "true"
    );
    let s = status(dir);
    s.asked_the_hook();
    assert_eq!(s.porcelain, "", "a fresh checkout is clean");
}

/// The hook run by hand in `dir` with `--json`: the daemon's answer.
fn hook_json(d: &Daemon, dir: &Path, token: &str) -> Value {
    let out = hook_raw(d, dir, &["--json", "git", "fsmonitor-hook", "2", token]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `wardfs --socket S ARGS` run in `dir`, as git runs the hook.
fn hook_raw(d: &Daemon, dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .current_dir(dir)
        .env_remove("WARDFS_CONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A token of the checkout at `dir`, once the journal holds every change made so far: the
/// hook answers what the watcher saw beside the mount at once, and again once the watcher
/// journals it (after its settle time, 250 ms), as a change after the token it gave; a directory
/// made beside the mount is a change of that directory until then (everything, for a checkout's
/// own). An answer with no path says the journal has caught up.
fn settled(d: &Daemon, dir: &Path) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut token = hook_json(d, dir, "")["token"].as_str().unwrap().to_string();
    loop {
        let a = hook_json(d, dir, &token);
        if a["everything"] == json!(false) && a["paths"] == json!([]) {
            return token;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still everything: {a}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
        token = a["token"].as_str().unwrap().to_string();
    }
}

/// Writes a file with `wardfs mcp`'s `write` tool (as an MCP client).
fn mcp_write(d: &Daemon, path: &str, content: &str) {
    McpClient::start(d, &[]).call_ok("write", json!({"path": path, "content": content}));
}

#[test]
fn git_status_through_the_mount_lists_what_the_api_mcp_the_mount_and_a_change_beside_made() {
    let d = Daemon::mounted("");
    let app = d.ws().join("app");
    watched_checkout(&d, &app);
    let beside = d.workspace().join("app");

    d.write("/workspace/app/src/f1.txt", "one, by the API\n");
    lists(&app, " M src/f1.txt", "src/f1.txt", "the API");

    mcp_write(&d, "/workspace/app/src/f2.txt", "two, by MCP\n");
    lists(&app, " M src/f2.txt", "src/f2.txt", "MCP");

    std::fs::write(app.join("src/f3.txt"), "three, through the mount\n").unwrap();
    lists(&app, " M src/f3.txt", "src/f3.txt", "the mount");
    std::fs::write(app.join("made.txt"), "new through the mount\n").unwrap();
    lists(
        &app,
        "?? made.txt",
        "made.txt",
        "a file made through the mount",
    );

    // Beside the mount, in the zone's directory, and `git status` at once: the answer waits
    // until the watcher has taken the change in.
    std::fs::write(beside.join("README.md"), "# app, edited beside\n").unwrap();
    lists(&app, " M README.md", "README.md", "beside the mount");
    std::fs::write(beside.join("src/beside.txt"), "new beside\n").unwrap();
    lists(
        &app,
        "?? src/beside.txt",
        "src/beside.txt",
        "a file made beside",
    );
    std::fs::remove_file(beside.join("src/f1.txt")).unwrap();
    lists(&app, " D src/f1.txt", "src/f1.txt", "a file deleted beside");

    // Committed through the mount (git writes its index with a new token): nothing changed
    // since, so the hook answers nothing (git's own writes in `.git` are left out).
    // The changes seen beside the mount (and written through it) are answered again once the
    // journal holds them, after the token git has: git then writes its index with a new one.
    run_git(&app, &["add", "-A"]);
    run_git(&app, &["commit", "-qm", "everyone's changes"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let s = status(&app);
        s.asked_the_hook();
        assert_eq!(s.porcelain, "");
        if s.answered().is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still answered {:?}:\n{}",
            s.answered(),
            s.trace
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn git_status_through_the_mount_lists_what_a_pull_a_restore_and_a_change_while_stopped_made() {
    let upstream = BareRepo::seeded("lib", &[("lib.rs", b"pub fn lib() {}\n")]);
    let mut d = Daemon::options()
        .prefix("wardfs-fuse")
        .mount()
        .extra(&format!(
            "[git]\nlocal_remotes = [\"{}\"]\n",
            upstream.root().display()
        ))
        .start();
    let app = d.ws().join("app");
    watched_checkout(&d, &app);

    // A git pull into a directory of the checkout.
    d.cli_ok(&[
        "git",
        "pull",
        upstream.path().to_str().unwrap(),
        "--into",
        "/workspace/app/vendor/lib",
    ]);
    lists(&app, "?? vendor/", "vendor/lib/lib.rs", "a git pull");

    // A restore: f1 changed and checkpointed, put back by git, then restored.
    d.write("/workspace/app/src/f1.txt", "one, checkpointed\n");
    let cp = d.cli_json(&["checkpoint", "-m", "f1 changed"]);
    let id = cp["id"].as_i64().unwrap().to_string();
    run_git(&app, &["checkout", "--", "src/f1.txt"]);
    let s = status(&app);
    assert!(!s.porcelain.contains("src/f1.txt"), "{}", s.porcelain);
    d.cli_ok(&["restore", &id, "/workspace/app/src/f1.txt"]);
    lists(&app, " M src/f1.txt", "src/f1.txt", "a restore");

    // A change made while no daemon ran, after a clean stop: the next daemon journals it at
    // start (it changed after the zone's newest checkpoint), so it answers the previous
    // instance's token from the journal, with that change, not with everything.
    let old = status(&app).token();
    d.stop();
    std::fs::write(d.workspace().join("app/src/f2.txt"), "two, while stopped\n").unwrap();
    d.respawn();
    let a = hook_json(&d, &app, &old);
    assert_eq!(a["everything"], json!(false), "{a}");
    let paths: Vec<&str> = a["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(paths.contains(&"src/f2.txt"), "{a}");
    let s = status(&app);
    s.asked_the_hook();
    assert!(
        s.porcelain.lines().any(|l| l == " M src/f2.txt"),
        "a change made while the daemon was stopped:\n{}",
        s.porcelain
    );
    assert_ne!(s.token(), old, "the index holds the new instance's token");

    // Files git tracks in a directory checkpoints leave out (ignored): the start-up reads that
    // directory too, and journals a file changed and, for one removed, the directory.
    std::fs::write(app.join(".gitignore"), "gen/\n").unwrap();
    std::fs::create_dir_all(app.join("gen/deep")).unwrap();
    std::fs::write(app.join("gen/out.txt"), "generated\n").unwrap();
    std::fs::write(app.join("gen/deep/old.txt"), "generated once\n").unwrap();
    run_git(
        &app,
        &[
            "add",
            "-f",
            ".gitignore",
            "gen/out.txt",
            "gen/deep/old.txt",
            "src/f2.txt",
        ],
    );
    run_git(&app, &["commit", "-qm", "generated, tracked"]);
    d.cli_ok(&["checkpoint", "-m", "before the second stop"]);
    let old = status(&app).token();
    d.stop();
    std::fs::write(d.workspace().join("app/gen/out.txt"), "regenerated\n").unwrap();
    std::fs::remove_file(d.workspace().join("app/gen/deep/old.txt")).unwrap();
    d.respawn();
    let a = hook_json(&d, &app, &old);
    assert_eq!(a["everything"], json!(false), "{a}");
    for want in ["gen/out.txt", "gen/deep"] {
        assert!(
            a["paths"].as_array().unwrap().contains(&json!(want)),
            "{want}: {a}"
        );
    }
    let s = status(&app);
    s.asked_the_hook();
    for want in [" M gen/out.txt", " D gen/deep/old.txt"] {
        assert!(
            s.porcelain.lines().any(|l| l == want),
            "{want}: tracked files in an ignored directory, changed while stopped:\n{}",
            s.porcelain
        );
    }

    // After a crash the journal may lack what the killed daemon had not written: the next one
    // answers its tokens with everything, and git looks at every file.
    let old = s.token();
    d.crash();
    std::fs::write(
        d.workspace().join("app/src/f3.txt"),
        "three, changed after a crash\n",
    )
    .unwrap();
    d.respawn();
    let a = hook_json(&d, &app, &old);
    assert_eq!(a["everything"], json!(true), "{a}");
    assert!(
        a["reason"]
            .as_str()
            .unwrap()
            .contains("another daemon instance"),
        "{a}"
    );
    let s = status(&app);
    assert!(
        s.porcelain.lines().any(|l| l == " M src/f3.txt"),
        "a file changed after a crash:\n{}",
        s.porcelain
    );
}

#[test]
fn the_hook_answers_everything_to_a_token_it_cannot_vouch_for_and_when_the_daemon_is_down() {
    let mut d = Daemon::start("");
    let app = d.workspace().join("app");
    watched_checkout(&d, &app);

    // A token of this daemon for this checkout answers what changed since.
    let token = settled(&d, &app);
    let parts: Vec<&str> = token.split(':').collect();
    let (instance, position) = (parts[1], parts[3].parse::<i64>().unwrap());
    assert_eq!((parts[0], parts[2]), ("wardfs", "workspace"), "{token}");
    d.write("/workspace/app/src/f1.txt", "changed\n");
    d.write("/workspace/notes.txt", "outside the checkout\n");
    let next = hook_json(&d, &app, &token);
    assert_eq!(next["everything"], json!(false), "{next}");
    assert_eq!(next["paths"], json!(["src/f1.txt"]), "{next}");

    // Anything else answers everything, with a fresh token and the reason.
    let ahead = format!("wardfs:{instance}:workspace:{}", position + 1_000_000);
    for (bad, why) in [
        ("".to_string(), "not a wardfs token"),
        ("1764300000000000000".to_string(), "not a wardfs token"),
        ("wardfs:x".to_string(), "not a wardfs token"),
        (
            format!("wardfs:0123456789abcdef:workspace:{position}"),
            "another daemon instance",
        ),
        (
            format!("wardfs:{instance}:cache:{position}"),
            "of zone cache",
        ),
        (ahead, "ahead of the journal"),
    ] {
        let a = hook_json(&d, &app, &bad);
        assert_eq!(a["everything"], json!(true), "{bad:?}: {a}");
        assert!(a["reason"].as_str().unwrap().contains(why), "{bad:?}: {a}");
        assert!(
            a["token"]
                .as_str()
                .unwrap()
                .starts_with(&format!("wardfs:{instance}:workspace:")),
            "{a}"
        );
    }

    // git's form: the token, NUL, the paths each with a NUL; `/` for everything; protocol 1
    // is not answered from the journal.
    let token = hook_json(&d, &app, &token)["token"]
        .as_str()
        .unwrap()
        .to_string();
    d.write("/workspace/app/src/f2.txt", "changed\n");
    let raw = hook_raw(&d, &app, &["git", "fsmonitor-hook", "2", &token]);
    let out = String::from_utf8(raw.stdout).unwrap();
    assert!(out.ends_with("\0src/f2.txt\0"), "{out:?}");
    assert!(
        out.starts_with(&format!("wardfs:{instance}:workspace:")),
        "{out:?}"
    );
    let raw = hook_raw(&d, &app, &["git", "fsmonitor-hook", "2", ""]);
    assert!(
        raw.stdout.ends_with(b"\0/\0"),
        "{:?}",
        String::from_utf8_lossy(&raw.stdout)
    );
    let raw = hook_raw(
        &d,
        &app,
        &["git", "fsmonitor-hook", "1", "1764300000000000000"],
    );
    assert_eq!(raw.stdout, b"/");

    // The route takes the checkout by `dir` or by `path`, one of them.
    let (code, body) = d.curl(
        "GET",
        &format!(
            "/v1/git/fsmonitor?path=/workspace/app&dir={}&token=",
            app.display()
        ),
        None,
    );
    assert_eq!(code, 400, "{}", String::from_utf8_lossy(&body));
    let (code, body) = d.curl("GET", "/v1/git/fsmonitor?dir=/etc&token=", None);
    assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("OUTSIDE_ZONE"));

    // The daemon down: everything, quietly, and git status stays right.
    d.crash();
    let raw = hook_raw(&d, &app, &["git", "fsmonitor-hook", "2", &token]);
    assert!(raw.status.success());
    assert_eq!(raw.stdout, b"wardfs:unavailable\0/\0");
    assert_eq!(String::from_utf8_lossy(&raw.stderr), "", "quiet");
    let s = status(&app);
    s.asked_the_hook();
    assert_eq!(s.porcelain, " M src/f1.txt\n M src/f2.txt\n");
    assert!(
        !s.trace.contains("wardfs git fsmonitor-hook:"),
        "{}",
        s.trace
    );
}

#[test]
fn a_checkout_in_a_fork_is_answered_from_the_forks_own_journal() {
    let d = Daemon::mounted("");
    let app = d.ws().join("app");
    watched_checkout(&d, &app);
    d.cli_ok(&["fork", "try"]);
    let forked = d.mnt.join("forks/try/app");

    // The fork's index carries the workspace's token: its first answer is everything.
    let s = status(&forked);
    s.asked_the_hook();
    assert_eq!(s.porcelain, "");
    assert!(s.answered().is_empty(), "{}", s.trace);
    assert!(s.token().contains(":fork"), "{}", s.token());

    d.write("/forks/try/app/src/f2.txt", "two, in the fork\n");
    lists(&forked, " M src/f2.txt", "src/f2.txt", "the API in a fork");
    std::fs::write(
        forked.join("src/f3.txt"),
        "three, through the fork's mount\n",
    )
    .unwrap();
    lists(
        &forked,
        " M src/f3.txt",
        "src/f3.txt",
        "the mount in a fork",
    );
    // The workspace's checkout saw none of it.
    let w = status(&app);
    assert_eq!(w.porcelain, "", "{}", w.porcelain);
}

#[test]
fn a_core_fsmonitor_an_agent_plants_never_runs_from_a_wardfs_command() {
    let upstream = BareRepo::seeded("lib", &[("lib.rs", b"pub fn lib() {}\n")]);
    let d = Daemon::start(&format!(
        "[git]\nlocal_remotes = [\"{}\"]\n",
        upstream.root().display()
    ));
    let app = d.workspace().join("app");
    for (name, text) in FILES {
        let p = app.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    run_git(&app, &["init", "-q"]);
    run_git(&app, &["add", "."]);
    run_git(&app, &["commit", "-qm", "start"]);
    // The agent plants the hook through the API, as it may write any file of the zone.
    let pwned = d.dir.path().join("pwned");
    let config = std::fs::read_to_string(app.join(".git/config")).unwrap();
    let planted = config.replacen(
        "[core]\n",
        &format!("[core]\n\tfsmonitor = touch {}\n", pwned.display()),
        1,
    );
    d.write("/workspace/app/.git/config", &planted);
    // It is code execution: git itself runs it.
    let _ = status(&app);
    assert!(pwned.exists(), "git ran the planted core.fsmonitor");
    std::fs::remove_file(&pwned).unwrap();

    let app_s = app.to_str().unwrap();
    let id = d.cli_json(&["checkpoint", "-m", "with the plant"])["id"].to_string();
    let commands: Vec<Vec<&str>> = vec![
        vec!["git", "fsmonitor-hook", "2", ""],
        vec!["git", "status"],
        vec![
            "git",
            "pull",
            upstream.path().to_str().unwrap(),
            "--into",
            "/workspace/app/vendor",
        ],
        vec!["checkpoint", "-m", "again"],
        vec!["checkpoint", "/workspace/app"],
        vec!["restore", &id],
        vec!["fork", "f"],
        vec!["changes", "f"],
        vec!["merge", "f"],
        vec!["grep", "one", "/workspace/app"],
        vec!["glob", "*.txt", "/workspace/app"],
        vec!["ls", "/workspace/app/.git"],
        vec!["cat", "/workspace/app/.git/config"],
        vec!["fork", "rm", "f"],
        vec!["git", "watch", app_s, "--off"],
    ];
    for args in &commands {
        let out = hook_raw(&d, &app, args);
        assert!(
            out.status.success(),
            "wardfs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !pwned.exists(),
            "wardfs {args:?} ran the planted core.fsmonitor"
        );
    }
    // `watch --off` leaves a foreign monitor as it is, and says so; `watch` replaces it.
    let off =
        String::from_utf8(hook_raw(&d, &app, &["git", "watch", app_s, "--off"]).stdout).unwrap();
    assert!(
        off.contains("is not wardfs's") && off.contains("left as it is"),
        "{off}"
    );
    let on = d.cli_ok(&["git", "watch", app_s]);
    assert!(on.contains("replaced core.fsmonitor = touch"), "{on}");
    assert!(
        !pwned.exists(),
        "wardfs git watch ran the planted core.fsmonitor"
    );
    let s = status(&app);
    s.asked_the_hook();
    assert!(!pwned.exists());
}

#[test]
fn git_watch_refuses_a_path_outside_a_zone_and_a_binary_it_cannot_quote_and_can_cover_a_zone() {
    let d = Daemon::start("");
    let outside = d.dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    run_git(&outside, &["init", "-q"]);
    let out = d.cli(&["git", "watch", outside.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not in a zone"),
        "{out:?}"
    );

    let app = d.workspace().join("app");
    std::fs::create_dir_all(&app).unwrap();
    run_git(&app, &["init", "-q"]);
    // A binary whose path holds a quote cannot be handed to the shell plainly: refused.
    let odd = Path::new(env!("CARGO_TARGET_TMPDIR")).join("it's");
    std::fs::create_dir_all(&odd).unwrap();
    let bin = odd.join("wardfs");
    let _ = std::fs::remove_file(&bin);
    std::fs::hard_link(BIN, &bin).unwrap();
    let out = Command::new(&bin)
        .arg("--socket")
        .arg(&d.socket)
        .args(["git", "watch", app.to_str().unwrap()])
        .output()
        .unwrap();
    std::fs::remove_file(&bin).unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("holds a quote"),
        "{out:?}"
    );
    let unset = git_command()
        .current_dir(&app)
        .args(["config", "--local", "core.fsmonitor"])
        .output()
        .unwrap();
    assert_eq!(unset.status.code(), Some(1), "nothing was written");

    // `--zone`: the person's global config includes the settings for every git directory under
    // the zone; a checkout with no config of its own then asks the hook.
    let home = d.dir.path().join("person");
    std::fs::create_dir_all(&home).unwrap();
    let global = home.join("gitconfig");
    let zone = |args: &[&str]| {
        Command::new(BIN)
            .arg("--socket")
            .arg(&d.socket)
            .args(["git", "watch", "--zone", "workspace"])
            .args(args)
            .env("GIT_CONFIG_GLOBAL", &global)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .output()
            .unwrap()
    };
    let on = zone(&[]);
    assert!(
        on.status.success(),
        "{}",
        String::from_utf8_lossy(&on.stderr)
    );
    let text = std::fs::read_to_string(&global).unwrap();
    let ws = std::fs::canonicalize(d.workspace()).unwrap();
    assert!(
        text.contains(&format!("[includeIf \"gitdir:{}/\"]", ws.display())),
        "{text}"
    );
    let include = home.join("config/wardfs/git-fsmonitor-workspace.gitconfig");
    assert!(std::fs::read_to_string(&include)
        .unwrap()
        .contains("fsmonitor-hook"));
    let traced = |dir: &Path| {
        let out = git_command()
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", &global)
            .env("GIT_TRACE_FSMONITOR", "1")
            .args(["status", "--porcelain"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(traced(&app).contains("git fsmonitor-hook' returned success"));
    // Not for a repository outside the zone.
    assert!(!traced(&outside).contains("fsmonitor-hook"));
    let off = zone(&["--off"]);
    assert!(
        off.status.success(),
        "{}",
        String::from_utf8_lossy(&off.stderr)
    );
    assert!(!std::fs::read_to_string(&global)
        .unwrap()
        .contains("gitdir:"));
    assert!(!include.exists());
    assert!(!traced(&app).contains("fsmonitor-hook"));
}

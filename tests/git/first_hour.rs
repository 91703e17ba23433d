//! What a newcomer meets pulling and staging (issue 28): progress that informs instead of
//! flooding, and `git stage` that picks the repository that changed. Real git servers on
//! loopback, a real daemon, the real CLI (on a terminal through `script` where it matters).

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::tools::require_tool;
use crate::support::{Daemon, BIN};

/// A repository of `n` small files (`d<i % 40>/f<i>.txt`) in a temp dir of its own.
fn many_files(name: &str, n: usize) -> BareRepo {
    let repo = BareRepo::new(name);
    seed_many(&repo, n);
    repo
}

/// A repository of `n` small files in `base`, beside others one server serves.
fn many_files_in(base: &std::path::Path, name: &str, n: usize) -> BareRepo {
    let repo = BareRepo::new_in(base, name);
    seed_many(&repo, n);
    repo
}

fn seed_many(repo: &BareRepo, n: usize) {
    let contents: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            (
                format!("d{}/f{i}.txt", i % 40),
                format!("file {i}\n{}\n", "x".repeat(i % 300)).into_bytes(),
            )
        })
        .collect();
    let files: Vec<(&str, &[u8])> = contents
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    repo.seed(&files);
}

#[test]
fn a_pull_streams_a_few_updates_never_the_same_twice_and_the_cli_prints_a_few_lines() {
    let base = tempfile::tempdir().unwrap();
    many_files_in(base.path(), "big", 3500);
    many_files_in(base.path(), "big2", 3500);
    many_files_in(base.path(), "big3", 100);
    let server = GitDaemon::start(base.path());
    let d = Daemon::git("", None);
    // Not a terminal: a few plain lines, one per phase's end, never a carriage return.
    let out = d.cli(&["git", "pull", &server.url("big")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\r') && !err.contains('\x1b'), "{err:?}");
    let lines: Vec<&str> = err.lines().collect();
    assert!((2..=8).contains(&lines.len()), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("fetch: ") && l.contains(" objects (100%), ")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("write: 3500/3500 files (100%)") && !l.ends_with(" 0 B")),
        "{lines:?}"
    );
    // --json: the result alone, nothing on stderr.
    let out = d.cli(&["--json", "git", "pull", &server.url("big3")]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["written"], 100);

    // The stream itself.
    let c = wardfs::client::Client::new(&d.socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut seen: Vec<(Instant, Value)> = Vec::new();
    let r: Value = rt
        .block_on(c.post_progress(
            "/v1/git/pull",
            &json!({ "remote": server.url("big2"), "progress": true }),
            |p| seen.push((Instant::now(), p.clone())),
        ))
        .unwrap();
    assert_eq!(r["written"], 3500);
    // No update repeats the one before it, each phase completes once, and the rate stays
    // near ten a second (plus each phase's first and last update).
    for pair in seen.windows(2) {
        assert_ne!(
            pair[0].1, pair[1].1,
            "an update sent twice: {:?}",
            pair[1].1
        );
    }
    let mut completions: HashMap<String, usize> = HashMap::new();
    for (_, p) in &seen {
        if p["total"].as_u64() > Some(0) && p["done"] == p["total"] {
            *completions
                .entry(p["phase"].as_str().unwrap().into())
                .or_default() += 1;
        }
    }
    assert_eq!(completions.get("fetch"), Some(&1), "{seen:?}");
    assert_eq!(completions.get("write"), Some(&1), "{seen:?}");
    for (i, (t, _)) in seen.iter().enumerate() {
        let in_a_second = seen[i..]
            .iter()
            .take_while(|(u, _)| u.duration_since(*t) < Duration::from_secs(1))
            .count();
        assert!(
            in_a_second <= 14,
            "{in_a_second} updates within a second: {seen:?}"
        );
    }
    let last_write = seen
        .iter()
        .rev()
        .find(|(_, p)| p["phase"] == "write")
        .unwrap();
    assert!(
        last_write.1["bytes"].as_u64() > Some(3500 * 8),
        "bytes written: {last_write:?}"
    );
}

#[test]
fn on_a_terminal_a_pull_redraws_one_bar_per_phase() {
    require_tool("script", "bsdutils");
    let repo = many_files("tty", 2000);
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let cmd = format!(
        "{BIN} --socket {} git pull {} --into /workspace/tty",
        d.socket.display(),
        server.url("tty")
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pulled "), "{text:?}");
    // The bars are redrawn in place: far fewer lines than updates, each phase named.
    assert!(text.contains("fetch") && text.contains("write"), "{text:?}");
    assert!(
        text.contains('\r') || text.contains("\x1b["),
        "redrawn: {text:?}"
    );
    assert!(text.matches('\n').count() <= 10, "{text:?}");
}

/// Pulls two repositories into /workspace/a and /workspace/b.
fn two_repos() -> (Daemon, GitDaemon, tempfile::TempDir) {
    let base = tempfile::tempdir().unwrap();
    let a = BareRepo::new_in(base.path(), "a");
    a.seed(&[("a.txt", b"a\n")]);
    let b = BareRepo::new_in(base.path(), "b");
    b.seed(&[("b.txt", b"b\n")]);
    let server = GitDaemon::start(base.path());
    let d = Daemon::git("", None);
    for name in ["a", "b"] {
        d.ok("/v1/git/pull", json!({ "remote": server.url(name) }));
    }
    (d, server, base)
}

#[test]
fn git_stage_picks_the_one_repository_that_changed_and_names_the_flag_when_several_did() {
    let (d, _server, _repos) = two_repos();
    d.cli_ok(&["write", "/workspace/b/b.txt", "b changed\n"]);
    let out = d.cli(&["git", "stage", "-m", "change b"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 file ") && text.contains("/workspace/b/b.txt"),
        "{text}"
    );
    // b's change is staged now: a change in a is the only one left to stage.
    d.cli_ok(&["write", "/workspace/a/a.txt", "a changed\n"]);
    let out = d.cli(&["git", "stage", "-m", "change a"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("/workspace/a/a.txt"));
    // Both changed again: the refusal names the repositories and the flag.
    d.cli_ok(&["write", "/workspace/a/a.txt", "a again\n"]);
    d.cli_ok(&["write", "/workspace/b/b.txt", "b again\n"]);
    let out = d.cli(&["git", "stage", "-m", "both"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--repo") && err.contains("/workspace/a") && err.contains("/workspace/b"),
        "{err}"
    );
    let out = d.cli(&["git", "stage", "-m", "b only", "--repo", "/workspace/b"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! A file name (or a line of a file) cannot drive the terminal of the person reading wardfs's
//! output: names made of escape sequences, carriage returns and newlines go through every
//! human-facing command escaped (git's quoting), and exact through `--json` (issue 29).

use std::process::Command;

use serde_json::{json, Value};

use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::tools::require_tool;
use crate::support::{Daemon, BIN};

/// Names an attacker would pick: retitle the terminal, erase the line and forge another, break
/// a row in two, hide behind a right-to-left override.
const HOSTILE: [&str; 4] = [
    "t\x1b]0;pwned\x07.txt",
    "x\r\x1b[2K  M forged.rs",
    "two\nlines.txt",
    "evil\u{202e}txt.rs",
];

/// Returns what must never appear raw in a person's output.
fn raw_control(text: &str) -> Option<char> {
    text.chars()
        .find(|c| (c.is_control() && *c != '\n' && *c != '\t') || *c == '\u{202e}')
}

fn assert_clean(what: &str, text: &str) {
    assert!(
        raw_control(text).is_none(),
        "{what} printed a raw control character: {text:?}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.trim_start().starts_with("lines.txt")),
        "{what} let a name break its row in two: {text:?}"
    );
}

#[test]
fn hostile_names_are_escaped_in_every_human_output_and_exact_in_json() {
    let base = tempfile::tempdir().unwrap();
    let repo = BareRepo::new_in(base.path(), "p");
    repo.seed(&[("README.md", b"readme\n")]);
    let server = GitDaemon::start(base.path());
    let d = Daemon::git("", None);
    d.ok("/v1/git/pull", json!({ "remote": server.url("p") }));
    for name in HOSTILE {
        let v = format!("/workspace/p/{name}");
        d.ok(
            "/v1/fs/write",
            json!({ "path": v, "content": "needle \x1b[31mred\x1b[0m\n" }),
        );
    }
    let human = |args: &[&str]| {
        let out = d.cli(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for args in [
        &["log"][..],
        &["ls", "/workspace/p"],
        &["ls", "-l", "/workspace/p"],
        &["glob", "**/*", "/workspace/p"],
        &["grep", "needle", "/workspace/p"],
        &["grep", "-l", "needle", "/workspace/p"],
        &["grep", "-c", "needle", "/workspace/p"],
        &["git", "status"],
    ] {
        assert_clean(&format!("{args:?}"), &human(args));
    }
    let staged = human(&["git", "stage", "-m", "hostile \x1b[2J names"]);
    assert_clean("git stage", &staged);
    assert!(
        staged.contains("\\033]0;pwned\\a"),
        "escaped as git quotes: {staged}"
    );
    let id = d.cli_json(&["staged", "list"])["staged"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    for args in [
        &["staged", "show", &id, "--no-pager"][..],
        &["staged", "show", &id, "--stat"],
        &["staged", "list"],
    ] {
        assert_clean(&format!("{args:?}"), &human(args));
    }
    // Through a pager on a terminal: what the pager is given is escaped too.
    require_tool("script", "bsdutils");
    let cmd = format!("{BIN} --socket {} staged show {id}", d.socket.display());
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("PAGER", "cat")
        .env("NO_COLOR", "1")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    let paged = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    assert!(paged.contains("hostile"), "{paged:?}");
    assert_clean("staged show through a pager", &paged);

    // --json keeps every name exact.
    let ls: Value = d.cli_json(&["ls", "/workspace/p"]);
    let names: Vec<&str> = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    for name in HOSTILE {
        assert!(names.contains(&name), "{name:?} not exact in {names:?}");
    }
    let log: Value = d.cli_json(&["log"]);
    assert!(log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["path"].as_str().is_some_and(|p| p.ends_with(HOSTILE[1]))));
}

#[test]
fn an_error_about_a_hostile_name_is_escaped_too() {
    let d = Daemon::start("");
    let out = d.cli(&["read", "/workspace/\x1b]0;pwned\x07"]);
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_clean("an error", &err);
    let out = d.cli(&["--json", "read", "/workspace/\x1b]0;pwned\x07"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["path"], "/workspace/\x1b]0;pwned\x07", "exact in JSON");
}

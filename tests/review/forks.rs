//! A fork's staged change on the review page, fetched over HTTP from `wardfs review`: a real
//! daemon pulls from a real `git daemon` on loopback, a fork of the workspace writes a file whose
//! name carries markup, a terminal escape and a right-to-left override, and changes a file the
//! workspace changes too (an overlap); the fork's changes are staged with `git stage --fork`.
//! The page names the fork and each file's writer, shows the overlap on the path both changed,
//! and shows every name escaped: no markup from a name, no control character or override raw
//! in what a person reads.

use serde_json::json;

use super::{answer_of, Review};
use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::Daemon;

/// A file name that would inject markup, recolour a terminal and reverse the text after it.
const HOSTILE: &str = "<img src=x onerror=\"window.__pwned=5\">\u{1b}[31m\u{202e}gpj.md";

/// The page with its attributes' values left out: what a person reads. An attribute's value is
/// HTML-escaped, so it never holds a `"`.
fn text_of(html: &str) -> String {
    html.split("=\"")
        .enumerate()
        .map(|(i, part)| match i {
            0 => part,
            _ => part.split_once('"').map_or("", |(_, rest)| rest),
        })
        .collect()
}

#[test]
fn review_page_names_a_forks_change_its_writer_and_overlap_all_escaped() {
    let repo = BareRepo::seeded(
        "proj",
        &[("README.md", b"# proj\n"), ("src/lib.rs", b"one\n")],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    d.ok("/v1/git/pull", json!({ "remote": server.url("proj") }));
    d.ok("/v1/forks", json!({ "name": "a" }));
    d.write(&format!("/forks/a/proj/{HOSTILE}"), "hostile\n");
    d.write("/forks/a/proj/src/lib.rs", "one\ntwo, from the fork\n");
    // The workspace changes the same file after the fork point: an overlap.
    d.write(
        "/workspace/proj/src/lib.rs",
        "one\ntwo, from the workspace\n",
    );
    let staged = d.cli_json(&["git", "stage", "--fork", "a", "-m", "From fork a"]);
    let id = staged["id"].as_str().unwrap().to_string();
    assert_eq!(staged["zone"], "forks/a", "{staged}");
    let forks = d.get("/v1/forks");
    assert!(
        forks["forks"][0]["overlaps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["path"] == "proj/src/lib.rs"),
        "the daemon lists the overlap: {forks}"
    );

    let review = Review::start(&d);
    let addr = review.addr().to_string();
    let (status, html) = answer_of(
        &addr,
        &format!(
            "GET /?token={} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n",
            review.token()
        ),
    );
    assert_eq!(status, 200, "{html}");
    let pid = std::process::id();

    // The commit says it came from fork a.
    assert!(
        html.contains(&format!("id=\"commit-{id}\"")) && html.contains("data-zone=\"forks/a\""),
        "{html}"
    );
    assert!(
        html.contains("from fork <code class=\"fork\">a</code>"),
        "{html}"
    );
    // Each file names its writer: the test's own API calls, in the fork.
    let writer = format!("<code>forks/a</code>: api pid {pid} uid ");
    assert_eq!(html.matches(&writer).count(), 2, "{html}");
    // The overlap shows on the file both changed, and only there.
    assert_eq!(html.matches("class=\"overlap\"").count(), 1, "{html}");
    let overlap = format!(
        "<p class=\"overlap\" data-path=\"proj/src/lib.rs\"><strong>Overlap:</strong> also \
         changed in <code>workspace</code> since the fork point (forks/a: api pid {pid}; \
         workspace: api pid {pid})</p>"
    );
    assert!(html.contains(&overlap), "{html}");

    // The hostile name is shown quoted and escaped, never as markup or raw controls.
    assert!(
        html.contains(
            "&quot;/forks/a/proj/&lt;img src=x onerror=\\&quot;window.__pwned=5\\&quot;&gt;\
             \\033[31m\\u{202e}gpj.md&quot;"
        ),
        "{html}"
    );
    assert!(!html.contains("<img"), "{html}");
    let shown = text_of(&html);
    for raw in ['\u{1b}', '\u{202e}'] {
        assert!(!shown.contains(raw), "{raw:?} shown raw: {shown}");
    }
}

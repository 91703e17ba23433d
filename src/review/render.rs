//! HTML for the review page: the frame every tab shares (header, tabs, flash), staged commits
//! with their diffs, and the diff renderer the timeline uses too, unified or side by side.
//!
//! Everything that came from the daemon (paths, messages, reasons, diff text) passes through
//! [`escape`] before it reaches the page; nothing here emits markup built from unescaped input.
//! Diffs are parsed from the git-format patches the API returns. A run of deleted lines followed
//! by added lines is a change block: its lines are paired in order and each pair gets a word-level
//! diff (`similar`), so the words that changed are marked inside the line.

use std::fmt::Write as _;

use similar::{ChangeTag, TextDiff};

use crate::git::diff::{patch_lines, PatchLine};
use crate::git::{StagedCommit, StagedFile};

/// How diffs are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// One column, deletions above additions (like `git diff`).
    Unified,
    /// Old on the left, new on the right.
    Split,
}

impl View {
    /// Parses the `view` query value (`unified` or `split`).
    pub fn parse(s: &str) -> Option<View> {
        match s {
            "unified" => Some(View::Unified),
            "split" => Some(View::Split),
            _ => None,
        }
    }

    /// The `view` query value.
    pub fn name(self) -> &'static str {
        match self {
            View::Unified => "unified",
            View::Split => "split",
        }
    }
}

/// States in which a commit still waits for a decision.
const OPEN_STATES: [&str; 4] = ["staged", "rebased", "rejected", "conflicted"];
/// States from which a push is allowed (the daemon's rule).
const PUSHABLE_STATES: [&str; 3] = ["staged", "rebased", "rejected"];
/// Below this similarity a changed line pair is shown as whole lines: marking nearly every word
/// of a rewritten line helps nobody.
const WORD_DIFF_MIN_RATIO: f32 = 0.3;
/// Word diffs of longer lines are skipped (minified files, data).
const WORD_DIFF_MAX_LINE: usize = 2000;

/// Whether a commit in this state still waits for a decision.
pub fn is_open(state: &str) -> bool {
    OPEN_STATES.contains(&state)
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// What the page shows, besides the commits.
pub struct Page<'a> {
    pub token: &'a str,
    pub view: View,
    /// The daemon's socket, for the header.
    pub socket: &'a str,
    /// Commits waiting for a decision, with their diffs.
    pub open: &'a [StagedCommit],
    /// Pushed and discarded commits (no diffs), newest first.
    pub done: &'a [StagedCommit],
    /// Why the daemon could not be asked, if it could not.
    pub error: Option<&'a str>,
}

/// The page's tabs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    /// Staged commits waiting for review (`/`).
    Staged,
    /// Checkpoints of a zone, who changed what, diffs and restores (`/timeline`).
    Timeline,
}

impl Tab {
    fn path(self) -> &'static str {
        match self {
            Tab::Staged => "/",
            Tab::Timeline => "/timeline",
        }
    }
}

/// What the frame around every tab shows.
pub struct Header<'a> {
    pub token: &'a str,
    pub view: View,
    /// The daemon's socket, for the header.
    pub socket: &'a str,
    pub tab: Tab,
    /// Query parameters the view toggle and reload keep, each as `&name=value` (URL-encoded,
    /// not yet HTML-escaped).
    pub keep: &'a str,
}

/// Returns a whole page: the header with its tabs, the flash line the script fills, then `body`
/// (markup built by this module's functions, its text escaped already).
pub fn document(h: &Header<'_>, body: &str) -> String {
    let token = escape(h.token);
    let other = match h.view {
        View::Unified => View::Split,
        View::Split => View::Unified,
    };
    let tab_link = |tab: Tab, id: &str, label: &str| {
        let current = if tab == h.tab {
            " class=\"current\" aria-current=\"page\""
        } else {
            ""
        };
        format!(
            "<a id=\"{id}\"{current} href=\"{}?token={token}&amp;view={}\">{label}</a>",
            tab.path(),
            h.view.name()
        )
    };
    let here = |view: View| {
        format!(
            "{}?token={token}&amp;view={}{}",
            h.tab.path(),
            view.name(),
            escape(h.keep)
        )
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\">\
         <link rel=\"icon\" href=\"data:,\">\
         <title>wardfs review</title>\
         <link rel=\"stylesheet\" href=\"/assets/review.css?token={token}\">\
         <script defer src=\"/assets/review.js?token={token}\"></script></head>\
         <body data-token=\"{token}\" class=\"view-{view}\">\
         <header><h1>wardfs review</h1><nav class=\"tabs\">{staged} {timeline}</nav>\
         <span class=\"socket\">daemon: {socket}</span>\
         <nav class=\"tools\"><a id=\"view-toggle\" href=\"{toggle}\">{label}</a> \
         <a id=\"reload\" href=\"{reload}\">reload</a></nav></header>\
         <div id=\"flash\" role=\"status\" hidden></div>{body}</body></html>\n",
        view = h.view.name(),
        staged = tab_link(Tab::Staged, "tab-staged", "Staged commits"),
        timeline = tab_link(Tab::Timeline, "tab-timeline", "Timeline"),
        socket = escape(h.socket),
        toggle = here(other),
        reload = here(h.view),
        label = match other {
            View::Unified => "unified view",
            View::Split => "side-by-side view",
        },
    )
}

/// Returns the staged-commits page.
pub fn page(p: &Page<'_>) -> String {
    let mut body = String::new();
    if let Some(e) = p.error {
        let _ = write!(
            body,
            "<p class=\"error\" id=\"daemon-error\">{}</p>",
            escape(e)
        );
    }
    let _ = write!(
        body,
        "<h2>Waiting for review <span class=\"count\">{}</span></h2>",
        p.open.len()
    );
    if p.open.is_empty() && p.error.is_none() {
        body.push_str(
            "<p class=\"empty\" id=\"nothing-staged\">Nothing is staged. An agent stages its \
             changes with <code>wardfs git stage -m MESSAGE</code>.</p>",
        );
    }
    for c in p.open {
        commit(&mut body, c, p.view);
    }
    if !p.done.is_empty() {
        body.push_str("<h2>Done</h2><table class=\"done\"><tbody>");
        for c in p.done {
            done_row(&mut body, c);
        }
        body.push_str("</tbody></table>");
    }
    document(
        &Header {
            token: p.token,
            view: p.view,
            socket: p.socket,
            tab: Tab::Staged,
            keep: "",
        },
        &body,
    )
}

/// One commit waiting for a decision: header, why it failed, actions, and each file's diff.
fn commit(out: &mut String, c: &StagedCommit, view: View) {
    let id = escape(&c.id);
    let state = escape(&c.state);
    let title = c.message.lines().next().unwrap_or("");
    let _ = write!(
        out,
        "<section class=\"commit card\" id=\"commit-{id}\" data-id=\"{id}\" data-state=\"{state}\">\
         <div class=\"commit-head\"><span class=\"badge state-{state}\">{state}</span> \
         <code class=\"id\">{id}</code> <strong class=\"title\">{}</strong></div>\
         <div class=\"meta\">{} → <code>{}</code> on <code>{}</code> · {} files \
         <span class=\"add\">+{}</span> <span class=\"del\">-{}</span> · staged {}</div>",
        escape(title),
        escape(&c.repo),
        escape(&c.url),
        escape(&c.branch),
        c.files.len(),
        c.additions,
        c.deletions,
        escape(&time(c.created_at)),
    );
    let rest = c.message.split_once('\n').map(|x| x.1.trim()).unwrap_or("");
    if !rest.is_empty() {
        let _ = write!(out, "<pre class=\"message\">{}</pre>", escape(rest));
    }
    if c.reason.is_some() || !c.conflicts.is_empty() {
        let _ = write!(
            out,
            "<div class=\"why\" id=\"why-{id}\"><strong>Why {state}:</strong> "
        );
        if let Some(r) = &c.reason {
            let _ = write!(out, "<span class=\"reason\">{}</span>", escape(r));
        }
        if !c.conflicts.is_empty() {
            out.push_str("<ul class=\"conflicts\">");
            for p in &c.conflicts {
                let _ = write!(out, "<li><code>{}</code></li>", escape(p));
            }
            out.push_str("</ul>");
        }
        if c.state == "conflicted" {
            out.push_str(
                "<p class=\"hint\">Nothing was pushed. Discard it, pull, merge the files, \
                 and stage again.</p>",
            );
        }
        out.push_str("</div>");
    }
    out.push_str("<div class=\"actions\">");
    if PUSHABLE_STATES.contains(&c.state.as_str()) {
        let _ = write!(
            out,
            "<button type=\"button\" class=\"push\" data-action=\"push\" data-id=\"{id}\" \
             data-pr=\"false\">Push to {}</button>\
             <button type=\"button\" class=\"push-pr\" data-action=\"push\" data-id=\"{id}\" \
             data-pr=\"true\">Push as pull request</button>",
            escape(&c.branch)
        );
    }
    let _ = write!(
        out,
        "<button type=\"button\" class=\"discard\" data-action=\"discard\" data-id=\"{id}\">\
         Discard</button><span class=\"busy\" id=\"busy-{id}\" hidden></span></div>"
    );
    for f in &c.files {
        file(out, &staged_file(f), view);
    }
    out.push_str("</section>");
}

fn done_row(out: &mut String, c: &StagedCommit) {
    let id = escape(&c.id);
    let state = escape(&c.state);
    let _ = write!(
        out,
        "<tr id=\"done-{id}\" data-state=\"{state}\"><td><code>{id}</code></td>\
         <td><span class=\"badge state-{state}\">{state}</span></td><td>{}</td><td>",
        escape(c.message.lines().next().unwrap_or("")),
    );
    if let (Some(sha), Some(r)) = (&c.pushed_commit, &c.pushed_ref) {
        let _ = write!(
            out,
            "<code>{}</code> → <code>{}</code>",
            escape(sha.get(..12).unwrap_or(sha)),
            escape(r)
        );
    }
    if let Some(u) = &c.pr_url {
        // Only web links become links: a `javascript:` URL from a rogue server stays text.
        if u.starts_with("https://") || u.starts_with("http://") {
            let _ = write!(
                out,
                " <a href=\"{u}\" rel=\"noreferrer noopener\" target=\"_blank\">pull request</a>",
                u = escape(u)
            );
        } else {
            let _ = write!(out, " pull request: <code>{}</code>", escape(u));
        }
    }
    let _ = write!(out, "</td><td>{}</td></tr>", escape(&time(c.updated_at)));
}

/// One file's change as the page shows it: a file of a staged commit or of a checkpoint diff.
pub struct FileDiff<'a> {
    /// The virtual path (`/workspace/…`).
    pub path: &'a str,
    /// What happened to it (`create`, `update`, `delete`; `added`, `modified`, …).
    pub operation: &'a str,
    pub additions: u64,
    pub deletions: u64,
    /// Its git-format patch, or why none is shown.
    pub patch: Result<&'a str, &'a str>,
}

/// One file of a commit, as [`file`] shows it.
fn staged_file(f: &StagedFile) -> FileDiff<'_> {
    FileDiff {
        path: &f.path,
        operation: &f.operation,
        additions: f.additions,
        deletions: f.deletions,
        patch: match &f.diff {
            Some(d) => Ok(d),
            None if f.binary => Err("Binary file, not shown."),
            None if f.oversized => Err("Too large to show (git.max_diff_bytes)."),
            None => Err("No textual change (mode or type only)."),
        },
    }
}

/// One file: its path and operation, then its diff (or why there is none).
pub fn file(out: &mut String, f: &FileDiff<'_>, view: View) {
    let _ = write!(
        out,
        "<details class=\"file\" open data-path=\"{path}\"><summary><span class=\"op op-{op}\">{op}</span> \
         <code class=\"path\">{path}</code> <span class=\"add\">+{}</span> \
         <span class=\"del\">-{}</span></summary>",
        f.additions,
        f.deletions,
        op = escape(f.operation),
        path = escape(f.path),
    );
    match f.patch {
        Ok(d) => {
            let parsed = parse_patch(d);
            match view {
                View::Unified => unified(out, &parsed),
                View::Split => split(out, &parsed),
            }
        }
        Err(why) => {
            let _ = write!(out, "<p class=\"nodiff\">{}</p>", escape(why));
        }
    }
    out.push_str("</details>");
}

/// A piece of a line: text, and whether the word diff marked it as changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seg {
    pub text: String,
    pub changed: bool,
}

/// A deleted or added line with its number on its side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub no: u32,
    pub segs: Vec<Seg>,
}

/// A piece of a hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    /// An unchanged line: old and new line numbers, text.
    Context(u32, u32, String),
    /// Deleted lines followed by the lines that replaced them (either may be empty).
    Change { dels: Vec<Line>, adds: Vec<Line> },
    /// `\ No newline at end of file`.
    Note(String),
}

/// One `@@` hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub header: String,
    pub blocks: Vec<Block>,
}

/// A parsed git-format patch: the header lines (`diff --git`, `index`, modes) and the hunks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    pub meta: Vec<String>,
    pub hunks: Vec<Hunk>,
}

/// Parses a git-format unified patch of one file (read by [`patch_lines`], the one diff reader),
/// with word diffs for changed line pairs.
pub fn parse_patch(text: &str) -> Patch {
    let mut patch = Patch::default();
    let mut dels: Vec<(u32, String)> = Vec::new();
    let mut adds: Vec<(u32, String)> = Vec::new();
    let flush = |hunk: &mut Hunk, dels: &mut Vec<(u32, String)>, adds: &mut Vec<(u32, String)>| {
        if !dels.is_empty() || !adds.is_empty() {
            hunk.blocks
                .push(change_block(std::mem::take(dels), std::mem::take(adds)));
        }
    };
    let mut current: Option<Hunk> = None;
    for line in patch_lines(text) {
        if let PatchLine::Header(header) = line {
            if let Some(mut h) = current.take() {
                flush(&mut h, &mut dels, &mut adds);
                patch.hunks.push(h);
            }
            current = Some(Hunk {
                header: header.to_string(),
                blocks: Vec::new(),
            });
            continue;
        }
        let Some(h) = current.as_mut() else {
            if let PatchLine::Meta(m) = line {
                patch.meta.push(m.to_string());
            }
            continue;
        };
        match line {
            PatchLine::Delete { old, text } => {
                if !adds.is_empty() {
                    flush(h, &mut dels, &mut adds);
                }
                dels.push((old, text.to_string()));
            }
            PatchLine::Add { new, text } => adds.push((new, text.to_string())),
            PatchLine::Note(note) => {
                flush(h, &mut dels, &mut adds);
                h.blocks.push(Block::Note(note.to_string()));
            }
            PatchLine::Context { old, new, text } => {
                flush(h, &mut dels, &mut adds);
                h.blocks.push(Block::Context(old, new, text.to_string()));
            }
            PatchLine::Header(_) | PatchLine::Meta(_) => {}
        }
    }
    if let Some(mut h) = current.take() {
        flush(&mut h, &mut dels, &mut adds);
        patch.hunks.push(h);
    }
    patch
}

/// Pairs deleted and added lines in order and marks the words that changed in each pair.
fn change_block(dels: Vec<(u32, String)>, adds: Vec<(u32, String)>) -> Block {
    let whole = |(no, text): (u32, String)| Line {
        no,
        segs: vec![Seg {
            text,
            changed: false,
        }],
    };
    let pairs = dels.len().min(adds.len());
    let mut d_out = Vec::with_capacity(dels.len());
    let mut a_out = Vec::with_capacity(adds.len());
    let mut adds = adds.into_iter();
    for (i, d) in dels.into_iter().enumerate() {
        if i < pairs {
            let a = adds.next().expect("paired");
            let (ds, as_) = word_diff(&d.1, &a.1);
            d_out.push(Line { no: d.0, segs: ds });
            a_out.push(Line { no: a.0, segs: as_ });
        } else {
            d_out.push(whole(d));
        }
    }
    a_out.extend(adds.map(whole));
    Block::Change {
        dels: d_out,
        adds: a_out,
    }
}

/// Returns the old and new line split into unchanged and changed words.
pub fn word_diff(old: &str, new: &str) -> (Vec<Seg>, Vec<Seg>) {
    let whole = |s: &str| {
        vec![Seg {
            text: s.to_string(),
            changed: false,
        }]
    };
    if old.len() > WORD_DIFF_MAX_LINE || new.len() > WORD_DIFF_MAX_LINE {
        return (whole(old), whole(new));
    }
    let diff = TextDiff::from_words(old, new);
    // Similarity of the words alone: shared whitespace would make any two lines look alike.
    let solid = |s: &str| s.chars().filter(|c| !c.is_whitespace()).count();
    let shared: usize = diff
        .iter_all_changes()
        .filter(|c| c.tag() == ChangeTag::Equal)
        .map(|c| solid(c.value()))
        .sum();
    let total = solid(old) + solid(new);
    if total > 0 && (2 * shared) as f32 / (total as f32) < WORD_DIFF_MIN_RATIO {
        return (whole(old), whole(new));
    }
    let mut o: Vec<Seg> = Vec::new();
    let mut n: Vec<Seg> = Vec::new();
    let push = |v: &mut Vec<Seg>, text: &str, changed: bool| match v.last_mut() {
        Some(last) if last.changed == changed => last.text.push_str(text),
        _ => v.push(Seg {
            text: text.to_string(),
            changed,
        }),
    };
    for change in diff.iter_all_changes() {
        let text = change.value();
        match change.tag() {
            ChangeTag::Equal => {
                push(&mut o, text, false);
                push(&mut n, text, false);
            }
            ChangeTag::Delete => push(&mut o, text, true),
            ChangeTag::Insert => push(&mut n, text, true),
        }
    }
    (o, n)
}

/// The marked-up text of a line (`<del>`/`<ins>` around changed words).
fn segs_html(out: &mut String, segs: &[Seg], tag: &str) {
    for s in segs {
        if s.changed {
            let _ = write!(out, "<{tag} class=\"word\">{}</{tag}>", escape(&s.text));
        } else {
            out.push_str(&escape(&s.text));
        }
    }
}

fn meta_rows(out: &mut String, p: &Patch, cols: usize) {
    for m in &p.meta {
        let _ = write!(
            out,
            "<tr class=\"meta-line\"><td colspan=\"{cols}\">{}</td></tr>",
            escape(m)
        );
    }
}

fn unified(out: &mut String, p: &Patch) {
    out.push_str(
        "<table class=\"diff unified\"><colgroup><col class=\"no\"><col class=\"no\">\
         <col class=\"sign\"><col></colgroup><tbody>",
    );
    meta_rows(out, p, 4);
    for h in &p.hunks {
        full_row(out, "hunk", &h.header);
        for b in &h.blocks {
            match b {
                Block::Context(o, n, t) => {
                    let _ = write!(
                        out,
                        "<tr class=\"ctx\"><td class=\"no\">{o}</td><td class=\"no\">{n}</td>\
                         <td class=\"sign\"> </td><td class=\"code\">{}</td></tr>",
                        escape(t)
                    );
                }
                Block::Change { dels, adds } => {
                    for l in dels {
                        let _ = write!(
                            out,
                            "<tr class=\"del\"><td class=\"no\">{}</td><td class=\"no\"></td>\
                             <td class=\"sign\">-</td><td class=\"code\">",
                            l.no
                        );
                        segs_html(out, &l.segs, "del");
                        out.push_str("</td></tr>");
                    }
                    for l in adds {
                        let _ = write!(
                            out,
                            "<tr class=\"add\"><td class=\"no\"></td><td class=\"no\">{}</td>\
                             <td class=\"sign\">+</td><td class=\"code\">",
                            l.no
                        );
                        segs_html(out, &l.segs, "ins");
                        out.push_str("</td></tr>");
                    }
                }
                Block::Note(t) => full_row(out, "note", t),
            }
        }
    }
    out.push_str("</tbody></table>");
}

/// One row spanning the table's four columns (a hunk header, a note), its text escaped.
fn full_row(out: &mut String, class: &str, text: &str) {
    let _ = write!(
        out,
        "<tr class=\"{class}\"><td colspan=\"4\">{}</td></tr>",
        escape(text)
    );
}

fn split(out: &mut String, p: &Patch) {
    out.push_str(
        "<table class=\"diff split\"><colgroup><col class=\"no\"><col>\
         <col class=\"no\"><col></colgroup><tbody>",
    );
    meta_rows(out, p, 4);
    let side = |out: &mut String, l: Option<&Line>, class: &str, tag: &str| match l {
        Some(l) => {
            let _ = write!(
                out,
                "<td class=\"no\">{}</td><td class=\"code {class}\">",
                l.no
            );
            segs_html(out, &l.segs, tag);
            out.push_str("</td>");
        }
        None => out.push_str("<td class=\"no\"></td><td class=\"code empty\"></td>"),
    };
    for h in &p.hunks {
        full_row(out, "hunk", &h.header);
        for b in &h.blocks {
            match b {
                Block::Context(o, n, t) => {
                    let t = escape(t);
                    let _ = write!(
                        out,
                        "<tr class=\"ctx\"><td class=\"no\">{o}</td><td class=\"code\">{t}</td>\
                         <td class=\"no\">{n}</td><td class=\"code\">{t}</td></tr>"
                    );
                }
                Block::Change { dels, adds } => {
                    for i in 0..dels.len().max(adds.len()) {
                        out.push_str("<tr class=\"change\">");
                        side(out, dels.get(i), "del", "del");
                        side(out, adds.get(i), "add", "ins");
                        out.push_str("</tr>");
                    }
                }
                Block::Note(t) => full_row(out, "note", t),
            }
        }
    }
    out.push_str("</tbody></table>");
}

/// Formats a millisecond timestamp as RFC 3339 (UTC, seconds).
pub fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/src/lib.rs b/src/lib.rs\n\
index 1111111..2222222 100644\n\
--- a/src/lib.rs\n\
+++ b/src/lib.rs\n\
@@ -1,4 +1,4 @@\n\
 line1\n\
-let x = old_value;\n\
+let x = new_value;\n\
 line3\n\
 <script>alert(1)</script>\n\
@@ -10,2 +10,3 @@ fn f()\n\
 tail\n\
+added & more\n\
 end\n\
\\ No newline at end of file\n";

    #[test]
    fn parses_hunks_and_line_numbers() {
        let p = parse_patch(PATCH);
        assert_eq!(p.meta.len(), 4);
        assert_eq!(p.hunks.len(), 2);
        assert_eq!(p.hunks[0].blocks[0], Block::Context(1, 1, "line1".into()));
        let Block::Change { dels, adds } = &p.hunks[0].blocks[1] else {
            panic!("not a change: {:?}", p.hunks[0].blocks[1]);
        };
        assert_eq!((dels[0].no, adds[0].no), (2, 2));
        assert_eq!(p.hunks[0].blocks[2], Block::Context(3, 3, "line3".into()));
        let Block::Change { dels, adds } = &p.hunks[1].blocks[1] else {
            panic!("not a change");
        };
        assert!(dels.is_empty());
        assert_eq!(adds[0].no, 11);
        assert_eq!(p.hunks[1].blocks[2], Block::Context(11, 12, "end".into()));
        assert!(matches!(p.hunks[1].blocks[3], Block::Note(_)));
    }

    #[test]
    fn marks_only_the_changed_words() {
        let (o, n) = word_diff("let x = old_value;", "let x = new_value;");
        let changed = |v: &[Seg]| {
            v.iter()
                .filter(|s| s.changed)
                .map(|s| s.text.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(changed(&o), ["old_value;"]);
        assert_eq!(changed(&n), ["new_value;"]);
        let joined: String = n.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(joined, "let x = new_value;");
    }

    #[test]
    fn unrelated_lines_are_not_word_diffed() {
        let (o, n) = word_diff("alpha beta gamma", "completely different words here");
        assert!(o.iter().chain(&n).all(|s| !s.changed));
    }

    #[test]
    fn escapes_diff_text_in_both_views() {
        let p = parse_patch(PATCH);
        for view in [View::Unified, View::Split] {
            let mut out = String::new();
            match view {
                View::Unified => unified(&mut out, &p),
                View::Split => split(&mut out, &p),
            }
            assert!(!out.contains("<script>"), "{out}");
            assert!(out.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
            assert!(out.contains("added &amp; more"));
            assert!(out.contains("<del class=\"word\">old_value;</del>"));
            assert!(out.contains("<ins class=\"word\">new_value;</ins>"));
        }
    }

    fn staged(state: &str) -> StagedCommit {
        StagedCommit {
            id: "0123456789".into(),
            repo: "/workspace/proj".into(),
            url: "git://127.0.0.1:1/proj.git".into(),
            branch: "main".into(),
            message: "Title <i>x</i>\n\nBody & more".into(),
            base: "a".repeat(40),
            commit: "b".repeat(40),
            state: state.into(),
            reason: Some("remote moved: <b>bad</b>".into()),
            conflicts: vec!["/workspace/proj/<img src=x>.rs".into()],
            pushed_commit: None,
            pushed_ref: None,
            pr_url: Some("javascript:alert(1)".into()),
            created_at: 0,
            updated_at: 0,
            additions: 0,
            deletions: 0,
            files: vec![StagedFile {
                path: "/workspace/proj/\"q\".bin".into(),
                operation: "update".into(),
                additions: 0,
                deletions: 0,
                binary: true,
                oversized: false,
                diff: None,
                hunks: None,
            }],
        }
    }

    fn page_of(open: &[StagedCommit], done: &[StagedCommit]) -> String {
        page(&Page {
            token: "00ff",
            view: View::Split,
            socket: "/run/s.sock",
            open,
            done,
            error: None,
        })
    }

    #[test]
    fn conflicted_commits_say_why_and_cannot_be_pushed() {
        let html = page_of(&[staged("conflicted")], &[]);
        assert!(html.contains("Why conflicted:"));
        assert!(html.contains("remote moved: &lt;b&gt;bad&lt;/b&gt;"));
        assert!(html.contains("<li><code>/workspace/proj/&lt;img src=x&gt;.rs</code></li>"));
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<i>"));
        assert!(!html.contains("data-action=\"push\""));
        assert!(html.contains("data-action=\"discard\""));
        assert!(html.contains("Binary file, not shown."));
        assert!(html.contains("/workspace/proj/&quot;q&quot;.bin"));
    }

    #[test]
    fn rejected_commits_can_be_pushed_again() {
        let html = page_of(&[staged("rejected")], &[]);
        assert!(html.contains("Why rejected:"));
        assert!(html.contains("data-action=\"push\" data-id=\"0123456789\" data-pr=\"false\""));
        assert!(html.contains("data-pr=\"true\""));
    }

    #[test]
    fn only_web_links_become_links() {
        let html = page_of(&[], &[staged("pushed")]);
        assert!(!html.contains("href=\"javascript:"), "{html}");
        assert!(html.contains("pull request: <code>javascript:alert(1)</code>"));
    }

    #[test]
    fn escape_covers_attribute_quotes() {
        assert_eq!(escape("a\"b'c<d>&"), "a&quot;b&#39;c&lt;d&gt;&amp;");
    }
}

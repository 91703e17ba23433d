//! HTML for the review page: the frame every tab shares (header, tabs, flash), staged commits
//! with their diffs, and the diff renderer the timeline uses too, unified or side by side.
//!
//! Everything that came from the daemon (paths, messages, reasons, diff text) passes through
//! [`escape`] before it reaches the page; nothing here emits markup built from unescaped input.
//! Diffs are parsed from the git-format patches the API returns. The header lines of a file's
//! patch (`diff --git`, `index`, `---`, `+++`) are not shown, the file's own header names it;
//! what they say besides (a mode, a rename) is a short note beside the path ([`header_notes`]).
//! A run of deleted lines followed by added lines is a change block: its lines are paired in
//! order and each pair gets a word-level diff (`similar`), so the words that changed are marked
//! inside the line.
//!
//! Times are sent as `<time>` elements ([`time_html`]) whose text is the exact time in UTC and
//! whose `title` keeps it; the page's script shows them relative to now or in local time.
//!
//! Each staged file says where its change came from ([`provenance`]): the fork a commit was
//! staged from, the writers the journal names, and the fork's overlaps on that path (changed in
//! the fork's parent or a sibling too). Names a person reads there and in file headers go
//! through [`name_html`]: control characters and bidirectional overrides quoted as the CLI
//! quotes them, then HTML-escaped.

use std::fmt::Write as _;

use similar::{ChangeTag, TextDiff};

use crate::core::text;
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

/// A name as the page shows it: quoted with its control characters and bidirectional overrides
/// escaped when it holds any ([`text::name`]), then HTML-escaped.
pub fn name_html(s: &str) -> String {
    escape(&text::name(s))
}

/// A path changed on two sides since a fork point, as the daemon's `GET /v1/forks` lists it
/// under each fork's `overlaps`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Overlap {
    /// Relative to the zones.
    pub path: String,
    /// The zones that changed it (`workspace`, `forks/a`, …).
    pub zones: Vec<String>,
    /// Who changed it in each zone (`forks/a: fuse pid 42`).
    #[serde(default)]
    pub writers: Vec<String>,
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
    /// The forks' overlaps now, or why they could not be read.
    pub overlaps: Result<&'a [Overlap], &'a str>,
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
    if let Err(why) = p.overlaps {
        let _ = write!(
            body,
            "<p class=\"error\" id=\"overlaps-error\">The forks' overlaps could not be read: {}</p>",
            escape(why)
        );
    }
    let overlaps = p.overlaps.unwrap_or_default();
    for c in p.open {
        commit(&mut body, c, p.view, overlaps);
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

/// One commit waiting for a decision: header, why it failed, actions, and each file's diff with
/// where its change came from.
fn commit(out: &mut String, c: &StagedCommit, view: View, overlaps: &[Overlap]) {
    let id = escape(&c.id);
    let state = escape(&c.state);
    let title = c.message.lines().next().unwrap_or("");
    let from = match c.zone.strip_prefix("forks/") {
        Some(fork) => format!(
            " · from fork <code class=\"fork\">{}</code>",
            name_html(fork)
        ),
        None => String::new(),
    };
    let _ = write!(
        out,
        "<section class=\"commit card\" id=\"commit-{id}\" data-id=\"{id}\" data-state=\"{state}\" \
         data-zone=\"{zone}\">\
         <div class=\"commit-head\"><span class=\"badge state-{state}\">{state}</span> \
         <code class=\"id\">{id}</code> <strong class=\"title\">{}</strong></div>\
         <div class=\"meta\">{}{from} → <code>{}</code> on <code>{}</code> · {} \
         <span class=\"add\">+{}</span> <span class=\"del\">-{}</span> · staged {}</div>",
        escape(title),
        name_html(&c.repo),
        escape(&c.url),
        escape(&c.branch),
        crate::core::text::count(c.files.len() as u64, "file"),
        c.additions,
        c.deletions,
        time_html(c.created_at),
        zone = escape(&c.zone),
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
        // The script's confirmation names the branch and the remote a push goes to.
        let _ = write!(
            out,
            "<button type=\"button\" class=\"push-pr\" data-action=\"push\" data-id=\"{id}\" \
             data-pr=\"true\" data-branch=\"{branch}\" data-remote=\"{remote}\">\
             Push as pull request</button>\
             <button type=\"button\" class=\"push\" data-action=\"push\" data-id=\"{id}\" \
             data-pr=\"false\" data-branch=\"{branch}\" data-remote=\"{remote}\">\
             Push to {branch}</button>",
            branch = escape(&c.branch),
            remote = escape(&c.url),
        );
    }
    let _ = write!(
        out,
        "<button type=\"button\" class=\"discard\" data-action=\"discard\" data-id=\"{id}\">\
         Discard</button><span class=\"busy\" id=\"busy-{id}\" hidden></span></div>"
    );
    for f in &c.files {
        file_with(out, &staged_file(f), view, &provenance(c, f, overlaps));
    }
    out.push_str("</section>");
}

/// Where a staged file's change came from: who changed it (the journal's writers, in the zone
/// the commit was staged from or, for a file a fork did not change itself, its parent), and
/// the overlaps of the commit's zone on its path.
pub fn provenance(c: &StagedCommit, f: &StagedFile, overlaps: &[Overlap]) -> String {
    let mut out = String::from("<div class=\"provenance\"><span class=\"writers\">changed by ");
    if f.writers.is_empty() {
        out.push_str("<span class=\"writer unknown\">nobody the journal names</span>");
    }
    for (i, w) in f.writers.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(
            out,
            "<span class=\"writer\" data-zone=\"{}\" data-via=\"{}\" data-pid=\"{}\">\
             <code>{}</code>: {} <span class=\"last\">(last {})</span></span>",
            escape(&w.zone),
            escape(&w.via),
            w.pid.map(|p| p.to_string()).unwrap_or_default(),
            name_html(&w.zone),
            name_html(&w.to_string()),
            time_html(w.last_ms),
        );
    }
    out.push_str("</span>");
    let prefix = format!("/{}/", c.zone);
    let rel = f.path.strip_prefix(&prefix).unwrap_or(&f.path);
    for o in overlaps
        .iter()
        .filter(|o| o.path == rel && o.zones.contains(&c.zone))
    {
        let others: Vec<String> = o
            .zones
            .iter()
            .filter(|z| **z != c.zone)
            .map(|z| format!("<code>{}</code>", name_html(z)))
            .collect();
        let _ = write!(
            out,
            "<p class=\"overlap\" data-path=\"{}\"><strong>Overlap:</strong> also changed in {} \
             since the fork point",
            escape(&o.path),
            others.join(", ")
        );
        if !o.writers.is_empty() {
            let who: Vec<String> = o.writers.iter().map(|w| name_html(w)).collect();
            let _ = write!(out, " ({})", who.join("; "));
        }
        out.push_str("</p>");
    }
    out.push_str("</div>");
    out
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
    let _ = write!(out, "</td><td>{}</td></tr>", time_html(c.updated_at));
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

/// One file: its path, operation and header notes, then its diff (or why there is none).
pub fn file(out: &mut String, f: &FileDiff<'_>, view: View) {
    file_with(out, f, view, "");
}

/// [`file`] with `extra` (markup built by this module, its text escaped) between its header and
/// its diff.
fn file_with(out: &mut String, f: &FileDiff<'_>, view: View, extra: &str) {
    let parsed = f.patch.ok().map(parse_patch);
    let _ = write!(
        out,
        "<details class=\"file\" open data-path=\"{path}\"><summary><span class=\"op op-{op}\">{op}</span> \
         <code class=\"path\">{shown}</code> <span class=\"add\">+{}</span> \
         <span class=\"del\">-{}</span>",
        f.additions,
        f.deletions,
        op = escape(f.operation),
        path = escape(f.path),
        shown = name_html(f.path),
    );
    for note in parsed.iter().flat_map(|p| &p.notes) {
        let _ = write!(out, " <span class=\"file-note\">{}</span>", escape(note));
    }
    out.push_str("</summary>");
    out.push_str(extra);
    match (&parsed, f.patch) {
        (Some(p), _) if !p.hunks.is_empty() => match view {
            View::Unified => unified(out, p),
            View::Split => split(out, p),
        },
        (_, Err(why)) => nodiff(out, why),
        (_, Ok(_)) => nodiff(out, "No textual change (mode or type only)."),
    }
    out.push_str("</details>");
}

/// Why a file shows no diff.
fn nodiff(out: &mut String, why: &str) {
    let _ = write!(out, "<p class=\"nodiff\">{}</p>", escape(why));
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

/// A parsed git-format patch: what its header lines say that the file's own header does not
/// ([`header_notes`]), and the hunks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Patch {
    pub notes: Vec<String>,
    pub hunks: Vec<Hunk>,
}

/// The mode git gives a plain file, which a new file's note leaves out.
const PLAIN_MODE: &str = "100644";

/// What the header lines of one file's patch say, in short: `mode 100644 → 100755`, `new file,
/// mode 100755`, `renamed from a.rs`, `copied from a.rs`, and any line this does not know, as it
/// is. The lines that only name the file again or its blobs (`diff --git`, `index`, `---`,
/// `+++`, `similarity index`) say nothing more and are left out; that a file is new or deleted
/// is its operation, shown beside it, and only a new file's unusual mode is noted.
pub fn header_notes(meta: &[&str]) -> Vec<String> {
    let field = |prefix: &str| meta.iter().find_map(|l| l.strip_prefix(prefix));
    let mut notes = Vec::new();
    if let (Some(old), Some(new)) = (field("old mode "), field("new mode ")) {
        notes.push(format!("mode {old} → {new}"));
    }
    if let Some(mode) = field("new file mode ").filter(|m| *m != PLAIN_MODE) {
        notes.push(format!("new file, mode {mode}"));
    }
    if let Some(from) = field("rename from ") {
        notes.push(format!("renamed from {from}"));
    }
    if let Some(from) = field("copy from ") {
        notes.push(format!("copied from {from}"));
    }
    const KNOWN: [&str; 14] = [
        "diff --git ",
        "index ",
        "--- ",
        "+++ ",
        "old mode ",
        "new mode ",
        "new file mode ",
        "deleted file mode ",
        "rename from ",
        "rename to ",
        "copy from ",
        "copy to ",
        "similarity index ",
        "dissimilarity index ",
    ];
    let unknown = meta
        .iter()
        .filter(|l| !l.is_empty() && !KNOWN.iter().any(|k| l.starts_with(k)));
    notes.extend(unknown.map(|l| l.to_string()));
    notes
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
    let mut meta: Vec<&str> = Vec::new();
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
                meta.push(m);
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
    patch.notes = header_notes(&meta);
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

fn unified(out: &mut String, p: &Patch) {
    out.push_str(
        "<table class=\"diff unified\"><colgroup><col class=\"no\"><col class=\"no\">\
         <col class=\"sign\"><col></colgroup><tbody>",
    );
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

/// A millisecond timestamp as the page shows it: a `<time>` whose text and `title` are the exact
/// time in UTC (RFC 3339); the page's script rewrites the text as "3 min ago" or local time and
/// leaves the `title`.
pub fn time_html(ms: i64) -> String {
    let iso = escape(&time(ms));
    format!("<time class=\"when\" datetime=\"{iso}\" title=\"{iso} (UTC)\">{iso}</time>")
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
        assert_eq!(
            p.notes,
            Vec::<String>::new(),
            "the header only names the file"
        );
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
            zone: "workspace".into(),
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
                writers: Vec::new(),
            }],
            skipped: Vec::new(),
            skipped_total: 0,
        }
    }

    fn page_of(open: &[StagedCommit], done: &[StagedCommit]) -> String {
        page(&Page {
            token: "00ff",
            view: View::Split,
            socket: "/run/s.sock",
            open,
            done,
            overlaps: Ok(&[]),
            error: None,
        })
    }

    #[test]
    fn a_fork_commit_names_its_fork_writers_and_overlaps_escaped() {
        let zone = "forks/<b>x</b>\u{1b}]0;pwn\u{7}";
        let mut c = staged("staged");
        c.zone = zone.into();
        c.repo = format!("/{zone}/proj");
        c.files[0].path = format!("/{zone}/proj/\u{202e}q.bin");
        c.files[0].writers = vec![crate::git::Writer {
            zone: zone.into(),
            via: "fuse<script>".into(),
            pid: Some(42),
            uid: Some(0),
            changes: 2,
            last_ms: 0,
        }];
        let overlaps = [
            Overlap {
                path: "proj/\u{202e}q.bin".into(),
                zones: vec![zone.into(), "workspace".into()],
                writers: vec!["workspace: api pid 7 <i>".into()],
            },
            Overlap {
                path: "proj/other.rs".into(),
                zones: vec![zone.into(), "workspace".into()],
                writers: Vec::new(),
            },
        ];
        let html = page(&Page {
            token: "00ff",
            view: View::Split,
            socket: "/run/s.sock",
            open: &[c],
            done: &[],
            overlaps: Ok(&overlaps),
            error: None,
        });
        for raw in ["<b>x", "<script>", "<i>"] {
            assert!(!html.contains(raw), "{raw:?} reached the page: {html}");
        }
        // What a person reads: the page without its attributes' values (which keep names exact
        // for the script, HTML-escaped, so never hold a `"`).
        let shown: String = html
            .split("=\"")
            .enumerate()
            .map(|(i, part)| match i {
                0 => part,
                _ => part.split_once('"').map_or("", |(_, rest)| rest),
            })
            .collect();
        for raw in ["\u{1b}", "\u{7}", "\u{202e}"] {
            assert!(!shown.contains(raw), "{raw:?} is shown raw: {shown}");
        }
        assert!(
            html.contains(
                "from fork <code class=\"fork\">&quot;&lt;b&gt;x&lt;/b&gt;\\033]0;pwn\\a&quot;</code>"
            ),
            "{html}"
        );
        assert!(
            html.contains(": fuse&lt;script&gt; pid 42 uid 0 "),
            "{html}"
        );
        assert!(html.contains("\\u{202e}q.bin"), "{html}");
        assert_eq!(html.matches("class=\"overlap\"").count(), 1, "{html}");
        assert!(html.contains(
            "<strong>Overlap:</strong> also changed in <code>workspace</code> since the fork \
             point (workspace: api pid 7 &lt;i&gt;)"
        ));
    }

    #[test]
    fn a_workspace_commit_names_no_fork_and_says_when_no_writer_is_known() {
        let html = page_of(&[staged("staged")], &[]);
        assert!(!html.contains("from fork"), "{html}");
        assert!(html.contains("data-zone=\"workspace\""));
        assert!(html.contains("changed by <span class=\"writer unknown\">"));
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
        // What the confirmation names: the branch and the remote.
        assert!(html.contains("data-branch=\"main\" data-remote=\"git://127.0.0.1:1/proj.git\""));
    }

    #[test]
    fn only_web_links_become_links() {
        let html = page_of(&[], &[staged("pushed")]);
        assert!(!html.contains("href=\"javascript:"), "{html}");
        assert!(html.contains("pull request: <code>javascript:alert(1)</code>"));
    }

    #[test]
    fn header_lines_become_short_notes_beside_the_path() {
        assert!(header_notes(&[
            "diff --git a/x b/x",
            "new file mode 100644",
            "index 0000000..1111111",
            "--- /dev/null",
            "+++ b/x",
        ])
        .is_empty());
        assert_eq!(
            header_notes(&["diff --git a/x b/x", "new file mode 100755", "index 0..1"]),
            ["new file, mode 100755"]
        );
        assert_eq!(
            header_notes(&["diff --git a/x b/x", "old mode 100644", "new mode 100755"]),
            ["mode 100644 → 100755"]
        );
        assert_eq!(
            header_notes(&[
                "diff --git a/old.rs b/new.rs",
                "similarity index 90%",
                "rename from old.rs",
                "rename to new.rs",
                "index 1..2 100644",
            ]),
            ["renamed from old.rs"]
        );
        assert!(header_notes(&["diff --git a/x b/x", "deleted file mode 100644"]).is_empty());
    }

    #[test]
    fn a_file_shows_no_header_lines_and_its_notes_escaped() {
        let patch = "diff --git a/<b>.sh b/<b>.sh\nold mode 100644\nnew mode 100755\n\
                     rename from <i>x</i>.sh\nrename to <b>.sh\n\
                     index 1111111..2222222\n--- a/<b>.sh\n+++ b/<b>.sh\n@@ -1 +1 @@\n-a\n+b\n";
        for view in [View::Unified, View::Split] {
            let mut out = String::new();
            let f = FileDiff {
                path: "/workspace/<b>.sh",
                operation: "update",
                additions: 1,
                deletions: 1,
                patch: Ok(patch),
            };
            file(&mut out, &f, view);
            for header in [
                "diff --git",
                "index 1111111",
                "--- a/",
                "+++ b/",
                "meta-line",
            ] {
                assert!(!out.contains(header), "{header} in {out}");
            }
            assert!(out.contains("<span class=\"file-note\">mode 100644 → 100755</span>"));
            assert!(
                out.contains("renamed from &lt;i&gt;x&lt;/i&gt;.sh"),
                "{out}"
            );
            assert!(!out.contains("<b>") && !out.contains("<i>"), "{out}");
        }
        // A change of mode alone: the note, and no table.
        let mut out = String::new();
        let mode_only = "diff --git a/x b/x\nold mode 100644\nnew mode 100755\n";
        let f = FileDiff {
            path: "/workspace/x",
            operation: "modified",
            additions: 0,
            deletions: 0,
            patch: Ok(mode_only),
        };
        file(&mut out, &f, View::Split);
        assert!(
            out.contains("mode 100644 → 100755") && !out.contains("<table"),
            "{out}"
        );
        assert!(out.contains("No textual change (mode or type only)."));
    }

    #[test]
    fn times_are_time_elements_with_the_exact_utc_time_in_the_title() {
        assert_eq!(
            time_html(1_700_000_000_000),
            "<time class=\"when\" datetime=\"2023-11-14T22:13:20Z\" \
             title=\"2023-11-14T22:13:20Z (UTC)\">2023-11-14T22:13:20Z</time>"
        );
    }

    #[test]
    fn escape_covers_attribute_quotes() {
        assert_eq!(escape("a\"b'c<d>&"), "a&quot;b&#39;c&lt;d&gt;&amp;");
    }
}

//! The timeline tab: a zone's checkpoints, newest first, each with who changed what since the
//! checkpoint before it, the diff between any two (or one and now), and a restore button each.
//!
//! "Who changed what" is the journal between two checkpoints: a checkpoint includes the journal
//! up to its `journal_pos`, so the rows of its zone after the previous checkpoint's position and
//! up to its own (`GET /v1/log?after_id=…&until_id=…`) are the changes that went into it, each
//! with who made it (`via`: api, fuse, watcher, git, mirror; the client's pid). They are grouped
//! by who, counted by operation, and named by their first paths. The previous checkpoint is the
//! zone's next older one still kept, so a pruned parent widens the range instead of hiding it.
//!
//! Everything is read from the daemon through the [`Client`] (`GET /v1/checkpoints`,
//! `GET /v1/log`, `POST /v1/checkpoints/diff`) and bounded: [`CHANGES_READ`] journal rows per
//! checkpoint (more are said to be more), [`PATHS_SHOWN`] paths per who, [`DIFF_FILES_SHOWN`]
//! files of a diff. The restore is a POST of the page's script to `/api/restore`, behind the same
//! guard as push and discard. All text from the daemon is escaped by [`render::escape`]; diffs are
//! drawn by [`render::file`], the renderer of staged commits.

use crate::core::text::count;
use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use axum::http::StatusCode;
use futures_util::StreamExt as _;
use serde::Deserialize;
use serde_json::json;

use super::render::{self, escape, FileDiff, View};
use super::Failure;
use crate::client::{Client, ClientError};
use crate::core::ZoneId;

/// Checkpoints listed unless the `limit` parameter says otherwise.
const CHECKPOINTS_SHOWN: usize = 30;
/// The most checkpoints one page lists.
const MAX_LIMIT: usize = 500;
/// Journal rows read per checkpoint; a checkpoint with more says so and counts these.
pub const CHANGES_READ: usize = 10_000;
/// Paths named per who; the rest are counted.
pub const PATHS_SHOWN: usize = 8;
/// Git and mirror events (with what they said) shown per who.
const EVENTS_SHOWN: usize = 5;
/// Files of a diff drawn with their patches; past this the page says how many more there are.
const DIFF_FILES_SHOWN: usize = 300;
/// Journal reads in flight at once.
const READS_AT_ONCE: usize = 4;

/// A checkpoint as `GET /v1/checkpoints` lists it (the fields the page shows).
#[derive(Debug, Clone, Deserialize)]
pub struct Checkpoint {
    pub id: i64,
    pub message: String,
    /// Who made it: `api`, `internal` (the daemon: automatic, before a pull), …
    pub via: String,
    pub pid: Option<u32>,
    pub time_ms: i64,
    /// The last journal row it includes.
    pub journal_pos: i64,
    pub files: u64,
    pub not_kept: u64,
}

#[derive(Deserialize)]
struct CheckpointList {
    checkpoints: Vec<Checkpoint>,
}

/// A journal row as `GET /v1/log` returns it (the fields the page shows).
#[derive(Debug, Clone, Deserialize)]
pub struct Change {
    /// Relative to the zone root.
    pub path: String,
    pub op: String,
    #[serde(default)]
    pub to_path: Option<String>,
    pub via: String,
    pub pid: Option<u32>,
    /// What an event (a git pull, stage, push) said.
    #[serde(default)]
    pub detail: Option<String>,
}

#[derive(Deserialize)]
struct Log {
    entries: Vec<Change>,
}

/// One file of `POST /v1/checkpoints/diff`.
#[derive(Debug, Clone, Deserialize)]
pub struct DiffEntry {
    /// Relative to the zone root.
    pub path: String,
    pub status: String,
    pub additions: u64,
    pub deletions: u64,
}

/// The answer of `POST /v1/checkpoints/diff`.
#[derive(Debug, Clone, Deserialize)]
pub struct Diff {
    pub files: Vec<DiffEntry>,
    /// Every file's patch, one after the other, in the order of `files`.
    pub patch: String,
    /// The patch was cut (the file list is whole).
    pub truncated: bool,
}

/// The timeline's query parameters as sent; [`Params::check`] reads them.
#[derive(Debug, Default, Deserialize)]
pub struct Params {
    pub view: Option<String>,
    pub zone: Option<String>,
    pub from: Option<String>,
    pub to: Option<String>,
    pub limit: Option<String>,
}

/// What a diff compares with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The zone as it is now.
    Now,
    Checkpoint(i64),
}

impl Side {
    fn param(self) -> String {
        match self {
            Side::Now => "now".into(),
            Side::Checkpoint(id) => id.to_string(),
        }
    }

    fn label(self) -> String {
        match self {
            Side::Now => "now".into(),
            Side::Checkpoint(id) => format!("#{id}"),
        }
    }
}

/// A checked timeline request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub zone: ZoneId,
    /// The checkpoint to compare from, and what with.
    pub compare: Option<(i64, Side)>,
    pub limit: usize,
}

impl Params {
    /// Checks the parameters; an error names the parameter and what it must be.
    pub fn check(&self) -> Result<Request, String> {
        let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        let zone = match given(&self.zone) {
            None => ZoneId::Workspace,
            Some(z) => ZoneId::from_name(&z)
                .ok_or_else(|| format!("zone: {z:?} is not a zone (workspace or cache)"))?,
        };
        let id = |name: &str, v: &str| {
            v.parse::<i64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| format!("{name}: {v:?} is not a checkpoint id (a whole number)"))
        };
        let from = given(&self.from).map(|v| id("from", &v)).transpose()?;
        let to = match given(&self.to).as_deref() {
            None | Some("now") => Side::Now,
            Some(v) => Side::Checkpoint(id("to", v)?),
        };
        if from.is_none() && to != Side::Now {
            return Err("to: needs from, the checkpoint to compare from".into());
        }
        let limit = match given(&self.limit) {
            None => CHECKPOINTS_SHOWN,
            Some(v) => v
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=MAX_LIMIT).contains(n))
                .ok_or_else(|| format!("limit: {v:?} is not a number from 1 to {MAX_LIMIT}"))?,
        };
        Ok(Request {
            zone,
            compare: from.map(|f| (f, to)),
            limit,
        })
    }
}

impl Request {
    /// The request's parameters as a query suffix (`&zone=…`), for links that keep them.
    pub fn keep(&self) -> String {
        let mut q = format!("&zone={}", self.zone.name());
        if self.limit != CHECKPOINTS_SHOWN {
            let _ = write!(q, "&limit={}", self.limit);
        }
        if let Some((from, to)) = self.compare {
            let _ = write!(q, "&from={from}&to={}", to.param());
        }
        q
    }
}

/// The changes that went into one checkpoint, grouped by who made them.
#[derive(Debug, Default)]
pub struct Changes {
    /// Journal rows read (at most [`CHANGES_READ`]).
    pub count: usize,
    /// More rows than that went into it (the newest [`CHANGES_READ`] are counted).
    pub more: bool,
    /// In the order each first changed something.
    pub groups: Vec<Group>,
}

/// The changes one client made (an adapter and, where known, a process).
#[derive(Debug, Default)]
pub struct Group {
    pub via: String,
    pub pid: Option<u32>,
    pub count: usize,
    /// Each operation and how often, in the order first seen.
    pub ops: Vec<(String, usize)>,
    /// The first [`PATHS_SHOWN`] virtual paths changed, each once.
    pub paths: Vec<String>,
    /// Paths changed besides those.
    pub more_paths: usize,
    /// The first events (`git-pull` and the like): operation, virtual path, what it said.
    pub events: Vec<(String, String, String)>,
}

impl Changes {
    /// Groups journal rows of `zone`, newest first as `GET /v1/log` returns them, of which at
    /// most [`CHANGES_READ`] are counted.
    pub fn of(mut rows: Vec<Change>, zone: ZoneId) -> Changes {
        let more = rows.len() > CHANGES_READ;
        rows.truncate(CHANGES_READ);
        let vpath = |rel: &str| format!("/{}/{rel}", zone.name());
        let mut groups: Vec<Group> = Vec::new();
        let mut seen: Vec<HashSet<String>> = Vec::new();
        let mut index: HashMap<(String, Option<u32>), usize> = HashMap::new();
        for row in rows.iter().rev() {
            let i = *index.entry((row.via.clone(), row.pid)).or_insert_with(|| {
                groups.push(Group {
                    via: row.via.clone(),
                    pid: row.pid,
                    ..Group::default()
                });
                seen.push(HashSet::new());
                groups.len() - 1
            });
            let g = &mut groups[i];
            g.count += 1;
            match g.ops.iter_mut().find(|(op, _)| *op == row.op) {
                Some((_, n)) => *n += 1,
                None => g.ops.push((row.op.clone(), 1)),
            }
            if let Some(detail) = &row.detail {
                if g.events.len() < EVENTS_SHOWN {
                    g.events
                        .push((row.op.clone(), vpath(&row.path), detail.clone()));
                }
                continue;
            }
            for p in std::iter::once(&row.path).chain(&row.to_path) {
                let p = vpath(p);
                if seen[i].contains(&p) {
                    continue;
                }
                if g.paths.len() < PATHS_SHOWN {
                    g.paths.push(p.clone());
                } else {
                    g.more_paths += 1;
                }
                seen[i].insert(p);
            }
        }
        Changes {
            count: rows.len(),
            more,
            groups,
        }
    }
}

/// One checkpoint of the list with the changes that went into it.
pub struct Entry {
    pub checkpoint: Checkpoint,
    /// The zone's next older checkpoint, if one is kept.
    pub previous: Option<i64>,
    pub changes: Result<Changes, Failure>,
}

/// A diff the page was asked for.
pub struct Compared {
    pub from: i64,
    pub to: Side,
    pub diff: Result<Diff, Failure>,
}

/// What the timeline tab shows.
pub struct Timeline {
    pub request: Request,
    /// Newest first.
    pub entries: Vec<Entry>,
    /// Older checkpoints exist past the limit.
    pub older: bool,
    pub compare: Option<Compared>,
    /// The latest runs in sandboxes (on the workspace's tab only: runs bring files back there).
    pub runs: Option<Result<Vec<crate::state::RunRow>, Failure>>,
}

impl Timeline {
    /// The page's HTTP status: the refusal of the diff asked for, if it was refused.
    pub fn status(&self) -> StatusCode {
        match &self.compare {
            Some(Compared { diff: Err(f), .. }) => f.status,
            _ => StatusCode::OK,
        }
    }
}

/// Reads the journal rows of `zone` after `after` and up to `until` (journal ids).
async fn changes(
    client: &Client,
    zone: ZoneId,
    after: i64,
    until: i64,
) -> Result<Changes, Failure> {
    if until <= after {
        return Ok(Changes::default());
    }
    let route = format!(
        "/v1/log?zone={}&after_id={after}&until_id={until}&limit={}",
        zone.name(),
        CHANGES_READ + 1
    );
    let log: Log = client.get(&route).await.map_err(|e| Failure::daemon(&e))?;
    Ok(Changes::of(log.entries, zone))
}

/// Asks the daemon for what the request shows: the checkpoints, their changes, the diff.
pub async fn load(client: &Client, r: &Request) -> Result<Timeline, ClientError> {
    let route = format!(
        "/v1/checkpoints?zone={}&limit={}",
        r.zone.name(),
        r.limit + 1
    );
    let list: CheckpointList = client.get(&route).await?;
    let mut cps = list.checkpoints;
    let older = cps.len() > r.limit;
    // A checkpoint's changes are the journal after the next older one's position.
    let ranges: Vec<(i64, i64)> = (0..cps.len().min(r.limit))
        .map(|i| {
            let after = cps.get(i + 1).map_or(0, |p| p.journal_pos);
            (after, cps[i].journal_pos)
        })
        .collect();
    let read: Vec<Result<Changes, Failure>> = futures_util::stream::iter(ranges)
        .map(|(after, until)| changes(client, r.zone, after, until))
        .buffered(READS_AT_ONCE)
        .collect()
        .await;
    let previous: Vec<Option<i64>> = (0..read.len())
        .map(|i| cps.get(i + 1).map(|p| p.id))
        .collect();
    cps.truncate(read.len());
    let entries: Vec<Entry> = cps
        .into_iter()
        .zip(read)
        .zip(previous)
        .map(|((checkpoint, changes), previous)| Entry {
            checkpoint,
            previous,
            changes,
        })
        .collect();
    let compare = match r.compare {
        None => None,
        Some((from, to)) => {
            let body = match to {
                Side::Now => json!({ "from": from }),
                Side::Checkpoint(t) => json!({ "from": from, "to": t }),
            };
            let diff = match client.post::<_, Diff>("/v1/checkpoints/diff", &body).await {
                Err(e) => Err(Failure::daemon(&e)),
                // The page names files by virtual path: it must know the checkpoint's zone.
                Ok(_) if !entries.iter().any(|e| e.checkpoint.id == from) => {
                    Err(Failure::input(format!(
                        "from: checkpoint {from} is not one of the checkpoints of /{} listed \
                         here; open its zone's timeline, or list more with limit=",
                        r.zone.name()
                    )))
                }
                Ok(d) => Ok(d),
            };
            Some(Compared { from, to, diff })
        }
    };
    let runs = match r.zone {
        ZoneId::Workspace => Some(super::runs::load(client).await),
        _ => None,
    };
    Ok(Timeline {
        request: r.clone(),
        entries,
        older,
        compare,
        runs,
    })
}

/// Who made a change or a checkpoint, as the page names them.
fn who(via: &str, pid: Option<u32>) -> String {
    let name = match via {
        "watcher" => "beside wardfs (watcher)",
        "sandbox" => "a run in a sandbox (see Runs below)",
        "internal" => "wardfs",
        other => other,
    };
    match pid {
        Some(p) => format!("{name} pid {p}"),
        None => name.to_string(),
    }
}

/// Who made a checkpoint: a client, or the daemon on its own (`auto`) or before an operation.
fn origin(c: &Checkpoint) -> String {
    match c.via.as_str() {
        "internal" if c.message == "auto" => "auto".into(),
        "internal" => "wardfs".into(),
        via => who(via, c.pid),
    }
}

/// "3 writes, 1 delete".
fn op_counts(ops: &[(String, usize)]) -> String {
    ops.iter()
        .map(|(op, n)| {
            if *n == 1 {
                format!("1 {op}")
            } else {
                format!("{n} {op}s")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Splits a patch of many files into one patch per file, at each `diff --git` line.
fn split_patch(patch: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = Vec::new();
    let mut at = 0;
    for line in patch.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            starts.push(at);
        }
        at += line.len();
    }
    starts
        .iter()
        .enumerate()
        .map(|(i, s)| &patch[*s..starts.get(i + 1).copied().unwrap_or(patch.len())])
        .collect()
}

/// A link to this tab with `query` (already URL-safe).
fn link(token: &str, view: View, query: &str) -> String {
    format!(
        "/timeline?token={}&amp;view={}{}",
        escape(token),
        view.name(),
        escape(query)
    )
}

/// The whole tab: the zone switch, any error, the diff asked for, the checkpoints.
pub fn body(token: &str, view: View, t: Option<&Timeline>, error: Option<&str>) -> String {
    let mut out = String::new();
    let zone = t.map_or(ZoneId::Workspace, |t| t.request.zone);
    out.push_str("<nav class=\"zones\">Zone:");
    for z in ZoneId::ALL {
        let current = if z == zone {
            " class=\"current\" aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(
            out,
            " <a id=\"zone-{n}\"{current} href=\"{}\">/{n}</a>",
            link(token, view, &format!("&zone={}", z.name())),
            n = z.name()
        );
    }
    out.push_str("</nav>");
    if let Some(e) = error {
        let _ = write!(
            out,
            "<p class=\"error\" id=\"timeline-error\">{}</p>",
            escape(e)
        );
    }
    let Some(t) = t else {
        return out;
    };
    if let Some(c) = &t.compare {
        compared(&mut out, c, zone, view);
    }
    checkpoints(&mut out, t, token, view);
    if let Some(runs) = &t.runs {
        super::runs::section(&mut out, runs);
    }
    out
}

/// The diff section: the files changed from one checkpoint to another (or now).
fn compared(out: &mut String, c: &Compared, zone: ZoneId, view: View) {
    let _ = write!(
        out,
        "<section id=\"diff\" class=\"card compared\" data-from=\"{}\" data-to=\"{}\">\
         <h2>Changes from #{} to {}</h2>",
        c.from,
        escape(&c.to.param()),
        c.from,
        escape(&c.to.label()),
    );
    let d = match &c.diff {
        Ok(d) => d,
        Err(f) => {
            let _ = write!(
                out,
                "<p class=\"error\" id=\"diff-error\">Cannot compare: {}</p></section>",
                escape(&f.text)
            );
            return;
        }
    };
    if d.files.is_empty() {
        out.push_str("<p class=\"empty\" id=\"no-difference\">No difference.</p></section>");
        return;
    }
    let (adds, dels) = d
        .files
        .iter()
        .fold((0, 0), |(a, r), f| (a + f.additions, r + f.deletions));
    let _ = write!(
        out,
        "<div class=\"meta\">{} <span class=\"add\">+{adds}</span> \
         <span class=\"del\">-{dels}</span></div><div class=\"actions\">",
        count(d.files.len() as u64, "file")
    );
    if d.files.len() <= DIFF_FILES_SHOWN {
        let _ = write!(
            out,
            "<button type=\"button\" class=\"restore restore-files\" data-action=\"restore\" \
             data-id=\"{from}\" data-scope=\"diff\">Restore {what} as at #{from}</button>",
            from = c.from,
            what = match d.files.len() {
                1 => "this file".to_string(),
                n => format!("these {n} files"),
            },
        );
    }
    out.push_str("<span class=\"busy\" hidden></span></div>");
    let patches = split_patch(&d.patch);
    for (i, f) in d.files.iter().take(DIFF_FILES_SHOWN).enumerate() {
        let path = format!("/{}/{}", zone.name(), f.path);
        // One patch per file, in the order of `files`: both are the daemon's one tree diff.
        let patch = match patches.get(i) {
            Some(p) if p.lines().any(|l| l.starts_with("Binary files")) => {
                Err("Binary file, not shown.")
            }
            // Without a hunk: a change of mode or type, which the file's notes say.
            Some(p) => Ok(*p),
            None if d.truncated => Err("Not shown: the diff was cut at 4 MiB."),
            None => Err("No patch."),
        };
        render::file(
            out,
            &FileDiff {
                path: &path,
                operation: &f.status,
                additions: f.additions,
                deletions: f.deletions,
                patch,
            },
            view,
        );
    }
    if d.files.len() > DIFF_FILES_SHOWN {
        let _ = write!(
            out,
            "<p class=\"hint\" id=\"more-files\">{} more files are not shown.</p>",
            d.files.len() - DIFF_FILES_SHOWN
        );
    }
    out.push_str("</section>");
}

/// The list of checkpoints, newest first, under a row for the zone as it is now.
fn checkpoints(out: &mut String, t: &Timeline, token: &str, view: View) {
    let zone = t.request.zone.name();
    let (from, to) = match t.request.compare {
        Some((f, to)) => (Some(f), to),
        None => (None, Side::Now),
    };
    let checked = |yes: bool| if yes { " checked" } else { "" };
    let _ = write!(
        out,
        "<h2>Checkpoints of /{zone} <span class=\"count\">{}</span></h2>",
        t.entries.len()
    );
    if t.entries.is_empty() {
        let _ = write!(
            out,
            "<p class=\"empty\" id=\"no-checkpoints\">No checkpoint of /{zone} yet. \
             <code>wardfs checkpoint</code> makes one; the daemon makes one after each burst of \
             changes and before pulls and restores.</p>"
        );
        return;
    }
    let _ = write!(
        out,
        "<p class=\"hint\">Pick a checkpoint to compare <em>from</em> and one (or now) to \
         compare <em>to</em>, then <button type=\"button\" id=\"compare\">show the diff</button>\
         </p><ol class=\"timeline\" id=\"timeline\" data-zone=\"{zone}\">\
         <li class=\"now\"><span class=\"pick\"></span><label class=\"pick\"><input type=\"radio\" \
         name=\"to\" value=\"now\"{}> to</label> <strong>now</strong> \
         <span class=\"meta\">/{zone} as it is</span></li>",
        checked(to == Side::Now)
    );
    for e in &t.entries {
        entry(out, e, t, token, view, from, to);
    }
    out.push_str("</ol>");
    if t.older {
        let _ = write!(
            out,
            "<p><a id=\"older\" href=\"{}\">Show older checkpoints</a></p>",
            link(
                token,
                view,
                &format!(
                    "&zone={zone}&limit={}",
                    (t.request.limit * 2).min(MAX_LIMIT)
                )
            )
        );
    }
}

/// One checkpoint: what it is, who changed what since the one before, links and restore.
fn entry(
    out: &mut String,
    e: &Entry,
    t: &Timeline,
    token: &str,
    view: View,
    from: Option<i64>,
    to: Side,
) {
    let c = &e.checkpoint;
    let zone = t.request.zone.name();
    let id = c.id;
    let checked = |yes: bool| if yes { " checked" } else { "" };
    let message = if c.message.is_empty() {
        "(no message)"
    } else {
        &c.message
    };
    let _ = write!(
        out,
        "<li class=\"checkpoint card\" id=\"checkpoint-{id}\" data-id=\"{id}\">\
         <div class=\"cp-head\">\
         <label class=\"pick\"><input type=\"radio\" name=\"from\" value=\"{id}\"{}> from</label>\
         <label class=\"pick\"><input type=\"radio\" name=\"to\" value=\"{id}\"{}> to</label> \
         <code class=\"id\">#{id}</code> <strong class=\"cp-message\">{}</strong> \
         <span class=\"badge origin origin-{}\">{}</span></div>\
         <div class=\"meta\">{} · {}",
        checked(from == Some(id)),
        checked(to == Side::Checkpoint(id)),
        escape(message),
        escape(&c.via),
        escape(&origin(c)),
        render::time_html(c.time_ms),
        count(c.files, "file"),
    );
    if c.not_kept > 0 {
        let _ = write!(out, " ({} kept by size only)", c.not_kept);
    }
    out.push_str("</div>");
    changes_html(out, e, id);
    out.push_str("<div class=\"actions\">");
    if let Some(p) = e.previous {
        let _ = write!(
            out,
            "<a class=\"diff-previous\" href=\"{}#diff\">diff with #{p}</a> ",
            link(token, view, &format!("&zone={zone}&from={p}&to={id}"))
        );
    }
    let _ = write!(
        out,
        "<a class=\"diff-now\" href=\"{}#diff\">diff with now</a> \
         <button type=\"button\" class=\"restore\" data-action=\"restore\" data-id=\"{id}\">\
         Restore /{zone} to #{id}</button><span class=\"busy\" hidden></span></div></li>",
        link(token, view, &format!("&zone={zone}&from={id}&to=now"))
    );
}

/// Who changed what in one checkpoint.
fn changes_html(out: &mut String, e: &Entry, id: i64) {
    let since = match e.previous {
        Some(p) => format!("since #{p}"),
        None => "up to it (the zone's oldest checkpoint)".into(),
    };
    let _ = write!(out, "<div class=\"changes\" id=\"changes-{id}\">");
    let ch = match &e.changes {
        Ok(ch) => ch,
        Err(f) => {
            let _ = write!(
                out,
                "<p class=\"error\">Cannot read the journal: {}</p></div>",
                escape(&f.text)
            );
            return;
        }
    };
    if ch.count == 0 {
        let _ = write!(
            out,
            "<p class=\"summary\">No change journaled {since}.</p></div>"
        );
        return;
    }
    if ch.more {
        let _ = write!(
            out,
            "<p class=\"summary\">More than {CHANGES_READ} changes {since}; the newest \
             {CHANGES_READ} are counted:</p>"
        );
    } else {
        let _ = write!(
            out,
            "<p class=\"summary\">{} change{} {since}:</p>",
            ch.count,
            if ch.count == 1 { "" } else { "s" }
        );
    }
    out.push_str("<ul class=\"who\">");
    for g in &ch.groups {
        let _ = write!(
            out,
            "<li class=\"who-group\" data-via=\"{}\" data-pid=\"{}\"><strong class=\"who\">{}\
             </strong>: {}",
            escape(&g.via),
            g.pid.map(|p| p.to_string()).unwrap_or_default(),
            escape(&who(&g.via, g.pid)),
            escape(&op_counts(&g.ops)),
        );
        if !g.paths.is_empty() {
            out.push_str(" <span class=\"paths\">(");
            for (i, p) in g.paths.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                let _ = write!(out, "<code class=\"path\">{}</code>", escape(p));
            }
            if g.more_paths > 0 {
                let _ = write!(
                    out,
                    " <span class=\"more\">and {} more</span>",
                    g.more_paths
                );
            }
            out.push_str(")</span>");
        }
        if !g.events.is_empty() {
            out.push_str("<ul class=\"events\">");
            for (op, path, detail) in &g.events {
                let _ = write!(
                    out,
                    "<li><code>{}</code> <code class=\"path\">{}</code>: {}</li>",
                    escape(op),
                    escape(path),
                    escape(detail)
                );
            }
            out.push_str("</ul>");
        }
        out.push_str("</li>");
    }
    out.push_str("</ul></div>");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(via: &str, pid: Option<u32>, op: &str, path: &str) -> Change {
        Change {
            path: path.into(),
            op: op.into(),
            to_path: None,
            via: via.into(),
            pid,
            detail: None,
        }
    }

    #[test]
    fn changes_are_grouped_by_who_in_the_order_they_happened() {
        // Newest first, as the journal answers.
        let rows = vec![
            row("api", Some(7), "edit", "notes.md"),
            row("fuse", Some(4250), "write", "b.rs"),
            row("fuse", Some(4250), "write", "a.rs"),
            row("fuse", Some(4250), "delete", "a.rs"),
            Change {
                detail: Some("pulled main at 1234".into()),
                ..row("git", None, "git-pull", "proj")
            },
        ];
        let ch = Changes::of(rows, ZoneId::Workspace);
        assert_eq!(ch.count, 5);
        assert!(!ch.more);
        let names: Vec<_> = ch.groups.iter().map(|g| who(&g.via, g.pid)).collect();
        assert_eq!(names, ["git", "fuse pid 4250", "api pid 7"]);
        let fuse = &ch.groups[1];
        assert_eq!(op_counts(&fuse.ops), "1 delete, 2 writes");
        assert_eq!(fuse.paths, ["/workspace/a.rs", "/workspace/b.rs"]);
        assert_eq!(ch.groups[0].events[0].2, "pulled main at 1234");
        assert!(ch.groups[0].paths.is_empty());
    }

    #[test]
    fn many_changes_are_counted_and_named_in_part() {
        let rows: Vec<Change> = (0..CHANGES_READ + 1)
            .map(|i| row("api", None, "write", &format!("f{i}")))
            .collect();
        let ch = Changes::of(rows, ZoneId::Cache);
        assert!(ch.more);
        assert_eq!(ch.count, CHANGES_READ);
        let g = &ch.groups[0];
        assert_eq!(g.count, CHANGES_READ);
        assert_eq!(g.paths.len(), PATHS_SHOWN);
        assert_eq!(g.more_paths, CHANGES_READ - PATHS_SHOWN);
        assert!(g.paths[0].starts_with("/cache/f"));
    }

    #[test]
    fn parameters_are_checked_by_name() {
        let p = |zone: &str, from: &str, to: &str, limit: &str| Params {
            view: None,
            zone: Some(zone.into()),
            from: Some(from.into()),
            to: Some(to.into()),
            limit: Some(limit.into()),
        };
        let ok = p("cache", "3", "now", "").check().unwrap();
        assert_eq!(ok.zone, ZoneId::Cache);
        assert_eq!(ok.compare, Some((3, Side::Now)));
        assert_eq!(ok.keep(), "&zone=cache&from=3&to=now");
        assert_eq!(
            p("", "2", "5", "10").check().unwrap().compare,
            Some((2, Side::Checkpoint(5)))
        );
        assert!(p("tmp", "", "", "")
            .check()
            .unwrap_err()
            .starts_with("zone:"));
        assert!(p("", "x<y", "", "")
            .check()
            .unwrap_err()
            .starts_with("from:"));
        assert!(p("", "-1", "", "")
            .check()
            .unwrap_err()
            .starts_with("from:"));
        assert!(p("", "1", "later", "")
            .check()
            .unwrap_err()
            .starts_with("to:"));
        assert!(p("", "", "4", "").check().unwrap_err().starts_with("to:"));
        assert!(p("", "", "", "0")
            .check()
            .unwrap_err()
            .starts_with("limit:"));
        assert!(Params::default().check().is_ok());
    }

    #[test]
    fn a_patch_of_many_files_splits_per_file() {
        let patch =
            "diff --git a/a b/a\nindex 1..2 100644\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n\
                     diff --git a/b b/b\nBinary files a/b and b/b differ\n";
        let parts = split_patch(patch);
        assert_eq!(parts.len(), 2);
        assert!(parts[0].starts_with("diff --git a/a") && parts[0].ends_with("+y\n"));
        assert!(parts[1].contains("Binary files"));
        assert!(split_patch("").is_empty());
    }

    #[test]
    fn daemon_text_is_escaped_in_the_timeline() {
        let hostile = "<img src=x onerror=alert(1)>";
        let t = Timeline {
            request: Params::default().check().unwrap(),
            entries: vec![Entry {
                checkpoint: Checkpoint {
                    id: 2,
                    message: hostile.into(),
                    via: "<b>api</b>".into(),
                    pid: None,
                    time_ms: 0,
                    journal_pos: 3,
                    files: 1,
                    not_kept: 0,
                },
                previous: Some(1),
                changes: Ok(Changes::of(
                    vec![Change {
                        to_path: Some(hostile.into()),
                        detail: None,
                        ..row("<i>x</i>", None, "<script>", hostile)
                    }],
                    ZoneId::Workspace,
                )),
            }],
            older: false,
            compare: None,
            runs: Some(Err(Failure::input(hostile.into()))),
        };
        let html = body(
            "00ff",
            View::Split,
            Some(&t),
            Some("<script>alert(2)</script>"),
        );
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<b>") && !html.contains("<i>"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    }
}

//! `wardfs fork`, `wardfs forks`, `wardfs changes`, `wardfs merge` and `wardfs update`: a
//! copy-on-write zone of its own per agent or attempt, what it changed, bringing that back into
//! its parent, and bringing the parent's changes into it.

use serde_json::json;

use crate::checkpoint::DiffResult;
use crate::cli::output::{decode, print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::client::encode;
use crate::core::text::{self, count};
use crate::core::ErrorCode;
use crate::fork::{ForkInfo, ForkMade, ForkRemoved, MergeResult, UpdateResult};

const FORK_EXAMPLES: &str = "\
Examples:
  wardfs fork try-a                  # fork the workspace: its files are at /forks/try-a
  wardfs write /forks/try-a/notes.md 'only in the fork'
  wardfs fork try-b --from try-a     # a fork of that fork
  wardfs fork old --from 12          # a fork of checkpoint 12 (see `wardfs checkpoint list`)
  wardfs forks                       # list them, with what each changed
  wardfs changes try-a --patch       # what try-a changed since it was made, as a patch
  wardfs changes try-a --since try-b # how try-a differs from try-b as it is now
  wardfs merge try-a                 # bring its changes into the workspace
  wardfs merge try-a --theirs a.rs   # … taking the fork's a.rs where both changed it
  wardfs update try-a                # bring the workspace's changes since into the fork
  wardfs fork rm try-b               # remove one (its last state is kept in a checkpoint)
  wardfs fork try-c --mount ~/try-c  # its tree at ~/try-c too (root: a bind mount)
  wardfs run --fork try-a -- make    # a command whose only writable files are the fork's
  wardfs mcp --fork try-a            # an MCP server that serves only the fork, as /

docs/forks.md has the whole story: how a fork is made, merges, and the limits.";

/// Make a fork: a copy-on-write zone of its own for an agent or an attempt
///
/// A fork starts as the workspace (or what --from names) is at this moment; from then on
/// neither side sees the other's writes. Its files are hard links to the parent's, so no data
/// is copied and no space is used until one side writes a file (wardfs replaces a file it
/// writes, it never changes a shared one in place); making one costs a link per file (about
/// 1.5 s for 50,000 files on ext4). The parent is checkpointed first: that checkpoint is the fork point, which `wardfs
/// changes` and `wardfs merge` compare with.
///
/// The fork is a zone: /forks/NAME through the CLI, the API and MCP, MOUNT/forks/NAME through
/// the mount, with its own journal rows, checkpoints and restores. Point an agent at it, see
/// what it did with `wardfs changes NAME`, bring that into the parent with `wardfs merge NAME`,
/// or throw the attempt away with `wardfs fork rm NAME`. At most 256 forks exist at once.
#[derive(Debug, clap::Args)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = FORK_EXAMPLES
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<ForkCommand>,
    /// The fork's name: 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.` or `-`
    #[arg(required = true)]
    pub name: Option<String>,
    /// What to fork: workspace (the default), cache, a fork's name (forks/NAME for a name that
    /// is a number), or a checkpoint id
    #[arg(long, value_name = "ZONE|FORK|CHECKPOINT")]
    pub from: Option<String>,
    /// Show the fork's tree at DIR too (an empty directory, made when missing): a bind mount of
    /// MOUNT/forks/NAME, which needs root. A fork that exists already is bound as it is.
    /// `wardfs unmount DIR` undoes it; so does removing the fork, or stopping the daemon
    #[arg(long, value_name = "DIR")]
    pub mount: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
pub enum ForkCommand {
    /// Remove a fork: its last state is checkpointed (kept until checkpoint retention drops
    /// it), its files are deleted and its name is free again
    Rm {
        /// The fork's name (see `wardfs forks`)
        name: String,
    },
}

/// List the forks: parent, fork point, paths changed, overlaps, when and by whom each was made
///
/// An overlap is a path the fork changed that its parent, or a sibling fork made from the same
/// parent, changed too since the fork point: a conflict in the making, seen while the agents
/// still work. Each fork's overlaps are listed under the table, with who changed each side.
#[derive(Debug, clap::Args)]
#[command(after_help = FORK_EXAMPLES)]
pub struct ListArgs {}

/// Show what a fork changed since its fork point: files added, modified, deleted, renamed and
/// re-moded (or, with --overlaps, which of them its parent or a sibling fork changed too)
#[derive(Debug, clap::Args)]
#[command(after_help = FORK_EXAMPLES)]
pub struct ChangesArgs {
    /// The fork's name (see `wardfs forks`)
    pub name: String,
    /// The patch in git's format too
    #[arg(long, conflicts_with = "overlaps")]
    pub patch: bool,
    /// Compare with this instead of the fork point: `workspace`, `cache` or another fork as it
    /// is now (`NAME`, or `forks/NAME` for a name that is a number), or a checkpoint id
    #[arg(long, value_name = "OTHER", conflicts_with = "overlaps")]
    pub since: Option<String>,
    /// Only the paths the fork changed that its parent or a sibling fork changed too since the
    /// fork point, with who changed them: ask before writing, to steer clear of a conflict
    #[arg(long)]
    pub overlaps: bool,
}

/// Merge a fork's changes into its parent (all, or the paths given)
///
/// Each file is merged three-way against the fork point, as git merges: the parent's own
/// changes since the fork point are kept. All or nothing: when a path conflicts (both sides
/// changed the same lines, a binary file or a mode on both sides, a file deleted on one side
/// and changed on the other) nothing is applied, each conflict is listed and the command exits
/// with 5. Otherwise the parent is checkpointed first, so `wardfs restore ID` (the ID printed)
/// undoes the merge. The fork's files stay as they are; after a merge of all its changes, its
/// fork point moves to the fork as merged, so `wardfs changes` starts again from there.
///
/// Settle a conflict by naming a side: `--ours PATH` keeps the parent's version, `--theirs
/// PATH` takes the fork's (each repeatable; a path that does not conflict is refused, exit 2).
/// The other conflicts still stop the merge.
#[derive(Debug, clap::Args)]
#[command(after_help = FORK_EXAMPLES)]
pub struct MergeArgs {
    /// The fork's name (see `wardfs forks`)
    pub name: String,
    /// Only these paths, with what is beneath them: relative to the fork (src/a.rs), or
    /// virtual paths in the fork (/forks/NAME/src/a.rs) or in its parent
    pub paths: Vec<String>,
    /// A conflicting path that keeps the parent's version (repeatable), written as PATH is
    #[arg(long, value_name = "PATH")]
    pub ours: Vec<String>,
    /// A conflicting path that takes the fork's version (repeatable), written as PATH is
    #[arg(long, value_name = "PATH")]
    pub theirs: Vec<String>,
}

/// Bring the parent's changes since the fork point into a fork, keeping the fork's own
///
/// Moves the fork onto its parent's present: each file merged three-way against the fork point,
/// as git merges (the parent is not changed). The fork is checkpointed first, so `wardfs restore
/// ID` (the ID printed) undoes the update's writes. A file both changed in ways that cannot be
/// joined keeps both versions: the fork's stays at PATH and the parent's is written beside it
/// as PATH.parent; each is listed and the command exits with 5. Settle them in the fork (keep
/// what should stay at PATH, delete PATH.parent) before merging: a merge brings what the fork
/// holds. The fork point then moves to the parent as brought in, so `wardfs changes` lists only
/// the fork's own changes from there.
#[derive(Debug, clap::Args)]
#[command(after_help = FORK_EXAMPLES)]
pub struct UpdateArgs {
    /// The fork's name (see `wardfs forks`)
    pub name: String,
}

/// The route of the fork `name`, with `tail` after it.
fn route(name: &str, tail: &str) -> String {
    format!("/v1/forks/{}{tail}", encode(name))
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    match (&a.command, &a.name) {
        (Some(ForkCommand::Rm { name }), _) => remove(ctx, name).await,
        (None, Some(name)) => match &a.mount {
            Some(dir) => create_and_bind(ctx, name, a.from.as_deref(), dir).await,
            None => create(ctx, name, a.from.as_deref()).await,
        },
        (None, None) => Err(ClientError::Local(
            "name the fork: wardfs fork NAME [--from ZONE|FORK|CHECKPOINT]".into(),
        )),
    }
}

/// The body of `POST /v1/forks`.
fn body(name: &str, from: Option<&str>) -> serde_json::Value {
    let mut body = json!({ "name": name });
    if let Some(f) = from {
        body["from"] = json!(f);
    }
    body
}

async fn create(ctx: &Ctx, name: &str, from: Option<&str>) -> Result<Outcome, ClientError> {
    let raw = ctx.client.post_raw("/v1/forks", &body(name, from)).await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let m: ForkMade = decode(&raw)?;
    let f = &m.fork;
    println!(
        "made fork {} of {} in {} ms: {} shared with it, {} copied",
        text::name(&f.name),
        text::name(&f.parent),
        m.took_ms,
        count(m.linked, "file"),
        count(m.copied, "file")
    );
    println!("  path:       {}", text::name(&f.path));
    if let Some(mount) = mount_of(ctx, &f.path).await {
        println!("  mount:      {}", text::name(&mount));
    }
    println!("  fork point: checkpoint {}", f.base);
    if m.fixed > 0 {
        println!(
            "  {} the parent changed while the fork was made taken from the fork point",
            count(m.fixed, "file")
        );
    }
    for s in &m.skipped {
        println!("  left out: {}", text::line(s));
    }
    if m.skipped_total > m.skipped.len() as u64 {
        println!(
            "  ({} more left out)",
            m.skipped_total - m.skipped.len() as u64
        );
    }
    Ok(Outcome::Ok)
}

/// `wardfs fork NAME --mount DIR`: makes the fork unless it exists (and no `--from` asks
/// for a new one), then binds its tree at `dir`.
async fn create_and_bind(
    ctx: &Ctx,
    name: &str,
    from: Option<&str>,
    dir: &std::path::Path,
) -> Result<Outcome, ClientError> {
    // Refused before anything is made: a fork made for a bind that cannot be made is litter.
    crate::fork::check_name(name).map_err(|e| ClientError::Api {
        code: ErrorCode::InvalidArgument,
        message: e.to_string(),
        path: None,
    })?;
    if !rustix::process::geteuid().is_root() {
        return Err(ClientError::Api {
            code: ErrorCode::PermissionDenied,
            message: format!(
                "--mount {}: a bind mount needs root; run as root, or use the fork through \
                 the daemon's mount (MOUNT/forks/{})",
                text::name(&dir.display().to_string()),
                text::name(name)
            ),
            path: Some(dir.display().to_string()),
        });
    }
    let mount = daemon_mount(ctx).await?;
    let shown = text::name(&dir.display().to_string()).into_owned();
    let bind_failed = |e: crate::fuse::binds::BindError| ClientError::Api {
        code: match e {
            crate::fuse::binds::BindError::Refused(_) => ErrorCode::Rejected,
            crate::fuse::binds::BindError::Io { .. } => ErrorCode::Internal,
        },
        message: e.to_string(),
        path: Some(dir.display().to_string()),
    };
    crate::fuse::binds::check_target(&mount, dir).map_err(bind_failed)?;
    let exists = from.is_none() && info(ctx, name).await.is_ok();
    let made = match (exists, ctx.json) {
        (true, false) => {
            println!("fork {} exists; binding it", text::name(name));
            None
        }
        (true, true) => None,
        (false, false) => {
            create(ctx, name, from).await?;
            None
        }
        (false, true) => {
            let raw = ctx.client.post_raw("/v1/forks", &body(name, from)).await?;
            Some(serde_json::from_slice::<serde_json::Value>(&raw).unwrap_or_default())
        }
    };
    let bound = crate::fuse::binds::bind(&mount, name, dir).map_err(bind_failed)?;
    if ctx.json {
        let mount = bound.display().to_string();
        println!("{}", json!({ "fork": name, "mount": mount, "made": made }));
    } else {
        println!(
            "fork {} is at {shown} too (`wardfs unmount {shown}` undoes it)",
            text::name(name)
        );
    }
    Ok(Outcome::Ok)
}

/// Where the daemon mounted the zones; refused when it did not.
async fn daemon_mount(ctx: &Ctx) -> Result<std::path::PathBuf, ClientError> {
    let status: serde_json::Value = ctx.client.get("/v1/status").await?;
    match (status["mounted"].as_bool(), status["mount"].as_str()) {
        (Some(true), Some(m)) => Ok(std::path::PathBuf::from(m)),
        _ => Err(ClientError::Api {
            code: ErrorCode::ZoneUnavailable,
            message: "the daemon did not mount the zones (started with --no-mount?): --mount \
                      binds the fork's directory of that mount"
                .into(),
            path: None,
        }),
    }
}

/// Where the virtual path `vpath` is through the daemon's mount, when it mounted the zones.
async fn mount_of(ctx: &Ctx, vpath: &str) -> Option<String> {
    let s: serde_json::Value = ctx.client.get("/v1/status").await.ok()?;
    if s["mounted"].as_bool() != Some(true) {
        return None;
    }
    let mount = s["mount"].as_str()?.trim_end_matches('/');
    Some(format!("{mount}{vpath}"))
}

async fn remove(ctx: &Ctx, name: &str) -> Result<Outcome, ClientError> {
    let raw = ctx.client.delete_raw(&route(name, "")).await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let r: ForkRemoved = decode(&raw)?;
    println!(
        "removed fork {}; its last state is checkpoint {} (`wardfs fork NAME --from {}` \
         brings it back)",
        text::name(&r.name),
        r.checkpoint,
        r.checkpoint
    );
    Ok(Outcome::Ok)
}

/// Who made a fork: `api pid 42`.
fn writer(f: &ForkInfo) -> String {
    match f.pid {
        Some(pid) => format!("{} pid {pid}", f.via),
        None => f.via.clone(),
    }
}

pub async fn list(ctx: &Ctx, _a: &ListArgs) -> Result<Outcome, ClientError> {
    let raw = ctx.client.get_raw("/v1/forks").await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    #[derive(serde::Deserialize)]
    struct Body {
        forks: Vec<ForkInfo>,
    }
    let b: Body = decode(&raw)?;
    if b.forks.is_empty() {
        println!("no forks: `wardfs fork NAME` makes one");
        return Ok(Outcome::Ok);
    }
    let rows: Vec<[String; 7]> = b
        .forks
        .iter()
        .map(|f| {
            [
                text::name(&f.name).into_owned(),
                text::name(&f.parent).into_owned(),
                f.base.to_string(),
                f.changed
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "10000+".into()),
                f.overlaps.len().to_string(),
                time(f.created_ms),
                writer(f),
            ]
        })
        .collect();
    print_table(
        [
            "NAME", "PARENT", "BASE", "CHANGED", "OVERLAPS", "CREATED", "WRITER",
        ],
        &rows,
    );
    for f in b.forks.iter().filter(|f| !f.overlaps.is_empty()) {
        println!();
        print_overlaps(f);
    }
    Ok(Outcome::Ok)
}

/// The fork's overlaps, one a line: the path (in the fork) and who changed it on each side.
fn print_overlaps(f: &ForkInfo) {
    println!(
        "{} of fork {} also changed elsewhere since its fork point:",
        count(f.overlaps.len() as u64, "path"),
        text::name(&f.name)
    );
    for o in &f.overlaps {
        let writers: Vec<String> = o
            .writers
            .iter()
            .map(|w| text::line(w).into_owned())
            .collect();
        println!(
            "  {}  ({})",
            shown(&format!("forks/{}", f.name), &o.path),
            writers.join("; ")
        );
    }
}

/// The fork `name` as `GET /v1/forks` lists it.
async fn info(ctx: &Ctx, name: &str) -> Result<ForkInfo, ClientError> {
    #[derive(serde::Deserialize)]
    struct Body {
        forks: Vec<ForkInfo>,
    }
    let b: Body = decode(&ctx.client.get_raw("/v1/forks").await?)?;
    b.forks
        .into_iter()
        .find(|f| f.name == name)
        .ok_or_else(|| ClientError::Api {
            code: ErrorCode::NotFound,
            message: format!("/forks/{}: no such fork", text::name(name)),
            path: Some(format!("/forks/{name}")),
        })
}

/// Prints `rows` under `head`, each column as wide as its widest cell.
fn print_table<const N: usize>(head: [&str; N], rows: &[[String; N]]) {
    let mut widths = head.map(|h| h.chars().count());
    for r in rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(head.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

pub async fn changes(ctx: &Ctx, a: &ChangesArgs) -> Result<Outcome, ClientError> {
    if a.overlaps {
        let f = info(ctx, &a.name).await?;
        if ctx.json {
            println!("{}", json!({ "fork": f.name, "overlaps": f.overlaps }));
        } else if f.overlaps.is_empty() {
            println!(
                "no path fork {} changed was changed elsewhere since its fork point",
                text::name(&f.name)
            );
        } else {
            print_overlaps(&f);
        }
        return Ok(Outcome::Ok);
    }
    let mut tail = format!("/changes?patch={}", a.patch);
    if let Some(since) = &a.since {
        tail.push_str(&format!("&since={}", encode(since)));
    }
    let raw = ctx.client.get_raw(&route(&a.name, &tail)).await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let d: DiffResult = decode(&raw)?;
    if d.files.is_empty() {
        let against = match &a.since {
            Some(since) => format!("against {}", text::name(since)),
            None => "since its fork point".into(),
        };
        println!(
            "fork {} has no changes {against} (checkpoint {})",
            text::name(&a.name),
            d.from
        );
        return Ok(Outcome::Ok);
    }
    for f in &d.files {
        println!(
            "{:<13} +{:<5} -{:<5} {}",
            f.status,
            f.additions,
            f.deletions,
            changed_path(f)
        );
    }
    if a.patch {
        println!();
        for line in d.patch.lines() {
            println!("{}", text::line(line));
        }
        if d.truncated {
            println!("… (the patch is cut at 4 MiB; the file list above is whole)");
        }
    }
    Ok(Outcome::Ok)
}

/// A listed file as it may be shown: its path, the path it had for a rename (`a.rs -> b.rs`),
/// and its permission bits when they changed (`(0644 -> 0755)`).
fn changed_path(f: &crate::checkpoint::DiffFile) -> String {
    let mut shown = match &f.old_path {
        Some(old) => format!("{} -> {}", text::name(old), text::name(&f.path)),
        None => text::name(&f.path).into_owned(),
    };
    if let (Some(old), Some(new)) = (&f.old_mode, &f.new_mode) {
        shown.push_str(&format!(" ({} -> {})", text::name(old), text::name(new)));
    }
    shown
}

pub async fn merge(ctx: &Ctx, a: &MergeArgs) -> Result<Outcome, ClientError> {
    let body = json!({
        "paths": ctx.stage_paths(&a.paths).await?,
        "ours": ctx.stage_paths(&a.ours).await?,
        "theirs": ctx.stage_paths(&a.theirs).await?,
    });
    let raw = ctx
        .client
        .post_raw(&route(&a.name, "/merge"), &body)
        .await?;
    let m: MergeResult = decode(&raw)?;
    if ctx.json {
        print_json(&raw);
    } else {
        print_merge(&m);
    }
    if m.applied {
        return Ok(Outcome::Ok);
    }
    if !ctx.json {
        eprintln!(
            "wardfs: nothing merged: {} of fork {} and /{} conflict; settle them in the fork \
             or the parent (or merge only other paths), then merge again",
            count(m.conflicts.len() as u64, "path"),
            text::name(&m.fork),
            text::name(&m.parent)
        );
    }
    Ok(Outcome::Refused(ErrorCode::Conflict))
}

/// The path `rel` of the zone `zone` as it may be shown: `/workspace/src/a.rs`.
fn shown(zone: &str, rel: &str) -> String {
    text::name(&format!("/{zone}/{rel}")).into_owned()
}

/// What a merge did, or why it did nothing.
fn print_merge(m: &MergeResult) {
    let fork = text::name(&m.fork);
    let parent = text::name(&format!("/{}", m.parent)).into_owned();
    if !m.applied {
        println!(
            "merge of fork {fork} into {parent}: {}, nothing applied:",
            count(m.conflicts.len() as u64, "conflict")
        );
        for c in &m.conflicts {
            println!("  {:<14} {}", c.kind, shown(&m.parent, &c.path));
        }
        return;
    }
    let Some(before) = m.before else {
        println!("fork {fork} has nothing to merge into {parent}");
        return;
    };
    println!(
        "merged fork {fork} into {parent}: {} changed (undo: wardfs restore {before})",
        count(m.changed.len() as u64, "path")
    );
    for p in &m.changed {
        println!("  {}", shown(&m.parent, p));
    }
    for c in &m.settled {
        println!(
            "  settled as asked ({}): {}",
            c.kind,
            shown(&m.parent, &c.path)
        );
    }
    // Virtual paths already (`/workspace/a.txt`), as the restore that wrote them names them.
    for p in &m.left_alone {
        println!(
            "  left alone, changed by another writer while merging: {}",
            text::name(p)
        );
    }
}

pub async fn update(ctx: &Ctx, a: &UpdateArgs) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw(&route(&a.name, "/update"), &json!({}))
        .await?;
    let u: UpdateResult = decode(&raw)?;
    if ctx.json {
        print_json(&raw);
    } else {
        print_update(&u);
    }
    if u.conflicts.is_empty() {
        return Ok(Outcome::Ok);
    }
    if !ctx.json {
        eprintln!(
            "wardfs: {} of fork {} and /{} conflict: the fork's version is kept at each, the \
             parent's beside it; settle them in the fork before merging",
            count(u.conflicts.len() as u64, "path"),
            text::name(&u.fork),
            text::name(&u.parent)
        );
    }
    Ok(Outcome::Refused(ErrorCode::Conflict))
}

/// What an update did.
fn print_update(u: &UpdateResult) {
    let fork = text::name(&u.fork);
    let zone = format!("forks/{}", u.fork);
    let parent = text::name(&format!("/{}", u.parent)).into_owned();
    let Some(before) = u.before else {
        println!(
            "fork {fork} is up to date with {parent} (checkpoint {})",
            u.onto
        );
        return;
    };
    println!(
        "updated fork {fork} from {parent}: {} changed (undo: wardfs restore {before})",
        count(u.changed.len() as u64, "path")
    );
    for p in &u.changed {
        println!("  {}", shown(&zone, p));
    }
    for p in &u.left_alone {
        println!(
            "  left alone, changed by another writer while updating: {}",
            shown(&zone, p)
        );
    }
    for c in &u.conflicts {
        let beside = match &c.parent_copy {
            Some(p) => format!("the parent's version at {}", shown(&zone, p)),
            None => "the parent deleted it".to_string(),
        };
        println!(
            "  conflict {:<14} {} ({beside})",
            c.kind,
            shown(&zone, &c.path)
        );
    }
}

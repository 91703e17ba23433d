//! `wardfs checkpoint` and `wardfs restore`: snapshots of a zone to go back to. Every writer's
//! changes are in them (API, MCP, the mount, git and mirror pulls, changes beside wardfs), and a
//! restore checkpoints the present first, so it can be undone by restoring that.

use serde_json::json;

use crate::checkpoint::{DiffResult, RestoreResult};
use crate::cli::output::{decode, print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text::{self, count};
use crate::state::{CheckpointRow, RestoreRow};

/// Checkpoint a zone or a directory now (the workspace unless told), or list and compare checkpoints
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<CheckpointCommand>,
    /// What the checkpoint is for, shown in `wardfs checkpoint list`
    #[arg(short, long)]
    pub message: Option<String>,
    /// The zone to checkpoint: workspace (the default) or cache
    #[arg(long, conflicts_with = "path")]
    pub zone: Option<String>,
    /// A directory to checkpoint instead (e.g. /workspace/src); restoring the checkpoint then
    /// puts back that directory only
    pub path: Option<String>,
}

#[derive(Debug, clap::Subcommand)]
pub enum CheckpointCommand {
    /// List checkpoints, newest first
    List {
        /// Only this zone's (workspace or cache)
        #[arg(long)]
        zone: Option<String>,
        /// At most this many
        #[arg(long, default_value_t = 50)]
        limit: usize,
    },
    /// Show what changed from checkpoint FROM to checkpoint TO (or to now), in git's format
    Diff {
        /// The checkpoint to compare from (see `wardfs checkpoint list`)
        from: i64,
        /// Another checkpoint of the same zone; without it, the zone as it is now
        to: Option<i64>,
        /// Only the files and their line counts
        #[arg(long)]
        stat: bool,
    },
}

/// Put a zone back as it was at a checkpoint: all of it, or only the paths given
#[derive(Debug, clap::Args)]
pub struct RestoreArgs {
    /// The checkpoint (see `wardfs checkpoint list`)
    pub id: i64,
    /// Virtual paths to restore, with what is beneath them (default: the whole zone)
    pub paths: Vec<String>,
}

fn print_row(c: &CheckpointRow) {
    let who = match c.pid {
        Some(pid) => format!("{} pid {pid}", c.via),
        None => c.via.clone(),
    };
    let msg = if c.message.is_empty() {
        String::new()
    } else {
        format!("  {}", text::line(&c.message))
    };
    let place = match &c.scope {
        Some(dir) => text::name(&format!("/{}/{dir}", c.zone)).into_owned(),
        None => format!("/{}", c.zone),
    };
    println!(
        "{:>5}  {}  {:<10}  {:>12}  {}{msg}",
        c.id,
        time(c.time_ms),
        place,
        count(c.files, "file"),
        who
    );
}

/// Returns what `wardfs checkpoint` says of the checkpoint it made:
/// `created checkpoint 12 of /workspace (340 files): before the refactor`.
fn created(c: &CheckpointRow) -> String {
    let place = match &c.scope {
        Some(dir) => text::name(&format!("/{}/{dir}", c.zone)).into_owned(),
        None => format!("/{}", c.zone),
    };
    let msg = if c.message.is_empty() {
        String::new()
    } else {
        format!(": {}", text::line(&c.message))
    };
    format!(
        "created checkpoint {} of {place} ({}){msg}",
        c.id,
        count(c.files, "file")
    )
}

/// A restore that did not simply run to its end (cut short by a crash, or failed).
fn print_restore(r: &RestoreRow) {
    let when = r
        .finished_ms
        .map(time)
        .unwrap_or_else(|| "not ended".into());
    let detail = r.detail.as_deref().unwrap_or("");
    println!(
        "restore of checkpoint {} begun {} was {}: {detail} ({when})",
        r.checkpoint,
        time(r.started_ms),
        match r.state.as_str() {
            "resumed" => "cut short and finished at the daemon's next start",
            "interrupted" => "cut short",
            "failed" => "stopped by an error",
            other => other,
        }
    );
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = match &a.command {
        None => {
            let mut body = json!({ "message": a.message.clone().unwrap_or_default() });
            if let Some(z) = &a.zone {
                body["zone"] = json!(z);
            }
            if let Some(p) = &a.path {
                body["path"] = json!(ctx.vpath(p).await?);
            }
            ctx.client.post_raw("/v1/checkpoints", &body).await?
        }
        Some(CheckpointCommand::List { zone, limit }) => {
            let mut route = format!("/v1/checkpoints?limit={limit}");
            if let Some(z) = zone {
                route.push_str(&format!("&zone={}", crate::client::encode(z)));
            }
            ctx.client.get_raw(&route).await?
        }
        Some(CheckpointCommand::Diff { from, to, .. }) => {
            let mut body = json!({ "from": from });
            if let Some(to) = to {
                body["to"] = json!(to);
            }
            ctx.client.post_raw("/v1/checkpoints/diff", &body).await?
        }
    };
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    match &a.command {
        None => {
            let c: CheckpointRow = decode(&raw)?;
            println!("{}", created(&c));
            if c.not_kept > 0 {
                println!(
                    "  {} over checkpoints.max_file_bytes recorded by size only",
                    count(c.not_kept, "file")
                );
            }
        }
        Some(CheckpointCommand::List { .. }) => {
            #[derive(serde::Deserialize)]
            struct Body {
                checkpoints: Vec<CheckpointRow>,
                #[serde(default)]
                restores: Vec<RestoreRow>,
            }
            let b: Body = decode(&raw)?;
            for r in b.restores.iter().filter(|r| r.state != "done") {
                print_restore(r);
            }
            if b.checkpoints.is_empty() {
                println!("no checkpoints yet: `wardfs checkpoint -m MESSAGE` makes one");
                return Ok(Outcome::NothingFound);
            }
            for c in &b.checkpoints {
                print_row(c);
            }
        }
        Some(CheckpointCommand::Diff { stat, .. }) => {
            let d: DiffResult = decode(&raw)?;
            if *stat || d.files.is_empty() {
                for f in &d.files {
                    println!(
                        "{:<13} +{:<5} -{:<5} {}",
                        f.status,
                        f.additions,
                        f.deletions,
                        text::name(&f.path)
                    );
                }
                if d.files.is_empty() {
                    println!("no changes");
                }
            } else {
                for line in d.patch.lines() {
                    println!("{}", text::line(line));
                }
                if d.truncated {
                    println!("… (cut at 4 MiB; `--stat` lists every file)");
                }
            }
        }
    }
    Ok(Outcome::Ok)
}

pub async fn restore(ctx: &Ctx, a: &RestoreArgs) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw(
            "/v1/checkpoints/restore",
            &json!({ "id": a.id, "paths": ctx.vpaths(&a.paths).await? }),
        )
        .await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let r: RestoreResult = decode(&raw)?;
    println!(
        "restored checkpoint {}: {} written, {} removed (undo: wardfs restore {})",
        r.checkpoint,
        r.restored.len(),
        r.removed.len(),
        r.before
    );
    for p in &r.conflicts {
        println!("  left alone, changed while restoring: {}", text::name(p));
    }
    for p in &r.not_kept {
        println!(
            "  left alone, only its size was recorded: {}",
            text::name(p)
        );
    }
    for p in &r.refused {
        println!(
            "  not written, git would read it as .git: {}",
            text::name(p)
        );
    }
    Ok(Outcome::Ok)
}

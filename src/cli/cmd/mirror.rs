//! `wardfs mirror`: push a zone to a sandbox, pull what the sandbox changed.

use serde_json::{json, Value};

use crate::cli::output::size;
use crate::cli::progress::{Tick, View};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text::{self, count};

/// Keep a zone and a directory inside a sandbox in step, on demand
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: MirrorCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum MirrorCommand {
    /// Send what changed in the zone since the last push (deletes and renames included)
    ///
    /// A path changed in the sandbox too is a conflict: reported, left alone on both sides.
    Push {
        /// The sandbox's name (`wardfs sandbox list`)
        sandbox: String,
        /// The zone to push
        #[arg(long, default_value = "workspace")]
        zone: String,
        /// The directory inside the sandbox (default: the sandbox's root)
        #[arg(long, value_name = "DIR")]
        to: Option<String>,
        /// Hash every file instead of trusting unchanged sizes and times
        #[arg(long)]
        full_hash: bool,
        /// Keep pushing: after the first push, push again whenever the zone's journal shows new
        /// changes (through the API or the mount), once they have settled; Ctrl-C stops
        #[arg(long)]
        watch: bool,
        /// With --watch: how long changes must settle before a push, in milliseconds
        #[arg(long, value_name = "MS", default_value_t = 500, requires = "watch")]
        debounce_ms: u64,
    },
    /// Fetch what changed in the sandbox since the last push or pull
    ///
    /// A path changed here too is a conflict: the sandbox's copy is saved beside it as
    /// `NAME.sandbox-<sandbox>`.
    Pull {
        /// The sandbox's name (`wardfs sandbox list`)
        sandbox: String,
        /// The zone to pull into
        #[arg(long, default_value = "workspace")]
        zone: String,
        /// The directory inside the sandbox (default: the sandbox's root)
        #[arg(long, value_name = "DIR")]
        from: Option<String>,
    },
}

/// Returns the progress update a mirror route streamed (`{phase, sandbox, files_done, …}`).
fn mirror_tick(p: &Value) -> Tick {
    let sandbox = p["sandbox"].as_str().unwrap_or("");
    let n = |k: &str| p[k].as_u64().unwrap_or(0);
    let phase = p["phase"].as_str().unwrap_or("");
    let moving = |label: String| Tick {
        phase: label,
        done: n("files_done"),
        total: n("files_total"),
        unit: "files",
        bytes: Some(n("bytes_done")),
    };
    match phase {
        "send" => moving(format!("pushing to {sandbox}")),
        "receive" | "downloaded" => moving(format!("pulling from {sandbox}")),
        _ => Tick {
            phase: match phase {
                "attach" => format!("connecting to {sandbox}"),
                "scan" => format!("comparing with {sandbox}"),
                other => format!("{other} {sandbox}"),
            },
            done: 0,
            total: 0,
            unit: "",
            bytes: None,
        },
    }
}

fn conflicts(v: &Value) {
    if let Some(list) = v["skipped"].as_array().filter(|l| !l.is_empty()) {
        println!("skipped:");
        for c in list {
            println!(
                "  {}  ({})",
                text::name(c["path"].as_str().unwrap_or("")),
                text::line(c["reason"].as_str().unwrap_or(""))
            );
        }
        let more = v["skipped_total"]
            .as_u64()
            .map_or(0, |t| t.saturating_sub(list.len() as u64));
        if more > 0 {
            println!("  ({} more skipped)", count(more, "entry"));
        }
    }
    if let Some(list) = v["conflicts"].as_array().filter(|l| !l.is_empty()) {
        println!("changed on both sides (left as they are):");
        for c in list {
            let copy = c["remote_copy"]
                .as_str()
                .map(|p| format!("; the sandbox's copy is {}", text::name(p)))
                .unwrap_or_default();
            println!(
                "  {}  ({}{copy})",
                text::name(c["path"].as_str().unwrap_or("")),
                text::line(c["reason"].as_str().unwrap_or(""))
            );
        }
    }
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    if let MirrorCommand::Push {
        watch: true,
        zone,
        debounce_ms,
        ..
    } = &a.command
    {
        return watch(ctx, a, zone, *debounce_ms).await;
    }
    once(ctx, a).await
}

/// The newest journal row of `zone` (its id), or 0 when it has none.
async fn newest_change(ctx: &Ctx, zone: &str) -> Result<i64, ClientError> {
    let v: Value = ctx
        .client
        .get(&format!("/v1/log?zone={zone}&limit=1"))
        .await?;
    Ok(v["entries"][0]["id"].as_i64().unwrap_or(0))
}

/// Pushes, then pushes again each time the zone's journal moves and settles, until Ctrl-C.
async fn watch(ctx: &Ctx, a: &Args, zone: &str, debounce_ms: u64) -> Result<Outcome, ClientError> {
    let poll = std::time::Duration::from_millis(250);
    let settle = std::time::Duration::from_millis(debounce_ms.max(50));
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    let mut seen = newest_change(ctx, zone).await?;
    once(ctx, a).await?;
    if !ctx.json {
        eprintln!("watching /{zone} for changes (Ctrl-C stops)");
    }
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(Outcome::Ok),
            _ = tokio::time::sleep(poll) => {}
        }
        let mut newest = newest_change(ctx, zone).await?;
        if newest == seen {
            continue;
        }
        // Wait until the changes stop for `settle` (an editor's save, a build's burst).
        loop {
            tokio::select! {
                _ = &mut stop => return Ok(Outcome::Ok),
                _ = tokio::time::sleep(settle) => {}
            }
            let now = newest_change(ctx, zone).await?;
            if now == newest {
                break;
            }
            newest = now;
        }
        seen = newest;
        once(ctx, a).await?;
    }
}

/// One push or pull, its summary printed.
async fn once(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let (route, body) = match &a.command {
        MirrorCommand::Push {
            sandbox,
            zone,
            to,
            full_hash,
            ..
        } => (
            "/v1/mirror/push",
            json!({ "sandbox": sandbox, "zone": zone, "to": to, "full_hash": full_hash, "progress": true }),
        ),
        MirrorCommand::Pull {
            sandbox,
            zone,
            from,
        } => (
            "/v1/mirror/pull",
            json!({ "sandbox": sandbox, "zone": zone, "from": from, "progress": true }),
        ),
    };
    let mut view = View::new(ctx.json);
    let result: Result<Value, ClientError> = ctx
        .client
        .post_progress(route, &body, |p| view.update(mirror_tick(p)))
        .await;
    view.finish();
    let v = result?;
    if ctx.json {
        println!("{v}");
        return Ok(Outcome::Ok);
    }
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    match &a.command {
        MirrorCommand::Push { sandbox, .. } => println!(
            "pushed to {sandbox}: {} ({}) sent, {} deleted, {} renamed, {} ({} ms)",
            count(n("files_sent"), "file"),
            size(n("bytes_sent")),
            n("deleted"),
            n("renamed"),
            count(
                v["conflicts"].as_array().map_or(0, Vec::len) as u64,
                "conflict"
            ),
            n("duration_ms")
        ),
        MirrorCommand::Pull { sandbox, .. } => println!(
            "pulled from {sandbox}: {} ({}) received, {} deleted, {} ({} ms)",
            count(n("files_received"), "file"),
            size(n("bytes_received")),
            n("deleted"),
            count(
                v["conflicts"].as_array().map_or(0, Vec::len) as u64,
                "conflict"
            ),
            n("duration_ms")
        ),
    }
    conflicts(&v);
    Ok(Outcome::Ok)
}

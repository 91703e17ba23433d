//! `wardfs events`: the journal's changes and the checkpoints as they happen (`GET /v1/events`).

use std::ops::ControlFlow;

use crate::cli::output::{decode, print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::client::encode;
use crate::core::text;
use crate::core::ErrorCode;
use crate::state::{CheckpointRow, JournalRow};

/// Follow changes and checkpoints as they happen, oldest first (Ctrl-C stops)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only changes to this path or beneath it (e.g. /workspace/src), and its zone's checkpoints
    pub path: Option<String>,
    /// Start after this cursor (the `cursor` of a `--json` line), 0 for the oldest event kept;
    /// without it, only events from now on
    #[arg(long, value_name = "CURSOR")]
    pub since: Option<String>,
    /// Only events of this zone (workspace or cache)
    #[arg(long)]
    pub zone: Option<String>,
    /// Print the events there are and exit instead of waiting for more
    #[arg(long)]
    pub no_follow: bool,
}

#[derive(serde::Deserialize)]
struct Line {
    kind: String,
    #[serde(default)]
    code: Option<ErrorCode>,
    #[serde(default)]
    message: Option<String>,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let mut route = format!("/v1/events?follow={}", !a.no_follow);
    let path = ctx.vpath_opt(a.path.as_deref()).await?;
    for (key, value) in [("since", &a.since), ("zone", &a.zone), ("path", &path)] {
        if let Some(v) = value {
            route.push_str(&format!("&{key}={}", encode(v)));
        }
    }
    let mut failed = None;
    ctx.client
        .get_lines(&route, |raw| {
            let shown = if ctx.json {
                print_json(raw);
                failure(raw)
            } else {
                print_event(raw)
            };
            match shown {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            }
        })
        .await?;
    match failed {
        Some(e) => Err(e),
        None => Ok(Outcome::Ok),
    }
}

/// Returns the error a line of the stream reports (its last line, when the daemon failed).
fn failure(raw: &[u8]) -> Result<(), ClientError> {
    let line: Line = decode(raw)?;
    if line.kind != "error" {
        return Ok(());
    }
    Err(ClientError::Api {
        code: line.code.unwrap_or(ErrorCode::Internal),
        message: line.message.unwrap_or_default(),
        path: None,
    })
}

/// Prints one line of the stream for people: a change as `wardfs log` shows it, a checkpoint,
/// nothing for a heartbeat; the daemon's error line is returned.
fn print_event(raw: &[u8]) -> Result<(), ClientError> {
    let line: Line = decode(raw)?;
    match line.kind.as_str() {
        "change" => {
            let r: JournalRow = decode(raw)?;
            println!("{}", super::log::line(&r));
        }
        "checkpoint" => {
            let c: CheckpointRow = decode(raw)?;
            let message = Some(&c.message)
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {}", text::line(m)))
                .unwrap_or_default();
            println!(
                "{}  checkpoint {} of /{} ({}) [{}]{message}",
                time(c.time_ms),
                c.id,
                c.zone,
                text::count(c.files, "file"),
                c.via
            );
        }
        _ => failure(raw)?,
    }
    Ok(())
}

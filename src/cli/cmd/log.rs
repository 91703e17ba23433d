//! `wardfs log`: the change journal, newest first.

use crate::cli::output::{print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::client::encode;
use crate::core::text;
use crate::state::JournalRow;

/// Show the change journal, newest first
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only changes to this path or beneath it (e.g. /workspace/src)
    pub path: Option<String>,
    /// Only rows of this zone: cache, workspace, or sandboxes (the provisioned sandboxes'
    /// lifecycle: created, paused, down, resumed, destroyed, …)
    #[arg(long)]
    pub zone: Option<String>,
    /// Most entries to show
    #[arg(short = 'n', long, default_value_t = 50)]
    pub limit: usize,
}

#[derive(serde::Deserialize)]
struct LogBody {
    entries: Vec<JournalRow>,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let mut route = format!("/v1/log?limit={}", a.limit);
    if let Some(p) = ctx.vpath_opt(a.path.as_deref()).await? {
        route.push_str(&format!("&path={}", encode(&p)));
    }
    if let Some(z) = &a.zone {
        route.push_str(&format!("&zone={}", encode(z)));
    }
    let raw = ctx.client.get_raw(&route).await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let body: LogBody = crate::cli::output::decode(&raw)?;
    for r in &body.entries {
        println!("{}", line(r));
    }
    Ok(Outcome::Ok)
}

/// Formats a journal row for people, one line (`wardfs log`, `wardfs events`).
pub fn line(r: &JournalRow) -> String {
    let to = r
        .to_path
        .as_ref()
        .map(|t| format!(" -> {}", text::name(&format!("/{}/{t}", r.zone))))
        .unwrap_or_default();
    let bytes = r.bytes.map(|b| format!(" ({b} bytes)")).unwrap_or_default();
    let who = match (r.pid, r.uid) {
        (Some(p), Some(u)) => format!(" [{} pid {p} uid {u}]", r.via),
        _ => format!(" [{}]", r.via),
    };
    let detail = r
        .detail
        .as_ref()
        .map(|d| format!(": {}", text::line(d)))
        .unwrap_or_default();
    format!(
        "{}  {:<6} {}{to}{bytes}{who}{detail}",
        time(r.time_ms),
        r.op,
        text::name(&format!("/{}/{}", r.zone, r.path))
    )
}

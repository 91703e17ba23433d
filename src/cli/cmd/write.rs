//! `wardfs write`: replace a file atomically with the given text or stdin.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::WriteResult;

/// Write a file atomically (parents created); reads stdin when CONTENT is not given
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path, e.g. /workspace/notes.md
    pub path: String,
    /// The new contents (text); omit to stream stdin (any bytes)
    pub content: Option<String>,
    /// Sync the file and its directory to disk before returning (survives a power loss, not only a
    /// crash of the daemon)
    #[arg(long)]
    pub sync: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let path = ctx.vpath(&a.path).await?;
    let r: WriteResult = match &a.content {
        Some(c) => {
            let body = json!({ "path": path, "content": c, "fsync": a.sync });
            let raw = ctx.client.post_raw("/v1/fs/write", &body).await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            crate::cli::output::decode(&raw)?
        }
        None => ctx.client.upload(&path, a.sync, tokio::io::stdin()).await?,
    };
    if ctx.json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        println!(
            "{} {} ({} bytes)",
            if r.created { "created" } else { "wrote" },
            text::name(&r.path),
            r.bytes
        );
    }
    Ok(Outcome::Ok)
}

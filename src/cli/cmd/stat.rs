//! `wardfs stat`: describe one path.

use serde_json::json;

use crate::cli::output::{print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::StatResult;

/// Describe a path (symlinks are not followed)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path
    pub path: String,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw("/v1/fs/stat", &json!({ "path": ctx.vpath(&a.path).await? }))
        .await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let s: StatResult = crate::cli::output::decode(&raw)?;
    println!("path:  {}", text::name(&s.path));
    println!(
        "kind:  {}",
        serde_json::to_value(s.kind)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default()
    );
    println!("size:  {}", s.size);
    println!("mode:  {:04o}", s.mode);
    println!("mtime: {}", time(s.mtime_ms));
    println!("links: {}", s.nlink);
    if let Some(t) = &s.target {
        println!("target: {}", text::name(t));
    }
    if s.read_only {
        println!("zone:  read-only");
    }
    Ok(Outcome::Ok)
}

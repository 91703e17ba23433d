//! `wardfs ls`: list a directory.

use serde_json::json;

use crate::cli::output::{print_json, size, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::{EntryKind, ListResult};

/// List a directory (default: / , the zones)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path of a directory
    #[arg(default_value = "/")]
    pub path: String,
    /// Long format: kind, size, modification time, name
    #[arg(short, long)]
    pub long: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw("/v1/fs/list", &json!({ "path": ctx.vpath(&a.path).await? }))
        .await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let r: ListResult = crate::cli::output::decode(&raw)?;
    for e in &r.entries {
        let suffix = match e.kind {
            EntryKind::Dir => "/",
            EntryKind::Symlink => "@",
            _ => "",
        };
        if a.long {
            let kind = match e.kind {
                EntryKind::File => "file",
                EntryKind::Dir => "dir",
                EntryKind::Symlink => "link",
                EntryKind::Other => "other",
            };
            println!(
                "{kind:<5} {:>10}  {}  {}{suffix}",
                size(e.size),
                time(e.mtime_ms),
                text::name(&e.name)
            );
        } else {
            println!("{}{suffix}", text::name(&e.name));
        }
    }
    for name in &r.skipped {
        // Escaped by the daemon already: control characters included.
        eprintln!("not listed, its name is not UTF-8: {}", text::line(name));
    }
    Ok(Outcome::Ok)
}

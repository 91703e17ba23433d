//! `wardfs gc`: ask the daemon to delete old journal rows, discarded staged commits, stray staged
//! refs, leftover temporary files and checkpoints past their retention now (it also does so every hour on its own).

use crate::cli::output::{print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::proto::GcReport;

/// Delete old journal rows, discarded staged commits and leftover temp files now
#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(ctx: &Ctx, _: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw("/v1/gc", &serde_json::json!({}))
        .await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let r: GcReport = crate::cli::output::decode(&raw)?;
    match r.before_ms {
        Some(before) => println!(
            "journal: removed {} older than {} (keep_days = {})",
            crate::core::text::count(r.journal_rows, "row"),
            time(before),
            r.keep_days
        ),
        None => println!("journal: kept forever (keep_days = 0)"),
    }
    println!(
        "staged commits: removed {} discarded",
        r.staged_commits.len()
    );
    for id in &r.staged_commits {
        println!("  {id}");
    }
    println!("staged refs: removed {}", r.refs.len());
    for name in &r.refs {
        println!("  {name}");
    }
    println!("temp files: removed {}", r.temp_files.len());
    for p in &r.temp_files {
        println!("  {p}");
    }
    println!(
        "checkpoints: removed {} (and {} objects only they held)",
        r.checkpoints, r.checkpoint_objects
    );
    Ok(Outcome::Ok)
}

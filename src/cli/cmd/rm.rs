//! `wardfs rm`: delete a file, or a directory with -r.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};

/// Delete a file or symlink; a directory with -r
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual paths to delete
    #[arg(required = true)]
    pub paths: Vec<String>,
    /// Delete directories and everything in them
    #[arg(short, long)]
    pub recursive: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    for p in &ctx.vpaths(&a.paths).await? {
        let raw = ctx
            .client
            .post_raw(
                "/v1/fs/delete",
                &json!({ "path": p, "recursive": a.recursive }),
            )
            .await?;
        if ctx.json {
            print_json(&raw);
        }
    }
    Ok(Outcome::Ok)
}

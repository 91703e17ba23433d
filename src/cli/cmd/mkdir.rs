//! `wardfs mkdir`: create a directory.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};

/// Create a directory (-p: with missing parents, no error if it exists)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path of the new directory
    pub path: String,
    /// Create missing parents; succeed if the directory exists
    #[arg(short, long)]
    pub parents: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw(
            "/v1/fs/mkdir",
            &json!({ "path": ctx.vpath(&a.path).await?, "parents": a.parents }),
        )
        .await?;
    if ctx.json {
        print_json(&raw);
    }
    Ok(Outcome::Ok)
}

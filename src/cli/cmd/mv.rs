//! `wardfs mv`: move or rename a file or directory.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};

/// Move or rename a file or directory (also between zones)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path to move
    pub from: String,
    /// Its new virtual path
    pub to: String,
    /// Replace TO if it exists
    #[arg(short, long)]
    pub force: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw(
            "/v1/fs/move",
            &json!({ "from": ctx.vpath(&a.from).await?, "to": ctx.vpath(&a.to).await?, "overwrite": a.force }),
        )
        .await?;
    if ctx.json {
        print_json(&raw);
    }
    Ok(Outcome::Ok)
}

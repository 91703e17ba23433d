//! `wardfs resolve`: print the real path behind a virtual path.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::ResolveResult;

/// Print the real path behind a virtual path (for tools working outside wardfs)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path
    pub path: String,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw(
            "/v1/fs/resolve",
            &json!({ "path": ctx.vpath(&a.path).await? }),
        )
        .await?;
    if ctx.json {
        print_json(&raw);
    } else {
        let r: ResolveResult = crate::cli::output::decode(&raw)?;
        println!("{}", r.real_path);
    }
    Ok(Outcome::Ok)
}

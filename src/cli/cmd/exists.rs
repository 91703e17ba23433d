//! `wardfs exists`: test whether a path exists (exit 0 if it does, 1 if not).

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::ExistsResult;

/// Test whether a path exists (exit status 0 yes, 1 no)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path
    pub path: String,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx
        .client
        .post_raw(
            "/v1/fs/exists",
            &json!({ "path": ctx.vpath(&a.path).await? }),
        )
        .await?;
    let r: ExistsResult = crate::cli::output::decode(&raw)?;
    if ctx.json {
        print_json(&raw);
    } else {
        println!("{}", if r.exists { "yes" } else { "no" });
    }
    Ok(if r.exists {
        Outcome::Ok
    } else {
        Outcome::NothingFound
    })
}

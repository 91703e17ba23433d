//! `wardfs edit`: replace an exact string in a text file.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::EditResult;

/// Replace an exact string in a file (it must occur once unless --all)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path of a text file
    pub path: String,
    /// The exact text to replace
    pub old: String,
    /// The replacement
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one
    #[arg(long)]
    pub all: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let body = json!({ "path": ctx.vpath(&a.path).await?, "old": a.old, "new": a.new, "replace_all": a.all });
    let raw = ctx.client.post_raw("/v1/fs/edit", &body).await?;
    if ctx.json {
        print_json(&raw);
    } else {
        let r: EditResult = crate::cli::output::decode(&raw)?;
        println!(
            "{}: replaced {} occurrence{}",
            text::name(&r.path),
            r.replacements,
            if r.replacements == 1 { "" } else { "s" }
        );
    }
    Ok(Outcome::Ok)
}

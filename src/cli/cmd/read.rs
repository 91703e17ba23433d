//! `wardfs read`: print a text file, or a window of its lines.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::ReadResult;

/// Print a UTF-8 text file, whole or a window of lines
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path, e.g. /workspace/src/main.rs
    pub path: String,
    /// First line to print (1-based)
    #[arg(long)]
    pub offset: Option<u64>,
    /// Number of lines to print
    #[arg(long)]
    pub limit: Option<u64>,
    /// Prefix each line with its number
    #[arg(short = 'n', long)]
    pub line_numbers: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let body = json!({ "path": ctx.vpath(&a.path).await?, "offset": a.offset, "limit": a.limit });
    if ctx.json {
        print_json(&ctx.client.post_raw("/v1/fs/read", &body).await?);
        return Ok(Outcome::Ok);
    }
    let r: ReadResult = ctx.client.post("/v1/fs/read", &body).await?;
    if a.line_numbers {
        for (i, line) in r.content.split_inclusive('\n').enumerate() {
            print!("{:>6}\t{line}", r.offset + i as u64);
        }
    } else {
        print!("{}", r.content);
    }
    if r.truncated {
        eprintln!(
            "(lines {}-{} of {}; use --offset/--limit for more)",
            r.offset,
            r.offset + r.lines.saturating_sub(1),
            r.total_lines
        );
    }
    Ok(Outcome::Ok)
}

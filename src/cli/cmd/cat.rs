//! `wardfs cat`: stream a file's raw bytes to stdout (binary-safe).

use crate::cli::{ClientError, Ctx, Outcome};

/// Write a file's raw bytes to stdout (binary-safe, streamed)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Virtual path, e.g. /cache/paper.pdf
    pub path: String,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let mut out = tokio::io::stdout();
    ctx.client
        .download(&ctx.vpath(&a.path).await?, &mut out)
        .await?;
    Ok(Outcome::Ok)
}

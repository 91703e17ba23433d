//! `wardfs glob`: find paths by glob, newest first.

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::{GlobOptions, GlobResult};

/// Find files by glob, newest first ('*.rs' matches names anywhere; 'src/**/*.rs' matches paths)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The glob
    pub pattern: String,
    /// Directory to search
    #[arg(default_value = "/workspace")]
    pub path: String,
    /// Include hidden files and directories
    #[arg(long)]
    pub hidden: bool,
    /// Do not honour .gitignore / .ignore files
    #[arg(long)]
    pub no_ignore: bool,
    /// What to return: file, dir or any
    #[arg(long, default_value = "file")]
    pub kind: String,
    /// Most paths to return
    #[arg(long)]
    pub limit: Option<usize>,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let opts = GlobOptions {
        pattern: a.pattern.clone(),
        path: Some(ctx.vpath(&a.path).await?),
        gitignore: !a.no_ignore,
        hidden: a.hidden,
        kind: Some(a.kind.clone()),
        limit: a.limit,
    };
    let raw = ctx.client.post_raw("/v1/fs/glob", &opts).await?;
    let r: GlobResult = crate::cli::output::decode(&raw)?;
    if ctx.json {
        print_json(&raw);
    } else {
        // One write for the lot: stdout is line-buffered, and thousands of paths are common.
        use std::io::Write;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for m in &r.matches {
            let _ = writeln!(out, "{}", text::name(&m.path));
        }
        let _ = out.flush();
        if r.truncated {
            eprintln!(
                "(showing {} of {} matches; raise --limit)",
                r.matches.len(),
                r.total
            );
        }
    }
    Ok(if r.total == 0 {
        Outcome::NothingFound
    } else {
        Outcome::Ok
    })
}

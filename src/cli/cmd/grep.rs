//! `wardfs grep`: search file contents, ripgrep-style.

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::{GrepMode, GrepOptions, GrepResult, LineKind};

/// Search file contents with a regex (or -F literal), ripgrep-style
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Regular expression (Rust syntax), or a literal with -F
    pub pattern: String,
    /// File or directory to search
    #[arg(default_value = "/workspace")]
    pub path: String,
    /// Case-insensitive
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// Treat the pattern as a literal string
    #[arg(short = 'F', long)]
    pub fixed_strings: bool,
    /// Lines of context around each match
    #[arg(short = 'C', long)]
    pub context: Option<usize>,
    /// Lines of context before each match
    #[arg(short = 'B', long)]
    pub before: Option<usize>,
    /// Lines of context after each match
    #[arg(short = 'A', long)]
    pub after: Option<usize>,
    /// Only search files matching this glob ('!' excludes); repeatable
    #[arg(short = 'g', long)]
    pub glob: Vec<String>,
    /// Only search files of this type (rust, py, js, ...); repeatable
    #[arg(short = 't', long = "type")]
    pub file_type: Vec<String>,
    /// Print only the paths of files with matches
    #[arg(short = 'l', long, conflicts_with = "count")]
    pub files_with_matches: bool,
    /// Print the number of matching lines per file
    #[arg(short = 'c', long)]
    pub count: bool,
    /// Most results (lines, files or counts)
    #[arg(long)]
    pub limit: Option<usize>,
    /// Include hidden files and directories
    #[arg(long)]
    pub hidden: bool,
    /// Do not honour .gitignore / .ignore files
    #[arg(long)]
    pub no_ignore: bool,
    /// Accepted for ripgrep compatibility: line numbers are always shown
    #[arg(short = 'n', long = "line-number", hide = true)]
    pub _line_number: bool,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let mode = if a.files_with_matches {
        GrepMode::Files
    } else if a.count {
        GrepMode::Count
    } else {
        GrepMode::Content
    };
    let opts = GrepOptions {
        pattern: a.pattern.clone(),
        path: Some(ctx.vpath(&a.path).await?),
        literal: a.fixed_strings,
        ignore_case: a.ignore_case,
        glob: a.glob.clone(),
        file_type: a.file_type.clone(),
        context: a.context,
        before: a.before,
        after: a.after,
        mode,
        limit: a.limit,
        gitignore: !a.no_ignore,
        hidden: a.hidden,
    };
    let raw = ctx.client.post_raw("/v1/fs/grep", &opts).await?;
    let r: GrepResult = crate::cli::output::decode(&raw)?;
    if ctx.json {
        print_json(&raw);
        return Ok(if r.total == 0 {
            Outcome::NothingFound
        } else {
            Outcome::Ok
        });
    }
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match mode {
        GrepMode::Files => {
            for f in &r.files {
                let _ = writeln!(out, "{}", text::name(f));
            }
        }
        GrepMode::Count => {
            for c in &r.counts {
                let _ = writeln!(out, "{}:{}", text::name(&c.path), c.count);
            }
        }
        GrepMode::Content => {
            let with_context = a.context.or(a.before).or(a.after).unwrap_or(0) > 0;
            let mut prev: Option<(&str, u64)> = None;
            for l in &r.lines {
                if with_context {
                    if let Some((p, n)) = prev {
                        if p != l.path || l.line > n + 1 {
                            let _ = writeln!(out, "--");
                        }
                    }
                }
                let sep = if l.kind == LineKind::Match { ':' } else { '-' };
                let _ = writeln!(
                    out,
                    "{}{sep}{}{sep}{}",
                    text::name(&l.path),
                    l.line,
                    text::line(&l.text)
                );
                prev = Some((&l.path, l.line));
            }
        }
    }
    let _ = out.flush();
    // Like ripgrep's warnings: on stderr, so piped output stays lines of matches.
    for s in &r.skipped {
        eprintln!(
            "{}: not searched: {}",
            text::name(&s.path),
            text::line(&s.reason)
        );
    }
    if r.skipped_total > r.skipped.len() {
        eprintln!(
            "({} more files not searched)",
            r.skipped_total - r.skipped.len()
        );
    }
    if r.truncated {
        eprintln!("(results stopped at the limit; narrow the search or raise --limit)");
    }
    Ok(if r.total == 0 {
        Outcome::NothingFound
    } else {
        Outcome::Ok
    })
}

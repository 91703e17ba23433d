//! `wardfs staged`: review staged commits, then push or discard them (a human's decisions).

use std::io::{IsTerminal, Write};

use serde_json::json;

use crate::cli::cmd::git::git_tick;
use crate::cli::output::{print_json, time};
use crate::cli::progress::View;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::git::{DiscardResult, PushResult, StagedCommit};

/// Review staged commits, then push or discard them
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: StagedCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum StagedCommand {
    /// List staged commits, newest first
    List {
        /// Only those in this state (staged, rebased, pushed, conflicted, rejected, discarded)
        #[arg(long)]
        state: Option<String>,
    },
    /// Show a staged commit with its diff (paged through $PAGER on a terminal)
    Show {
        /// The staged commit to show (see `wardfs staged list`)
        id: String,
        /// Only the files and their line counts
        #[arg(long)]
        stat: bool,
        /// Never page (colour follows the terminal and NO_COLOR)
        #[arg(long)]
        no_pager: bool,
    },
    /// Push a staged commit to its branch (rebased first when the remote moved)
    Push {
        /// The staged commit to push (see `wardfs staged list`)
        id: String,
        /// Push to the branch wardfs/<id> and open a pull request instead
        #[arg(long, conflicts_with = "direct")]
        pr: bool,
        /// Push to the commit's branch (the default)
        #[arg(long)]
        direct: bool,
    },
    /// Discard a staged commit (its files stay as they are unless --revert)
    Discard {
        /// The staged commit to discard (see `wardfs staged list`)
        id: String,
        /// Also put its files back to how they were pulled
        #[arg(long)]
        revert: bool,
    },
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    match &a.command {
        StagedCommand::List { state } => {
            let route = match state {
                Some(s) => format!("/v1/git/staged?state={}", crate::client::encode(s)),
                None => "/v1/git/staged".into(),
            };
            let raw = ctx.client.get_raw(&route).await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            #[derive(serde::Deserialize)]
            struct Body {
                staged: Vec<StagedCommit>,
            }
            let b: Body = crate::cli::output::decode(&raw)?;
            if b.staged.is_empty() {
                println!("nothing staged (`wardfs git stage -m MESSAGE`)");
            }
            for c in &b.staged {
                println!(
                    "{}  {:<10} {:<12} {:>9} +{:<5} -{:<5} {}  {}",
                    c.id,
                    c.state,
                    c.branch,
                    text::count(c.files.len() as u64, "file"),
                    c.additions,
                    c.deletions,
                    time(c.created_at),
                    text::line(c.message.lines().next().unwrap_or(""))
                );
            }
            Ok(Outcome::Ok)
        }
        StagedCommand::Show { id, stat, no_pager } => {
            let raw = ctx
                .client
                .post_raw("/v1/git/staged/show", &json!({ "id": id }))
                .await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            let c: StagedCommit = crate::cli::output::decode(&raw)?;
            let paged = std::io::stdout().is_terminal() && !no_pager && !stat;
            let text = render(&c, *stat, crate::cli::output::color(&std::io::stdout()));
            if paged {
                page(&text);
            } else {
                print!("{text}");
            }
            Ok(Outcome::Ok)
        }
        StagedCommand::Push { id, pr, direct: _ } => {
            let mut view = View::new(ctx.json);
            let r = ctx
                .client
                .post_progress(
                    "/v1/git/push",
                    &json!({ "id": id, "pr": pr, "progress": true }),
                    |p| view.update(git_tick(p)),
                )
                .await;
            view.finish();
            let r: PushResult = r?;
            if ctx.json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
                return Ok(Outcome::Ok);
            }
            println!(
                "pushed {} as {} to {}{}",
                r.id,
                &r.commit_sha[..12],
                r.pushed_ref,
                if r.rebased {
                    " (rebased onto the moved branch)"
                } else {
                    ""
                }
            );
            if let Some(u) = &r.url {
                println!("pull request: {u}");
            }
            Ok(Outcome::Ok)
        }
        StagedCommand::Discard { id, revert } => {
            let raw = ctx
                .client
                .post_raw("/v1/git/discard", &json!({ "id": id, "revert": revert }))
                .await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            let r: DiscardResult = crate::cli::output::decode(&raw)?;
            println!("discarded {}", r.id);
            for p in &r.reverted {
                println!("  reverted {}", text::name(p));
            }
            for k in &r.kept {
                println!("  kept {}: {}", text::name(&k.path), text::line(&k.reason));
            }
            Ok(Outcome::Ok)
        }
    }
}

/// The commit as text: header, stat, and (unless `stat`) each file's patch.
fn render(c: &StagedCommit, stat: bool, color: bool) -> String {
    let paint = |code: &str, s: &str| {
        if color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    };
    let mut out = String::new();
    out.push_str(&paint("33", &format!("staged {}", c.id)));
    out.push_str(&format!(
        "  [{}]\nrepo:    {} ({})\nbranch:  {}\nbase:    {}\ncommit:  {}\ncreated: {}\n",
        c.state,
        text::name(&c.repo),
        text::line(&c.url),
        c.branch,
        c.base,
        c.commit,
        time(c.created_at)
    ));
    if c.zone != "workspace" {
        out.push_str(&format!("from:    {}\n", text::name(&c.zone)));
    }
    if let Some(r) = &c.reason {
        out.push_str(&format!("why:     {}\n", text::line(r)));
    }
    if let Some(u) = &c.pr_url {
        out.push_str(&format!("pull request: {u}\n"));
    }
    out.push('\n');
    for line in c.message.lines() {
        out.push_str(&format!("    {}\n", text::line(line)));
    }
    out.push('\n');
    for f in &c.files {
        let note = if f.binary {
            " (binary)".to_string()
        } else if f.oversized {
            " (too large to show)".to_string()
        } else {
            format!(
                " {}{}",
                paint("32", &format!("+{}", f.additions)),
                paint("31", &format!(" -{}", f.deletions))
            )
        };
        out.push_str(&format!(
            " {:<6} {}{note}\n",
            f.operation,
            text::name(&f.path)
        ));
        for w in &f.writers {
            out.push_str(&format!(
                "        by {}: {}\n",
                text::name(&w.zone),
                text::line(&w.to_string())
            ));
        }
    }
    out.push_str(&format!(
        " {} changed, {} insertions(+), {} deletions(-)\n",
        text::count(c.files.len() as u64, "file"),
        c.additions,
        c.deletions
    ));
    if stat {
        return out;
    }
    for f in &c.files {
        out.push('\n');
        match &f.diff {
            Some(d) => {
                for line in d.lines() {
                    let line = &*text::line(line);
                    let colored = if line.starts_with("diff --git")
                        || line.starts_with("+++")
                        || line.starts_with("---")
                        || line.starts_with("index ")
                    {
                        paint("1", line)
                    } else if line.starts_with('+') {
                        paint("32", line)
                    } else if line.starts_with('-') {
                        paint("31", line)
                    } else if line.starts_with("@@") {
                        paint("36", line)
                    } else {
                        line.to_string()
                    };
                    out.push_str(&colored);
                    out.push('\n');
                }
            }
            None => out.push_str(&format!(
                "{}: {}\n",
                text::name(&f.path),
                if f.binary {
                    "binary file, not shown"
                } else {
                    "too large to show (git.max_diff_bytes)"
                }
            )),
        }
    }
    out
}

/// Shows `text` through $PAGER (default `less -FRX`), or prints it when no pager starts.
fn page(text: &str) {
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "less -FRX".into());
    let child = std::process::Command::new("sh")
        .args(["-c", &pager])
        .stdin(std::process::Stdio::piped())
        .spawn();
    match child {
        Ok(mut c) => {
            if let Some(mut stdin) = c.stdin.take() {
                let _ = stdin.write_all(text.as_bytes());
            }
            let _ = c.wait();
        }
        Err(_) => print!("{text}"),
    }
}

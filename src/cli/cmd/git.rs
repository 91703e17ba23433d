//! `wardfs git`: pull a repository into the workspace, see what changed, stage it for review.

use std::io::IsTerminal;

use serde_json::json;

use crate::cli::output::{print_json, size};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::git::{PullResult, StagedCommit, StatusResult};

/// Pull a repository into the workspace, see what the agent changed, stage it for review
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: GitCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum GitCommand {
    /// Pull a branch into a workspace directory (again: fast-forwards untouched files)
    ///
    /// Files the agent changed are never overwritten: a file changed both upstream and locally
    /// is reported as a conflict and left as it is.
    Pull {
        /// The remote: a URL (https://, ssh://, git://, user@host:path, a path) or owner/repo
        remote: String,
        /// The branch (default: the remote's default branch)
        #[arg(long, short)]
        branch: Option<String>,
        /// Pull only this file or directory of the repository (repeatable)
        #[arg(long = "path", short = 'p', value_name = "PATH")]
        paths: Vec<String>,
        /// The workspace directory to pull into (default: /workspace/<repository name>)
        #[arg(long)]
        into: Option<String>,
    },
    /// List created, modified, deleted and conflicted files of the pulled repositories
    Status {
        /// Only the repository holding this path
        path: Option<String>,
        /// Re-hash every file (finds changes made beside wardfs, which the journal cannot see)
        #[arg(long)]
        rescan: bool,
    },
    /// Stage changes as a commit for a human to review (`wardfs staged show`) and push
    Stage {
        /// Files or directories to stage (default: every change not staged yet)
        files: Vec<String>,
        /// The commit message
        #[arg(long, short)]
        message: String,
        /// The branch it will be pushed to (default: the pulled branch)
        #[arg(long, short)]
        branch: Option<String>,
        /// The repository's directory (needed when several are pulled)
        #[arg(long)]
        repo: Option<String>,
    },
    /// Mark a file reported as a conflict by a pull as merged, so it can be staged
    Resolve {
        /// The file, e.g. /workspace/project/src/lib.rs
        path: String,
    },
}

/// Prints progress on stderr when it is a terminal.
pub fn progress_printer() -> impl FnMut(&serde_json::Value) {
    let tty = std::io::stderr().is_terminal();
    move |p: &serde_json::Value| {
        if !tty {
            return;
        }
        let phase = p["phase"].as_str().unwrap_or("");
        let done = p["done"].as_u64().unwrap_or(0);
        let total = p["total"].as_u64().unwrap_or(0);
        let bytes = p["bytes"].as_u64().unwrap_or(0);
        let unit = if phase == "write" { "files" } else { "objects" };
        let pct = (done * 100).checked_div(total).unwrap_or(0);
        eprint!(
            "\r\x1b[2K{phase}: {done}/{total} {unit} ({pct}%), {}",
            size(bytes)
        );
        if total > 0 && done == total {
            eprintln!();
        }
    }
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    match &a.command {
        GitCommand::Pull {
            remote,
            branch,
            paths,
            into,
        } => {
            let body = json!({
                "remote": remote, "branch": branch, "paths": paths, "into": into, "progress": true,
            });
            let r: PullResult = ctx
                .client
                .post_progress("/v1/git/pull", &body, progress_printer())
                .await?;
            if std::io::stderr().is_terminal() {
                eprint!("\r\x1b[2K");
            }
            if ctx.json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
                return Ok(Outcome::Ok);
            }
            println!(
                "pulled {} {} at {} into {}: {} written, {} deleted, {} unchanged ({} ms)",
                r.url,
                r.branch,
                &r.commit[..12],
                r.repo,
                r.written,
                r.deleted,
                r.unchanged,
                r.duration_ms
            );
            if !r.conflicts.is_empty() {
                println!("changed both upstream and here (left as they are; merge, then `wardfs git resolve PATH`):");
                for c in &r.conflicts {
                    println!("  {}  ({})", c.path, c.reason);
                }
            }
            for s in &r.skipped {
                println!("skipped {}: {}", s.path, s.reason);
            }
            Ok(Outcome::Ok)
        }
        GitCommand::Status { path, rescan } => {
            let raw = ctx
                .client
                .post_raw("/v1/git/status", &json!({ "repo": path, "rescan": rescan }))
                .await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            let s: StatusResult = crate::cli::output::decode(&raw)?;
            if s.repos.is_empty() {
                println!("no repository is pulled (`wardfs git pull URL`)");
            }
            for r in &s.repos {
                println!(
                    "{} ({} {} at {})",
                    r.repo,
                    r.url,
                    r.branch,
                    &r.base[..12.min(r.base.len())]
                );
                if r.changes.is_empty() {
                    println!("  no changes");
                }
                for c in &r.changes {
                    let tag = match c.state.as_str() {
                        "created" => "A",
                        "modified" => "M",
                        "deleted" => "D",
                        _ => "C",
                    };
                    let note = if c.state == "conflict" {
                        "  (changed upstream too)"
                    } else {
                        ""
                    };
                    println!("  {tag} {}{note}", c.path);
                }
            }
            Ok(Outcome::Ok)
        }
        GitCommand::Stage {
            files,
            message,
            branch,
            repo,
        } => {
            let raw = ctx
                .client
                .post_raw(
                    "/v1/git/stage",
                    &json!({ "files": files, "message": message, "branch": branch, "repo": repo }),
                )
                .await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            let c: StagedCommit = crate::cli::output::decode(&raw)?;
            println!(
                "staged {}: {} files (+{} -{}) for {} of {}",
                c.id,
                c.files.len(),
                c.additions,
                c.deletions,
                c.branch,
                c.url
            );
            for f in &c.files {
                println!("  {:<6} {}", f.operation, f.path);
            }
            println!(
                "review: wardfs staged show {id}    push: wardfs staged push {id}",
                id = c.id
            );
            Ok(Outcome::Ok)
        }
        GitCommand::Resolve { path } => {
            let raw = ctx
                .client
                .post_raw("/v1/git/resolve", &json!({ "path": path }))
                .await?;
            if ctx.json {
                print_json(&raw);
            } else {
                println!("{path}: resolved; it can be staged now");
            }
            Ok(Outcome::Ok)
        }
    }
}

//! `wardfs git`: pull a repository into the workspace, see what changed, stage it for review;
//! `git watch` and the hook it sets up are in `git_watch`.

use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::progress::{Tick, View};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text::{self, count};
use crate::git::{PathNote, PullResult, StagedCommit, StatusResult};

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
        /// The files of this fork instead of the workspace's (`wardfs forks` lists them)
        #[arg(long, value_name = "NAME")]
        fork: Option<String>,
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
        /// Stage the changes of this fork instead of the workspace's (`wardfs forks` lists them)
        #[arg(long, value_name = "NAME")]
        fork: Option<String>,
    },
    /// Mark a file reported as a conflict by a pull as merged, so it can be staged
    Resolve {
        /// The file, e.g. /workspace/project/src/lib.rs
        path: String,
    },
    /// Let git in a checkout inside a zone ask wardfs what changed (git's file-system monitor)
    ///
    /// Sets `core.fsmonitor` (this binary and the daemon's socket) and `core.untrackedCache` in
    /// the config of the repository holding PATH (a checkout of your own inside a zone, through
    /// the mount or in the zone's directory, a fork's too): `git status` then looks only at the
    /// paths the journal says changed since its last run, whoever changed them. With `--zone`,
    /// every checkout in the zone, through an include in your global git config instead.
    Watch {
        /// A path in the checkout (default: where you stand)
        #[arg(conflicts_with = "zone")]
        path: Option<String>,
        /// Every checkout in this zone (`workspace`, `cache`): writes an include into your
        /// global git config, nothing into the checkouts
        #[arg(long, value_name = "ZONE")]
        zone: Option<String>,
        /// Turn it off again
        #[arg(long)]
        off: bool,
    },
    /// Answer git's file-system monitor (git runs this as `core.fsmonitor`; see `git watch`)
    ///
    /// Prints git's answer for the checkout in the current directory: the new token, NUL, then
    /// each path changed since TOKEN and a NUL, or `/` for "look at everything". With --json,
    /// the daemon's answer, with the reason when it is everything.
    #[command(hide = true)]
    FsmonitorHook {
        /// The hook protocol's version (2; anything else is answered `/`)
        version: String,
        /// The token of the last answer
        #[arg(default_value = "", allow_hyphen_values = true)]
        token: String,
    },
}

/// Prints on stderr what status could not look at (and stage left out), so it is never
/// dropped silently: each path with why, then how many more.
fn left_out(skipped: &[PathNote], total: usize) {
    for s in skipped {
        eprintln!(
            "  not looked at: {}: {}",
            text::name(&s.path),
            text::line(&s.reason)
        );
    }
    if total > skipped.len() {
        eprintln!(
            "  ({} more not looked at)",
            count((total - skipped.len()) as u64, "path")
        );
    }
}

/// Returns the progress update a git route streamed (`{phase, done, total, bytes}`).
pub fn git_tick(p: &serde_json::Value) -> Tick {
    let phase = p["phase"].as_str().unwrap_or("").to_string();
    let unit = if phase == "write" { "files" } else { "objects" };
    Tick {
        done: p["done"].as_u64().unwrap_or(0),
        total: p["total"].as_u64().unwrap_or(0),
        bytes: p["bytes"].as_u64(),
        unit,
        phase,
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
            let into = ctx.vpath_opt(into.as_deref()).await?;
            let body = json!({
                "remote": remote, "branch": branch, "paths": paths, "into": into, "progress": true,
            });
            let mut view = View::new(ctx.json);
            let r = ctx
                .client
                .post_progress("/v1/git/pull", &body, |p| view.update(git_tick(p)))
                .await;
            view.finish();
            let r: PullResult = r?;
            if ctx.json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
                return Ok(Outcome::Ok);
            }
            println!(
                "pulled {} {} at {} into {}: {} written, {} deleted, {} unchanged ({} ms)",
                r.url,
                r.branch,
                &r.commit[..12],
                text::name(&r.repo),
                r.written,
                r.deleted,
                r.unchanged,
                r.duration_ms
            );
            if !r.conflicts.is_empty() {
                println!("changed both upstream and here (left as they are; merge, then `wardfs git resolve PATH`):");
                for c in &r.conflicts {
                    println!("  {}  ({})", text::name(&c.path), text::line(&c.reason));
                }
            }
            for s in &r.skipped {
                println!("skipped {}: {}", text::name(&s.path), text::line(&s.reason));
            }
            if r.skipped_total > r.skipped.len() {
                println!(
                    "({} more entries skipped)",
                    r.skipped_total - r.skipped.len()
                );
            }
            Ok(Outcome::Ok)
        }
        GitCommand::Status { path, rescan, fork } => {
            let raw = ctx
                .client
                .post_raw(
                    "/v1/git/status",
                    &json!({
                        "repo": ctx.vpath_opt(path.as_deref()).await?,
                        "rescan": rescan,
                        "fork": fork,
                    }),
                )
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
                    text::name(&r.repo),
                    text::line(&r.url),
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
                    println!("  {tag} {}{note}", text::name(&c.path));
                }
                left_out(&r.skipped, r.skipped_total);
            }
            Ok(Outcome::Ok)
        }
        GitCommand::Stage {
            files,
            message,
            branch,
            repo,
            fork,
        } => {
            let raw = ctx
                .client
                .post_raw(
                    "/v1/git/stage",
                    &json!({
                        "files": ctx.stage_paths(files).await?,
                        "message": message,
                        "branch": branch,
                        "repo": ctx.vpath_opt(repo.as_deref()).await?,
                        "fork": fork,
                    }),
                )
                .await?;
            if ctx.json {
                print_json(&raw);
                return Ok(Outcome::Ok);
            }
            let c: StagedCommit = crate::cli::output::decode(&raw)?;
            println!(
                "staged {}: {} (+{} -{}) for {} of {}",
                c.id,
                count(c.files.len() as u64, "file"),
                c.additions,
                c.deletions,
                c.branch,
                text::line(&c.url)
            );
            if c.zone != "workspace" {
                println!("  from {}", text::name(&c.zone));
            }
            for f in &c.files {
                println!("  {:<6} {}", f.operation, text::name(&f.path));
            }
            left_out(&c.skipped, c.skipped_total);
            println!(
                "review: wardfs staged show {id}    push: wardfs staged push {id}",
                id = c.id
            );
            Ok(Outcome::Ok)
        }
        GitCommand::Watch { path, zone, off } => {
            super::git_watch::watch(ctx, path.as_deref(), zone.as_deref(), *off).await
        }
        GitCommand::FsmonitorHook { version, token } => {
            super::git_watch::hook(ctx, version, token).await
        }
        GitCommand::Resolve { path } => {
            let path = ctx.vpath(path).await?;
            let raw = ctx
                .client
                .post_raw("/v1/git/resolve", &json!({ "path": path }))
                .await?;
            if ctx.json {
                print_json(&raw);
            } else {
                println!("{}: resolved; it can be staged now", text::name(&path));
            }
            Ok(Outcome::Ok)
        }
    }
}

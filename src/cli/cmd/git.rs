//! `wardfs git`: pull a repository into the workspace, see what changed, stage it for review;
//! `git watch` and the hook it sets up are in `git_watch`.

use serde::de::DeserializeOwned;
use serde_json::json;

use crate::cli::output::print_json;
use crate::cli::progress::{Tick, View};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text::{self, count};
use crate::git::{Change, PathNote, PullResult, StagedCommit, StatusResult};

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

/// Runs a `wardfs git` subcommand.
pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    match &a.command {
        GitCommand::Pull {
            remote,
            branch,
            paths,
            into,
        } => pull(ctx, remote, branch.as_deref(), paths, into.as_deref()).await,
        GitCommand::Status { path, rescan, fork } => {
            status(ctx, path.as_deref(), *rescan, fork.as_deref()).await
        }
        GitCommand::Stage {
            files,
            message,
            branch,
            repo,
            fork,
        } => {
            let to = StageTo {
                branch: branch.as_deref(),
                repo: repo.as_deref(),
                fork: fork.as_deref(),
            };
            stage(ctx, files, message, to).await
        }
        GitCommand::Watch { path, zone, off } => {
            super::git_watch::watch(ctx, path.as_deref(), zone.as_deref(), *off).await
        }
        GitCommand::FsmonitorHook { version, token } => {
            super::git_watch::hook(ctx, version, token).await
        }
        GitCommand::Resolve { path } => resolve(ctx, path).await,
    }
}

/// `git pull`: pulls with a progress view, then prints what the pull did.
async fn pull(
    ctx: &Ctx,
    remote: &str,
    branch: Option<&str>,
    paths: &[String],
    into: Option<&str>,
) -> Result<Outcome, ClientError> {
    let into = ctx.vpath_opt(into).await?;
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
    print_pulled(&r);
    Ok(Outcome::Ok)
}

/// Prints a pull's result: the counts, then its conflicts and the entries it skipped.
fn print_pulled(r: &PullResult) {
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
}

/// `git status`: asks for the status of the repository holding `path` (all without one).
async fn status(
    ctx: &Ctx,
    path: Option<&str>,
    rescan: bool,
    fork: Option<&str>,
) -> Result<Outcome, ClientError> {
    let body = json!({
        "repo": ctx.vpath_opt(path).await?,
        "rescan": rescan,
        "fork": fork,
    });
    post_and_print(ctx, "/v1/git/status", &body, print_status).await
}

/// Posts `body` to `route` and prints the answer: as it came with --json, else with `print`.
async fn post_and_print<T: DeserializeOwned>(
    ctx: &Ctx,
    route: &str,
    body: &serde_json::Value,
    print: fn(&T),
) -> Result<Outcome, ClientError> {
    let raw = ctx.client.post_raw(route, body).await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let answer: T = crate::cli::output::decode(&raw)?;
    print(&answer);
    Ok(Outcome::Ok)
}

/// Prints each repository's changes, one line each, and what status could not look at.
fn print_status(s: &StatusResult) {
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
            println!("{}", change_line(c));
        }
        left_out(&r.skipped, r.skipped_total);
    }
}

/// A change as status prints it: `  A path`, `M`, `D`, or `C` with a note for a conflict.
fn change_line(c: &Change) -> String {
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
    format!("  {tag} {}{note}", text::name(&c.path))
}

/// Where `git stage` puts the commit and what it reads: its options besides files and message.
struct StageTo<'a> {
    branch: Option<&'a str>,
    repo: Option<&'a str>,
    fork: Option<&'a str>,
}

/// `git stage`: stages `files` (every change without them) as a commit with `message`.
async fn stage(
    ctx: &Ctx,
    files: &[String],
    message: &str,
    to: StageTo<'_>,
) -> Result<Outcome, ClientError> {
    let body = json!({
        "files": ctx.stage_paths(files).await?,
        "message": message,
        "branch": to.branch,
        "repo": ctx.vpath_opt(to.repo).await?,
        "fork": to.fork,
    });
    post_and_print(ctx, "/v1/git/stage", &body, print_staged).await
}

/// Prints a staged commit: its counts, zone and files, what it left out, and what to do next.
fn print_staged(c: &StagedCommit) {
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
}

/// `git resolve`: marks a conflicted file as merged.
async fn resolve(ctx: &Ctx, path: &str) -> Result<Outcome, ClientError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn change(path: &str, state: &str) -> Change {
        Change {
            path: path.into(),
            state: state.into(),
        }
    }

    #[test]
    fn a_change_prints_as_its_tag_and_escaped_path() {
        for (state, line) in [
            ("created", "  A /workspace/r/x"),
            ("modified", "  M /workspace/r/x"),
            ("deleted", "  D /workspace/r/x"),
            ("conflict", "  C /workspace/r/x  (changed upstream too)"),
        ] {
            assert_eq!(change_line(&change("/workspace/r/x", state)), line);
        }
        let odd = change_line(&change("/workspace/r/e\nf", "modified"));
        assert!(!odd.contains('\n') && odd.contains("\\n"), "{odd:?}");
    }
}

//! The `wardfs` command line: `serve` runs the daemon, every other subcommand talks to it.
//!
//! One file per subcommand under `cmd/`, each a `clap::Args` struct whose doc comments are its
//! help. Output is for people by default and JSON with `--json`. Exit codes depend on the class of
//! the error (see [`exit_code`]), never on message text.
//!
//! Owns the command line: parsing, output and exit codes. It talks to the daemon only through
//! `client`; `serve` hands over to `daemon`. No room imports it.

mod cmd;
mod output;
mod progress;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

pub use crate::client::{Client, ClientError};

use crate::client::paths::{self, Layout};

use crate::config::Settings;
use crate::core::ErrorCode;

const AFTER_HELP: &str = "\
Paths name files in the zones the daemon serves, in any of three forms: virtual
(/workspace/src/lib.rs, /cache/paper.pdf), through the mount (.wardfs/mnt/workspace/src/lib.rs,
or lib.rs typed in .wardfs/mnt/workspace/src), or in a zone's own directory. Relative paths are
taken from where you stand, as git takes them.

Exit codes:
  0  success
  1  grep or glob found nothing
  2  bad usage, invalid path or argument, a config that does not load
  3  not found
  4  exists / is a directory / not a directory / not empty
  5  edit failed: no match, not unique, conflict
  6  refused: outside the zone, read-only, permission denied
  7  too large, binary, no space
  8  daemon not running, zone, sandbox or git remote unavailable
  9  internal error
`wardfs run` exits with its command's exit code, and 125 when wardfs itself failed.

Start the daemon with `wardfs serve`; the other commands find its socket from --socket,
$WARDFS_SOCKET, or the config (--config, $WARDFS_CONFIG, else the embedded default).";

/// wardfs: a virtual filesystem daemon for AI agents and the people who supervise them
#[derive(Debug, Parser)]
#[command(name = "wardfs", version, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    /// Config file (default: $WARDFS_CONFIG, else the embedded default)
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The daemon's socket (default: from the config)
    #[arg(long, global = true, env = "WARDFS_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Print machine-readable JSON instead of human output
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Serve(cmd::serve::Args),
    Doctor(cmd::doctor::Args),
    Unmount(cmd::unmount::Args),
    Read(cmd::read::Args),
    Cat(cmd::cat::Args),
    Write(cmd::write::Args),
    Edit(cmd::edit::Args),
    Rm(cmd::rm::Args),
    Ls(cmd::ls::Args),
    Stat(cmd::stat::Args),
    Exists(cmd::exists::Args),
    Mkdir(cmd::mkdir::Args),
    Mv(cmd::mv::Args),
    Glob(cmd::glob::Args),
    Grep(cmd::grep::Args),
    Resolve(cmd::resolve::Args),
    Status(cmd::status::Args),
    Log(cmd::log::Args),
    Events(cmd::events::Args),
    Git(cmd::git::Args),
    Staged(cmd::staged::Args),
    Review(cmd::review::Args),
    Gc(cmd::gc::Args),
    Checkpoint(cmd::checkpoint::Args),
    Restore(cmd::checkpoint::RestoreArgs),
    Fork(cmd::fork::Args),
    Forks(cmd::fork::ListArgs),
    Changes(cmd::fork::ChangesArgs),
    Merge(cmd::fork::MergeArgs),
    Update(cmd::fork::UpdateArgs),
    Run(cmd::run::Args),
    Runs(cmd::run::RunsArgs),
    Sandbox(cmd::sandbox::Args),
    Mirror(cmd::mirror::Args),
    Completions(cmd::completions::Args),
    InstallService(cmd::install_service::Args),
    Mcp(cmd::mcp::Args),
}

/// How a subcommand ended.
pub enum Outcome {
    Ok,
    /// Ran fine but found nothing (grep, glob, exists).
    NothingFound,
    /// Ran and printed its answer, which is a refusal of this class (a merge that conflicts):
    /// exits with the code's exit code, printing nothing more.
    Refused(ErrorCode),
    /// Ran a command elsewhere (`wardfs run --sandbox`): exits with its exit code.
    Exit(u8),
}

/// Everything a client subcommand needs.
pub struct Ctx {
    pub client: Client,
    pub json: bool,
    /// Where the zones are, asked of the daemon the first time a path is not virtual.
    layout: tokio::sync::OnceCell<Layout>,
}

impl Ctx {
    /// Returns the virtual path of a path as typed: virtual already, relative to where the
    /// caller stands, or a real path under the mount or a zone's directory ([`paths`]).
    pub async fn vpath(&self, input: &str) -> Result<String, ClientError> {
        if paths::is_virtual(input) {
            return Ok(input.to_string());
        }
        let layout = self.layout().await?;
        paths::to_virtual(input, &paths::cwd(), layout).map_err(|why| ClientError::Api {
            code: ErrorCode::InvalidPath,
            message: why,
            path: Some(input.to_string()),
        })
    }

    /// Where the zones are on this machine: the mount and each zone's directory, asked of the
    /// daemon (`/v1/status`) the first time.
    pub async fn layout(&self) -> Result<&Layout, ClientError> {
        self.layout
            .get_or_try_init(|| async {
                let s: serde_json::Value = self.client.get("/v1/status").await?;
                let zones = s["zones"].as_array().cloned().unwrap_or_default();
                Ok::<_, ClientError>(Layout::new(
                    s["mount"].as_str().unwrap_or_default(),
                    zones.iter().map(|z| {
                        let name = z["name"].as_str().unwrap_or_default().to_string();
                        (name, z["root"].as_str().map(str::to_string))
                    }),
                ))
            })
            .await
    }

    /// Returns the virtual paths of several paths as typed ([`Ctx::vpath`]).
    pub async fn vpaths(&self, inputs: &[String]) -> Result<Vec<String>, ClientError> {
        let mut out = Vec::with_capacity(inputs.len());
        for p in inputs {
            out.push(self.vpath(p).await?);
        }
        Ok(out)
    }

    /// Returns the virtual paths of files to stage: a relative path typed outside every zone
    /// stays as it is, a path in the repository (the daemon takes both).
    pub async fn stage_paths(&self, inputs: &[String]) -> Result<Vec<String>, ClientError> {
        let mut out = Vec::with_capacity(inputs.len());
        for p in inputs {
            match self.vpath(p).await {
                Ok(v) => out.push(v),
                Err(ClientError::Api {
                    code: ErrorCode::InvalidPath,
                    ..
                }) if !p.starts_with('/') => out.push(p.clone()),
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Returns the virtual path of an optional path as typed.
    pub async fn vpath_opt(&self, input: Option<&str>) -> Result<Option<String>, ClientError> {
        match input {
            Some(p) => Ok(Some(self.vpath(p).await?)),
            None => Ok(None),
        }
    }
}

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Like other Unix tools, die quietly when the reader of our output goes away (`| head`),
    // instead of panicking in the first `println!` that meets EPIPE. Not the daemon, which must
    // outlive any client it writes to, nor the MCP server, whose stdout is its protocol: it ends
    // the session itself when the client closes it.
    if !matches!(cli.command, Command::Serve(_) | Command::Mcp(_)) {
        // SAFETY: resetting a signal disposition to its default before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    if let Command::Serve(args) = &cli.command {
        return cmd::serve::run(cli.config.as_deref(), cli.socket.clone(), args);
    }
    if let Command::Doctor(args) = &cli.command {
        return cmd::doctor::run(cli.config.as_deref(), cli.socket.clone(), cli.json, args);
    }
    if let Command::Unmount(args) = &cli.command {
        return cmd::unmount::run(cli.config.as_deref(), cli.json, args);
    }
    if let Command::Completions(args) = &cli.command {
        return cmd::completions::run(args);
    }
    if let Command::InstallService(args) = &cli.command {
        return cmd::install_service::run(cli.config.as_deref(), cli.json, args);
    }
    if let Command::Mcp(args) = &cli.command {
        return cmd::mcp::run(cli.config.as_deref(), cli.socket.clone(), args);
    }
    let socket = match cli.socket.clone() {
        Some(s) => s,
        None => match Settings::load(cli.config.as_deref()) {
            Ok(s) => s.socket,
            Err(e) => return config_failed(cli.json, &e),
        },
    };
    let ctx = Ctx {
        client: Client::new(socket),
        json: cli.json,
        layout: tokio::sync::OnceCell::new(),
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wardfs: cannot start the runtime: {e}");
            return ExitCode::from(9);
        }
    };
    let result = rt.block_on(async {
        use Command::*;
        match &cli.command {
            Serve(_) | Doctor(_) | Unmount(_) | Completions(_) | InstallService(_) | Mcp(_) => {
                unreachable!("handled above")
            }
            Read(a) => cmd::read::run(&ctx, a).await,
            Cat(a) => cmd::cat::run(&ctx, a).await,
            Write(a) => cmd::write::run(&ctx, a).await,
            Edit(a) => cmd::edit::run(&ctx, a).await,
            Rm(a) => cmd::rm::run(&ctx, a).await,
            Ls(a) => cmd::ls::run(&ctx, a).await,
            Stat(a) => cmd::stat::run(&ctx, a).await,
            Exists(a) => cmd::exists::run(&ctx, a).await,
            Mkdir(a) => cmd::mkdir::run(&ctx, a).await,
            Mv(a) => cmd::mv::run(&ctx, a).await,
            Glob(a) => cmd::glob::run(&ctx, a).await,
            Grep(a) => cmd::grep::run(&ctx, a).await,
            Resolve(a) => cmd::resolve::run(&ctx, a).await,
            Status(a) => cmd::status::run(&ctx, a).await,
            Log(a) => cmd::log::run(&ctx, a).await,
            Events(a) => cmd::events::run(&ctx, a).await,
            Git(a) => cmd::git::run(&ctx, a).await,
            Staged(a) => cmd::staged::run(&ctx, a).await,
            Review(a) => cmd::review::run(&ctx, a).await,
            Gc(a) => cmd::gc::run(&ctx, a).await,
            Checkpoint(a) => cmd::checkpoint::run(&ctx, a).await,
            Restore(a) => cmd::checkpoint::restore(&ctx, a).await,
            Fork(a) => cmd::fork::run(&ctx, a).await,
            Forks(a) => cmd::fork::list(&ctx, a).await,
            Changes(a) => cmd::fork::changes(&ctx, a).await,
            Merge(a) => cmd::fork::merge(&ctx, a).await,
            Update(a) => cmd::fork::update(&ctx, a).await,
            Run(a) => cmd::run::run(&ctx, a).await,
            Runs(a) => cmd::run::runs(&ctx, a).await,
            Sandbox(a) => cmd::sandbox::run(&ctx, a).await,
            Mirror(a) => cmd::mirror::run(&ctx, a).await,
        }
    });
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::NothingFound) => ExitCode::from(1),
        Ok(Outcome::Refused(code)) => ExitCode::from(exit_of(code)),
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        Err(e) => {
            let path = match &e {
                ClientError::Api { path, .. } => path.as_deref(),
                _ => None,
            };
            fail(ctx.json, code_name(&e), &e.to_string(), path);
            if runs_a_command(&cli.command) {
                ExitCode::from(EXIT_RUN_FAILED)
            } else {
                ExitCode::from(exit_code(&e))
            }
        }
    }
}

/// The exit code of bad usage, an invalid argument or path, and a config that does not load.
pub const EXIT_USAGE: u8 = 2;
/// The exit code of `wardfs run` (and `wardfs runs --follow`) when wardfs itself failed (the
/// command did not start, the daemon refused, the connection broke), as `docker run` and
/// `env` use it: every other code is the command's own.
pub const EXIT_RUN_FAILED: u8 = 125;

/// Whether the command exits with the code of a command it runs (then its own failures are
/// [`EXIT_RUN_FAILED`]).
fn runs_a_command(c: &Command) -> bool {
    match c {
        Command::Run(_) => true,
        Command::Runs(a) => a.follow.is_some(),
        _ => false,
    }
}
/// The exit code of a daemon that is not running or could not start, and of an unavailable
/// zone, sandbox or remote.
pub const EXIT_UNAVAILABLE: u8 = 8;

/// Reports a failure: `wardfs: MESSAGE` on standard error and, with `--json`, the error object
/// `{code, message, path?}` on standard output (the API's shape; `path` left out when none).
/// The message is one line for people: a control character in it (a hostile file name the
/// daemon quotes back) is escaped.
pub fn fail(json: bool, code: &str, message: &str, path: Option<&str>) {
    print_error_json(json, code, message, path);
    eprintln!("wardfs: {}", crate::core::text::line(message));
}

fn print_error_json(json: bool, code: &str, message: &str, path: Option<&str>) {
    if json {
        let mut v = serde_json::json!({ "code": code, "message": message });
        if let Some(p) = path {
            v["path"] = serde_json::json!(p);
        }
        println!("{v}");
    }
}

/// Reports a config that does not load (`INVALID_CONFIG`, exit 2), the same for every command.
/// A parse error spans lines (the line of the file, a caret under the column): they are kept,
/// each escaped.
pub fn config_failed(json: bool, e: &crate::config::ConfigError) -> ExitCode {
    let message = e.to_string();
    print_error_json(json, "INVALID_CONFIG", &message, None);
    let shown: Vec<_> = message.lines().map(crate::core::text::line).collect();
    eprintln!("wardfs: {}", shown.join("\n"));
    ExitCode::from(EXIT_USAGE)
}

/// Returns the code an error is reported with: the daemon's code, or one of the client's own
/// (`DAEMON_NOT_RUNNING`, `INVALID_ARGUMENT`, `INTERNAL`).
pub fn code_name(e: &ClientError) -> &'static str {
    match e {
        ClientError::Api { code, .. } => code.as_str(),
        ClientError::NotRunning { .. } => "DAEMON_NOT_RUNNING",
        ClientError::Local(_) => "INVALID_ARGUMENT",
        ClientError::Transport(_) => "INTERNAL",
    }
}

/// Returns the exit code for an error, by its class.
pub fn exit_code(e: &ClientError) -> u8 {
    match e {
        ClientError::NotRunning { .. } => EXIT_UNAVAILABLE,
        ClientError::Transport(_) => 9,
        ClientError::Local(_) => EXIT_USAGE,
        ClientError::Api { code, .. } => exit_of(*code),
    }
}

/// Returns the exit code of an error code of the daemon, by its class.
fn exit_of(code: ErrorCode) -> u8 {
    use ErrorCode::*;
    match code {
        InvalidPath | InvalidArgument => EXIT_USAGE,
        NotFound => 3,
        Exists | IsDir | NotDir | NotEmpty => 4,
        NoMatch | NotUnique | Conflict | RemoteMoved => 5,
        OutsideZone | ReadOnly | PermissionDenied | AuthFailed | Rejected => 6,
        TooLarge | Binary | NoSpace => 7,
        ZoneUnavailable | SandboxUnavailable | RemoteUnavailable | Busy => EXIT_UNAVAILABLE,
        Internal => 9,
    }
}

//! `wardfs run --fork NAME [--network] -- COMMAND [ARGS]`: a command confined to a fork; and
//! `wardfs run --sandbox NAME [--cwd P] [--env VAR…] [--timeout S] [--no-sync] [--raw] --
//! COMMAND [ARGS]`: a command run in a sandbox with the workspace in step (`POST /v1/run`,
//! [`sandbox`]).
//!
//! The command runs in the local provider's jail ([`crate::sandbox::provision::local::jail`],
//! bwrap) with the host's root read-only ([`Root::Host`]): its working directory is the fork's
//! tree in the daemon's mount (`MOUNT/forks/NAME`, at the same path), bound read-write, the
//! only files it can change that outlive it. `/tmp` is a private tmpfs (`HOME` is
//! `/tmp/home`), gone when it ends. What would lead around the fork is covered: the mount
//! itself (so no other zone or fork shows through it) and every other place it is bound, the
//! daemon's socket (so the command cannot ask the daemon to change other zones), its state
//! directory and the zones' own directories. It gets a new user namespace (root mapped to the
//! caller, no capabilities), pid, IPC and UTS namespaces, and a network namespace with only
//! loopback unless `--network`. The environment is PATH, HOME, TERM and LANG only (and PWD,
//! which bwrap sets). `wardfs` becomes bwrap (exec), so the command's exit status is `wardfs
//! run`'s.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::core::ErrorCode;
use crate::sandbox::provision::local::jail::{self, Jail, Root};

mod sandbox;

pub use sandbox::{runs, RunsArgs};

/// Where the command's scratch space and home are, inside.
const SCRATCH: &str = "/tmp";
const HOME: &str = "/tmp/home";

/// Run a command confined to a fork, or in a sandbox with the workspace in step
///
/// With --sandbox NAME: makes or resumes the sandbox, pushes what changed in the workspace since
/// the last push, runs the command (no shell) in the mirrored directory (or --cwd beneath it),
/// prints its stdout and stderr as it prints them (polled by the daemon: within about 50 ms),
/// pulls back what it changed (journaled `via sandbox`; a conflict keeps both sides) and exits
/// with its exit code (124 when killed at its --timeout, 130 when stopped by Ctrl-C, 137 when
/// killed otherwise; 125 when wardfs itself failed). On a terminal its control characters are
/// escaped unless --raw. --env VAR passes the daemon's variable VAR, only when the sandbox's
/// `run_env` lists it; its value is masked (***) in the output. Ctrl-C stops the remote
/// process (a second Ctrl-C leaves at once); a run whose client died goes on for
/// limits.run_reconnect_secs, for `wardfs runs --follow ID` to take it up.
///
/// With --fork NAME: the command starts in the fork's directory of the daemon's mount (MOUNT/forks/NAME) and can
/// change nothing else that outlives it: the rest of the host is read-only, /tmp is private
/// and thrown away (HOME is /tmp/home), and the daemon's mount, socket, state and zone
/// directories are hidden. No network but its own loopback unless --network; the environment
/// is PATH, HOME, TERM and LANG only (and PWD). Exits with the command's exit status (128 + N
/// when killed by signal N; 125 when wardfs failed before it started). Needs bwrap
/// (bubblewrap) and the daemon's mount.
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  wardfs fork try-a
  wardfs run --fork try-a -- make test      # builds and tests in the fork only
  wardfs run --fork try-a --network -- npm install
  wardfs changes try-a                      # what it changed; `wardfs merge try-a` keeps it
  wardfs run --sandbox dev -- make test     # in sandbox dev, the workspace pushed and pulled back
  wardfs run --sandbox dev --cwd app --env LINEAR_API_KEY --timeout 60 -- npm test")]
#[command(group(clap::ArgGroup::new("target").required(true).args(["fork", "sandbox"])))]
pub struct Args {
    /// The fork to confine the command to (see `wardfs forks`)
    #[arg(long, value_name = "NAME")]
    pub fork: Option<String>,
    /// The sandbox to run the command in (see `wardfs sandbox list`)
    #[arg(long, value_name = "NAME")]
    pub sandbox: Option<String>,
    /// Share the host's network (default: a network of its own with only loopback; --fork only)
    #[arg(long, requires = "fork")]
    pub network: bool,
    /// Where the command runs, relative to the mirrored directory (--sandbox only)
    #[arg(long, value_name = "PATH", requires = "sandbox")]
    pub cwd: Option<String>,
    /// Pass the daemon's environment variable VAR (listed in the sandbox's run_env; repeatable)
    #[arg(long = "env", value_name = "VAR", requires = "sandbox")]
    pub env: Vec<String>,
    /// Seconds the command may run before it is killed (default: limits.run_timeout_secs)
    #[arg(long, value_name = "S", requires = "sandbox")]
    pub timeout: Option<u64>,
    /// Neither push before nor pull after (--sandbox only)
    #[arg(long, requires = "sandbox")]
    pub no_sync: bool,
    /// Print the command's output as it is, control characters and all (--sandbox only)
    #[arg(long, requires = "sandbox")]
    pub raw: bool,
    /// Run beside other --parallel runs in the same sandbox (they share its mirrored tree;
    /// default: one run at a time) (--sandbox only)
    #[arg(long, requires = "sandbox")]
    pub parallel: bool,
    /// The command and its arguments (after `--`)
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

fn refused(code: ErrorCode, message: String, path: Option<String>) -> ClientError {
    ClientError::Api {
        code,
        message,
        path,
    }
}

/// What the daemon says about where things are.
struct Layout {
    mount: PathBuf,
    socket: PathBuf,
    state_dir: Option<PathBuf>,
    zone_roots: Vec<PathBuf>,
}

async fn layout(ctx: &Ctx) -> Result<Layout, ClientError> {
    let s: serde_json::Value = ctx.client.get("/v1/status").await?;
    let mount = match (s["mounted"].as_bool(), s["mount"].as_str()) {
        (Some(true), Some(m)) => PathBuf::from(m),
        _ => {
            return Err(refused(
                ErrorCode::ZoneUnavailable,
                "the daemon did not mount the zones (started with --no-mount?): `wardfs run \
                 --fork` runs the command in the fork's directory of that mount"
                    .into(),
                None,
            ))
        }
    };
    let zone_roots = s["zones"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|z| z["root"].as_str())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .collect();
    Ok(Layout {
        mount,
        socket: PathBuf::from(s["socket"].as_str().unwrap_or_default()),
        state_dir: s["state_db"]
            .as_str()
            .and_then(|db| Path::new(db).parent().map(Path::to_path_buf)),
        zone_roots,
    })
}

/// Checks that the fork `name` exists.
async fn check_fork(ctx: &Ctx, name: &str) -> Result<(), ClientError> {
    crate::fork::check_name(name)
        .map_err(|e| refused(ErrorCode::InvalidArgument, e.to_string(), None))?;
    let forks: serde_json::Value = ctx.client.get("/v1/forks").await?;
    let found = forks["forks"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|f| f["name"] == name);
    if found {
        Ok(())
    } else {
        Err(refused(
            ErrorCode::NotFound,
            format!(
                "/forks/{}: no such fork (`wardfs forks` lists them, `wardfs fork NAME` makes one)",
                text::name(name)
            ),
            Some(format!("/forks/{name}")),
        ))
    }
}

/// Returns `bwrap` from `PATH` (or /usr/bin).
fn bwrap() -> Result<PathBuf, ClientError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/local/bin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            refused(
                ErrorCode::ZoneUnavailable,
                "`bwrap` (bubblewrap) is not on PATH: install it (Debian: apt-get install \
                 bubblewrap)"
                    .into(),
                None,
            )
        })
}

/// The jail of a command confined to the fork at `cwd`.
fn jail(
    bwrap: PathBuf,
    layout: &Layout,
    client_socket: &Path,
    cwd: &Path,
    network: bool,
) -> std::io::Result<Jail> {
    let mut hidden: Vec<PathBuf> = vec![layout.mount.clone()];
    hidden.extend(
        crate::fuse::binds::binds_of(&layout.mount)
            .into_iter()
            .map(|(dir, _)| dir),
    );
    hidden.push(layout.socket.clone());
    hidden.push(client_socket.to_path_buf());
    hidden.extend(layout.state_dir.clone());
    hidden.extend(layout.zone_roots.iter().cloned());
    let root = Root::host(&hidden, &[cwd.to_path_buf()], &[SCRATCH])?;
    let kept = |k: &str| std::env::var(k).ok().map(|v| (k.to_string(), v));
    let env: Vec<(String, String)> = [
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or(jail::PATH.into()),
        ),
        ("HOME".to_string(), HOME.to_string()),
    ]
    .into_iter()
    .chain(kept("TERM"))
    .chain(kept("LANG"))
    .collect();
    Ok(Jail {
        bwrap,
        root,
        ro_binds: Vec::new(),
        ro_files: Vec::new(),
        dirs: vec![HOME.to_string()],
        env,
        hostname: "wardfs-fork".into(),
        die_with_parent: true,
        host_network: network,
    })
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    match (&a.fork, &a.sandbox) {
        (Some(fork), _) => run_in_fork(ctx, fork, a).await,
        (None, Some(sandbox)) => sandbox::run(ctx, sandbox, a).await,
        (None, None) => unreachable!("clap requires --fork or --sandbox"),
    }
}

async fn run_in_fork(ctx: &Ctx, fork: &str, a: &Args) -> Result<Outcome, ClientError> {
    check_fork(ctx, fork).await?;
    let layout = layout(ctx).await?;
    let cwd = crate::fuse::binds::resolved(&layout.mount)
        .join(crate::config::FORKS_DIR)
        .join(fork);
    if !cwd.is_dir() {
        return Err(refused(
            ErrorCode::ZoneUnavailable,
            format!(
                "{}: the fork's directory is not in the mount",
                text::name(&cwd.display().to_string())
            ),
            None,
        ));
    }
    let jail = jail(bwrap()?, &layout, ctx.client.socket(), &cwd, a.network).map_err(|e| {
        refused(
            ErrorCode::Internal,
            format!("cannot set up the jail: {e}"),
            None,
        )
    })?;
    let argv: Vec<&str> = a.command.iter().map(String::as_str).collect();
    let e = jail.command_in(&argv, &cwd.to_string_lossy()).exec();
    Err(refused(
        ErrorCode::Internal,
        format!("cannot start {}: {e}", jail.bwrap.display()),
        None,
    ))
}

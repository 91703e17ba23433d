//! `wardfs sandbox`: name the remote sandboxes the daemon mirrors to, see their sessions, and
//! drive the lifecycle of those wardfs makes itself (`provider = "local"` or `"daytona"`).

use serde_json::{json, Value};

use crate::cli::output::{decode, print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::sandbox::SandboxInfo;

/// Add, list, check and remove remote sandboxes; create, pause, resume and destroy the ones wardfs makes
///
/// Two kinds of sandbox: an attached one (provider = "sandbox-agent": a URL and token of a server
/// someone else started; `add`, `remove`) and a provisioned one (provider = "local" or "daytona"
/// in the config file's [sandboxes.NAME]: wardfs makes it on first use, pauses it when idle and
/// destroys it after its paused TTL; `create`, `pause`, `resume`, `destroy`, `snapshot`).
/// `wardfs mirror push NAME` works on both.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  wardfs sandbox list
  wardfs sandbox create dev              # make [sandboxes.dev] now instead of on first use
  wardfs sandbox pause dev               # freeze it; its files stay
  wardfs sandbox resume dev
  wardfs sandbox destroy dev --keep-volume
  wardfs sandbox add ci --url http://127.0.0.1:2468 --token-env CI_TOKEN")]
pub struct Args {
    #[command(subcommand)]
    pub command: SandboxCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum SandboxCommand {
    /// Add a sandbox (or redefine one added before); nothing is contacted until it is used
    Add {
        /// The sandbox's name (letters, digits, `-`, `_`)
        name: String,
        /// The provider
        #[arg(long, default_value = "sandbox-agent")]
        provider: String,
        /// The server's base URL, e.g. http://127.0.0.1:2468
        #[arg(long)]
        url: String,
        /// The NAME of the environment variable (in the daemon's environment) holding the token
        #[arg(long, value_name = "VAR")]
        token_env: Option<String>,
        /// The directory inside the sandbox to mirror to (default: /workspace)
        #[arg(long, value_name = "DIR")]
        root: Option<String>,
        /// When to connect: lazy (on first use) or warm (at daemon start)
        #[arg(long)]
        mode: Option<String>,
        /// Minutes without use before the connection is dropped (0: never)
        #[arg(long, value_name = "MINUTES")]
        idle_ttl_minutes: Option<u64>,
    },
    /// List the sandboxes with their session status
    List,
    /// Show one sandbox's session
    Status {
        /// The sandbox's name
        name: String,
    },
    /// Health-check a sandbox now (connecting it)
    Check {
        /// The sandbox's name
        name: String,
    },
    /// Remove a sandbox added with `sandbox add` (its mirror manifests are kept)
    Remove {
        /// The sandbox's name
        name: String,
    },
    /// Create a provisioned sandbox now (it is otherwise made on its first use)
    ///
    /// NAME must be defined in the config file with provider = "local" or "daytona". Fails
    /// when it already has a sandbox (resume or destroy that one); a failed create leaves
    /// nothing behind and the status `error` with the reason.
    Create {
        /// The sandbox's name, as in [sandboxes.NAME]
        name: String,
        /// The provider; must match the config's (a check, not a choice)
        #[arg(long, value_parser = ["local", "daytona"])]
        provider: Option<String>,
        /// Start from this snapshot id instead of the config's (see `sandbox snapshot`)
        #[arg(long, value_name = "ID")]
        snapshot: Option<String>,
        /// Attach this volume (made when missing) instead of the config's
        #[arg(long, value_name = "NAME")]
        volume: Option<String>,
    },
    /// Pause a provisioned sandbox: its processes are frozen, its files kept
    ///
    /// The next use (mirror, check, resume) resumes it. The cleanup loop also pauses a sandbox
    /// unused for its idle_pause_minutes, and destroys one paused for its paused_ttl_minutes.
    Pause {
        /// The sandbox's name
        name: String,
    },
    /// Resume a paused provisioned sandbox (or create it, when it has none) and health-check it
    Resume {
        /// The sandbox's name
        name: String,
    },
    /// Destroy a provisioned sandbox; its session stays (`destroyed`) and the next use makes a new one
    Destroy {
        /// The sandbox's name
        name: String,
        /// Keep the sandbox's volume (one named in the config is always kept)
        #[arg(long)]
        keep_volume: bool,
    },
    /// Build (or find) the snapshot of a provisioned sandbox's snapshot_base and snapshot_setup
    ///
    /// An unchanged base and setup give the same snapshot id, so it is built once.
    Snapshot {
        /// The sandbox's name
        name: String,
    },
}

/// Prints one sandbox for people.
fn show(s: &SandboxInfo) {
    let used = s
        .last_accessed_at
        .map(time)
        .unwrap_or_else(|| "never".into());
    let place = match &s.provider_id {
        Some(id) => format!("{} {id}", s.provider),
        None if s.provider != crate::config::PROVIDER_SANDBOX_AGENT => {
            format!("{} (none yet)", s.provider)
        }
        None => s.url.clone(),
    };
    println!(
        "{:<16} {:<10} {}  root {}  ({}, {}{})  last used {}",
        s.name,
        s.status,
        place,
        s.root,
        s.mode,
        s.origin,
        if s.attached { ", attached" } else { "" },
        used
    );
    if let Some(e) = &s.last_error {
        println!(
            "{:<16} last error ({} failed attempts): {e}",
            "", s.resume_fail_count
        );
    }
}

async fn one(ctx: &Ctx, route: &str, body: Value) -> Result<Outcome, ClientError> {
    let raw = ctx.client.post_raw(route, &body).await?;
    if ctx.json {
        print_json(&raw);
    } else {
        show(&decode::<SandboxInfo>(&raw)?);
    }
    Ok(Outcome::Ok)
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    match &a.command {
        SandboxCommand::Add {
            name,
            provider,
            url,
            token_env,
            root,
            mode,
            idle_ttl_minutes,
        } => {
            let body = json!({
                "name": name, "provider": provider, "url": url, "token_env": token_env,
                "root": root, "mode": mode, "idle_ttl_minutes": idle_ttl_minutes,
            });
            one(ctx, "/v1/sandboxes/add", body).await
        }
        SandboxCommand::Check { name } => {
            one(ctx, "/v1/sandboxes/check", json!({ "name": name })).await
        }
        SandboxCommand::Create {
            name,
            provider,
            snapshot,
            volume,
        } => {
            let body = json!({
                "name": name, "provider": provider, "snapshot": snapshot, "volume": volume,
            });
            one(ctx, "/v1/sandboxes/create", body).await
        }
        SandboxCommand::Pause { name } => {
            one(ctx, "/v1/sandboxes/pause", json!({ "name": name })).await
        }
        SandboxCommand::Resume { name } => {
            one(ctx, "/v1/sandboxes/resume", json!({ "name": name })).await
        }
        SandboxCommand::Destroy { name, keep_volume } => {
            let body = json!({ "name": name, "keep_volume": keep_volume });
            one(ctx, "/v1/sandboxes/destroy", body).await
        }
        SandboxCommand::Snapshot { name } => {
            let raw = ctx
                .client
                .post_raw("/v1/sandboxes/snapshot", &json!({ "name": name }))
                .await?;
            if ctx.json {
                print_json(&raw);
            } else {
                let s: crate::sandbox::SnapshotInfo = decode(&raw)?;
                println!("{}: snapshot {} ({})", s.name, s.snapshot, s.provider);
            }
            Ok(Outcome::Ok)
        }
        SandboxCommand::Remove { name } => {
            let raw = ctx
                .client
                .post_raw("/v1/sandboxes/remove", &json!({ "name": name }))
                .await?;
            if ctx.json {
                print_json(&raw);
            } else {
                println!("{name}: removed");
            }
            Ok(Outcome::Ok)
        }
        SandboxCommand::List | SandboxCommand::Status { .. } => {
            let raw = ctx.client.get_raw("/v1/sandboxes").await?;
            #[derive(serde::Deserialize)]
            struct List {
                sandboxes: Vec<SandboxInfo>,
            }
            let list: List = decode(&raw)?;
            if let SandboxCommand::Status { name } = &a.command {
                let Some(s) = list.sandboxes.iter().find(|s| &s.name == name) else {
                    return Err(ClientError::Api {
                        code: crate::core::ErrorCode::NotFound,
                        message: format!("no sandbox named {name:?} (see `wardfs sandbox list`)"),
                        path: None,
                    });
                };
                if ctx.json {
                    println!("{}", serde_json::to_string(s).unwrap_or_default());
                } else {
                    show(s);
                }
                return Ok(Outcome::Ok);
            }
            if ctx.json {
                print_json(&raw);
            } else if list.sandboxes.is_empty() {
                println!("no sandboxes (add one with `wardfs sandbox add NAME --url URL --token-env VAR`)");
            } else {
                for s in &list.sandboxes {
                    show(s);
                }
            }
            Ok(Outcome::Ok)
        }
    }
}

//! `sandfs sandbox`: name the remote sandboxes the daemon mirrors to, and see their sessions.

use serde_json::{json, Value};

use crate::cli::output::{decode, print_json, time};
use crate::cli::{ClientError, Ctx, Outcome};
use crate::sandbox::SandboxInfo;

/// Add, list, check and remove remote sandboxes (sessions are kept by the daemon)
#[derive(Debug, clap::Args)]
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
}

/// Prints one sandbox for people.
fn show(s: &SandboxInfo) {
    let used = s
        .last_accessed_at
        .map(time)
        .unwrap_or_else(|| "never".into());
    println!(
        "{:<16} {:<10} {}  root {}  ({}, {}{})  last used {}",
        s.name,
        s.status,
        s.url,
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
                        message: format!("no sandbox named {name:?} (see `sandfs sandbox list`)"),
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
                println!("no sandboxes (add one with `sandfs sandbox add NAME --url URL --token-env VAR`)");
            } else {
                for s in &list.sandboxes {
                    show(s);
                }
            }
            Ok(Outcome::Ok)
        }
    }
}

//! `wardfs mcp`: the MCP server on stdin/stdout, for agents that cannot use the mount.
//!
//! The subcommand only wires the config to [`crate::mcp`]: the socket (from `--socket`, else the
//! config), `[mcp] allow_push`, `[mcp] allow_sandboxes`, `[mcp] allow_run` and `limits.max_write_bytes` (which
//! bounds one message), or with `--fork NAME` a server confined to that fork; its help lists the tools
//! ([`crate::mcp::tools_help`]). stdout belongs to the protocol, so every message of this
//! command goes to stderr.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::client::Client;
use crate::config::Settings;
use crate::mcp::Server;

/// Serve the daemon's tools over MCP on stdin/stdout (for Claude Code and other MCP clients)
///
/// The tools are listed below; `docs/agents.md` describes each.
#[derive(Debug, clap::Args)]
#[command(after_help = crate::mcp::tools_help())]
pub struct Args {
    /// Serve only the fork NAME, as if it were the whole filesystem: its root is / (/src/a.rs
    /// is /forks/NAME/src/a.rs), every path answered is relative to it, and nothing outside
    /// it can be reached. Offers only the file, checkpoint and event tools, changes and
    /// forks (this fork's); not fork, merge, update, the git, mirror or sandbox tools
    #[arg(long, value_name = "NAME")]
    pub fork: Option<String>,
}

/// Returns the server confined to the fork `name`, or why not: a name no fork can have, or a
/// fork the daemon does not have (a daemon that does not answer is left for the tools to report).
async fn confined(client: Client, name: &str) -> Result<Server, String> {
    let fork = crate::mcp::Fork::new(name)?;
    if let Ok(forks) = client.get::<serde_json::Value>("/v1/forks").await {
        let found = forks["forks"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|f| f["name"] == name);
        if !found {
            return Err(format!(
                "no fork {name}: make it with `wardfs fork {name}` (`wardfs forks` lists them)"
            ));
        }
    }
    Ok(Server::confined(client, fork))
}

pub fn run(config: Option<&Path>, socket: Option<PathBuf>, args: &Args) -> ExitCode {
    let settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return crate::cli::config_failed(false, &e),
    };
    let client = Client::new(socket.unwrap_or(settings.socket));
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wardfs mcp: cannot start the runtime: {e}");
            return ExitCode::from(9);
        }
    };
    let server = match &args.fork {
        Some(name) => match rt.block_on(confined(client, name)) {
            Ok(server) => server,
            Err(why) => {
                eprintln!("wardfs mcp: {}", crate::core::text::line(&why));
                return ExitCode::from(crate::cli::EXIT_USAGE);
            }
        },
        None => Server::with(
            client,
            crate::mcp::Switches {
                allow_push: settings.mcp.allow_push,
                allow_sandboxes: settings.mcp.allow_sandboxes,
                allow_run: settings.mcp.allow_run,
            },
        ),
    };
    let max_write_bytes = settings.limits.max_write_bytes;
    match rt.block_on(crate::mcp::serve_stdio(server, max_write_bytes)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wardfs mcp: {e}");
            ExitCode::from(9)
        }
    }
}

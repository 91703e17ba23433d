//! `wardfs mcp`: the MCP server on stdin/stdout, for agents that cannot use the mount.
//!
//! The subcommand only wires the config to [`crate::mcp`]: the socket (from `--socket`, else the
//! config), `[mcp] allow_push`, `[mcp] allow_sandboxes` and `limits.max_write_bytes` (which
//! bounds one message); its help lists the tools
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
pub struct Args {}

pub fn run(config: Option<&Path>, socket: Option<PathBuf>, _args: &Args) -> ExitCode {
    let settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return crate::cli::config_failed(false, &e),
    };
    let client = Client::new(socket.unwrap_or(settings.socket));
    let server = Server::with_switches(
        client,
        settings.mcp.allow_push,
        settings.mcp.allow_sandboxes,
    );
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
    let max_write_bytes = settings.limits.max_write_bytes;
    match rt.block_on(crate::mcp::serve_stdio(server, max_write_bytes)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wardfs mcp: {e}");
            ExitCode::from(9)
        }
    }
}

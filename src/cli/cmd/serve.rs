//! `wardfs serve`: run the daemon in the foreground (the wiring itself is `crate::daemon`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::config::Settings;

/// Run the daemon in the foreground: mount the zones and serve the API (logs: stderr, RUST_LOG)
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Serve only the API; do not mount the FUSE filesystem
    #[arg(long)]
    pub no_mount: bool,
}

pub fn run(config: Option<&Path>, socket: Option<PathBuf>, args: &Args) -> ExitCode {
    init_tracing();
    match serve(config, socket, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("wardfs: {e:#}");
            ExitCode::from(8)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logger = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    // Under systemd, stderr goes to the journal, which stamps each line itself.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        let _ = logger.without_time().try_init();
    } else {
        let _ = logger.try_init();
    }
}

fn serve(config: Option<&Path>, socket: Option<PathBuf>, args: &Args) -> anyhow::Result<()> {
    let mut settings = Settings::load(config)?;
    if let Some(s) = socket {
        settings.socket = s;
    }
    crate::daemon::run(settings, args.no_mount)
}

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

/// Runs the daemon until SIGINT or SIGTERM. A config error exits 2, as every other command's does;
/// a daemon that could not start (or stopped on an error) exits 8.
pub fn run(config: Option<&Path>, socket: Option<PathBuf>, args: &Args) -> ExitCode {
    init_tracing();
    let mut settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return crate::cli::config_failed(false, &e),
    };
    if let Some(s) = socket {
        settings.socket = s;
    }
    // Each error's message holds its cause (the error types print their source), so it is
    // printed once, whole, without the chain (`{:#}` would repeat every cause).
    match crate::daemon::run(settings, args.no_mount) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wardfs: {}", crate::core::text::line(&e.to_string()));
            ExitCode::from(crate::cli::EXIT_UNAVAILABLE)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logger = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(crate::cli::output::color(&std::io::stderr()))
        .with_target(false);
    // Under systemd, stderr goes to the journal, which stamps each line itself.
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        let _ = logger.without_time().try_init();
    } else {
        let _ = logger.try_init();
    }
}

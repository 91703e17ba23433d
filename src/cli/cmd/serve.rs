//! `sandfs serve`: run the daemon in the foreground.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use crate::api::{AppState, PeerListener};
use crate::config::Settings;
use crate::core::{system_clock, Zone, Zones};
use crate::state::Db;

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
            eprintln!("sandfs: {e:#}");
            ExitCode::from(8)
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .try_init();
}

fn serve(config: Option<&Path>, socket: Option<PathBuf>, args: &Args) -> anyhow::Result<()> {
    let mut settings = Settings::load(config)?;
    if let Some(s) = socket {
        settings.socket = s;
    }
    let db = Arc::new(Db::open_in(&settings.state_dir)?);
    let zones = Arc::new(Zones::open(&settings, db.clone(), system_clock())?);
    for id in crate::core::ZoneId::ALL {
        match zones.zone(id) {
            Zone::Local(z) => tracing::info!(
                zone = id.name(),
                root = %z.root().display(),
                read_only = z.read_only(),
                "zone ready"
            ),
            Zone::Disabled(reason) => {
                tracing::info!(zone = id.name(), reason = %reason, "zone disabled")
            }
        }
    }
    raise_fd_limit();
    // The mount lives until this function returns (after the API has stopped).
    let mount = if args.no_mount {
        None
    } else {
        Some(crate::fuse::mount(zones.clone(), &settings.mount, 4)?)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("sandfs-api")
        .build()?;
    let socket = settings.socket.clone();
    rt.block_on(async {
        let listener = PeerListener::bind(&socket, settings.allowed_uids.clone()).await?;
        tracing::info!(socket = %socket.display(), state = %db.path(), "serving the API");
        let state = AppState::new(zones, settings, mount.is_some());
        let served = crate::api::serve(listener, state, shutdown_signal()).await;
        // Only the daemon that bound the socket removes it.
        let _ = std::fs::remove_file(&socket);
        tracing::info!("stopped");
        Ok(served?)
    })
}

/// The mount holds one descriptor per inode the kernel knows: lift the soft limit to the hard one.
fn raise_fd_limit() {
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    if let Some(max) = lim.maximum {
        let _ = rustix::process::setrlimit(
            rustix::process::Resource::Nofile,
            rustix::process::Rlimit {
                current: Some(max),
                maximum: Some(max),
            },
        );
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
    }
}

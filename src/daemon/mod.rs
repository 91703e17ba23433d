//! The daemon's start-up wiring and its schedules: the state database, the zones, the mount, the
//! API, the watcher that journals changes made beside wardfs ([`watch`]), sandboxes kept warm or
//! detached when idle, queued write-backs, and garbage collection (once at start, then every
//! [`GC_EVERY`]).
//!
//! Under systemd (`Type=notify`, see `systemd/wardfs.service`) it sends `READY=1` once the API
//! socket listens and the mount is up, and `STOPPING=1` when SIGINT or SIGTERM starts the
//! shutdown, which stops the API and then unmounts. `wardfs serve` (`crate::cli`) only parses
//! its arguments and calls [`run`]. The one place that knows every room; no room imports it.

mod dir_watch;
pub mod watch;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::{AppState, PeerListener};
use crate::config::Settings;
use crate::core::{system_clock, NotLocal, Zones};
use crate::state::Db;

/// How often idle sandboxes are looked for (and detached once past their idle TTL), unless a
/// provisioned sandbox's idle pause or paused TTL asks for more often ([`cleanup_every`]).
pub const SANDBOX_CLEANUP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Returns how often the sandbox cleanup runs: every [`SANDBOX_CLEANUP_EVERY`], or a quarter of
/// the shortest idle pause or paused TTL of a provisioned sandbox (at least every half second),
/// so that a short one is kept to within a quarter of its length.
pub fn cleanup_every(sandboxes: &[crate::config::SandboxSettings]) -> Duration {
    sandboxes
        .iter()
        .filter_map(|s| s.provision.as_ref())
        .flat_map(|p| [p.idle_pause, p.paused_ttl])
        .filter(|d| !d.is_zero())
        .map(|d| (d / 4).max(Duration::from_millis(500)))
        .fold(SANDBOX_CLEANUP_EVERY, Duration::min)
}

/// How often the daemon collects garbage (old journal rows, discarded refs, temp files).
pub const GC_EVERY: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The most threads the API's blocking pool (core operations, git, gc) runs at once; past this
/// many, calls queue.
///
/// Tokio's default is 512. Under 64 concurrent clients the pool grew to ~130 threads, and glibc
/// malloc keeps freed memory per thread (its tcache) and per arena (8 arenas per core): the
/// daemon's RSS kept rising for a minute (+15 % after the first 10 s, see `tests/load`) while
/// the live heap did not grow. The work is bound by the cores and the disk long before this many
/// threads are busy. See also `limit_malloc_arenas`.
pub const BLOCKING_THREADS: usize = 32;

/// Runs the daemon until SIGINT or SIGTERM: opens the state and the zones, mounts them (unless
/// `no_mount`), serves the API, and keeps the schedules; then stops the API and unmounts.
pub fn run(settings: Settings, no_mount: bool) -> anyhow::Result<()> {
    limit_malloc_arenas();
    // Held until this returns: a second daemon on the same state would journal this one's files
    // as deleted.
    let _state_lock = crate::state::DirLock::take(&settings.state_dir)?;
    let db = Arc::new(Db::open_in(&settings.state_dir)?);
    Db::start_flusher(&db);
    // A zone served from a sandbox wardfs makes itself reaches it through the registry, which
    // is built over the zones: the slot is filled once the registry holds the config's sandboxes.
    let registry_slot = Arc::new(crate::sandbox::RegistrySlot::default());
    let zones = Arc::new(Zones::open_with(
        &settings,
        db.clone(),
        system_clock(),
        &|b| crate::sandbox::zone_provider(b, &registry_slot),
    )?);
    for id in crate::core::ZoneId::ALL {
        match (zones.local(id), zones.location(id)) {
            (Ok(z), _) => tracing::info!(
                zone = id.name(),
                root = %z.root().display(),
                read_only = z.read_only(),
                "zone ready"
            ),
            (Err(NotLocal::Sandbox(_)), Some(at)) => {
                tracing::info!(zone = id.name(), at = %at, "zone ready, served from a sandbox")
            }
            (Err(n), _) => {
                tracing::info!(zone = id.name(), reason = %n.reason(""), "zone disabled")
            }
        }
    }
    // Write-backs queued by the mount (this run's or a previous one's) go out in the background.
    crate::core::sandbox_zone::spawn_write_back_retries(&zones)?;
    set_fd_limit(settings.limits.open_files);
    // Changes made beside wardfs are journaled (and reach the mount) as long as this lives.
    let watching = if settings.journal.watch {
        watch::Watcher::start(zones.clone(), &settings.state_dir.join("watch-barriers"))
    } else {
        tracing::info!("journal.watch is off: changes made beside wardfs are not journaled");
        Ok(None)
    };
    let _watcher = match watching {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the zones' directories: changes made beside wardfs are not journaled and show through the mount only after its cache times out");
            None
        }
    };
    // The daemon's state before the mount: the forks it serves are zones from the first lookup.
    let state = AppState::new(zones.clone(), settings.clone(), !no_mount)?;
    // git's file-system monitor asks the watcher what it saw beside wardfs (without one, it
    // answers "everything" for every checkout).
    if let Some(w) = &_watcher {
        state.fsmonitor.watch(w.beside());
    }
    // The mount lives until this function returns (after the API has stopped).
    let _mount = if no_mount {
        None
    } else {
        let io = crate::core::ZoneId::ALL.map(|id| {
            settings
                .zones
                .iter()
                .find(|z| z.id == id)
                .map(|z| z.io)
                .unwrap_or_default()
        });
        Some(crate::fuse::mount(
            zones.clone(),
            &settings.mount,
            4,
            io,
            settings.fuse,
        )?)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("wardfs-api")
        .max_blocking_threads(BLOCKING_THREADS)
        .build()?;
    let socket = settings.socket.clone();
    rt.block_on(async {
        // Handlers before the socket exists: a SIGTERM as soon as a client (or systemd) sees the
        // daemon must shut it down cleanly, not kill it with the mount and socket left behind.
        let signals = Signals::install()?;
        let listener = PeerListener::bind(&socket, settings.allowed_uids.clone()).await?;
        tracing::info!(socket = %socket.display(), state = %db.path(), "serving the API");
        catch_up_checkpoints(&state).await;
        let warm = state.sandboxes.merge_config(&state.settings.sandboxes)?;
        registry_slot.fill(&state.sandboxes, tokio::runtime::Handle::current());
        // The socket listens and the mount (when asked for) is up: tell systemd, if it is asking.
        // The variable stays set so STOPPING=1 can be sent later.
        if let Err(e) = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]) {
            tracing::warn!("cannot tell systemd the daemon is ready: {e}");
        }
        let gc_task = tokio::spawn(collect_garbage(state.clone()));
        let sandbox_task = tokio::spawn(tend_sandboxes(state.clone(), warm));
        let checkpoint_task = tokio::spawn(auto_checkpoints(state.clone()));
        let overlap_task = tokio::spawn(watch_overlaps(state.clone()));
        let monitor = state.clone();
        let served = crate::api::serve(listener, state, signals.recv()).await;
        gc_task.abort();
        sandbox_task.abort();
        checkpoint_task.abort();
        overlap_task.abort();
        let _ = tokio::task::spawn_blocking(move || monitor.fsmonitor.stopped()).await;
        // Only the daemon that bound the socket removes it.
        let _ = std::fs::remove_file(&socket);
        tracing::info!("stopped");
        Ok(served?)
    })
}

/// The record of starts and clean stops git's monitor keeps in the state directory.
const FSMONITOR_STARTS: &str = "fsmonitor-starts";

/// Journals what changed in the zones while no daemon watched them (so the next checkpoint holds
/// it), then finishes the restores a crash cut short; once this daemon holds the socket (no
/// other daemon runs on this state) and before it answers a request or tells systemd it is
/// ready: a zone is never left half restored without saying so.
async fn catch_up_checkpoints(state: &Arc<AppState>) {
    let cps = state.checkpoints.clone();
    let caught = tokio::task::spawn_blocking(move || cps.catch_up()).await;
    match caught {
        Ok(Ok(c)) => {
            if c.paths > 0 {
                tracing::info!(
                    paths = c.paths,
                    "journaled what changed in the zones while wardfs was not running"
                );
            }
            let marks = |zones: &[crate::core::ZoneId]| -> Vec<String> {
                zones
                    .iter()
                    .filter_map(|z| crate::git::fsmonitor::zone_mark(&state.zones, *z))
                    .collect()
            };
            state.fsmonitor.started(
                state.settings.state_dir.join(FSMONITOR_STARTS),
                &marks(&c.zones),
                &marks(&state.zones.zone_ids()),
                c.unseen,
            );
        }
        Ok(Err(e)) => {
            tracing::warn!("cannot look for changes made while wardfs was not running: {e}")
        }
        Err(e) => tracing::error!("start-up worker failed: {e}"),
    }
    let cps = state.checkpoints.clone();
    match tokio::task::spawn_blocking(move || cps.recover()).await {
        Ok(Ok(ended)) => {
            for r in ended {
                tracing::warn!(
                    checkpoint = r.checkpoint,
                    zone = %r.zone,
                    state = %r.state,
                    "a restore was cut short (the daemon stopped while it ran) and was finished now: {}",
                    r.detail.as_deref().unwrap_or("")
                );
            }
        }
        Ok(Err(e)) => tracing::error!("cannot finish the restores a crash cut short: {e}"),
        Err(e) => tracing::error!("restore recovery worker failed: {e}"),
    }
}

/// Reconciles the provisioned sandboxes with their providers, attaches the `warm` sandboxes,
/// then detaches idle ones, pauses idle provisioned ones and destroys those paused past their
/// TTL, every [`cleanup_every`].
async fn tend_sandboxes(state: Arc<AppState>, warm: Vec<String>) {
    state.sandboxes.reconcile().await;
    for name in warm {
        let reg = state.sandboxes.clone();
        tokio::spawn(async move {
            match reg.check(&name).await {
                Ok(_) => tracing::info!(sandbox = %name, "warm sandbox attached"),
                Err(e) => tracing::warn!(sandbox = %name, "warm sandbox not attached: {e}"),
            }
        });
    }
    let mut every = tokio::time::interval(cleanup_every(&state.settings.sandboxes));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        state.sandboxes.cleanup();
        state.sandboxes.tend_provisioned().await;
    }
}

/// The mount holds one descriptor per directory (and multiply-linked file) the kernel caches: sets the descriptor limit to
/// `limits.open_files`, raising the hard limit when allowed (the mount's budget follows it).
fn set_fd_limit(want: u64) {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    let hard = lim.maximum.unwrap_or(u64::MAX);
    // The kernel's ceiling for any process.
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(hard);
    let want = want.min(nr_open);
    let set = |soft: u64, hard: u64| {
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(soft),
                maximum: Some(hard),
            },
        )
    };
    let got = if want <= hard {
        set(want, hard).map(|_| want)
    } else {
        // Raising the hard limit needs privilege (CAP_SYS_RESOURCE); else the hard limit it is.
        set(want, want)
            .map(|_| want)
            .or_else(|_| set(hard, hard).map(|_| hard))
    };
    match got {
        Ok(n) if n < want => tracing::info!(
            open_files = n,
            wanted = want,
            "the descriptor limit is below limits.open_files (raise the hard limit, e.g. LimitNOFILE= in the service); the mount caches up to three quarters of it"
        ),
        Ok(n) => tracing::debug!(open_files = n, "descriptor limit set"),
        Err(e) => tracing::warn!(error = %e, "could not set the descriptor limit"),
    }
}

/// Caps glibc malloc's arenas at one per core (its default is eight per core). Each arena keeps
/// the memory freed into it, so the daemon's many short-lived threads (the blocking pool, the
/// search walkers) spread that retained memory over up to 16 arenas on two cores, and RSS crept
/// up under load. Only as many threads as there are cores run at once, so fewer arenas cost
/// little contention. Must run before the daemon starts its threads.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes malloc's tuning; no memory is touched.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
    }
}

/// The signals that stop the daemon, with their handlers installed.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// Completes at the first SIGINT or SIGTERM, after telling systemd the daemon is stopping.
    async fn recv(mut self) {
        tokio::select! {
            _ = self.int.recv() => tracing::info!("SIGINT: shutting down"),
            _ = self.term.recv() => tracing::info!("SIGTERM: shutting down"),
        }
        let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    }
}

/// Sends an `overlap` event the moment a path a fork changed is changed in its parent or a
/// sibling fork too (see `fork::overlap`): once a second, when the journal moved and forks exist.
async fn watch_overlaps(state: Arc<AppState>) {
    let db = state.zones.db().clone();
    let mut seen_pos = 0;
    let mut seen = std::collections::HashSet::new();
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let last = db.journal_last_id().unwrap_or(seen_pos);
        if last == seen_pos || state.zones.fork_ids().is_empty() {
            continue;
        }
        seen_pos = last;
        let forks = state.forks.clone();
        let found = tokio::task::spawn_blocking(move || {
            let new = forks.new_overlaps(&mut seen);
            (new, seen)
        })
        .await;
        match found {
            Ok((new, kept)) => {
                seen = kept;
                match new {
                    Ok(new) => {
                        for o in new {
                            tracing::info!(
                                path = %crate::core::text::name(&o.path),
                                zones = ?o.zones,
                                "overlap: a path changed on two sides since the fork point"
                            );
                        }
                        // The events the overlaps journaled moved the journal on.
                        seen_pos = db.journal_last_id().unwrap_or(seen_pos);
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot look for overlaps"),
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "the overlap watcher failed");
                return;
            }
        }
    }
}

/// Checkpoints each local zone that changed once the journal has been quiet for
/// `checkpoints.auto_quiet_ms` (0: never), so a moment after every burst of work can be restored.
/// A zone whose journal moved but whose tree is its latest checkpoint's gets none.
async fn auto_checkpoints(state: Arc<AppState>) {
    let quiet = Duration::from_millis(state.settings.checkpoints.auto_quiet_ms);
    if quiet.is_zero() {
        return;
    }
    let tick = (quiet / 4).clamp(Duration::from_millis(50), Duration::from_millis(500));
    // What the database announces, not a query each tick: a query on this runtime's thread
    // waits for the connection, which a batch of journal rows holds while it reads the
    // database's pages from the disk (the flusher's, cold).
    let mut appended = state.zones.db().subscribe();
    // A change made while the daemon was down is checkpointed once it has been quiet too.
    let mut changed_at = Some(Instant::now());
    loop {
        tokio::time::sleep(tick).await;
        if appended.has_changed().unwrap_or(false) {
            appended.mark_unchanged();
            changed_at = Some(Instant::now());
            continue;
        }
        if changed_at.is_none_or(|t| t.elapsed() < quiet) {
            continue;
        }
        changed_at = None;
        let app = state.clone();
        let made = tokio::task::spawn_blocking(move || {
            let mut made = 0;
            for id in app.zones.zone_ids() {
                if app.zones.local(id).is_err() {
                    continue;
                }
                // Nothing journaled for this zone since it was last its latest checkpoint's
                // tree: nothing to keep.
                if !app.checkpoints.journal_moved(id).unwrap_or(false) {
                    continue;
                }
                // Journaled but changing nothing kept (a `git stage`, a pull that found
                // nothing new): the latest checkpoint holds the zone already.
                match app
                    .checkpoints
                    .create_if_changed(id, "auto", crate::state::Origin::INTERNAL)
                {
                    Ok(Some(_)) => made += 1,
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(zone = id.name(), error = %e, "automatic checkpoint failed")
                    }
                }
            }
            made
        })
        .await;
        if let Ok(n) = made {
            tracing::debug!(
                checkpoints = n,
                "automatic checkpoints after a quiet period"
            );
        }
    }
}

/// Runs a garbage collection pass now and then every [`GC_EVERY`], logging what it removed.
async fn collect_garbage(state: Arc<AppState>) {
    let mut every = tokio::time::interval(GC_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let app = state.clone();
        match tokio::task::spawn_blocking(move || crate::api::gc::collect(&app)).await {
            Ok(Ok(r)) if r.is_empty() => tracing::debug!("gc: nothing to remove"),
            Ok(Ok(r)) => tracing::info!(
                journal_rows = r.journal_rows,
                staged_commits = r.staged_commits.len(),
                refs = r.refs.len(),
                temp_files = r.temp_files.len(),
                "gc: removed old state"
            ),
            Ok(Err(e)) => tracing::warn!("gc failed: {}", e.message()),
            Err(e) => tracing::warn!("gc worker failed: {e}"),
        }
    }
}

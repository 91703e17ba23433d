//! The local provider: each sandbox is a process tree on this machine, in namespaces of its
//! own, with its own root, running the real `sandbox-agent`.
//!
//! **Namespaces** (see `jail`): `unshare` makes a private mount namespace in which the root is
//! assembled, then `bwrap` (bubblewrap) makes user (only root mapped), pid, network (loopback
//! only), IPC and UTS namespaces and pivots into the root. Needs root on the host.
//!
//! **Root**: an overlay whose lower layer is the snapshot's `root/` and whose upper layer is
//! the sandbox's volume (`volumes/<id>/upper`), so everything a sandbox writes lands in its
//! volume; where overlayfs is unavailable ([`RootMode::Copy`]) the volume is seeded with a copy
//! of the snapshot once and bound as the root. A [`VolumeMount`]'s `mount_path` is made in the
//! root; the volume holds it and every other change.
//!
//! **The agent**: `sandbox-agent server --token T --no-telemetry --host 127.0.0.1 --port 2468`,
//! started inside by `/bin/sh` (every root needs one) with a cleared environment (the spec's
//! variables, `PATH`, and `HOME` on a fresh tmpfs). The token goes in by a read-only file, not
//! by bwrap's arguments; sandbox-agent 0.4.2 takes it only on its own command line, so once
//! the agent answers the provider overwrites it in the agent's argument memory (`/proc/PID/mem`),
//! and `ps` on the host shows `--token ****`. Until then (well under a second) it is visible to
//! the host's `ps`, and always to the sandbox itself, whose pid namespace holds the agent.
//!
//! **The way in** (see `bridge`): the sandbox's network has only loopback, so the daemon
//! listens on a port of the host's 127.0.0.1 and connects each client into the namespace;
//! [`Handle::url`] is `http://127.0.0.1:<port>`. After a daemon restart the bridge is made
//! again by [`Provisioner::resume`] (on the same port when it is free).
//!
//! **Pause** (see `freezer`): a cgroup v2 `cgroup.freeze`, a cgroup v1 `freezer.state`, or
//! `SIGSTOP` to every process of the sandbox's pid namespace; resume thaws and waits for the
//! agent's health. **Destroy** kills the tree (the pid namespace's init, then whatever is left
//! in the cgroup), removes the cgroup and the sandbox's directory, and the volume if the
//! sandbox owned it (one made for it because its spec named none) and `keep_volume` is false.
//! Since the overlay is mounted only in the sandbox's own mount namespace, it goes with the
//! last process: no mount is left on the host, even when the daemon is killed.
//!
//! **State**, under the provider's directory (mode 0700):
//! * `snapshots/<key>/{root/, snapshot.json}`: a snapshot's root and how it was made; `key` is
//!   [`SnapshotSpec::key`], so an unchanged spec is found, not rebuilt. Built in
//!   `snapshots/.build-*` and renamed into place when its setup commands all succeeded.
//! * `volumes/<id>/{upper/, work/}`: overlayfs's upper and work dirs.
//! * `sandboxes/<id>/{meta.json, token, agent.log, root/}`: what the sandbox was made from, the
//!   host pid and start time of its tree and its bridge port (so [`Provisioner::list`] and
//!   [`Provisioner::state`] work after a daemon restart), its token (mode 0600), the agent's
//!   output, and the overlay's mount point.
//!
//! Known limits: the sandbox can read its pid 1's command line (bwrap's), which names the
//! host paths of its snapshot, volume and sandbox dirs (not their contents); the parent cgroup
//! `<cgroup root>/wardfs` is made once and left in place (empty).
//!
//! Every call is idempotent: pausing a paused sandbox, destroying a missing one succeed. A
//! sandbox whose tree died (a reboot) is `Stopped`, and `resume` starts it again on its volume.
//! Names (of sandboxes, snapshots, volumes) are refused unless they are plain names; a failed
//! create kills and removes what it made.

mod bridge;
mod freezer;
pub mod jail;
mod tree;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::{
    Handle, Listed, ProviderState, ProvisionError, ProvisionResult, Provisioner, SandboxSpec,
    SnapshotSpec,
};
use crate::core::provider::BoxFuture;
use crate::sandbox::agent::Token;
use bridge::Bridge;
use freezer::Freezer;
pub use freezer::FreezerKind;
use jail::{Jail, Root};
pub use tree::Proc;

/// Where the agent's binary and token appear inside a sandbox (a tmpfs).
const RUN_DIR: &str = "/run/wardfs";
/// The agent's `HOME` inside: on the tmpfs, so it is clean at every start.
const AGENT_HOME: &str = "/run/wardfs/home";
/// Starts the agent with the token read from its file (never in bwrap's arguments).
const AGENT_SCRIPT: &str = "read -r t </run/wardfs/token && exec /run/wardfs/sandbox-agent \
server --token \"$t\" --no-telemetry --host 127.0.0.1 --port 2468";

/// How a sandbox's root is assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RootMode {
    /// Overlayfs if the kernel has it, else a copy.
    #[default]
    Auto,
    /// Overlayfs (lower = snapshot, upper = volume).
    Overlay,
    /// A copy of the snapshot in the volume, made once, bound as the root.
    Copy,
}

/// The local provider's settings.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// The provider's state directory (`<state_dir>/provision`).
    pub dir: PathBuf,
    /// The `sandbox-agent` binary (a static one: it is bound into roots that may lack its
    /// libraries); `None`: `sandbox-agent` on `PATH`.
    pub agent_bin: Option<PathBuf>,
    /// The `bwrap` binary; `None`: `bwrap` on `PATH`.
    pub bwrap_bin: Option<PathBuf>,
    pub freezer: FreezerKind,
    pub root_mode: RootMode,
    /// Longest wait for a started agent to answer its health check.
    pub start_timeout: Duration,
    /// Longest run of one snapshot setup command.
    pub setup_timeout: Duration,
}

impl LocalConfig {
    /// Returns the default settings for the state directory `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> LocalConfig {
        LocalConfig {
            dir: dir.into(),
            agent_bin: None,
            bwrap_bin: None,
            freezer: FreezerKind::Auto,
            root_mode: RootMode::Auto,
            start_timeout: Duration::from_secs(20),
            setup_timeout: Duration::from_secs(600),
        }
    }
}

/// What `sandboxes/<id>/meta.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Meta {
    id: String,
    name: String,
    snapshot: String,
    volume: String,
    /// The volume was made for this sandbox (its spec named none).
    owns_volume: bool,
    mount_path: Option<String>,
    env: BTreeMap<String, String>,
    /// The host port of the bridge, last time it was open.
    port: Option<u16>,
    /// The host pid and start time of the tree's first process (`unshare`, then bwrap).
    pid: Option<i32>,
    pid_start: Option<u64>,
}

/// What `snapshots/<key>/snapshot.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct SnapshotMeta {
    spec: SnapshotSpec,
    /// Host directories bound read-only at the same path (the minimal root's `/usr`).
    ro_binds: Vec<PathBuf>,
}

/// The directories of the provider's state.
#[derive(Debug, Clone)]
struct Layout {
    dir: PathBuf,
}

impl Layout {
    fn sandbox(&self, id: &str) -> PathBuf {
        self.dir.join("sandboxes").join(id)
    }
    fn volume(&self, id: &str) -> PathBuf {
        self.dir.join("volumes").join(id)
    }
    fn snapshot(&self, key: &str) -> PathBuf {
        self.dir.join("snapshots").join(key)
    }
}

/// The local provider (see the module docs).
pub struct LocalProvisioner {
    layout: Layout,
    agent: PathBuf,
    bwrap: PathBuf,
    freezer: Freezer,
    overlay: bool,
    start_timeout: Duration,
    setup_timeout: Duration,
    bridges: std::sync::Mutex<HashMap<String, Bridge>>,
    locks: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    snapshot_lock: tokio::sync::Mutex<()>,
}

fn fatal(what: impl Into<String>, detail: impl ToString) -> ProvisionError {
    ProvisionError::Fatal {
        what: what.into(),
        detail: detail.to_string(),
    }
}

fn invalid(key: impl Into<String>, rule: impl Into<String>) -> ProvisionError {
    ProvisionError::Invalid {
        key: key.into(),
        rule: rule.into(),
    }
}

fn missing(what: impl Into<String>, detail: impl Into<String>) -> ProvisionError {
    ProvisionError::Missing {
        what: what.into(),
        detail: detail.into(),
    }
}

/// Checks that `value` (the setting `key`) is a plain name: 1 to 64 of `A-Z a-z 0-9 . _ -`,
/// not starting with `.` or `-` (so never `..`, never a path, never NUL).
pub fn check_name(key: &str, value: &str) -> ProvisionResult<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if value.is_empty() || value.len() > 64 {
        return Err(invalid(
            key,
            format!("{value:?} must be 1 to 64 characters"),
        ));
    }
    if value.starts_with('.') || value.starts_with('-') || !value.chars().all(ok_char) {
        return Err(invalid(
            key,
            format!(
                "{value:?} must be a plain name (letters, digits, '.', '_', '-'; not starting \
                 with '.' or '-'; no '/', no NUL)"
            ),
        ));
    }
    Ok(())
}

/// Checks that `value` (the setting `key`) is an absolute path inside the sandbox with no `.`
/// or `..` component, no empty component and no NUL.
pub fn check_sandbox_path(key: &str, value: &str) -> ProvisionResult<()> {
    if !value.starts_with('/') || value.contains('\0') || value.len() > 1024 {
        return Err(invalid(
            key,
            format!("{value:?} must be an absolute path without NUL"),
        ));
    }
    if value != "/"
        && value[1..]
            .trim_end_matches('/')
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(invalid(
            key,
            format!("{value:?} must not hold '.', '..' or empty components"),
        ));
    }
    Ok(())
}

fn check_spec(spec: &SandboxSpec) -> ProvisionResult<()> {
    check_name("sandbox.name", &spec.name)?;
    if let Some(snapshot) = &spec.snapshot {
        check_name("sandbox.snapshot", snapshot)?;
    }
    if let Some(volume) = &spec.volume {
        check_name("sandbox.volume.volume", &volume.volume)?;
        check_sandbox_path("sandbox.volume.mount_path", &volume.mount_path)?;
        if volume.mount_path == "/" || volume.mount_path.starts_with("/run/") {
            return Err(invalid(
                "sandbox.volume.mount_path",
                format!("{:?} must not be / or under /run", volume.mount_path),
            ));
        }
    }
    for (k, v) in &spec.env {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            return Err(invalid(
                format!("sandbox.env.{k}"),
                "a variable name must be non-empty without '=' or NUL, its value without NUL",
            ));
        }
    }
    Ok(())
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .expect("/dev/urandom is readable");
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// Finds `name` on `PATH` (or takes `given`), as an absolute path.
fn find_binary(key: &str, given: &Option<PathBuf>, name: &str) -> ProvisionResult<PathBuf> {
    if let Some(path) = given {
        if path.is_file() {
            return Ok(path.clone());
        }
        return Err(invalid(key, format!("{} is not a file", path.display())));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/bin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            invalid(
                key,
                format!("`{name}` is not on PATH; install it or set {key}"),
            )
        })
}

fn mkdir_private(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Writes `data` to `path` atomically with mode 0600.
fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

fn remove_tree(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let start = text.len().saturating_sub(2000);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    text[start..].trim().to_string()
}

/// Copies the contents of `from` into `to` (modes, owners, links kept).
fn copy_tree(from: &Path, to: &Path) -> Result<(), String> {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(from.join("."))
        .arg(to)
        .output()
        .map_err(|e| format!("cannot run cp: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cp -a {} {}: {}",
            from.display(),
            to.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// The base that names the minimal root (`snapshot_base = "minimal"`); an empty base is the same.
pub const MINIMAL_BASE: &str = "minimal";

/// Whether a snapshot's base is the minimal root rather than a host directory.
fn is_minimal(base: &str) -> bool {
    base.is_empty() || base == MINIMAL_BASE
}

/// Builds the minimal root in `root`: the host's `/usr` (and any of `/bin`, `/lib*`, `/sbin`
/// that is a directory rather than a link into it) bound read-only, and copies of the few
/// `/etc` files and directories programs need; no other host file. Returns the binds.
fn minimal_root(root: &Path) -> Result<Vec<PathBuf>, String> {
    let err = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let mut binds = vec![PathBuf::from("/usr")];
    for d in ["etc", "usr", "root", "home", "var/tmp"] {
        std::fs::create_dir_all(root.join(d)).map_err(|e| err(&root.join(d), e))?;
    }
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&tmp).map_err(|e| err(&tmp, e))?;
    std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
        .map_err(|e| err(&tmp, e))?;
    for top in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
        let host = Path::new("/").join(top);
        match std::fs::symlink_metadata(&host) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&host).map_err(|e| err(&host, e))?;
                std::os::unix::fs::symlink(target, root.join(top))
                    .map_err(|e| err(&root.join(top), e))?;
            }
            Ok(m) if m.is_dir() => {
                std::fs::create_dir_all(root.join(top)).map_err(|e| err(&root.join(top), e))?;
                binds.push(host);
            }
            _ => {}
        }
    }
    for file in [
        "passwd",
        "group",
        "hosts",
        "nsswitch.conf",
        "ld.so.cache",
        "ld.so.conf",
        "host.conf",
        "ssl/openssl.cnf",
    ] {
        let host = Path::new("/etc").join(file);
        if host.is_file() {
            let dest = root.join("etc").join(file);
            if let Some(dir) = dest.parent() {
                std::fs::create_dir_all(dir).map_err(|e| err(dir, e))?;
            }
            std::fs::copy(&host, &dest).map_err(|e| err(&host, e))?;
        }
    }
    // The loader's configuration, Debian's alternatives (`/usr/bin/awk` is a link through
    // `/etc/alternatives`) and the CA certificates (links into `/usr/share`): small, and
    // without them common tools fail inside. Never `/etc/ssl/private`.
    for dir in ["ld.so.conf.d", "alternatives", "ssl/certs"] {
        let host = Path::new("/etc").join(dir);
        if host.is_dir() {
            let dest = root.join("etc").join(dir);
            std::fs::create_dir_all(&dest).map_err(|e| err(&dest, e))?;
            copy_tree(&host, &dest)?;
        }
    }
    Ok(binds)
}

/// Returns `GET /v1/health`'s status through the bridge on `port`, or `None`.
async fn health(port: u16, token: &str) -> Option<u16> {
    let probe = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        let req = format!(
            "GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
             Connection: close\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.ok()?;
        let text = String::from_utf8_lossy(&answer);
        text.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
}

/// The processes of one sandbox's tree, as far as they are alive.
#[derive(Debug, Clone, Copy, Default)]
struct Tree {
    /// The first process (`unshare`, exec'd into bwrap), in the host's namespaces.
    outer: Option<Proc>,
    /// bwrap's init, pid 1 of the sandbox's pid namespace.
    init: Option<Proc>,
}

impl Tree {
    fn of(meta: &Meta) -> Tree {
        let outer = match (meta.pid, meta.pid_start) {
            (Some(pid), Some(start)) => Some(Proc { pid, start }).filter(Proc::alive),
            _ => None,
        };
        let init = outer.and_then(|o| {
            let ns = o.pid_ns();
            o.children()
                .into_iter()
                .find(|c| c.pid_ns().is_some() && c.pid_ns() != ns)
        });
        Tree { outer, init }
    }
}

/// Kills a sandbox's tree, removes its cgroup and its directory, and its volume when asked.
/// Blocking (waits for the processes to go).
fn teardown(
    layout: &Layout,
    freezer: &Freezer,
    id: &str,
    meta: Option<&Meta>,
    delete_volume: bool,
) -> ProvisionResult<()> {
    let what = format!("sandbox {id}");
    let tree = meta.map(Tree::of).unwrap_or_default();
    freezer
        .kill(id, tree.outer, tree.init)
        .map_err(|e| fatal(&what, e))?;
    freezer.remove(id).map_err(|e| fatal(&what, e))?;
    if let Some(outer) = tree.outer {
        // Give the reaping thread (when this process started the tree) a moment, so that a
        // daemon or test that exits right after leaves no zombie to a non-reaping init.
        let deadline = Instant::now() + Duration::from_secs(1);
        while tree::exists(outer) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    if let Some(meta) = meta {
        if delete_volume && meta.owns_volume {
            remove_tree(&layout.volume(&meta.volume)).map_err(|e| fatal(&what, e))?;
        }
    }
    remove_tree(&layout.sandbox(id)).map_err(|e| fatal(&what, e))
}

impl LocalProvisioner {
    /// Opens the provider: finds its binaries, makes its state directory and picks the freezer.
    pub fn open(config: LocalConfig) -> ProvisionResult<LocalProvisioner> {
        let agent = find_binary("local.agent_bin", &config.agent_bin, "sandbox-agent")?;
        let bwrap = find_binary("local.bwrap_bin", &config.bwrap_bin, "bwrap")?;
        if !config.dir.is_absolute() || !jail::overlay_safe(&config.dir) {
            return Err(invalid(
                "local.dir",
                format!(
                    "{} must be an absolute path without ',', ':', '\\', '\"', '$' or '`' \
                     (overlayfs's option syntax)",
                    config.dir.display()
                ),
            ));
        }
        let layout = Layout {
            dir: config.dir.clone(),
        };
        for sub in ["snapshots", "volumes", "sandboxes"] {
            mkdir_private(&layout.dir.join(sub))
                .map_err(|e| fatal(format!("local.dir {}", layout.dir.display()), e))?;
        }
        let freezer = Freezer::open(&config.freezer).map_err(|e| invalid("local.freezer", e))?;
        let kernel_overlay = std::fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().last() == Some("overlay"));
        let overlay = match config.root_mode {
            RootMode::Auto => kernel_overlay,
            RootMode::Copy => false,
            RootMode::Overlay if kernel_overlay => true,
            RootMode::Overlay => {
                return Err(invalid(
                    "local.root_mode",
                    "overlay: this kernel has no overlayfs (/proc/filesystems)",
                ))
            }
        };
        Ok(LocalProvisioner {
            layout,
            agent,
            bwrap,
            freezer,
            overlay,
            start_timeout: config.start_timeout,
            setup_timeout: config.setup_timeout,
            bridges: Default::default(),
            locks: Default::default(),
            snapshot_lock: Default::default(),
        })
    }

    /// Returns the directory of sandbox `id` (`meta.json`, `agent.log`).
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.layout.sandbox(id)
    }

    /// Returns the directory of volume `id`; a sandbox's changes land in its `upper/`.
    pub fn volume_dir(&self, id: &str) -> PathBuf {
        self.layout.volume(id)
    }

    /// Returns the directory of snapshot `key` (its root is `root/`).
    pub fn snapshot_dir(&self, key: &str) -> PathBuf {
        self.layout.snapshot(key)
    }

    /// Returns the cgroup of sandbox `id`, if the freezer uses cgroups.
    pub fn cgroup(&self, id: &str) -> Option<PathBuf> {
        self.freezer.cgroup(id)
    }

    /// Returns the live processes of sandbox `id`'s tree (host pids): the first process and
    /// every process of the sandbox's pid namespace and cgroup.
    pub fn processes(&self, id: &str) -> Vec<Proc> {
        let Ok(meta) = self.load(id) else {
            return Vec::new();
        };
        let tree = Tree::of(&meta);
        let mut procs = self.freezer.members(id, tree.outer, tree.init);
        if let Some(ns) = tree.init.and_then(|i| i.pid_ns()) {
            procs.extend(tree::in_pid_ns(&ns));
        }
        procs.extend(tree.outer);
        procs.sort_by_key(|p| p.pid);
        procs.dedup();
        procs
    }

    /// Destroys sandbox `id` without an async runtime (for shutdown paths and test guards);
    /// as [`Provisioner::destroy`].
    pub fn destroy_blocking(&self, id: &str, keep_volume: bool) -> ProvisionResult<()> {
        check_name("sandbox id", id)?;
        self.bridges.lock().unwrap().remove(id);
        let meta = self.load(id).ok();
        if meta.is_none() && !self.layout.sandbox(id).exists() {
            return Ok(());
        }
        teardown(&self.layout, &self.freezer, id, meta.as_ref(), !keep_volume)
    }

    fn lock(&self, id: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap()
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    fn load(&self, id: &str) -> ProvisionResult<Meta> {
        let path = self.layout.sandbox(id).join("meta.json");
        let data = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => missing(format!("sandbox {id}"), "no such sandbox"),
            _ => fatal(format!("sandbox {id}"), format!("{}: {e}", path.display())),
        })?;
        serde_json::from_slice(&data)
            .map_err(|e| fatal(format!("sandbox {id}"), format!("{}: {e}", path.display())))
    }

    fn save(&self, meta: &Meta) -> ProvisionResult<()> {
        let path = self.layout.sandbox(&meta.id).join("meta.json");
        let data = serde_json::to_vec_pretty(meta).expect("meta serialises");
        write_private(&path, &data).map_err(|e| fatal(format!("sandbox {}", meta.id), e))
    }

    fn token(&self, id: &str) -> ProvisionResult<String> {
        let path = self.layout.sandbox(id).join("token");
        std::fs::read_to_string(&path)
            .map(|t| t.trim().to_string())
            .map_err(|e| fatal(format!("sandbox {id}"), format!("{}: {e}", path.display())))
    }

    fn snapshot_meta(&self, key: &str) -> ProvisionResult<SnapshotMeta> {
        let path = self.layout.snapshot(key).join("snapshot.json");
        let data = std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => missing(format!("snapshot {key}"), "no such snapshot"),
            _ => fatal(
                format!("snapshot {key}"),
                format!("{}: {e}", path.display()),
            ),
        })?;
        serde_json::from_slice(&data).map_err(|e| {
            fatal(
                format!("snapshot {key}"),
                format!("{}: {e}", path.display()),
            )
        })
    }

    /// Returns the jail of a sandbox made from `meta`.
    fn jail(&self, meta: &Meta) -> ProvisionResult<Jail> {
        let what = format!("sandbox {}", meta.id);
        let snapshot = self.snapshot_meta(&meta.snapshot)?;
        let lower = self.layout.snapshot(&meta.snapshot).join("root");
        let volume = self.layout.volume(&meta.volume);
        let upper = volume.join("upper");
        let root = if self.overlay {
            let mountpoint = self.layout.sandbox(&meta.id).join("root");
            mkdir_private(&mountpoint).map_err(|e| fatal(&what, e))?;
            Root::Overlay {
                lower,
                upper,
                work: volume.join("work"),
                mountpoint,
            }
        } else {
            let seeded = volume.join("seeded");
            if !seeded.exists() {
                copy_tree(&lower, &upper).map_err(|e| fatal(&what, e))?;
                std::fs::write(&seeded, &meta.snapshot).map_err(|e| fatal(&what, e))?;
            }
            Root::Dir(upper)
        };
        let sandbox = self.layout.sandbox(&meta.id);
        let mut env: Vec<(String, String)> = meta.env.clone().into_iter().collect();
        env.push(("HOME".into(), AGENT_HOME.into()));
        Ok(Jail {
            bwrap: self.bwrap.clone(),
            root,
            ro_binds: snapshot.ro_binds,
            ro_files: vec![
                (self.agent.clone(), format!("{RUN_DIR}/sandbox-agent")),
                (sandbox.join("token"), format!("{RUN_DIR}/token")),
            ],
            dirs: std::iter::once(AGENT_HOME.to_string())
                .chain(meta.mount_path.clone())
                .collect(),
            env,
            hostname: meta.name.clone(),
            die_with_parent: false,
            host_network: false,
        })
    }

    /// Starts the tree of `meta` (which has none running), opens its bridge and waits for the
    /// agent's health.
    async fn start(&self, meta: &mut Meta) -> ProvisionResult<Handle> {
        let id = meta.id.clone();
        let what = format!("sandbox {id}");
        let token = self.token(&id)?;
        let jail = self.jail(meta)?;
        let log_path = self.layout.sandbox(&id).join("agent.log");
        let log = std::fs::File::create(&log_path).map_err(|e| fatal(&what, e))?;
        let mut cmd = jail.command(&["/bin/sh", "-c", AGENT_SCRIPT]);
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| fatal(&what, e))?)
            .stderr(log)
            .process_group(0);
        if let Some(procs) = self.freezer.prepare(&id).map_err(|e| fatal(&what, e))? {
            // SAFETY: the hook makes only async-signal-safe system calls.
            unsafe { cmd.pre_exec(move || freezer::enter_before_exec(&procs)) };
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| fatal(&what, format!("cannot start the sandbox: {e}")))?;
        let outer = Proc::of(child.id() as i32);
        // The tree outlives this provider (a daemon restart finds it again); a thread reaps
        // its first process whenever it ends.
        let exit = Arc::new(std::sync::Mutex::new(None::<String>));
        let exit_seen = exit.clone();
        std::thread::spawn(move || {
            let status = child.wait();
            *exit_seen.lock().unwrap() = Some(match status {
                Ok(status) => status.to_string(),
                Err(e) => e.to_string(),
            });
        });
        let outer = outer.ok_or_else(|| {
            fatal(
                &what,
                format!("the sandbox ended at once: {}", log_tail(&log_path)),
            )
        })?;
        meta.pid = Some(outer.pid);
        meta.pid_start = Some(outer.start);
        self.save(meta)?;
        // A test kills the daemon here: the tree runs on, not yet answered for.
        crate::core::gate::hold_async("local-sandbox-starting").await;

        let deadline = Instant::now() + self.start_timeout;
        let ended = || {
            std::thread::sleep(Duration::from_millis(50));
            let status = exit.lock().unwrap().clone().unwrap_or_default();
            fatal(
                &what,
                format!(
                    "the sandbox ended while starting ({status}): {}",
                    log_tail(&log_path)
                ),
            )
        };
        let init = loop {
            if let Some(init) = Tree::of(meta).init {
                break init;
            }
            if !outer.alive() {
                return Err(ended());
            }
            if Instant::now() > deadline {
                return Err(fatal(&what, "its namespaces were not made in time"));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let port = self.open_bridge(meta, init).await?;
        loop {
            if health(port, &token).await == Some(200) {
                break;
            }
            if !outer.alive() {
                return Err(ended());
            }
            if Instant::now() > deadline {
                return Err(ProvisionError::Down {
                    what,
                    detail: format!(
                        "sandbox-agent did not answer its health check within {:?}: {}",
                        self.start_timeout,
                        log_tail(&log_path)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.scrub_token(init, &token);
        Ok(self.handle(&id, port, token))
    }

    /// Starts the sandbox of `meta` again on its volume, after clearing what is left of its
    /// tree (`tree`) and its bridge (the caller holds its lock).
    async fn start_again(&self, meta: &mut Meta, tree: Tree) -> ProvisionResult<Handle> {
        let what = format!("sandbox {}", meta.id);
        self.bridges.lock().unwrap().remove(&meta.id);
        let freezer = self.freezer.clone();
        let owned = meta.id.clone();
        tokio::task::spawn_blocking(move || {
            freezer.kill(&owned, tree.outer, tree.init)?;
            freezer.remove(&owned)
        })
        .await
        .map_err(|e| fatal(&what, e))?
        .map_err(|e| fatal(&what, e))?;
        self.start(meta).await
    }

    /// Overwrites the token in the agent's command line (see the module docs).
    fn scrub_token(&self, init: Proc, token: &str) {
        for agent in init.children() {
            let args = agent.cmdline();
            if !args.windows(token.len()).any(|w| w == token.as_bytes()) {
                continue;
            }
            if let Err(e) = agent.scrub_arg(token.as_bytes()) {
                tracing::warn!(
                    pid = agent.pid,
                    "cannot hide the agent's token from ps: {e}"
                );
            }
        }
    }

    /// Opens (or reuses) the bridge of `meta` into `init`'s network namespace; returns its port.
    async fn open_bridge(&self, meta: &mut Meta, init: Proc) -> ProvisionResult<u16> {
        let what = format!("sandbox {}", meta.id);
        if let Some(b) = self.bridges.lock().unwrap().get(&meta.id) {
            return Ok(b.port);
        }
        let ns_path = format!("/proc/{}/ns/net", init.pid);
        let netns =
            std::fs::File::open(&ns_path).map_err(|e| fatal(&what, format!("{ns_path}: {e}")))?;
        if std::fs::read_link(&ns_path).ok() == std::fs::read_link("/proc/self/ns/net").ok() {
            return Err(fatal(&what, "its network namespace is the daemon's"));
        }
        let bridge = Bridge::start(netns, meta.port)
            .await
            .map_err(|e| fatal(&what, format!("cannot open a port on 127.0.0.1: {e}")))?;
        let port = bridge.port;
        self.bridges.lock().unwrap().insert(meta.id.clone(), bridge);
        if meta.port != Some(port) {
            meta.port = Some(port);
            self.save(meta)?;
        }
        Ok(port)
    }

    fn handle(&self, id: &str, port: u16, token: String) -> Handle {
        Handle::new(id, format!("http://127.0.0.1:{port}"), Token::new(token))
    }

    async fn create_inner(&self, spec: &SandboxSpec) -> ProvisionResult<Handle> {
        check_spec(spec)?;
        let snapshot = match &spec.snapshot {
            Some(key) => {
                self.snapshot_meta(key)?;
                key.clone()
            }
            None => self.snapshot_inner(&SnapshotSpec::default()).await?,
        };
        let id = format!("sb-{}", random_hex(8));
        let (volume, owns_volume) = match &spec.volume {
            Some(v) => {
                if !self.layout.volume(&v.volume).join("upper").is_dir() {
                    return Err(missing(
                        format!("volume {}", v.volume),
                        "no such volume (create_volume first)",
                    ));
                }
                (v.volume.clone(), false)
            }
            None => (id.clone(), true),
        };
        let lock = self.lock(&id);
        let _guard = lock.lock().await;
        let what = format!("sandbox {id}");
        let mut meta = Meta {
            id: id.clone(),
            name: spec.name.clone(),
            snapshot,
            volume,
            owns_volume,
            mount_path: spec.volume.as_ref().map(|v| v.mount_path.clone()),
            env: spec.env.clone(),
            port: None,
            pid: None,
            pid_start: None,
        };
        let made = async {
            if owns_volume {
                self.make_volume(&id)?;
            }
            let dir = self.layout.sandbox(&id);
            mkdir_private(&dir).map_err(|e| fatal(&what, e))?;
            // With its newline: `read` fails on a last line without one.
            write_private(
                &dir.join("token"),
                format!("{}\n", random_hex(24)).as_bytes(),
            )
            .map_err(|e| fatal(&what, e))?;
            self.save(&meta)?;
            self.start(&mut meta).await
        }
        .await;
        match made {
            Ok(handle) => Ok(handle),
            Err(e) => {
                self.bridges.lock().unwrap().remove(&id);
                if let Err(cleanup) = teardown(&self.layout, &self.freezer, &id, Some(&meta), true)
                {
                    tracing::warn!("cleaning up after a failed create: {cleanup}");
                }
                Err(e)
            }
        }
    }

    fn make_volume(&self, id: &str) -> ProvisionResult<()> {
        let dir = self.layout.volume(id);
        for sub in ["upper", "work"] {
            mkdir_private(&dir.join(sub)).map_err(|e| fatal(format!("volume {id}"), e))?;
        }
        Ok(())
    }

    async fn snapshot_inner(&self, spec: &SnapshotSpec) -> ProvisionResult<String> {
        let key = spec.key();
        if !is_minimal(&spec.base) {
            let base = Path::new(&spec.base);
            if !base.is_absolute() || !base.is_dir() {
                return Err(invalid(
                    "snapshot.base",
                    format!(
                        "{:?} must be an absolute host directory, or {MINIMAL_BASE:?} for the minimal root (the host's /usr read-only)",
                        spec.base
                    ),
                ));
            }
        }
        let _guard = self.snapshot_lock.lock().await;
        if self.layout.snapshot(&key).join("snapshot.json").is_file() {
            return Ok(key);
        }
        let build = self
            .layout
            .dir
            .join("snapshots")
            .join(format!(".build-{key}-{}", random_hex(4)));
        let result = self.build_snapshot(spec, &key, &build).await;
        if result.is_err() {
            let _ = remove_tree(&build);
        }
        result.map(|()| key)
    }

    async fn build_snapshot(
        &self,
        spec: &SnapshotSpec,
        key: &str,
        build: &Path,
    ) -> ProvisionResult<()> {
        let what = format!("snapshot {key}");
        let root = build.join("root");
        mkdir_private(&root).map_err(|e| fatal(&what, e))?;
        std::fs::set_permissions(&root, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(|e| fatal(&what, e))?;
        let ro_binds = if is_minimal(&spec.base) {
            minimal_root(&root).map_err(|e| fatal(&what, e))?
        } else {
            copy_tree(Path::new(&spec.base), &root).map_err(|e| fatal(&what, e))?;
            Vec::new()
        };
        let jail = Jail {
            bwrap: self.bwrap.clone(),
            root: Root::Dir(root.clone()),
            ro_binds: ro_binds.clone(),
            ro_files: Vec::new(),
            dirs: Vec::new(),
            env: vec![("HOME".into(), "/root".into())],
            hostname: "snapshot".into(),
            die_with_parent: true,
            host_network: spec.network,
        };
        for (i, command) in spec.setup.iter().enumerate() {
            let log_path = build.join("setup.log");
            let log = std::fs::File::create(&log_path).map_err(|e| fatal(&what, e))?;
            let mut cmd = tokio::process::Command::from(jail.command(&["/bin/sh", "-c", command]));
            cmd.stdin(Stdio::null())
                .stdout(log.try_clone().map_err(|e| fatal(&what, e))?)
                .stderr(log)
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| fatal(&what, format!("cannot run setup[{i}]: {e}")))?;
            let status = match tokio::time::timeout(self.setup_timeout, child.wait()).await {
                Ok(status) => status.map_err(|e| fatal(&what, e))?,
                Err(_) => {
                    let _ = child.kill().await;
                    return Err(fatal(
                        &what,
                        format!(
                            "setup[{i}] `{command}` ran longer than {:?}",
                            self.setup_timeout
                        ),
                    ));
                }
            };
            if !status.success() {
                return Err(fatal(
                    &what,
                    format!(
                        "setup[{i}] `{command}` failed ({status}): {}",
                        log_tail(&log_path)
                    ),
                ));
            }
        }
        let meta = SnapshotMeta {
            spec: spec.clone(),
            ro_binds,
        };
        let data = serde_json::to_vec_pretty(&meta).expect("snapshot meta serialises");
        write_private(&build.join("snapshot.json"), &data).map_err(|e| fatal(&what, e))?;
        std::fs::rename(build, self.layout.snapshot(key)).map_err(|e| fatal(&what, e))
    }

    fn state_of(&self, meta: &Meta) -> ProviderState {
        let tree = Tree::of(meta);
        match tree.outer {
            None => ProviderState::Stopped,
            Some(_) if tree.init.is_none() => ProviderState::Creating,
            Some(_) if self.freezer.frozen(&meta.id, tree.outer, tree.init) => {
                ProviderState::Paused
            }
            Some(_) => ProviderState::Running,
        }
    }
}

impl Provisioner for LocalProvisioner {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn create<'a>(&'a self, spec: &'a SandboxSpec) -> BoxFuture<'a, ProvisionResult<Handle>> {
        Box::pin(self.create_inner(spec))
    }

    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<()>> {
        Box::pin(async move {
            check_name("sandbox id", id)?;
            let lock = self.lock(id);
            let _guard = lock.lock().await;
            let meta = self.load(id)?;
            let tree = Tree::of(&meta);
            if tree.outer.is_none() {
                // Stopped: nothing runs, the files are kept; that is paused enough.
                return Ok(());
            }
            let freezer = self.freezer.clone();
            let id = id.to_string();
            tokio::task::spawn_blocking(move || freezer.freeze(&id, tree.outer, tree.init))
                .await
                .map_err(|e| fatal(format!("sandbox {}", meta.id), e))?
                .map_err(|e| fatal(format!("sandbox {}", meta.id), e))
        })
    }

    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<Handle>> {
        Box::pin(async move {
            check_name("sandbox id", id)?;
            let lock = self.lock(id);
            let _guard = lock.lock().await;
            let mut meta = self.load(id)?;
            let what = format!("sandbox {id}");
            let tree = Tree::of(&meta);
            let (Some(outer), Some(init)) = (tree.outer, tree.init) else {
                // The tree is gone (a reboot, a kill): start it again on its volume.
                return self.start_again(&mut meta, tree).await;
            };
            self.freezer
                .thaw(id, Some(outer), Some(init))
                .map_err(|e| fatal(&what, e))?;
            // A test kills the daemon here: thawed, its resume not yet recorded.
            crate::core::gate::hold_async("local-sandbox-thawed").await;
            let token = self.token(id)?;
            let port = match self.open_bridge(&mut meta, init).await {
                Ok(port) => port,
                // The tree was ending as it was looked at (its server killed, its init
                // following): start it again, as when it was gone.
                Err(_) if Tree::of(&meta).init.is_none() => {
                    let tree = Tree::of(&meta);
                    return self.start_again(&mut meta, tree).await;
                }
                Err(e) => return Err(e),
            };
            let deadline = Instant::now() + self.start_timeout;
            while health(port, &token).await != Some(200) {
                if Instant::now() > deadline {
                    return Err(ProvisionError::Down {
                        what,
                        detail: format!(
                            "sandbox-agent did not answer within {:?} after the thaw",
                            self.start_timeout
                        ),
                    });
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(self.handle(id, port, token))
        })
    }

    fn destroy<'a>(&'a self, id: &'a str, keep_volume: bool) -> BoxFuture<'a, ProvisionResult<()>> {
        Box::pin(async move {
            check_name("sandbox id", id)?;
            let lock = self.lock(id);
            let _guard = lock.lock().await;
            self.bridges.lock().unwrap().remove(id);
            let meta = match self.load(id) {
                Ok(meta) => Some(meta),
                Err(ProvisionError::Missing { .. }) if !self.layout.sandbox(id).exists() => {
                    return Ok(())
                }
                Err(ProvisionError::Missing { .. }) => None,
                Err(e) => return Err(e),
            };
            let (layout, freezer, owned) =
                (self.layout.clone(), self.freezer.clone(), id.to_string());
            let result = tokio::task::spawn_blocking(move || {
                teardown(&layout, &freezer, &owned, meta.as_ref(), !keep_volume)
            })
            .await
            .map_err(|e| fatal(format!("sandbox {id}"), e))?;
            self.locks.lock().unwrap().remove(id);
            result
        })
    }

    fn state<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<ProviderState>> {
        Box::pin(async move {
            check_name("sandbox id", id)?;
            match self.load(id) {
                Ok(meta) => Ok(self.state_of(&meta)),
                Err(ProvisionError::Missing { .. }) => Ok(ProviderState::Missing),
                Err(e) => Err(e),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, ProvisionResult<Vec<Listed>>> {
        Box::pin(async move {
            let dir = self.layout.dir.join("sandboxes");
            let entries =
                std::fs::read_dir(&dir).map_err(|e| fatal(format!("{}", dir.display()), e))?;
            let mut listed = Vec::new();
            for entry in entries.flatten() {
                let Some(id) = entry.file_name().to_str().map(str::to_string) else {
                    continue;
                };
                if check_name("sandbox id", &id).is_err() {
                    continue;
                }
                if let Ok(meta) = self.load(&id) {
                    listed.push(Listed {
                        state: self.state_of(&meta),
                        id,
                        name: Some(meta.name),
                    });
                }
            }
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            Ok(listed)
        })
    }

    fn snapshot<'a>(&'a self, spec: &'a SnapshotSpec) -> BoxFuture<'a, ProvisionResult<String>> {
        Box::pin(self.snapshot_inner(spec))
    }

    fn create_volume<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ProvisionResult<String>> {
        Box::pin(async move {
            check_name("volume", name)?;
            self.make_volume(name)?;
            Ok(name.to_string())
        })
    }

    fn delete_volume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<()>> {
        Box::pin(async move {
            check_name("volume", id)?;
            for listed in self.list().await? {
                if let Ok(meta) = self.load(&listed.id) {
                    if meta.volume == id {
                        return Err(fatal(
                            format!("volume {id}"),
                            format!("in use by sandbox {} (destroy it first)", listed.id),
                        ));
                    }
                }
            }
            remove_tree(&self.layout.volume(id)).map_err(|e| fatal(format!("volume {id}"), e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_and_errors_name_the_key_and_the_rule() {
        for good in ["dev", "a.b_c-1", "wardfs-0123456789abcdef"] {
            check_name("sandbox.name", good).unwrap();
        }
        for bad in [
            "",
            "..",
            ".hidden",
            "-x",
            "a/b",
            "/",
            "a\0b",
            "ü",
            &"x".repeat(65),
        ] {
            let err = check_name("sandbox.name", bad).unwrap_err();
            assert!(matches!(err, ProvisionError::Invalid { .. }), "{bad:?}");
            let text = err.to_string();
            assert!(text.contains("sandbox.name"), "{text}");
        }
    }

    #[test]
    fn sandbox_paths_are_absolute_and_never_climb() {
        for good in ["/", "/home/work", "/home/work/"] {
            check_sandbox_path("k", good).unwrap();
        }
        for bad in ["home", "/a/../b", "/a//b", "/./a", "/a\0", "/.."] {
            let text = check_sandbox_path("k", bad).unwrap_err().to_string();
            assert!(text.starts_with("invalid k:"), "{bad:?}: {text}");
        }
    }

    #[test]
    fn a_spec_with_a_bad_volume_or_env_is_refused_naming_the_key() {
        let mut spec = SandboxSpec {
            name: "dev".into(),
            ..Default::default()
        };
        check_spec(&spec).unwrap();
        spec.volume = Some(super::super::VolumeMount {
            volume: "../etc".into(),
            mount_path: "/work".into(),
        });
        assert!(check_spec(&spec)
            .unwrap_err()
            .to_string()
            .contains("sandbox.volume.volume"));
        spec.volume = Some(super::super::VolumeMount {
            volume: "v".into(),
            mount_path: "/run/wardfs".into(),
        });
        assert!(check_spec(&spec)
            .unwrap_err()
            .to_string()
            .contains("sandbox.volume.mount_path"));
        spec.volume = None;
        spec.env.insert("A=B".into(), "x".into());
        assert!(check_spec(&spec)
            .unwrap_err()
            .to_string()
            .contains("sandbox.env.A=B"));
    }

    #[test]
    fn the_overlay_never_gets_a_path_that_splits_its_options() {
        assert!(jail::overlay_safe(Path::new("/var/lib/wardfs/provision")));
        assert!(!jail::overlay_safe(Path::new("/tmp/a,upperdir=/etc")));
        assert!(!jail::overlay_safe(Path::new("/tmp/a:b")));
    }
}

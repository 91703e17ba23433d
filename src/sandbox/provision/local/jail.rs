//! The command line that starts a process tree in a sandbox of its own: `unshare` for a private
//! mount namespace in which the root is assembled (an overlay of the snapshot and the volume),
//! then `bwrap` for the rest.
//!
//! bwrap makes a user namespace (only root is mapped, to the caller's root: a sandboxed root
//! has capabilities over its own namespaces and none over the host's), a pid namespace whose
//! init reaps, a network namespace with loopback only (brought up by bwrap), IPC and UTS
//! namespaces, and binds the assembled root as `/` with `pivot_root`, so nothing of the host
//! is reachable but what is bound in: `/proc` of the new pid namespace, a minimal `/dev`, a
//! tmpfs `/run` holding the agent binary and its token (read-only), and the snapshot's
//! read-only host binds (`/usr` for the minimal root). User namespaces cannot be made again
//! inside (`--disable-userns`). The environment is cleared.
//!
//! One exception to the loopback-only network: a snapshot's setup commands share the host's
//! network when its spec asks (`snapshot_network = true`, to download dependencies); they run
//! before any sandbox-agent exists, and no sandbox made from the snapshot gets that network.
//!
//! The overlay is mounted in the `unshare`d mount namespace, never in the host's: it goes away
//! with the last process of the sandbox, so a killed daemon leaves no mount behind.

use std::path::{Path, PathBuf};
use std::process::Command;

/// How the root is assembled.
#[derive(Debug, Clone)]
pub enum Root {
    /// An overlay: `lower` read-only, changes in `upper` (`work` is overlayfs's scratch dir),
    /// mounted on `mountpoint` in a private mount namespace.
    Overlay {
        lower: PathBuf,
        upper: PathBuf,
        work: PathBuf,
        mountpoint: PathBuf,
    },
    /// A directory bound as the root, read-write (a snapshot being built, or a copy where
    /// overlayfs is unavailable).
    Dir(PathBuf),
}

/// Everything a sandbox's process tree is started with.
#[derive(Debug, Clone)]
pub struct Jail {
    pub bwrap: PathBuf,
    pub root: Root,
    /// Host directories bound read-only at the same path.
    pub ro_binds: Vec<PathBuf>,
    /// Host files bound read-only at a path inside (`/run/wardfs/...`).
    pub ro_files: Vec<(PathBuf, String)>,
    /// Directories made inside before the command starts.
    pub dirs: Vec<String>,
    pub env: Vec<(String, String)>,
    pub hostname: String,
    /// Kill the tree when the starting process dies (for one-off commands).
    pub die_with_parent: bool,
    /// Share the host's network (a snapshot's setup that downloads dependencies, when asked):
    /// no network namespace of its own, and the host's `/etc/resolv.conf` bound read-only.
    /// Never for a sandbox's tree, whose server must stay on a loopback-only network.
    pub host_network: bool,
}

/// The resolver configuration a setup with the host's network reads.
const RESOLV_CONF: &str = "/etc/resolv.conf";

/// The default `PATH` inside.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Jail {
    /// Returns the command that runs `argv` inside.
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut bwrap: Vec<String> = vec![self.bwrap.to_string_lossy().into_owned()];
        let mut arg = |a: &[&str]| bwrap.extend(a.iter().map(|s| s.to_string()));
        arg(&[
            "--unshare-user",
            "--uid",
            "0",
            "--gid",
            "0",
            "--disable-userns",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--new-session",
            "--clearenv",
            "--hostname",
            &self.hostname,
        ]);
        if self.die_with_parent {
            arg(&["--die-with-parent"]);
        }
        if !self.host_network {
            arg(&["--unshare-net"]);
        }
        let root = match &self.root {
            Root::Overlay { mountpoint, .. } => mountpoint,
            Root::Dir(dir) => dir,
        };
        arg(&["--bind", &root.to_string_lossy(), "/"]);
        for dir in &self.ro_binds {
            let d = dir.to_string_lossy();
            arg(&["--ro-bind", &d, &d]);
        }
        arg(&["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/run"]);
        for (src, dest) in &self.ro_files {
            arg(&["--ro-bind", &src.to_string_lossy(), dest]);
        }
        if self.host_network && Path::new(RESOLV_CONF).is_file() {
            arg(&["--ro-bind", RESOLV_CONF, RESOLV_CONF]);
        }
        for dir in &self.dirs {
            arg(&["--dir", dir]);
        }
        arg(&["--setenv", "PATH", PATH]);
        for (k, v) in &self.env {
            arg(&["--setenv", k, v]);
        }
        arg(&["--chdir", "/", "--"]);
        arg(argv);

        match &self.root {
            Root::Dir(_) => {
                let mut cmd = Command::new(&bwrap[0]);
                cmd.args(&bwrap[1..]);
                cmd.env_clear();
                cmd
            }
            Root::Overlay {
                lower,
                upper,
                work,
                mountpoint,
            } => {
                // The overlay's options are split at ',' and ':'; the paths are checked for
                // them when the provider opens (see `check_state_dir`).
                let mut cmd = Command::new("unshare");
                cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
                    .arg(
                        "mount -t overlay wardfs -o \"lowerdir=$1,upperdir=$2,workdir=$3\" \"$4\" \
                         && shift 4 && exec \"$@\"",
                    )
                    .arg("sh")
                    .args([lower, upper, work, mountpoint].map(|p| p.as_os_str()))
                    .args(&bwrap);
                cmd.env_clear().env("PATH", PATH);
                cmd
            }
        }
    }
}

/// Returns whether `path` can be a part of overlayfs's mount options.
pub fn overlay_safe(path: &Path) -> bool {
    !path
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .any(|b| matches!(b, b',' | b':' | b'\\' | b'"' | b'$' | b'`'))
}

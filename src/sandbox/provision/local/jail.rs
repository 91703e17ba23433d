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
//!
//! The same jail runs a command on the host's own files, confined to a fork (`wardfs run
//! --fork`, [`Root::Host`]): the host's root bound read-only, what the command must not see
//! covered, the fork bound read-write, a private `/tmp`, and no capabilities at all.

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
    /// The host's root bound read-only (a command run on the host's files, `wardfs run
    /// --fork`); every capability is dropped. Built by [`Root::host`].
    Host(HostRoot),
}

/// What a [`Root::Host`] changes in the host's tree, each path absolute and resolved.
#[derive(Debug, Clone, Default)]
pub struct HostRoot {
    /// Directories covered by an empty read-only tmpfs (what the command must not see).
    pub hidden_dirs: Vec<PathBuf>,
    /// Files (a socket) covered by `/dev/null`.
    pub hidden_files: Vec<PathBuf>,
    /// Directories bound read-write at the same path (made inside a hidden or scratch
    /// directory when one covers them).
    pub writable: Vec<PathBuf>,
    /// Directories covered by an empty private tmpfs the command may write, gone when it ends.
    pub scratch: Vec<PathBuf>,
}

impl Root {
    /// Returns the host's root, read-only but for `writable` and `scratch`, with `hidden`
    /// covered. Each path is resolved (symlinks followed); a missing one is skipped, and so is
    /// one that a scratch or another hidden directory already covers. Refuses to hide `/`.
    pub fn host(
        hidden: &[PathBuf],
        writable: &[PathBuf],
        scratch: &[&str],
    ) -> std::io::Result<Root> {
        let scratch: Vec<PathBuf> = scratch.iter().map(PathBuf::from).collect();
        let mut dirs: Vec<PathBuf> = Vec::new();
        let mut files: Vec<PathBuf> = Vec::new();
        for path in hidden {
            let Ok(real) = std::fs::canonicalize(path) else {
                continue;
            };
            if real == Path::new("/") {
                return Err(std::io::Error::other(format!(
                    "{} is the root directory: it cannot be hidden",
                    path.display()
                )));
            }
            if real.is_dir() {
                dirs.push(real);
            } else {
                files.push(real);
            }
        }
        dirs.sort();
        dirs.dedup();
        // What a fresh tmpfs covers already: the scratch directories and the jail's own `/run`.
        let fresh: Vec<PathBuf> = scratch.iter().cloned().chain(["/run".into()]).collect();
        let under = |p: &Path, by: &[PathBuf]| by.iter().any(|d| p.starts_with(d));
        let below = |p: &Path, by: &[PathBuf]| by.iter().any(|d| p != d && p.starts_with(d));
        let kept_dirs: Vec<PathBuf> = dirs
            .iter()
            .filter(|d| !below(d, &dirs) && !under(d, &fresh))
            .cloned()
            .collect();
        files.retain(|f| !under(f, &kept_dirs) && !under(f, &fresh));
        let writable = writable
            .iter()
            .map(std::fs::canonicalize)
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Root::Host(HostRoot {
            hidden_dirs: kept_dirs,
            hidden_files: files,
            writable,
            scratch,
        }))
    }
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
    /// Returns the command that runs `argv` inside, in `/`.
    pub fn command(&self, argv: &[&str]) -> Command {
        self.command_in(argv, "/")
    }

    /// Returns the command that runs `argv` inside, in the directory `cwd`.
    pub fn command_in(&self, argv: &[&str], cwd: &str) -> Command {
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
        match &self.root {
            Root::Overlay {
                mountpoint: dir, ..
            }
            | Root::Dir(dir) => arg(&["--bind", &dir.to_string_lossy(), "/"]),
            Root::Host(_) => arg(&["--cap-drop", "ALL", "--ro-bind", "/", "/"]),
        }
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
        if let Root::Host(host) = &self.root {
            host.args(&mut arg);
        }
        for dir in &self.dirs {
            arg(&["--dir", dir]);
        }
        arg(&["--setenv", "PATH", PATH]);
        for (k, v) in &self.env {
            arg(&["--setenv", k, v]);
        }
        arg(&["--chdir", cwd, "--"]);
        arg(argv);

        match &self.root {
            Root::Dir(_) | Root::Host(_) => {
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

impl HostRoot {
    /// bwrap's arguments for it, in the order they must run: the scratch and hiding tmpfs
    /// first, then the writable binds (whose mount points may be made inside them), then the
    /// hiding tmpfs made read-only (each on its own: the binds beneath stay writable).
    fn args(&self, arg: &mut impl FnMut(&[&str])) {
        for dir in self.scratch.iter().chain(&self.hidden_dirs) {
            arg(&["--tmpfs", &dir.to_string_lossy()]);
        }
        for file in &self.hidden_files {
            arg(&["--ro-bind", "/dev/null", &file.to_string_lossy()]);
        }
        for dir in &self.writable {
            let d = dir.to_string_lossy();
            arg(&["--bind", &d, &d]);
        }
        for dir in &self.hidden_dirs {
            arg(&["--remount-ro", &dir.to_string_lossy()]);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// bwrap's arguments of a jail on the host's root.
    fn args(root: Root) -> Vec<String> {
        let jail = Jail {
            bwrap: "/usr/bin/bwrap".into(),
            root,
            ro_binds: Vec::new(),
            ro_files: Vec::new(),
            dirs: Vec::new(),
            env: Vec::new(),
            hostname: "h".into(),
            die_with_parent: true,
            host_network: false,
        };
        let cmd = jail.command_in(&["true"], "/w");
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    fn s(p: &Path) -> String {
        p.to_string_lossy().into_owned()
    }

    #[test]
    fn the_hosts_root_hides_before_it_binds_and_locks_after() {
        let tmp = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(tmp.path()).unwrap();
        let (state, fork, socket) = (real.join("state"), real.join("mnt/fork"), real.join("s"));
        std::fs::create_dir_all(state.join("inner")).unwrap();
        std::fs::create_dir_all(&fork).unwrap();
        std::fs::write(&socket, "").unwrap();
        std::fs::write(state.join("sock"), "").unwrap();
        std::fs::create_dir_all(real.join("scratch/x")).unwrap();
        let scratch = s(&real.join("scratch"));
        let hidden = [
            state.join("inner"),
            state.clone(),
            real.join("mnt"),
            socket.clone(),
            state.join("sock"),
            real.join("missing"),
            real.join("scratch/x"),
            "/run/anything".into(),
        ];
        let root = Root::host(&hidden, std::slice::from_ref(&fork), &[&scratch]).unwrap();
        let Root::Host(h) = &root else { panic!() };
        // Within another hidden directory or a fresh tmpfs: covered already; missing: skipped.
        let mut want = vec![real.join("mnt"), state.clone()];
        want.sort();
        assert_eq!(h.hidden_dirs, want);
        assert_eq!(h.hidden_files, std::slice::from_ref(&socket));
        let a = args(root);
        let at = |wanted: &[&str]| {
            a.windows(wanted.len())
                .position(|w| w == wanted)
                .unwrap_or_else(|| panic!("no {wanted:?} in {a:?}"))
        };
        let (mnt, fork) = (s(&real.join("mnt")), s(&fork));
        assert!(at(&["--cap-drop", "ALL"]) < at(&["--ro-bind", "/", "/"]));
        assert!(at(&["--ro-bind", "/", "/"]) < at(&["--tmpfs", &scratch]));
        assert!(at(&["--tmpfs", &mnt]) < at(&["--bind", &fork, &fork]));
        assert!(at(&["--bind", &fork, &fork]) < at(&["--remount-ro", &mnt]));
        assert!(at(&["--ro-bind", "/dev/null", &s(&socket)]) > 0);
        assert!(at(&["--chdir", "/w", "--", "true"]) > 0);
        assert!(Root::host(&["/".into()], &[], &[]).is_err());
    }
}

//! `wardfs doctor`: checks that this machine can run the daemon and mount its zones, and says
//! what to fix.
//!
//! Runs locally, without the daemon (it is most useful when the daemon will not start). Each check
//! ends `ok`, `warn` (works, but slower or limited) or `FAIL` (the mount or the API cannot work),
//! with the fix for anything not ok.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::Serialize;

use crate::config::{Backing, Settings, Transport};

/// Check FUSE, kernel passthrough, permissions, the mount point, the zones and the socket
///
/// Prints one line per check and, for each problem, the command or setting that fixes it.
/// Exits 0 when the daemon can run here (warnings allowed), 8 when a check failed.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One check's result.
#[derive(Debug, Serialize)]
pub struct Check {
    pub check: &'static str,
    pub level: Level,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

fn ok(check: &'static str, detail: impl Into<String>) -> Check {
    Check {
        check,
        level: Level::Ok,
        detail: detail.into(),
        fix: None,
    }
}

fn warn(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check,
        level: Level::Warn,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

fn fail(check: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check,
        level: Level::Fail,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

pub fn run(config: Option<&Path>, socket: Option<PathBuf>, json: bool, _: &Args) -> ExitCode {
    let mut checks = Vec::new();
    let settings = match Settings::load(config) {
        Ok(mut s) => {
            if let Some(sock) = socket {
                s.socket = sock;
            }
            checks.push(ok(
                "config",
                match &s.source {
                    Some(p) => format!("{} is valid", p.display()),
                    None => "the embedded default".to_string(),
                },
            ));
            Some(s)
        }
        Err(e) => {
            checks.push(fail(
                "config",
                e.to_string(),
                "fix the key named above (config.toml in the repository documents every key)",
            ));
            None
        }
    };
    checks.push(dev_fuse());
    checks.push(fusermount());
    checks.push(fuse_control(FUSE_CONTROL, "/proc/self/mountinfo"));
    checks.push(passthrough());
    if let Some(s) = &settings {
        checks.push(io_uring(s.fuse.transport));
    }
    checks.push(fd_limit());
    checks.push(inotify());
    if let Some(s) = &settings {
        let running = running_daemon(&s.socket);
        checks.push(mount_point(&s.mount, running.as_ref()));
        for z in &s.zones {
            checks.push(zone(z.id.name(), &z.backing));
        }
        checks.push(daemon(&s.socket, running.as_ref()));
    }
    report(&checks, json)
}

fn report(checks: &[Check], json: bool) -> ExitCode {
    let failed = checks.iter().any(|c| c.level == Level::Fail);
    if json {
        println!("{}", serde_json::json!({ "ok": !failed, "checks": checks }));
    } else {
        let color = crate::cli::output::color(&std::io::stdout());
        for c in checks {
            let (tag, paint) = match c.level {
                Level::Ok => ("ok  ", "32"),
                Level::Warn => ("warn", "33"),
                Level::Fail => ("FAIL", "31"),
            };
            if color {
                println!("\x1b[{paint}m{tag}\x1b[0m  {:<14} {}", c.check, c.detail);
            } else {
                println!("{tag}  {:<14} {}", c.check, c.detail);
            }
            if let Some(fix) = &c.fix {
                println!("      {:<14} fix: {fix}", "");
            }
        }
        if failed {
            println!("\nwardfs cannot run as configured here: fix the FAIL lines above.");
        } else {
            println!("\nwardfs can run here.");
        }
    }
    if failed {
        ExitCode::from(8)
    } else {
        ExitCode::SUCCESS
    }
}

fn dev_fuse() -> Check {
    const C: &str = "/dev/fuse";
    use std::os::unix::fs::FileTypeExt;
    match std::fs::metadata("/dev/fuse") {
        Err(e) => fail(
            C,
            format!("missing ({e})"),
            "load the module (`modprobe fuse`); in a container, pass the device (`--device /dev/fuse`)",
        ),
        Ok(md) if !md.file_type().is_char_device() => fail(
            C,
            "exists but is not a character device",
            "remove it and load the fuse module (`modprobe fuse`)",
        ),
        Ok(_) => match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
        {
            Ok(_) => ok(C, "present and opens read-write"),
            Err(e) => fail(
                C,
                format!("cannot open it read-write: {e}"),
                "make it mode 0666 (`chmod 0666 /dev/fuse`) or run the daemon as a user who can open it",
            ),
        },
    }
}

/// Finds `cmd` on `$PATH`.
fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(cmd))
            .find(|f| f.is_file())
    })
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn fusermount() -> Check {
    const C: &str = "fusermount3";
    use std::os::unix::fs::PermissionsExt;
    match which("fusermount3") {
        None if is_root() => warn(
            C,
            "not installed (root mounts without it, but stale mounts are cleared with it)",
            "apt-get install fuse3",
        ),
        None => fail(
            C,
            "not installed: an unprivileged daemon cannot mount without it",
            "apt-get install fuse3",
        ),
        Some(p) => {
            let setuid = std::fs::metadata(&p)
                .map(|m| m.permissions().mode() & 0o4000 != 0)
                .unwrap_or(false);
            if setuid || is_root() {
                ok(C, format!("{}", p.display()))
            } else {
                fail(
                    C,
                    format!("{} is not setuid root", p.display()),
                    format!(
                        "chmod u+s {} (as installed by the fuse3 package)",
                        p.display()
                    ),
                )
            }
        }
    }
}

/// Parses the kernel release ("6.18.44-…") into (major, minor).
pub fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut it = release.trim().split(|c: char| !c.is_ascii_digit());
    let major = it.next()?.parse().ok()?;
    let minor = it.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether the process has CAP_SYS_ADMIN in its effective set (from /proc).
fn has_cap_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

fn passthrough() -> Check {
    const C: &str = "passthrough";
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    let new_enough = kernel_version(release).is_some_and(|v| v >= (6, 9));
    match (new_enough, has_cap_sys_admin()) {
        (true, true) => ok(
            C,
            format!(
                "kernel {release} with CAP_SYS_ADMIN: file reads and writes bypass the daemon \
                 (the daemon's log says `kernel passthrough` once mounted)"
            ),
        ),
        (false, _) => warn(
            C,
            format!(
                "kernel {release} is older than 6.9: file I/O goes through the daemon (slower)"
            ),
            "run on Linux 6.9 or newer for native-speed reads and writes",
        ),
        (true, false) => warn(
            C,
            format!(
                "kernel {release} supports it, but the daemon lacks CAP_SYS_ADMIN: file I/O goes \
                 through the daemon (slower)"
            ),
            "run the daemon as root, or grant it: setcap cap_sys_admin+ep $(command -v wardfs)",
        ),
    }
}

/// Where the FUSE control filesystem (fusectl) is mounted: a mount's connection is aborted there.
const FUSE_CONTROL: &str = "/sys/fs/fuse/connections";

/// Whether fusectl is mounted at `dir` (as `mountinfo` lists the mounts). Without it, a killed
/// daemon's mount is unmounted by the echo's watchdog rather than aborted in place.
fn fuse_control(dir: &str, mountinfo: &str) -> Check {
    const C: &str = "fuse control";
    let mounted = std::fs::read_to_string(mountinfo).is_ok_and(|info| {
        info.lines().any(|l| {
            let mut fields = l.split(' ');
            let at = fields.nth(4);
            let kind = l.split(" - ").nth(1).and_then(|t| t.split(' ').next());
            at == Some(dir) && kind == Some("fusectl")
        })
    });
    if mounted {
        return ok(C, format!("fusectl is mounted on {dir}"));
    }
    warn(
        C,
        format!(
            "fusectl is not mounted on {dir}: when the daemon is killed, its mount is unmounted \
             instead of aborted and left in place for the next start to clear"
        ),
        format!("sudo mount -t fusectl fusectl {dir} (systemd mounts it at boot)"),
    )
}

/// The `fuse` module's switch for FUSE over io_uring.
const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn io_uring(transport: Transport) -> Check {
    const C: &str = "io_uring";
    if transport == Transport::Device {
        return ok(
            C,
            "fuse.transport = \"device\": requests go through /dev/fuse",
        );
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let release = release.trim();
    if kernel_version(release).is_none_or(|v| v < (6, 14)) {
        return warn(
            C,
            format!("kernel {release} is older than 6.14: requests go through /dev/fuse"),
            "run on Linux 6.14 or newer for FUSE over io_uring (fewer system calls per request)",
        );
    }
    match std::fs::read_to_string(ENABLE_URING).map(|s| s.trim().to_string()) {
        Ok(v) if v == "Y" || v == "1" => ok(
            C,
            format!(
                "kernel {release} with {ENABLE_URING} = Y: requests travel over io_uring (the \
                 daemon's log says `transport=\"io_uring\"` once mounted)"
            ),
        ),
        Ok(v) => warn(
            C,
            format!("{ENABLE_URING} is {v}: requests go through /dev/fuse (slower)"),
            format!("echo Y | sudo tee {ENABLE_URING}, then restart the daemon"),
        ),
        Err(e) => warn(
            C,
            format!("cannot read {ENABLE_URING} ({e}): requests go through /dev/fuse"),
            "load the fuse module (modprobe fuse) on Linux 6.14 or newer",
        ),
    }
}

fn fd_limit() -> Check {
    const C: &str = "open files";
    let lim = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    // The daemon raises its soft limit to the hard one; the mount keeps one fd per known directory.
    match lim.maximum {
        None => ok(C, "no hard limit"),
        Some(n) if n >= 65_536 => ok(C, format!("hard limit {n}")),
        Some(n) => warn(
            C,
            format!(
                "hard limit {n}: the mount keeps one descriptor per directory the kernel caches, so it caches at most ~{} directories and looks the rest up again",
                n / 4 * 3
            ),
            "raise it (`ulimit -Hn 1048576`, LimitNOFILE= in the systemd unit, or /etc/security/limits.conf)",
        ),
    }
}

fn inotify() -> Check {
    const C: &str = "inotify";
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/fs/inotify/{f}"))
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    match read("max_user_watches") {
        None => warn(
            C,
            "cannot read /proc/sys/fs/inotify/max_user_watches: changes made beside the mount may show late",
            "make /proc/sys available to the daemon",
        ),
        Some(n) if n >= 65_536 => ok(C, format!("{n} watches per user")),
        Some(n) => warn(
            C,
            format!("only {n} watches per user: one is used per directory of the zones"),
            "sysctl fs.inotify.max_user_watches=524288",
        ),
    }
}

/// What the daemon listening on the socket says of itself (`/v1/status`), if one answers.
fn running_daemon(socket: &Path) -> Option<serde_json::Value> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let client = crate::client::Client::new(socket.to_path_buf());
    rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(5), client.get("/v1/status"))
            .await
            .ok()?
            .ok()
    })
}

fn mount_point(path: &Path, running: Option<&serde_json::Value>) -> Check {
    const C: &str = "mount point";
    let shown = path.display();
    let served_by_it = running.is_some_and(|s| {
        s["mounted"].as_bool() == Some(true) && s["mount"].as_str() == path.to_str()
    });
    if served_by_it {
        let pid = running.and_then(|s| s["pid"].as_u64()).unwrap_or(0);
        return ok(
            C,
            format!("{shown}: mounted by the running daemon (pid {pid})"),
        );
    }
    if crate::fuse::is_mounted(path) {
        return match rustix::fs::statvfs(path) {
            gone if crate::fuse::daemon_gone(&gone) => warn(
                C,
                format!("{shown}: a stale mount of a daemon that died"),
                format!("nothing (`wardfs serve` clears it), or by hand: fusermount3 -uz {shown}"),
            ),
            Ok(_) => warn(
                C,
                format!("{shown}: already mounted (a running daemon?)"),
                "stop the other daemon, or set `mount` in the config to another directory",
            ),
            Err(e) => fail(
                C,
                format!("{shown}: mounted but unusable: {e}"),
                format!("fusermount3 -uz {shown}"),
            ),
        };
    }
    match std::fs::metadata(path) {
        Ok(md) if !md.is_dir() => fail(
            C,
            format!("{shown} exists and is not a directory"),
            "set `mount` in the config to a directory",
        ),
        Ok(_) => match std::fs::read_dir(path).map(|mut d| d.next().is_some()) {
            Ok(true) => warn(
                C,
                format!("{shown} is not empty: the mount will hide what is there"),
                "use an empty directory for `mount`",
            ),
            Ok(false) => ok(C, format!("{shown} (empty directory)")),
            Err(e) => fail(
                C,
                format!("{shown}: {e}"),
                "give the daemon's user access to it",
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match nearest_existing(path) {
            Some(anc) if writable(&anc) => ok(
                C,
                format!("{shown} (will be created under {})", anc.display()),
            ),
            Some(anc) => fail(
                C,
                format!("{shown} is missing and {} is not writable", anc.display()),
                format!("mkdir -p {shown} as a user who can, or set `mount` elsewhere"),
            ),
            None => fail(
                C,
                format!("{shown}: no existing parent"),
                "set `mount` to a path under an existing directory",
            ),
        },
        Err(e) => fail(
            C,
            format!("{shown}: {e}"),
            "give the daemon's user access to it",
        ),
    }
}

fn nearest_existing(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|a| a.as_os_str().is_empty() || a.exists())
        .map(|a| {
            if a.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                a.to_path_buf()
            }
        })
}

fn writable(dir: &Path) -> bool {
    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok()
}

fn zone(name: &'static str, backing: &Backing) -> Check {
    let check = if name == "cache" {
        "zone cache"
    } else {
        "zone workspace"
    };
    match backing {
        Backing::Disabled(why) => ok(check, format!("disabled: {why}")),
        Backing::Sandbox(r) => ok(
            check,
            format!(
                "served from sandbox `{}` at {} (`wardfs sandbox check {}` tests the connection)",
                r.sandbox.name, r.path, r.sandbox.name
            ),
        ),
        Backing::Dir { path, create } => {
            let shown = path.display();
            match std::fs::metadata(path) {
                Ok(md) if md.is_dir() => {
                    if writable(path) {
                        ok(check, format!("{shown}"))
                    } else {
                        warn(
                            check,
                            format!("{shown} is not writable: changes will fail"),
                            "set read_only = true for this zone, or fix the directory's owner",
                        )
                    }
                }
                Ok(_) => fail(
                    check,
                    format!("{shown} is not a directory"),
                    "point the zone at a directory",
                ),
                Err(_) if *create => match nearest_existing(path) {
                    Some(anc) if writable(&anc) => ok(check, format!("{shown} (will be created)")),
                    _ => fail(
                        check,
                        format!("{shown} is missing and cannot be created"),
                        format!("mkdir -p {shown}"),
                    ),
                },
                Err(e) => fail(
                    check,
                    format!("{shown}: {e}"),
                    "create the directory or fix the zone's `dir` in the config",
                ),
            }
        }
    }
}

fn daemon(socket: &Path, running: Option<&serde_json::Value>) -> Check {
    const C: &str = "daemon";
    let shown = socket.display();
    if let Some(s) = running {
        return ok(
            C,
            format!(
                "running (pid {}, version {}), listening on {shown}",
                s["pid"].as_u64().unwrap_or(0),
                s["version"].as_str().unwrap_or("?")
            ),
        );
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => ok(C, format!("running, listening on {shown}")),
        Err(e) if socket.exists() => warn(
            C,
            format!("{shown} exists but nothing answers ({e}): a stale socket"),
            "nothing (`wardfs serve` replaces it)",
        ),
        Err(_) => ok(
            C,
            format!("not running (start it with `wardfs serve`; it will listen on {shown})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::{fuse_control, kernel_version, Level, FUSE_CONTROL};

    #[test]
    fn fuse_control_is_found_in_mountinfo_by_its_place_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let info = dir.path().join("mountinfo");
        let line = |at: &str, kind: &str| {
            format!("36 25 0:31 / {at} rw,relatime shared:14 - {kind} {kind} rw\n")
        };
        let path = info.to_str().unwrap();
        std::fs::write(&info, line(FUSE_CONTROL, "fusectl")).unwrap();
        assert_eq!(fuse_control(FUSE_CONTROL, path).level, Level::Ok);
        std::fs::write(
            &info,
            line(FUSE_CONTROL, "sysfs") + &line("/mnt", "fusectl"),
        )
        .unwrap();
        let c = fuse_control(FUSE_CONTROL, path);
        assert_eq!(c.level, Level::Warn);
        assert!(c.fix.unwrap().contains("mount -t fusectl"));
    }

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(kernel_version("6.9.0"), Some((6, 9)));
        assert_eq!(kernel_version("5.15.0-91-generic\n"), Some((5, 15)));
        assert_eq!(kernel_version("garbage"), None);
        assert!(kernel_version("6.10.1").unwrap() >= (6, 9));
        assert!(kernel_version("6.8.12").unwrap() < (6, 9));
    }
}

//! `wardfs unmount`: clears the configured mount point when no daemon serves it any more.
//!
//! A daemon unmounts itself on SIGINT/SIGTERM; this is for the other cases, a daemon killed with
//! SIGKILL or by the OOM killer, whose mount answers every call with ENOTCONN until it is
//! detached. The systemd unit runs it as `ExecStopPost`, so a stopped or crashed service never
//! leaves a dead mount behind. It never detaches a mount that a live daemon still serves.
//!
//! `wardfs unmount DIR` undoes `wardfs fork NAME --mount DIR` (see `crate::fuse::binds`).

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use crate::config::Settings;

/// Detach the mount point a dead daemon left mounted, or a fork bound at DIR
///
/// Without DIR: does nothing when nothing is mounted there (exit 0); refuses (exit 6) when a
/// live daemon still serves the mount: stop that daemon instead (SIGTERM unmounts cleanly).
///
/// With DIR: unmounts the fork bound there by `wardfs fork NAME --mount DIR` (root only); the
/// fork itself stays. Refuses (exit 6) anything else mounted at DIR.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A directory a fork is bound at (`wardfs fork NAME --mount DIR`)
    #[arg(value_name = "DIR")]
    pub dir: Option<std::path::PathBuf>,
}

/// `wardfs unmount DIR`: unmounts the fork's bind at `dir`.
fn unbind(json: bool, dir: &Path) -> ExitCode {
    let shown = crate::core::text::name(&dir.display().to_string()).into_owned();
    match crate::fuse::binds::unbind(dir) {
        Ok(fork) => {
            if json {
                println!(
                    "{}",
                    json!({ "mount": shown, "state": "unmounted", "fork": fork })
                );
            } else {
                println!(
                    "{shown}: unmounted (fork {} stays)",
                    crate::core::text::name(&fork)
                );
            }
            ExitCode::SUCCESS
        }
        Err(crate::fuse::binds::BindError::Refused(why)) => {
            crate::cli::fail(json, "REJECTED", &why, Some(&shown));
            ExitCode::from(6)
        }
        Err(e) => {
            crate::cli::fail(json, "INTERNAL", &e.to_string(), Some(&shown));
            ExitCode::from(9)
        }
    }
}

pub fn run(config: Option<&Path>, json: bool, args: &Args) -> ExitCode {
    let settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return crate::cli::config_failed(json, &e),
    };
    if let Some(dir) = &args.dir {
        // By name: a hung mount is never stat'ed.
        let resolved = crate::fuse::binds::resolved;
        if resolved(dir) != resolved(&settings.mount) {
            return unbind(json, dir);
        }
    }
    let mount = &settings.mount;
    let shown = mount.display().to_string();
    let say = |state: &str, text: String| {
        if json {
            println!("{}", json!({ "mount": shown, "state": state }));
        } else {
            println!("{text}");
        }
    };
    if !crate::fuse::is_mounted(mount) {
        say(
            "not_mounted",
            format!("{shown}: not mounted; nothing to do"),
        );
        return ExitCode::SUCCESS;
    }
    // statfs is never answered from the kernel's caches: a dead daemon's mount says ENOTCONN, and
    // one whose daemon was killed mid-request may not answer at all (see `fuse::prepare_mountpoint`).
    let answer = crate::fuse::statvfs_within(mount, crate::fuse::HUNG_MOUNT_TIMEOUT);
    if answer.is_none() {
        if let Err(e) = crate::fuse::abort_connection(mount) {
            let msg = format!("{shown} does not answer and its connection cannot be aborted: {e}; as root: umount -f {shown}");
            crate::cli::fail(json, "INTERNAL", &msg, Some(&shown));
            return ExitCode::from(9);
        }
    }
    match answer.unwrap_or(Err(rustix::io::Errno::NOTCONN)) {
        gone if crate::fuse::daemon_gone(&gone) => match crate::fuse::unmount_lazily(mount) {
            Ok(()) => {
                say(
                    "unmounted",
                    format!("{shown}: the daemon that served it is gone; unmounted"),
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                let msg = format!("cannot unmount {shown}: {e} (try `fusermount3 -uz {shown}` or umount -l as root)");
                crate::cli::fail(json, "INTERNAL", &msg, Some(&shown));
                ExitCode::from(9)
            }
        },
        _ => {
            let msg = format!("{shown} is served by a live daemon: stop it instead (SIGTERM, or `systemctl --user stop wardfs`), which unmounts cleanly");
            crate::cli::fail(json, "REJECTED", &msg, Some(&shown));
            ExitCode::from(6)
        }
    }
}

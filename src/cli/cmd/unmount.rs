//! `wardfs unmount`: clears the configured mount point when no daemon serves it any more.
//!
//! A daemon unmounts itself on SIGINT/SIGTERM; this is for the other cases, a daemon killed with
//! SIGKILL or by the OOM killer, whose mount answers every call with ENOTCONN until it is
//! detached. The systemd unit runs it as `ExecStopPost`, so a stopped or crashed service never
//! leaves a dead mount behind. It never detaches a mount that a live daemon still serves.

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use crate::config::Settings;

/// Detach the configured mount point if a daemon died and left it mounted
///
/// Does nothing when nothing is mounted there (exit 0). Refuses (exit 6) when a live daemon
/// still serves the mount: stop that daemon instead (SIGTERM unmounts cleanly).
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(config: Option<&Path>, json: bool, _: &Args) -> ExitCode {
    let settings = match Settings::load(config) {
        Ok(s) => s,
        Err(e) => return crate::cli::config_failed(json, &e),
    };
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

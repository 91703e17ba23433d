//! Small tools every area needs: finding an installed program ([`require_tool`], [`which`]), a
//! free loopback port ([`free_port`]), random tokens ([`random_hex`]) and whether a process has
//! [`ended`]. A missing program fails the test with the Debian package to install; nothing is
//! ever skipped.

use std::io::Read as _;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Returns the path of the executable `cmd`, looked up on `PATH` and then in `/usr/local/sbin`,
/// `/usr/sbin` and `/sbin` (where Debian puts daemons such as `lighttpd`, often missing from a
/// non-root `PATH`).
///
/// # Panics
/// When it is not installed, with "`cmd` is not installed: install it with `apt-get install
/// <debian_pkg>` (make test does this)". Tests must fail loudly, never skip.
pub fn require_tool(cmd: &str, debian_pkg: &str) -> PathBuf {
    find_tool(cmd).unwrap_or_else(|| {
        panic!(
            "`{cmd}` is not installed: install it with `apt-get install {debian_pkg}` \
             (make test does this)"
        )
    })
}

/// Whether the executable `cmd` is installed (looked up as [`require_tool`] does).
pub fn which(cmd: &str) -> bool {
    find_tool(cmd).is_some()
}

fn find_tool(cmd: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(cmd))
        .find(|p| is_executable(p))
}

/// Whether `p` is a file with an execute bit.
pub fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A port that was free on 127.0.0.1 a moment ago (bound to port 0, then released).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("cannot bind 127.0.0.1:0")
        .port()
}

/// Returns 32 random hex digits (from /dev/urandom).
pub fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Returns whether the process `pid` has ended (gone, or a zombie waiting to be reaped).
pub fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

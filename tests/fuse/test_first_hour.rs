//! What a newcomer meets on the mount (issue 28): `ls -la` without errors, paths typed from
//! inside the mount, and a doctor that knows the mount is its daemon's.

use std::process::Command;

use crate::support::{Daemon, BIN};

#[test]
fn ls_la_on_a_zone_prints_no_error_and_the_top_level_has_no_attributes() {
    let m = Daemon::mounted("");
    std::fs::write(m.ws().join("a.txt"), "a").unwrap();
    let out = Command::new("ls").arg("-la").arg(m.ws()).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.is_empty(), "ls -la: {err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("a.txt"));
    // The mount's top level (what `workspace/..` is) answers as a directory without
    // attributes: ENODATA, as a zone's directory does, never ENOENT.
    let mut buf = [0u8; 64];
    for dir in [m.mnt.clone(), m.ws().join("..")] {
        assert_eq!(
            rustix::fs::getxattr(&dir, "security.selinux", &mut buf[..]).unwrap_err(),
            rustix::io::Errno::NODATA,
            "{}",
            dir.display()
        );
        assert_eq!(rustix::fs::listxattr(&dir, &mut buf[..]).unwrap(), 0);
    }
}

#[test]
fn paths_typed_inside_the_mount_name_their_files() {
    let m = Daemon::mounted("");
    let src = m.ws().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("lib.rs"), "pub fn a() {}\n").unwrap();
    let wardfs = |dir: &std::path::Path, args: &[&str]| {
        Command::new(BIN)
            .arg("--socket")
            .arg(&m.socket)
            .args(args)
            .current_dir(dir)
            .env("PWD", dir)
            .output()
            .unwrap()
    };
    let out = wardfs(&src, &["read", "lib.rs"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"pub fn a() {}\n");
    let out = wardfs(&src, &["edit", "lib.rs", "a()", "b()"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(m.zone_dir("workspace").join("src/lib.rs")).unwrap(),
        "pub fn b() {}\n"
    );
    // The real path of the mount, from anywhere; `..` out of a zone is the top level.
    let real = src.join("lib.rs");
    let out = wardfs(
        std::path::Path::new("/"),
        &["--json", "stat", real.to_str().unwrap()],
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["path"], "/workspace/src/lib.rs", "{v}");
    let out = wardfs(&m.ws(), &["ls", ".."]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "cache/\nworkspace/\n");
    // The journal names the path as every other writer's.
    let out = wardfs(&src, &["log", "lib.rs"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("/workspace/src/lib.rs"));
}

#[test]
fn doctor_finds_the_mount_served_by_its_running_daemon_healthy() {
    let m = Daemon::mounted("");
    let (code, report) = m.doctor();
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} check: {report}"))
            .clone()
    };
    let mount = check("mount point");
    assert_eq!(mount["level"], "ok", "{report}");
    assert!(
        mount["detail"]
            .as_str()
            .unwrap()
            .contains(&format!("mounted by the running daemon (pid {})", m.pid())),
        "{mount}"
    );
    assert_eq!(check("daemon")["level"], "ok");
    assert_eq!(code, 0, "{report}");
}

/// The daemon opens `MOUNT/.wardfs-open-probe` once right after mounting (so that the kernel
/// learns at once that opens need no request, `src/fuse/probe.rs`). Nobody else may see,
/// open, make or remove that name, and the mount's first work still behaves.
#[test]
fn the_daemons_open_probe_is_nobody_elses_file() {
    let m = Daemon::mounted("");
    // The mount's first work: a new file, written and read back.
    std::fs::write(m.ws().join("first.txt"), "first").unwrap();
    assert_eq!(std::fs::read(m.ws().join("first.txt")).unwrap(), b"first");
    let probe = m.mnt.join(".wardfs-open-probe");
    for _ in 0..3 {
        let e = std::fs::symlink_metadata(&probe).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "stat: {e}");
        let e = std::fs::File::open(&probe).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "open: {e}");
    }
    let names: Vec<_> = std::fs::read_dir(&m.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        !names.iter().any(|n| n == ".wardfs-open-probe"),
        "listed: {names:?}"
    );
    let e = std::fs::write(&probe, "x").unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)),
        "made: {e}"
    );
    let e = std::fs::remove_file(&probe).unwrap_err();
    assert!(
        matches!(e.raw_os_error(), Some(libc::ENOENT | libc::EPERM)),
        "removed: {e}"
    );
}

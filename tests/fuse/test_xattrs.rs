//! `[fuse] xattrs = false`: every extended-attribute request is answered `ENOSYS`, so the
//! kernel stops sending them (also the `security.capability` look-up before each write and
//! chown); files are written, chmodded and read as usual, and no attribute reaches a backing
//! file. With xattrs served or not, in both I/O modes, file capabilities given to a backing file
//! do not survive a write or a chown through the mount.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;

use rustix::io::Errno;

use crate::support::Daemon;

#[test]
fn with_xattrs_off_the_mount_refuses_them_and_writes_as_usual() {
    let m = Daemon::mounted("[fuse]\nxattrs = false\n");
    let p = m.ws().join("x.txt");
    fs::write(&p, "one\n").unwrap();
    let mut buf = [0u8; 64];
    for _ in 0..2 {
        // The second time, the kernel answers by itself: it remembers the ENOSYS.
        assert_eq!(
            rustix::fs::setxattr(&p, "user.k", b"v", rustix::fs::XattrFlags::empty()).unwrap_err(),
            Errno::OPNOTSUPP
        );
        assert_eq!(
            rustix::fs::getxattr(&p, "user.k", &mut buf[..]).unwrap_err(),
            Errno::OPNOTSUPP
        );
        assert_eq!(
            rustix::fs::listxattr(&p, &mut buf[..]).unwrap_err(),
            Errno::OPNOTSUPP
        );
        assert_eq!(
            rustix::fs::removexattr(&p, "user.k").unwrap_err(),
            Errno::OPNOTSUPP
        );
    }
    // Writes (which the kernel would precede with a look-up of security.capability) and mode
    // changes work; the backing file holds no attribute.
    fs::write(&p, "two\n").unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "two\n");
    let backing = m.zone_dir("workspace").join("x.txt");
    assert_eq!(fs::read_to_string(&backing).unwrap(), "two\n");
    assert_eq!(
        fs::metadata(&backing).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(rustix::fs::listxattr(&backing, &mut buf[..]).unwrap(), 0);
}

/// `cap_net_raw+ep` as `setcap` writes it: revision 2, effective, permitted bit 13.
const CAP_NET_RAW_EP: [u8; 20] = [
    1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

/// Whether the backing file `f` holds file capabilities.
fn has_caps(f: &std::path::Path) -> bool {
    let mut buf = [0u8; 64];
    match rustix::fs::getxattr(f, "security.capability", &mut buf[..]) {
        Ok(_) => true,
        Err(Errno::NODATA) => false,
        Err(e) => panic!("getxattr security.capability of {}: {e}", f.display()),
    }
}

#[test]
fn a_files_capabilities_do_not_survive_a_write_or_a_chown_through_the_mount() {
    // An agent that may write a file someone gave capabilities beside the mount must not get a
    // privileged program of its own making, with xattrs served or not, in either I/O mode: the
    // daemon writes and chowns the backing file, whose own file system clears them.
    assert!(
        rustix::process::getuid().is_root(),
        "this test sets file capabilities and must run as root (CI and `make test` do)"
    );
    for extra in [
        "",
        "[fuse]\nxattrs = false\n",
        "[zones.workspace]\nio = \"passthrough\"\n",
        "[fuse]\nxattrs = false\n[zones.workspace]\nio = \"passthrough\"\n",
    ] {
        let m = Daemon::mounted(extra);
        let p = m.ws().join("prog");
        fs::write(&p, "#!/bin/sh\n").unwrap();
        let backing = m.zone_dir("workspace").join("prog");
        let give_caps = || {
            rustix::fs::setxattr(
                &backing,
                "security.capability",
                &CAP_NET_RAW_EP,
                rustix::fs::XattrFlags::empty(),
            )
            .unwrap();
            assert!(has_caps(&backing), "{extra:?}: setxattr did not take");
        };
        give_caps();
        fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"id\n")
            .unwrap();
        assert!(!has_caps(&backing), "{extra:?}: kept after a write");
        assert_eq!(fs::read_to_string(&backing).unwrap(), "#!/bin/sh\nid\n");
        give_caps();
        std::os::unix::fs::chown(&p, Some(0), Some(0)).unwrap();
        assert!(!has_caps(&backing), "{extra:?}: kept after a chown");
    }
}

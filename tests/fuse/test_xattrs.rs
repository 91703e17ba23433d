//! `[fuse] xattrs = false`: every extended-attribute request is answered `ENOSYS`, so the
//! kernel stops sending them (also the `security.capability` look-up before each write and
//! chown); files are written, chmodded and read as usual, and no attribute reaches a backing
//! file.

use std::fs;
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

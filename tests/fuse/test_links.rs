//! Hard links made beside the mount (a local `git clone` into a zone's directory, a file linked
//! into the zone from outside): read through the mount as they are, and changed only through a
//! copy of their own that takes the name, so the file the other links name never changes.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::files::temp_files;
use crate::support::tools::which;
use crate::support::Daemon;

/// Both zones in the cached I/O mode (the default, spelled out): the kernel sends no OPEN, so a
/// file is first seen at its first read or write (git's mmap of a pack file).
const CACHED: &str = "[zones.cache]\nio = \"cached\"\n[zones.workspace]\nio = \"cached\"\n";
/// Both zones in the passthrough I/O mode: every open is asked, and reads and writes go to the
/// backing file the daemon hands the kernel.
const PASSTHROUGH: &str =
    "[zones.cache]\nio = \"passthrough\"\n[zones.workspace]\nio = \"passthrough\"\n";

/// Runs git in `dir` with a config of its own only; returns stdout. A failure, or a signal (the
/// SIGBUS of a refused mmap read), fails the test with git's stderr.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {:?} {}",
        dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A repository at `dir` with two commits, packed (`git gc`), as a clone's source.
fn source_repo(dir: &Path) {
    fs::create_dir_all(dir.join("src")).unwrap();
    git(dir, &["init", "-q"]);
    fs::write(dir.join("README.md"), "# hi\n").unwrap();
    fs::write(dir.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "first"]);
    fs::write(dir.join("README.md"), "# hi again\n").unwrap();
    git(dir, &["commit", "-qam", "second"]);
    git(dir, &["gc", "-q"]);
}

/// Every file under `dir` with its bytes, mode and mtime (not its link count, which a clone
/// that shares its files changes).
fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>, u32, i64)> {
    let mut out: Vec<_> = crate::support::files::files_under(dir)
        .into_iter()
        .map(|p| {
            let md = fs::symlink_metadata(&p).unwrap();
            let bytes = fs::read(&p).unwrap();
            (p, bytes, md.mode(), md.mtime_nsec())
        })
        .collect();
    out.sort();
    out
}

/// A clone of [`source_repo`] works: clean, both commits, every object readable (`fsck`
/// reads them all, through git's mmap of the pack).
fn check_clone(dir: &Path) {
    assert_eq!(git(dir, &["status", "--porcelain"]), "");
    assert_eq!(git(dir, &["log", "--format=%s"]), "second\nfirst\n");
    git(dir, &["fsck", "--strict", "--no-progress"]);
}

/// Issue 29: git hard-links the objects of a local clone, and the mount refused to read them
/// (`allow_hardlinks = false`): git died with SIGBUS on its mmap. A clone into the mount (git's
/// link(2) from outside gets EXDEV, so it copies) and a clone made beside the mount into the
/// zone's directory (its pack files shared with the source) both work through the mount,
/// commits and a repack included, and the source repository does not change.
#[test]
fn a_local_git_clone_into_a_zone_works_through_the_mount_and_leaves_its_source_alone() {
    assert!(which("git"), "git is not installed; `apt-get install git`");
    let m = Daemon::mounted(CACHED);
    // Beside the zones, on their filesystem: git may hard-link from here into them.
    let src = m.dir.path().join("source");
    source_repo(&src);
    let before = contents(&src.join(".git/objects"));
    let from = src.to_str().unwrap();
    git(&m.ws(), &["clone", "-q", from, "through"]);
    check_clone(&m.ws().join("through"));
    let beside = m.zone_dir("workspace").join("beside");
    git(
        m.dir.path(),
        &["clone", "-q", from, beside.to_str().unwrap()],
    );
    let packs: Vec<PathBuf> = fs::read_dir(beside.join(".git/objects/pack"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        packs.iter().all(|p| fs::metadata(p).unwrap().nlink() == 2),
        "git did not hard-link the packs: {packs:?}"
    );
    let clone = m.ws().join("beside");
    check_clone(&clone);
    fs::write(clone.join("README.md"), "# third\n").unwrap();
    git(&clone, &["commit", "-qam", "third"]);
    git(&clone, &["repack", "-q", "-a", "-d"]);
    git(&clone, &["fsck", "--strict", "--no-progress"]);
    assert_eq!(
        git(&clone, &["log", "--format=%s"]),
        "third\nsecond\nfirst\n"
    );
    assert_eq!(contents(&src.join(".git/objects")), before);
    git(&src, &["fsck", "--strict", "--no-progress"]);
    assert!(temp_files(&m.zone_dir("workspace")).is_empty());
}

/// Waits (at most 5 s) until the watcher has journaled a change beside the mount to each of
/// `names` (relative to the workspace), and the invalidations that come with it are sent.
fn settle_watcher(m: &Daemon, names: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let rows = m.journal(100);
        let seen = |n: &&str| rows.iter().any(|r| r.0 == "watcher" && r.2 == *n);
        if names.iter().all(seen) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the watcher never saw {names:?}: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `truncate(2)` of a path (a setattr with no open file behind it).
fn truncate(p: &Path, len: i64) {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    let r = unsafe { libc::truncate(c.as_ptr(), len) };
    assert_eq!(
        r,
        0,
        "truncate {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    );
}

/// The ways a change reaches a file in place, each through its own name (hard-linked to a file
/// of the same name outside the zone), and the contents each leaves.
const CHANGES: [(&str, &str); 6] = [
    ("append", "secret\nx\n"),
    ("trunc", "replaced\n"),
    ("at", "Secret\n"),
    ("truncate", "sec"),
    ("chmod", "secret\n"),
    ("xattr", "secret\n"),
];

/// Makes each change of [`CHANGES`] through the mount at `ws`.
fn change_each(ws: &Path) {
    let out = Command::new("sh")
        .args(["-c", "echo x >> append"])
        .current_dir(ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    fs::write(ws.join("trunc"), "replaced\n").unwrap();
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(ws.join("at"))
        .unwrap();
    f.write_all(b"S").unwrap();
    f.sync_all().unwrap();
    drop(f);
    truncate(&ws.join("truncate"), 3);
    fs::set_permissions(ws.join("chmod"), fs::Permissions::from_mode(0o600)).unwrap();
    rustix::fs::setxattr(
        ws.join("xattr"),
        "user.k",
        b"v",
        rustix::fs::XattrFlags::empty(),
    )
    .unwrap();
}

/// A file hard-linked into the zone from outside, in both I/O modes: read through the mount as
/// it is, and every change in place (append, `O_TRUNC`, a write at an offset, truncate, chmod,
/// an xattr) lands in a copy of its own that takes the name, seen through the mount and on the
/// backing directory; the outside file keeps its bytes, mode and attributes. A link through the
/// mount is still `EPERM` (it would not share writes).
#[test]
fn a_file_hard_linked_from_outside_is_read_and_a_write_through_the_mount_lands_in_a_copy() {
    for io in [CACHED, PASSTHROUGH] {
        let m = Daemon::mounted(io);
        let (ws, zone) = (m.ws(), m.zone_dir("workspace"));
        let outside = m.dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        for (name, _) in CHANGES {
            fs::write(outside.join(name), "secret\n").unwrap();
            fs::set_permissions(outside.join(name), fs::Permissions::from_mode(0o640)).unwrap();
            fs::hard_link(outside.join(name), zone.join(name)).unwrap();
            assert_eq!(fs::read_to_string(ws.join(name)).unwrap(), "secret\n");
        }
        change_each(&ws);
        for (name, want) in CHANGES {
            let through = fs::read_to_string(ws.join(name)).unwrap();
            let backing = fs::read_to_string(zone.join(name)).unwrap();
            assert_eq!(
                (through.as_str(), backing.as_str()),
                (want, want),
                "{io}{name}"
            );
            assert_eq!(
                fs::metadata(zone.join(name)).unwrap().nlink(),
                1,
                "{io}{name}"
            );
            let was = fs::read_to_string(outside.join(name)).unwrap();
            let md = fs::metadata(outside.join(name)).unwrap();
            assert_eq!(was, "secret\n", "{io}{name}");
            assert_eq!((md.mode() & 0o7777, md.nlink()), (0o640, 1), "{io}{name}");
        }
        let mode = fs::metadata(ws.join("chmod")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600, "{io}");
        let mut buf = [0u8; 8];
        let xattr = rustix::fs::getxattr(outside.join("xattr"), "user.k", &mut buf[..]);
        assert!(xattr.is_err(), "{io}: the outside file got the xattr");
        let e = fs::hard_link(ws.join("at"), ws.join("at2")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{io}link: {e}");
        assert!(temp_files(&zone).is_empty(), "{io}");
        assert!(
            m.log_text().contains("copy of its own"),
            "{io}: no log line"
        );
    }
}

/// Two names in the zone for one file linked from outside, both looked up through the mount:
/// the kernel holds them as one inode, so a write could not tell which name's copy to change.
/// It is refused (`EACCES`, logged with the rule) and nothing changes; replacing the name, as
/// editors do, works.
#[test]
fn a_file_seen_under_two_names_through_the_mount_is_never_written_in_place() {
    let m = Daemon::mounted(CACHED);
    let (ws, zone) = (m.ws(), m.zone_dir("workspace"));
    let outside = m.dir.path().join("outside.txt");
    fs::write(&outside, "secret\n").unwrap();
    fs::hard_link(&outside, zone.join("a")).unwrap();
    fs::hard_link(&outside, zone.join("b")).unwrap();
    // The watcher's invalidation of the new names must not come between the two lookups below
    // (the kernel could forget the inode in between and look `b` up as another).
    settle_watcher(&m, &["a", "b"]);
    assert_eq!(fs::read_to_string(ws.join("a")).unwrap(), "secret\n");
    assert_eq!(fs::read_to_string(ws.join("b")).unwrap(), "secret\n");
    let e = fs::write(ws.join("b"), "mine\n").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EACCES), "{e}");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "secret\n");
    assert_eq!(fs::metadata(&outside).unwrap().nlink(), 3);
    let log = m.log_text();
    assert!(
        log.contains("more than one name") && log.contains("allow_hardlinks"),
        "{log}"
    );
    fs::write(ws.join("b.new"), "mine\n").unwrap();
    fs::rename(ws.join("b.new"), ws.join("b")).unwrap();
    assert_eq!(fs::read_to_string(ws.join("b")).unwrap(), "mine\n");
    assert_eq!(fs::read_to_string(ws.join("a")).unwrap(), "secret\n");
    assert_eq!(fs::read_to_string(&outside).unwrap(), "secret\n");
}

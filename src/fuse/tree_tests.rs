//! The mount's trees tested without a kernel: what each handler of `super::fs` hands a
//! [`Tree`] once it has decoded a request, called here directly on real zones in a temporary
//! directory, as mountpoint-s3 tests its file system apart from its FUSE adapter. The kernel's
//! side (the replies, TTLs honoured, the modes agreed at `INIT`) is `tests/fuse`'s.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FopenFlags};

use super::inodes::{zone_ino, Inodes, FORKS_INO, ROOT_INO};
use super::local_tree::LocalTree;
use super::mode::Modes;
use super::top::Top;
use super::tree::{Tree, WriteHow};
use crate::config::{IoMode, Settings};
use crate::core::node::{Caller, RenameMode};
use crate::core::{ZoneId, Zones};
use crate::state::{Db, JournalFilter, Origin, Via};

const CACHED: [IoMode; 2] = [IoMode::Cached, IoMode::Cached];

/// Zones rooted in `dir` (`extra`: more of the config), with the inode table of a mount over
/// them.
fn zones_with(dir: &Path, extra: &str) -> (Arc<Zones>, Arc<Inodes>) {
    let text = format!("[zones]\nroot = \"z\"\n{extra}");
    let settings = Settings::from_str(&text, "test", dir, None).unwrap();
    let db = Arc::new(Db::open_in_memory().unwrap());
    let zones = Arc::new(Zones::open(&settings, db, crate::core::system_clock()).unwrap());
    let inodes = Arc::new(Inodes::new());
    for id in ZoneId::ALL {
        let (fd, st) = zones.node_zone_root(id).unwrap().unwrap();
        inodes.add_zone_root(id, fd, &st);
    }
    (zones, inodes)
}

/// The local tree over `zones`, in the cached mode with no `OPEN` (the default).
fn local(zones: &Arc<Zones>, inodes: &Arc<Inodes>) -> LocalTree {
    let modes = Arc::new(Modes::new(CACHED, true, true, false));
    LocalTree::new(zones.clone(), inodes.clone(), modes, false).unwrap()
}

fn who() -> Caller {
    Caller {
        origin: Origin {
            via: Via::Fuse,
            pid: Some(42),
            uid: Some(0),
        },
        uid: 0,
        gid: 0,
    }
}

fn name(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// A registration of passthrough backing files that no kernel answers.
fn no_kernel(_: std::os::fd::BorrowedFd<'_>) -> std::io::Result<fuser::BackingId> {
    Err(std::io::Error::other("no kernel here"))
}

#[test]
fn the_top_level_lists_the_zones_and_forks_and_refuses_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let (zones, inodes) = zones_with(dir.path(), "");
    let top = Top::new(zones, inodes);
    let names: Vec<_> = top
        .list(ROOT_INO)
        .unwrap()
        .into_iter()
        .map(|e| e.0)
        .collect();
    assert_eq!(names, [".", "..", "cache", "workspace", "forks"]);

    let forks = top.lookup(ROOT_INO, name("forks")).unwrap();
    assert_eq!(forks.attr.ino.0, FORKS_INO);
    assert_eq!(forks.attr_ttl, Duration::from_secs(1), "kept a second only");
    assert_eq!(forks.attr.nlink, 2, "no fork yet");
    let ws = top.lookup(ROOT_INO, name("workspace")).unwrap();
    assert_eq!(ws.attr.ino.0, zone_ino(ZoneId::Workspace));
    assert_eq!(
        top.lookup(ROOT_INO, name("nope")).err(),
        Some(Errno::ENOENT)
    );
    assert!(
        top.negative(ROOT_INO).is_none(),
        "no negative entry up here"
    );
    assert_eq!(top.lookup(FORKS_INO, name("f1")).err(), Some(Errno::ENOENT));

    let w = who();
    assert_eq!(
        top.mkdir(&w, FORKS_INO, name("f"), 0o755).err(),
        Some(Errno::EPERM)
    );
    assert_eq!(
        top.remove(&w, ROOT_INO, name("workspace"), true).err(),
        Some(Errno::EPERM)
    );
    let to = (FORKS_INO, name("b"));
    let moved = top.rename(
        &w,
        (zone_ino(ZoneId::Workspace), name("a")),
        to,
        RenameMode::Replace,
    );
    assert_eq!(moved.err(), Some(Errno::EPERM));
    let created = top.create(&w, ROOT_INO, name("x"), 0o644, libc::O_CREAT, &no_kernel);
    assert_eq!(created.err(), Some(Errno::EPERM));
}

#[test]
fn names_made_through_the_local_tree_are_looked_up_listed_renamed_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (zones, inodes) = zones_with(dir.path(), "");
    let tree = local(&zones, &inodes);
    let (w, ws) = (who(), zone_ino(ZoneId::Workspace));

    let d = tree.mkdir(&w, ws, name("d"), 0o755).unwrap();
    assert_eq!(d.attr.kind, fuser::FileType::Directory);
    assert_eq!(tree.lookup(ws, name("d")).unwrap().attr.ino, d.attr.ino);
    tree.symlink(&w, ws, name("l"), Path::new("d")).unwrap();
    let l = tree.lookup(ws, name("l")).unwrap().attr.ino.0;
    assert_eq!(tree.readlink(l).unwrap(), b"d");
    let listed: Vec<_> = tree.list(ws).unwrap().into_iter().map(|e| e.0).collect();
    assert!(
        listed.contains(&"d".into()) && listed.contains(&"l".into()),
        "{listed:?}"
    );

    tree.rename(&w, (ws, name("d")), (ws, name("e")), RenameMode::NoReplace)
        .unwrap();
    assert_eq!(tree.lookup(ws, name("d")).err(), Some(Errno::ENOENT));
    assert_eq!(tree.negative(ws).unwrap().attr.ino.0, 0, "a negative entry");
    assert_eq!(tree.lookup(ws, name("e")).unwrap().attr.ino, d.attr.ino);
    let replaced = tree.rename(&w, (ws, name("l")), (ws, name("e")), RenameMode::NoReplace);
    assert_eq!(replaced.err(), Some(Errno::EEXIST));

    tree.remove(&w, ws, name("e"), true).unwrap();
    assert_eq!(tree.lookup(ws, name("e")).err(), Some(Errno::ENOENT));
    assert!(!dir.path().join("z/workspace/e").exists());
    assert_eq!(
        tree.mkdir(&w, ws, name("a/b"), 0o755).err(),
        Some(Errno::EINVAL)
    );
}

#[test]
fn without_open_a_created_file_is_written_through_handle_zero_and_journaled_when_its_writer_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (zones, inodes) = zones_with(dir.path(), "");
    let tree = local(&zones, &inodes);
    let (w, ws) = (who(), zone_ino(ZoneId::Workspace));

    let flags = libc::O_WRONLY | libc::O_CREAT;
    let (entry, opened) = tree
        .create(&w, ws, name("f"), 0o644, flags, &no_kernel)
        .unwrap();
    assert_eq!(opened.fh, 0, "no handle: the kernel sends no RELEASE");
    assert_eq!(opened.flags, FopenFlags::FOPEN_KEEP_CACHE);
    let ino = entry.attr.ino.0;
    let how = WriteHow {
        append: false,
        kill_suidgid: false,
    };
    assert_eq!(tree.write(&w, ino, 0, 0, b"hello", how).unwrap(), 5);
    let mut buf = [0u8; 100];
    let n = tree.read(&w, ino, 0, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"hello");
    assert_eq!(tree.getattr(ino, None).unwrap().attr.size, 5);

    let journal = || {
        let filter = JournalFilter {
            limit: 10,
            ..Default::default()
        };
        let rows = zones.db().journal_query(&filter).unwrap();
        rows.into_iter().map(|r| (r.op, r.path)).collect::<Vec<_>>()
    };
    assert!(
        !journal().iter().any(|(op, _)| op == "write"),
        "{:?}",
        journal()
    );
    tree.end_implicit_writers();
    assert!(
        journal().contains(&("write".into(), "f".into())),
        "{:?}",
        journal()
    );
}

#[test]
fn a_read_only_zone_refuses_changes_through_the_local_tree_and_reads_go_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("z/workspace")).unwrap();
    std::fs::write(dir.path().join("z/workspace/a"), "a").unwrap();
    let (zones, inodes) = zones_with(dir.path(), "[zones.workspace]\nread_only = true\n");
    let tree = local(&zones, &inodes);
    let (w, ws) = (who(), zone_ino(ZoneId::Workspace));

    let erofs = Some(Errno::from_i32(libc::EROFS));
    assert_eq!(tree.mkdir(&w, ws, name("d"), 0o755).err(), erofs);
    assert_eq!(tree.remove(&w, ws, name("a"), false).err(), erofs);
    assert_eq!(tree.access(ws, true).err(), erofs);
    let a = tree.lookup(ws, name("a")).unwrap().attr.ino.0;
    let mut buf = [0u8; 10];
    let n = tree.read(&w, a, 0, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"a");
    let how = WriteHow {
        append: false,
        kill_suidgid: false,
    };
    assert_eq!(tree.write(&w, a, 0, 0, b"b", how).err(), erofs);
    assert_eq!(
        std::fs::read(dir.path().join("z/workspace/a")).unwrap(),
        b"a"
    );
}

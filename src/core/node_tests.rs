//! The mount's filesystem operations ([`super::node`]) tested without a kernel: each rule the
//! API keeps (read-only, the hard-link rule, path locks, the journal) holds for them too, because
//! both go through the same function.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::OFlags;
use rustix::io::Errno;

use super::node::{AttrChange, Caller, Node, RenameMode};
use super::{ErrorCode, ZoneId, Zones};
use crate::config::Settings;
use crate::state::{Db, JournalFilter, Origin, Via};

const API: Origin = Origin {
    via: Via::Api,
    pid: None,
    uid: None,
};

fn zones_with(dir: &Path, extra: &str) -> Zones {
    let text = format!("[zones]\nroot = \"z\"\n{extra}");
    let settings = Settings::from_str(&text, "test", dir, None).unwrap();
    Zones::open(
        &settings,
        Arc::new(Db::open_in_memory().unwrap()),
        super::system_clock(),
    )
    .unwrap()
}

fn root(z: &Zones) -> Node {
    let (fd, st) = z.node_zone_root(ZoneId::Workspace).unwrap().unwrap();
    Node::new(ZoneId::Workspace, fd, &st)
}

fn child(z: &Zones, dir: &Node, name: &str) -> Node {
    let (fd, st) = z.node_lookup(dir, OsStr::new(name), &|| {}).unwrap();
    Node::new(dir.zone, fd, &st)
}

fn caller() -> Caller {
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

fn journal(z: &Zones) -> Vec<(String, String, Option<String>, String)> {
    z.db()
        .journal_query(&JournalFilter {
            limit: 100,
            ..Default::default()
        })
        .unwrap()
        .into_iter()
        .rev() // oldest first
        .map(|r| (r.op, r.path, r.to_path, r.via))
        .collect()
}

#[test]
fn every_node_change_is_journaled_once_with_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let z = zones_with(dir.path(), "");
    let ws = root(&z);
    let who = caller();
    z.node_mkdir(&who, &ws, OsStr::new("d"), 0o755, || {})
        .unwrap();
    let d = child(&z, &ws, "d");
    drop(
        z.node_create(
            &who,
            &d,
            OsStr::new("f"),
            OFlags::WRONLY,
            0o644,
            true,
            || {},
        )
        .unwrap(),
    );
    z.node_rename(
        &who,
        &d,
        OsStr::new("f"),
        &d,
        OsStr::new("g"),
        RenameMode::Replace,
        |_| {},
    )
    .unwrap();
    z.node_symlink(&who, &ws, OsStr::new("l"), Path::new("d/g"), || {})
        .unwrap();
    z.node_remove(&who, &ws, OsStr::new("l"), false, |_| {})
        .unwrap();
    let mut rows = journal(&z);
    rows.sort_by_key(|r| r.0.clone());
    let s = |v: &str| v.to_string();
    assert_eq!(
        rows,
        vec![
            (s("create"), s("d/f"), None, s("fuse")),
            (s("delete"), s("l"), None, s("fuse")),
            (s("mkdir"), s("d"), None, s("fuse")),
            (s("move"), s("d/f"), Some(s("d/g")), s("fuse")),
            (s("symlink"), s("l"), None, s("fuse")),
        ]
    );
    assert!(dir.path().join("z/workspace/d/g").is_file());
}

#[test]
fn a_read_only_zone_refuses_every_node_change_as_the_api_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("z/workspace/d")).unwrap();
    std::fs::write(dir.path().join("z/workspace/f"), "x").unwrap();
    let z = zones_with(dir.path(), "[zones.workspace]\nread_only = true\n");
    let ws = root(&z);
    let f = child(&z, &ws, "f");
    let who = caller();
    let name = OsStr::new("n");
    assert_eq!(
        z.node_mkdir(&who, &ws, name, 0o755, || {}),
        Err(Errno::ROFS)
    );
    assert_eq!(
        z.node_create(&who, &ws, name, OFlags::WRONLY, 0o644, false, || {})
            .err(),
        Some(Errno::ROFS)
    );
    assert_eq!(
        z.node_remove(&who, &ws, OsStr::new("f"), false, |_| {}),
        Err(Errno::ROFS)
    );
    assert_eq!(
        z.node_rename(
            &who,
            &ws,
            OsStr::new("f"),
            &ws,
            name,
            RenameMode::Replace,
            |_| {}
        ),
        Err(Errno::ROFS)
    );
    assert_eq!(z.node_link(&who, &f, &ws, name, || {}), Err(Errno::ROFS));
    let truncate = AttrChange {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(
        z.node_setattr(&who, &f, truncate, None, &|| {}).err(),
        Some(Errno::ROFS)
    );
    // The API refuses through the same rule.
    let api = z.write("/workspace/f", "y", API).unwrap_err();
    assert_eq!(api.code(), ErrorCode::ReadOnly);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("z/workspace/f")).unwrap(),
        "x"
    );
    assert!(journal(&z).is_empty());
}

#[test]
fn the_hard_link_rule_holds_for_node_opens_changes_and_links_as_for_the_api() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("z/workspace")).unwrap();
    std::fs::write(dir.path().join("outside.txt"), "secret").unwrap();
    std::fs::hard_link(
        dir.path().join("outside.txt"),
        dir.path().join("z/workspace/h.txt"),
    )
    .unwrap();
    std::fs::write(dir.path().join("z/workspace/plain.txt"), "p").unwrap();
    let z = zones_with(dir.path(), "");
    let ws = root(&z);
    let who = caller();
    let h = child(&z, &ws, "h.txt");
    assert_eq!(z.node_check_links_now(&h, "open"), Err(Errno::ACCESS));
    let truncate = AttrChange {
        size: Some(0),
        ..Default::default()
    };
    assert_eq!(
        z.node_setattr(&who, &h, truncate, None, &|| {}).err(),
        Some(Errno::ACCESS)
    );
    assert_eq!(
        z.node_set_xattr(&who, &h, OsStr::new("user.x"), Some((b"1", 0)), || {}),
        Err(Errno::ACCESS)
    );
    // Linking a plain file would make it one the rule refuses: refused up front.
    let plain = child(&z, &ws, "plain.txt");
    assert_eq!(
        z.node_link(&who, &plain, &ws, OsStr::new("second"), || {}),
        Err(Errno::PERM)
    );
    // Opening an existing multiply-linked file through create (no O_EXCL) with O_TRUNC.
    assert_eq!(
        z.node_create(
            &who,
            &ws,
            OsStr::new("h.txt"),
            OFlags::WRONLY | OFlags::TRUNC,
            0o644,
            false,
            || {}
        )
        .err(),
        Some(Errno::ACCESS)
    );
    let api = z.read("/workspace/h.txt", None, None).unwrap_err();
    assert_eq!(api.code(), ErrorCode::OutsideZone);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("outside.txt")).unwrap(),
        "secret"
    );
    assert!(!dir.path().join("z/workspace/second").exists());
}

type Remover = std::thread::JoinHandle<Result<(), Errno>>;

#[test]
fn a_node_change_waits_for_the_path_lock_an_api_replacement_holds() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("z/workspace")).unwrap();
    std::fs::write(dir.path().join("z/workspace/f"), "v1").unwrap();
    let z = Arc::new(zones_with(dir.path(), ""));
    let finished_early = Arc::new(AtomicBool::new(false));
    let (zz, flag) = (z.clone(), finished_early.clone());
    let remover: Arc<std::sync::Mutex<Option<Remover>>> = Arc::default();
    let slot = remover.clone();
    // Runs inside the API write's commit, with /workspace/f's lock held.
    *z.before_replace.lock().unwrap() = Some(Box::new(move || {
        let zt = zz.clone();
        let t = std::thread::spawn(move || {
            let ws = root(&zt);
            zt.node_remove(&caller(), &ws, OsStr::new("f"), false, |_| {})
        });
        std::thread::sleep(Duration::from_millis(200));
        flag.store(t.is_finished(), Ordering::SeqCst);
        *slot.lock().unwrap() = Some(t);
    }));
    z.write("/workspace/f", "v2", API).unwrap();
    *z.before_replace.lock().unwrap() = None;
    let t = remover.lock().unwrap().take().expect("the hook ran");
    assert_eq!(t.join().unwrap(), Ok(()));
    assert!(
        !finished_early.load(Ordering::SeqCst),
        "the mount's unlink did not wait for the API write's lock"
    );
    // The unlink came after the write, so nothing is left; the journal has both, in order.
    assert!(!dir.path().join("z/workspace/f").exists());
    let ops: Vec<String> = journal(&z).into_iter().map(|r| r.0).collect();
    assert_eq!(ops, vec!["write".to_string(), "delete".to_string()]);
}

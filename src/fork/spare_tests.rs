//! Spares (forks made ahead): a fork made of one is its parent as it is now, whatever the parent
//! did since the spare was filled.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use super::tests::{setup, unique, ws, Setup, API};
use super::*;

/// What a tree holds: each path with its kind, permission bits and content (a symlink: its
/// target), `.git` aside.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else {
                let bits = m.permissions().mode() & 0o777;
                format!(
                    "{bits:o} {}",
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap())
                )
            };
            out.insert(rel, what);
        }
    }
    out
}

fn fork_dir(s: &Setup, name: &str) -> std::path::PathBuf {
    let id = ZoneId::fork(name).unwrap();
    s.zones.local(id).expect("local").root().to_path_buf()
}

fn make(s: &Setup, name: &str) -> ForkMade {
    s.forks.settle();
    s.forks
        .create(name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap()
}

#[test]
fn a_fork_made_of_a_spare_is_its_parent_as_it_is_now_whatever_changed_since() {
    let s = setup();
    let z = &s.zones;
    for (p, c) in [
        ("a.txt", "a"),
        ("d/b.txt", "b"),
        ("d/e/c.txt", "c"),
        ("old/x.txt", "x"),
        ("node_modules/m/index.js", "m1"),
        ("keep.txt", "keep"),
    ] {
        z.write(&format!("/workspace/{p}"), c, API).unwrap();
    }
    z.write_with_mode("/workspace/run.sh", b"#!/bin/sh\n", 0o755, API)
        .unwrap();
    let first = make(&s, &unique("s0"));
    assert!(
        !first.spare,
        "the first fork of a zone has no spare: {first:?}"
    );
    s.forks.settle();
    assert!(s
        .forks
        .spares()
        .iter()
        .any(|i| i.zone == "workspace" && i.ready));

    // The parent changes in every way after the spare was filled.
    z.write("/workspace/a.txt", "a, changed", API).unwrap();
    z.delete("/workspace/d", true, API).unwrap();
    z.rename("/workspace/old", "/workspace/new", false, API)
        .unwrap();
    z.write("/workspace/n/m/fresh.txt", "fresh", API).unwrap();
    z.write("/workspace/node_modules/m/index.js", "m2", API)
        .unwrap();
    z.write_with_mode("/workspace/run.sh", b"#!/bin/sh\necho\n", 0o700, API)
        .unwrap();
    z.symlink("/workspace/link", "keep.txt", API).unwrap();
    let name = unique("s1");
    let made = make(&s, &name);
    assert!(made.spare, "{made:?}");
    assert_eq!(snapshot(&fork_dir(&s, &name)), snapshot(ws(&s)));

    // Its files are the parent's (linked), and a write on either side stays there.
    let (f, w) = (fork_dir(&s, &name), ws(&s).to_path_buf());
    let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
    assert_eq!(ino(&f.join("keep.txt")), ino(&w.join("keep.txt")));
    z.write(&format!("/forks/{name}/keep.txt"), "fork's", API)
        .unwrap();
    assert_eq!(std::fs::read_to_string(w.join("keep.txt")).unwrap(), "keep");

    // The next spare is made again, and used again.
    z.delete("/workspace/new", true, API).unwrap();
    let again = unique("s2");
    assert!(make(&s, &again).spare);
    assert_eq!(snapshot(&fork_dir(&s, &again)), snapshot(ws(&s)));
}

#[test]
fn a_fork_made_of_a_spare_keeps_the_fork_point_for_what_changed_after_it() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "one", API).unwrap();
    make(&s, &unique("p0"));
    s.forks.settle();
    let spare = s.spares_take();
    // The fork point is taken, then the parent changes before the spare is brought up to date.
    let (point, read_at) = s
        .forks
        .checkpoints
        .present(ZoneId::Workspace, "point", API)
        .unwrap();
    z.write("/workspace/a.txt", "after the point", API).unwrap();
    z.write("/workspace/late.txt", "late", API).unwrap();
    let dir = s.forks.root.join("by-hand");
    let made = s
        .forks
        .make_dir(
            &dir,
            &Source::Zone(ZoneId::Workspace),
            &point,
            read_at,
            spare,
        )
        .unwrap();
    assert!(made.spare);
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "one");
    assert!(!dir.join("late.txt").exists());
}

impl Setup {
    fn spares_take(&self) -> Option<spare::Spare> {
        self.forks.spares.take(ZoneId::Workspace)
    }
}

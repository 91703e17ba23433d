//! Checkpoints against a model: random writes, renames, deletes and directories through the
//! mount and through the API, symlinks and mode changes through the mount, random checkpoints,
//! and random restores of the whole zone or of one path. The model of a checkpoint is the zone
//! as it was on disk when the checkpoint was asked for (every change before it had returned);
//! after each restore the zone, seen on disk and through the mount, must equal that snapshot
//! byte for byte (within the restored path; the rest as it was). Automatic checkpoints run
//! beside (`auto_quiet_ms = 50`), so a restore also meets checkpoints it did not ask for.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;

use crate::support::Daemon;

const PATHS: &[&str] = &["a", "b", "d", "d/a", "d/b", "d/e", "d/e/f", "x"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Mount,
    Api,
}

#[derive(Debug, Clone)]
enum Op {
    Write(Via, usize, String),
    Delete(Via, usize),
    Mkdir(Via, usize),
    Move(Via, usize, usize),
    /// Through the mount: a symlink at the first path to the second (relative, may dangle).
    Symlink(usize, usize),
    /// Through the mount: the executable bits on or off.
    Chmod(usize, bool),
    Checkpoint,
    /// The `n`-th checkpoint of this case (modulo how many there are), all or one path.
    Restore(usize, Option<usize>),
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    let via = prop_oneof![Just(Via::Mount), Just(Via::Api)];
    prop_oneof![
        5 => (via.clone(), p.clone(), "[xy\n]{0,8}").prop_map(|(v, i, c)| Op::Write(v, i, c)),
        2 => (via.clone(), p.clone()).prop_map(|(v, i)| Op::Delete(v, i)),
        2 => (via.clone(), p.clone()).prop_map(|(v, i)| Op::Mkdir(v, i)),
        2 => (via, p.clone(), p.clone()).prop_map(|(v, a, b)| Op::Move(v, a, b)),
        1 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Symlink(a, b)),
        1 => (p.clone(), any::<bool>()).prop_map(|(i, x)| Op::Chmod(i, x)),
        2 => Just(Op::Checkpoint),
        2 => (any::<usize>(), prop::option::of(p)).prop_map(|(n, i)| Op::Restore(n, i)),
    ]
}

/// What a checkpoint keeps of an entry: content and the executable bit, a link's target, a
/// directory.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File(Vec<u8>, bool),
    Link(String),
    Dir,
}

type Tree = BTreeMap<String, Entry>;

/// The zone as a checkpoint sees it, read under `root` (the backing dir or the mount).
fn tree(root: &Path) -> Tree {
    fn walk(root: &Path, rel: &str, out: &mut Tree) {
        let dir = if rel.is_empty() {
            root.to_path_buf()
        } else {
            root.join(rel)
        };
        for e in fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            let child = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let md = fs::symlink_metadata(e.path()).unwrap();
            if md.file_type().is_symlink() {
                let target = fs::read_link(e.path()).unwrap();
                out.insert(child, Entry::Link(target.to_string_lossy().into_owned()));
            } else if md.is_dir() {
                out.insert(child.clone(), Entry::Dir);
                walk(root, &child, out);
            } else {
                let exec = md.permissions().mode() & 0o111 != 0;
                out.insert(child, Entry::File(fs::read(e.path()).unwrap(), exec));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, "", &mut out);
    out
}

fn under(path: &str, scope: &str) -> bool {
    path == scope || path.starts_with(&format!("{scope}/"))
}

/// What a restore of `snap` within `scope` (all when `None`) makes of `pre`, and whether it
/// reports conflicts: a file or symlink in the place of a directory above the scope is outside
/// what was asked for, so it stays, and what the checkpoint holds beneath it is not put back.
fn restored(pre: &Tree, snap: &Tree, scope: Option<&str>) -> (Tree, bool) {
    let Some(scope) = scope else {
        return (snap.clone(), false);
    };
    let parts: Vec<&str> = scope.split('/').collect();
    let ancestors: Vec<String> = (1..parts.len()).map(|i| parts[..i].join("/")).collect();
    if ancestors
        .iter()
        .any(|a| matches!(pre.get(a), Some(Entry::File(..) | Entry::Link(_))))
    {
        return (pre.clone(), snap.keys().any(|p| under(p, scope)));
    }
    let mut out: Tree = pre
        .iter()
        .filter(|(p, _)| !under(p, scope))
        .map(|(p, e)| (p.clone(), e.clone()))
        .collect();
    for (p, e) in snap.iter().filter(|(p, _)| under(p, scope)) {
        out.insert(p.clone(), e.clone());
    }
    // Directories above the scope: made where the checkpoint's entries need them, removed where
    // the restore emptied them and the checkpoint lacks them (has no directory there: a file of
    // the checkpoint in that place is outside the scope and not put back either).
    if snap.keys().any(|p| under(p, scope)) {
        for a in &ancestors {
            out.insert(a.clone(), Entry::Dir);
        }
    }
    let removed_any = pre.keys().any(|p| under(p, scope) && !snap.contains_key(p));
    if removed_any {
        for a in ancestors.iter().rev() {
            let empty = !out.keys().any(|p| p.starts_with(&format!("{a}/")));
            if empty && out.get(a) == Some(&Entry::Dir) && snap.get(a) != Some(&Entry::Dir) {
                out.remove(a);
            }
        }
    }
    (out, false)
}

/// Runs one change; its outcome does not matter (the model is what is on disk after it).
fn apply(m: &Daemon, op: &Op) {
    let ws = m.ws();
    let v = |i: usize| format!("/workspace/{}", PATHS[i]);
    let _ = match op {
        Op::Write(Via::Mount, i, c) => fs::write(ws.join(PATHS[*i]), c).map(|_| ()),
        Op::Write(Via::Api, i, c) => {
            let _ = m.call("/v1/fs/write", json!({"path": v(*i), "content": c}));
            Ok(())
        }
        Op::Delete(Via::Mount, i) => {
            let p = ws.join(PATHS[*i]);
            match fs::symlink_metadata(&p) {
                Ok(md) if md.is_dir() => fs::remove_dir_all(&p),
                _ => fs::remove_file(&p),
            }
        }
        Op::Delete(Via::Api, i) => {
            let _ = m.call("/v1/fs/delete", json!({"path": v(*i), "recursive": true}));
            Ok(())
        }
        Op::Mkdir(Via::Mount, i) => fs::create_dir(ws.join(PATHS[*i])),
        Op::Mkdir(Via::Api, i) => {
            let _ = m.call("/v1/fs/mkdir", json!({"path": v(*i)}));
            Ok(())
        }
        Op::Move(Via::Mount, a, b) => fs::rename(ws.join(PATHS[*a]), ws.join(PATHS[*b])),
        Op::Move(Via::Api, a, b) => {
            let _ = m.call("/v1/fs/move", json!({"from": v(*a), "to": v(*b)}));
            Ok(())
        }
        Op::Symlink(a, b) => std::os::unix::fs::symlink(PATHS[*b], ws.join(PATHS[*a])),
        Op::Chmod(i, exec) => {
            let p = ws.join(PATHS[*i]);
            match fs::symlink_metadata(&p) {
                Ok(md) if md.is_file() => fs::set_permissions(
                    &p,
                    fs::Permissions::from_mode(if *exec { 0o755 } else { 0o644 }),
                ),
                _ => Ok(()),
            }
        }
        Op::Checkpoint | Op::Restore(..) => unreachable!("run by the test"),
    };
}

#[test]
fn restores_put_back_the_model_snapshot_of_every_checkpoint_byte_for_byte() {
    let m = Daemon::mounted("[checkpoints]\nauto_quiet_ms = 50\n");
    let (ws, backing) = (m.ws(), m.zone_dir("workspace"));
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    let restores = std::cell::Cell::new(0usize);
    let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        // A fresh tree for each case, cleared through the mount.
        crate::support::files::empty_dir(&ws);
        let mut checkpoints: Vec<(i64, Tree)> = Vec::new();
        for (n, op) in ops.iter().enumerate() {
            match op {
                Op::Checkpoint => {
                    let snap = tree(&backing);
                    let id = m.ok("/v1/checkpoints", json!({"message": format!("step {n}")}))["id"]
                        .as_i64()
                        .unwrap();
                    checkpoints.push((id, snap));
                }
                Op::Restore(k, path) => {
                    if checkpoints.is_empty() {
                        continue;
                    }
                    let (id, snap) = &checkpoints[k % checkpoints.len()];
                    let pre = tree(&backing);
                    let scope = path.map(|i| PATHS[i]);
                    let paths: Vec<String> =
                        scope.iter().map(|p| format!("/workspace/{p}")).collect();
                    let r = m.ok("/v1/checkpoints/restore", json!({"id": id, "paths": paths}));
                    restores.set(restores.get() + 1);
                    let (want, conflicts) = restored(&pre, snap, scope);
                    prop_assert_eq!(
                        r["conflicts"] != json!([]),
                        conflicts,
                        "conflicts after step {} {:?}: {}",
                        n,
                        op,
                        r
                    );
                    prop_assert_eq!(
                        &tree(&backing),
                        &want,
                        "on disk after step {} {:?}: {}",
                        n,
                        op,
                        r
                    );
                    prop_assert_eq!(
                        &tree(&ws),
                        &want,
                        "through the mount after step {} {:?}",
                        n,
                        op
                    );
                }
                _ => apply(&m, op),
            }
        }
        Ok::<(), TestCaseError>(())
    });
    if let Err(e) = result {
        panic!("{e}\ndaemon log:\n{}", m.log_text());
    }
    eprintln!("{} restores checked against the model", restores.get());
    // A floor, so that the test cannot pass by checking nothing. How many restores the random
    // cases hold varies from run to run (29 in one of them, which the old floor of 31 failed);
    // one per two cases is far below what any run has drawn and still checks plenty.
    assert!(
        restores.get() >= 16,
        "too few restores ran: {}",
        restores.get()
    );
}

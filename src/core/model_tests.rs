//! Tests of the core against a reference model: random operation sequences run on real zones and
//! on a plain in-memory tree must agree on every result and on the final tree (mountpoint-s3's
//! reference-model idea), plus deterministic checks of behaviour a model cannot race.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::{EntryKind, ErrorCode, FsResult, Zones};
use crate::config::Settings;
use crate::state::{Db, Origin};

const PATHS: &[&str] = &["a", "b", "d", "d/a", "d/b", "d/e", "d/e/f"];

#[derive(Debug, Clone)]
enum Op {
    Write(usize, String),
    Read(usize),
    Edit(usize, &'static str, &'static str, bool),
    Delete(usize, bool),
    Mkdir(usize, bool),
    Move(usize, usize, bool),
    List(Option<usize>),
    Exists(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let p = 0..PATHS.len();
    prop_oneof![
        3 => (p.clone(), "[xy\n]{0,6}").prop_map(|(i, c)| Op::Write(i, c)),
        2 => p.clone().prop_map(Op::Read),
        2 => (p.clone(), prop::sample::select(vec!["x", "y", "xy", "\n"]), prop::sample::select(vec!["z", "", "yx"]), any::<bool>())
            .prop_map(|(i, o, n, all)| Op::Edit(i, o, n, all)),
        2 => (p.clone(), any::<bool>()).prop_map(|(i, r)| Op::Delete(i, r)),
        2 => (p.clone(), any::<bool>()).prop_map(|(i, r)| Op::Mkdir(i, r)),
        2 => (p.clone(), p.clone(), any::<bool>()).prop_map(|(a, b, o)| Op::Move(a, b, o)),
        1 => prop::option::of(p.clone()).prop_map(Op::List),
        1 => p.prop_map(Op::Exists),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(String),
    Dir,
}

/// What an operation observably returned.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Done,
    Text(String),
    Listing(Vec<(String, EntryKind)>),
    Exists(Option<EntryKind>),
}

type Outcome = Result<Seen, ErrorCode>;

/// The reference model: a map from relative path to node; the zone root is implicit.
#[derive(Debug, Default)]
struct Model {
    tree: BTreeMap<String, Node>,
}

fn ancestors(p: &str) -> Vec<String> {
    let parts: Vec<&str> = p.split('/').collect();
    (1..parts.len()).map(|i| parts[..i].join("/")).collect()
}

fn kind(n: &Node) -> EntryKind {
    match n {
        Node::File(_) => EntryKind::File,
        Node::Dir => EntryKind::Dir,
    }
}

impl Model {
    /// Resolves the ancestors of `p` as the kernel does: first missing → NOT_FOUND, first file → NOT_DIR.
    fn walk(&self, p: &str) -> Result<(), ErrorCode> {
        for a in ancestors(p) {
            match self.tree.get(&a) {
                None => return Err(ErrorCode::NotFound),
                Some(Node::File(_)) => return Err(ErrorCode::NotDir),
                Some(Node::Dir) => {}
            }
        }
        Ok(())
    }

    /// Like `mkdir -p` of the ancestors: a file in the way is NOT_DIR; missing ones are created.
    fn make_parents(&mut self, p: &str) -> Result<(), ErrorCode> {
        let anc = ancestors(p);
        for a in &anc {
            if let Some(Node::File(_)) = self.tree.get(a) {
                return Err(ErrorCode::NotDir);
            }
            if !self.tree.contains_key(a) {
                break;
            }
        }
        for a in anc {
            self.tree.entry(a).or_insert(Node::Dir);
        }
        Ok(())
    }

    fn children(&self, p: &str) -> Vec<(String, EntryKind)> {
        let prefix = if p.is_empty() {
            String::new()
        } else {
            format!("{p}/")
        };
        self.tree
            .iter()
            .filter(|(k, _)| {
                k.starts_with(&prefix) && !k[prefix.len()..].contains('/') && k.len() > prefix.len()
            })
            .map(|(k, n)| (k[prefix.len()..].to_string(), kind(n)))
            .collect()
    }

    fn remove_subtree(&mut self, p: &str) -> BTreeMap<String, Node> {
        let prefix = format!("{p}/");
        let keys: Vec<String> = self
            .tree
            .keys()
            .filter(|k| *k == p || k.starts_with(&prefix))
            .cloned()
            .collect();
        keys.into_iter()
            .map(|k| {
                let n = self.tree.remove(&k).unwrap();
                (k, n)
            })
            .collect()
    }

    fn apply(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Write(i, c) => {
                let p = PATHS[*i];
                self.make_parents(p)?;
                if let Some(Node::Dir) = self.tree.get(p) {
                    return Err(ErrorCode::IsDir);
                }
                self.tree.insert(p.into(), Node::File(c.clone()));
                Ok(Seen::Done)
            }
            Op::Read(i) => {
                let p = PATHS[*i];
                self.walk(p)?;
                match self.tree.get(p) {
                    None => Err(ErrorCode::NotFound),
                    Some(Node::Dir) => Err(ErrorCode::IsDir),
                    Some(Node::File(c)) => Ok(Seen::Text(c.clone())),
                }
            }
            Op::Edit(i, old, new, all) => {
                let p = PATHS[*i];
                self.walk(p)?;
                let c = match self.tree.get(p) {
                    None => return Err(ErrorCode::NotFound),
                    Some(Node::Dir) => return Err(ErrorCode::IsDir),
                    Some(Node::File(c)) => c.clone(),
                };
                let n = c.matches(old).count();
                if n == 0 {
                    return Err(ErrorCode::NoMatch);
                }
                if n > 1 && !all {
                    return Err(ErrorCode::NotUnique);
                }
                let updated = if *all {
                    c.replace(old, new)
                } else {
                    c.replacen(old, new, 1)
                };
                self.tree.insert(p.into(), Node::File(updated));
                Ok(Seen::Done)
            }
            Op::Delete(i, recursive) => {
                let p = PATHS[*i];
                self.walk(p)?;
                match self.tree.get(p) {
                    None => Err(ErrorCode::NotFound),
                    Some(Node::Dir) if !recursive && !self.children(p).is_empty() => {
                        Err(ErrorCode::NotEmpty)
                    }
                    Some(_) => {
                        self.remove_subtree(p);
                        Ok(Seen::Done)
                    }
                }
            }
            Op::Mkdir(i, parents) => {
                let p = PATHS[*i];
                if *parents {
                    if self.walk(p).is_ok() {
                        match self.tree.get(p) {
                            Some(Node::Dir) => return Ok(Seen::Done),
                            Some(Node::File(_)) => return Err(ErrorCode::Exists),
                            None => {}
                        }
                    }
                    self.make_parents(p)?;
                } else {
                    self.walk(p)?;
                    if self.tree.contains_key(p) {
                        return Err(ErrorCode::Exists);
                    }
                }
                self.tree.insert(p.into(), Node::Dir);
                Ok(Seen::Done)
            }
            Op::Move(a, b, overwrite) => {
                let (src, dst) = (PATHS[*a], PATHS[*b]);
                if dst == src || dst.starts_with(&format!("{src}/")) {
                    return Err(ErrorCode::InvalidArgument);
                }
                self.walk(src)?;
                let Some(src_node) = self.tree.get(src).cloned() else {
                    return Err(ErrorCode::NotFound);
                };
                self.make_parents(dst)?;
                if let Some(dst_node) = self.tree.get(dst) {
                    if !overwrite || src.starts_with(&format!("{dst}/")) {
                        return Err(ErrorCode::Exists);
                    }
                    match (&src_node, dst_node) {
                        (Node::File(_), Node::Dir) => return Err(ErrorCode::IsDir),
                        (Node::Dir, Node::File(_)) => return Err(ErrorCode::NotDir),
                        (Node::Dir, Node::Dir) if !self.children(dst).is_empty() => {
                            return Err(ErrorCode::Exists)
                        }
                        _ => {}
                    }
                    self.remove_subtree(dst);
                }
                for (k, n) in self.remove_subtree(src) {
                    self.tree.insert(format!("{dst}{}", &k[src.len()..]), n);
                }
                Ok(Seen::Done)
            }
            Op::List(i) => {
                let p = i.map(|i| PATHS[i]).unwrap_or("");
                if !p.is_empty() {
                    self.walk(p)?;
                    match self.tree.get(p) {
                        None => return Err(ErrorCode::NotFound),
                        Some(Node::File(_)) => return Err(ErrorCode::NotDir),
                        Some(Node::Dir) => {}
                    }
                }
                Ok(Seen::Listing(self.children(p)))
            }
            Op::Exists(i) => {
                let p = PATHS[*i];
                Ok(Seen::Exists(
                    self.walk(p).ok().and_then(|_| self.tree.get(p).map(kind)),
                ))
            }
        }
    }
}

fn run_real(z: &Zones, op: &Op) -> Outcome {
    let o = Origin::INTERNAL;
    let w = |p: &str| format!("/workspace/{p}");
    let done = |r: FsResult<()>| r.map(|_| Seen::Done).map_err(|e| e.code());
    match op {
        Op::Write(i, c) => done(z.write(&w(PATHS[*i]), c, o).map(|_| ())),
        Op::Read(i) => z
            .read(&w(PATHS[*i]), None, None)
            .map(|r| Seen::Text(r.content))
            .map_err(|e| e.code()),
        Op::Edit(i, old, new, all) => done(z.edit(&w(PATHS[*i]), old, new, *all, o).map(|_| ())),
        Op::Delete(i, r) => done(z.delete(&w(PATHS[*i]), *r, o)),
        Op::Mkdir(i, p) => done(z.mkdir(&w(PATHS[*i]), *p, o)),
        Op::Move(a, b, ov) => done(z.rename(&w(PATHS[*a]), &w(PATHS[*b]), *ov, o)),
        Op::List(i) => z
            .list(
                &i.map(|i| w(PATHS[i]))
                    .unwrap_or_else(|| "/workspace".into()),
            )
            .map(|l| Seen::Listing(l.entries.into_iter().map(|e| (e.name, e.kind)).collect()))
            .map_err(|e| e.code()),
        Op::Exists(i) => z
            .exists(&w(PATHS[*i]))
            .map(|e| Seen::Exists(e.kind))
            .map_err(|e| e.code()),
    }
}

/// Reads the real tree back into the model's shape.
fn real_tree(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let rel = e
                .path()
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_string();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
                out.insert(rel, Node::Dir);
            } else {
                out.insert(rel, Node::File(std::fs::read_to_string(e.path()).unwrap()));
            }
        }
    }
    out
}

fn zones_in(dir: &Path) -> Zones {
    let settings = Settings::from_str("[zones]\nroot = \"z\"\n", "test", dir, None).unwrap();
    Zones::open(
        &settings,
        Arc::new(Db::open_in_memory().unwrap()),
        super::system_clock(),
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn core_agrees_with_the_model(ops in prop::collection::vec(op(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let zones = zones_in(dir.path());
        let mut model = Model::default();
        for (n, op) in ops.iter().enumerate() {
            let want = model.apply(op);
            let got = run_real(&zones, op);
            prop_assert_eq!(&got, &want, "step {} {:?}", n, op);
        }
        prop_assert_eq!(real_tree(&dir.path().join("z/workspace")), model.tree);
    }
}

#[test]
fn edit_reports_a_conflict_when_the_file_changes_underneath() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones_in(dir.path());
    zones
        .write("/workspace/f.txt", "count=1\n", Origin::INTERNAL)
        .unwrap();
    let real = dir.path().join("z/workspace/f.txt");
    let outside_writer = real.clone();
    *zones.before_replace.lock().unwrap() = Some(Box::new(move || {
        std::fs::write(&outside_writer, "count=1\nappended by an editor\n").unwrap();
    }));
    let err = zones
        .edit(
            "/workspace/f.txt",
            "count=1",
            "count=2",
            false,
            Origin::INTERNAL,
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Conflict, "{err}");
    // The concurrent change survives; no temp file is left.
    assert_eq!(
        std::fs::read_to_string(&real).unwrap(),
        "count=1\nappended by an editor\n"
    );
    assert_eq!(
        std::fs::read_dir(real.parent().unwrap()).unwrap().count(),
        1
    );
    *zones.before_replace.lock().unwrap() = None;
    zones
        .edit(
            "/workspace/f.txt",
            "count=1",
            "count=2",
            false,
            Origin::INTERNAL,
        )
        .unwrap();
}

#[test]
fn writes_keep_the_mode_of_the_file_they_replace() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let zones = zones_in(dir.path());
    let real = dir.path().join("z/workspace/run.sh");
    std::fs::write(&real, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o750)).unwrap();
    zones
        .write(
            "/workspace/run.sh",
            "#!/bin/sh\necho hi\n",
            Origin::INTERNAL,
        )
        .unwrap();
    assert_eq!(
        std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
        0o750
    );
    zones
        .edit("/workspace/run.sh", "hi", "there", false, Origin::INTERNAL)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&real).unwrap().permissions().mode() & 0o777,
        0o750
    );
}

#[test]
fn replace_entry_replaces_a_symlink_as_itself_and_never_writes_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones_in(dir.path());
    let ws = dir.path().join("z/workspace");
    std::fs::write(ws.join("target.txt"), "the agent's edit\n").unwrap();
    std::os::unix::fs::symlink("target.txt", ws.join("link")).unwrap();
    let seen = zones.seen("/workspace/link").unwrap();
    let mut content: &[u8] = b"upstream\n";
    zones
        .replace_entry(
            "/workspace/link",
            super::Replacement::File {
                content: &mut content,
                mode: 0o4755,
            },
            Some(seen),
            Origin::INTERNAL,
        )
        .unwrap();
    let meta = std::fs::symlink_metadata(ws.join("link")).unwrap();
    assert!(
        meta.file_type().is_file(),
        "the link was replaced by a file"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o7777 & !0o022, 0o755 & !0o022);
    assert_eq!(meta.permissions().mode() & 0o7000, 0, "setuid was masked");
    assert_eq!(
        std::fs::read_to_string(ws.join("link")).unwrap(),
        "upstream\n"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("target.txt")).unwrap(),
        "the agent's edit\n"
    );
    // And back: a file replaced by a symlink, as itself.
    let seen = zones.seen("/workspace/link").unwrap();
    zones
        .replace_entry(
            "/workspace/link",
            super::Replacement::Symlink("target.txt"),
            Some(seen),
            Origin::INTERNAL,
        )
        .unwrap();
    assert_eq!(
        std::fs::read_link(ws.join("link")).unwrap(),
        Path::new("target.txt")
    );
}

#[test]
fn replace_entry_refuses_when_the_entry_changed_after_it_was_seen() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones_in(dir.path());
    let ws = dir.path().join("z/workspace");
    std::fs::write(ws.join("f.txt"), "base\n").unwrap();
    let seen = zones.seen("/workspace/f.txt").unwrap();
    // An acknowledged write lands between the check and the replacement.
    zones
        .write("/workspace/f.txt", "acknowledged\n", Origin::INTERNAL)
        .unwrap();
    let mut content: &[u8] = b"pulled\n";
    let err = zones
        .replace_entry(
            "/workspace/f.txt",
            super::Replacement::File {
                content: &mut content,
                mode: 0o644,
            },
            Some(seen),
            Origin::INTERNAL,
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Conflict, "{err}");
    assert_eq!(
        std::fs::read_to_string(ws.join("f.txt")).unwrap(),
        "acknowledged\n"
    );
    assert_eq!(
        std::fs::read_dir(&ws).unwrap().count(),
        1,
        "no temp file left"
    );
    // Expecting absence where a file appeared is a conflict too.
    let err = zones
        .replace_entry(
            "/workspace/f.txt",
            super::Replacement::Symlink("x"),
            Some(super::Seen::Absent),
            Origin::INTERNAL,
        )
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Conflict, "{err}");
    assert_eq!(
        std::fs::read_dir(&ws).unwrap().count(),
        1,
        "no temp link left"
    );
}

#[test]
fn a_synced_write_syncs_through_the_directory_fd() {
    let dir = tempfile::tempdir().unwrap();
    let zones = zones_in(dir.path());
    let res = zones
        .write_synced("/workspace/d/s.txt", b"durable\n", true, Origin::INTERNAL)
        .unwrap();
    assert!(res.created);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("z/workspace/d/s.txt")).unwrap(),
        "durable\n"
    );
}

#[test]
fn a_change_through_a_symlink_that_leads_out_loops_or_meets_a_file_is_refused_and_changes_nothing()
{
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir().unwrap();
    let zones = zones_in(dir.path());
    let ws = dir.path().join("z/workspace");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir(&outside).unwrap();
    symlink("../../outside", ws.join("out")).unwrap();
    symlink(&outside, ws.join("abs")).unwrap();
    symlink("loop2", ws.join("loop1")).unwrap();
    symlink("loop1", ws.join("loop2")).unwrap();
    std::fs::write(ws.join("file"), "f").unwrap();
    symlink("file", ws.join("tofile")).unwrap();
    let o = Origin::INTERNAL;
    for base in ["out", "abs", "loop1", "tofile", "file", "out/deeper"] {
        let p = |rest: &str| format!("/workspace/{base}/{rest}");
        let tries: Vec<(&str, FsResult<()>)> = vec![
            ("write", zones.write(&p("w"), "x", o).map(|_| ())),
            ("write deep", zones.write(&p("a/b/w"), "x", o).map(|_| ())),
            ("mkdir -p", zones.mkdir(&p("m/n"), true, o)),
            ("symlink", zones.symlink(&p("l"), "x", o)),
            ("delete", zones.delete(&p("w"), true, o)),
            ("edit", zones.edit(&p("w"), "x", "y", false, o).map(|_| ())),
            (
                "move in",
                zones.rename("/workspace/file", &p("moved"), false, o),
            ),
            (
                "move out",
                zones.rename(&p("w"), "/workspace/back", false, o),
            ),
        ];
        for (what, r) in tries {
            let err = r.expect_err(&format!("{what} through {base} must fail"));
            assert!(
                matches!(
                    err.code(),
                    ErrorCode::OutsideZone
                        | ErrorCode::NotDir
                        | ErrorCode::NotFound
                        | ErrorCode::InvalidArgument
                ),
                "{what} through {base}: {err}"
            );
        }
    }
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
    assert_eq!(std::fs::read_to_string(ws.join("file")).unwrap(), "f");
    assert_eq!(
        std::fs::read_dir(&ws).unwrap().count(),
        6,
        "nothing made in the zone"
    );
    assert_eq!(zones.db().journal_len().unwrap(), 0, "nothing journaled");
}

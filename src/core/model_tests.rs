//! Tests of the core against a reference model: random operation sequences run on real zones and
//! on a plain in-memory tree must agree on every result and on the final tree (mountpoint-s3's
//! reference-model idea), plus deterministic checks of behaviour a model cannot race.

use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;

use super::{EntryKind, ErrorCode, FsResult, Zones};
use crate::config::Settings;
use crate::state::{Db, Origin};

// The model shared with the mount's test; it takes `EntryKind` and `ErrorCode` from here.
#[path = "../../tests/support/fs_model.rs"]
mod fs_model;

use fs_model::{disk_tree, Model, Op, Outcome, Seen, Via, PATHS};

/// A random operation, every kind of [`Op`] with every flag.
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

/// Runs an operation through the core on the real zone `z`.
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
            let want = model.apply(Via::Api, op);
            let got = run_real(&zones, op);
            prop_assert_eq!(&got, &want, "step {} {:?}", n, op);
        }
        prop_assert_eq!(disk_tree(&dir.path().join("z/workspace")), model.tree);
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

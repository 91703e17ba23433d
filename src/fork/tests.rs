//! The fork room's own tests: making, changing, listing and merging forks over real zones on
//! temp directories (the API, CLI and mount are tested in tests/api/forks.rs and
//! tests/fuse/test_forks.rs).

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::state::{Db, Via};

const API: Origin = Origin {
    via: Via::Api,
    pid: None,
    uid: None,
};

struct Setup {
    _dir: tempfile::TempDir,
    zones: Arc<Zones>,
    forks: Forks,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let config = "state_dir = \"state\"\n[zones]\nroot = \"z\"\n";
    let settings = Settings::from_str(config, "test", dir.path(), None).unwrap();
    let zones = Arc::new(
        Zones::open(
            &settings,
            Arc::new(Db::open_in_memory().unwrap()),
            crate::core::system_clock(),
        )
        .unwrap(),
    );
    let cps = Arc::new(Checkpoints::open(zones.clone(), &settings).unwrap());
    let forks = Forks::open(zones.clone(), cps, &settings).unwrap();
    Setup {
        _dir: dir,
        zones,
        forks,
    }
}

/// A fork name of this test's own (fork names are process-wide).
fn unique(base: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{base}-{}-{n}", std::process::id())
}

fn read(z: &Zones, p: &str) -> String {
    z.read(p, None, None)
        .map(|r| r.content)
        .unwrap_or_else(|e| format!("<{}>", e.code().as_str()))
}

fn ws(s: &Setup) -> &Path {
    match s.zones.zone(ZoneId::Workspace) {
        Zone::Local(z) => z.root(),
        _ => unreachable!(),
    }
}

#[test]
fn a_fork_starts_as_its_parent_and_neither_sees_the_others_writes() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "one\n", API).unwrap();
    z.write("/workspace/d/b.txt", "two\n", API).unwrap();
    let name = unique("f");
    let made = s
        .forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    assert_eq!((made.linked, made.copied), (2, 0), "{made:?}");
    let f = format!("/forks/{name}");
    assert_eq!(read(z, &format!("{f}/a.txt")), "one\n");
    z.write(&format!("{f}/a.txt"), "fork\n", API).unwrap();
    z.write("/workspace/d/b.txt", "parent\n", API).unwrap();
    z.delete(&format!("{f}/d"), true, API).unwrap();
    assert_eq!(read(z, "/workspace/a.txt"), "one\n");
    assert_eq!(read(z, "/workspace/d/b.txt"), "parent\n");
    assert_eq!(read(z, &format!("{f}/a.txt")), "fork\n");
    assert_eq!(read(z, &format!("{f}/d/b.txt")), "<NOT_FOUND>");
    let changes = s.forks.changes(&name, false).unwrap();
    let files: Vec<(&str, &str)> = changes
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status.as_str()))
        .collect();
    assert_eq!(files, [("a.txt", "modified"), ("d/b.txt", "deleted")]);
    assert!(changes.patch.is_empty());
    let listed = s.forks.list().unwrap();
    let me = listed.iter().find(|l| l.name == name).unwrap();
    assert_eq!((me.parent.as_str(), me.changed), ("workspace", Some(2)));
}

#[test]
fn a_merge_brings_the_forks_changes_and_keeps_the_parents_own() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n7\n8\n", API)
        .unwrap();
    z.write("/workspace/gone.txt", "x\n", API).unwrap();
    let name = unique("m");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.write(&format!("{f}/a.txt"), "ONE\n2\n3\n4\n5\n6\n7\n8\n", API)
        .unwrap();
    z.write(&format!("{f}/new.txt"), "new\n", API).unwrap();
    z.delete(&format!("{f}/gone.txt"), false, API).unwrap();
    z.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n", API)
        .unwrap();
    z.write("/workspace/mine.txt", "parent's\n", API).unwrap();
    let m = s.forks.merge(&name, &[], API).unwrap();
    assert!(m.applied && m.conflicts.is_empty(), "{m:?}");
    assert_eq!(
        read(z, "/workspace/a.txt"),
        "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"
    );
    assert_eq!(read(z, "/workspace/new.txt"), "new\n");
    assert_eq!(read(z, "/workspace/gone.txt"), "<NOT_FOUND>");
    assert_eq!(read(z, "/workspace/mine.txt"), "parent's\n");
    let mut changed = m.changed.clone();
    changed.sort();
    assert_eq!(changed, ["a.txt", "gone.txt", "new.txt"]);
    // One restore undoes it.
    let cps = &s.forks.checkpoints;
    cps.restore(m.before.unwrap(), &[], API).unwrap();
    assert_eq!(read(z, "/workspace/a.txt"), "1\n2\n3\n4\n5\n6\n7\nEIGHT\n");
    assert_eq!(read(z, "/workspace/new.txt"), "<NOT_FOUND>");
    assert_eq!(read(z, "/workspace/gone.txt"), "x\n");
}

#[test]
fn a_conflicting_merge_applies_nothing_and_names_each_conflict() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "base\n", API).unwrap();
    z.write("/workspace/b.txt", "base\n", API).unwrap();
    z.write("/workspace/c.txt", "base\n", API).unwrap();
    let name = unique("c");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.write(&format!("{f}/a.txt"), "fork\n", API).unwrap();
    z.write(&format!("{f}/b.txt"), "fork\n", API).unwrap();
    z.write(&format!("{f}/c.txt"), "fork only\n", API).unwrap();
    z.write("/workspace/a.txt", "parent\n", API).unwrap();
    z.delete("/workspace/b.txt", false, API).unwrap();
    let m = s.forks.merge(&name, &[], API).unwrap();
    assert!(!m.applied);
    let kinds: Vec<(&str, &str)> = m
        .conflicts
        .iter()
        .map(|c| (c.path.as_str(), c.kind.as_str()))
        .collect();
    assert_eq!(kinds, [("a.txt", "content"), ("b.txt", "delete/modify")]);
    assert_eq!(read(z, "/workspace/c.txt"), "base\n", "nothing applied");
    // Only the path that does not conflict.
    let m = s.forks.merge(&name, &["c.txt".into()], API).unwrap();
    assert!(m.applied, "{m:?}");
    assert_eq!(read(z, "/workspace/c.txt"), "fork only\n");
    assert_eq!(read(z, "/workspace/a.txt"), "parent\n");
}

#[test]
fn forks_of_forks_and_of_checkpoints_and_removal() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "v1\n", API).unwrap();
    let first = unique("p");
    let made = s
        .forks
        .create(&first, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    z.write("/workspace/a.txt", "v2\n", API).unwrap();
    let child = unique("ch");
    let from = Source::parse(&first).unwrap();
    s.forks.create(&child, &from, API).unwrap();
    assert_eq!(read(z, &format!("/forks/{child}/a.txt")), "v1\n");
    // From the checkpoint that is the first fork's fork point: the workspace then.
    let cp = unique("cp");
    s.forks
        .create(&cp, &Source::Checkpoint(made.fork.base), API)
        .unwrap();
    assert_eq!(read(z, &format!("/forks/{cp}/a.txt")), "v1\n");
    let dup = s
        .forks
        .create(&first, &Source::Zone(ZoneId::Workspace), API);
    assert_eq!(dup.unwrap_err().code().as_str(), "EXISTS");
    let removed = s.forks.remove(&child, API).unwrap();
    assert!(removed.checkpoint > 0);
    assert_eq!(read(z, &format!("/forks/{child}/a.txt")), "<NOT_FOUND>");
    // The name is free again.
    s.forks
        .create(&child, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    assert_eq!(read(z, &format!("/forks/{child}/a.txt")), "v2\n");
    assert!(ws(&s).join("a.txt").exists());
}

#[test]
fn hostile_fork_names_are_refused() {
    let s = setup();
    for bad in [
        "",
        "../x",
        "a/b",
        ".git",
        "-rf",
        "x\u{1b}[2J",
        &"a".repeat(65),
        "a b",
    ] {
        let e = s
            .forks
            .create(bad, &Source::Zone(ZoneId::Workspace), API)
            .unwrap_err();
        assert_eq!(e.code().as_str(), "INVALID_ARGUMENT", "{bad:?}: {e}");
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
    }
    let e = Source::parse("nowhere").unwrap_err();
    assert_eq!(e.code().as_str(), "INVALID_ARGUMENT");
}

#[test]
fn overlaps_name_paths_changed_in_a_fork_and_its_parent_or_a_sibling() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/shared.txt", "base\n", API).unwrap();
    z.write("/workspace/siblings.txt", "base\n", API).unwrap();
    z.write("/workspace/alone.txt", "base\n", API).unwrap();
    let (a, b) = (unique("oa"), unique("ob"));
    s.forks
        .create(&a, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    s.forks
        .create(&b, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let mut seen = std::collections::HashSet::new();
    assert!(s.forks.new_overlaps(&mut seen).unwrap().is_empty());
    z.write(&format!("/forks/{a}/shared.txt"), "a\n", API)
        .unwrap();
    z.write(&format!("/forks/{a}/siblings.txt"), "a\n", API)
        .unwrap();
    z.write(&format!("/forks/{a}/alone.txt"), "a\n", API)
        .unwrap();
    z.write(&format!("/forks/{b}/siblings.txt"), "b\n", API)
        .unwrap();
    z.write("/workspace/shared.txt", "parent\n", API).unwrap();
    let new = s.forks.new_overlaps(&mut seen).unwrap();
    let found: Vec<(String, Vec<String>)> = new
        .iter()
        .map(|o| (o.path.clone(), o.zones.clone()))
        .collect();
    let (fa, fb) = (format!("forks/{a}"), format!("forks/{b}"));
    let mut siblings = vec![fa.clone(), fb.clone()];
    siblings.sort();
    assert_eq!(
        found,
        [
            (
                "shared.txt".to_string(),
                vec![fa.clone(), "workspace".to_string()]
            ),
            ("siblings.txt".to_string(), siblings),
        ]
    );
    assert!(
        new[0]
            .writers
            .iter()
            .any(|w| w.starts_with("workspace: api")),
        "{new:?}"
    );
    // Each overlap is announced once, as an event in the forks it involves.
    assert!(s.forks.new_overlaps(&mut seen).unwrap().is_empty());
    let listed = s.forks.list().unwrap();
    let me = listed.iter().find(|l| l.name == a).unwrap();
    assert_eq!(me.overlaps.len(), 2);
    let asked = s.forks.overlaps_of(&b).unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].path, "siblings.txt");
}

/// One change of the merge model.
#[derive(Debug, Clone)]
enum Change {
    /// Replace line `line` of the file (made from the base text where missing).
    Line(usize, usize, String),
    Delete(usize),
    Exec(usize, bool),
}

const POOL: [&str; 5] = ["a.txt", "b.txt", "d/c.txt", "d/e/f.txt", "g.bin"];

fn base_text(p: usize) -> String {
    (0..8).map(|i| format!("{} line {i}\n", POOL[p])).collect()
}

fn change() -> impl proptest::strategy::Strategy<Value = Change> {
    use proptest::prelude::*;
    prop_oneof![
        (0..POOL.len(), 0..8usize, "[a-c]{1,2}").prop_map(|(p, l, t)| Change::Line(p, l, t)),
        (0..POOL.len()).prop_map(Change::Delete),
        (0..POOL.len(), any::<bool>()).prop_map(|(p, x)| Change::Exec(p, x)),
    ]
}

/// Applies `changes` to the zone `zone` (a virtual path prefix) through the core.
fn apply(z: &Zones, zone: &str, root: &Path, changes: &[Change]) {
    use std::os::unix::fs::PermissionsExt;
    for c in changes {
        let (p, path) = match c {
            Change::Line(p, ..) | Change::Delete(p) | Change::Exec(p, _) => {
                (*p, format!("{zone}/{}", POOL[*p]))
            }
        };
        let on_disk = root.join(POOL[p]);
        let now = std::fs::read_to_string(&on_disk).ok();
        let exec = std::fs::metadata(&on_disk)
            .map(|m| m.permissions().mode() & 0o100 != 0)
            .unwrap_or(false);
        match c {
            Change::Line(_, line, text) => {
                let text_now = now.unwrap_or_else(|| base_text(p));
                let mut lines: Vec<String> = text_now.lines().map(String::from).collect();
                if let Some(l) = lines.get_mut(*line) {
                    *l = text.clone();
                }
                let new = lines.join("\n") + "\n";
                let mode = if exec { 0o755 } else { 0o644 };
                z.write_with_mode(&path, new.as_bytes(), mode, API).unwrap();
            }
            Change::Delete(_) => {
                let _ = z.delete(&path, false, API);
            }
            Change::Exec(_, x) => {
                if let Some(text) = now {
                    let mode = if *x { 0o755 } else { 0o644 };
                    z.write_with_mode(&path, text.as_bytes(), mode, API)
                        .unwrap();
                }
            }
        }
    }
}

/// Runs git in `repo` (a bare repository) with `args`; returns its exit code and stdout.
fn git(repo: &Path, work: Option<&Path>, index: &Path, args: &[&str]) -> (i32, String) {
    let mut cmd = std::process::Command::new("git");
    cmd.arg(format!("--git-dir={}", repo.display()));
    if let Some(w) = work {
        cmd.arg(format!("--work-tree={}", w.display()));
    }
    let out = cmd
        .args(args)
        .env("GIT_INDEX_FILE", index)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", repo)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// The git tree of the directory `dir` (written into `repo`).
fn tree_of(repo: &Path, dir: &Path) -> String {
    let index = repo.join(format!("index-{}", unique("i")));
    git(repo, Some(dir), &index, &["add", "-A", "."]);
    let tree = git(repo, Some(dir), &index, &["write-tree"]).1;
    tree.trim().to_string()
}

fn ls_tree(repo: &Path, tree: &str) -> String {
    let index = repo.join("unused-index");
    git(repo, None, &index, &["ls-tree", "-r", tree]).1
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        .. proptest::prelude::ProptestConfig::default()
    })]

    /// A merge of a fork gives what `git merge-tree` computes for the same three trees (renames
    /// as a delete and an add): the same files and modes when it is clean, the same conflicted
    /// paths (and nothing applied) when it is not.
    #[test]
    fn a_merge_is_what_git_merge_tree_computes(
        ours in proptest::collection::vec(change(), 0..6),
        theirs in proptest::collection::vec(change(), 0..6),
    ) {
        let s = setup();
        let z = &s.zones;
        for (i, p) in POOL.iter().enumerate().take(4) {
            z.write(&format!("/workspace/{p}"), &base_text(i), API).unwrap();
        }
        let git_dir = s._dir.path().join("model.git");
        std::process::Command::new("git").args(["init", "-q", "--bare"]).arg(&git_dir).output().unwrap();
        let ws_root = ws(&s).to_path_buf();
        let base = tree_of(&git_dir, &ws_root);
        let name = unique("model");
        s.forks.create(&name, &Source::Zone(ZoneId::Workspace), API).unwrap();
        let fork_root = s.forks.root.read_dir().unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{name}-")))
            .unwrap();
        apply(z, "/workspace", &ws_root, &ours);
        apply(z, &format!("/forks/{name}"), &fork_root, &theirs);
        let (o, t) = (tree_of(&git_dir, &ws_root), tree_of(&git_dir, &fork_root));
        let index = git_dir.join("unused-index");
        let (code, out) = git(&git_dir, None, &index, &[
            "merge-tree", "--write-tree", "--name-only", "-X", "no-renames",
            &format!("--merge-base={base}"), &o, &t,
        ]);
        let m = s.forks.merge(&name, &[], API).unwrap();
        let git_tree = out.lines().next().unwrap_or_default().to_string();
        if code == 0 {
            proptest::prop_assert!(m.applied, "git merged cleanly, wardfs: {m:?}");
            let now = tree_of(&git_dir, &ws_root);
            proptest::prop_assert_eq!(ls_tree(&git_dir, &now), ls_tree(&git_dir, &git_tree));
        } else {
            proptest::prop_assert_eq!(code, 1, "git merge-tree failed: {}", out);
            let git_paths: std::collections::BTreeSet<String> = out
                .lines()
                .skip(1)
                .take_while(|l| !l.is_empty())
                .map(String::from)
                .collect();
            let ours_paths: std::collections::BTreeSet<String> =
                m.conflicts.iter().map(|c| c.path.clone()).collect();
            proptest::prop_assert!(!m.applied, "git found conflicts {git_paths:?}, wardfs: {m:?}");
            proptest::prop_assert_eq!(ours_paths, git_paths);
            proptest::prop_assert_eq!(tree_of(&git_dir, &ws_root), o, "nothing applied");
        }
    }
}

#[test]
fn a_merge_never_brings_a_git_directory_into_the_parent_in_any_spelling() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "base\n", API).unwrap();
    let name = unique("git");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    let hostile = [
        ".git/config",
        ".GIT/hooks/pre-commit",
        "sub/.git/config",
        "sub/.Git./config",
        "git~1/config",
    ];
    for p in hostile {
        // Writable or not in the fork (the API may refuse some spellings), never merged.
        let _ = z.write(
            &format!("{f}/{p}"),
            "[core]\n\tfsmonitor = touch /tmp/pwned\n",
            API,
        );
    }
    z.write(&format!("{f}/a.txt"), "fork\n", API).unwrap();
    let m = s.forks.merge(&name, &[], API).unwrap();
    assert!(m.applied, "{m:?}");
    assert_eq!(m.changed, ["a.txt"], "{m:?}");
    for p in hostile {
        assert!(!ws(&s).join(p).exists(), "{p} reached the parent");
    }
}

#[test]
fn a_write_made_while_a_merge_was_computed_is_left_alone_and_reported() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "base\n", API).unwrap();
    let name = unique("race");
    let made = s
        .forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let id = ZoneId::fork(&name).unwrap();
    z.write(&format!("/forks/{name}/a.txt"), "fork\n", API)
        .unwrap();
    let cps = &s.forks.checkpoints;
    let base = cps.get(made.fork.base).unwrap();
    let (ours, _) = cps.present(ZoneId::Workspace, "ours", API).unwrap();
    let (theirs, _) = cps.present(id, "theirs", API).unwrap();
    let merged = cps
        .merge_trees(&base.tree, &ours.tree, &theirs.tree)
        .unwrap();
    // Another writer, after the merge was computed and before it is applied.
    z.write("/workspace/a.txt", "another writer\n", API)
        .unwrap();
    let (_, res) = cps
        .apply_tree(
            ZoneId::Workspace,
            &ours.tree,
            &merged.tree.unwrap(),
            &["a.txt".to_string()],
            "merge",
            API,
        )
        .unwrap();
    assert_eq!(res.conflicts, ["/workspace/a.txt"]);
    assert_eq!(read(z, "/workspace/a.txt"), "another writer\n");
    // The next checkpoint holds what is there, not the merged tree.
    let (now, _) = cps.present(ZoneId::Workspace, "after", API).unwrap();
    let (content, _) = cps.tree_file(&now.tree, "a.txt").unwrap().unwrap();
    assert_eq!(content, b"another writer\n");
}

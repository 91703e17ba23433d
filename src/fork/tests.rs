//! The fork room's own tests: making, changing, listing and merging forks over real zones on
//! temp directories (the API, CLI and mount are tested in tests/api/forks.rs and
//! tests/fuse/test_forks.rs).

use std::path::Path;
use std::sync::Arc;

use super::*;
use crate::state::{Db, Via};

pub(super) const API: Origin = Origin {
    via: Via::Api,
    pid: None,
    uid: None,
};

pub(super) struct Setup {
    _dir: tempfile::TempDir,
    pub(super) zones: Arc<Zones>,
    pub(super) forks: Forks,
}

pub(super) fn setup() -> Setup {
    setup_with("")
}

/// [`setup`] with `extra` appended to the config.
pub(super) fn setup_with(extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("state_dir = \"state\"\n[zones]\nroot = \"z\"\n{extra}");
    let settings = Settings::from_str(&config, "test", dir.path(), None).unwrap();
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
pub(super) fn unique(base: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{base}-{}-{n}", std::process::id())
}

fn read(z: &Zones, p: &str) -> String {
    z.read(p, None, None)
        .map(|r| r.content)
        .unwrap_or_else(|e| format!("<{}>", e.code().as_str()))
}

pub(super) fn ws(s: &Setup) -> &Path {
    s.zones.local(ZoneId::Workspace).expect("local").root()
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
fn retention_keeps_a_live_forks_fork_point_and_drops_a_removed_ones() {
    let s = setup_with("[checkpoints]\nkeep = 1\n");
    let z = &s.zones;
    z.write("/workspace/a.txt", "1\n2\n3\n", API).unwrap();
    let (alive, gone) = (unique("kept"), unique("dropped"));
    let from = Source::Zone(ZoneId::Workspace);
    let point = s.forks.create(&alive, &from, API).unwrap().fork.base;
    let other = s.forks.create(&gone, &from, API).unwrap().fork.base;
    z.write(&format!("/forks/{gone}/b.txt"), "kept\n", API)
        .unwrap();
    s.forks.remove(&gone, API).unwrap();
    let cps = &s.forks.checkpoints;
    let fork = ZoneId::from_name(&format!("forks/{alive}")).unwrap();
    for i in 0..3 {
        z.write(&format!("/forks/{alive}/b.txt"), &format!("{i}\n"), API)
            .unwrap();
        cps.create(fork, "later", API).unwrap();
    }
    let (rows, _) = cps.prune(0).unwrap();
    assert!(rows >= 3, "{rows} pruned: the test proves nothing");
    assert!(
        cps.get(point).is_ok(),
        "the live fork's fork point was pruned"
    );
    assert!(
        cps.get(other).is_err(),
        "a removed fork's fork point was kept"
    );
    z.write(&format!("/forks/{alive}/a.txt"), "ONE\n2\n3\n", API)
        .unwrap();
    let m = s.forks.merge(&alive, &[], API).unwrap();
    assert!(m.applied, "{m:?}");
    assert_eq!(read(z, "/workspace/a.txt"), "ONE\n2\n3\n");
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
    assert!(
        m.applied && m.conflicts.is_empty() && m.left_alone.is_empty(),
        "{m:?}"
    );
    assert_eq!(
        read(z, "/workspace/a.txt"),
        "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n",
        "{m:?}"
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

#[test]
fn a_forks_own_merge_is_no_overlap_but_a_later_parent_write_is() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/x.txt", "base\n", API).unwrap();
    z.write("/workspace/y.txt", "base\n", API).unwrap();
    let name = unique("own");
    let f = format!("/forks/{name}");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    z.write(&format!("{f}/x.txt"), "fork 1\n", API).unwrap();
    z.write(&format!("{f}/y.txt"), "fork 1\n", API).unwrap();
    // Some paths only: the fork point stays, so the merge's writes are after it.
    let m = s.forks.merge(&name, &["x.txt".to_string()], API).unwrap();
    assert!(m.applied && m.changed == ["x.txt"], "{m:?}");
    z.write(&format!("{f}/x.txt"), "fork 2\n", API).unwrap();
    let zones_of = |p: &str| -> Vec<Vec<String>> {
        s.forks
            .overlaps_of(&name)
            .unwrap()
            .into_iter()
            .filter(|o| o.path == p)
            .map(|o| o.zones)
            .collect()
    };
    assert!(
        zones_of("x.txt").is_empty(),
        "the fork's own merge is an overlap"
    );
    // Another writer of the parent afterwards is one.
    z.write("/workspace/x.txt", "someone else\n", API).unwrap();
    let mut want = vec![format!("forks/{name}"), "workspace".to_string()];
    want.sort();
    assert_eq!(zones_of("x.txt"), [want]);
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

/// A workspace and a fork of it, each changed by its own random changes, with their trees in a
/// bare model repository: what the merge and update property tests compare with
/// `git merge-tree`.
struct Model {
    s: Setup,
    git_dir: std::path::PathBuf,
    ws_root: std::path::PathBuf,
    fork_root: std::path::PathBuf,
    name: String,
    /// The trees (hex, in `git_dir`) of the fork point, and of the parent and the fork after
    /// their changes.
    base: String,
    parent: String,
    fork: String,
}

impl Model {
    fn new(base_name: &str, parent: &[Change], fork: &[Change]) -> Model {
        let s = setup();
        let z = &s.zones;
        for (i, p) in POOL.iter().enumerate().take(4) {
            z.write(&format!("/workspace/{p}"), &base_text(i), API)
                .unwrap();
        }
        let git_dir = s._dir.path().join("model.git");
        std::process::Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&git_dir)
            .output()
            .unwrap();
        let ws_root = ws(&s).to_path_buf();
        let base = tree_of(&git_dir, &ws_root);
        let name = unique(base_name);
        s.forks
            .create(&name, &Source::Zone(ZoneId::Workspace), API)
            .unwrap();
        let fork_root = fork_root(&s, &name);
        apply(z, "/workspace", &ws_root, parent);
        apply(z, &format!("/forks/{name}"), &fork_root, fork);
        let (parent, fork) = (tree_of(&git_dir, &ws_root), tree_of(&git_dir, &fork_root));
        Model {
            s,
            git_dir,
            ws_root,
            fork_root,
            name,
            base,
            parent,
            fork,
        }
    }

    /// `git merge-tree` of `ours` and `theirs` against `base`: (exit code, output).
    fn merge_tree(git_dir: &Path, base: &str, ours: &str, theirs: &str) -> (i32, String) {
        let index = git_dir.join("unused-index");
        git(
            git_dir,
            None,
            &index,
            &[
                "merge-tree",
                "--write-tree",
                "--name-only",
                "-X",
                "no-renames",
                &format!("--merge-base={base}"),
                ours,
                theirs,
            ],
        )
    }

    /// The conflicted paths `git merge-tree --name-only` lists after its tree.
    fn conflicted(out: &str) -> std::collections::BTreeSet<String> {
        out.lines()
            .skip(1)
            .take_while(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }
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
        let Model { s, git_dir, ws_root, name, base, parent: o, fork: t, .. } =
            Model::new("model", &ours, &theirs);
        let (code, out) = Model::merge_tree(&git_dir, &base, &o, &t);
        let m = s.forks.merge(&name, &[], API).unwrap();
        let git_tree = out.lines().next().unwrap_or_default().to_string();
        if code == 0 {
            proptest::prop_assert!(m.applied, "git merged cleanly, wardfs: {m:?}");
            let now = tree_of(&git_dir, &ws_root);
            proptest::prop_assert_eq!(ls_tree(&git_dir, &now), ls_tree(&git_dir, &git_tree));
        } else {
            proptest::prop_assert_eq!(code, 1, "git merge-tree failed: {}", out);
            let git_paths = Model::conflicted(&out);
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

// -- updates, and merges settled by `ours`/`theirs` ------------------------------------------

/// The directory of the fork `name`.
fn fork_root(s: &Setup, name: &str) -> std::path::PathBuf {
    s.forks
        .root
        .read_dir()
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&format!("{name}-"))
        })
        .unwrap()
}

/// The paths of a fork's `changes`, with their statuses.
fn changed_files(s: &Setup, name: &str) -> Vec<(String, String)> {
    s.forks
        .changes(name, false)
        .unwrap()
        .files
        .into_iter()
        .map(|f| (f.path, f.status))
        .collect()
}

fn owned(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn undoing_an_update_or_a_merge_puts_the_fork_point_back() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n", API)
        .unwrap();
    let name = unique("undo");
    let f = format!("/forks/{name}");
    let first = s
        .forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap()
        .fork
        .base;
    z.write(&format!("{f}/mine.txt"), "the fork's\n", API)
        .unwrap();
    z.write("/workspace/a.txt", "1\n2\n3\n4\n5\nSIX\n", API)
        .unwrap();
    let base_now = |s: &Setup| {
        s.forks
            .list()
            .unwrap()
            .into_iter()
            .find(|l| l.name == name)
            .unwrap()
            .base
    };
    let own = owned(&[("mine.txt", "added")]);
    // Undo an update: the fork's files and its fork point go back together, so its changes
    // are its own again and a merge keeps the parent's change (it would revert it otherwise).
    let u = s.forks.update(&name, API).unwrap();
    assert_ne!(u.base, first);
    let cps = &s.forks.checkpoints;
    cps.restore(u.before.unwrap(), &[], API).unwrap();
    assert_eq!(
        base_now(&s),
        first,
        "the update's fork point stayed after its undo"
    );
    assert_eq!(changed_files(&s, &name), own);
    // Undo the undo: the update's fork point comes back.
    let undo = cps.list(Some(ZoneId::fork(&name).unwrap()), 1).unwrap()[0].id;
    cps.restore(undo, &[], API).unwrap();
    assert_eq!(base_now(&s), u.base);
    // Undo a merge: the fork's changes are changes again.
    let m = s.forks.merge(&name, &[], API).unwrap();
    assert!(m.applied && m.conflicts.is_empty(), "{m:?}");
    assert!(changed_files(&s, &name).is_empty());
    cps.restore(m.before.unwrap(), &[], API).unwrap();
    assert_eq!(read(z, "/workspace/mine.txt"), "<NOT_FOUND>");
    assert_eq!(
        changed_files(&s, &name),
        own,
        "the merge's undo lost the fork's changes"
    );
    let again = s.forks.merge(&name, &[], API).unwrap();
    assert!(again.applied, "{again:?}");
    assert_eq!(read(z, "/workspace/mine.txt"), "the fork's\n");
    assert_eq!(read(z, "/workspace/a.txt"), "1\n2\n3\n4\n5\nSIX\n");
}

#[test]
fn an_update_brings_the_parents_changes_into_the_fork_and_keeps_its_own() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n7\n8\n", API)
        .unwrap();
    z.write("/workspace/gone.txt", "x\n", API).unwrap();
    let name = unique("u");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.write(&format!("{f}/a.txt"), "ONE\n2\n3\n4\n5\n6\n7\n8\n", API)
        .unwrap();
    z.write(&format!("{f}/mine.txt"), "the fork's\n", API)
        .unwrap();
    z.write("/workspace/a.txt", "1\n2\n3\n4\n5\n6\n7\nEIGHT\n", API)
        .unwrap();
    z.write("/workspace/d/p.txt", "the parent's\n", API)
        .unwrap();
    z.delete("/workspace/gone.txt", false, API).unwrap();

    let u = s.forks.update(&name, API).unwrap();
    assert!(u.conflicts.is_empty() && u.left_alone.is_empty(), "{u:?}");
    assert_eq!(
        (u.fork.as_str(), u.parent.as_str()),
        (name.as_str(), "workspace")
    );
    let mut changed = u.changed.clone();
    changed.sort();
    assert_eq!(changed, ["a.txt", "d/p.txt", "gone.txt"]);
    assert_eq!(
        read(z, &format!("{f}/a.txt")),
        "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"
    );
    assert_eq!(read(z, &format!("{f}/d/p.txt")), "the parent's\n");
    assert_eq!(read(z, &format!("{f}/gone.txt")), "<NOT_FOUND>");
    assert_eq!(read(z, &format!("{f}/mine.txt")), "the fork's\n");
    // The parent is not touched.
    assert_eq!(read(z, "/workspace/a.txt"), "1\n2\n3\n4\n5\n6\n7\nEIGHT\n");
    assert_eq!(read(z, "/workspace/mine.txt"), "<NOT_FOUND>");
    // The fork point moved: `changes` is the fork's own, against the parent as brought in.
    let listed = s.forks.list().unwrap();
    assert_eq!(listed.iter().find(|l| l.name == name).unwrap().base, u.base);
    assert_eq!(
        changed_files(&s, &name),
        owned(&[("a.txt", "modified"), ("mine.txt", "added")])
    );
    // The fork's next checkpoint starts from what it holds, not from the new fork point.
    z.write(&format!("{f}/later.txt"), "later\n", API).unwrap();
    let cps = &s.forks.checkpoints;
    let id = ZoneId::fork(&name).unwrap();
    let (now, _) = cps.present(id, "after", API).unwrap();
    for (p, want) in [
        ("a.txt", "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"),
        ("mine.txt", "the fork's\n"),
        ("later.txt", "later\n"),
        ("d/p.txt", "the parent's\n"),
    ] {
        let (content, _) = cps.tree_file(&now.tree, p).unwrap().unwrap();
        assert_eq!(String::from_utf8(content).unwrap(), want, "{p}");
    }
    // A merge now brings exactly the fork's own changes.
    let m = s.forks.merge(&name, &[], API).unwrap();
    let mut merged = m.changed.clone();
    merged.sort();
    assert_eq!(merged, ["a.txt", "later.txt", "mine.txt"], "{m:?}");
    assert_eq!(
        read(z, "/workspace/a.txt"),
        "ONE\n2\n3\n4\n5\n6\n7\nEIGHT\n"
    );
    // Nothing new in the parent: an update does nothing.
    let again = s.forks.update(&name, API).unwrap();
    assert_eq!((again.before, again.changed.len()), (None, 0), "{again:?}");
}

#[test]
fn one_restore_undoes_an_update() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "base\n", API).unwrap();
    let name = unique("undo");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.write(&format!("{f}/b.txt"), "the fork's\n", API).unwrap();
    z.write("/workspace/a.txt", "the parent's\n", API).unwrap();
    z.write("/workspace/c.txt", "new\n", API).unwrap();
    let u = s.forks.update(&name, API).unwrap();
    assert_eq!(read(z, &format!("{f}/a.txt")), "the parent's\n");
    s.forks
        .checkpoints
        .restore(u.before.unwrap(), &[], API)
        .unwrap();
    assert_eq!(read(z, &format!("{f}/a.txt")), "base\n");
    assert_eq!(read(z, &format!("{f}/c.txt")), "<NOT_FOUND>");
    assert_eq!(read(z, &format!("{f}/b.txt")), "the fork's\n");
}

#[test]
fn an_update_keeps_both_sides_of_each_conflict() {
    let s = setup();
    let z = &s.zones;
    for p in ["a.txt", "b.txt", "c.txt", "d.txt", "e.bin"] {
        z.write(&format!("/workspace/{p}"), "base\n", API).unwrap();
    }
    let name = unique("uc");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.write(&format!("{f}/a.txt"), "the fork's\n", API).unwrap();
    z.write(&format!("{f}/b.txt"), "the fork's\n", API).unwrap();
    z.delete(&format!("{f}/c.txt"), false, API).unwrap();
    z.write(&format!("{f}/d.txt"), "the fork's\n", API).unwrap();
    z.write(&format!("{f}/d.txt.parent"), "the fork's own file\n", API)
        .unwrap();
    z.write(&format!("{f}/clean.txt"), "the fork's\n", API)
        .unwrap();
    z.write("/workspace/a.txt", "the parent's\n", API).unwrap();
    z.delete("/workspace/b.txt", false, API).unwrap();
    z.write("/workspace/c.txt", "the parent's\n", API).unwrap();
    z.write("/workspace/d.txt", "the parent's\n", API).unwrap();
    z.write("/workspace/p.txt", "the parent's\n", API).unwrap();

    let u = s.forks.update(&name, API).unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = u
        .conflicts
        .iter()
        .map(|c| (c.path.as_str(), c.kind.as_str(), c.parent_copy.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("a.txt", "content", Some("a.txt.parent")),
            // The parent deleted it, the fork changed it: nothing to put beside.
            ("b.txt", "delete/modify", None),
            // The parent changed it, the fork deleted it.
            ("c.txt", "modify/delete", Some("c.txt.parent")),
            // The fork's own `d.txt.parent` is not overwritten.
            ("d.txt", "content", Some("d.txt.parent.2")),
        ]
    );
    let r = |p: &str| read(z, &format!("{f}/{p}"));
    assert_eq!(r("a.txt"), "the fork's\n");
    assert_eq!(r("a.txt.parent"), "the parent's\n");
    assert_eq!(r("b.txt"), "the fork's\n");
    assert_eq!(r("b.txt.parent"), "<NOT_FOUND>");
    assert_eq!(r("c.txt"), "<NOT_FOUND>");
    assert_eq!(r("c.txt.parent"), "the parent's\n");
    assert_eq!(r("d.txt"), "the fork's\n");
    assert_eq!(r("d.txt.parent"), "the fork's own file\n");
    assert_eq!(r("d.txt.parent.2"), "the parent's\n");
    // What merged cleanly is in, from both sides.
    assert_eq!(r("p.txt"), "the parent's\n");
    assert_eq!(r("clean.txt"), "the fork's\n");
    assert_eq!(read(z, "/workspace/a.txt.parent"), "<NOT_FOUND>");
}

#[test]
fn an_update_with_no_parent_zone_or_a_bad_name_is_refused() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/a.txt", "v1\n", API).unwrap();
    let first = unique("src");
    let made = s
        .forks
        .create(&first, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let of_cp = unique("ofcp");
    s.forks
        .create(&of_cp, &Source::Checkpoint(made.fork.base), API)
        .unwrap();
    let e = s.forks.update(&of_cp, API).unwrap_err();
    assert_eq!(e.code().as_str(), "ZONE_UNAVAILABLE", "{e}");
    assert!(e.to_string().contains("update from"), "{e}");
    let e = s.forks.update(&unique("none"), API).unwrap_err();
    assert_eq!(e.code().as_str(), "NOT_FOUND");
    for bad in ["../x", "a/b", "x\u{1b}[2J", ""] {
        let e = s.forks.update(bad, API).unwrap_err();
        assert_eq!(e.code().as_str(), "INVALID_ARGUMENT", "{bad:?}");
        assert!(!e.to_string().contains('\u{1b}'), "{e}");
    }
    // A fork of a fork updates from that fork.
    let child = unique("child");
    s.forks
        .create(&child, &Source::parse(&first).unwrap(), API)
        .unwrap();
    z.write(&format!("/forks/{first}/a.txt"), "the first fork's\n", API)
        .unwrap();
    let u = s.forks.update(&child, API).unwrap();
    assert_eq!(u.parent, format!("forks/{first}"));
    assert_eq!(
        read(z, &format!("/forks/{child}/a.txt")),
        "the first fork's\n"
    );
}

/// A fork whose merge conflicts on `a.txt` (content) and `b.txt` (the parent deleted it, the
/// fork changed it), with `c.txt` changed by the fork alone.
fn conflicted(s: &Setup) -> String {
    let z = &s.zones;
    for p in ["a.txt", "b.txt", "c.txt"] {
        z.write(&format!("/workspace/{p}"), "base\n", API).unwrap();
    }
    let name = unique("settle");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    for p in ["a.txt", "b.txt", "c.txt"] {
        z.write(&format!("{f}/{p}"), "the fork's\n", API).unwrap();
    }
    z.write("/workspace/a.txt", "the parent's\n", API).unwrap();
    z.delete("/workspace/b.txt", false, API).unwrap();
    name
}

fn settle(ours: &[&str], theirs: &[&str]) -> Settle {
    Settle {
        ours: ours.iter().map(|p| p.to_string()).collect(),
        theirs: theirs.iter().map(|p| p.to_string()).collect(),
        beside: None,
    }
}

#[test]
fn ours_and_theirs_settle_the_conflicts_they_name_and_the_rest_still_stops_a_merge() {
    let s = setup();
    let z = &s.zones;
    let name = conflicted(&s);
    // One conflict settled, one left: nothing applied.
    let m = s
        .forks
        .merge_settling(&name, &[], &settle(&["a.txt"], &[]), API)
        .unwrap();
    assert!(!m.applied, "{m:?}");
    let left: Vec<&str> = m.conflicts.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(left, ["b.txt"]);
    assert_eq!(read(z, "/workspace/c.txt"), "base\n");
    // Both settled: the parent's a.txt kept, the fork's b.txt taken back, c.txt merged.
    let m = s
        .forks
        .merge_settling(&name, &[], &settle(&["a.txt"], &["b.txt"]), API)
        .unwrap();
    assert!(m.applied && m.conflicts.is_empty(), "{m:?}");
    let settled: Vec<(&str, &str)> = m
        .settled
        .iter()
        .map(|c| (c.path.as_str(), c.kind.as_str()))
        .collect();
    assert_eq!(settled, [("a.txt", "content"), ("b.txt", "delete/modify")]);
    assert_eq!(read(z, "/workspace/a.txt"), "the parent's\n");
    assert_eq!(read(z, "/workspace/b.txt"), "the fork's\n");
    assert_eq!(read(z, "/workspace/c.txt"), "the fork's\n");
}

#[test]
fn ours_takes_a_deletion_and_theirs_a_content_conflict() {
    let s = setup();
    let z = &s.zones;
    let name = conflicted(&s);
    let m = s
        .forks
        .merge_settling(&name, &[], &settle(&["b.txt"], &["a.txt"]), API)
        .unwrap();
    assert!(m.applied, "{m:?}");
    assert_eq!(read(z, "/workspace/a.txt"), "the fork's\n");
    assert_eq!(read(z, "/workspace/b.txt"), "<NOT_FOUND>");
}

#[test]
fn a_side_for_a_path_that_does_not_conflict_is_refused_and_nothing_applied() {
    let s = setup();
    let z = &s.zones;
    let name = conflicted(&s);
    let all = ["a.txt", "b.txt"];
    for (ours, theirs, field) in [
        (&["a.txt", "b.txt", "c.txt"][..], &[][..], "ours"),
        (&all[..], &["never.txt"][..], "theirs"),
        (&all[..], &["../../etc/passwd"][..], "theirs"),
        (&all[..], &["/workspace/a.txt"][..], "theirs"),
        (&all[..], &["a.txt\0"][..], "theirs"),
        (&["a.txt"][..], &["a.txt", "b.txt"][..], "ours"),
    ] {
        let e = s
            .forks
            .merge_settling(&name, &[], &settle(ours, theirs), API)
            .unwrap_err();
        assert_eq!(
            e.code().as_str(),
            "INVALID_ARGUMENT",
            "{ours:?} {theirs:?}: {e}"
        );
        assert!(e.to_string().contains(field), "{e}");
    }
    let e = s
        .forks
        .merge_settling(&name, &[], &settle(&all, &["x\u{1b}]0;t\u{7}"]), API)
        .unwrap_err();
    assert!(!e.to_string().contains('\u{1b}'), "{e}");
    assert_eq!(read(z, "/workspace/c.txt"), "base\n", "nothing applied");
    assert_eq!(read(z, "/workspace/a.txt"), "the parent's\n");
}

/// `git ls-tree -r` of `tree` as path -> (mode, object).
fn entries(repo: &Path, tree: &str) -> std::collections::BTreeMap<String, (String, String)> {
    ls_tree(repo, tree)
        .lines()
        .filter_map(|l| {
            let (meta, path) = l.split_once('\t')?;
            let mut m = meta.split(' ');
            let mode = m.next()?.to_string();
            let id = m.nth(1)?.to_string();
            Some((path.to_string(), (mode, id)))
        })
        .collect()
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        .. proptest::prelude::ProptestConfig::default()
    })]

    /// An update of a fork gives what `git merge-tree` computes with the fork as "ours" and the
    /// parent as "theirs" (renames as a delete and an add): the same files and modes where it
    /// is clean; on the conflicted paths git names, the fork's version at the path and the
    /// parent's at `PATH.parent`. The parent is not touched, and a merge right after makes the
    /// parent what the fork is.
    #[test]
    fn an_update_is_what_git_merge_tree_computes(
        parent in proptest::collection::vec(change(), 0..6),
        fork in proptest::collection::vec(change(), 0..6),
    ) {
        let Model { s, git_dir, ws_root, fork_root: root, name, base, parent: p, fork: f } =
            Model::new("umodel", &parent, &fork);
        let (code, out) = Model::merge_tree(&git_dir, &base, &f, &p);
        let u = s.forks.update(&name, API).unwrap();
        proptest::prop_assert!(u.left_alone.is_empty(), "{u:?}");
        let git_tree = out.lines().next().unwrap_or_default().to_string();
        let mut want = entries(&git_dir, &git_tree);
        let ours_paths: std::collections::BTreeSet<String> =
            u.conflicts.iter().map(|c| c.path.clone()).collect();
        if code == 0 {
            proptest::prop_assert!(u.conflicts.is_empty(), "git merged cleanly, wardfs: {u:?}");
        } else {
            proptest::prop_assert_eq!(code, 1, "git merge-tree failed: {}", out);
            let git_paths = Model::conflicted(&out);
            proptest::prop_assert_eq!(&ours_paths, &git_paths);
            let (fork_had, parent_has) = (entries(&git_dir, &f), entries(&git_dir, &p));
            for c in &git_paths {
                want.remove(c);
                if let Some(e) = fork_had.get(c) {
                    want.insert(c.clone(), e.clone());
                }
                if let Some(e) = parent_has.get(c) {
                    want.insert(format!("{c}.parent"), e.clone());
                }
            }
        }
        let after = tree_of(&git_dir, &root);
        proptest::prop_assert_eq!(entries(&git_dir, &after), want);
        proptest::prop_assert_eq!(tree_of(&git_dir, &ws_root), p, "the parent is not touched");
        let m = s.forks.merge(&name, &[], API).unwrap();
        proptest::prop_assert!(m.applied && m.conflicts.is_empty(), "{m:?}");
        proptest::prop_assert_eq!(tree_of(&git_dir, &ws_root), after);
    }
}

/// A fork where one side made the directory `d` a file and the other changed `d/x.txt` and
/// added `d/y.txt`; `file_in_fork` says which side made the file.
fn dir_against_file(s: &Setup, file_in_fork: bool) -> String {
    let z = &s.zones;
    z.write("/workspace/d/x.txt", "base\n", API).unwrap();
    let name = unique("df");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let (fork, parent) = (format!("/forks/{name}"), "/workspace".to_string());
    let (file_side, dir_side) = if file_in_fork {
        (fork, parent)
    } else {
        (parent, fork)
    };
    z.delete(&format!("{file_side}/d"), true, API).unwrap();
    z.write(&format!("{file_side}/d"), "now a file\n", API)
        .unwrap();
    z.write(&format!("{dir_side}/d/x.txt"), "changed\n", API)
        .unwrap();
    z.write(&format!("{dir_side}/d/y.txt"), "new\n", API)
        .unwrap();
    name
}

#[test]
fn a_file_against_a_directory_is_kept_beside_or_refused_whole() {
    // The parent made `d` a file: the fork keeps its directory, the parent's file is beside it.
    let s = setup();
    let z = &s.zones;
    let name = dir_against_file(&s, false);
    let u = s.forks.update(&name, API).unwrap();
    let got: Vec<(&str, &str, Option<&str>)> = u
        .conflicts
        .iter()
        .map(|c| (c.path.as_str(), c.kind.as_str(), c.parent_copy.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("d", "type", Some("d.parent")),
            ("d/x.txt", "delete/modify", None)
        ]
    );
    let f = format!("/forks/{name}");
    assert_eq!(read(z, &format!("{f}/d/x.txt")), "changed\n");
    assert_eq!(read(z, &format!("{f}/d/y.txt")), "new\n");
    assert_eq!(read(z, &format!("{f}/d.parent")), "now a file\n");
    // The fork made `d` a file: its file cannot hold the parent's `d/…` beside anything, so
    // nothing is written and the refusal names the path.
    let s = setup();
    let z = &s.zones;
    let name = dir_against_file(&s, true);
    let e = s.forks.update(&name, API).unwrap_err();
    assert_eq!(e.code().as_str(), "CONFLICT", "{e}");
    assert!(e.to_string().contains(&format!("/forks/{name}/d:")), "{e}");
    let f = format!("/forks/{name}");
    assert_eq!(read(z, &format!("{f}/d")), "now a file\n");
    assert_eq!(read(z, "/workspace/d/x.txt"), "changed\n");
    // A merge names both, and settling them into a file with a file beneath it is refused.
    let m = s
        .forks
        .merge_settling(&name, &[], &settle(&["d/x.txt"], &["d"]), API)
        .unwrap();
    assert!(!m.applied, "{m:?}");
    let kinds: Vec<(&str, &str)> = m
        .conflicts
        .iter()
        .map(|c| (c.path.as_str(), c.kind.as_str()))
        .collect();
    assert_eq!(kinds, [("d", "type")]);
    assert_eq!(read(z, "/workspace/d/x.txt"), "changed\n");
}

/// `changes` of the fork `name` as (path, status, old path, old mode, new mode, +, -).
type Listed = (
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    usize,
    usize,
);

fn listed(d: &DiffResult) -> Vec<Listed> {
    d.files
        .iter()
        .map(|f| {
            (
                f.path.clone(),
                f.status.clone(),
                f.old_path.clone(),
                f.old_mode.clone(),
                f.new_mode.clone(),
                f.additions,
                f.deletions,
            )
        })
        .collect()
}

fn row(path: &str, status: &str, old_path: Option<&str>, modes: Option<(&str, &str)>) -> Listed {
    (
        path.into(),
        status.into(),
        old_path.map(String::from),
        modes.map(|m| m.0.into()),
        modes.map(|m| m.1.into()),
        0,
        0,
    )
}

#[test]
fn changes_list_renames_as_renames_and_mode_changes_as_re_modes() {
    let s = setup();
    let z = &s.zones;
    let ten: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    z.write("/workspace/a.txt", "moved as it is\n", API)
        .unwrap();
    z.write("/workspace/m.rs", &ten, API).unwrap();
    z.write("/workspace/tool.sh", "echo hi\n", API).unwrap();
    z.write("/workspace/.env", "KEY=1\n", API).unwrap();
    z.write("/workspace/edited.txt", "one\n", API).unwrap();
    let name = unique("rn");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.rename(&format!("{f}/a.txt"), &format!("{f}/d/b.txt"), false, API)
        .unwrap();
    // Moved and one line of ten changed: a rename by similarity, with its line counts.
    z.delete(&format!("{f}/m.rs"), false, API).unwrap();
    z.write(
        &format!("{f}/src/m.rs"),
        &ten.replace("line 5", "LINE 5"),
        API,
    )
    .unwrap();
    z.write_with_mode(&format!("{f}/tool.sh"), b"echo hi\n", 0o755, API)
        .unwrap();
    z.write_with_mode(&format!("{f}/.env"), b"KEY=1\n", 0o600, API)
        .unwrap();
    z.write_with_mode(&format!("{f}/edited.txt"), b"two\n", 0o755, API)
        .unwrap();
    let d = s.forks.changes(&name, false).unwrap();
    let mut edited = row("edited.txt", "modified", None, Some(("0644", "0755")));
    (edited.5, edited.6) = (1, 1);
    let mut similar = row("src/m.rs", "renamed", Some("m.rs"), None);
    (similar.5, similar.6) = (1, 1);
    assert_eq!(
        listed(&d),
        [
            row(".env", "re-moded", None, Some(("0644", "0600"))),
            row("d/b.txt", "renamed", Some("a.txt"), None),
            edited,
            similar,
            row("tool.sh", "re-moded", None, Some(("0644", "0755"))),
        ]
    );
    assert!(d.patch.is_empty());
    let with_patch = s.forks.changes(&name, true).unwrap();
    // Lines counted from the patch or without one: the same.
    assert_eq!(listed(&with_patch), listed(&d));
    let p = with_patch.patch;
    for part in [
        "diff --git a/a.txt b/d/b.txt\nsimilarity index 100%\nrename from a.txt\nrename to d/b.txt\n",
        "diff --git a/tool.sh b/tool.sh\nold mode 100644\nnew mode 100755\n",
        "rename from m.rs\nrename to src/m.rs\n",
        "-line 5\n+LINE 5\n",
    ] {
        assert!(p.contains(part), "{part:?} not in:\n{p}");
    }
    // A change after a listing is in the next one (the present kept is built on).
    z.write(&format!("{f}/d/b.txt"), "moved and changed\n", API)
        .unwrap();
    let again = s.forks.changes(&name, false).unwrap();
    let b = again.files.iter().find(|f| f.path == "d/b.txt").unwrap();
    assert_eq!(
        (b.status.as_str(), b.additions, b.deletions),
        ("added", 1, 0)
    );
    assert!(again
        .files
        .iter()
        .any(|f| f.path == "a.txt" && f.status == "deleted"));
}

#[test]
fn many_files_moved_are_listed_as_exact_renames() {
    let s = setup();
    let z = &s.zones;
    // Past the bound of similarity (201 × 201 pairs): renames found by content alone.
    for i in 0..201 {
        z.write(
            &format!("/workspace/old/f{i}.txt"),
            &format!("file {i}\n"),
            API,
        )
        .unwrap();
    }
    z.write("/workspace/old/same.txt", "twin\n", API).unwrap();
    z.write("/workspace/old/twin.txt", "twin\n", API).unwrap();
    let name = unique("mv");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    let f = format!("/forks/{name}");
    z.rename(&format!("{f}/old"), &format!("{f}/new"), false, API)
        .unwrap();
    let d = s.forks.changes(&name, false).unwrap();
    assert_eq!(d.files.len(), 203, "{:?}", listed(&d));
    for file in &d.files {
        let was = file.path.replacen("new/", "old/", 1);
        assert_eq!(
            (file.status.as_str(), file.old_path.as_deref()),
            ("renamed", Some(was.as_str())),
            "{file:?}"
        );
    }
}

#[test]
fn changes_since_another_fork_or_a_checkpoint() {
    let s = setup();
    let z = &s.zones;
    z.write("/workspace/x.txt", "base\n", API).unwrap();
    let (a, b) = (unique("sa"), unique("sb"));
    for n in [&a, &b] {
        s.forks
            .create(n, &Source::Zone(ZoneId::Workspace), API)
            .unwrap();
    }
    z.write(&format!("/forks/{a}/x.txt"), "base\nfrom a\n", API)
        .unwrap();
    z.write(&format!("/forks/{b}/x.txt"), "b's\n", API).unwrap();
    z.write(&format!("/forks/{b}/y.txt"), "only b\n", API)
        .unwrap();
    let since_b = Source::parse_as("since", &b).unwrap();
    let d = s.forks.changes_since(&a, &since_b, false, API).unwrap();
    let mut x = row("x.txt", "modified", None, None);
    (x.5, x.6) = (2, 1);
    let mut y = row("y.txt", "deleted", None, None);
    y.6 = 1;
    assert_eq!(listed(&d), [x, y]);
    // `from` is the checkpoint of b's present it compared with.
    let from = s.forks.checkpoints.get(d.from).unwrap();
    assert_eq!(from.zone, format!("forks/{b}"));
    // Since a checkpoint: b's present as that checkpoint holds it, whatever b does after.
    z.write(&format!("/forks/{b}/y.txt"), "changed again\n", API)
        .unwrap();
    let by_id = Source::parse_as("since", &d.from.to_string()).unwrap();
    let again = s.forks.changes_since(&a, &by_id, false, API).unwrap();
    assert_eq!((listed(&again), again.from), (listed(&d), d.from));
    // Against itself: nothing.
    let me = Source::parse_as("since", &format!("forks/{a}")).unwrap();
    assert!(s
        .forks
        .changes_since(&a, &me, false, API)
        .unwrap()
        .files
        .is_empty());
    // The fork point is what `changes` compares with.
    let plain = s.forks.changes(&a, false).unwrap();
    let base = s
        .forks
        .list()
        .unwrap()
        .into_iter()
        .find(|f| f.name == a)
        .unwrap()
        .base;
    let at_base = Source::parse_as("since", &base.to_string()).unwrap();
    let same = s.forks.changes_since(&a, &at_base, false, API).unwrap();
    assert_eq!(listed(&same), listed(&plain));
}

#[test]
fn a_hostile_since_is_refused_and_named() {
    let s = setup();
    let name = unique("hs");
    s.forks
        .create(&name, &Source::Zone(ZoneId::Workspace), API)
        .unwrap();
    for bad in [
        "",
        "../x",
        "forks/../workspace",
        "nowhere",
        "x\u{1b}[2J",
        "a b",
    ] {
        let e = Source::parse_as("since", bad).unwrap_err();
        assert_eq!(e.code().as_str(), "INVALID_ARGUMENT", "{bad:?}: {e}");
        let text = e.to_string();
        assert!(text.contains("since"), "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");
    }
    for missing in ["999999999", "-1", "9223372036854775807"] {
        let since = Source::parse_as("since", missing).unwrap();
        let e = s
            .forks
            .changes_since(&name, &since, false, API)
            .unwrap_err();
        assert_eq!(e.code().as_str(), "NOT_FOUND", "{missing}: {e}");
    }
}

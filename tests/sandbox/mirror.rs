//! The mirror (`wardfs::sandbox::mirror`) against the real sandbox-agent: push, incremental
//! push, delete and rename, pull, conflicts, and a server killed in the middle of a push. What
//! reached the sandbox is checked with `std::fs` on the server's directory.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wardfs::sandbox::mirror::{self, Manifest, MirrorOptions};
use wardfs::sandbox::{ExecRequest, SandboxFs};
use wardfs::state::Db;

use crate::support::rng::noise;
use crate::support::sandbox_agent::AgentServer;

fn opts() -> MirrorOptions {
    MirrorOptions {
        sandbox: "dev".into(),
        now_ms: 1_700_000_000_000,
        progress: None,
        ..Default::default()
    }
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// Builds the tree of the first push: nested dirs, a 5 MiB file, a symlink, an executable and
/// an empty dir.
fn sample_tree(dir: &Path) {
    std::fs::create_dir_all(dir.join("src/deep/er")).unwrap();
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    std::fs::write(dir.join("src/lib.rs"), b"pub fn x() {}\n").unwrap();
    std::fs::write(dir.join("src/deep/er/notes.txt"), b"notes\n").unwrap();
    std::fs::write(dir.join("README"), b"read me\n").unwrap();
    std::fs::write(dir.join("big.bin"), noise(5 * 1024 * 1024, 7)).unwrap();
    std::fs::write(dir.join("run.sh"), b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", dir.join("link")).unwrap();
}

async fn sh(fs: &dyn SandboxFs, script: &str) {
    let out = fs
        .exec(ExecRequest::new("sh", ["-c", script]))
        .await
        .unwrap();
    assert!(out.success(), "{script}: {out:?}");
}

#[tokio::test]
async fn push_sends_the_tree_then_only_what_changed() {
    let server = AgentServer::start();
    let fs = server.provider();
    let local = tempfile::tempdir().unwrap();
    sample_tree(local.path());
    let remote_root = format!("{}/dst", server.root());
    let dst = server.work().join("dst");
    let mut manifest = Manifest::in_memory();

    let first = mirror::push(local.path(), &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert_eq!(first.files_sent, 6, "{first:?}");
    assert!(first.conflicts.is_empty());
    assert_eq!(
        std::fs::read(dst.join("src/lib.rs")).unwrap(),
        b"pub fn x() {}\n"
    );
    assert_eq!(
        std::fs::read(dst.join("src/deep/er/notes.txt")).unwrap(),
        b"notes\n"
    );
    assert_eq!(
        std::fs::read(dst.join("big.bin")).unwrap(),
        noise(5 * 1024 * 1024, 7)
    );
    assert_eq!(mode_of(&dst.join("run.sh")), 0o755);
    assert_eq!(
        std::fs::read_link(dst.join("link")).unwrap().to_str(),
        Some("src/lib.rs")
    );
    assert!(dst.join("empty").is_dir());

    // The fingerprints recorded are what the sandbox reports.
    let walked: HashMap<_, _> = fs
        .walk(&remote_root)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.path, e.meta))
        .collect();
    for (path, e) in manifest.entries() {
        if e.kind == "file" {
            assert_eq!(e.remote_size, Some(walked[path].size), "{path}");
            assert_eq!(e.remote_mtime_ns, walked[path].mtime_ns, "{path}");
        }
    }

    // Nothing changed: one walk, nothing sent.
    let before = fs.requests();
    let idle = mirror::push(local.path(), &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert_eq!((idle.files_sent, idle.deleted, idle.renamed), (0, 0, 0));
    assert_eq!(fs.requests() - before, 1, "an idle push is one walk");

    // One edit: exactly one file, in one request besides the walk.
    std::fs::write(local.path().join("src/deep/er/notes.txt"), b"more notes\n").unwrap();
    let before = fs.requests();
    let sent_before = fs.bytes_sent();
    let one = mirror::push(local.path(), &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert_eq!(one.files_sent, 1, "{one:?}");
    assert_eq!(one.bytes_sent, 11);
    assert_eq!(fs.requests() - before, 2, "walk + one batch");
    assert!(
        fs.bytes_sent() - sent_before < 8 * 1024,
        "only the one file travelled"
    );
    assert_eq!(
        std::fs::read(dst.join("src/deep/er/notes.txt")).unwrap(),
        b"more notes\n"
    );

    // Delete one file, rename another, remove the empty dir.
    std::fs::remove_file(local.path().join("README")).unwrap();
    std::fs::rename(
        local.path().join("big.bin"),
        local.path().join("src/big2.bin"),
    )
    .unwrap();
    std::fs::remove_dir(local.path().join("empty")).unwrap();
    let before = fs.bytes_sent();
    let moved = mirror::push(local.path(), &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert_eq!(moved.renamed, 1, "{moved:?}");
    assert_eq!(moved.deleted, 2, "{moved:?}");
    assert_eq!(moved.files_sent, 0, "{moved:?}");
    assert!(
        fs.bytes_sent() - before < 64 * 1024,
        "the rename sent no content"
    );
    assert!(!dst.join("README").exists());
    assert!(!dst.join("big.bin").exists());
    assert!(!dst.join("empty").exists());
    assert_eq!(
        std::fs::read(dst.join("src/big2.bin")).unwrap(),
        noise(5 * 1024 * 1024, 7)
    );
    assert!(manifest.get("big.bin").is_none() && manifest.get("src/big2.bin").is_some());
}

#[tokio::test]
async fn pull_takes_sandbox_changes_and_keeps_both_sides_of_a_conflict() {
    let server = AgentServer::start();
    let fs = server.provider();
    let local = tempfile::tempdir().unwrap();
    let l = local.path();
    std::fs::create_dir_all(l.join("d")).unwrap();
    std::fs::write(l.join("d/f"), b"one\n").unwrap();
    std::fs::write(l.join("g"), b"base\n").unwrap();
    std::fs::write(l.join("h"), b"doomed\n").unwrap();
    let remote_root = format!("{}/dst", server.root());
    let dst = server.work().join("dst");
    let db = Arc::new(Db::open_in_memory().unwrap());
    let mut manifest = Manifest::load(db.clone(), "workspace", "dev", &remote_root, 1).unwrap();
    mirror::push(l, &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();

    // The sandbox changes f (its exec), changes g, creates n, deletes h; we change g too.
    sh(
        &fs,
        &format!("cd '{remote_root}' && echo x >> d/f && echo theirs > g && echo new > n && rm h"),
    )
    .await;
    std::fs::write(l.join("g"), b"ours\n").unwrap();

    let pulled = mirror::pull(l, &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert_eq!(std::fs::read(l.join("d/f")).unwrap(), b"one\nx\n");
    assert_eq!(std::fs::read(l.join("n")).unwrap(), b"new\n");
    assert!(
        !l.join("h").exists(),
        "deleted in the sandbox, unchanged here"
    );
    assert_eq!(pulled.files_received, 2, "{pulled:?}");
    assert_eq!(pulled.deleted, 1, "{pulled:?}");
    assert_eq!(pulled.conflicts.len(), 1, "{pulled:?}");
    assert_eq!(pulled.conflicts[0].path, "g");
    assert_eq!(
        std::fs::read(l.join("g")).unwrap(),
        b"ours\n",
        "local copy kept"
    );
    assert_eq!(
        std::fs::read(l.join("g.sandbox-dev")).unwrap(),
        b"theirs\n",
        "remote copy saved beside it"
    );

    // A second pull downloads nothing.
    let before = fs.requests();
    let again = mirror::pull(l, &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert_eq!(again.files_received, 0, "{again:?}");
    assert_eq!(
        fs.requests() - before,
        2,
        "one walk, and the unresolved conflict on g confirmed again by hash"
    );

    // Push reports the conflict and leaves the sandbox's g alone.
    let pushed = mirror::push(l, &fs, &remote_root, &mut manifest, &opts())
        .await
        .unwrap();
    assert!(pushed.conflicts.iter().any(|c| c.path == "g"), "{pushed:?}");
    assert_eq!(std::fs::read(dst.join("g")).unwrap(), b"theirs\n");

    // The manifest in the database is the one in memory.
    let reloaded = Manifest::load(db, "workspace", "dev", &remote_root, 2).unwrap();
    assert_eq!(reloaded.entries(), manifest.entries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_cut_short_leaves_only_confirmed_entries_and_the_next_completes() {
    let mut server = AgentServer::start();
    let local = tempfile::tempdir().unwrap();
    let files = 40;
    for i in 0..files {
        std::fs::create_dir_all(local.path().join(format!("d{}", i % 4))).unwrap();
        std::fs::write(
            local.path().join(format!("d{}/f{i:03}", i % 4)),
            noise(300 * 1024, i as u64 + 1),
        )
        .unwrap();
    }
    let remote_root = format!("{}/dst", server.root());
    let dst = server.work().join("dst");
    let db = Arc::new(Db::open_in_memory().unwrap());
    let manifest = Manifest::load(db.clone(), "workspace", "dev", &remote_root, 1).unwrap();

    let fs = server.provider();
    let root = local.path().to_path_buf();
    let rr = remote_root.clone();
    let task = tokio::spawn(async move {
        let mut manifest = manifest;
        let r = mirror::push(&root, &fs, &rr, &mut manifest, &opts()).await;
        (r, manifest)
    });
    // Kill the server once the first batches have landed.
    let count = |dir: &Path| walkdir_files(dir);
    let mut waited = 0;
    while count(&dst) < 8 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        waited += 1;
        assert!(waited < 4000, "the push never started");
    }
    server.kill();
    let (result, manifest) = task.await.unwrap();
    let err = result.expect_err("the push cannot finish without the server");
    assert!(
        matches!(err, mirror::MirrorError::Remote(ref e) if e.is_unavailable()),
        "{err}"
    );
    let in_flight = manifest
        .entries()
        .values()
        .filter(|e| e.kind == "file" && e.hash.is_none())
        .count();
    let landed = count(&dst);
    assert!(landed < files, "the kill came too late to test anything");

    // Every manifest entry is on the remote, with the content it records.
    let reloaded = Manifest::load(db.clone(), "workspace", "dev", &remote_root, 2).unwrap();
    assert_eq!(reloaded.entries(), manifest.entries());
    let recorded: Vec<_> = manifest
        .entries()
        .values()
        .filter(|e| e.kind == "file" && e.hash.is_some())
        .cloned()
        .collect();
    assert!(!recorded.is_empty(), "some batches were confirmed");
    assert!(in_flight <= files - recorded.len());
    for e in &recorded {
        let data = std::fs::read(dst.join(&e.path)).unwrap();
        assert_eq!(
            Some(blake3::hash(&data).to_hex().to_string()),
            e.hash,
            "{}",
            e.path
        );
    }

    // The sandbox comes back (a new server over a copy of what the old one had) and the next
    // push completes, sending only what was missing.
    let server2 = AgentServer::start();
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(&dst)
        .arg(server2.work())
        .status()
        .unwrap();
    assert!(status.success());
    let fs2 = server2.provider();
    let remote_root2 = format!("{}/dst", server2.root());
    let mut manifest = manifest;
    let done = mirror::push(local.path(), &fs2, &remote_root2, &mut manifest, &opts())
        .await
        .unwrap();
    assert!(done.conflicts.is_empty(), "{done:?}");
    assert_eq!(done.files_sent as usize, files - recorded.len(), "{done:?}");
    assert_eq!(walkdir_files(&server2.work().join("dst")), files);
    for i in 0..files {
        let p = format!("dst/d{}/f{i:03}", i % 4);
        assert_eq!(
            std::fs::read(server2.work().join(&p)).unwrap(),
            noise(300 * 1024, i as u64 + 1),
            "{p}"
        );
    }
}

/// Counts the regular files below `dir` whose names are not provider temp files.
fn walkdir_files(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        let ty = e.file_type().unwrap();
        if ty.is_dir() {
            n += walkdir_files(&e.path());
        } else if ty.is_file() && !e.file_name().to_string_lossy().starts_with('.') {
            n += 1;
        }
    }
    n
}

/// A zone of a core opened on a temp dir, for pulls that write through the core.
struct Core {
    _dir: tempfile::TempDir,
    zones: Arc<wardfs::core::Zones>,
    db: Arc<Db>,
    workspace: std::path::PathBuf,
}

fn core() -> Core {
    let dir = tempfile::tempdir().unwrap();
    let settings =
        wardfs::config::Settings::from_str("[zones]\nroot = \"z\"\n", "test", dir.path(), None)
            .unwrap();
    let db = Arc::new(Db::open_in_memory().unwrap());
    let zones =
        Arc::new(wardfs::core::Zones::open(&settings, db.clone(), Arc::new(|| 1_000)).unwrap());
    let workspace = dir.path().join("z/workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    Core {
        _dir: dir,
        zones,
        db,
        workspace,
    }
}

fn zone_opts(core: &Core) -> MirrorOptions {
    MirrorOptions {
        zone: Some(mirror::ZoneRef {
            zones: core.zones.clone(),
            id: wardfs::core::ZoneId::Workspace,
        }),
        ..opts()
    }
}

/// A hostile sandbox: a setuid, world-writable file, links that escape the mirror root (one
/// directly, one through another link of the tree), an absolute link, and a file over the size
/// limit. The pull masks the mode, skips and reports each bad entry, and still brings the rest.
#[tokio::test]
async fn a_hostile_sandbox_is_masked_and_its_bad_entries_skipped() {
    let server = AgentServer::start();
    let fs = server.provider();
    let src = server.work().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("ok.txt"), b"fine\n").unwrap();
    std::fs::write(src.join("suid"), b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(src.join("suid"), std::fs::Permissions::from_mode(0o6777)).unwrap();
    std::fs::write(src.join("big.bin"), noise(4096, 3)).unwrap();
    std::os::unix::fs::symlink("../../../../etc/passwd", src.join("esc")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", src.join("abs")).unwrap();
    std::os::unix::fs::symlink("..", src.join("d/p")).unwrap();
    std::os::unix::fs::symlink("d/p/d/p/../../x", src.join("sly")).unwrap();
    std::os::unix::fs::symlink("ok.txt", src.join("good")).unwrap();

    let local = tempfile::tempdir().unwrap();
    let mut manifest = Manifest::in_memory();
    let o = MirrorOptions {
        max_file_bytes: Some(1024),
        ..opts()
    };
    let s = mirror::pull(
        local.path(),
        &fs,
        &format!("{}/src", server.root()),
        &mut manifest,
        &o,
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read(local.path().join("ok.txt")).unwrap(),
        b"fine\n"
    );
    assert_eq!(
        std::fs::read_link(local.path().join("good")).unwrap(),
        Path::new("ok.txt")
    );
    let mode = mode_of(&local.path().join("suid"));
    assert_eq!(mode & 0o7000, 0, "setuid/setgid/sticky kept: {mode:o}");
    assert_eq!(mode & 0o002, 0, "world-writable kept: {mode:o}");
    let mut skipped: Vec<&str> = s.skipped.iter().map(|k| k.path.as_str()).collect();
    skipped.sort();
    // `d/p -> ..` stays inside (it names the root); the links through it that climb out do not.
    assert_eq!(skipped, ["abs", "big.bin", "esc", "sly"], "{s:?}");
    for name in ["abs", "big.bin", "esc", "sly"] {
        assert!(
            std::fs::symlink_metadata(local.path().join(name)).is_err(),
            "{name} was written"
        );
    }
    assert!(s
        .skipped
        .iter()
        .any(|k| k.reason.contains("sandbox_file_bytes")));
}

/// A sandbox offers a `.git` in every spelling git, NTFS or HFS+ would read as `.git` (config with
/// an fsmonitor command, an executable hook, a `.git` file pointing elsewhere): none of it lands,
/// each is named, the rest of the tree comes, and git run there finds no repository to obey.
#[tokio::test]
async fn a_mirror_pull_never_writes_a_git_directory_in_any_spelling() {
    let server = AgentServer::start();
    let fs = server.provider();
    let src = server.work().join("src");
    let marker = tempfile::tempdir().unwrap();
    let pwned = marker.path().join("pwned");
    let config = format!(
        "[core]\n\tfsmonitor = \"touch {}\"\n\trepositoryformatversion = 0\n",
        pwned.display()
    );
    let dirs = [
        ".git",
        ".GIT",
        ".git.",
        "git~1",
        ".git::$INDEX_ALLOCATION",
        ".g\u{200c}it",
        "sub/.Git ",
    ];
    for d in dirs {
        std::fs::create_dir_all(src.join(d).join("hooks")).unwrap();
        std::fs::write(src.join(d).join("config"), &config).unwrap();
        std::fs::write(src.join(d).join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let hook = src.join(d).join("hooks/pre-commit");
        std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", pwned.display())).unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::create_dir_all(src.join("other")).unwrap();
    std::fs::write(src.join("other/.git"), "gitdir: /tmp/elsewhere\n").unwrap();
    std::fs::write(src.join("ok.txt"), b"fine\n").unwrap();

    let local = tempfile::tempdir().unwrap();
    let mut manifest = Manifest::in_memory();
    let s = mirror::pull(
        local.path(),
        &fs,
        &format!("{}/src", server.root()),
        &mut manifest,
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read(local.path().join("ok.txt")).unwrap(),
        b"fine\n"
    );
    for d in dirs {
        assert!(
            std::fs::symlink_metadata(local.path().join(d)).is_err(),
            "{d:?} was written"
        );
        assert!(
            s.skipped
                .iter()
                .any(|k| k.path.starts_with(d) && k.reason.contains(".git")),
            "{d:?} not named: {s:?}"
        );
    }
    assert!(std::fs::symlink_metadata(local.path().join("other/.git")).is_err());
    // git run where the pull landed finds no repository of the sandbox's, so runs nothing.
    let out = crate::support::git_servers::try_git(local.path(), &["status"]);
    assert!(!out.status.success(), "git found a repository");
    let _ = crate::support::git_servers::try_git(&local.path().join("sub"), &["status"]);
    assert!(!pwned.exists(), "the sandbox's command ran on the host");
}

/// An agent writes the file after the pull compared it and before the pull replaces it (the
/// progress callback runs at that moment): the agent's write is kept, the sandbox's copy is
/// saved beside it, and a conflict is reported, never a silent loss.
#[tokio::test]
async fn a_write_during_a_pull_is_kept_as_a_conflict() {
    let server = AgentServer::start();
    let fs = server.provider();
    let src = server.work().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), b"from the sandbox\n").unwrap();
    let core = core();
    let target = core.workspace.join("a.txt");
    let hook_target = target.clone();
    let o = MirrorOptions {
        progress: Some(mirror::ProgressFn(Arc::new(move |p| {
            if p.phase == "downloaded" {
                std::fs::write(&hook_target, b"the agent's edit\n").unwrap();
            }
        }))),
        ..zone_opts(&core)
    };
    let mut manifest = Manifest::in_memory();
    let s = mirror::pull(
        &core.workspace,
        &fs,
        &format!("{}/src", server.root()),
        &mut manifest,
        &o,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&target).unwrap(), b"the agent's edit\n");
    assert_eq!(
        std::fs::read(core.workspace.join("a.txt.sandbox-dev")).unwrap(),
        b"from the sandbox\n"
    );
    assert_eq!(s.conflicts.len(), 1, "{s:?}");
    assert_eq!(s.conflicts[0].path, "a.txt");
}

/// A file deleted in the sandbox is deleted here only if it is still what the pull checked: a
/// write acknowledged between the check and the delete (the hook runs there) keeps the file.
#[tokio::test]
async fn a_write_acknowledged_before_a_pull_deletes_the_file_is_kept() {
    let server = AgentServer::start();
    let fs = server.provider();
    let src = server.work().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), b"from the sandbox\n").unwrap();
    let core = core();
    let mut manifest = Manifest::in_memory();
    let remote = format!("{}/src", server.root());
    mirror::pull(
        &core.workspace,
        &fs,
        &remote,
        &mut manifest,
        &zone_opts(&core),
    )
    .await
    .unwrap();
    let target = core.workspace.join("a.txt");
    assert!(target.exists());
    std::fs::remove_file(src.join("a.txt")).unwrap();
    let hook_target = target.clone();
    let o = MirrorOptions {
        progress: Some(mirror::ProgressFn(Arc::new(move |p| {
            if p.phase == "delete" {
                std::fs::write(&hook_target, b"the agent's edit\n").unwrap();
            }
        }))),
        ..zone_opts(&core)
    };
    let s = mirror::pull(&core.workspace, &fs, &remote, &mut manifest, &o)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"the agent's edit\n",
        "the write acknowledged during the pull was deleted: {s:?}"
    );
    assert_eq!((s.deleted, s.conflicts.len()), (0, 1), "{s:?}");
    assert_eq!(s.conflicts[0].path, "a.txt");
}

/// A pull that fails half-way (the sandbox stops answering after the first file) leaves what it
/// already wrote in the journal, through the core, not only on success.
#[tokio::test]
async fn a_pull_cut_short_journals_what_it_wrote() {
    let server = Arc::new(AgentServer::start());
    let fs = server.provider();
    let src = server.work().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a.txt"), b"first\n").unwrap();
    std::fs::write(src.join("b.txt"), b"second\n").unwrap();
    let core = core();
    let stopper = server.clone();
    let o = MirrorOptions {
        progress: Some(mirror::ProgressFn(Arc::new(move |p| {
            // After the first file is in: the sandbox freezes.
            if p.phase == "receive" && p.files_done == 1 {
                stopper.pause();
            }
        }))),
        ..zone_opts(&core)
    };
    let mut manifest = Manifest::in_memory();
    let r = mirror::pull(
        &core.workspace,
        &fs,
        &format!("{}/src", server.root()),
        &mut manifest,
        &o,
    )
    .await;
    server.resume();
    assert!(r.is_err(), "{r:?}");
    assert_eq!(
        std::fs::read(core.workspace.join("a.txt")).unwrap(),
        b"first\n"
    );
    let rows = core
        .db
        .journal_query(&wardfs::state::JournalFilter {
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    assert!(
        rows.iter()
            .any(|r| r.path == "a.txt" && r.op == "write" && r.via == "mirror"),
        "{rows:?}"
    );
}

/// A file with a second link outside the zone (made beside wardfs: no agent can make one) is a
/// file of the zone like any other to a push, as to `read` (the hard-link rule guards changes
/// only, docs/reliability.md): it is sent, and the outside file does not change.
#[tokio::test]
async fn a_push_sends_a_hard_linked_file_as_it_is() {
    let server = AgentServer::start();
    let fs = server.provider();
    let core = core();
    let outside = core.workspace.parent().unwrap().join("outside-secret.txt");
    std::fs::write(&outside, b"linked from outside\n").unwrap();
    std::fs::hard_link(&outside, core.workspace.join("h.txt")).unwrap();
    std::fs::write(core.workspace.join("plain.txt"), b"plain\n").unwrap();
    let mut manifest = Manifest::in_memory();
    let s = mirror::push(
        &core.workspace,
        &fs,
        &format!("{}/dst", server.root()),
        &mut manifest,
        &zone_opts(&core),
    )
    .await
    .unwrap();
    let dst = server.work().join("dst");
    assert_eq!(std::fs::read(dst.join("plain.txt")).unwrap(), b"plain\n");
    assert_eq!(
        std::fs::read(dst.join("h.txt")).unwrap(),
        b"linked from outside\n"
    );
    assert!(s.skipped.is_empty(), "{s:?}");
    assert_eq!(std::fs::read(&outside).unwrap(), b"linked from outside\n");
}

/// Names that are not UTF-8 in the zone (made beside wardfs or through the mount) and a symlink
/// whose target is not UTF-8 cannot be sent: a push names each in `skipped`, escaped as git
/// quotes it, and counts them, and sends the rest. Before, it said "1 file sent" and nothing
/// else.
#[tokio::test]
async fn a_push_names_what_it_cannot_send_never_drops_it_silently() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt as _;
    let server = AgentServer::start();
    let fs = server.provider();
    let local = tempfile::tempdir().unwrap();
    let l = local.path();
    std::fs::write(l.join("ok.txt"), b"ok\n").unwrap();
    std::fs::write(l.join(OsStr::from_bytes(b"bad\xff.txt")), b"bad\n").unwrap();
    std::fs::create_dir_all(l.join(OsStr::from_bytes(b"d/sub\xfe"))).unwrap();
    std::fs::write(l.join(OsStr::from_bytes(b"d/sub\xfe/x.txt")), b"x\n").unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"to\xfd"), l.join("link")).unwrap();
    let mut manifest = Manifest::in_memory();
    let s = mirror::push(
        l,
        &fs,
        &format!("{}/dst", server.root()),
        &mut manifest,
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(s.files_sent, 1, "{s:?}");
    let mut named: Vec<&str> = s.skipped.iter().map(|k| k.path.as_str()).collect();
    named.sort();
    assert_eq!(
        named,
        ["\"bad\\377.txt\"", "\"d/sub\\376\"", "link"],
        "{s:?}"
    );
    assert_eq!(s.skipped_total, 3, "{s:?}");
    assert!(
        s.skipped.iter().all(|k| k.reason.contains("not UTF-8")),
        "{s:?}"
    );
    let dst = server.work().join("dst");
    assert_eq!(std::fs::read(dst.join("ok.txt")).unwrap(), b"ok\n");
    assert_eq!(
        std::fs::read_dir(&dst).unwrap().count(),
        2,
        "ok.txt and d only"
    );
}

//! Forks through the mount (issue 30): `MOUNT/forks/NAME` is each fork that exists now, made and
//! removed through the API while mounted; a fork's files start as hard links of its parent's, and
//! every change through the mount on one side (append, truncate, chmod, create, remove, rename,
//! mkdir, git) leaves the other side's files as they were, also when both names were read
//! before the change, in both I/O modes; two processes writing two forks at once each get their
//! own.

use std::fs;
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::support::tools::which;
use crate::support::Daemon;

/// Both zones in the cached I/O mode (the default, spelled out): no OPEN, implicit writers.
const CACHED: &str = "[zones.cache]\nio = \"cached\"\n[zones.workspace]\nio = \"cached\"\n";
/// Both zones in the passthrough I/O mode: every open is asked, and the kernel reads and
/// writes the backing file the daemon hands it.
const PASSTHROUGH: &str =
    "[zones.cache]\nio = \"passthrough\"\n[zones.workspace]\nio = \"passthrough\"\n";

/// A mounted daemon in the I/O mode `io` whose workspace holds what `fill` writes there before it
/// starts: a fork made of it then starts from a workspace at rest, every file a hard link of
/// the workspace's.
fn mounted_with(io: &str, fill: impl FnOnce(&Path)) -> Daemon {
    let mut m = Daemon::options()
        .prefix("wardfs-fuse")
        .mount()
        .extra(io)
        .prepare();
    fs::create_dir_all(m.workspace()).unwrap();
    fill(&m.workspace());
    m.respawn();
    m
}

/// Makes the fork `name` of the workspace through the API.
fn fork(m: &Daemon, name: &str) {
    let made = m.ok("/v1/forks", json!({ "name": name }));
    assert_eq!(made["fork"]["name"], name, "{made}");
}

/// Removes the fork `name` through the API.
fn remove_fork(m: &Daemon, name: &str) {
    let (status, body) = m.curl("DELETE", &format!("/v1/forks/{name}"), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
}

/// The mounted fork `name`.
fn forked(m: &Daemon, name: &str) -> PathBuf {
    m.mnt.join("forks").join(name)
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut n: Vec<String> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    n.sort();
    n
}

fn read(p: &Path) -> String {
    fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn mode(p: &Path) -> u32 {
    fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// Runs `script` with `sh -c` in `dir`; it must succeed.
fn sh(dir: &Path, script: &str) {
    let out = Command::new("sh")
        .args(["-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs git in `dir` with a config of its own only; returns stdout.
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
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The error kind of a failed call, or a failure naming what unexpectedly succeeded.
fn refused<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) -> i32 {
    match r {
        Ok(v) => panic!("{what} succeeded: {v:?}"),
        Err(e) => e.raw_os_error().unwrap_or(0),
    }
}

#[test]
fn forks_come_and_go_in_the_mount_as_the_api_makes_and_removes_them() {
    let m = mounted_with("", |ws| {
        fs::write(ws.join("x.txt"), "one\n").unwrap();
        fs::create_dir(ws.join("dir")).unwrap();
        fs::write(ws.join("dir/y.txt"), "why\n").unwrap();
    });
    let forks = m.mnt.join("forks");
    assert_eq!(names(&m.mnt), ["cache", "forks", "workspace"]);
    assert_eq!(names(&forks), Vec::<String>::new());
    // Asked for before it exists: the kernel must not remember that it does not.
    let a = forked(&m, "a");
    assert_eq!(
        fs::metadata(&a).unwrap_err().kind(),
        ErrorKind::NotFound,
        "{}",
        a.display()
    );
    assert_eq!(names(&forks), Vec::<String>::new(), "listed before");

    fork(&m, "a");
    assert_eq!(names(&forks), ["a"]);
    assert!(fs::metadata(&a).unwrap().is_dir());
    assert_eq!(names(&a), ["dir", "x.txt"]);
    assert_eq!(read(&a.join("x.txt")), "one\n");
    assert_eq!(read(&a.join("dir/y.txt")), "why\n");
    // The fork's files are hard links of the workspace's on disk, separate inodes here (with
    // the same low 32 bits, which git's index keeps).
    // (A third link is the spare the daemon fills after the fork: `forks.spare`.)
    let on_disk = fs::metadata(m.workspace().join("x.txt")).unwrap();
    assert!(
        (2..=3).contains(&on_disk.nlink()),
        "the fork's x.txt is a hard link: {} links",
        on_disk.nlink()
    );
    let (wsx, ax) = (
        fs::metadata(m.ws().join("x.txt")).unwrap(),
        fs::metadata(a.join("x.txt")).unwrap(),
    );
    assert_eq!(wsx.ino(), on_disk.ino());
    assert_ne!(
        wsx.ino(),
        ax.ino(),
        "one inode for the fork's and the parent's file"
    );
    assert_eq!(wsx.ino() as u32, ax.ino() as u32);

    // The forks' directory itself is not writable through the mount.
    let eperm = libc::EPERM;
    assert_eq!(refused("mkdir", fs::create_dir(forks.join("b"))), eperm);
    assert_eq!(refused("create", fs::write(forks.join("f"), "x")), eperm);
    assert_eq!(refused("rmdir", fs::remove_dir(&a)), eperm);
    assert_eq!(refused("rename", fs::rename(&a, forks.join("c"))), eperm);
    assert_eq!(
        refused("symlink", std::os::unix::fs::symlink("a", forks.join("l"))),
        eperm
    );
    assert!(m.log_text().contains("holds the forks and nothing else"));
    // Moving a file between a fork and its parent is a copy (as between two disks).
    assert_eq!(
        refused(
            "rename across zones",
            fs::rename(a.join("x.txt"), m.ws().join("moved.txt"))
        ),
        libc::EXDEV
    );

    // A process inside the fork while it is removed: its fork is gone for it too.
    let cwd = Command::new("sh")
        .args(["-c", "read _; cat x.txt"])
        .current_dir(&a)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    remove_fork(&m, "a");
    assert_eq!(names(&forks), Vec::<String>::new());
    assert_eq!(fs::metadata(&a).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(
        fs::metadata(a.join("x.txt")).unwrap_err().kind(),
        ErrorKind::NotFound
    );
    let mut cwd = cwd;
    cwd.stdin.take().unwrap().write_all(b"\n").unwrap();
    let out = cwd.wait_with_output().unwrap();
    assert!(!out.status.success(), "read a removed fork's file: {out:?}");

    // Made again under its name, from a workspace that changed: the new fork's files, not
    // what the kernel held of the old one.
    fs::write(m.ws().join("x.txt"), "two\n").unwrap();
    fork(&m, "a");
    fork(&m, "b");
    assert_eq!(names(&forks), ["a", "b"]);
    assert_eq!(read(&a.join("x.txt")), "two\n");
    assert_eq!(read(&forked(&m, "b").join("x.txt")), "two\n");
    assert_eq!(read(&a.join("dir/y.txt")), "why\n");
    remove_fork(&m, "b");
    assert_eq!(names(&forks), ["a"]);
    // Served again after a restart (the forks are recorded), once the API answers.
    let mut m = m;
    m.restart();
    assert_eq!(m.get("/v1/forks")["forks"][0]["name"], "a");
    assert_eq!(names(&m.mnt.join("forks")), ["a"]);
    assert_eq!(read(&forked(&m, "a").join("x.txt")), "two\n");
}

/// The files of the isolation check: (name, contents, mode).
const FILES: [(&str, &str, u32); 8] = [
    ("append.txt", "a\n", 0o644),
    ("trunc.txt", "some text\n", 0o644),
    ("mode.sh", "echo hi\n", 0o644),
    ("gone.txt", "g\n", 0o644),
    ("moved.txt", "m\n", 0o644),
    ("sub/deep.txt", "d\n", 0o600),
    ("rewrite.txt", "old\n", 0o644),
    ("setlen.txt", "0123456789\n", 0o644),
];

/// Writes [`FILES`] under `dir`.
fn write_files(dir: &Path) {
    fs::create_dir_all(dir.join("sub")).unwrap();
    for (name, text, bits) in FILES {
        fs::write(dir.join(name), text).unwrap();
        fs::set_permissions(dir.join(name), fs::Permissions::from_mode(bits)).unwrap();
    }
}

/// `dir` holds [`FILES`] as written, and nothing else.
fn assert_untouched(dir: &Path, side: &str) {
    for (name, text, bits) in FILES {
        let p = dir.join(name);
        assert_eq!(read(&p), text, "{side}: {name}");
        assert_eq!(mode(&p), bits, "{side}: {name}'s mode");
    }
    assert_eq!(
        names(dir),
        [
            "append.txt",
            "gone.txt",
            "mode.sh",
            "moved.txt",
            "rewrite.txt",
            "setlen.txt",
            "sub",
            "trunc.txt"
        ],
        "{side}"
    );
    assert_eq!(names(&dir.join("sub")), ["deep.txt"], "{side}");
}

/// Changes every file of [`FILES`] under `dir` the ways tools do, after reading each.
fn change_everything(dir: &Path) {
    for (name, _, _) in FILES {
        read(&dir.join(name));
    }
    sh(dir, "echo more >> append.txt");
    sh(dir, "truncate -s 0 trunc.txt");
    sh(dir, "chmod 755 mode.sh");
    sh(
        dir,
        "echo new > new.txt && mkdir newdir && echo n > newdir/n.txt",
    );
    sh(dir, "rm gone.txt && mv moved.txt renamed.txt");
    sh(dir, "chmod 640 sub/deep.txt && echo deeper >> sub/deep.txt");
    // In place, through one descriptor (an editor writing over the file).
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(dir.join("rewrite.txt"))
        .unwrap();
    f.write_all(b"NEW\n").unwrap();
    drop(f);
    fs::OpenOptions::new()
        .write(true)
        .open(dir.join("setlen.txt"))
        .unwrap()
        .set_len(3)
        .unwrap();
}

/// `dir` shows what [`change_everything`] did.
fn assert_changed(dir: &Path, side: &str) {
    assert_eq!(read(&dir.join("append.txt")), "a\nmore\n", "{side}");
    assert_eq!(read(&dir.join("trunc.txt")), "", "{side}");
    assert_eq!(mode(&dir.join("mode.sh")), 0o755, "{side}");
    assert_eq!(read(&dir.join("new.txt")), "new\n", "{side}");
    assert_eq!(read(&dir.join("newdir/n.txt")), "n\n", "{side}");
    assert!(!dir.join("gone.txt").exists(), "{side}");
    assert!(!dir.join("moved.txt").exists(), "{side}");
    assert_eq!(read(&dir.join("renamed.txt")), "m\n", "{side}");
    assert_eq!(mode(&dir.join("sub/deep.txt")), 0o640, "{side}");
    assert_eq!(read(&dir.join("sub/deep.txt")), "d\ndeeper\n", "{side}");
    assert_eq!(read(&dir.join("rewrite.txt")), "NEW\n", "{side}");
    assert_eq!(read(&dir.join("setlen.txt")), "012", "{side}");
}

/// Writes through one side after both read every file: the other side, through the mount
/// and on disk, keeps every file as it was.
fn writes_stay_on_their_side(io: &str) {
    let m = mounted_with(io, write_files);
    let backing_fork = |name: &str| -> PathBuf {
        let dirs = names(&m.dir.path().join("state/forks"));
        let dir = dirs.iter().find(|d| d.starts_with(&format!("{name}-")));
        m.dir
            .path()
            .join("state/forks")
            .join(dir.expect("the fork's directory"))
    };
    fork(&m, "a");
    let a = forked(&m, "a");
    // Both names of every file known to the kernel (and read) before any write.
    assert_untouched(&a, "fork before");
    assert_untouched(&m.ws(), "workspace before");
    change_everything(&a);
    assert_changed(&a, "fork");
    assert_untouched(&m.ws(), "workspace after the fork's writes");
    assert_untouched(&m.workspace(), "workspace on disk");
    assert_changed(&backing_fork("a"), "fork on disk");

    // And the other way: a second fork, written through its parent.
    fork(&m, "b");
    let b = forked(&m, "b");
    assert_untouched(&b, "fork b before");
    change_everything(&m.ws());
    assert_changed(&m.ws(), "workspace");
    assert_untouched(&b, "fork b after the workspace's writes");
    assert_untouched(&backing_fork("b"), "fork b on disk");
    assert_changed(&a, "fork a after the workspace's writes");
}

#[test]
fn writes_through_a_fork_or_its_parent_stay_on_their_side_in_the_cached_io_mode() {
    writes_stay_on_their_side(CACHED);
}

#[test]
fn writes_through_a_fork_or_its_parent_stay_on_their_side_in_the_passthrough_io_mode() {
    writes_stay_on_their_side(PASSTHROUGH);
}

#[test]
fn git_in_a_fork_of_a_working_tree_sees_only_the_forks_changes() {
    assert!(which("git"), "git is not installed; `apt-get install git`");
    let m = Daemon::mounted("");
    let ws = m.ws().join("repo");
    fs::create_dir_all(ws.join("src")).unwrap();
    git(&ws, &["init", "-q"]);
    fs::write(ws.join("README.md"), "# hi\n").unwrap();
    fs::write(ws.join("src/lib.rs"), "pub fn f() {}\n").unwrap();
    git(&ws, &["add", "."]);
    git(&ws, &["commit", "-qm", "first"]);
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    fork(&m, "g");
    let g = forked(&m, "g").join("repo");
    assert_eq!(git(&g, &["status", "--porcelain"]), "");
    fs::write(g.join("src/lib.rs"), "pub fn f() -> u8 { 1 }\n").unwrap();
    fs::write(g.join("new.rs"), "// new\n").unwrap();
    assert_eq!(
        git(&g, &["status", "--porcelain"]),
        " M src/lib.rs\n?? new.rs\n"
    );
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    git(&g, &["add", "."]);
    git(&g, &["commit", "-qm", "in the fork"]);
    assert_eq!(git(&g, &["log", "--format=%s"]), "in the fork\nfirst\n");
    assert_eq!(git(&g, &["status", "--porcelain"]), "");
    // The parent: its branch, index and files as they were.
    assert_eq!(git(&ws, &["log", "--format=%s"]), "first\n");
    assert_eq!(git(&ws, &["status", "--porcelain"]), "");
    assert_eq!(read(&ws.join("src/lib.rs")), "pub fn f() {}\n");
    // A change in the parent is not the fork's.
    fs::write(ws.join("README.md"), "# changed\n").unwrap();
    assert_eq!(git(&ws, &["status", "--porcelain"]), " M README.md\n");
    assert_eq!(git(&g, &["status", "--porcelain"]), "");
    git(&g, &["fsck", "--no-progress"]);
}

#[test]
fn two_processes_writing_two_forks_at_once_each_change_their_own() {
    let m = mounted_with("", |ws| fs::write(ws.join("shared.txt"), "base\n").unwrap());
    fork(&m, "p");
    fork(&m, "q");
    let writer = |name: &str| {
        let dir = forked(&m, name);
        // Appends to the file both forks share with the workspace, and files of its own.
        let script = format!(
            "for i in $(seq 1 150); do echo {name}$i >> shared.txt; echo $i > f$i.txt; done; \
             mkdir -p d/e && for i in $(seq 1 50); do echo $i > d/e/g$i; done"
        );
        Command::new("sh")
            .args(["-c", &script])
            .current_dir(dir)
            .spawn()
            .unwrap()
    };
    let (mut p, mut q) = (writer("p"), writer("q"));
    assert!(p.wait().unwrap().success());
    assert!(q.wait().unwrap().success());
    for (name, other) in [("p", "q"), ("q", "p")] {
        let dir = forked(&m, name);
        let want: String = std::iter::once("base\n".to_string())
            .chain((1..=150).map(|i| format!("{name}{i}\n")))
            .collect();
        assert_eq!(read(&dir.join("shared.txt")), want, "fork {name}");
        assert!(!read(&dir.join("shared.txt")).contains(other));
        for i in 1..=150 {
            assert_eq!(read(&dir.join(format!("f{i}.txt"))), format!("{i}\n"));
        }
        assert_eq!(names(&dir.join("d/e")).len(), 50, "fork {name}");
    }
    assert_eq!(read(&m.ws().join("shared.txt")), "base\n");
    assert_eq!(names(&m.ws()), ["shared.txt"]);
}

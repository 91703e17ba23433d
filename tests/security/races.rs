//! A symlink swapped in while a restore or a pull writes. Beside wardfs, a thread exchanges the
//! directory being written with a symlink to another directory of the zone
//! (`renameat2(RENAME_EXCHANGE)`, in a loop). A pull or restore checks its path and then writes;
//! every directory on the way is opened without following a symlink and the write made
//! relative to that fd, so a swap after the check can only make a write fail (a conflict,
//! reported), never land it in the symlink's target. A pull by a local path under the same race
//! (the path a symlink swapped between an allowed repository and one outside) reads only what
//! was checked: the repository's directory is opened once and libgit2 reads through that fd.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use serde_json::json;

use crate::support::git_servers::{BareRepo, GitDaemon};
use crate::support::Daemon;

/// Files each attack writes into the swapped directory.
const FILES: usize = 2000;

/// Exchanges `a` and `b` until told to stop; returns how many exchanges it made.
struct Swapper {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<u64>,
}

impl Swapper {
    fn start(a: &Path, b: &Path) -> Swapper {
        let (a, b) = (a.to_path_buf(), b.to_path_buf());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut swaps = 0;
            while !flag.load(Ordering::Relaxed) {
                // A restore may remove the symlink where it finds one in the place of the
                // directory it holds (and make it again later): then there is nothing to swap.
                if exchange(&a, &b) {
                    swaps += 1;
                }
            }
            if a.is_symlink() {
                exchange(&a, &b);
            }
            swaps
        });
        Swapper { stop, thread }
    }

    /// Stops swapping, leaving the directory where it was; returns the number of swaps.
    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("swapper")
    }
}

/// `renameat2(a, b, RENAME_EXCHANGE)`; false when one of them is missing.
fn exchange(a: &Path, b: &Path) -> bool {
    let (a, b) = (
        CString::new(a.as_os_str().as_bytes()).unwrap(),
        CString::new(b.as_os_str().as_bytes()).unwrap(),
    );
    // SAFETY: both paths are valid NUL-terminated strings for the call's duration.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    let err = std::io::Error::last_os_error();
    assert!(
        rc == 0 || err.kind() == std::io::ErrorKind::NotFound,
        "renameat2: {err}"
    );
    rc == 0
}

/// `r/src` (a directory, written by the attack), `r/link -> ../../other` beside it, and `other`
/// (empty) outside `r`: returns (`r/src`, `r/link`, `other`).
fn battlefield(ws: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (src, link, other) = (ws.join("r/src"), ws.join("r/link"), ws.join("other"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    symlink("../other", &link).unwrap();
    (src, link, other)
}

/// Calls `route` while `src` and `link` are swapped, and checks that the race ran and that
/// nothing landed in `other`, the symlink's target.
fn race(
    d: &Daemon,
    (route, body): (&str, serde_json::Value),
    (src, link): (&Path, &Path),
    other: &Path,
) {
    let swapper = Swapper::start(src, link);
    let raced = d.call(route, body);
    let swaps = swapper.stop();
    assert!(swaps > 100, "the race never ran ({swaps} swaps)");
    let landed = names(other);
    assert!(
        landed.is_empty(),
        "{route} wrote {} files through the swapped-in symlink, e.g. {:?} ({})",
        landed.len(),
        &landed[..landed.len().min(3)],
        summary(&raced)
    );
}

/// The outcome of a raced call, short: its error, or how many paths it wrote and left in conflict.
fn summary(raced: &Result<serde_json::Value, (wardfs::core::ErrorCode, String)>) -> String {
    match raced {
        Ok(v) => format!(
            "{} conflicts, {} written",
            v["conflicts"].as_array().map_or(0, Vec::len),
            v.get("written")
                .cloned()
                .unwrap_or_else(|| v["restored"].as_array().map_or(0, Vec::len).into())
        ),
        Err((code, msg)) => format!("{code:?}: {msg}"),
    }
}

/// Names of what `dir` holds.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_symlink_swapped_in_during_a_restore_never_receives_a_file() {
    let d = Daemon::start("");
    let ws = d.workspace();
    let (src, link, other) = battlefield(&ws);
    for i in 0..FILES {
        std::fs::write(src.join(format!("f{i}.txt")), format!("{i}\n")).unwrap();
    }
    let id = d.ok("/v1/checkpoints", json!({ "zone": "workspace" }))["id"].clone();
    // Through the API, so that the journal knows (a change beside wardfs is not journaled).
    d.ok(
        "/v1/fs/delete",
        json!({ "path": "/workspace/r/src", "recursive": true }),
    );
    d.ok("/v1/fs/mkdir", json!({ "path": "/workspace/r/src" }));

    race(
        &d,
        ("/v1/checkpoints/restore", json!({ "id": id })),
        (&src, &link),
        &other,
    );
    // Nothing is lost: once the race is over, a restore puts every file back.
    let again = d.ok("/v1/checkpoints/restore", json!({ "id": id }));
    assert_eq!(
        std::fs::read_dir(&src).unwrap().count(),
        FILES,
        "{}",
        summary(&Ok(again))
    );
    assert!(names(&other).is_empty());
}

#[test]
fn a_symlink_swapped_in_during_a_pull_never_receives_a_file() {
    let owned: Vec<(String, Vec<u8>)> = (0..FILES)
        .map(|i| (format!("src/f{i}.txt"), format!("{i}\n").into_bytes()))
        .collect();
    let files: Vec<(&str, &[u8])> = owned
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_slice()))
        .collect();
    let repo = BareRepo::seeded("swapped", &files);
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let ws = d.workspace();
    let (src, link, other) = battlefield(&ws);

    let pull = json!({ "remote": server.url("swapped"), "into": "/workspace/r" });
    race(&d, ("/v1/git/pull", pull), (&src, &link), &other);
}

/// The secret a repository outside `git.local_remotes` holds.
const SECRET: &[u8] = b"-----BEGIN PRIVATE KEY----- swapped in\n";

/// An agent pulls a local repository by a path beneath `git.local_remotes` while another
/// process swaps that path, a symlink, between the allowed repository and one outside
/// (`renameat2(RENAME_EXCHANGE)` of two symlinks, in a loop). The check and libgit2's open used
/// to resolve the path separately, so a swap between them made libgit2 read the outside
/// repository. The directory is opened once, checked through its fd and handed to libgit2 as
/// `/proc/self/fd/N`: each pull is refused or reads the allowed repository, and the outside
/// repository's content never reaches the workspace or the mirror.
#[test]
fn a_symlink_swapped_during_a_local_pull_never_lets_an_outside_repository_in() {
    let secrets = BareRepo::seeded("secrets", &[("id_rsa", SECRET)]);
    let allowed = tempfile::tempdir().unwrap();
    let mine = BareRepo::new_in(allowed.path(), "mine");
    mine.seed(&[("a.txt", b"mine\n")]);
    let (pick, other) = (
        allowed.path().join("pick.git"),
        allowed.path().join("other"),
    );
    symlink(mine.path(), &pick).unwrap();
    symlink(secrets.path(), &other).unwrap();
    let d = Daemon::git(
        &format!("local_remotes = [\"{}\"]\n", allowed.path().display()),
        None,
    );
    let remote = pick.display().to_string();

    let swapper = Swapper::start(&pick, &other);
    let (mut pulled, mut refused) = (0, 0);
    let started = std::time::Instant::now();
    for i in 0..400 {
        if started.elapsed() > std::time::Duration::from_secs(8) {
            break;
        }
        let into = format!("/workspace/r{i}");
        match d.call("/v1/git/pull", json!({ "remote": remote, "into": into })) {
            Ok(r) => {
                pulled += 1;
                assert_eq!(r["written"], 1, "{r}");
            }
            Err((code, message)) => {
                assert_eq!(code, wardfs::core::ErrorCode::InvalidArgument, "{message}");
                assert!(message.contains("git.local_remotes"), "{message}");
                refused += 1;
            }
        }
    }
    let swaps = swapper.stop();
    assert!(swaps > 100, "the race never ran ({swaps} swaps)");
    assert!(
        pulled > 0 && refused > 0,
        "the race never went both ways: {pulled} pulled, {refused} refused"
    );
    let ws = d.workspace();
    let leaked: Vec<String> = std::fs::read_dir(&ws)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("id_rsa").exists())
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        leaked.is_empty(),
        "{} of {pulled} pulls read the outside repository: {:?}",
        leaked.len(),
        &leaked[..leaked.len().min(3)]
    );
    // Nor did any fetch bring its objects into a mirror.
    let secret = git2::Oid::hash_object(git2::ObjectType::Blob, SECRET).unwrap();
    let mut mirrors = 0;
    let mut dirs = vec![d.dir.path().join("state/git")];
    while let Some(dir) = dirs.pop() {
        if let Ok(repo) = git2::Repository::open_bare(&dir) {
            mirrors += 1;
            assert!(
                !repo.odb().unwrap().exists(secret),
                "the mirror {} holds the outside repository's file",
                dir.display()
            );
            continue;
        }
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            }
        }
    }
    assert!(mirrors > 0, "no mirror under the state directory");
    eprintln!("{pulled} pulls, {refused} refused, {swaps} swaps");
}

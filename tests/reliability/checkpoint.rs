//! Checkpoints and restores killed half way (SIGKILL at a gate of the debug daemon,
//! `support::gates`): after the restart a zone is fully at the restore's target, with the cut
//! short restore reported, never a silent mix; the checkpoint taken before the restore exists and
//! undoes it; a checkpoint killed between its objects and its row leaves no row, and the next
//! checkpoint and restore work. A file linked and unlinked beside wardfs while a restore is about
//! to change it (what a spare fork's fill does to every file) is changed all the same.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::gates::Gates;
use crate::support::Daemon;

const FILES: [&str; 4] = ["a.txt", "b.txt", "src/c.txt", "src/d.txt"];

fn start(gates: &Gates) -> Daemon {
    let (key, dir) = gates.env();
    Daemon::options()
        .prefix("wardfs-cp-crash")
        .extra("[checkpoints]\nauto_quiet_ms = 0\n")
        .env(key, &dir)
        .start()
}

/// Each file of `FILES` in the workspace, on disk (`None`: absent).
fn contents(m: &Daemon) -> Vec<Option<String>> {
    FILES
        .iter()
        .map(|f| std::fs::read_to_string(m.workspace().join(f)).ok())
        .collect()
}

fn version(v: &str) -> Vec<Option<String>> {
    FILES.iter().map(|f| Some(format!("{f} {v}\n"))).collect()
}

fn write_all(m: &Daemon, v: &str) {
    for f in FILES {
        m.write(&format!("/workspace/{f}"), &format!("{f} {v}\n"));
    }
}

fn checkpoint(m: &Daemon, message: &str) -> i64 {
    m.ok("/v1/checkpoints", json!({ "message": message }))["id"]
        .as_i64()
        .unwrap()
}

/// Runs the CLI against `m` on another thread (a call the test will cut short).
fn listing(m: &Daemon) -> Value {
    m.get("/v1/checkpoints?limit=100")
}

#[test]
fn a_restore_killed_half_way_is_finished_at_restart_reported_and_can_be_undone() {
    let gates = Gates::new();
    let mut m = start(&gates);
    write_all(&m, "v1");
    let target = checkpoint(&m, "v1");
    write_all(&m, "v2");
    m.write("/workspace/new.txt", "made after v1\n");

    gates.arm("restore-midway");
    let restore = m.cli_in_thread(&["restore", &target.to_string()]);
    gates.wait_held("restore-midway", Duration::from_secs(30));
    // Half way: some files are back at v1, others still v2.
    let mid = contents(&m);
    let back = mid
        .iter()
        .zip(version("v1"))
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(
        back >= 1 && back < FILES.len(),
        "the gate holds the restore half way: {mid:?}"
    );
    m.crash();
    gates.release("restore-midway");
    let out = restore.join().unwrap();
    assert!(
        !out.status.success(),
        "the restore's client saw the daemon die"
    );

    m.respawn();
    // The daemon answers once it has finished the restore.
    let list = listing(&m);
    assert_eq!(
        contents(&m),
        version("v1"),
        "the zone is fully at the checkpoint after the restart: {list}\n{}",
        m.log_text()
    );
    assert!(
        !m.workspace().join("new.txt").exists(),
        "a file made after the checkpoint is gone, as the restore asked"
    );
    let restores = list["restores"].as_array().unwrap();
    let cut = restores
        .iter()
        .find(|r| r["checkpoint"] == target && r["state"] == "resumed")
        .unwrap_or_else(|| panic!("the cut short restore is reported: {list}"));
    assert!(
        cut["detail"].as_str().unwrap().contains("restored"),
        "{cut}"
    );
    assert!(
        m.log_text().contains("cut short"),
        "the restart says so in the log: {}",
        m.log_text()
    );
    let human = m.cli_ok(&["checkpoint", "list"]);
    assert!(
        human.contains(&format!("restore of checkpoint {target}"))
            && human.contains("finished at the daemon's next start"),
        "{human}"
    );
    // The checkpoint taken before the interrupted restore holds the v2 files: nothing is lost.
    let before = cut["before"].as_i64().unwrap();
    let row = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == before)
        .unwrap_or_else(|| panic!("the pre-restore checkpoint {before} exists: {list}"));
    assert_eq!(
        row["message"],
        format!("before restoring checkpoint {target}")
    );
    m.ok("/v1/checkpoints/restore", json!({ "id": before }));
    assert_eq!(
        contents(&m),
        version("v2"),
        "restoring it undoes the restore"
    );
    assert_eq!(
        std::fs::read_to_string(m.workspace().join("new.txt")).unwrap(),
        "made after v1\n"
    );
}

#[test]
fn a_checkpoint_killed_before_its_row_leaves_none_and_the_next_one_works() {
    let gates = Gates::new();
    let mut m = start(&gates);
    write_all(&m, "v1");
    let first = checkpoint(&m, "v1");
    write_all(&m, "v2");

    gates.arm("checkpoint-stored");
    let cut = m.cli_in_thread(&["checkpoint", "-m", "cut short"]);
    gates.wait_held("checkpoint-stored", Duration::from_secs(30));
    m.crash();
    gates.release("checkpoint-stored");
    assert!(!cut.join().unwrap().status.success());

    m.respawn();
    let list = listing(&m);
    let ids: Vec<i64> = list["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![first], "no half-made checkpoint: {list}");
    // The next checkpoint is built on the last whole one and holds v2.
    let second = checkpoint(&m, "v2");
    write_all(&m, "v3");
    m.ok("/v1/checkpoints/restore", json!({ "id": second }));
    assert_eq!(contents(&m), version("v2"));
    m.ok("/v1/checkpoints/restore", json!({ "id": first }));
    assert_eq!(contents(&m), version("v1"));
}

#[test]
fn changes_made_while_the_daemon_was_stopped_are_in_the_next_checkpoint() {
    let gates = Gates::new();
    let mut m = start(&gates);
    write_all(&m, "v1");
    m.write("/workspace/src/gone.txt", "soon gone\n");
    checkpoint(&m, "v1");
    m.stop();
    // Beside wardfs, with no daemon (and so no watcher) running.
    let ws = m.workspace();
    std::fs::write(ws.join("a.txt"), "a.txt offline\n").unwrap();
    std::fs::remove_file(ws.join("src/gone.txt")).unwrap();
    std::fs::create_dir(ws.join("new")).unwrap();
    std::fs::write(ws.join("new/made.txt"), "made offline\n").unwrap();
    m.respawn();
    let offline = checkpoint(&m, "after the restart");
    assert!(
        m.log_text().contains("while wardfs was not running"),
        "{}",
        m.log_text()
    );
    let head = m.journal_head();
    write_all(&m, "v2");
    std::fs::write(ws.join("src/gone.txt"), "back\n").unwrap();
    std::fs::remove_dir_all(ws.join("new")).unwrap();
    // Wait until the watcher journaled those, then restore the checkpoint made after the restart.
    m.until_journaled(head, &["src/gone.txt", "new"]);
    m.ok("/v1/checkpoints/restore", json!({ "id": offline }));
    let mut want = version("v1");
    want[0] = Some("a.txt offline\n".into());
    assert_eq!(contents(&m), want, "{}", m.log_text());
    assert!(
        !ws.join("src/gone.txt").exists(),
        "the file removed offline is gone again"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("new/made.txt")).unwrap(),
        "made offline\n"
    );
}

#[test]
fn a_merge_killed_half_way_leaves_the_parent_with_all_of_it_after_the_restart() {
    let gates = Gates::new();
    let mut m = start(&gates);
    write_all(&m, "v1");
    m.ok("/v1/forks", json!({ "name": "killed" }));
    for f in FILES {
        m.write(&format!("/forks/killed/{f}"), &format!("{f} fork\n"));
    }
    m.write("/workspace/parent-only.txt", "the parent's own\n");

    gates.arm("restore-midway");
    let merge = m.cli_in_thread(&["merge", "killed"]);
    gates.wait_held("restore-midway", Duration::from_secs(30));
    let mid = contents(&m);
    let merged = mid
        .iter()
        .zip(version("fork"))
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(
        merged >= 1 && merged < FILES.len(),
        "the gate holds the merge half way: {mid:?}"
    );
    m.crash();
    gates.release("restore-midway");
    assert!(!merge.join().unwrap().status.success());

    m.respawn();
    listing(&m);
    assert_eq!(
        contents(&m),
        version("fork"),
        "the parent holds all of the merge after the restart:\n{}",
        m.log_text()
    );
    assert_eq!(
        std::fs::read_to_string(m.workspace().join("parent-only.txt")).unwrap(),
        "the parent's own\n",
        "the parent's own change is kept"
    );
    // The fork is still there after the restart, with its files.
    let forks = m.get("/v1/forks");
    assert_eq!(forks["forks"][0]["name"], "killed", "{forks}");
    assert_eq!(
        m.ok("/v1/fs/read", json!({ "path": "/forks/killed/a.txt" }))["content"],
        "a.txt fork\n"
    );
}

/// The directory on disk holding the fork's file `marker` (found under the daemon's directory).
fn fork_dir_of(m: &Daemon, marker: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("find")
        .arg(m.dir.path())
        .args(["-name", marker, "-not", "-path", "*/workspace/*"])
        .output()
        .unwrap();
    let found = String::from_utf8(out.stdout).unwrap();
    let first = found
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no {marker}"));
    std::path::Path::new(first).parent().unwrap().to_path_buf()
}

#[test]
fn an_update_killed_half_way_leaves_the_fork_with_all_of_it_after_the_restart_and_runs_again() {
    let gates = Gates::new();
    let mut m = start(&gates);
    write_all(&m, "v1");
    m.ok("/v1/forks", json!({ "name": "killed" }));
    m.write("/forks/killed/fork-only.txt", "the fork's own\n");
    write_all(&m, "parent");
    let fork = fork_dir_of(&m, "fork-only.txt");
    let in_fork = || -> Vec<Option<String>> {
        FILES
            .iter()
            .map(|f| std::fs::read_to_string(fork.join(f)).ok())
            .collect()
    };

    gates.arm("restore-midway");
    let update = m.cli_in_thread(&["update", "killed"]);
    gates.wait_held("restore-midway", Duration::from_secs(30));
    let mid = in_fork();
    let updated = mid
        .iter()
        .zip(version("parent"))
        .filter(|(a, b)| **a == *b)
        .count();
    assert!(
        updated >= 1 && updated < FILES.len(),
        "the gate holds the update half way: {mid:?}"
    );
    m.crash();
    gates.release("restore-midway");
    assert!(!update.join().unwrap().status.success());

    m.respawn();
    // The daemon answers once it has finished the cut-short update (the socket is bound before).
    listing(&m);
    let fork = fork_dir_of(&m, "fork-only.txt");
    let after: Vec<Option<String>> = FILES
        .iter()
        .map(|f| std::fs::read_to_string(fork.join(f)).ok())
        .collect();
    assert_eq!(
        after,
        version("parent"),
        "the fork holds all of the update after the restart:\n{}",
        m.log_text()
    );
    assert_eq!(
        m.ok(
            "/v1/fs/read",
            json!({ "path": "/forks/killed/fork-only.txt" })
        )["content"],
        "the fork's own\n",
        "the fork's own change is kept"
    );
    // Run again, the update has nothing left to bring; the merge then brings the fork's own
    // change only, and leaves the parent's as they are.
    let again = m.cli(&["update", "killed"]);
    assert!(again.status.success(), "{again:?}");
    let merged = m.cli(&["merge", "killed"]);
    assert!(merged.status.success(), "{merged:?}");
    assert_eq!(contents(&m), version("parent"));
    assert_eq!(
        std::fs::read_to_string(m.workspace().join("fork-only.txt")).unwrap(),
        "the fork's own\n"
    );
}

/// Restores `target` with the daemon held at gate `restore-expected` (a restore about to change
/// its first file, expecting the version it looked at), while `file` of the workspace gets a
/// link made and removed beside wardfs, as a spare fork's fill links every file of the zone:
/// the file's ctime changes, its content does not.
fn restore_while_linked(m: &Daemon, gates: &Gates, target: i64, file: &str) -> Value {
    gates.arm("restore-expected");
    let restore = m.cli_in_thread(&["--json", "restore", &target.to_string()]);
    gates.wait_held("restore-expected", Duration::from_secs(30));
    let link = m.dir.path().join("a-spares-link");
    std::fs::hard_link(m.workspace().join(file), &link).unwrap();
    std::fs::remove_file(&link).unwrap();
    gates.release("restore-expected");
    let out = restore.join().unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_file_linked_and_unlinked_while_a_restore_changes_it_is_still_restored() {
    let gates = Gates::new();
    let m = start(&gates);
    let ws = m.workspace();
    m.write("/workspace/a.txt", "v1\n");
    let target = checkpoint(&m, "v1");
    // Each restore's pre-restore checkpoint is the latest one (nothing changed since), so the
    // restore looks at each file's version itself, right before it changes it.
    m.write("/workspace/new.txt", "made after v1\n");
    checkpoint(&m, "with new.txt");
    let res = restore_while_linked(&m, &gates, target, "new.txt");
    assert_eq!(res["conflicts"], json!([]), "{res}");
    assert!(!ws.join("new.txt").exists(), "the removal was done: {res}");

    m.write("/workspace/a.txt", "v2\n");
    checkpoint(&m, "v2");
    let res = restore_while_linked(&m, &gates, target, "a.txt");
    assert_eq!(res["conflicts"], json!([]), "{res}");
    assert_eq!(
        std::fs::read_to_string(ws.join("a.txt")).unwrap(),
        "v1\n",
        "the write was done: {res}"
    );
}

//! Hostile repositories built the way an attacker builds them (git's own plumbing, and a pack
//! written by hand where git's tools would inflate what they index), served by `git daemon` on
//! loopback or read by local path: a pull refuses or skips what it cannot take, names it, lands
//! the rest, and the daemon's peak memory (`VmHWM` in `/proc/<pid>/status`) stays under 300 MB.
//! Staging a big file is measured the same way.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};
use sha1::{Digest, Sha1};
use wardfs::core::ErrorCode;

use super::scenarios::{commit_raw_tree, raw_object, tree_entry};
use crate::support::git_servers::{git_command, run_git, BareRepo, GitDaemon};
use crate::support::Daemon;

/// The most the daemon may hold at its peak in any of these attacks, in KiB (300 MB).
const PEAK_LIMIT_KIB: u64 = 300_000;

const GIB: u64 = 1 << 30;

/// The peak resident set of process `pid` so far, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn assert_peak_below_limit(d: &Daemon, what: &str) {
    let peak = peak_kib(d.pid());
    eprintln!(
        "{what}: the daemon's peak resident set is {} MB",
        peak / 1000
    );
    assert!(
        peak < PEAK_LIMIT_KIB,
        "{what}: the daemon peaked at {peak} KiB (limit {PEAK_LIMIT_KIB})"
    );
}

// ---------------------------------------------------------------------------------------------
// A pack written by hand
// ---------------------------------------------------------------------------------------------

/// The bomb's base: 64 KiB of zeros, exactly what a copy instruction without operands copies.
const BASE_LEN: u64 = 0x10000;

/// The id of a blob of `len` zero bytes, hashed as it streams by (never held whole).
fn zeros_blob_id(len: u64) -> [u8; 20] {
    let mut h = Sha1::new();
    h.update(format!("blob {len}\0").as_bytes());
    let chunk = vec![0u8; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        h.update(&chunk[..n]);
        left -= n as u64;
    }
    h.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A pack object's header: its type and (inflated) size.
fn object_header(kind: u8, size: u64) -> Vec<u8> {
    let mut out = vec![(kind << 4) | (size & 0x0f) as u8];
    let mut rest = size >> 4;
    while rest > 0 {
        *out.last_mut().unwrap() |= 0x80;
        out.push((rest & 0x7f) as u8);
        rest >>= 7;
    }
    out
}

/// A delta's size header: seven bits at a time, least significant first.
fn delta_size(mut n: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = data.chunks(0xffff).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = chunk.len() as u16;
        out.extend(len.to_le_bytes());
        out.extend((!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for &byte in data {
        a = (a + u32::from(byte)) % 65521;
        b = (b + a) % 65521;
    }
    out.extend(((b << 16) | a).to_be_bytes());
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Plants a delta bomb in `repo`'s object store: a pack of a blob of 64 KiB of zeros and a
/// REF_DELTA on it made of `expansion / 64 KiB` one-byte copy instructions (each copies the whole
/// base), plus the pack's index, written by hand (`git index-pack` would inflate the bomb to
/// index it). Returns the ids of the base and of the bomb: a blob of `expansion` zero bytes.
fn plant_delta_bomb(repo: &BareRepo, expansion: u64) -> (String, String) {
    assert_eq!(expansion % BASE_LEN, 0);
    let base = vec![0u8; BASE_LEN as usize];
    let (base_id, bomb_id) = (zeros_blob_id(BASE_LEN), zeros_blob_id(expansion));
    let mut delta = delta_size(BASE_LEN);
    delta.extend(delta_size(expansion));
    delta.resize(delta.len() + (expansion / BASE_LEN) as usize, 0x80);
    let base_object = [object_header(3, BASE_LEN), zlib_stored(&base)].concat();
    let bomb_object = [
        object_header(7, delta.len() as u64),
        base_id.to_vec(),
        zlib_stored(&delta),
    ]
    .concat();
    let mut pack = b"PACK".to_vec();
    pack.extend(2u32.to_be_bytes());
    pack.extend(2u32.to_be_bytes());
    let mut entries = Vec::new();
    for (id, object) in [(base_id, &base_object), (bomb_id, &bomb_object)] {
        entries.push((id, crc32(object), pack.len() as u32));
        pack.extend_from_slice(object);
    }
    let pack_sum: [u8; 20] = Sha1::digest(&pack).into();
    pack.extend(pack_sum);
    entries.sort();
    let mut idx = vec![0xff, b't', b'O', b'c', 0, 0, 0, 2];
    for first in 0..=255u8 {
        let n = entries.iter().filter(|e| e.0[0] <= first).count() as u32;
        idx.extend(n.to_be_bytes());
    }
    entries.iter().for_each(|e| idx.extend(e.0));
    entries.iter().for_each(|e| idx.extend(e.1.to_be_bytes()));
    entries.iter().for_each(|e| idx.extend(e.2.to_be_bytes()));
    idx.extend(pack_sum);
    let idx_sum: [u8; 20] = Sha1::digest(&idx).into();
    idx.extend(idx_sum);
    let stem = repo
        .path()
        .join(format!("objects/pack/pack-{}", hex(&pack_sum)));
    std::fs::write(stem.with_extension("pack"), &pack).unwrap();
    std::fs::write(stem.with_extension("idx"), &idx).unwrap();
    eprintln!(
        "delta bomb: a pack of {} bytes whose delta expands to {expansion} bytes",
        pack.len()
    );
    (hex(&base_id), hex(&bomb_id))
}

#[test]
fn a_delta_bomb_is_refused_before_it_is_inflated_over_git_and_by_local_path() {
    let repo = BareRepo::new("bomb");
    let (base, bomb) = plant_delta_bomb(&repo, GIB);
    // git reads the bomb's size from the delta's header, as libgit2 does, without applying it.
    assert_eq!(repo.git(&["cat-file", "-s", &bomb]), GIB.to_string());
    let readme = raw_object(&repo, "blob", b"hello\n");
    // The base rides along under a name of its own, so that the server sends the bomb as the
    // delta it is (git reuses a stored delta whose base it sends too).
    commit_raw_tree(
        &repo,
        &[
            tree_entry("100644", b"README.md", &readme),
            tree_entry("100644", b"base.bin", &base),
            tree_entry("100644", b"bomb.bin", &bomb),
        ],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git(
        &format!("local_remotes = [\"{}\"]", repo.root().display()),
        None,
    );
    for remote in [server.url("bomb"), repo.path().display().to_string()] {
        let (code, msg) = d.err(
            "/v1/git/pull",
            json!({ "remote": remote, "into": "/workspace/bomb" }),
        );
        assert_eq!(code, ErrorCode::TooLarge, "{remote}: {msg}");
        assert!(
            msg.contains(&format!("needs {} bytes", GIB + 1))
                && msg.contains("limits.git_blob_bytes")
                && msg.contains(&remote),
            "{msg}"
        );
        assert!(
            !d.workspace().join("bomb").exists(),
            "{remote}: nothing may be written"
        );
    }
    assert_peak_below_limit(&d, "a 1 GiB delta bomb pulled over git:// and by path");
    // The mirror is intact: once the branch drops the bomb, the next pull lands.
    commit_raw_tree(&repo, &[tree_entry("100644", b"README.md", &readme)]);
    let r = d.ok(
        "/v1/git/pull",
        json!({ "remote": server.url("bomb"), "into": "/workspace/bomb" }),
    );
    assert_eq!(r["written"], 1, "{r}");
    assert_eq!(d.read("bomb/README.md").unwrap(), b"hello\n");
}

// ---------------------------------------------------------------------------------------------
// Trees
// ---------------------------------------------------------------------------------------------

/// The `skipped` entries of a pull's answer: (path, reason).
fn skipped(r: &Value) -> Vec<(String, String)> {
    r["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["path"].as_str().unwrap().to_string(),
                s["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Runs `git mktree --missing` in `repo` on `listing` (`<mode> <type> <id>\t<name>` lines) and
/// returns the tree's id.
fn mktree(repo: &BareRepo, listing: &str) -> String {
    use std::io::Write;
    let mut child = git_command()
        .current_dir(repo.path())
        .args(["mktree", "--missing"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let listing = listing.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(listing.as_bytes()).unwrap());
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(out.status.success(), "git mktree failed");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn a_tree_of_many_submodules_answers_with_a_capped_list_and_the_count() {
    const SUBMODULES: usize = 200_000;
    let repo = BareRepo::new("subs");
    let readme = raw_object(&repo, "blob", b"hello\n");
    let mut listing = format!("100644 blob {readme}\tREADME.md\n");
    for i in 0..SUBMODULES {
        listing.push_str(&format!("160000 commit {:040x}\tm{i:06}\n", i + 1));
    }
    let tree = mktree(&repo, &listing);
    let commit = repo.git(&["commit-tree", &tree, "-m", "a flood of submodules"]);
    repo.git(&["update-ref", "refs/heads/main", &commit]);
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    let (status, body) = d.curl(
        "POST",
        "/v1/git/pull",
        Some(
            json!({ "remote": server.url("subs") })
                .to_string()
                .as_bytes(),
        ),
    );
    let r: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["written"], 1, "{r}");
    assert_eq!(r["skipped_total"], SUBMODULES, "{r}");
    let listed = skipped(&r);
    assert_eq!(listed.len(), 1000, "the list is capped");
    assert!(listed
        .iter()
        .all(|(p, reason)| p.starts_with("/workspace/subs/m") && reason.contains("submodule")));
    assert!(
        body.len() < 200_000,
        "the answer is {} bytes: the list is capped",
        body.len()
    );
    assert_peak_below_limit(&d, "a tree of 200,000 submodules");
    let out = d.cli(&["git", "pull", &server.url("subs")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("{} more entries skipped", SUBMODULES - 1000)),
        "{text}"
    );
}

#[test]
fn an_entry_whose_object_is_not_what_its_mode_says_is_skipped_and_the_rest_lands() {
    let repo = BareRepo::new("modes");
    let blob = raw_object(&repo, "blob", b"fine\n");
    let sub = raw_object(&repo, "tree", &tree_entry("100644", b"inner.txt", &blob));
    let other = raw_object(&repo, "tree", &tree_entry("100755", b"run.sh", &blob));
    commit_raw_tree(
        &repo,
        &[
            tree_entry("100644", b"a-file-that-is-a-tree", &sub),
            tree_entry("120000", b"a-link-that-is-a-tree", &other),
            tree_entry("100644", b"ok.txt", &blob),
        ],
    );
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    // Every pull, not only the first, lands what it can.
    for round in 0..2 {
        let r = d.ok("/v1/git/pull", json!({ "remote": server.url("modes") }));
        let expected_written = if round == 0 { 1 } else { 0 };
        assert_eq!(r["written"], expected_written, "round {round}: {r}");
        let listed = skipped(&r);
        assert_eq!(listed.len(), 2, "round {round}: {r}");
        for (name, kind) in [
            ("a-file-that-is-a-tree", "a file (mode 100644)"),
            ("a-link-that-is-a-tree", "a symlink (mode 120000)"),
        ] {
            let (_, reason) = listed
                .iter()
                .find(|(p, _)| p == &format!("/workspace/modes/{name}"))
                .unwrap_or_else(|| panic!("{name} not named: {r}"));
            assert!(
                reason.contains(kind) && reason.contains("is a tree"),
                "{reason}"
            );
            assert!(
                std::fs::symlink_metadata(d.workspace().join("modes").join(name)).is_err(),
                "{name} was written"
            );
        }
        assert_eq!(d.read("modes/ok.txt").unwrap(), b"fine\n");
    }
    let status = d.ok("/v1/git/status", json!({}));
    assert_eq!(
        status["repos"][0]["changes"],
        json!([]),
        "skipped entries are no changes: {status}"
    );
}

// ---------------------------------------------------------------------------------------------
// Staging
// ---------------------------------------------------------------------------------------------

/// The mirror of the only repository the daemon pulled.
fn only_mirror(d: &Daemon) -> PathBuf {
    let mirrors: Vec<PathBuf> = std::fs::read_dir(d.dir.path().join("state/git"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "git"))
        .collect();
    assert_eq!(mirrors.len(), 1, "{mirrors:?}");
    mirrors.into_iter().next().unwrap()
}

/// `git cat-file blob <id> | git hash-object --stdin` in `mirror`: the id of the object's actual
/// content, streamed.
fn rehash(mirror: &Path, id: &str) -> String {
    let mut cat = git_command()
        .current_dir(mirror)
        .args(["cat-file", "blob", id])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let hashed = git_command()
        .current_dir(mirror)
        .args(["hash-object", "--stdin"])
        .stdin(cat.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(cat.wait().unwrap().success() && hashed.status.success());
    String::from_utf8(hashed.stdout).unwrap().trim().to_string()
}

#[test]
fn staging_a_big_file_streams_it_into_the_mirror() {
    const BIG: u64 = 400 << 20;
    let repo = BareRepo::seeded("big", &[("README.md", b"hi\n")]);
    let server = GitDaemon::serve(&repo);
    let d = Daemon::git("", None);
    d.ok("/v1/git/pull", json!({ "remote": server.url("big") }));
    // 400 MiB made beside wardfs: sparse, with marks at both ends so that it is not all zeros.
    let file = d.workspace().join("big/big.bin");
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(&file).unwrap();
        f.set_len(BIG).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"tail", BIG - 4).unwrap();
    }
    d.ok("/v1/git/status", json!({ "rescan": true }));
    let c = d.ok("/v1/git/stage", json!({ "message": "a big file" }));
    assert_peak_below_limit(&d, "staging a 400 MiB file");
    assert_eq!(c["files"][0]["path"], "/workspace/big/big.bin", "{c}");
    assert_eq!(c["files"][0]["oversized"], true, "{c}");
    let mirror = only_mirror(&d);
    let entry = format!("{}:big.bin", c["commit"].as_str().unwrap());
    assert_eq!(
        run_git(&mirror, &["cat-file", "-s", &entry]),
        BIG.to_string()
    );
    let id = run_git(&mirror, &["rev-parse", &entry]);
    let file_id = run_git(&mirror, &["hash-object", file.to_str().unwrap()]);
    assert_eq!(id, file_id, "the staged blob is the file");
    assert_eq!(rehash(&mirror, &id), id, "the object holds that content");
}

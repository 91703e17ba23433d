//! Tests of the `sandbox-agent` provider against the real sandbox-agent 0.4.2 server (--no-telemetry),
//! started by `crate::support::sandbox_agent` inside a loopback-only network namespace (run with
//! `make test`, or see `sandbox_agent::require_loopback_only` for the command). The server runs on this machine, so each
//! test checks with `std::fs` what the provider did, not only what the provider says.

mod daemon;
mod daytona;
mod hostile;
mod local;
mod mirror;
mod provisioned;
mod run;
mod zone;

use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::time::{Duration, Instant};

use crate::support::rng::noise;
use crate::support::sandbox_agent::{self, AgentServer};
use bytes::Bytes;
use wardfs::core::{EntryKind, ErrorCode};
use wardfs::sandbox::{
    BatchItem, ExecRequest, HashAlgo, MetaUpdate, SandboxAgent, SandboxFs, SandboxFsError, Token,
};

/// Returns the code of an expected error, with the value in the message when it was not one.
fn code<T: std::fmt::Debug>(result: Result<T, SandboxFsError>) -> ErrorCode {
    match result {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code(),
    }
}

fn mode_of(path: &std::path::Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn write_stat_list_read_round_trip() {
    let server = AgentServer::start();
    let fs = server.provider();
    let root = server.root();
    fs.check().await.unwrap();

    let before = fs.requests();
    fs.write(
        &format!("{root}/a/b/hello.txt"),
        Bytes::from_static(b"hello\n"),
    )
    .await
    .unwrap();
    assert_eq!(fs.requests() - before, 1, "a small file is one request");
    let local = server.work().join("a/b/hello.txt");
    assert_eq!(std::fs::read(&local).unwrap(), b"hello\n");

    let meta = fs.stat(&format!("{root}/a/b/hello.txt")).await.unwrap();
    assert_eq!(meta.kind, EntryKind::File);
    assert_eq!(meta.size, 6);
    let local_meta = std::fs::metadata(&local).unwrap();
    let local_ns = local_meta.mtime() * 1_000_000_000 + local_meta.mtime_nsec();
    assert_eq!(
        meta.mtime_ns,
        Some(local_ns),
        "the remote mtime, to the nanosecond"
    );
    assert_eq!(
        fs.stat(&format!("{root}/a")).await.unwrap().kind,
        EntryKind::Dir
    );

    std::fs::write(server.work().join("a/z.txt"), b"zz").unwrap();
    std::fs::write(server.work().join("a/c.txt"), b"c").unwrap();
    let names: Vec<_> = fs
        .list(&format!("{root}/a"))
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.name, e.meta.kind, e.meta.size))
        .collect();
    assert_eq!(
        names,
        [
            ("b".to_string(), EntryKind::Dir, 4096),
            ("c.txt".to_string(), EntryKind::File, 1),
            ("z.txt".to_string(), EntryKind::File, 2),
        ]
    );

    assert_eq!(
        &fs.read(&format!("{root}/a/z.txt")).await.unwrap()[..],
        b"zz"
    );
    assert_eq!(code(fs.read(&format!("{root}/a")).await), ErrorCode::IsDir);
    assert_eq!(
        code(fs.list(&format!("{root}/a/z.txt")).await),
        ErrorCode::NotDir
    );

    // Overwriting keeps the file's mode (the server writes in place).
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o750)).unwrap();
    fs.write(&format!("{root}/a/b/hello.txt"), Bytes::from_static(b"bye"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(&local).unwrap(), b"bye");
    assert_eq!(mode_of(&local), 0o750);

    // Relative paths never reach the server (it would resolve them against its HOME).
    assert_eq!(code(fs.stat("relative/x").await), ErrorCode::InvalidPath);
    assert_eq!(
        code(fs.stat(&format!("{root}/../x")).await),
        ErrorCode::InvalidPath
    );
}

#[tokio::test]
async fn mkdir_remove_and_rename_behave_like_the_syscalls() {
    let server = AgentServer::start();
    let fs = server.provider();
    let root = server.root();
    let work = server.work();

    fs.mkdir_p(&format!("{root}/d/e/f")).await.unwrap();
    fs.mkdir_p(&format!("{root}/d/e/f")).await.unwrap();
    assert!(work.join("d/e/f").is_dir());
    std::fs::write(work.join("file"), b"x").unwrap();
    assert_eq!(
        code(fs.mkdir_p(&format!("{root}/file/sub")).await),
        ErrorCode::NotDir
    );

    // Rename a file, then onto an existing file (replaced).
    std::fs::write(work.join("d/one"), b"1").unwrap();
    std::fs::write(work.join("d/two"), b"2").unwrap();
    fs.rename(&format!("{root}/d/one"), &format!("{root}/d/uno"))
        .await
        .unwrap();
    assert!(!work.join("d/one").exists());
    assert_eq!(std::fs::read(work.join("d/uno")).unwrap(), b"1");
    fs.rename(&format!("{root}/d/uno"), &format!("{root}/d/two"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(work.join("d/two")).unwrap(), b"1");
    // Missing parents of the destination are created.
    fs.rename(&format!("{root}/d/two"), &format!("{root}/new/deep/two"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(work.join("new/deep/two")).unwrap(), b"1");

    // Never onto a directory: the server's overwrite would delete it with its contents.
    std::fs::create_dir_all(work.join("keep")).unwrap();
    std::fs::write(work.join("keep/precious"), b"p").unwrap();
    let err = fs
        .rename(&format!("{root}/file"), &format!("{root}/keep"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::Exists, "{err}");
    assert_eq!(std::fs::read(work.join("keep/precious")).unwrap(), b"p");
    assert_eq!(std::fs::read(work.join("file")).unwrap(), b"x");

    // A directory moves whole.
    fs.rename(&format!("{root}/d"), &format!("{root}/moved"))
        .await
        .unwrap();
    assert!(work.join("moved/e/f").is_dir());

    // Remove: a file, an empty dir, a non-empty dir only with `recursive`.
    fs.remove(&format!("{root}/file"), false).await.unwrap();
    assert!(!work.join("file").exists());
    fs.remove(&format!("{root}/moved/e/f"), false)
        .await
        .unwrap();
    assert!(!work.join("moved/e/f").exists());
    assert_eq!(
        code(fs.remove(&format!("{root}/keep"), false).await),
        ErrorCode::NotEmpty
    );
    assert!(work.join("keep/precious").exists());
    fs.remove(&format!("{root}/keep"), true).await.unwrap();
    assert!(!work.join("keep").exists());

    // Symlinks are removed as links: a dangling one (which the server's routes cannot see) and
    // one to a directory (whose contents stay).
    std::os::unix::fs::symlink("nowhere", work.join("dangling")).unwrap();
    fs.remove(&format!("{root}/dangling"), false).await.unwrap();
    assert!(std::fs::symlink_metadata(work.join("dangling")).is_err());
    std::os::unix::fs::symlink("new", work.join("dirlink")).unwrap();
    fs.remove(&format!("{root}/dirlink"), false).await.unwrap();
    assert!(std::fs::symlink_metadata(work.join("dirlink")).is_err());
    assert_eq!(std::fs::read(work.join("new/deep/two")).unwrap(), b"1");

    // A dangling symlink renames as a link too.
    std::os::unix::fs::symlink("nowhere", work.join("dangling2")).unwrap();
    fs.rename(&format!("{root}/dangling2"), &format!("{root}/dangling3"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_link(work.join("dangling3")).unwrap().to_str(),
        Some("nowhere")
    );
}

#[tokio::test]
async fn missing_paths_are_not_found() {
    let server = AgentServer::start();
    let fs = server.provider();
    let missing = format!("{}/no/such", server.root());
    assert_eq!(code(fs.stat(&missing).await), ErrorCode::NotFound);
    assert_eq!(code(fs.list(&missing).await), ErrorCode::NotFound);
    assert_eq!(code(fs.read(&missing).await), ErrorCode::NotFound);
    assert_eq!(code(fs.remove(&missing, true).await), ErrorCode::NotFound);
    let other = format!("{}/elsewhere", server.root());
    assert_eq!(code(fs.rename(&missing, &other).await), ErrorCode::NotFound);
    assert_eq!(code(fs.walk(&missing).await), ErrorCode::NotFound);
    assert_eq!(
        code(fs.hash(&missing, HashAlgo::Sha256).await),
        ErrorCode::NotFound
    );
    let err = fs.stat(&missing).await.unwrap_err();
    assert_eq!(err.path(), Some(missing.as_str()));
}

#[tokio::test]
async fn a_five_mib_file_is_chunked_and_reads_back_identical() {
    let server = AgentServer::start();
    let fs = server.provider();
    let root = server.root();
    let data = Bytes::from(noise(5 * 1024 * 1024 + 123, 42));
    let path = format!("{root}/big/blob.bin");
    // An existing file keeps its mode when replaced by a chunked write.
    std::fs::create_dir_all(server.work().join("big")).unwrap();
    std::fs::write(server.work().join("big/blob.bin"), b"old").unwrap();
    std::fs::set_permissions(
        server.work().join("big/blob.bin"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();

    let before = fs.requests();
    fs.write(&path, data.clone()).await.unwrap();
    assert_eq!(fs.requests() - before, 4, "three 2 MiB parts and one join");
    assert!(fs.bytes_sent() >= data.len() as u64);

    let back = fs.read(&path).await.unwrap();
    assert_eq!(back.len(), data.len());
    assert!(
        back == data,
        "the file read back differs from what was written"
    );
    assert!(std::fs::read(server.work().join("big/blob.bin")).unwrap() == data[..]);
    assert_eq!(mode_of(&server.work().join("big/blob.bin")), 0o755);
    let names: Vec<_> = std::fs::read_dir(server.work().join("big"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["blob.bin"], "no part files are left behind");

    // A chunked write never replaces a directory.
    std::fs::create_dir_all(server.work().join("big/dir/inner")).unwrap();
    let err = fs
        .write(&format!("{root}/big/dir"), data.clone())
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::IsDir, "{err}");
    assert!(server.work().join("big/dir/inner").is_dir());
}

#[tokio::test]
async fn put_batch_keeps_the_tree_and_walk_sees_modes_and_links() {
    let server = AgentServer::start();
    let fs = server.provider();
    let root = format!("{}/tree", server.root());
    let work = server.work().join("tree");

    let mut items = vec![
        BatchItem::Dir {
            path: "empty".into(),
            mode: 0o755,
        },
        BatchItem::File {
            path: "src/nested/deep/lib.rs".into(),
            data: Bytes::from_static(b"pub fn f() {}\n"),
            mode: 0o644,
            mtime: Some(1_600_000_000),
        },
        BatchItem::File {
            path: "bin/run.sh".into(),
            data: Bytes::from_static(b"#!/bin/sh\necho hi\n"),
            mode: 0o755,
            mtime: None,
        },
        BatchItem::Symlink {
            path: "link".into(),
            target: "src/nested/deep/lib.rs".into(),
        },
        BatchItem::Dir {
            path: "private".into(),
            mode: 0o700,
        },
        BatchItem::File {
            path: "large.bin".into(),
            data: Bytes::from(noise(3 * 1024 * 1024, 7)),
            mode: 0o600,
            mtime: Some(1_650_000_000),
        },
    ];
    // Enough small files to need more than one 2 MiB archive.
    for i in 0..40 {
        items.push(BatchItem::File {
            path: format!("many/f{i:02}.dat"),
            data: Bytes::from(noise(64 * 1024, i)),
            mode: 0o644,
            mtime: Some(1_600_000_000),
        });
    }
    let report = fs.put_batch(&root, items).await.unwrap();
    assert_eq!(report.items, 46);
    assert!(report.requests >= 2 + 3, "{report:?}");

    assert!(work.join("empty").is_dir());
    assert_eq!(mode_of(&work.join("private")), 0o700);
    assert_eq!(mode_of(&work.join("bin/run.sh")), 0o755);
    assert_eq!(
        std::fs::read_link(work.join("link")).unwrap().to_str(),
        Some("src/nested/deep/lib.rs")
    );
    assert_eq!(
        std::fs::metadata(work.join("src/nested/deep/lib.rs"))
            .unwrap()
            .mtime(),
        1_600_000_000
    );
    assert!(std::fs::read(work.join("large.bin")).unwrap() == noise(3 * 1024 * 1024, 7));
    assert_eq!(mode_of(&work.join("large.bin")), 0o600);
    assert_eq!(
        std::fs::metadata(work.join("large.bin")).unwrap().mtime(),
        1_650_000_000
    );
    assert!(std::fs::read(work.join("many/f39.dat")).unwrap() == noise(64 * 1024, 39));

    let mut entries = fs.walk(&root).await.unwrap();
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    let find = |p: &str| {
        entries
            .iter()
            .find(|e| e.path == p)
            .unwrap_or_else(|| panic!("walk did not report {p}"))
    };
    assert_eq!(
        entries.len(),
        40 + 11,
        "{:?}",
        entries.iter().map(|e| &e.path).collect::<Vec<_>>()
    );
    let link = find("link");
    assert_eq!(link.meta.kind, EntryKind::Symlink);
    assert_eq!(
        link.meta.link_target.as_deref(),
        Some("src/nested/deep/lib.rs")
    );
    let run = find("bin/run.sh");
    assert_eq!(run.meta.kind, EntryKind::File);
    assert_eq!(run.meta.mode, Some(0o755));
    assert_eq!(run.meta.size, 18);
    assert_eq!(find("src/nested/deep/lib.rs").meta.mode, Some(0o644));
    assert_eq!(
        find("src/nested/deep/lib.rs").meta.mtime_ns,
        Some(1_600_000_000_000_000_000)
    );
    assert_eq!(find("empty").meta.kind, EntryKind::Dir);
    assert_eq!(find("private").meta.mode, Some(0o700));

    // The server's own listing cannot tell the link from a file: that is why walk runs find.
    let listed = fs.list(&root).await.unwrap();
    let listed_link = listed.iter().find(|e| e.name == "link").unwrap();
    assert_eq!(listed_link.meta.kind, EntryKind::File);

    // A second batch replaces a file by a link and never deletes what it does not name.
    let report = fs
        .put_batch(
            &root,
            vec![BatchItem::Symlink {
                path: "bin/run.sh".into(),
                target: "../link".into(),
            }],
        )
        .await
        .unwrap();
    assert_eq!(report.requests, 1);
    assert_eq!(
        std::fs::read_link(work.join("bin/run.sh"))
            .unwrap()
            .to_str(),
        Some("../link")
    );
    assert!(work.join("many/f00.dat").exists());

    // Paths that would leave the root are refused before anything is sent.
    let before = fs.requests();
    let bad = BatchItem::Dir {
        path: "../escape".into(),
        mode: 0o755,
    };
    assert_eq!(
        code(fs.put_batch(&root, vec![bad]).await),
        ErrorCode::InvalidPath
    );
    assert_eq!(fs.requests(), before);
}

#[tokio::test]
async fn walk_of_a_large_tree_falls_back_to_a_listing_file() {
    let server = AgentServer::start();
    let fs = server.provider();
    let work = server.work().join("wide");
    // Over 1 MiB of find output (the exec output limit), and one name that is not UTF-8.
    let long = "n".repeat(120);
    for d in 0..30 {
        let dir = work.join(format!("dir{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..300 {
            std::fs::write(dir.join(format!("{long}{f:03}")), b"").unwrap();
        }
    }
    let odd = std::ffi::OsStr::from_bytes(b"odd-\xff-name");
    std::fs::write(work.join(odd), b"x").unwrap();

    let before = fs.requests();
    let entries = fs.walk(&format!("{}/wide", server.root())).await.unwrap();
    assert_eq!(
        fs.requests() - before,
        4,
        "find, find into a file, download it, remove it"
    );
    assert_eq!(
        entries.len(),
        30 + 30 * 300,
        "dirs and files; the non-UTF-8 name is skipped"
    );
    assert!(entries
        .iter()
        .any(|e| e.path == format!("dir29/{long}299") && e.meta.kind == EntryKind::File));
    let leftovers: Vec<_> = std::fs::read_dir("/tmp")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("tmp."))
        .filter(|e| {
            std::fs::read(e.path())
                .map(|b| b.windows(long.len()).any(|w| w == long.as_bytes()))
                .unwrap_or(false)
        })
        .collect();
    assert!(leftovers.is_empty(), "the listing file is removed");
}

#[tokio::test]
async fn symlink_set_meta_and_hash() {
    let server = AgentServer::start();
    let fs = server.provider();
    let root = server.root();
    let work = server.work();

    fs.symlink("target/file", &format!("{root}/links/l"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_link(work.join("links/l")).unwrap().to_str(),
        Some("target/file")
    );
    fs.symlink("other", &format!("{root}/links/l"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_link(work.join("links/l")).unwrap().to_str(),
        Some("other")
    );
    std::fs::create_dir_all(work.join("links/dir/inner")).unwrap();
    assert_eq!(
        code(fs.symlink("x", &format!("{root}/links/dir")).await),
        ErrorCode::Exists
    );
    assert!(work.join("links/dir/inner").is_dir());

    std::fs::write(work.join("f"), b"data").unwrap();
    fs.set_meta(
        &format!("{root}/f"),
        MetaUpdate {
            mode: Some(0o741),
            mtime: Some(1_500_000_000),
        },
    )
    .await
    .unwrap();
    assert_eq!(mode_of(&work.join("f")), 0o741);
    assert_eq!(
        std::fs::metadata(work.join("f")).unwrap().mtime(),
        1_500_000_000
    );

    let content = noise(100_000, 3);
    std::fs::write(work.join("h"), &content).unwrap();
    let path = format!("{root}/h");
    assert_eq!(
        fs.hash(&path, HashAlgo::Sha256).await.unwrap(),
        HashAlgo::Sha256.digest(&content)
    );
    assert_eq!(
        fs.hash(&path, HashAlgo::Blake3).await.unwrap(),
        HashAlgo::Blake3.digest(&content)
    );
    assert_eq!(
        code(fs.hash(&root, HashAlgo::Sha256).await),
        ErrorCode::IsDir
    );
}

#[tokio::test]
async fn exec_runs_commands_with_cwd_env_and_timeout() {
    let server = AgentServer::start();
    let fs = server.provider();
    let out = fs
        .exec(ExecRequest::new(
            "sh",
            ["-c", "echo hi; echo err >&2; exit 3"],
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(3));
    assert_eq!(out.stdout, "hi\n");
    assert_eq!(out.stderr, "err\n");
    assert!(!out.success());

    let mut req = ExecRequest::new("sh", ["-c", "pwd; printf %s \"$GREETING\""]);
    req.cwd = Some(server.root());
    req.env = vec![("GREETING".into(), "hello there".into())];
    let out = fs.exec(req).await.unwrap();
    assert!(out.success(), "{out:?}");
    assert_eq!(out.stdout, format!("{}\nhello there", server.root()));

    let mut req = ExecRequest::new("sleep", ["5"]);
    req.timeout = Some(Duration::from_millis(300));
    let started = Instant::now();
    let out = fs.exec(req).await.unwrap();
    assert!(out.timed_out);
    assert_eq!(out.exit_code, None);
    assert!(started.elapsed() < Duration::from_secs(4));

    let err = fs
        .exec(ExecRequest::new(
            "no-such-command-here",
            Vec::<String>::new(),
        ))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::NotFound, "{err}");
}

#[tokio::test]
async fn a_wrong_token_is_auth_failed_and_never_printed() {
    let server = AgentServer::start();
    let wrong =
        SandboxAgent::with_token(&server.config(), Some(Token::new("wrong-token-42"))).unwrap();
    let err = wrong.stat(&server.root()).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert!(
        matches!(err, SandboxFsError::AuthFailed { status: 401, .. }),
        "{err:?}"
    );
    assert_eq!(code(wrong.check().await), ErrorCode::AuthFailed);
    let text = format!("{err} {err:?} {wrong:?}");
    assert!(!text.contains("wrong-token-42"), "{text}");
    assert!(!text.contains(server.token()), "{text}");

    let none = SandboxAgent::with_token(&server.config(), None).unwrap();
    assert_eq!(code(none.check().await), ErrorCode::AuthFailed);

    // The token comes from the environment variable the config names.
    let var = format!("WARDFS_TEST_SANDBOX_TOKEN_{}", std::process::id());
    std::env::set_var(&var, server.token());
    let mut config = server.config();
    config.token_env = Some(var.clone());
    let from_env = SandboxAgent::connect(&config).unwrap();
    from_env.check().await.unwrap();
    std::env::remove_var(&var);
}

#[tokio::test]
async fn a_killed_server_is_unavailable_at_once() {
    let mut server = AgentServer::start();
    let fs = server.provider();
    let root = server.root();
    // A pooled connection exists when the server dies.
    fs.stat(&root).await.unwrap();
    server.kill();

    let started = Instant::now();
    let err = fs.stat(&root).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SandboxUnavailable, "{err}");
    assert!(err.is_unavailable());
    assert!(err.to_string().contains(&server.url()), "{err}");
    let err = fs
        .write(&format!("{root}/x"), Bytes::from_static(b"x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::SandboxUnavailable, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_hung_server_times_out_and_recovers() {
    let server = AgentServer::start();
    let mut config = server.config();
    config.request_timeout = Duration::from_secs(1);
    let fs = SandboxAgent::with_token(&config, Some(Token::new(server.token()))).unwrap();
    let root = server.root();
    fs.stat(&root).await.unwrap();

    server.pause();
    let started = Instant::now();
    let err = fs.stat(&root).await.unwrap_err();
    let waited = started.elapsed();
    server.resume();
    assert!(matches!(err, SandboxFsError::TimedOut { .. }), "{err:?}");
    assert_eq!(err.code(), ErrorCode::SandboxUnavailable);
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(3),
        "{waited:?}"
    );

    // Once the server answers again, so does the provider.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match fs.stat(&root).await {
            Ok(meta) => {
                assert_eq!(meta.kind, EntryKind::Dir);
                break;
            }
            Err(e) if Instant::now() < deadline => {
                assert!(e.is_unavailable(), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the server did not come back: {e}"),
        }
    }
}

/// A hostile sandbox answers `stat`, `list`, a file download and a whole-file read with a body
/// that never ends: each call fails within its cap (a clear error naming that limit) and long
/// before the request timeout, and the client stops reading, so the daemon's memory stays
/// bounded (the old code read until the timeout, gigabytes).
#[tokio::test]
async fn an_endless_answer_ends_at_the_cap() {
    let server = sandbox_agent::HostileServer::start(|_| sandbox_agent::Answer::Endless);
    let cap = 1 << 20;
    let fs = server.provider(cap);
    for (op, result) in [
        ("stat", fs.stat("/x").await.map(|_| ())),
        ("list", fs.list("/x").await.map(|_| ())),
    ] {
        let started = Instant::now();
        let err = result.expect_err(op);
        assert!(
            err.to_string().contains("limits.sandbox_answer_bytes"),
            "{op}: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(10), "{op}");
    }
    // A download streams into its sink and stops at its own cap.
    let mut sink = std::io::sink();
    let started = Instant::now();
    let err = fs.read_into("/x", 4 << 20, &mut sink).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::TooLarge, "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A file read whole stops at the file cap, and the error names that limit (it used to name
    // limits.sandbox_answer_bytes, which is not the one that refused it).
    let mut config = wardfs::sandbox::SandboxAgentConfig::new(server.url.clone());
    config.request_timeout = Duration::from_secs(20);
    config.max_answer_bytes = cap;
    config.max_file_bytes = 2 << 20;
    let whole = SandboxAgent::with_token(&config, None).unwrap();
    let started = Instant::now();
    let err = whole.read("/x").await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::TooLarge, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("limits.sandbox_file_bytes") && !text.contains("sandbox_answer_bytes"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    // The server could push no more than the caps plus what the sockets buffer. The sleep must
    // stay: time for the server to push on, were the client still reading.
    std::thread::sleep(Duration::from_millis(200));
    let sent = server.sent.load(std::sync::atomic::Ordering::Relaxed);
    assert!(sent < 64 << 20, "the client kept reading: {sent} bytes");
}

/// A hostile sandbox lists names that are `..`, hold `/` or NUL, or are empty: the provider
/// skips them, so neither the mount nor the API (remote zones) nor the mirror ever sees them.
#[tokio::test]
async fn bad_names_in_a_listing_are_skipped() {
    let server = sandbox_agent::HostileServer::start(|line| {
        if line.contains("/v1/processes/run") {
            // The walk: `find -printf` records, one climbing out, one with an empty component.
            return sandbox_agent::Answer::Json(
                r#"{"exitCode":0,"stdout":"f 644 1 1.0 ../evil\u0000\u0000f 644 1 1.0 a//b\u0000\u0000f 644 1 1.0 d/ok\u0000\u0000"}"#
                    .into(),
            );
        }
        sandbox_agent::Answer::Json(
            r#"[{"name":"..","entryType":"directory"},{"name":"a/b","entryType":"file"},
                {"name":"x\u0000y","entryType":"file"},{"name":"","entryType":"file"},
                {"name":".","entryType":"directory"},{"name":"ok.txt","entryType":"file","size":2}]"#
                .into(),
        )
    });
    let fs = server.provider(1 << 20);
    let names: Vec<String> = fs
        .list("/x")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["ok.txt"]);
    let paths: Vec<String> = fs
        .walk("/x")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.path)
        .collect();
    assert_eq!(paths, ["d/ok"]);
}

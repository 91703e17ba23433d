//! The mount and the API agree: random operations applied alternately through the mount (plain
//! system calls) and through the socket API, checked against a reference model after every step,
//! both views at once: what the mount shows and what the API lists and reads.
//!
//! The rules behind both are the core's, one function each (read-only, hard links, path locks,
//! the journal; see docs/architecture.md); only the interfaces differ (the API's `write` creates
//! parents, the mount's `open` does not; a rename through the mount uses `RENAME_NOREPLACE` to
//! match the API's no-overwrite move), so the model (tests/support/fs_model.rs, shared with the
//! core's unit test) takes the adapter as an input. A view that lags behind a change made through
//! the other adapter fails the test: API changes invalidate the kernel's caches before the call
//! returns.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::json;
use wardfs::client::Client;
use wardfs::core::{EntryKind, ErrorCode, ListResult, ReadResult};

use crate::support::Daemon;

// The model shared with the core's test; it takes `EntryKind` and `ErrorCode` from here.
#[path = "../support/fs_model.rs"]
mod fs_model;

use fs_model::{disk_tree, Model, Node, Op, Outcome, Seen, Via, PATHS};

/// A random operation and the interface it goes through. Edits go through the API (the mount has
/// no such call); no flag is set: the mount has no `mkdir -p`, no edit of every occurrence, and
/// its rename with `RENAME_NOREPLACE` is the API's move without `overwrite`.
fn op() -> impl Strategy<Value = (Via, Op)> {
    let p = 0..PATHS.len();
    let via = prop_oneof![Just(Via::Mount), Just(Via::Api)];
    let op = prop_oneof![
        4 => (p.clone(), "[xy\n]{0,6}").prop_map(|(i, c)| Op::Write(i, c)),
        2 => p.clone().prop_map(Op::Read),
        1 => (p.clone(), prop::sample::select(vec!["x", "y", "\n"]), prop::sample::select(vec!["z", ""]))
            .prop_map(|(i, o, n)| Op::Edit(i, o, n, false)),
        2 => (p.clone(), any::<bool>()).prop_map(|(i, r)| Op::Delete(i, r)),
        3 => p.clone().prop_map(|i| Op::Mkdir(i, false)),
        2 => (p.clone(), p.clone()).prop_map(|(a, b)| Op::Move(a, b, false)),
        1 => prop::option::of(p).prop_map(Op::List),
    ];
    (via, op).prop_map(|(v, o)| match o {
        Op::Edit(..) => (Via::Api, o),
        _ => (v, o),
    })
}

/// The error code the API would give for an errno from the mount.
fn code_of(e: &std::io::Error) -> ErrorCode {
    match e.raw_os_error() {
        Some(libc::ENOENT) => ErrorCode::NotFound,
        Some(libc::EEXIST) => ErrorCode::Exists,
        Some(libc::ENOTDIR) => ErrorCode::NotDir,
        Some(libc::EISDIR) => ErrorCode::IsDir,
        Some(libc::ENOTEMPTY) => ErrorCode::NotEmpty,
        Some(libc::EINVAL) => ErrorCode::InvalidArgument,
        _ => panic!("unexpected error from the mount: {e}"),
    }
}

/// Runs an operation through the mount.
fn through_mount(ws: &Path, model: &Model, op: &Op) -> Outcome {
    let done = |r: std::io::Result<()>| r.map(|_| Seen::Done).map_err(|e| code_of(&e));
    match op {
        Op::Write(i, c) => done(fs::write(ws.join(PATHS[*i]), c)),
        Op::Read(i) => fs::read_to_string(ws.join(PATHS[*i]))
            .map(Seen::Text)
            .map_err(|e| code_of(&e)),
        // What a person would type: rm for a file, rmdir or rm -r for a directory (chosen by what
        // the model holds, so a view that disagrees fails on the syscall).
        Op::Delete(i, recursive) => {
            let p = ws.join(PATHS[*i]);
            done(match model.tree.get(PATHS[*i]) {
                Some(Node::Dir) if *recursive => fs::remove_dir_all(&p),
                Some(Node::Dir) => fs::remove_dir(&p),
                _ => fs::remove_file(&p),
            })
        }
        Op::Mkdir(i, false) => done(fs::create_dir(ws.join(PATHS[*i]))),
        Op::Move(a, b, false) => done(
            rustix::fs::renameat_with(
                rustix::fs::CWD,
                ws.join(PATHS[*a]),
                rustix::fs::CWD,
                ws.join(PATHS[*b]),
                rustix::fs::RenameFlags::NOREPLACE,
            )
            .map_err(std::io::Error::from),
        ),
        Op::List(i) => {
            let p = i.map(|i| ws.join(PATHS[i])).unwrap_or(ws.to_path_buf());
            let rd = fs::read_dir(&p).map_err(|e| code_of(&e))?;
            let mut out: Vec<(String, EntryKind)> = rd
                .map(|e| {
                    let e = e.unwrap();
                    let kind = if e.file_type().unwrap().is_dir() {
                        EntryKind::Dir
                    } else {
                        EntryKind::File
                    };
                    (e.file_name().into_string().unwrap(), kind)
                })
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(Seen::Listing(out))
        }
        Op::Edit(..) | Op::Exists(_) | Op::Mkdir(_, true) | Op::Move(_, _, true) => {
            unreachable!("not generated for the mount: {op:?}")
        }
    }
}

fn api_err(e: wardfs::client::ClientError) -> ErrorCode {
    e.code()
        .unwrap_or_else(|| panic!("the API call failed without a code: {e}"))
}

/// Runs an operation through the socket API.
async fn through_api(c: &Client, op: &Op) -> Outcome {
    let w = |i: usize| format!("/workspace/{}", PATHS[i]);
    let call = |route: &'static str, body: serde_json::Value| async move {
        c.post::<_, serde_json::Value>(route, &body)
            .await
            .map(|_| Seen::Done)
            .map_err(api_err)
    };
    match op {
        Op::Write(i, content) => {
            call("/v1/fs/write", json!({"path": w(*i), "content": content})).await
        }
        Op::Read(i) => c
            .post::<_, ReadResult>("/v1/fs/read", &json!({"path": w(*i)}))
            .await
            .map(|r| Seen::Text(r.content))
            .map_err(api_err),
        Op::Edit(i, old, new, false) => {
            call(
                "/v1/fs/edit",
                json!({"path": w(*i), "old": old, "new": new}),
            )
            .await
        }
        Op::Delete(i, recursive) => {
            call(
                "/v1/fs/delete",
                json!({"path": w(*i), "recursive": recursive}),
            )
            .await
        }
        Op::Mkdir(i, false) => call("/v1/fs/mkdir", json!({"path": w(*i)})).await,
        Op::Move(a, b, false) => call("/v1/fs/move", json!({"from": w(*a), "to": w(*b)})).await,
        Op::List(i) => {
            let path = i.map(w).unwrap_or_else(|| "/workspace".into());
            c.post::<_, ListResult>("/v1/fs/list", &json!({ "path": path }))
                .await
                .map(|l| {
                    let mut v: Vec<(String, EntryKind)> =
                        l.entries.into_iter().map(|e| (e.name, e.kind)).collect();
                    v.sort_by(|a, b| a.0.cmp(&b.0));
                    Seen::Listing(v)
                })
                .map_err(api_err)
        }
        Op::Edit(_, _, _, true) | Op::Mkdir(_, true) | Op::Move(_, _, true) | Op::Exists(_) => {
            unreachable!("not generated for the mount's test: {op:?}")
        }
    }
}

/// The tree as the API lists and reads it.
async fn api_tree(c: &Client) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let mut stack = vec![String::new()];
    while let Some(rel) = stack.pop() {
        let l: ListResult = c
            .post("/v1/fs/list", &json!({"path": format!("/workspace/{rel}")}))
            .await
            .unwrap();
        for e in l.entries {
            let r = if rel.is_empty() {
                e.name
            } else {
                format!("{rel}/{}", e.name)
            };
            if e.kind == EntryKind::Dir {
                stack.push(r.clone());
                out.insert(r, Node::Dir);
            } else {
                let f: ReadResult = c
                    .post("/v1/fs/read", &json!({"path": format!("/workspace/{r}")}))
                    .await
                    .unwrap();
                out.insert(r, Node::File(f.content));
            }
        }
    }
    out
}

#[test]
fn mount_and_api_agree_with_the_model_after_every_step() {
    let m = Daemon::mounted("");
    let ws = m.ws();
    let client = Client::new(&m.socket);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = std::cell::Cell::new(0usize);
    // The first failure, and what a case left behind for the next one before it: shrinking
    // reports a later, smaller case, which runs on whatever the failing one left.
    let first = std::cell::RefCell::new(None::<String>);
    let cases = std::cell::Cell::new(0usize);
    let result = runner.run(&prop::collection::vec(op(), 1..40), |ops| {
        // A fresh tree for each case, cleared through the mount.
        let case = cases.get();
        cases.set(case + 1);
        let _ = fs::metadata(ws.join(format!(".clearing-{case}")));
        crate::support::files::empty_dir(&ws);
        let _ = fs::metadata(ws.join(format!(".cleared-{case}")));
        let left = disk_tree(&m.workspace());
        if !left.is_empty() && first.borrow().is_none() {
            *first.borrow_mut() = Some(format!(
                "case {case}: cleared through the mount, the zone's directory still held {left:?}, the mount showing {:?}",
                disk_tree(&ws),
            ));
        }
        let run = || run_case(&ws, &client, &rt, &ops, &steps);
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
        if first.borrow().is_none() {
            let failed = match &res {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(p) => Some(format!("{:?}", p.downcast_ref::<String>())),
            };
            *first.borrow_mut() = failed.map(|e| format!("case {case} {ops:?}: {e}"));
        }
        res.unwrap_or_else(|p| std::panic::resume_unwind(p))
    });
    if let Err(e) = result {
        let first = first.borrow();
        panic!(
            "{e}\nthe first failure: {}\ndaemon log:\n{}",
            first.as_deref().unwrap_or("none"),
            m.log_text()
        );
    }
    eprintln!("{} steps through the mount and the API", steps.get());
    assert!(steps.get() > 500, "too few steps ran: {}", steps.get());
}

/// Runs the steps `ops` of one case, each checked against the model and both views after it.
fn run_case(
    ws: &Path,
    client: &Client,
    rt: &tokio::runtime::Runtime,
    ops: &[(Via, Op)],
    steps: &std::cell::Cell<usize>,
) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    for (n, (via, op)) in ops.iter().enumerate() {
        // The model does not predict a directory moved into itself through both interfaces.
        if op.moves_into_itself() {
            continue;
        }
        let before = model.clone();
        let expected = model.apply(*via, op);
        let got = match via {
            Via::Mount => through_mount(ws, &before, op),
            Via::Api => rt.block_on(through_api(client, op)),
        };
        steps.set(steps.get() + 1);
        prop_assert_eq!(
            &got,
            &expected,
            "step {} {:?} {:?} on {:?}",
            n,
            via,
            op,
            before.tree
        );
        let seen_mount = disk_tree(ws);
        prop_assert_eq!(
            &seen_mount,
            &model.tree,
            "the mount's view after step {} {:?} {:?}",
            n,
            via,
            op
        );
        let seen_api = rt.block_on(api_tree(client));
        prop_assert_eq!(
            &seen_api,
            &model.tree,
            "the API's view after step {} {:?} {:?}",
            n,
            via,
            op
        );
    }
    Ok(())
}

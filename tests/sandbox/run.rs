//! `wardfs run --sandbox` and `POST /v1/run` end to end: a real daemon (`--no-mount`) and a
//! real sandbox-agent (`AgentServer`: --token, --no-telemetry, 127.0.0.1), checked with
//! `std::fs` on both sides, the journal, the state database and the daemon's log.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wardfs::core::ErrorCode;

use crate::support::sandbox_agent::AgentServer;
use crate::support::Daemon;

const TOKEN: &str = "WARDFS_TEST_RUN_TOKEN";
/// Listed in the sandbox's `run_env`.
const SECRET: &str = "WARDFS_TEST_RUN_SECRET";
/// In the daemon's environment, not listed.
const UNLISTED: &str = "WARDFS_TEST_RUN_UNLISTED";

/// A daemon with sandbox `dev` on `server`; `extra` is appended to its config.
fn daemon(server: &AgentServer, secret: &str, unlisted: &str, extra: &str) -> Daemon {
    options(server, secret, unlisted, extra).start()
}

/// The options of [`daemon`].
fn options(
    server: &AgentServer,
    secret: &str,
    unlisted: &str,
    extra: &str,
) -> crate::support::daemon::Options {
    Daemon::options()
        .prefix("wardfs-run")
        .config(&format!(
            "[zones]\nroot = \"root\"\n{extra}\n[sandboxes.dev]\nprovider = \"sandbox-agent\"\nurl = \"{}\"\n\
             token_env = \"{TOKEN}\"\nroot = \"{}\"\nretries = 1\nretry_backoff_ms = 100\n\
             request_timeout_secs = 5\nrun_env = [\"{SECRET}\"]\n",
            server.url(),
            server.root()
        ))
        .hermetic()
        .envs(&[
            (TOKEN, server.token()),
            (SECRET, secret),
            (UNLISTED, unlisted),
        ])
        .append_log()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `wardfs run --sandbox dev ARGS…`; returns (exit code, stdout, stderr).
fn run(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["run", "--sandbox", "dev"];
    all.extend_from_slice(args);
    let out = d.cli(&all);
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

/// Runs `wardfs run --sandbox dev ARGS…` on a thread (see [`Daemon::cli_in_thread`]).
fn run_in_thread(d: &Daemon, args: &[&str]) -> std::thread::JoinHandle<std::process::Output> {
    let mut all = vec!["run", "--sandbox", "dev"];
    all.extend_from_slice(args);
    d.cli_in_thread(&all)
}

/// The journal's newest rows as JSON.
fn journal(d: &Daemon) -> Vec<Value> {
    let log: Value = serde_json::from_str(&d.cli_ok(&["--json", "log", "--limit", "200"])).unwrap();
    log["entries"].as_array().unwrap().clone()
}

/// Every byte of the files under `dir` (the state database, its WAL).
fn bytes_under(dir: &std::path::Path) -> Vec<u8> {
    let mut all = Vec::new();
    for e in walkdir(dir) {
        all.extend(std::fs::read(e).unwrap_or_default());
    }
    all
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn runs_pass_exit_codes_see_pushed_files_and_bring_changes_back() {
    let server = AgentServer::start();
    let secret = format!("s3cret-{}", std::process::id());
    let unlisted = format!("unlisted-{}", std::process::id());
    let d = daemon(&server, &secret, &unlisted, "");
    d.write("/workspace/in.txt", "hello from the api\n");
    d.write("/workspace/gone.txt", "to delete\n");

    // The file written through the API is pushed and seen; the exit code passes through;
    // stdout and stderr go to ours.
    let (code, out, err) = run(&d, &["--", "sh", "-c", "cat in.txt; echo oops >&2; exit 3"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(out, "hello from the api\n");
    assert!(err.contains("oops"), "{err}");
    assert_eq!(
        std::fs::read_to_string(server.work().join("in.txt")).unwrap(),
        "hello from the api\n"
    );

    // What the command writes and deletes comes back, journaled with the run.
    let (code, _, err) = run(
        &d,
        &[
            "--",
            "sh",
            "-c",
            "echo made > out.txt && mkdir -p d && echo deep > d/y.txt && rm gone.txt",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("out.txt")).unwrap(),
        "made\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("d/y.txt")).unwrap(),
        "deep\n"
    );
    assert!(!d.workspace().join("gone.txt").exists());
    assert!(err.contains("3 changes back from sandbox dev"), "{err}");
    let rows = journal(&d);
    let has = |op: &str, path: &str| {
        rows.iter()
            .any(|r| r["op"] == op && r["path"] == path && r["via"] == "sandbox")
    };
    assert!(
        has("write", "out.txt") && has("write", "d/y.txt") && has("delete", "gone.txt"),
        "{rows:?}"
    );
    let runs: Vec<&Value> = rows.iter().filter(|r| r["op"] == "sandbox-run").collect();
    assert_eq!(runs.len(), 2, "{rows:?}");
    let detail = runs[0]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("sandbox dev run ")
            && detail.contains("exit 0")
            && detail.contains("3 files changed")
            && detail.contains("rm gone.txt"),
        "{detail}"
    );
    assert!(runs[1]["detail"].as_str().unwrap().contains("exit 3"));

    // --cwd runs beneath the mirrored directory and cannot climb out of it.
    let (code, out, err) = run(&d, &["--cwd", "d", "--", "cat", "y.txt"]);
    assert_eq!((code, out.as_str()), (0, "deep\n"), "{err}");
    let (code, _, err) = run(&d, &["--cwd", "d/../..", "--", "true"]);
    assert_eq!(code, 125, "wardfs's own failure: {err}");
    assert!(err.contains("cwd") && err.contains("climbs out"), "{err}");

    // A listed secret reaches the command and appears nowhere else.
    let (code, out, err) = run(
        &d,
        &[
            "--env",
            SECRET,
            "--",
            "sh",
            "-c",
            &format!(
                "printf '%s' \"${SECRET}\" | cut -c1-7; printf 'len=%s\\n' \"${{#{SECRET}}}\"; \
                 echo \"whole=${SECRET}\"; echo \"err=${SECRET}\" >&2"
            ),
        ],
    );
    assert_eq!(code, 0, "{err}");
    // Printed whole, it is masked: on our stdout and stderr, and in what the daemon keeps.
    assert_eq!(out, format!("s3cret-\nlen={}\nwhole=***\n", secret.len()));
    assert!(err.contains("err=***") && !err.contains(&secret), "{err}");
    // An unlisted one is refused, named, its value never shown.
    let (code, _, err) = run(&d, &["--env", UNLISTED, "--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains(UNLISTED) && err.contains("run_env"), "{err}");
    assert!(!err.contains(&unlisted), "{err}");
    // The runs are listed, newest first, with what they changed.
    let runs: Value = serde_json::from_str(&d.cli_ok(&["--json", "runs", "dev"])).unwrap();
    let runs = runs["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4, "{runs:?}");
    assert_eq!(runs[0]["command"][0], "sh");
    assert_eq!(runs[3]["exit_code"], 3);
    assert_eq!(runs[2]["changed_total"], 3, "{runs:?}");
    let mut changed: Vec<&str> = runs[2]["changed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    changed.sort();
    assert_eq!(changed, ["d/y.txt", "gone.txt", "out.txt"]);
    assert_eq!(runs[1]["cwd"], "d");
    // With their output when asked: the secret masked there too.
    let with: Value = d.get("/v1/runs?sandbox=dev&limit=1&output=true");
    let last = &with["runs"][0];
    assert_eq!(
        last["stdout_tail"],
        format!("s3cret-\nlen={}\nwhole=***\n", secret.len())
    );
    assert_eq!(last["stderr_tail"], "err=***\n");
    assert!(
        runs[0].get("stdout_tail").is_none(),
        "not unless asked: {runs:?}"
    );
    let listed = d.cli_ok(&["runs"]);
    assert_eq!(listed.lines().count(), 4, "{listed}");
    assert!(
        listed.lines().nth(3).unwrap().contains("exit 3"),
        "{listed}"
    );
    let journal_text = d.cli_ok(&["--json", "log", "--limit", "1000"]);
    assert!(
        !journal_text.contains(&secret),
        "the journal holds the secret"
    );
    assert!(
        !d.log_text().contains(&secret),
        "the daemon's log holds the secret"
    );
    // The review page shows the latest runs, their output beside the files they brought back.
    let review = crate::review::Review::start(&d);
    let (code, page) = crate::review::answer_of(
        review.addr(),
        &format!(
            "GET /timeline?token={} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            review.token(),
            review.addr()
        ),
    );
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("Runs in sandboxes"), "{page}");
    assert!(
        page.contains("whole=***") && page.contains("err=***"),
        "{page}"
    );
    assert!(
        page.contains("/workspace/out.txt") && page.contains("exit 3"),
        "{page}"
    );
    assert!(!page.contains(&secret), "the page shows the secret");
    drop(review);
    let state = bytes_under(&d.dir.path().join("state"));
    assert!(!state.is_empty());
    assert!(
        !contains(&state, &secret),
        "the state database holds the secret"
    );
}

#[test]
fn deadlines_kill_the_command_one_run_at_a_time_and_output_is_capped() {
    let server = AgentServer::start();
    let d = daemon(&server, "x", "y", "[limits]\nrun_output_bytes = 65536\n");
    d.write("/workspace/keep.txt", "k\n");

    // A second run while one holds the sandbox is CONFLICT.
    let first = run_in_thread(
        &d,
        &["--no-sync", "--", "sh", "-c", "touch started; sleep 1.5"],
    );
    let until = Instant::now() + Duration::from_secs(5);
    while !server.work().join("started").exists() {
        assert!(Instant::now() < until, "the first run did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (code, _, err) = run(&d, &["--no-sync", "--", "true"]);
    let first = first.join().unwrap();
    assert_eq!(code, 125, "{err} / first: {first:?}");
    assert!(err.contains("one run per sandbox"), "{err}");
    assert!(first.status.success());

    // The deadline kills the remote process: it never gets to write.
    let t = Instant::now();
    let (code, _, err) = run(
        &d,
        &[
            "--timeout",
            "1",
            "--",
            "sh",
            "-c",
            "sleep 2; echo late > late.txt",
        ],
    );
    assert_eq!(code, 124, "{err}");
    assert!(err.contains("killed at its deadline"), "{err}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Must stay: past the moment the command would have written, had it run on; only time
    // shows a file does not come.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(!server.work().join("late.txt").exists());

    // A client that goes away (Ctrl-C) stops the remote process: it never gets to write.
    let mut cli = std::process::Command::new(crate::support::BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args([
            "run",
            "--sandbox",
            "dev",
            "--no-sync",
            "--",
            "sh",
            "-c",
            "touch begun; sleep 2; echo late > late2.txt",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(5);
    while !server.work().join("begun").exists() {
        assert!(Instant::now() < until, "the run did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Ctrl-C: the CLI asks the daemon to stop the command, reads how the run ended, exits 130.
    let t = Instant::now();
    sigint(cli.id());
    let status = cli.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Must stay: past the moment the command would have written (as above).
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !server.work().join("late2.txt").exists(),
        "the command ran on after Ctrl-C"
    );
    let last: Value = d.get("/v1/runs?limit=1");
    assert_eq!(last["runs"][0]["cancelled"], true, "{last}");

    // An endless output: streamed on, counted, only its tail kept; the daemon stays small.
    let before = rss_kib(d.pid(), "VmRSS:");
    let client = d.client();
    let mut streamed = 0usize;
    let mut exited = Value::Null;
    d.rt()
        .block_on(client.post_lines(
            "/v1/run",
            &json!({"sandbox": "dev", "command": ["yes", "0123456789abcdef"], "timeout_secs": 3, "no_sync": true}),
            |line| {
                let v: Value = serde_json::from_slice(line).unwrap();
                match v["event"].as_str() {
                    Some("stdout") => streamed += v["data"].as_str().unwrap().len(),
                    Some("exited") | Some("error") => exited = v,
                    _ => {}
                }
                ControlFlow::Continue(())
            },
        ))
        .unwrap();
    assert_eq!(exited["event"], "exited", "{exited}");
    assert_eq!(exited["timed_out"], true);
    let total = exited["stdout_bytes"].as_u64().unwrap();
    let tail = exited["stdout_tail"].as_str().unwrap();
    assert!(total > 4 * 65536, "{total}");
    assert!(tail.len() <= 65536, "{}", tail.len());
    assert!(
        tail.ends_with("0123456789abcdef\n") || tail.len() > 65000,
        "{}",
        tail.len()
    );
    assert!(
        streamed as u64 <= total && streamed > 65536,
        "{streamed} of {total}"
    );
    let peak = rss_kib(d.pid(), "VmHWM:");
    eprintln!("endless output: {total} bytes, {streamed} streamed; daemon RSS {before} KiB before, peak {peak} KiB");
    assert!(
        peak < before + 96 * 1024,
        "the daemon grew from {before} KiB to a peak of {peak} KiB"
    );
    let (code, msg) = d.err("/v1/run", json!({"sandbox": "dev", "command": []}));
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
}

/// Sends SIGINT (Ctrl-C) to process `pid`.
fn sigint(pid: u32) {
    let ok = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -INT {pid}");
}

/// Waits until `path` exists (the command got that far).
fn wait_for(path: &std::path::Path) {
    let until = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `wardfs --json run --sandbox dev ARGS…` and reads its lines until `started`; then
/// kills it (SIGKILL): the client died. Returns the run's id.
fn start_and_leave(d: &Daemon, args: &[&str]) -> String {
    use std::io::BufRead as _;
    let mut cli = std::process::Command::new(crate::support::BIN)
        .arg("--socket")
        .arg(&d.socket)
        .args(["--json", "run", "--sandbox", "dev"])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(cli.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    cli.kill().unwrap();
    cli.wait().unwrap();
    let v: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(v["event"], "started", "{v}");
    assert_eq!(v["seq"], 1, "{v}");
    v["run_id"].as_str().unwrap().to_string()
}

/// Reads `GET /v1/runs/{id}/events?after=AFTER` to its end: its lines.
fn follow(d: &Daemon, id: &str, after: u64) -> Vec<Value> {
    let mut lines = Vec::new();
    d.rt()
        .block_on(
            d.client()
                .get_lines(&format!("/v1/runs/{id}/events?after={after}"), |line| {
                    let v: Value = serde_json::from_slice(line).unwrap();
                    if v["event"] != "heartbeat" {
                        lines.push(v);
                    }
                    ControlFlow::Continue(())
                }),
        )
        .unwrap();
    lines
}

#[test]
fn a_run_outlives_its_client_for_a_while_and_is_taken_up_again_by_its_id() {
    let server = AgentServer::start();
    let d = daemon(&server, "x", "y", "[limits]\nrun_reconnect_secs = 2\n");

    // The client goes away after `started`; the command runs on, and a client that comes
    // back with the id reads the rest from where it was, to the end.
    let id = start_and_leave(
        &d,
        &[
            "--",
            "sh",
            "-c",
            "sleep 0.5; echo one; sleep 1; echo two > two.txt; echo two",
        ],
    );
    let lines = follow(&d, &id, 1);
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events.first(), Some(&"stdout"), "{lines:?}");
    assert_eq!(events.last(), Some(&"exited"), "{lines:?}");
    let out: String = lines
        .iter()
        .filter(|l| l["event"] == "stdout")
        .map(|l| l["data"].as_str().unwrap())
        .collect();
    assert_eq!(out, "one\ntwo\n");
    let exited = lines.last().unwrap();
    assert_eq!(exited["exit_code"], 0, "{exited}");
    assert_eq!(exited["cancelled"], false, "{exited}");
    assert_eq!(exited["changed"], json!(["two.txt"]), "{exited}");
    assert!(d.workspace().join("two.txt").exists());
    // Its lines are numbered in order; the same again from the start, through the CLI too.
    let seqs: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1) && seqs[0] == 2,
        "{seqs:?}"
    );
    let again = d.cli(&["runs", "--follow", &id]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), "one\ntwo\n");

    // Nobody comes back: the command is stopped after limits.run_reconnect_secs.
    let id = start_and_leave(
        &d,
        &[
            "--no-sync",
            "--",
            "sh",
            "-c",
            "sleep 5; echo late > late.txt",
        ],
    );
    // Must stay: past the moment the command would have written (as above).
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        !server.work().join("late.txt").exists(),
        "the command ran on with nobody following it: {}",
        d.log_text()
    );
    let lines = follow(&d, &id, 0);
    let exited = lines.last().unwrap();
    assert_eq!(exited["event"], "exited", "{lines:?}");
    assert_eq!(exited["cancelled"], true, "{exited}");

    // Cancel by id; an id not kept is NOT_FOUND, named.
    let id = start_and_leave(&d, &["--no-sync", "--", "sleep", "30"]);
    let t = Instant::now();
    let r = d.ok(&format!("/v1/runs/{id}/cancel"), json!({}));
    assert_eq!(r["cancelled"], true, "{r}");
    let lines = follow(&d, &id, 0);
    assert_eq!(lines.last().unwrap()["cancelled"], true, "{lines:?}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let r = d.ok(&format!("/v1/runs/{id}/cancel"), json!({}));
    assert_eq!(r["cancelled"], false, "ended already: {r}");
    // A hostile `after`: past the end, only the end; not a number, refused.
    let lines = follow(&d, &id, u64::MAX);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "exited", "{lines:?}");
    let (code, msg) = d
        .api()
        .get(&format!("/v1/runs/{id}/events?after=-1"))
        .unwrap_err();
    assert_eq!(code, Some(ErrorCode::InvalidArgument), "{msg}");
    let (code, msg) = d.api().get("/v1/runs/nope-1-0/events").unwrap_err();
    assert_eq!(code, Some(ErrorCode::NotFound), "{msg}");
    assert!(msg.contains("nope-1-0"), "{msg}");
    let out = d.cli(&["runs", "--follow", "nope-1-0"]);
    assert_eq!(out.status.code(), Some(125), "{out:?}");
}

#[test]
fn renames_and_conflicts_come_back_parallel_runs_share_and_a_dying_sandbox_is_named() {
    let mut server = AgentServer::start();
    let d = options(&server, "x", "y", "").mount().start();
    let mnt = d.dir.path().join("mnt/workspace");
    d.write("/workspace/a.txt", "a\n");
    d.write("/workspace/c.txt", "base\n");
    let (code, _, err) = run(&d, &["--", "true"]);
    assert_eq!(code, 0, "{err}");

    // An edit through the mount is what the command sees; what it writes, the mount reads.
    std::fs::write(mnt.join("m.txt"), "through the mount\n").unwrap();
    let (code, out, err) = run(&d, &["--", "sh", "-c", "cat m.txt; echo back > m2.txt"]);
    assert_eq!((code, out.as_str()), (0, "through the mount\n"), "{err}");
    assert_eq!(
        std::fs::read_to_string(mnt.join("m2.txt")).unwrap(),
        "back\n"
    );

    // A rename in the sandbox comes back as the new name, the old one gone.
    let (code, _, err) = run(&d, &["--", "mv", "a.txt", "b.txt"]);
    assert_eq!(code, 0, "{err}");
    assert!(!d.workspace().join("a.txt").exists());
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("b.txt")).unwrap(),
        "a\n"
    );

    // c.txt changed on both sides during a run: the workspace keeps its own, the sandbox's is
    // saved beside it, and the run says so.
    let racing = run_in_thread(
        &d,
        &[
            "--json",
            "--",
            "sh",
            "-c",
            "touch begun; while [ ! -e go ]; do sleep 0.02; done; echo sandbox > c.txt",
        ],
    );
    wait_for(&server.work().join("begun"));
    d.write("/workspace/c.txt", "workspace\n");
    std::fs::write(server.work().join("go"), "").unwrap();
    let out = racing.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let exited: Value = text(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["event"] == "exited")
        .unwrap();
    let conflicts = exited["conflicts"].as_array().unwrap();
    assert_eq!(conflicts.len(), 1, "{exited}");
    assert_eq!(conflicts[0]["path"], "c.txt", "{exited}");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("c.txt")).unwrap(),
        "workspace\n"
    );
    let copy = conflicts[0]["remote_copy"].as_str().unwrap();
    assert_eq!(
        std::fs::read_to_string(d.workspace().join(copy)).unwrap(),
        "sandbox\n"
    );

    // Two --parallel runs hold the sandbox together; a run alone is still refused meanwhile.
    let slow = run_in_thread(
        &d,
        &[
            "--parallel",
            "--no-sync",
            "--",
            "sh",
            "-c",
            "touch p1; while [ ! -e p2 ]; do sleep 0.02; done",
        ],
    );
    wait_for(&server.work().join("p1"));
    let (code, _, err) = run(&d, &["--no-sync", "--", "true"]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("--parallel"), "{err}");
    let (code, _, err) = run(&d, &["--parallel", "--no-sync", "--", "touch", "p2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(slow.join().unwrap().status.code(), Some(0));

    // The sandbox dies while the command runs: a clear error, exit 125, and the workspace as
    // it was (nothing pulled).
    let before: Vec<_> = walkdir(&d.workspace());
    let dying = run_in_thread(&d, &["--", "sh", "-c", "touch dying; sleep 30"]);
    wait_for(&server.work().join("dying"));
    server.kill();
    let out = dying.join().unwrap();
    assert_eq!(out.status.code(), Some(125), "{out:?}");
    let err = text(&out.stderr);
    assert!(err.contains("sandbox \"dev\""), "{err}");
    assert_eq!(walkdir(&d.workspace()), before, "the workspace changed");
    assert!(!d.workspace().join("dying").exists());
}

/// A line of /proc/PID/status in KiB.
fn rss_kib(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

//! Provisioned sandboxes end to end: a real daemon with `[sandboxes.NAME] provider = "local"`
//! makes, pauses, resumes and destroys real local sandboxes (bubblewrap namespaces, the real
//! sandbox-agent inside with --token and --no-telemetry, a loopback-only network of its own),
//! driven through the CLI; what happened is checked from the host with a second provider on
//! the daemon's state directory, and in the journal (`/v1/log?zone=sandboxes`). Daemons are
//! also killed mid-create and mid-resume (at gates of the debug daemon), and sandboxes killed
//! from outside. Every sandbox left is destroyed when the test's [`Sandboxes`]
//! guard drops, also when the test panics or the daemon was killed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use wardfs::core::ErrorCode;
use wardfs::sandbox::provision::local::{LocalConfig, LocalProvisioner};
use wardfs::sandbox::provision::{ProviderState, Provisioner, SandboxSpec};
use wardfs::sandbox::{SandboxAgent, SandboxFs};

use wardfs::sandbox::provision::local::Proc;

use crate::support::gates::Gates;
use crate::support::sandbox_agent::{agent_binary, require_loopback_only};
use crate::support::Daemon;

/// The daemon's local provider state, seen from the test; destroys every sandbox in it on drop.
struct Sandboxes {
    dir: PathBuf,
}

impl Sandboxes {
    fn of(d: &Daemon) -> Sandboxes {
        Sandboxes {
            dir: d.dir.path().join("state/provision/local"),
        }
    }

    /// A second provider on the daemon's state (its own bridges, the same sandboxes).
    fn provider(&self) -> LocalProvisioner {
        let mut config = LocalConfig::new(&self.dir);
        config.agent_bin = Some(agent_binary());
        LocalProvisioner::open(config).expect("open the local provider")
    }

    /// The ids of the sandboxes on disk.
    fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(self.dir.join("sandboxes"))
            .map(|r| {
                r.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }

    fn state(&self, id: &str) -> ProviderState {
        rt().block_on(self.provider().state(id)).expect("state")
    }
}

impl Drop for Sandboxes {
    fn drop(&mut self) {
        if !self.dir.exists() {
            return;
        }
        let p = self.provider();
        for id in self.ids() {
            let _ = p.destroy_blocking(&id, false);
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Starts a daemon (sandboxed zones, not mounted) with the sandboxes `sections`.
fn daemon(sections: &str) -> Daemon {
    daemon_with(sections, None)
}

/// [`daemon`], with the test gates `gates` armable.
fn daemon_with(sections: &str, gates: Option<&Gates>) -> Daemon {
    require_loopback_only();
    let mut o = Daemon::options()
        .prefix("wardfs-prov")
        .config(&format!("[zones]\nroot = \"root\"\n{sections}"))
        .append_log();
    if let Some(g) = gates {
        let (key, dir) = g.env();
        o = o.env(key, &dir);
    }
    o.start()
}

/// The lifecycle rows of sandbox `name` in the journal, oldest first: `(op, detail)`.
fn lifecycle(d: &Daemon, name: &str) -> Vec<(String, String)> {
    let log = d.get("/v1/log?zone=sandboxes&limit=1000");
    let mut rows: Vec<(String, String)> = log["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries in {log}"))
        .iter()
        .filter(|e| e["path"] == name)
        .map(|e| {
            assert_eq!(e["zone"], "sandboxes", "{e}");
            (
                e["op"].as_str().unwrap().to_string(),
                e["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    rows.reverse();
    rows
}

/// Whether the journal has a row `op` for `name` whose detail contains `needle`.
fn journaled(d: &Daemon, name: &str, op: &str, needle: &str) -> bool {
    lifecycle(d, name)
        .iter()
        .any(|(o, detail)| o == op && detail.contains(needle))
}

/// Waits until `id`'s provider state is `want`.
fn wait_state(sbx: &Sandboxes, id: &str, want: ProviderState, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = sbx.state(id);
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sandbox {id} is {now:?}, not {want:?}, after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `[sandboxes.<name>] provider = "local"` with the test's sandbox-agent and `extra` keys.
fn local(name: &str, extra: &str) -> String {
    format!(
        "[sandboxes.{name}]\nprovider = \"local\"\nagent_bin = \"{}\"\n{extra}\n",
        agent_binary().display()
    )
}

/// Returns the sandbox `name` as `wardfs sandbox list --json` shows it.
fn listed(d: &Daemon, name: &str) -> Value {
    let list = d.cli_json(&["sandbox", "list"]);
    list["sandboxes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no sandbox {name} in {list}"))
        .clone()
}

/// Waits until `name`'s status is `want` (the cleanup loop or the start-up reconcile acts).
fn wait_status(d: &Daemon, name: &str, want: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let s = listed(d, name);
        if s["status"] == want {
            return s;
        }
        if Instant::now() > deadline {
            panic!(
                "sandbox {name} is not {want} after {within:?}: {s}\n{}",
                d.log_text()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Reads `path` inside sandbox `id` through a handle of its own (a second bridge).
fn read_inside(sbx: &Sandboxes, id: &str, path: &str) -> Vec<u8> {
    let rt = rt();
    let p = sbx.provider();
    rt.block_on(async {
        let h = p.resume(id).await.expect("resume for a handle");
        let fs = SandboxAgent::with_token(&h.agent_config(), Some(h.token.clone())).unwrap();
        fs.read(path)
            .await
            .expect("read through the handle")
            .to_vec()
    })
}

#[test]
fn a_mirror_push_creates_the_sandbox_and_the_cli_pauses_resumes_and_destroys_it() {
    let d = daemon(&local("dev", ""));
    let sbx = Sandboxes::of(&d);
    let before = listed(&d, "dev");
    assert_eq!(before["status"], "creating", "{before}");
    assert_eq!(before["provider"], "local");
    assert!(before["provider_id"].is_null(), "{before}");
    assert!(sbx.ids().is_empty(), "nothing is made before first use");

    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/src/hello.txt", "content": "hello\n"}),
    );
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "{pushed}");
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "{dev}");
    assert_eq!(dev["attached"], true, "{dev}");
    assert!(
        dev["url"]
            .as_str()
            .unwrap()
            .starts_with("http://127.0.0.1:"),
        "{dev}"
    );
    let id = dev["provider_id"].as_str().expect("an id").to_string();
    assert_eq!(sbx.ids(), std::slice::from_ref(&id));
    assert_eq!(sbx.state(&id), ProviderState::Running);
    assert_eq!(
        read_inside(&sbx, &id, "/workspace/src/hello.txt"),
        b"hello\n"
    );
    // The token is nowhere on the daemon's side of the disk, nor in its log.
    let written = String::from_utf8_lossy(&d.everything_written()).into_owned();
    let token = std::fs::read_to_string(sbx.dir.join("sandboxes").join(&id).join("token")).unwrap();
    let state_db = std::fs::read(d.dir.path().join("state/state.db")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&state_db).contains(token.trim()),
        "the token reached the state database"
    );
    assert!(
        !d.log_text().contains(token.trim()),
        "the token reached the log"
    );
    drop(written);

    let paused = d.cli_json(&["sandbox", "pause", "dev"]);
    assert_eq!(paused["status"], "paused", "{paused}");
    assert_eq!(paused["attached"], false, "{paused}");
    assert!(paused["paused_at"].as_i64().is_some(), "{paused}");
    assert_eq!(sbx.state(&id), ProviderState::Paused);

    // A use resumes it: the same sandbox, a fresh handle.
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/src/two.txt", "content": "two\n"}),
    );
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "{pushed}");
    let dev = listed(&d, "dev");
    assert_eq!(
        (dev["status"].as_str(), dev["provider_id"].as_str()),
        (Some("active"), Some(id.as_str())),
        "{dev}"
    );
    assert!(dev["paused_at"].is_null(), "{dev}");

    d.cli_json(&["sandbox", "pause", "dev"]);
    let resumed = d.cli_json(&["sandbox", "resume", "dev"]);
    assert_eq!(resumed["status"], "active", "{resumed}");
    assert_eq!(sbx.state(&id), ProviderState::Running);

    // Creating one that exists is refused, and says what to do.
    let out = d.cli(&["sandbox", "create", "dev"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("already has a sandbox") && err.contains("destroy"),
        "{err}"
    );

    let destroyed = d.cli_json(&["sandbox", "destroy", "dev"]);
    assert_eq!(destroyed["status"], "destroyed", "{destroyed}");
    assert!(destroyed["provider_id"].is_null(), "{destroyed}");
    assert_eq!(sbx.state(&id), ProviderState::Missing);
    assert!(sbx.ids().is_empty(), "{:?}", sbx.ids());
    let (code, msg) = d.err("/v1/sandboxes/pause", json!({"name": "dev"}));
    assert_eq!(code, ErrorCode::Conflict, "{msg}");
    assert!(msg.contains("no sandbox to pause"), "{msg}");

    // `create` makes a new one now; an attached sandbox has no lifecycle to drive.
    let created = d.cli_json(&["sandbox", "create", "dev", "--provider", "local"]);
    assert_eq!(created["status"], "active", "{created}");
    let id2 = created["provider_id"].as_str().unwrap().to_string();
    assert_ne!(id2, id);
    assert_eq!(sbx.ids(), [id2]);
    let (code, msg) = d.err(
        "/v1/sandboxes/create",
        json!({"name": "dev", "provider": "daytona"}),
    );
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
}

#[test]
fn an_idle_sandbox_is_paused_and_a_paused_one_destroyed_after_its_ttl() {
    let d = daemon(&local(
        "dev",
        "idle_pause_minutes = 0.05\npaused_ttl_minutes = 0.05",
    ));
    let sbx = Sandboxes::of(&d);
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/a.txt", "content": "a"}),
    );
    d.cli_json(&["mirror", "push", "dev"]);
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "{dev}");
    assert_eq!(dev["idle_pause_s"], 3, "{dev}");
    assert_eq!(dev["paused_ttl_s"], 3, "{dev}");
    let id = dev["provider_id"].as_str().unwrap().to_string();

    let started = Instant::now();
    let paused = wait_status(&d, "dev", "paused", Duration::from_secs(15));
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "paused too early"
    );
    assert_eq!(
        paused["provider_id"].as_str(),
        Some(id.as_str()),
        "{paused}"
    );
    assert_eq!(sbx.state(&id), ProviderState::Paused);

    let gone = wait_status(&d, "dev", "destroyed", Duration::from_secs(15));
    assert!(gone["provider_id"].is_null(), "{gone}");
    assert_eq!(sbx.state(&id), ProviderState::Missing);
    let log = d.log_text();
    assert!(
        log.contains("sandbox paused") && log.contains("idle"),
        "{log}"
    );
    assert!(log.contains("sandbox destroyed"), "{log}");

    // The next use makes a new one.
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "{pushed}");
    assert_eq!(listed(&d, "dev")["status"], "active");
}

#[test]
fn a_restarted_daemon_adopts_what_runs_and_marks_what_is_gone() {
    let mut d = daemon(&format!("{}{}", local("dev", ""), local("gone", "")));
    let sbx = Sandboxes::of(&d);
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/a.txt", "content": "a"}),
    );
    d.cli_json(&["mirror", "push", "dev"]);
    d.cli_json(&["sandbox", "create", "gone"]);
    let dev_id = listed(&d, "dev")["provider_id"]
        .as_str()
        .unwrap()
        .to_string();
    let gone_id = listed(&d, "gone")["provider_id"]
        .as_str()
        .unwrap()
        .to_string();

    d.crash();
    // Behind the daemon's back: one sandbox destroyed, one made for no session.
    let p = sbx.provider();
    p.destroy_blocking(&gone_id, false).unwrap();
    let stray = rt()
        .block_on(p.create(&SandboxSpec {
            name: "stray".into(),
            ..SandboxSpec::default()
        }))
        .expect("create a stray sandbox");
    drop(p);
    assert_eq!(
        sbx.state(&dev_id),
        ProviderState::Running,
        "it outlives the daemon"
    );

    d.respawn();
    let gone = wait_status(&d, "gone", "destroyed", Duration::from_secs(20));
    assert!(gone["provider_id"].is_null(), "{gone}");
    assert!(
        gone["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("no longer has it"),
        "{gone}"
    );
    let dev = wait_status(&d, "dev", "active", Duration::from_secs(20));
    assert_eq!(
        dev["provider_id"].as_str(),
        Some(dev_id.as_str()),
        "adopted: {dev}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while sbx.ids().contains(&stray.id) {
        assert!(
            Instant::now() < deadline,
            "the stray sandbox is left: {}",
            d.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // A use of the adopted sandbox gets a fresh handle (the old token died with the daemon).
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/b.txt", "content": "b"}),
    );
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "only the new file: {pushed}");
    assert_eq!(
        listed(&d, "dev")["provider_id"].as_str(),
        Some(dev_id.as_str())
    );
    assert_eq!(read_inside(&sbx, &dev_id, "/workspace/b.txt"), b"b");
}

#[test]
fn a_failed_create_names_the_key_and_leaves_nothing_behind() {
    let d = daemon(&format!(
        "{}{}",
        "[sandboxes.nobin]\nprovider = \"local\"\nagent_bin = \"/no/such/sandbox-agent\"\n",
        local("dev", "")
    ));
    let sbx = Sandboxes::of(&d);
    let out = d.cli(&["sandbox", "create", "nobin"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sandboxes.nobin.agent_bin") && err.contains("/no/such/sandbox-agent"),
        "{err}"
    );
    let nobin = listed(&d, "nobin");
    assert_eq!(nobin["status"], "error", "{nobin}");
    assert!(nobin["provider_id"].is_null(), "{nobin}");
    assert!(
        nobin["last_error"]
            .as_str()
            .unwrap()
            .contains("sandboxes.nobin.agent_bin"),
        "{nobin}"
    );
    // A push to it fails the same way, and leaves the zone's manifest alone.
    let (code, msg) = d.err("/v1/mirror/push", json!({"sandbox": "nobin"}));
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");

    // A create that fails inside the provider (a snapshot that does not exist) leaves no
    // sandbox, and the session says why.
    let out = d.cli(&["sandbox", "create", "dev", "--snapshot", "no-such-snapshot"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no-such-snapshot"), "{err}");
    assert!(sbx.ids().is_empty(), "left behind: {:?}", sbx.ids());
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "error", "{dev}");
    assert!(dev["provider_id"].is_null(), "{dev}");
    // A hostile name never reaches the provider.
    let (code, msg) = d.err(
        "/v1/sandboxes/create",
        json!({"name": "dev", "volume": "../../etc"}),
    );
    assert_eq!(code, ErrorCode::InvalidArgument, "{msg}");
    assert!(msg.contains("volume"), "{msg}");
    // And the next create, with what the config says, works.
    let created = d.cli_json(&["sandbox", "create", "dev"]);
    assert_eq!(created["status"], "active", "{created}");
}

#[test]
fn a_zone_on_a_provisioned_sandbox_makes_nothing_before_its_first_use() {
    let d = daemon(&format!(
        "[zones.workspace]\nsandbox = \"dev\"\n{}",
        local("dev", "")
    ));
    let sbx = Sandboxes::of(&d);
    assert!(sbx.ids().is_empty(), "made at start: {:?}", sbx.ids());
    assert!(listed(&d, "dev")["provider_id"].is_null());
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/sub/a.txt", "content": "a\n"}),
    );
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "{dev}");
    let id = dev["provider_id"].as_str().unwrap().to_string();
    assert_eq!(sbx.ids(), std::slice::from_ref(&id));
    assert_eq!(read_inside(&sbx, &id, "/workspace/sub/a.txt"), b"a\n");
    // The zone is served from the sandbox: a mirror of it is refused, naming why.
    let (code, msg) = d
        .call("/v1/mirror/push", json!({"sandbox": "dev"}))
        .unwrap_err();
    assert_eq!(code, ErrorCode::ZoneUnavailable, "{msg}");
}

#[test]
fn a_zone_served_from_a_provisioned_sandbox_makes_it_on_first_use_and_resumes_it() {
    require_loopback_only();
    let d = Daemon::options()
        .prefix("wardfs-prov")
        .mount()
        .extra(&format!(
            "[zones.workspace]\nsandbox = \"dev\"\nattr_ttl_ms = 200\n{}",
            local("dev", "idle_pause_minutes = 0.05")
        ))
        .append_log()
        .start();
    let sbx = Sandboxes::of(&d);
    // The mount's first look at /workspace (the harness waits for it) made the sandbox, once.
    // A write through the API goes into it.
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/hello.txt", "content": "hello\n"}),
    );
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "{dev}");
    let id = dev["provider_id"].as_str().unwrap().to_string();
    assert_eq!(sbx.ids(), std::slice::from_ref(&id));
    assert_eq!(read_inside(&sbx, &id, "/workspace/hello.txt"), b"hello\n");
    // The mount reads it back and writes into the same sandbox.
    let ws = d.ws();
    assert_eq!(
        std::fs::read_to_string(ws.join("hello.txt")).unwrap(),
        "hello\n"
    );
    std::fs::write(ws.join("from-mount.txt"), "through the mount\n").unwrap();
    assert_eq!(
        read_inside(&sbx, &id, "/workspace/from-mount.txt"),
        b"through the mount\n"
    );

    // Paused by hand, the next read through the API resumes the same sandbox.
    d.cli_json(&["sandbox", "pause", "dev"]);
    assert_eq!(listed(&d, "dev")["status"], "paused");
    assert_eq!(sbx.state(&id), ProviderState::Paused);
    let r = d.ok("/v1/fs/read", json!({"path": "/workspace/hello.txt"}));
    assert_eq!(r["content"], "hello\n", "{r}");
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "{dev}");
    assert_eq!(dev["provider_id"].as_str(), Some(id.as_str()), "{dev}");
    assert_eq!(sbx.state(&id), ProviderState::Running);

    // A zone in use keeps its sandbox running past the idle pause (3 s)...
    let busy = Instant::now();
    while busy.elapsed() < Duration::from_secs(6) {
        d.ok("/v1/fs/read", json!({"path": "/workspace/hello.txt"}));
        std::thread::sleep(Duration::from_millis(300));
    }
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "paused while in use: {dev}");
    // ...and an idle one gets it paused; the next use (through the mount) resumes it.
    wait_status(&d, "dev", "paused", Duration::from_secs(15));
    assert_eq!(sbx.state(&id), ProviderState::Paused);
    assert_eq!(
        std::fs::read_to_string(ws.join("from-mount.txt")).unwrap(),
        "through the mount\n"
    );
    let dev = listed(&d, "dev");
    assert_eq!(dev["status"], "active", "{dev}");
    assert_eq!(dev["provider_id"].as_str(), Some(id.as_str()), "{dev}");
    let log = d.log_text();
    assert!(
        log.contains("sandbox paused") && log.contains("idle"),
        "{log}"
    );
    assert!(log.contains("sandbox resumed"), "{log}");
}

#[test]
fn a_daemon_killed_mid_create_and_mid_resume_is_reconciled_at_restart() {
    let gates = Gates::new();
    let mut d = daemon_with(&local("dev", ""), Some(&gates));
    let sbx = Sandboxes::of(&d);
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/a.txt", "content": "a"}),
    );

    // Mid-create: the provider has started the tree; the daemon has not recorded it.
    gates.arm("local-sandbox-starting");
    let create = d.cli_in_thread(&["sandbox", "create", "dev"]);
    gates.wait_held("local-sandbox-starting", Duration::from_secs(60));
    let ids = sbx.ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let id = ids[0].clone();
    let mid = listed(&d, "dev");
    assert_eq!(mid["status"], "creating", "{mid}");
    assert!(mid["provider_id"].is_null(), "not yet recorded: {mid}");
    // The tree comes up on its own while the daemon waits.
    wait_state(&sbx, &id, ProviderState::Running, Duration::from_secs(30));
    d.crash();
    gates.release("local-sandbox-starting");
    let out = create.join().unwrap();
    assert!(
        !out.status.success(),
        "the create's client saw the daemon die: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );

    d.respawn();
    let dev = wait_status(&d, "dev", "active", Duration::from_secs(30));
    assert_eq!(
        dev["provider_id"].as_str(),
        Some(id.as_str()),
        "the sandbox made for the name is adopted, not made twice: {dev}"
    );
    assert!(
        journaled(&d, "dev", "sandbox-adopted", &id),
        "{:?}",
        lifecycle(&d, "dev")
    );
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "{pushed}");
    assert_eq!(
        sbx.ids(),
        std::slice::from_ref(&id),
        "one sandbox, no stray"
    );
    assert_eq!(read_inside(&sbx, &id, "/workspace/a.txt"), b"a");

    // Mid-resume: thawed by the provider, the session still `resuming`.
    let paused = d.cli_json(&["sandbox", "pause", "dev"]);
    assert_eq!(paused["status"], "paused", "{paused}");
    assert_eq!(sbx.state(&id), ProviderState::Paused);
    gates.arm("local-sandbox-thawed");
    let resume = d.cli_in_thread(&["sandbox", "resume", "dev"]);
    gates.wait_held("local-sandbox-thawed", Duration::from_secs(60));
    assert_eq!(listed(&d, "dev")["status"], "resuming");
    assert_eq!(sbx.state(&id), ProviderState::Running, "thawed");
    d.crash();
    gates.release("local-sandbox-thawed");
    let out = resume.join().unwrap();
    assert!(
        !out.status.success(),
        "the resume's client saw the daemon die: {}{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        d.log_text()
    );

    d.respawn();
    let dev = wait_status(&d, "dev", "active", Duration::from_secs(30));
    assert_eq!(dev["provider_id"].as_str(), Some(id.as_str()), "{dev}");
    assert!(
        journaled(&d, "dev", "sandbox-adopted", "was resuming"),
        "{:?}",
        lifecycle(&d, "dev")
    );
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/b.txt", "content": "b"}),
    );
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "only the new file: {pushed}");
    assert_eq!(read_inside(&sbx, &id, "/workspace/b.txt"), b"b");
    assert_eq!(sbx.ids(), [id]);
}

#[test]
fn a_sandbox_killed_from_outside_is_marked_down_then_resumed_on_next_use() {
    // A short idle pause makes the cleanup loop run every 3 s; the sandbox is used again
    // before it would be paused for idleness.
    let d = daemon(&local("dev", "idle_pause_minutes = 0.2"));
    let sbx = Sandboxes::of(&d);
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/a.txt", "content": "a"}),
    );
    d.cli_json(&["mirror", "push", "dev"]);
    let id = listed(&d, "dev")["provider_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(journaled(&d, "dev", "sandbox-created", &id));

    // The server inside dies (the OOM killer, a crash): the whole tree ends with it.
    let p = sbx.provider();
    let agent: Vec<Proc> = p
        .processes(&id)
        .into_iter()
        .filter(|proc| {
            String::from_utf8_lossy(&proc.cmdline()).contains("sandbox-agent")
                && !String::from_utf8_lossy(&proc.cmdline()).contains("/bin/sh")
        })
        .collect();
    assert!(
        !agent.is_empty(),
        "no sandbox-agent among {:?}",
        p.processes(&id)
    );
    for proc in &agent {
        proc.signal(libc::SIGKILL);
    }
    drop(p);
    wait_state(&sbx, &id, ProviderState::Stopped, Duration::from_secs(10));

    let down = wait_status(&d, "dev", "paused", Duration::from_secs(10));
    assert!(
        down["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("stopped outside wardfs"),
        "{down}"
    );
    assert_eq!(down["attached"], false, "{down}");
    assert_eq!(down["provider_id"].as_str(), Some(id.as_str()), "{down}");
    assert!(journaled(&d, "dev", "sandbox-down", &id));

    // The next use resumes it: the same sandbox, its volume as it was.
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/b.txt", "content": "b"}),
    );
    let pushed = d.cli_json(&["mirror", "push", "dev"]);
    assert_eq!(pushed["files_sent"], 1, "only the new file: {pushed}");
    let dev = listed(&d, "dev");
    assert_eq!(
        (dev["status"].as_str(), dev["provider_id"].as_str()),
        (Some("active"), Some(id.as_str())),
        "{dev}"
    );
    assert_eq!(sbx.state(&id), ProviderState::Running);
    assert_eq!(read_inside(&sbx, &id, "/workspace/a.txt"), b"a");
    assert!(journaled(&d, "dev", "sandbox-resumed", "was paused"));
    let ops: Vec<String> = lifecycle(&d, "dev").into_iter().map(|(op, _)| op).collect();
    assert_eq!(
        ops,
        ["sandbox-created", "sandbox-down", "sandbox-resumed"],
        "the journal tells the sandbox's life in order"
    );
}

#[test]
fn a_run_makes_the_sandbox_on_first_use_and_resumes_a_paused_one() {
    let d = daemon(&local("dev", ""));
    let sbx = Sandboxes::of(&d);
    assert!(sbx.ids().is_empty());
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/in.txt", "content": "from the workspace\n"}),
    );
    let run = |cmd: &str| {
        let out = d.cli(&["run", "--sandbox", "dev", "--", "sh", "-c", cmd]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    // The first run makes the sandbox, pushes, runs and pulls back.
    let (code, out, err) = run("cat in.txt; echo made > out.txt; exit 7");
    assert_eq!(code, Some(7), "{err}");
    assert_eq!(out, "from the workspace\n");
    assert_eq!(
        std::fs::read_to_string(d.workspace().join("out.txt")).unwrap(),
        "made\n"
    );
    let id = listed(&d, "dev")["provider_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(sbx.state(&id), ProviderState::Running);

    // Paused, it is resumed by the next run, which sees the workspace's latest.
    d.cli_json(&["sandbox", "pause", "dev"]);
    assert_eq!(sbx.state(&id), ProviderState::Paused);
    d.ok(
        "/v1/fs/write",
        json!({"path": "/workspace/in.txt", "content": "edited\n"}),
    );
    let (code, out, err) = run("cat in.txt");
    assert_eq!((code, out.as_str()), (Some(0), "edited\n"), "{err}");
    assert_eq!(sbx.state(&id), ProviderState::Running);
    assert_eq!(sbx.ids(), [id], "the same sandbox, resumed");
}

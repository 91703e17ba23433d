//! Tests of the Daytona provisioner. Daytona is unreachable here, so its REST API is the one
//! thing faked: a `wiremock` server that keeps the sandboxes, snapshots and volumes it was asked
//! for and answers with Daytona's documented shapes. Everything else is real: the provider's
//! HTTP client, and in the end-to-end test the real sandbox-agent (started by the harness with
//! the token the provider chose, as the toolbox would start it in the sandbox), reached through
//! the handle the provider returns. A second wiremock plays "another host" (the preview proxy,
//! a redirect target) and must never see the API key.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::support::sandbox_agent::{self, AgentServer};
use crate::support::tools::random_hex;
use wardfs::sandbox::provision::daytona::{Daytona, DaytonaConfig, PREVIEW_TOKEN_HEADER};
use wardfs::sandbox::provision::{
    ProviderState, ProvisionError, Provisioner, SandboxSpec, SnapshotSpec, VolumeMount,
};
use wardfs::sandbox::{SandboxAgent, SandboxFs};

static VARS: AtomicU32 = AtomicU32::new(0);

/// A provider config for the API at `api` with a fresh key in a fresh variable, short waits.
fn test_config(api: &str) -> (DaytonaConfig, String) {
    let var = format!(
        "WARDFS_TEST_DAYTONA_KEY_{}_{}",
        std::process::id(),
        VARS.fetch_add(1, Ordering::Relaxed)
    );
    let key = format!("dtn_{}", random_hex());
    std::env::set_var(&var, &key);
    let mut c = DaytonaConfig::new(var);
    c.api_url = api.to_string();
    c.poll_interval = Duration::from_millis(10);
    c.request_timeout = Duration::from_secs(5);
    c.connect_timeout = Duration::from_secs(1);
    c.start_timeout = Duration::from_secs(5);
    c.snapshot_timeout = Duration::from_secs(5);
    (c, key)
}

/// What the fake toolbox does with a process-execute command: its exit code, and the preview
/// URL to hand out from then on (when it started a server).
type ExecHook = Box<dyn Fn(&str) -> (i64, Option<String>) + Send + Sync>;

/// Daytona's API as wiremock serves it: a small world of sandboxes, snapshots and volumes.
#[derive(Default)]
struct World {
    next: u32,
    sandboxes: BTreeMap<String, Value>,
    snapshots: BTreeMap<String, Value>,
    volumes: BTreeMap<String, Value>,
    preview_url: String,
    /// The state a sandbox reaches once it has been seen `creating` (`started`, or `error`).
    created_state: String,
}

#[derive(Clone)]
struct Fake {
    world: Arc<Mutex<World>>,
    exec: Arc<Mutex<Option<ExecHook>>>,
}

fn not_found(what: &str) -> ResponseTemplate {
    ResponseTemplate::new(404).set_body_json(
        json!({"statusCode": 404, "message": format!("{what} not found"), "error": "Not Found"}),
    )
}

impl Respond for Fake {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let path = req.url.path().trim_start_matches("/api").to_string();
        let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let m = req.method.as_str();
        if let (m2, ["toolbox", id, "toolbox", "process", "execute"]) = (m, parts.as_slice()) {
            assert_eq!(m2, "POST");
            let command = body["command"].as_str().unwrap_or_default().to_string();
            let hook = self.exec.lock().unwrap();
            let (code, url) = match hook.as_ref() {
                Some(hook) => hook(&command),
                None => (0, None),
            };
            let mut w = self.world.lock().unwrap();
            if !w.sandboxes.contains_key(*id) {
                return not_found("sandbox");
            }
            if let Some(url) = url {
                w.preview_url = url;
            }
            return ResponseTemplate::new(200)
                .set_body_json(json!({"exitCode": code, "result": ""}));
        }
        let mut w = self.world.lock().unwrap();
        let ok = |v: &Value| ResponseTemplate::new(200).set_body_json(v.clone());
        match (m, parts.as_slice()) {
            ("POST", ["sandbox"]) => {
                w.next += 1;
                let id = format!("sb-{}", w.next);
                let dto = json!({
                    "id": id, "organizationId": "org", "name": id, "user": "daytona",
                    "snapshot": body["snapshot"], "env": body["env"], "labels": body["labels"],
                    "volumes": body.get("volumes").cloned().unwrap_or(json!([])),
                    "public": false, "networkBlockAll": false, "target": "us",
                    "cpu": 1, "gpu": 0, "memory": 1, "disk": 3, "state": "creating",
                    "toolboxProxyUrl": "https://proxy.elsewhere.test/toolbox",
                    "someFieldFromTheFuture": {"x": 1},
                });
                w.sandboxes.insert(id, dto.clone());
                ok(&dto)
            }
            ("GET", ["sandbox"]) => {
                let mut all: Vec<Value> = w.sandboxes.values().cloned().collect();
                // One sandbox wardfs never made (the provider must not trust the filter).
                all.push(json!({"id": "foreign", "state": "started", "labels": {"team": "x"}}));
                ok(&json!(all))
            }
            ("GET", ["sandbox", id]) => {
                let next = w.created_state.clone();
                match w.sandboxes.get_mut(*id) {
                    Some(dto) => {
                        let seen = dto.clone();
                        if dto["state"] == "creating" {
                            dto["state"] = json!(if next.is_empty() { "started" } else { &next });
                            if next == "error" {
                                dto["errorReason"] = json!("no capacity");
                            }
                        } else if dto["state"] == "stopping" {
                            dto["state"] = json!("stopped");
                        }
                        ok(&seen)
                    }
                    None => not_found("sandbox"),
                }
            }
            ("POST", ["sandbox", id, verb @ ("start" | "stop")]) => {
                match w.sandboxes.get_mut(*id) {
                    Some(dto) => {
                        dto["state"] = json!(if *verb == "start" {
                            "started"
                        } else {
                            "stopping"
                        });
                        ok(dto)
                    }
                    None => not_found("sandbox"),
                }
            }
            ("DELETE", ["sandbox", id]) => match w.sandboxes.remove(*id) {
                Some(dto) => ok(&dto),
                None => not_found("sandbox"),
            },
            ("GET", ["sandbox", id, "ports", port, "preview-url"]) => {
                if !w.sandboxes.contains_key(*id) {
                    return not_found("sandbox");
                }
                assert_eq!(*port, "2468");
                ok(&json!({"sandboxId": id, "url": w.preview_url, "token": "preview-tok-1"}))
            }
            ("GET", ["snapshots", name]) => match w.snapshots.get_mut(*name) {
                Some(dto) => {
                    let seen = dto.clone();
                    dto["state"] = json!("active");
                    ok(&seen)
                }
                None => not_found("snapshot"),
            },
            ("POST", ["snapshots"]) => {
                w.next += 1;
                let name = body["name"].as_str().unwrap().to_string();
                let dto = json!({"id": format!("snap-{}", w.next), "name": name,
                    "imageName": body["imageName"], "state": "pending", "general": false});
                w.snapshots.insert(name, dto.clone());
                ok(&dto)
            }
            ("GET", ["volumes", "by-name", name]) => match w.volumes.get_mut(*name) {
                Some(dto) => {
                    let seen = dto.clone();
                    dto["state"] = json!("ready");
                    ok(&seen)
                }
                None => not_found("volume"),
            },
            ("POST", ["volumes"]) => {
                w.next += 1;
                let name = body["name"].as_str().unwrap().to_string();
                let dto = json!({"id": format!("vol-{}", w.next), "name": name,
                    "organizationId": "org", "state": "pending_create"});
                w.volumes.insert(name, dto.clone());
                ok(&dto)
            }
            ("DELETE", ["volumes", id]) => {
                let name = w
                    .volumes
                    .iter()
                    .find(|(_, v)| v["id"] == *id)
                    .map(|(k, _)| k.clone());
                match name {
                    Some(name) => {
                        w.volumes.remove(&name);
                        ResponseTemplate::new(200)
                    }
                    None => not_found("volume"),
                }
            }
            _ => ResponseTemplate::new(400).set_body_json(
                json!({"statusCode": 400, "message": format!("fake: no route {m} {path}")}),
            ),
        }
    }
}

/// A fake Daytona API (at `<uri>/api`) and a fake preview proxy on another port.
struct Cloud {
    api: MockServer,
    preview: MockServer,
    fake: Fake,
}

impl Cloud {
    async fn start() -> Cloud {
        let api = MockServer::start().await;
        let preview = MockServer::start().await;
        let fake = Fake {
            world: Arc::new(Mutex::new(World {
                preview_url: preview.uri(),
                ..World::default()
            })),
            exec: Arc::new(Mutex::new(None)),
        };
        Mock::given(wiremock::matchers::any())
            .respond_with(fake.clone())
            .mount(&api)
            .await;
        Cloud { api, preview, fake }
    }

    /// The preview proxy answers the agent's health route.
    async fn healthy_agent(&self) {
        Mock::given(method("GET"))
            .and(path("/v1/health"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({"status": "ok"})))
            .mount(&self.preview)
            .await;
    }

    fn url(&self) -> String {
        format!("{}/api", self.api.uri())
    }

    async fn calls(&self) -> Vec<(String, String)> {
        self.api
            .received_requests()
            .await
            .unwrap()
            .iter()
            .map(|r| (r.method.to_string(), r.url.path().to_string()))
            .collect()
    }

    async fn bodies(&self, m: &str, p: &str) -> Vec<Value> {
        self.api
            .received_requests()
            .await
            .unwrap()
            .iter()
            .filter(|r| r.method.as_str() == m && r.url.path() == p)
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    }
}

fn header(r: &Request, name: &str) -> Option<String> {
    r.headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Asserts that no request `server` received carries `key` anywhere (headers, path, body).
async fn assert_never_saw(server: &MockServer, key: &str) {
    for r in server.received_requests().await.unwrap() {
        for (name, value) in r.headers.iter() {
            assert!(
                !value
                    .as_bytes()
                    .windows(key.len())
                    .any(|w| w == key.as_bytes()),
                "{} received the API key in {name}",
                server.uri()
            );
        }
        assert!(!r.url.as_str().contains(key));
        assert!(!String::from_utf8_lossy(&r.body).contains(key));
    }
}

fn spec(name: &str) -> SandboxSpec {
    SandboxSpec {
        name: name.into(),
        snapshot: Some("wardfs-0123456789abcdef".into()),
        volume: None,
        env: BTreeMap::from([("LANG".to_string(), "C.UTF-8".to_string())]),
    }
}

#[tokio::test]
async fn lifecycle_create_state_pause_resume_destroy_speaks_the_documented_routes() {
    let cloud = Cloud::start().await;
    cloud.healthy_agent().await;
    let (config, key) = test_config(&cloud.url());
    let d = Daytona::new(config).unwrap();
    assert_eq!(d.kind(), "daytona");

    let handle = d.create(&spec("dev")).await.unwrap();
    assert_eq!(handle.id, "sb-1");
    assert_eq!(handle.url, cloud.preview.uri());
    let extra = handle
        .extra_header
        .clone()
        .expect("the preview token header");
    assert_eq!(extra.name, PREVIEW_TOKEN_HEADER);
    assert_eq!(extra.value.expose(), "preview-tok-1");
    assert_eq!(handle.token.expose().len(), 32);

    // What was sent to create it: labels, env, the snapshot; the key on every request.
    let created = cloud.bodies("POST", "/api/sandbox").await;
    assert_eq!(created.len(), 1);
    assert_eq!(created[0]["labels"]["wardfs"], "1");
    assert_eq!(created[0]["labels"]["wardfs.name"], "dev");
    assert_eq!(created[0]["env"]["LANG"], "C.UTF-8");
    assert_eq!(created[0]["snapshot"], "wardfs-0123456789abcdef");
    assert_eq!(created[0]["public"], false);
    let exec = cloud
        .bodies("POST", "/api/toolbox/sb-1/toolbox/process/execute")
        .await;
    assert_eq!(exec.len(), 1);
    let command = exec[0]["command"].as_str().unwrap();
    assert!(
        command.starts_with("sh -c '") && command.ends_with('\''),
        "{command}"
    );
    assert!(
        command.contains(&format!(
            "server --token {} --no-telemetry --host 127.0.0.1 --port 2468",
            handle.token.expose()
        )),
        "{command}"
    );
    for r in cloud.api.received_requests().await.unwrap() {
        assert_eq!(
            header(&r, "authorization").as_deref(),
            Some(format!("Bearer {key}").as_str()),
            "{} {}",
            r.method,
            r.url
        );
    }
    // The agent was asked for its health through the preview proxy, with both tokens, never
    // with the API key.
    let health = cloud.preview.received_requests().await.unwrap();
    assert!(!health.is_empty());
    assert_eq!(
        header(&health[0], "authorization"),
        Some(format!("Bearer {}", handle.token.expose()))
    );
    assert_eq!(
        header(&health[0], PREVIEW_TOKEN_HEADER).as_deref(),
        Some("preview-tok-1")
    );
    assert_never_saw(&cloud.preview, &key).await;

    assert_eq!(d.state("sb-1").await.unwrap(), ProviderState::Running);
    let listed = d.list().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, "sb-1");
    assert_eq!(listed[0].name.as_deref(), Some("dev"));
    let list_req = cloud
        .api
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.method.as_str() == "GET" && r.url.path() == "/api/sandbox")
        .unwrap();
    let labels: Value = serde_json::from_str(
        &list_req
            .url
            .query_pairs()
            .find(|(k, _)| k == "labels")
            .unwrap()
            .1,
    )
    .unwrap();
    assert_eq!(labels, json!({"wardfs": "1"}));

    d.pause("sb-1").await.unwrap();
    assert_eq!(d.state("sb-1").await.unwrap(), ProviderState::Paused);
    let before = cloud.calls().await.len();
    d.pause("sb-1").await.unwrap();
    let again = cloud.calls().await;
    assert!(
        !again[before..].iter().any(|(_, p)| p.ends_with("/stop")),
        "pausing a paused sandbox sends no second stop: {:?}",
        &again[before..]
    );

    let resumed = d.resume("sb-1").await.unwrap();
    assert_eq!(resumed.id, "sb-1");
    assert_ne!(
        resumed.token.expose(),
        handle.token.expose(),
        "a resume starts the agent with a new token"
    );
    assert_eq!(d.state("sb-1").await.unwrap(), ProviderState::Running);

    d.destroy("sb-1", false).await.unwrap();
    assert_eq!(d.state("sb-1").await.unwrap(), ProviderState::Missing);
    d.destroy("sb-1", false).await.unwrap();

    let calls: Vec<(String, String)> = cloud
        .calls()
        .await
        .into_iter()
        .filter(|(m, _)| m != "GET")
        .collect();
    let expect = |m: &str, p: &str| (m.to_string(), p.to_string());
    assert_eq!(
        calls,
        [
            expect("POST", "/api/sandbox"),
            expect("POST", "/api/toolbox/sb-1/toolbox/process/execute"),
            expect("POST", "/api/sandbox/sb-1/stop"),
            expect("POST", "/api/sandbox/sb-1/start"),
            expect("POST", "/api/toolbox/sb-1/toolbox/process/execute"),
            expect("DELETE", "/api/sandbox/sb-1"),
        ]
    );
    assert_never_saw(&cloud.preview, &key).await;
}

#[tokio::test]
async fn an_unchanged_snapshot_spec_reuses_its_snapshot() {
    let cloud = Cloud::start().await;
    let (config, _key) = test_config(&cloud.url());
    let d = Daytona::new(config).unwrap();
    let spec = SnapshotSpec {
        network: false,
        base: "debian:12".into(),
        setup: vec!["apt-get update".into(), "apt-get install -y ripgrep".into()],
    };
    let first = d.snapshot(&spec).await.unwrap();
    assert_eq!(first, spec.key());
    let second = d.snapshot(&spec).await.unwrap();
    assert_eq!(second, first);
    let made = cloud.bodies("POST", "/api/snapshots").await;
    assert_eq!(made.len(), 1, "the same spec is built once");
    assert_eq!(made[0]["name"], spec.key());
    assert_eq!(
        made[0]["buildInfo"]["dockerfileContent"],
        "FROM debian:12\nRUN apt-get update\nRUN apt-get install -y ripgrep\n"
    );

    // A changed spec is a new snapshot; a bare image is sent as its name.
    let bare = SnapshotSpec {
        network: false,
        base: "debian:12".into(),
        setup: vec![],
    };
    assert_ne!(d.snapshot(&bare).await.unwrap(), first);
    let made = cloud.bodies("POST", "/api/snapshots").await;
    assert_eq!(made.len(), 2);
    assert_eq!(made[1]["imageName"], "debian:12");
    assert!(made[1].get("buildInfo").is_none());

    // A bad spec is refused before anything is sent.
    let n = cloud.calls().await.len();
    let bad = SnapshotSpec {
        network: false,
        base: "debian:12".into(),
        setup: vec!["true\nUSER root".into()],
    };
    match d.snapshot(&bad).await {
        Err(ProvisionError::Invalid { key, .. }) => assert_eq!(key, "snapshot.setup[0]"),
        other => panic!("{other:?}"),
    }
    assert_eq!(cloud.calls().await.len(), n);
}

#[tokio::test]
async fn a_volume_is_made_once_attached_at_create_and_deleted_with_its_sandbox_unless_kept() {
    let cloud = Cloud::start().await;
    cloud.healthy_agent().await;
    let (config, _key) = test_config(&cloud.url());
    let d = Daytona::new(config).unwrap();

    let vol = d.create_volume("dev-data").await.unwrap();
    assert_eq!(d.create_volume("dev-data").await.unwrap(), vol);
    assert_eq!(cloud.bodies("POST", "/api/volumes").await.len(), 1);

    let mut s = spec("dev");
    s.volume = Some(VolumeMount {
        volume: vol.clone(),
        mount_path: "/home/daytona/data".into(),
    });
    let h = d.create(&s).await.unwrap();
    let created = cloud.bodies("POST", "/api/sandbox").await;
    assert_eq!(
        created[0]["volumes"],
        json!([{"volumeId": vol, "mountPath": "/home/daytona/data"}])
    );
    assert_eq!(created[0]["labels"]["wardfs.volume"], vol);

    // Kept: the sandbox goes, the volume stays.
    d.destroy(&h.id, true).await.unwrap();
    assert!(cloud
        .calls()
        .await
        .iter()
        .all(|(m, p)| !(m == "DELETE" && p.starts_with("/api/volumes"))));

    // Not kept: deleted once the sandbox is gone.
    let h = d.create(&s).await.unwrap();
    d.destroy(&h.id, false).await.unwrap();
    let deletes: Vec<_> = cloud
        .calls()
        .await
        .into_iter()
        .filter(|(m, p)| m == "DELETE" && p.starts_with("/api/volumes"))
        .collect();
    assert_eq!(deletes, [("DELETE".into(), format!("/api/volumes/{vol}"))]);
    d.delete_volume(&vol).await.unwrap();

    // A relative mount path is refused before anything is sent.
    let n = cloud.calls().await.len();
    s.volume.as_mut().unwrap().mount_path = "data".into();
    match d.create(&s).await {
        Err(ProvisionError::Invalid { key, .. }) => assert_eq!(key, "volume.mount_path"),
        other => panic!("{other:?}"),
    }
    assert_eq!(cloud.calls().await.len(), n);
}

#[tokio::test]
async fn http_failures_are_classified() {
    let server = MockServer::start().await;
    for (id, status) in [
        ("gone", 404),
        ("busy", 503),
        ("who", 401),
        ("nope", 403),
        ("bad", 400),
    ] {
        Mock::given(path(format!("/api/sandbox/{id}")))
            .respond_with(
                ResponseTemplate::new(status).set_body_json(
                    json!({"statusCode": status, "message": format!("because {id}")}),
                ),
            )
            .mount(&server)
            .await;
    }
    let (config, _key) = test_config(&format!("{}/api", server.uri()));
    let d = Daytona::new(config).unwrap();
    assert_eq!(d.state("gone").await.unwrap(), ProviderState::Missing);
    assert!(matches!(
        d.pause("gone").await,
        Err(ProvisionError::Missing { .. })
    ));
    d.destroy("gone", false).await.unwrap();
    let err = d.state("busy").await.unwrap_err();
    assert!(matches!(err, ProvisionError::Down { .. }), "{err:?}");
    assert!(err.to_string().contains("because busy"), "{err}");
    assert!(matches!(
        d.state("who").await,
        Err(ProvisionError::Auth { .. })
    ));
    assert!(matches!(
        d.resume("nope").await,
        Err(ProvisionError::Auth { .. })
    ));
    assert!(matches!(
        d.state("bad").await,
        Err(ProvisionError::Fatal { .. })
    ));

    // Connection refused: down, at once.
    let port = crate::support::tools::free_port();
    let (config, _key) = test_config(&format!("http://127.0.0.1:{port}/api"));
    let d = Daytona::new(config).unwrap();
    let started = Instant::now();
    let err = d.state("x").await.unwrap_err();
    assert!(matches!(err, ProvisionError::Down { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // A hung API: down when the deadline passes.
    Mock::given(path("/api/sandbox/slow"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_secs(10)))
        .mount(&server)
        .await;
    let (mut config, _key) = test_config(&format!("{}/api", server.uri()));
    config.request_timeout = Duration::from_millis(300);
    let d = Daytona::new(config).unwrap();
    let started = Instant::now();
    let err = d.state("slow").await.unwrap_err();
    assert!(matches!(err, ProvisionError::Down { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn a_failed_create_deletes_the_sandbox_it_made() {
    // sandbox-agent is not in the snapshot: the start script exits 127.
    let cloud = Cloud::start().await;
    *cloud.fake.exec.lock().unwrap() = Some(Box::new(|_| (127, None)));
    let (config, _key) = test_config(&cloud.url());
    let d = Daytona::new(config).unwrap();
    let err = d.create(&spec("dev")).await.unwrap_err();
    assert!(matches!(err, ProvisionError::Fatal { .. }), "{err:?}");
    assert!(err.to_string().contains("127"), "{err}");
    assert!(cloud
        .calls()
        .await
        .contains(&("DELETE".into(), "/api/sandbox/sb-1".into())));
    assert!(cloud.fake.world.lock().unwrap().sandboxes.is_empty());

    // The agent never answers its health check through the preview URL.
    let cloud = Cloud::start().await;
    Mock::given(path("/v1/health"))
        .respond_with(ResponseTemplate::new(502))
        .mount(&cloud.preview)
        .await;
    let (mut config, _key) = test_config(&cloud.url());
    config.start_timeout = Duration::from_millis(500);
    let d = Daytona::new(config).unwrap();
    let err = d.create(&spec("dev")).await.unwrap_err();
    assert!(matches!(err, ProvisionError::Down { .. }), "{err:?}");
    assert!(err.to_string().contains("sandbox-agent"), "{err}");
    assert!(cloud.fake.world.lock().unwrap().sandboxes.is_empty());

    // Daytona puts the sandbox into its error state while starting it.
    let cloud = Cloud::start().await;
    cloud.fake.world.lock().unwrap().created_state = "error".into();
    let (config, _key) = test_config(&cloud.url());
    let d = Daytona::new(config).unwrap();
    let err = d.create(&spec("dev")).await.unwrap_err();
    assert!(matches!(err, ProvisionError::Fatal { .. }), "{err:?}");
    assert!(err.to_string().contains("no capacity"), "{err}");
    assert!(cloud.fake.world.lock().unwrap().sandboxes.is_empty());
}

/// An answer that echoes the request's Authorization header back in its error text.
struct Echo;

impl Respond for Echo {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let auth = header(req, "authorization").unwrap_or_default();
        ResponseTemplate::new(400)
            .set_body_json(json!({"statusCode": 400, "message": format!("bad key {auth}")}))
    }
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_api_key_goes_to_the_api_host_only_and_is_never_shown() {
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let cloud = Cloud::start().await;
    cloud.healthy_agent().await;
    let other = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"id": "x"})))
        .mount(&other)
        .await;
    // The API redirects a route to another host: not followed, so the other host sees nothing.
    Mock::given(path("/api/sandbox/moved"))
        .respond_with(
            ResponseTemplate::new(307)
                .insert_header("location", format!("{}/api/sandbox/moved", other.uri())),
        )
        .with_priority(1)
        .mount(&cloud.api)
        .await;
    Mock::given(path("/api/sandbox/echo"))
        .respond_with(Echo)
        .with_priority(1)
        .mount(&cloud.api)
        .await;
    let (config, key) = test_config(&cloud.url());
    let d = Daytona::new(config).unwrap();
    assert!(!format!("{d:?}").contains(&key));

    let err = d.state("moved").await.unwrap_err();
    assert!(matches!(err, ProvisionError::Fatal { .. }), "{err:?}");
    assert!(err.to_string().contains("not followed"), "{err}");
    assert!(other.received_requests().await.unwrap().is_empty());

    // An answer that echoes the key: the error masks it.
    let err = d.state("echo").await.unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(text.contains("bad key Bearer ***"), "{text}");
    assert!(!text.contains(&key), "{text}");

    // The preview URL is another host: it gets the preview and agent tokens, never the key.
    let handle = d.create(&spec("dev")).await.unwrap();
    assert!(!format!("{handle:?}").contains(&key));
    assert!(!format!("{handle:?}").contains(handle.token.expose()));
    assert!(!format!("{handle:?}").contains("preview-tok-1"));
    assert!(!cloud.preview.received_requests().await.unwrap().is_empty());
    assert_never_saw(&cloud.preview, &key).await;
    assert_never_saw(&other, &key).await;
    // ... and the sandbox's own toolbox proxy, another host, is never used.
    assert!(cloud
        .calls()
        .await
        .iter()
        .any(|(_, p)| p == "/api/toolbox/sb-1/toolbox/process/execute"));

    // A preview URL in plain http to a non-loopback host is refused (its tokens would travel
    // in clear), and the sandbox is deleted.
    cloud.fake.world.lock().unwrap().preview_url = "http://preview.example.test".into();
    let err = d.create(&spec("dev2")).await.unwrap_err();
    assert!(err.to_string().contains("must be https"), "{err}");
    assert!(!cloud
        .fake
        .world
        .lock()
        .unwrap()
        .sandboxes
        .contains_key("sb-2"));

    let logged = String::from_utf8_lossy(&logs.0.lock().unwrap()).to_string();
    assert!(logged.contains("daytona"), "the provider logged nothing");
    assert!(!logged.contains(&key), "{logged}");
}

#[tokio::test]
async fn a_huge_or_endless_answer_is_cut_at_the_cap() {
    let server = MockServer::start().await;
    Mock::given(path("/api/sandbox/huge"))
        .respond_with(ResponseTemplate::new(200).set_body_bytes(vec![b' '; 8 << 20]))
        .mount(&server)
        .await;
    let (mut config, _key) = test_config(&format!("{}/api", server.uri()));
    config.max_answer_bytes = 1 << 20;
    let d = Daytona::new(config).unwrap();
    let err = d.state("huge").await.unwrap_err();
    assert!(matches!(err, ProvisionError::Fatal { .. }), "{err:?}");
    assert!(
        err.to_string().contains("larger than 1048576 bytes"),
        "{err}"
    );

    // A body that never ends: cut at the cap, long before the deadline.
    let hostile = sandbox_agent::HostileServer::start(|_| sandbox_agent::Answer::Endless);
    let (mut config, _key) = test_config(&format!("{}/api", hostile.url));
    config.max_answer_bytes = 1 << 20;
    config.request_timeout = Duration::from_secs(20);
    let d = Daytona::new(config).unwrap();
    let started = Instant::now();
    let err = d.list().await.unwrap_err();
    assert!(err.to_string().contains("larger than"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // Must stay: time for the server to push on, were the client still reading.
    std::thread::sleep(Duration::from_millis(200));
    let sent = hostile.sent.load(Ordering::Relaxed);
    assert!(sent < 64 << 20, "the client kept reading: {sent} bytes");
}

#[tokio::test]
async fn bad_config_values_are_refused_naming_the_key_and_the_rule() {
    let (mut c, key) = test_config("http://daytona.example.test/api");
    let rule = |c: DaytonaConfig| match Daytona::new(c) {
        Err(ProvisionError::Invalid { key, rule }) => (key, rule),
        other => panic!("{other:?}"),
    };
    let (k, r) = rule(c.clone());
    assert_eq!(k, "daytona.api_url");
    assert!(r.contains("https") && r.contains("loopback"), "{r}");
    c.api_url = "ftp://daytona.example.test".into();
    assert_eq!(rule(c.clone()).0, "daytona.api_url");
    c.api_url = "https://user:pw@daytona.example.test/api".into();
    assert!(rule(c.clone()).1.contains("credentials"));
    c.api_url = "https://daytona.example.test/api".into();
    Daytona::new(c.clone()).unwrap();

    // The key itself where its variable's name belongs.
    let mut bad = c.clone();
    bad.api_key_env = key.clone() + " x";
    let (k, r) = rule(bad);
    assert_eq!(k, "daytona.api_key_env");
    assert!(!r.contains(&key));
    let mut bad = c.clone();
    bad.agent_command = "sandbox-agent; rm -rf /".into();
    assert_eq!(rule(bad).0, "daytona.agent_command");

    // A variable that is not set: credentials missing, the variable named.
    let mut unset = c.clone();
    unset.api_key_env = "WARDFS_TEST_DAYTONA_NEVER_SET".into();
    match Daytona::new(unset) {
        Err(ProvisionError::Auth { detail, .. }) => {
            assert!(detail.contains("WARDFS_TEST_DAYTONA_NEVER_SET"))
        }
        other => panic!("{other:?}"),
    }
}

/// End to end: the fake toolbox starts the REAL sandbox-agent (through the harness: token the
/// provider chose, --no-telemetry, 127.0.0.1, loopback-only namespace) and the preview URL
/// points at it; the handle the provider returns is all it takes to write and read a file.
/// Makes the fake toolbox start the real sandbox-agent (with the token the provider chose, as
/// the toolbox would start it in the sandbox) and hand out its URL as the preview URL.
fn real_agent_on_exec(cloud: &Cloud) -> Arc<Mutex<Option<AgentServer>>> {
    let agent: Arc<Mutex<Option<AgentServer>>> = Arc::default();
    let slot = agent.clone();
    *cloud.fake.exec.lock().unwrap() = Some(Box::new(move |command: &str| {
        let token = command
            .split_whitespace()
            .skip_while(|w| *w != "--token")
            .nth(1)
            .expect("the command passes --token")
            .to_string();
        assert!(command.contains("--no-telemetry --host 127.0.0.1"));
        let server = AgentServer::start_with_token(&token);
        let url = server.url();
        *slot.lock().unwrap() = Some(server);
        (0, Some(url))
    }));
    agent
}

#[tokio::test]
async fn the_handle_reaches_a_real_sandbox_agent() {
    sandbox_agent::require_loopback_only();
    let cloud = Cloud::start().await;
    let agent = real_agent_on_exec(&cloud);
    let (mut config, key) = test_config(&cloud.url());
    config.start_timeout = Duration::from_secs(30);
    let d = Daytona::new(config).unwrap();
    let handle = d.create(&spec("dev")).await.unwrap();

    let root = agent.lock().unwrap().as_ref().unwrap().root();
    let work = agent.lock().unwrap().as_ref().unwrap().work();
    let fs = SandboxAgent::with_token(&handle.agent_config(), Some(handle.token.clone())).unwrap();
    fs.write(&format!("{root}/hello.txt"), Bytes::from_static(b"hi\n"))
        .await
        .unwrap();
    assert_eq!(std::fs::read(work.join("hello.txt")).unwrap(), b"hi\n");
    assert_eq!(
        &fs.read(&format!("{root}/hello.txt")).await.unwrap()[..],
        b"hi\n"
    );
    // The agent's own token is what opens it: without it, refused.
    let no = SandboxAgent::with_token(&handle.agent_config(), None).unwrap();
    assert!(no.check().await.is_err());
    assert_ne!(handle.token.expose(), key);

    d.destroy(&handle.id, false).await.unwrap();
    assert_eq!(d.state(&handle.id).await.unwrap(), ProviderState::Missing);
    // The fake cloud's exec closure holds the server too, and the mock server may outlive the
    // test in wiremock's pool: stop the agent here, or it outlives the test process.
    *cloud.fake.exec.lock().unwrap() = None;
    drop(agent.lock().unwrap().take());
}

/// `wardfs run` on a Daytona sandbox, through a real daemon: the first run makes the sandbox
/// through Daytona's routes (wiremock), starts the real sandbox-agent in it, pushes, runs,
/// and brings the command's changes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_a_daytona_sandbox_makes_it_and_brings_changes_back() {
    sandbox_agent::require_loopback_only();
    let cloud = Cloud::start().await;
    let agent = real_agent_on_exec(&cloud);
    let var = format!("WARDFS_TEST_DAYTONA_RUN_KEY_{}", std::process::id());
    let key = format!("dtn_{}", random_hex());
    let api_url = cloud.url();
    let key_in = key.clone();
    // The daemon and its clients block: on a thread of their own, outside the runtime that
    // serves the fake cloud.
    let daemon = std::thread::spawn(move || {
        let root = tempfile::tempdir().unwrap();
        let d = crate::support::Daemon::options()
            .prefix("wardfs-dtn-run")
            .config(&format!(
                "[zones]\nroot = \"root\"\n[sandboxes.dev]\nprovider = \"daytona\"\n\
                 api_url = \"{api_url}\"\napi_key_env = \"{var}\"\nroot = \"{}\"\n",
                root.path().display()
            ))
            .env(&var, &key_in)
            .append_log()
            .start();
        d.write("/workspace/in.txt", "from the workspace\n");
        let out = d.cli(&[
            "run",
            "--sandbox",
            "dev",
            "--",
            "sh",
            "-c",
            "cat in.txt; echo made > out.txt",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}\n{}", d.log_text());
        assert_eq!(String::from_utf8_lossy(&out.stdout), "from the workspace\n");
        assert_eq!(
            std::fs::read_to_string(d.workspace().join("out.txt")).unwrap(),
            "made\n"
        );
        assert!(!d.log_text().contains(&key_in), "the key reached the log");
    });
    tokio::task::spawn_blocking(move || daemon.join())
        .await
        .unwrap()
        .unwrap();
    let calls = cloud.calls().await;
    assert!(
        calls
            .iter()
            .any(|(m, p)| m == "POST" && p == "/api/sandbox"),
        "{calls:?}"
    );
    assert_never_saw(&cloud.preview, &key).await;
    *cloud.fake.exec.lock().unwrap() = None;
    drop(agent.lock().unwrap().take());
}

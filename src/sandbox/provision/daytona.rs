//! The Daytona provider: sandboxes made, stopped, started and deleted through Daytona's REST API,
//! each running `sandbox-agent`, reached through Daytona's preview proxy.
//!
//! Routes used (Daytona API 1.0, bearer API key): `POST /sandbox` (from a snapshot, with labels,
//! env and volumes), `GET /sandbox/{id}`, `GET /sandbox?labels=`, `POST /sandbox/{id}/start`,
//! `POST /sandbox/{id}/stop` (wardfs's pause), `DELETE /sandbox/{id}`,
//! `GET /sandbox/{id}/ports/{port}/preview-url`, `GET|POST /snapshots[/{name}]`,
//! `POST /snapshots/{id}/activate`, `GET /volumes/by-name/{name}`, `POST /volumes`,
//! `DELETE /volumes/{id}`, and the toolbox's `POST /toolbox/{id}/toolbox/process/execute`.
//!
//! The rules this module keeps:
//! * **The API key goes to the host of `api_url` and nowhere else.** `api_url` must be https
//!   (plain http only to a loopback host, for tests); redirects are never followed (a 3xx is an
//!   error); the key travels in a header marked sensitive and is never logged, stored, or put into
//!   an error (any echo of it in an answer is masked before the answer's text is used). The
//!   toolbox is reached through the API host's own `/toolbox/{id}/toolbox/…` routes rather than
//!   the `toolboxProxyUrl` a sandbox reports, because that proxy is another host. The preview URL
//!   (another host too) gets only the preview token and the agent's own token.
//! * **Every request has a deadline and a size cap**: a server that hangs answers `Down` when the
//!   deadline passes; an answer larger than `max_answer_bytes` (or an endless one) is cut there.
//! * **Failures are classified once** (`classify`): 404 → `Missing`; refused connection,
//!   timeout, 5xx, 429 → `Down`; 401/403 → `Auth`; anything else (including any redirect) → `Fatal`.
//!
//! `sandbox-agent` inside the sandbox: started by the toolbox's process-execute route with
//! `--token <fresh random> --no-telemetry --host 127.0.0.1 --port <agent_port>`, detached
//! (`nohup`, output to a log file, so the execute call returns at once), its pid kept so that a
//! resume replaces the old server with one holding a new token. A 127.0.0.1 bind is enough:
//! Daytona's preview proxy reaches a port through the sandbox's own daemon, which forwards to
//! `localhost:<port>` inside the sandbox, so the server is never exposed on another interface.
//! The preview proxy wants its own credential (`x-daytona-preview-token`) beside the agent's
//! bearer token: it goes into [`Handle::extra_header`].

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, LOCATION};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;

use super::{
    Handle, Listed, ProviderState, ProvisionError, ProvisionResult, Provisioner, SandboxSpec,
    SnapshotSpec,
};
use crate::core::provider::{BoxFuture, SandboxFs as _, SandboxFsError};
use crate::sandbox::agent::http::chain;
use crate::sandbox::agent::{ExtraHeader, SandboxAgent, Token};

/// Daytona's public API.
pub const DEFAULT_API_URL: &str = "https://app.daytona.io/api";
/// The header Daytona's preview proxy reads its token from.
pub const PREVIEW_TOKEN_HEADER: &str = "x-daytona-preview-token";
/// The label every sandbox wardfs makes carries (value `"1"`); [`Provisioner::list`] filters on it.
pub const LABEL_MANAGED: &str = "wardfs";
/// The label holding the sandbox's name in wardfs.
pub const LABEL_NAME: &str = "wardfs.name";
/// The label holding the id of the volume attached at create (deleted with the sandbox unless
/// kept).
pub const LABEL_VOLUME: &str = "wardfs.volume";
/// The port `sandbox-agent` listens on inside the sandbox by default.
pub const DEFAULT_AGENT_PORT: u16 = 2468;

/// The most of an error answer read (its text only explains the status).
const MAX_ERROR_BYTES: u64 = 64 * 1024;
/// The longest error text kept from an answer.
const MAX_DETAIL_CHARS: usize = 500;

/// Characters of a path segment or query value sent as they are (the rest is percent-encoded).
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// How to reach Daytona and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaytonaConfig {
    /// The API's base URL (`https://…/api`); https, or plain http to a loopback host.
    pub api_url: String,
    /// The NAME of the environment variable holding the API key (never the key itself).
    pub api_key_env: String,
    /// The `sandbox-agent` command inside the sandbox (the snapshot must provide it).
    pub agent_command: String,
    /// The port `sandbox-agent` listens on inside the sandbox.
    pub agent_port: u16,
    /// Longest time one API request may take, answer included.
    pub request_timeout: Duration,
    /// Longest time opening a connection may take.
    pub connect_timeout: Duration,
    /// Longest wait for a sandbox to start (or stop, or go) and for its agent to answer.
    pub start_timeout: Duration,
    /// Longest wait for a snapshot to be built.
    pub snapshot_timeout: Duration,
    /// Pause between two polls of a state.
    pub poll_interval: Duration,
    /// Largest API answer read; a longer one is an error.
    pub max_answer_bytes: u64,
}

impl DaytonaConfig {
    /// Returns a config for Daytona's public API with the key in `$api_key_env`, and the
    /// default timeouts (30 s per request, 5 s to connect, 3 min to start, 30 min to build a
    /// snapshot).
    pub fn new(api_key_env: impl Into<String>) -> DaytonaConfig {
        DaytonaConfig {
            api_url: DEFAULT_API_URL.to_string(),
            api_key_env: api_key_env.into(),
            agent_command: "sandbox-agent".to_string(),
            agent_port: DEFAULT_AGENT_PORT,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            start_timeout: Duration::from_secs(180),
            snapshot_timeout: Duration::from_secs(30 * 60),
            poll_interval: Duration::from_secs(1),
            max_answer_bytes: 4 * 1024 * 1024,
        }
    }
}

/// The Daytona provider (see the module doc).
pub struct Daytona {
    api: Api,
    config: DaytonaConfig,
}

impl std::fmt::Debug for Daytona {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daytona")
            .field("api_url", &self.api.base)
            .field("api_key_env", &self.config.api_key_env)
            .finish_non_exhaustive()
    }
}

impl Daytona {
    /// Checks `config` and reads the API key from the environment variable it names. Nothing is
    /// sent yet.
    pub fn new(config: DaytonaConfig) -> ProvisionResult<Daytona> {
        let invalid = |key: &str, rule: &str| ProvisionError::Invalid {
            key: format!("daytona.{key}"),
            rule: rule.to_string(),
        };
        let var = &config.api_key_env;
        let var_ok = !var.is_empty()
            && !var.starts_with(|c: char| c.is_ascii_digit())
            && var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !var_ok {
            return Err(invalid(
                "api_key_env",
                "it must be the NAME of an environment variable (letters, digits, _), not the key",
            ));
        }
        let cmd = &config.agent_command;
        if cmd.is_empty()
            || !cmd
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
        {
            return Err(invalid(
                "agent_command",
                "it must be a command name or path of letters, digits and / . _ -",
            ));
        }
        if config.agent_port == 0 {
            return Err(invalid(
                "agent_port",
                "it must be a port number, 1 to 65535",
            ));
        }
        let key = match std::env::var(var) {
            Ok(key) if !key.is_empty() => key,
            _ => {
                return Err(ProvisionError::Auth {
                    what: "daytona".into(),
                    detail: format!(
                    "no API key: the environment variable {var} (daytona.api_key_env) is not set"
                ),
                })
            }
        };
        let api = Api::new(&config, Token::new(key))?;
        Ok(Daytona { api, config })
    }

    /// Returns the API's base URL.
    pub fn api_url(&self) -> &str {
        &self.api.base
    }

    async fn sandbox(&self, id: &str) -> ProvisionResult<SandboxDto> {
        let path = format!("/sandbox/{}", seg(id));
        self.api.get(&what_sandbox(id), &path).await
    }

    /// Polls the sandbox until its state is one of `want`; `error`/`build_failed` and a
    /// vanished sandbox end the wait early.
    async fn wait_state(&self, id: &str, want: &[&str]) -> ProvisionResult<()> {
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            let dto = self.sandbox(id).await?;
            let state = dto.state.as_deref().unwrap_or("unknown");
            if want.contains(&state) {
                return Ok(());
            }
            match state {
                "error" | "build_failed" => {
                    return Err(ProvisionError::Fatal {
                        what: what_sandbox(id),
                        detail: format!(
                            "Daytona reports state {state}: {}",
                            self.api
                                .scrub(dto.error_reason.as_deref().unwrap_or("no reason given"))
                        ),
                    })
                }
                "destroyed" | "destroying" => {
                    return Err(ProvisionError::Missing {
                        what: what_sandbox(id),
                        detail: format!("Daytona reports state {state}"),
                    })
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(ProvisionError::Down {
                    what: what_sandbox(id),
                    detail: format!(
                        "still in state {state} after {:?} (waiting for {})",
                        self.config.start_timeout,
                        want.join(" or ")
                    ),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    /// Starts (or restarts) `sandbox-agent` in a started sandbox, waits until it answers through
    /// the preview proxy, and returns the handle.
    async fn attach(&self, id: &str) -> ProvisionResult<Handle> {
        let token = fresh_token()?;
        let script = agent_script(&self.config.agent_command, &token, self.config.agent_port);
        let what = format!("sandbox-agent in daytona sandbox {id}");
        let path = format!("/toolbox/{}/toolbox/process/execute", seg(id));
        let ran: ExecuteDto = self
            .api
            .post(
                &what,
                &path,
                json!({ "command": format!("sh -c '{script}'"), "timeout": 30 }),
            )
            .await?;
        if ran.exit_code != 0 {
            return Err(ProvisionError::Fatal {
                what,
                detail: format!(
                    "starting it exited with {}: {}",
                    ran.exit_code,
                    self.api.scrub(&clip(ran.result.trim()))
                ),
            });
        }

        let path = format!(
            "/sandbox/{}/ports/{}/preview-url",
            seg(id),
            self.config.agent_port
        );
        let preview: PreviewDto = self.api.get(&what_sandbox(id), &path).await?;
        let url = check_preview_url(&preview.url, &self.api)?;
        let mut handle = Handle::new(id, url, Token::new(token));
        if let Some(t) = preview.token.filter(|t| !t.is_empty()) {
            handle.extra_header = Some(ExtraHeader {
                name: PREVIEW_TOKEN_HEADER.into(),
                value: Token::new(t),
            });
        }
        self.wait_healthy(&handle).await?;
        Ok(handle)
    }

    /// Polls the agent's health route through the preview URL until it answers.
    async fn wait_healthy(&self, handle: &Handle) -> ProvisionResult<()> {
        let what = format!("sandbox-agent in daytona sandbox {}", handle.id);
        let mut config = handle.agent_config();
        config.request_timeout = self.config.request_timeout.min(Duration::from_secs(5));
        config.connect_timeout = self.config.connect_timeout;
        let agent = SandboxAgent::with_token(&config, Some(handle.token.clone())).map_err(|e| {
            ProvisionError::Fatal {
                what: what.clone(),
                detail: e.to_string(),
            }
        })?;
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            let err = match agent.check().await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                let detail = format!(
                    "no answer from {} within {:?}: {err}",
                    handle.url, self.config.start_timeout
                );
                return Err(match err {
                    SandboxFsError::AuthFailed { .. } => ProvisionError::Auth { what, detail },
                    _ => ProvisionError::Down { what, detail },
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    async fn create_inner(&self, id: &str) -> ProvisionResult<Handle> {
        self.wait_state(id, &["started"]).await?;
        self.attach(id).await
    }

    async fn wait_snapshot(&self, name: &str) -> ProvisionResult<String> {
        let what = format!("daytona snapshot {name}");
        let path = format!("/snapshots/{}", seg(name));
        let deadline = Instant::now() + self.config.snapshot_timeout;
        let mut activated = false;
        loop {
            let dto: SnapshotDto = self.api.get(&what, &path).await?;
            let state = dto.state.as_deref().unwrap_or("unknown");
            match state {
                "active" => return Ok(dto.name),
                "error" | "build_failed" => {
                    return Err(ProvisionError::Fatal {
                        what,
                        detail: format!(
                            "Daytona reports state {state}: {}",
                            self.api
                                .scrub(dto.error_reason.as_deref().unwrap_or("no reason given"))
                        ),
                    })
                }
                "inactive" if !activated => {
                    let path = format!("/snapshots/{}/activate", seg(&dto.id));
                    self.api.send(&what, Method::POST, &path, None).await?;
                    activated = true;
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(ProvisionError::Down {
                    what,
                    detail: format!(
                        "still in state {state} after {:?}",
                        self.config.snapshot_timeout
                    ),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    async fn wait_volume(&self, name: &str) -> ProvisionResult<String> {
        let what = format!("daytona volume {name}");
        let path = format!("/volumes/by-name/{}", seg(name));
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            let dto: VolumeDto = self.api.get(&what, &path).await?;
            let state = dto.state.as_deref().unwrap_or("unknown");
            match state {
                "ready" => return Ok(dto.id),
                "error" | "deleted" | "deleting" | "pending_delete" => {
                    return Err(ProvisionError::Fatal {
                        what,
                        detail: format!(
                            "Daytona reports state {state}: {}",
                            self.api
                                .scrub(dto.error_reason.as_deref().unwrap_or("no reason given"))
                        ),
                    })
                }
                _ => {}
            }
            if Instant::now() >= deadline {
                return Err(ProvisionError::Down {
                    what,
                    detail: format!(
                        "still in state {state} after {:?}",
                        self.config.start_timeout
                    ),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }

    /// Waits until a deleted sandbox is gone (so that its volume is free to delete).
    async fn wait_gone(&self, id: &str) -> ProvisionResult<()> {
        let deadline = Instant::now() + self.config.start_timeout;
        loop {
            match self.sandbox(id).await {
                Err(ProvisionError::Missing { .. }) => return Ok(()),
                Ok(dto) if dto.state.as_deref() == Some("destroyed") => return Ok(()),
                Ok(_) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(ProvisionError::Down {
                    what: what_sandbox(id),
                    detail: format!(
                        "still being deleted after {:?}; its volume was kept",
                        self.config.start_timeout
                    ),
                });
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }
}

impl Provisioner for Daytona {
    fn kind(&self) -> &'static str {
        "daytona"
    }

    fn create<'a>(&'a self, spec: &'a SandboxSpec) -> BoxFuture<'a, ProvisionResult<Handle>> {
        Box::pin(async move {
            check_spec(spec)?;
            let mut labels = BTreeMap::new();
            labels.insert(LABEL_MANAGED.to_string(), "1".to_string());
            labels.insert(LABEL_NAME.to_string(), spec.name.clone());
            let mut body = json!({ "labels": labels, "env": spec.env, "public": false });
            if let Some(snapshot) = &spec.snapshot {
                body["snapshot"] = json!(snapshot);
            }
            if let Some(v) = &spec.volume {
                body["labels"][LABEL_VOLUME] = json!(v.volume);
                body["volumes"] = json!([{ "volumeId": v.volume, "mountPath": v.mount_path }]);
            }
            let what = format!("daytona sandbox for {}", spec.name);
            let made: SandboxDto = self.api.post(&what, "/sandbox", body).await?;
            match self.create_inner(&made.id).await {
                Ok(handle) => Ok(handle),
                Err(e) => {
                    // Whatever was made is deleted; the volume belongs to the caller.
                    if let Err(cleanup) = self.destroy(&made.id, true).await {
                        tracing::warn!(id = %made.id, error = %cleanup, "daytona: could not delete a sandbox whose create failed");
                    }
                    Err(e)
                }
            }
        })
    }

    fn pause<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<()>> {
        Box::pin(async move {
            let dto = self.sandbox(id).await?;
            match dto.state.as_deref() {
                Some("stopped" | "archived") => return Ok(()),
                Some("stopping") => {}
                _ => {
                    let path = format!("/sandbox/{}/stop", seg(id));
                    self.api
                        .send(&what_sandbox(id), Method::POST, &path, None)
                        .await?;
                }
            }
            self.wait_state(id, &["stopped", "archived"]).await
        })
    }

    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<Handle>> {
        Box::pin(async move {
            let dto = self.sandbox(id).await?;
            match dto.state.as_deref() {
                Some("started" | "starting" | "creating" | "restoring") => {}
                Some("destroyed" | "destroying") => {
                    return Err(ProvisionError::Missing {
                        what: what_sandbox(id),
                        detail: "Daytona reports it destroyed".into(),
                    })
                }
                _ => {
                    let path = format!("/sandbox/{}/start", seg(id));
                    self.api
                        .send(&what_sandbox(id), Method::POST, &path, None)
                        .await?;
                }
            }
            self.wait_state(id, &["started"]).await?;
            self.attach(id).await
        })
    }

    fn destroy<'a>(&'a self, id: &'a str, keep_volume: bool) -> BoxFuture<'a, ProvisionResult<()>> {
        Box::pin(async move {
            let dto = match self.sandbox(id).await {
                Ok(dto) => dto,
                Err(ProvisionError::Missing { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            let path = format!("/sandbox/{}", seg(id));
            match self
                .api
                .send(&what_sandbox(id), Method::DELETE, &path, None)
                .await
            {
                Ok(_) | Err(ProvisionError::Missing { .. }) => {}
                Err(e) => return Err(e),
            }
            let owned = dto
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_VOLUME))
                .filter(|v| !v.is_empty());
            if let (false, Some(volume)) = (keep_volume, owned) {
                self.wait_gone(id).await?;
                self.delete_volume(volume).await?;
            }
            Ok(())
        })
    }

    fn state<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<ProviderState>> {
        Box::pin(async move {
            match self.sandbox(id).await {
                Ok(dto) => Ok(map_state(dto.state.as_deref().unwrap_or("unknown"))),
                Err(ProvisionError::Missing { .. }) => Ok(ProviderState::Missing),
                Err(e) => Err(e),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, ProvisionResult<Vec<Listed>>> {
        Box::pin(async move {
            let filter = json!({ LABEL_MANAGED: "1" }).to_string();
            let path = format!("/sandbox?labels={}", seg(&filter));
            let answer: SandboxList = self.api.get("daytona sandboxes", &path).await?;
            let items = match answer {
                SandboxList::Plain(items) => items,
                SandboxList::Page { items } => items,
            };
            Ok(items
                .into_iter()
                .filter_map(|dto| {
                    let labels = dto.labels.unwrap_or_default();
                    // The server's filter is not trusted to have been applied.
                    if labels.get(LABEL_MANAGED).map(String::as_str) != Some("1") {
                        return None;
                    }
                    Some(Listed {
                        name: labels.get(LABEL_NAME).cloned(),
                        state: map_state(dto.state.as_deref().unwrap_or("unknown")),
                        id: dto.id,
                    })
                })
                .collect())
        })
    }

    fn snapshot<'a>(&'a self, spec: &'a SnapshotSpec) -> BoxFuture<'a, ProvisionResult<String>> {
        Box::pin(async move {
            let dockerfile = dockerfile(spec)?;
            let name = spec.key();
            let what = format!("daytona snapshot {name}");
            let path = format!("/snapshots/{}", seg(&name));
            match self.api.get::<SnapshotDto>(&what, &path).await {
                Ok(_) => return self.wait_snapshot(&name).await,
                Err(ProvisionError::Missing { .. }) => {}
                Err(e) => return Err(e),
            }
            let body = match dockerfile {
                None => json!({ "name": name, "imageName": spec.base }),
                Some(text) => json!({ "name": name, "buildInfo": { "dockerfileContent": text } }),
            };
            match self
                .api
                .send(&what, Method::POST, "/snapshots", Some(body))
                .await
            {
                Ok(_) => {}
                // Made by someone else in the meantime (409): use theirs.
                Err(e @ ProvisionError::Fatal { .. }) => {
                    if self.api.get::<SnapshotDto>(&what, &path).await.is_err() {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
            self.wait_snapshot(&name).await
        })
    }

    fn create_volume<'a>(&'a self, name: &'a str) -> BoxFuture<'a, ProvisionResult<String>> {
        Box::pin(async move {
            if name.is_empty()
                || name.len() > 255
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return Err(ProvisionError::Invalid {
                    key: "volume name".into(),
                    rule: "it must be 1 to 255 letters, digits and . _ -".into(),
                });
            }
            let what = format!("daytona volume {name}");
            let path = format!("/volumes/by-name/{}", seg(name));
            match self.api.get::<VolumeDto>(&what, &path).await {
                Ok(_) => return self.wait_volume(name).await,
                Err(ProvisionError::Missing { .. }) => {}
                Err(e) => return Err(e),
            }
            self.api
                .send(
                    &what,
                    Method::POST,
                    "/volumes",
                    Some(json!({ "name": name })),
                )
                .await?;
            self.wait_volume(name).await
        })
    }

    fn delete_volume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, ProvisionResult<()>> {
        Box::pin(async move {
            let path = format!("/volumes/{}", seg(id));
            match self
                .api
                .send(&format!("daytona volume {id}"), Method::DELETE, &path, None)
                .await
            {
                Ok(_) | Err(ProvisionError::Missing { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })
    }
}

/// Returns the state wardfs acts on for a Daytona sandbox state.
fn map_state(state: &str) -> ProviderState {
    match state {
        "creating" | "restoring" | "starting" | "pending_build" | "building_snapshot"
        | "pulling_snapshot" => ProviderState::Creating,
        "started" => ProviderState::Running,
        // Daytona's stop is wardfs's pause: the files stay, a start brings it back quickly.
        "stopped" | "stopping" => ProviderState::Paused,
        // Archived (files moved to object storage) or failed: a start may bring it back.
        "archived" | "archiving" | "error" => ProviderState::Stopped,
        "destroyed" | "destroying" => ProviderState::Missing,
        other => ProviderState::Other(other.to_string()),
    }
}

fn what_sandbox(id: &str) -> String {
    format!("daytona sandbox {id}")
}

/// Returns `value` encoded as one path segment or query value.
fn seg(value: &str) -> String {
    utf8_percent_encode(value, SEGMENT).to_string()
}

/// Checks what `create` sends, naming the field and the rule it broke.
fn check_spec(spec: &SandboxSpec) -> ProvisionResult<()> {
    let invalid = |key: &str, rule: &str| {
        Err(ProvisionError::Invalid {
            key: key.to_string(),
            rule: rule.to_string(),
        })
    };
    if spec.name.is_empty() || spec.name.chars().any(char::is_control) {
        return invalid(
            "sandbox name",
            "it must be non-empty, without control characters",
        );
    }
    for key in spec.env.keys() {
        let ok = !key.is_empty()
            && !key.starts_with(|c: char| c.is_ascii_digit())
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return invalid(
                &format!("env {key:?}"),
                "a variable's name is letters, digits and _, not starting with a digit",
            );
        }
    }
    if let Some(v) = &spec.volume {
        if v.volume.is_empty() {
            return invalid("volume", "it must name a volume id");
        }
        if !v.mount_path.starts_with('/') || v.mount_path == "/" {
            return invalid(
                "volume.mount_path",
                "it must be an absolute path inside the sandbox, not /",
            );
        }
    }
    Ok(())
}

/// Returns the Dockerfile of a spec with setup commands (`None`: the base image as it is).
fn dockerfile(spec: &SnapshotSpec) -> ProvisionResult<Option<String>> {
    let base = spec.base.trim();
    if base.is_empty() || base.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ProvisionError::Invalid {
            key: "snapshot.base".into(),
            rule: "it must be one image name, without spaces or line breaks".into(),
        });
    }
    if spec.setup.is_empty() {
        return Ok(None);
    }
    let mut text = format!("FROM {base}\n");
    for (i, cmd) in spec.setup.iter().enumerate() {
        if cmd.trim().is_empty() || cmd.contains(['\n', '\r']) {
            return Err(ProvisionError::Invalid {
                key: format!("snapshot.setup[{i}]"),
                rule: "a setup command is one non-empty line".into(),
            });
        }
        text.push_str(&format!("RUN {cmd}\n"));
    }
    Ok(Some(text))
}

/// Returns the shell script that (re)starts `sandbox-agent` detached. It holds no single
/// quote, so the toolbox's command parser passes it to `sh -c` whole.
fn agent_script(command: &str, token: &str, port: u16) -> String {
    let script = format!(
        r#"d="${{TMPDIR:-/tmp}}/wardfs-agent"; mkdir -p "$d" || exit 1
command -v {command} >/dev/null 2>&1 || {{ echo "{command} is not installed in this sandbox"; exit 127; }}
if [ -f "$d/pid" ]; then p="$(cat "$d/pid")"; kill "$p" 2>/dev/null; i=0; while kill -0 "$p" 2>/dev/null && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i+1)); done; fi
nohup {command} server --token {token} --no-telemetry --host 127.0.0.1 --port {port} >"$d/log" 2>&1 </dev/null &
echo "$!" >"$d/pid""#
    );
    debug_assert!(!script.contains('\''));
    script
}

/// Returns a new random token (128 bits, hex).
fn fresh_token() -> ProvisionResult<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| ProvisionError::Fatal {
            what: "sandbox-agent token".into(),
            detail: format!("cannot read /dev/urandom: {e}"),
        })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks the preview URL Daytona handed back: https (plain http only to a loopback host), no
/// credentials, no query. Returns it without a trailing slash.
fn check_preview_url(url: &str, api: &Api) -> ProvisionResult<String> {
    let bad = |rule: &str| ProvisionError::Fatal {
        what: "daytona preview URL".into(),
        detail: format!("{:?} {rule}", api.scrub(&clip(url))),
    };
    let uri: Uri = url.parse().map_err(|_| bad("is not a URL"))?;
    let host = uri.host().ok_or_else(|| bad("names no host"))?;
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if is_loopback(host) => {}
        _ => return Err(bad("must be https (plain http only to a loopback host)")),
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(bad("must not hold credentials"));
    }
    if uri.query().is_some() {
        return Err(bad("must not have a query string"));
    }
    Ok(url.trim_end_matches('/').to_string())
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Returns at most [`MAX_DETAIL_CHARS`] characters of `text`.
fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The client bound to the API host: the only holder of the API key.
struct Api {
    base: String,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    auth: HeaderValue,
    /// The key itself, only to mask any echo of it in an answer.
    key: Token,
    timeout: Duration,
    max_answer: u64,
}

/// What one exchange gave back.
struct Answer {
    status: StatusCode,
    body: Vec<u8>,
    cut: bool,
    location: Option<String>,
}

impl Api {
    fn new(config: &DaytonaConfig, key: Token) -> ProvisionResult<Api> {
        let invalid = |rule: &str| ProvisionError::Invalid {
            key: "daytona.api_url".into(),
            rule: rule.to_string(),
        };
        let url = config.api_url.trim_end_matches('/');
        let uri: Uri = url.parse().map_err(|_| invalid("it must be a URL"))?;
        let host = uri.host().ok_or_else(|| invalid("it must name a host"))?;
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") if is_loopback(host) => false,
            Some("http") => return Err(invalid(
                "it must be https: the API key is sent to it (plain http only to a loopback host)",
            )),
            _ => return Err(invalid("it must start with https://")),
        };
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(invalid(
                "it must not hold credentials; the key comes from the variable named by api_key_env",
            ));
        }
        if uri.query().is_some() || uri.path().contains('#') {
            return Err(invalid("it must not have a query string or fragment"));
        }
        let mut auth =
            HeaderValue::from_str(&format!("Bearer {}", key.expose())).map_err(|_| {
                ProvisionError::Invalid {
                    key: "daytona.api_key_env".into(),
                    rule: format!("the key in ${} must be printable ASCII", config.api_key_env),
                }
            })?;
        auth.set_sensitive(true);

        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.connect_timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new();
        let connector = if https {
            builder
                .with_native_roots()
                .map_err(|e| ProvisionError::Fatal {
                    what: "daytona".into(),
                    detail: format!("no root certificates for https: {e}"),
                })?
                .https_only()
                .enable_http1()
                .wrap_connector(http)
        } else {
            // Plain http to loopback never reaches the TLS layer.
            let tls = rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            builder
                .with_tls_config(tls)
                .https_or_http()
                .enable_http1()
                .wrap_connector(http)
        };
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .build(connector);
        Ok(Api {
            base: url.to_string(),
            client,
            auth,
            key,
            timeout: config.request_timeout,
            max_answer: config.max_answer_bytes,
        })
    }

    /// Masks any occurrence of the API key in text that came from the server.
    fn scrub(&self, text: &str) -> String {
        let key = self.key.expose();
        if key.len() >= 4 && text.contains(key) {
            text.replace(key, "***")
        } else {
            text.to_string()
        }
    }

    async fn get<T: DeserializeOwned>(&self, what: &str, path: &str) -> ProvisionResult<T> {
        let body = self.send(what, Method::GET, path, None).await?;
        self.decode(what, "GET", path, &body)
    }

    async fn post<T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        body: serde_json::Value,
    ) -> ProvisionResult<T> {
        let answer = self.send(what, Method::POST, path, Some(body)).await?;
        self.decode(what, "POST", path, &answer)
    }

    fn decode<T: DeserializeOwned>(
        &self,
        what: &str,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> ProvisionResult<T> {
        serde_json::from_slice(body).map_err(|e| ProvisionError::Fatal {
            what: what.to_string(),
            detail: self.scrub(&format!("{method} {path}: unexpected JSON ({e})")),
        })
    }

    /// Sends one request to `path` (under `api_url`) and returns the answer's body when its
    /// status is a success; otherwise the classified error.
    async fn send(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> ProvisionResult<Bytes> {
        let uri = format!("{}{}", self.base, path);
        let mut req = Request::builder()
            .method(method.clone())
            .uri(&uri)
            .header(AUTHORIZATION, self.auth.clone())
            .header(ACCEPT, "application/json");
        let data = match body {
            Some(v) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let req = req
            .body(Full::new(data))
            .map_err(|e| ProvisionError::Fatal {
                what: what.to_string(),
                detail: format!("{method} {path}: cannot build the request: {e}"),
            })?;
        let limit = self.max_answer;
        let exchange = async {
            let resp = self.client.request(req).await.map_err(|e| chain(&e))?;
            let status = resp.status();
            let location = resp
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            // Never more than the cap of an answer in memory, whatever the server sends.
            let cap = if status.is_success() {
                limit
            } else {
                limit.min(MAX_ERROR_BYTES)
            };
            let mut body = resp.into_body();
            let mut data = Vec::new();
            let mut cut = false;
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| chain(&e))?;
                if let Ok(chunk) = frame.into_data() {
                    if (data.len() + chunk.len()) as u64 > cap {
                        cut = true;
                        break;
                    }
                    data.extend_from_slice(&chunk);
                }
            }
            Ok::<_, String>(Answer {
                status,
                body: data,
                cut,
                location,
            })
        };
        let answer = match tokio::time::timeout(self.timeout, exchange).await {
            Err(_) => {
                return Err(ProvisionError::Down {
                    what: what.to_string(),
                    detail: format!(
                        "{method} {path}: no complete answer within {:?}",
                        self.timeout
                    ),
                })
            }
            Ok(Err(reason)) => {
                return Err(ProvisionError::Down {
                    what: what.to_string(),
                    detail: format!("{method} {path}: {}", self.scrub(&reason)),
                })
            }
            Ok(Ok(answer)) => answer,
        };
        tracing::debug!(%method, path, status = answer.status.as_u16(), "daytona");
        if answer.status.is_success() {
            if answer.cut {
                return Err(ProvisionError::Fatal {
                    what: what.to_string(),
                    detail: format!(
                        "{method} {path}: the answer is larger than {limit} bytes; stopped reading it"
                    ),
                });
            }
            return Ok(Bytes::from(answer.body));
        }
        Err(self.classify(what, &method, path, &answer))
    }

    /// Turns a failed answer into the class the session logic acts on.
    fn classify(&self, what: &str, method: &Method, path: &str, answer: &Answer) -> ProvisionError {
        let status = answer.status.as_u16();
        let what = what.to_string();
        if answer.status.is_redirection() {
            let to = answer
                .location
                .as_deref()
                .and_then(|l| l.parse::<Uri>().ok())
                .and_then(|u| u.host().map(str::to_string))
                .unwrap_or_else(|| "elsewhere".into());
            return ProvisionError::Fatal {
                what,
                detail: format!(
                    "{method} {path}: HTTP {status} redirect to {} not followed: the API key is \
                     sent only to the host of daytona.api_url",
                    self.scrub(&to)
                ),
            };
        }
        let detail = format!(
            "{method} {path}: HTTP {status}: {}",
            self.scrub(&error_message(&answer.body))
        );
        match status {
            404 => ProvisionError::Missing { what, detail },
            401 | 403 => ProvisionError::Auth { what, detail },
            429 | 500..=599 => ProvisionError::Down { what, detail },
            _ => ProvisionError::Fatal { what, detail },
        }
    }
}

/// Returns the human text of a Daytona error answer (`{statusCode, message, error}`, where
/// `message` may be a list), or the body's text.
fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Problem {
        #[serde(default)]
        message: Option<serde_json::Value>,
        #[serde(default)]
        error: Option<String>,
    }
    if let Ok(p) = serde_json::from_slice::<Problem>(body) {
        let text = match p.message {
            Some(serde_json::Value::String(s)) => Some(s),
            Some(serde_json::Value::Array(items)) => Some(
                items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| i.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
            ),
            _ => p.error,
        };
        if let Some(text) = text {
            return clip(&text);
        }
    }
    clip(String::from_utf8_lossy(body).trim())
}

/// The slice of Daytona's `Sandbox` this provider reads (unknown fields ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SandboxDto {
    id: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    error_reason: Option<String>,
}

/// `GET /sandbox` answers a list; some versions a page of them.
#[derive(Deserialize)]
#[serde(untagged)]
enum SandboxList {
    Plain(Vec<SandboxDto>),
    Page { items: Vec<SandboxDto> },
}

/// Daytona's `PortPreviewUrl`.
#[derive(Deserialize)]
struct PreviewDto {
    url: String,
    #[serde(default)]
    token: Option<String>,
}

/// The slice of Daytona's `SnapshotDto` read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotDto {
    id: String,
    name: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error_reason: Option<String>,
}

/// The slice of Daytona's `VolumeDto` read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeDto {
    id: String,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    error_reason: Option<String>,
}

/// The toolbox's `ExecuteResponse`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecuteDto {
    exit_code: i32,
    #[serde(default)]
    result: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_map_to_what_the_sessions_act_on() {
        assert_eq!(map_state("started"), ProviderState::Running);
        assert_eq!(map_state("stopped"), ProviderState::Paused);
        assert_eq!(map_state("archived"), ProviderState::Stopped);
        assert_eq!(map_state("error"), ProviderState::Stopped);
        assert_eq!(map_state("creating"), ProviderState::Creating);
        assert_eq!(map_state("destroyed"), ProviderState::Missing);
        assert_eq!(
            map_state("build_failed"),
            ProviderState::Other("build_failed".into())
        );
    }

    #[test]
    fn the_agent_script_passes_the_toolbox_parser_whole() {
        let s = agent_script("sandbox-agent", "abc123", 2468);
        assert!(!s.contains('\''));
        assert!(s.contains(
            "sandbox-agent server --token abc123 --no-telemetry --host 127.0.0.1 --port 2468"
        ));
    }

    #[test]
    fn a_dockerfile_is_built_only_with_setup_and_refuses_line_breaks() {
        let mut spec = SnapshotSpec {
            network: false,
            base: "debian:12".into(),
            setup: vec![],
        };
        assert_eq!(dockerfile(&spec).unwrap(), None);
        spec.setup = vec!["apt-get install -y ripgrep".into()];
        assert_eq!(
            dockerfile(&spec).unwrap().unwrap(),
            "FROM debian:12\nRUN apt-get install -y ripgrep\n"
        );
        spec.setup = vec!["true\nUSER root".into()];
        let err = dockerfile(&spec).unwrap_err();
        assert!(err.to_string().contains("snapshot.setup[0]"), "{err}");
    }

    #[test]
    fn error_messages_read_daytonas_shape() {
        assert_eq!(
            error_message(
                br#"{"statusCode":404,"message":"Sandbox not found","error":"Not Found"}"#
            ),
            "Sandbox not found"
        );
        assert_eq!(
            error_message(br#"{"statusCode":400,"message":["a","b"]}"#),
            "a; b"
        );
        assert_eq!(error_message(b"plain"), "plain");
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        assert!(is_loopback("127.0.0.1"));
        assert!(is_loopback("[::1]"));
        assert!(is_loopback("localhost"));
        assert!(!is_loopback("10.0.0.1"));
        assert!(!is_loopback("example.test"));
    }
}

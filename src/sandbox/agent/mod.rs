//! The `sandbox-agent` provider: a directory inside any sandbox that runs the open-source
//! `sandbox-agent` server with `--token` and `--no-telemetry` (Daytona, E2B, Vercel, Modal, a VM),
//! over its HTTP API.
//!
//! Routes used (measured on 0.4.2): `GET /v1/health`, `GET /v1/fs/stat|entries|file?path=`,
//! `PUT /v1/fs/file?path=` (raw bytes; creates parents), `POST /v1/fs/mkdir?path=` (like
//! `mkdir -p`), `DELETE /v1/fs/entry?path=[&recursive=true]`, `POST /v1/fs/move`
//! `{from, to, overwrite}`, `POST /v1/fs/upload-batch?path=` (a plain tar,
//! `Content-Type: application/x-tar`) and `POST /v1/processes/run`; for long-running commands
//! ([`process`]) `POST /v1/processes`, `GET /v1/processes/{id}[/logs]`, `POST
//! /v1/processes/{id}/kill` and `DELETE /v1/processes/{id}`. The agent and ACP routes
//! are never called (they download coding agents).
//!
//! What the server really does, and how this provider copes:
//! * Request bodies over 2 MiB are refused (413): larger files are uploaded as 2 MiB parts
//!   beside the destination and joined in the sandbox by one command (`cat`, then `mv` over the
//!   destination), so the file appears whole or not at all; many small items travel as tar
//!   batches of at most 2 MiB.
//! * A missing path is HTTP 400 `path not found:` (never 404); other failed system calls are
//!   502 with the errno in the text. Both become the matching [`SandboxFsError`].
//! * `stat` and listings follow symlinks and carry no modes, so [`SandboxFs::walk`] runs
//!   `find -printf` through exec; a dangling symlink is "not found" to the fs routes, so removing
//!   or renaming one falls back to `rm`/`mv` through exec.
//! * `move` with `overwrite: true` deletes a directory in the way, contents and all: it is sent
//!   only after checking that the destination is not a directory.
//!
//! The bearer token comes from the environment variable named in the config, is read once when
//! the provider is built, travels only in a header marked sensitive, and is never logged,
//! printed or stored.

mod batch;
pub(crate) mod http;
pub mod process;
mod walk;
mod wire;

/// Entry points for the fuzz targets in `fuzz/`: the walk-record and listing parsers and the
/// tar packer, private otherwise. Not an API.
#[doc(hidden)]
pub mod fuzzing {
    use crate::core::provider::{BatchItem, RemoteEntry, WalkEntry};

    /// Parses the records of the remote walk script, given whole.
    pub fn parse_walk(output: &[u8]) -> Result<Vec<WalkEntry>, String> {
        super::walk::parse(output, "/", usize::MAX).map_err(|stop| format!("{stop:?}"))
    }

    /// Parses the same records as they would arrive, in pieces of `piece` bytes.
    pub fn parse_walk_in_pieces(output: &[u8], piece: usize) -> Result<Vec<WalkEntry>, String> {
        let mut records = super::walk::Records::new("/", usize::MAX);
        for part in output.chunks(piece.max(1)) {
            if records.feed(part).is_err() {
                break;
            }
        }
        records.finish().map_err(|stop| format!("{stop:?}"))
    }

    /// Parses a listing (`GET /v1/fs/entries`), keeping at most `max_entries` entries.
    pub fn parse_listing(body: &[u8], max_entries: usize) -> Result<Vec<RemoteEntry>, String> {
        let admit = |name: &str| super::admit("/", name, false);
        super::wire::parse_listing(body, max_entries, &admit).map_err(|e| format!("{e:?}"))
    }

    /// One planned archive: the items it holds and its bytes (or why it could not be built).
    pub type Packed = (Vec<BatchItem>, Result<Vec<u8>, String>);

    /// Plans `items` into archives of at most `limit` bytes and builds them; returns the
    /// archives and the items set aside as too large.
    pub fn pack(items: Vec<BatchItem>, limit: u64) -> (Vec<Packed>, Vec<BatchItem>) {
        let plan = super::batch::plan(items, limit);
        let archives = plan
            .archives
            .into_iter()
            .map(|items| {
                let bytes = super::batch::archive(&items).map_err(|e| e.to_string());
                (items, bytes)
            })
            .collect();
        (archives, plan.large)
    }
}

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::core::foreign::{self, GitDir};
use crate::core::provider::{
    check_relative_path, check_remote_path, command_result, join_remote, walk_by_listing,
    BatchItem, BatchReport, BoxFuture, Caps, ExecOutput, ExecRequest, HashAlgo, MetaUpdate,
    ProviderLimits, RemoteEntry, RemoteMeta, SandboxFs, SandboxFsError, SandboxFsResult, WalkCap,
    WalkEntry,
};
use crate::core::EntryKind;
use http::{query_value, Body, Bounds, Payload, Transport, FILE_LIMIT};

/// The largest request body sandbox-agent 0.4.2 accepts (`413 Payload Too Large` above).
pub const MAX_BODY_BYTES: u64 = 2 * 1024 * 1024;
/// The most standard output `/v1/processes/run` returns before truncating.
pub const MAX_EXEC_OUTPUT_BYTES: u64 = 1024 * 1024;
/// The longest run `/v1/processes/run` allows (`maxRunTimeoutMs`).
const MAX_EXEC_TIMEOUT: Duration = Duration::from_secs(300);
const PROVIDER: &str = "sandbox-agent";

/// Exit code of the helper scripts for "is a directory" (EISDIR).
const EXIT_IS_DIR: i32 = 21;
/// Exit code of the helper scripts for "not there".
const EXIT_MISSING: i32 = walk::EXIT_NOT_FOUND;

/// How to reach one sandbox-agent (running with a token; see `tests/support/sandbox_agent.rs` for the flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxAgentConfig {
    /// Base URL (`http://127.0.0.1:2468`, `https://sandbox.example/agent`).
    pub url: String,
    /// The environment variable holding the bearer token; `None` for a server started with
    /// `--no-token`.
    pub token_env: Option<String>,
    /// Longest time one request may take (exec adds its own run time to this).
    pub request_timeout: Duration,
    /// Longest time opening a connection may take.
    pub connect_timeout: Duration,
    /// Default time limit of a command run with exec (capped at the server's 300 s).
    pub exec_timeout: Duration,
    /// Largest JSON answer read (stat, listings, command output); a longer one is an error.
    pub max_answer_bytes: u64,
    /// Largest walk listing downloaded as a file (trees too large for one command's output).
    pub max_listing_bytes: u64,
    /// Most entries a walk or a listing may hold; past it the call fails, naming
    /// `limits.sandbox_walk_entries`.
    pub max_walk_entries: usize,
    /// Largest file downloaded.
    pub max_file_bytes: u64,
    /// One more header sent with every request, for a proxy in front of the server that wants
    /// its own credential beside the server's bearer token (Daytona's preview proxy). Its value
    /// is never logged.
    pub extra_header: Option<ExtraHeader>,
}

impl SandboxAgentConfig {
    /// Returns a config for `url` with the default timeouts (30 s per request, 5 s to connect,
    /// 120 s per command) and no token.
    pub fn new(url: impl Into<String>) -> SandboxAgentConfig {
        SandboxAgentConfig {
            url: url.into(),
            token_env: None,
            request_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            exec_timeout: Duration::from_secs(120),
            max_answer_bytes: crate::config::Limits::default().sandbox_answer_bytes,
            max_listing_bytes: crate::config::Limits::default().sandbox_listing_bytes,
            max_walk_entries: crate::config::Limits::default().sandbox_walk_entries,
            max_file_bytes: crate::config::Limits::default().sandbox_file_bytes,
            extra_header: None,
        }
    }

    /// Sets the answer, listing, entry and file caps from `[limits]`.
    pub fn with_limits(mut self, limits: &crate::config::Limits) -> SandboxAgentConfig {
        self.max_answer_bytes = limits.sandbox_answer_bytes;
        self.max_listing_bytes = limits.sandbox_listing_bytes;
        self.max_walk_entries = limits.sandbox_walk_entries;
        self.max_file_bytes = limits.sandbox_file_bytes;
        self
    }
}

/// A bearer token. Its `Debug` output hides it; it is never logged or stored.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// Wraps a token.
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into())
    }

    /// Returns the secret itself, for the one place that puts it into a request.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// A header sent with every request besides the bearer token (`x-daytona-preview-token: …`).
/// `Debug` shows its name only.
#[derive(Clone, PartialEq, Eq)]
pub struct ExtraHeader {
    /// The header's name.
    pub name: String,
    /// The header's value, a secret.
    pub value: Token,
}

impl std::fmt::Debug for ExtraHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraHeader")
            .field("name", &self.name)
            .field("value", &self.value)
            .finish()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(***)")
    }
}

/// A connection to one sandbox-agent, implementing [`SandboxFs`].
pub struct SandboxAgent {
    http: Transport,
    exec_timeout: Duration,
    max_answer: u64,
    max_listing: u64,
    max_entries: usize,
    max_file: u64,
    /// Set once `b3sum` turned out to be missing in the sandbox.
    no_b3sum: AtomicBool,
    /// Makes the names of chunk files unique within this process.
    nonce: AtomicU64,
}

impl std::fmt::Debug for SandboxAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxAgent")
            .field("url", &self.http.url())
            .finish_non_exhaustive()
    }
}

impl SandboxAgent {
    /// Builds the provider for `config`, reading the token from the environment variable it
    /// names. Nothing is sent until the first operation ([`SandboxFs::check`] to test the
    /// connection).
    pub fn connect(config: &SandboxAgentConfig) -> SandboxFsResult<SandboxAgent> {
        let token = match &config.token_env {
            Some(var) => match std::env::var(var) {
                Ok(token) if !token.is_empty() => Some(Token(token)),
                _ => {
                    return Err(SandboxFsError::TokenMissing {
                        url: config.url.clone(),
                        var: var.clone(),
                    })
                }
            },
            None => None,
        };
        SandboxAgent::with_token(config, token)
    }

    /// Builds the provider for `config` with an explicit token (`token_env` is ignored).
    pub fn with_token(
        config: &SandboxAgentConfig,
        token: Option<Token>,
    ) -> SandboxFsResult<SandboxAgent> {
        let http = Transport::new(
            &config.url,
            token.as_ref().map(|t| t.0.as_str()),
            config.extra_header.as_ref(),
            config.request_timeout,
            config.connect_timeout,
        )?;
        Ok(SandboxAgent {
            http,
            exec_timeout: config.exec_timeout.min(MAX_EXEC_TIMEOUT),
            max_answer: config.max_answer_bytes,
            max_listing: config.max_listing_bytes,
            max_entries: config.max_walk_entries,
            max_file: config.max_file_bytes,
            no_b3sum: AtomicBool::new(false),
            nonce: AtomicU64::new(0),
        })
    }

    /// Returns the server's base URL.
    pub fn url(&self) -> &str {
        self.http.url()
    }

    /// Returns how many HTTP requests this provider has sent.
    pub fn requests(&self) -> u64 {
        self.http.counters.requests.load(Ordering::Relaxed)
    }

    /// Returns how many request-body bytes this provider has sent.
    pub fn bytes_sent(&self) -> u64 {
        self.http.counters.bytes_sent.load(Ordering::Relaxed)
    }

    fn fs_route(route: &str, path: &str) -> String {
        format!("/v1/fs/{route}?path={}", query_value(path))
    }

    async fn send(
        &self,
        op: &'static str,
        path: &str,
        method: Method,
        route: &str,
        body: Option<Body>,
    ) -> SandboxFsResult<Bytes> {
        let cap = (self.max_answer, Payload::Answer);
        self.send_limited(op, path, method, route, body, cap).await
    }

    /// Like `send`, with its own cap on the answer's size and what the answer is (which names
    /// the limit a larger one breaks).
    async fn send_limited(
        &self,
        op: &'static str,
        path: &str,
        method: Method,
        route: &str,
        body: Option<Body>,
        (limit, what): (u64, Payload),
    ) -> SandboxFsResult<Bytes> {
        let reply = self
            .http
            .send(
                op,
                path,
                method,
                route,
                body,
                Bounds {
                    timeout: self.http.timeout,
                    limit,
                    what,
                },
            )
            .await?;
        Ok(reply.body)
    }

    async fn get_json<T: DeserializeOwned>(
        &self,
        op: &'static str,
        path: &str,
        route: &str,
    ) -> SandboxFsResult<T> {
        let body = self.send(op, path, Method::GET, route, None).await?;
        self.decode(op, &body)
    }

    fn decode<T: DeserializeOwned>(&self, op: &'static str, body: &[u8]) -> SandboxFsResult<T> {
        serde_json::from_slice(body).map_err(|e| self.unexpected(op, &e))
    }

    /// Returns the error of an answer that is not the JSON `op` expects.
    fn unexpected(&self, op: &'static str, e: &serde_json::Error) -> SandboxFsError {
        SandboxFsError::Protocol {
            url: self.url().to_string(),
            op,
            reason: format!("unexpected JSON ({e})"),
        }
    }

    /// Runs `script` with `sh -c` in the sandbox, `args` as `$1…`.
    async fn sh(
        &self,
        op: &'static str,
        path: &str,
        script: &str,
        args: &[&str],
    ) -> SandboxFsResult<ExecOutput> {
        let mut all = vec!["-c", script, "sh"];
        all.extend_from_slice(args);
        self.run(op, path, ExecRequest::new("sh", all)).await
    }

    /// Runs a command through `/v1/processes/run`.
    async fn run(
        &self,
        op: &'static str,
        path: &str,
        req: ExecRequest,
    ) -> SandboxFsResult<ExecOutput> {
        let limit = req
            .timeout
            .unwrap_or(self.exec_timeout)
            .min(MAX_EXEC_TIMEOUT);
        let mut body = process::process_body(&req);
        body["timeoutMs"] = json!(limit.as_millis() as u64);
        let reply = self
            .http
            .send(
                op,
                path,
                Method::POST,
                "/v1/processes/run",
                Some(Body::json(&body)),
                Bounds {
                    timeout: limit + self.http.timeout,
                    limit: self.max_answer,
                    what: Payload::Answer,
                },
            )
            .await?;
        let out: wire::RunOutput = self.decode(op, &reply.body)?;
        Ok(out.into())
    }

    /// Removes `path` when it is a symlink, through exec; returns whether it was one.
    async fn remove_link(&self, path: &str) -> SandboxFsResult<bool> {
        let out = self
            .sh(
                "remove",
                path,
                "[ -L \"$1\" ] || exit 66\nrm -f \"$1\"",
                &[path],
            )
            .await?;
        if out.exit_code == Some(EXIT_MISSING) {
            return Ok(false);
        }
        command_result("remove", path, "rm", &out).map(|()| true)
    }

    /// Returns the BLAKE3 of a remote file hashed here, the download streamed through the
    /// hasher (never whole in memory): for sandboxes without `b3sum`.
    async fn blake3_here(&self, path: &str) -> SandboxFsResult<String> {
        struct Sink(blake3::Hasher);
        impl std::io::Write for Sink {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.update(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut sink = Sink(blake3::Hasher::new());
        self.read_into(path, self.max_file, &mut sink).await?;
        Ok(sink.0.finalize().to_hex().to_string())
    }

    /// Returns a name part no other upload of this process uses.
    fn unique(&self) -> String {
        let n = self.nonce.fetch_add(1, Ordering::Relaxed);
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        format!("{:x}-{:x}-{n}", std::process::id(), t)
    }

    /// Writes a file over the body limit: parts beside it, joined and moved into place by one
    /// command, so the destination changes only once, completely.
    async fn write_chunked(&self, path: &str, data: Bytes) -> SandboxFsResult<()> {
        let len = data.len() as u64;
        self.write_pieces(path, len, |at, n| {
            Ok(data.slice(at as usize..at as usize + n))
        })
        .await
    }

    /// [`write_chunked`](Self::write_chunked) with the pieces read from a local file one at a
    /// time, so an upload holds one piece in memory, never the file.
    async fn upload_chunked(
        &self,
        path: &str,
        src: &std::fs::File,
        len: u64,
    ) -> SandboxFsResult<()> {
        self.write_pieces(path, len, |at, n| {
            let mut buf = vec![0u8; n];
            std::os::unix::fs::FileExt::read_exact_at(src, &mut buf, at).map_err(|source| {
                SandboxFsError::Spool {
                    path: path.to_string(),
                    source,
                }
            })?;
            Ok(Bytes::from(buf))
        })
        .await
    }

    /// Sends `len` bytes as parts of at most the body limit (`piece(offset, n)` gives each),
    /// then joins them in place.
    async fn write_pieces(
        &self,
        path: &str,
        len: u64,
        piece: impl Fn(u64, usize) -> SandboxFsResult<Bytes>,
    ) -> SandboxFsResult<()> {
        let (parent, name) = split_parent(path);
        let stem = format!(
            "{}/.{name}.wardfs-{}",
            parent.trim_end_matches('/'),
            self.unique()
        );
        let mut parts = Vec::new();
        let mut at = 0u64;
        let mut i = 0usize;
        while at < len {
            let n = (len - at).min(MAX_BODY_BYTES) as usize;
            let part = format!("{stem}.part{i:05}");
            let sent = match piece(at, n) {
                Ok(data) => {
                    self.send(
                        "write",
                        path,
                        Method::PUT,
                        &Self::fs_route("file", &part),
                        Some(Body::bytes(data)),
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            parts.push(part);
            if let Err(e) = sent {
                self.discard(&parts).await;
                return Err(e);
            }
            at += n as u64;
            i += 1;
        }
        const JOIN: &str = r#"set -e
dest=$1; tmp=$2; size=$3; shift 3
trap 'rm -f "$tmp" "$@"' EXIT
if [ -d "$dest" ] && [ ! -L "$dest" ]; then echo "$dest: is a directory" >&2; exit 21; fi
cat "$@" > "$tmp"
got=$(wc -c < "$tmp"); got=$((got))
if [ "$got" -ne "$size" ]; then echo "joined $got bytes, expected $size" >&2; exit 72; fi
if [ -e "$dest" ]; then chmod "$(stat -c %a "$dest")" "$tmp"; fi
mv -f "$tmp" "$dest""#;
        let tmp = format!("{stem}.tmp");
        let size = len.to_string();
        let mut args = vec![path, tmp.as_str(), size.as_str()];
        args.extend(parts.iter().map(String::as_str));
        let out = match self.sh("write", path, JOIN, &args).await {
            Ok(out) => out,
            Err(e) => {
                self.discard(&parts).await;
                return Err(e);
            }
        };
        if out.exit_code == Some(EXIT_IS_DIR) {
            return Err(SandboxFsError::IsDir {
                path: path.to_string(),
            });
        }
        command_result("write", path, "cat/mv", &out)
    }

    /// Deletes uploaded parts after a failure, as far as the server still answers.
    async fn discard(&self, parts: &[String]) {
        for part in parts {
            let _ = self
                .send(
                    "write",
                    part,
                    Method::DELETE,
                    &Self::fs_route("entry", part),
                    None,
                )
                .await;
        }
    }

    /// Sends one tar archive to `upload-batch` below `root`.
    async fn upload_archive(&self, root: &str, items: &[BatchItem]) -> SandboxFsResult<()> {
        let archive = batch::archive(items)?;
        self.send(
            "put_batch",
            root,
            Method::POST,
            &Self::fs_route("upload-batch", root),
            Some(Body::tar(archive)),
        )
        .await
        .map(|_| ())
    }

    /// Walks with `find` writing to a temp file in the sandbox, then streams that file through
    /// the record parser: for listings larger than the exec output or holding bytes that are
    /// not UTF-8. Neither the listing nor more than `max_entries` entries is ever held.
    async fn walk_via_file(&self, root: &str) -> SandboxFsResult<Vec<WalkEntry>> {
        let out = self
            .sh("walk", root, walk::WALK_SCRIPT, &[root, "file"])
            .await?;
        self.walk_status(root, &out)?;
        let listing = out.stdout.trim().to_string();
        check_remote_path(&listing)?;
        let mut records = walk::Records::new(root, self.max_entries);
        let got = self
            .http
            .download(
                "walk",
                root,
                &Self::fs_route("file", &listing),
                (
                    self.max_listing,
                    "walk listing (limits.sandbox_listing_bytes)",
                ),
                &mut records,
            )
            .await;
        let _ = self.remove(&listing, false).await;
        // A piece the parser refused failed the download's write: the parser says why.
        if let Some(stop) = records.take_stop() {
            return Err(self.walk_stop(root, stop));
        }
        got?;
        records.finish().map_err(|stop| self.walk_stop(root, stop))
    }

    fn walk_status(&self, root: &str, out: &ExecOutput) -> SandboxFsResult<()> {
        match out.exit_code {
            Some(walk::EXIT_NOT_FOUND) => Err(SandboxFsError::NotFound {
                path: root.to_string(),
            }),
            Some(walk::EXIT_NOT_DIR) => Err(SandboxFsError::NotDir {
                path: root.to_string(),
            }),
            _ => command_result("walk", root, "find", out),
        }
    }

    /// Returns the error a walk listing that could not be read means.
    fn walk_stop(&self, root: &str, stop: walk::Stop) -> SandboxFsError {
        match stop {
            walk::Stop::Malformed(reason) => SandboxFsError::Protocol {
                url: self.url().to_string(),
                op: "walk",
                reason,
            },
            walk::Stop::TooMany { limit } => SandboxFsError::TooManyEntries {
                path: root.to_string(),
                limit,
            },
        }
    }
}

/// The provider boundary for names from the sandbox: returns whether an entry of a listing (a
/// single `name`) or of a walk (a relative path, `nested`) may be shown to wardfs. A name that is
/// empty, `.`, `..`, or holds `/` or NUL ([`foreign::check_name`], `.git` allowed: a project in a
/// sandbox may hold its repository) is skipped with a warning, so neither the mount, the API nor
/// the mirror ever sees it.
fn admit(dir: &str, name: &str, nested: bool) -> bool {
    let checked = if nested {
        foreign::check_rel(name, GitDir::Allow)
    } else {
        foreign::check_name(name.as_bytes(), GitDir::Allow)
    };
    match checked {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(dir, entry = %e.path, rule = e.rule, "skipping a remote entry the sandbox named badly");
            false
        }
    }
}

/// Splits an absolute path into its parent directory and its last name.
fn split_parent(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((parent, name)) => (parent, name),
        None => (".", path),
    }
}

impl SandboxAgent {
    /// Returns what every connection to a sandbox-agent server implements natively (what
    /// [`SandboxFs::caps`] answers), before one is made.
    pub fn caps_of() -> Caps {
        Caps {
            exec: true,
            batch: true,
            walk_sees_links: true,
            stat_sees_links: false,
            watch: false,
            remote_hashes: vec![HashAlgo::Sha256],
        }
    }

    /// Returns what a connection with these timeouts accepts (what [`SandboxFs::limits`]
    /// answers), before one is made.
    pub fn limits_of(request_timeout: Duration, exec_timeout: Duration) -> ProviderLimits {
        ProviderLimits {
            max_request_bytes: MAX_BODY_BYTES,
            max_exec_output_bytes: MAX_EXEC_OUTPUT_BYTES,
            request_timeout,
            exec_timeout: exec_timeout.min(MAX_EXEC_TIMEOUT),
        }
    }
}

impl SandboxFs for SandboxAgent {
    fn provider(&self) -> &'static str {
        PROVIDER
    }

    fn caps(&self) -> Caps {
        SandboxAgent::caps_of()
    }

    fn limits(&self) -> ProviderLimits {
        SandboxAgent::limits_of(self.http.timeout, self.exec_timeout)
    }

    fn check(&self) -> BoxFuture<'_, SandboxFsResult<()>> {
        Box::pin(async move {
            self.send("check", "/", Method::GET, "/v1/health", None)
                .await
                .map(|_| ())
        })
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<RemoteMeta>> {
        Box::pin(async move {
            check_remote_path(path)?;
            let entry: wire::FsEntry = self
                .get_json("stat", path, &Self::fs_route("stat", path))
                .await?;
            Ok(entry.meta())
        })
    }

    fn list<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<Vec<RemoteEntry>>> {
        Box::pin(async move {
            check_remote_path(path)?;
            let route = Self::fs_route("entries", path);
            let body = self.send("list", path, Method::GET, &route, None).await?;
            let admit = |name: &str| admit(path, name, false);
            let mut entries =
                wire::parse_listing(&body, self.max_entries, &admit).map_err(|e| match e {
                    wire::ListingError::Json(e) => self.unexpected("list", &e),
                    wire::ListingError::TooMany => SandboxFsError::TooManyEntries {
                        path: path.to_string(),
                        limit: self.max_entries,
                    },
                })?;
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            Ok(entries)
        })
    }

    fn read<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<Bytes>> {
        Box::pin(async move {
            check_remote_path(path)?;
            self.send_limited(
                "read",
                path,
                Method::GET,
                &Self::fs_route("file", path),
                None,
                (self.max_file, Payload::File),
            )
            .await
        })
    }

    fn read_into<'a>(
        &'a self,
        path: &'a str,
        limit: u64,
        sink: &'a mut (dyn std::io::Write + Send),
    ) -> BoxFuture<'a, SandboxFsResult<u64>> {
        Box::pin(async move {
            check_remote_path(path)?;
            self.http
                .download(
                    "read",
                    path,
                    &Self::fs_route("file", path),
                    (limit.min(self.max_file), FILE_LIMIT),
                    sink,
                )
                .await
        })
    }

    fn write<'a>(&'a self, path: &'a str, data: Bytes) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            if data.len() as u64 > MAX_BODY_BYTES {
                return self.write_chunked(path, data).await;
            }
            self.send(
                "write",
                path,
                Method::PUT,
                &Self::fs_route("file", path),
                Some(Body::bytes(data)),
            )
            .await
            .map(|_| ())
        })
    }

    fn upload<'a>(
        &'a self,
        path: &'a str,
        src: std::fs::File,
    ) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            let len = src
                .metadata()
                .map_err(|source| SandboxFsError::Spool {
                    path: path.to_string(),
                    source,
                })?
                .len();
            if len > MAX_BODY_BYTES {
                return self.upload_chunked(path, &src, len).await;
            }
            let mut data = vec![0u8; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(&src, &mut data, 0).map_err(|source| {
                SandboxFsError::Spool {
                    path: path.to_string(),
                    source,
                }
            })?;
            self.write(path, Bytes::from(data)).await
        })
    }

    fn mkdir_p<'a>(&'a self, path: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            self.send(
                "mkdir",
                path,
                Method::POST,
                &Self::fs_route("mkdir", path),
                None,
            )
            .await
            .map(|_| ())
        })
    }

    fn remove<'a>(&'a self, path: &'a str, recursive: bool) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            if path == "/" {
                return Err(SandboxFsError::InvalidPath {
                    path: path.into(),
                    rule: "wardfs never removes the sandbox's root".into(),
                });
            }
            let mut route = Self::fs_route("entry", path);
            if recursive {
                route.push_str("&recursive=true");
            }
            match self
                .send("remove", path, Method::DELETE, &route, None)
                .await
            {
                Ok(_) => Ok(()),
                // A dangling symlink is "not found" to the server, and a symlink to a directory
                // "not a directory" without `recursive`: both are removed as links.
                Err(e @ (SandboxFsError::NotFound { .. } | SandboxFsError::NotDir { .. })) => {
                    if self.remove_link(path).await? {
                        Ok(())
                    } else {
                        Err(e)
                    }
                }
                Err(e) => Err(e),
            }
        })
    }

    fn rename<'a>(&'a self, from: &'a str, to: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(from)?;
            check_remote_path(to)?;
            let mv = |overwrite: bool| {
                let body = json!({ "from": from, "to": to, "overwrite": overwrite });
                self.send(
                    "rename",
                    from,
                    Method::POST,
                    "/v1/fs/move",
                    Some(Body::json(&body)),
                )
            };
            match mv(false).await {
                Ok(_) => Ok(()),
                Err(SandboxFsError::Exists { .. }) => {
                    // `overwrite` deletes a directory in the way with all it holds: only a
                    // non-directory may be replaced.
                    match self.stat(to).await {
                        Ok(meta) if meta.kind == EntryKind::Dir => Err(SandboxFsError::Exists {
                            path: to.to_string(),
                        }),
                        Ok(_) | Err(SandboxFsError::NotFound { .. }) => mv(true).await.map(|_| ()),
                        Err(e) => Err(e),
                    }
                }
                Err(e @ SandboxFsError::NotFound { .. }) => {
                    // Maybe a dangling symlink, which only `mv` can see.
                    const MV_LINK: &str = r#"[ -L "$1" ] || exit 66
if [ -d "$2" ] && [ ! -L "$2" ]; then exit 21; fi
mkdir -p "$(dirname "$2")"
mv -fT "$1" "$2""#;
                    let out = self.sh("rename", from, MV_LINK, &[from, to]).await?;
                    match out.exit_code {
                        Some(EXIT_MISSING) => Err(e),
                        Some(EXIT_IS_DIR) => Err(SandboxFsError::Exists {
                            path: to.to_string(),
                        }),
                        _ => command_result("rename", from, "mv", &out),
                    }
                }
                Err(e) => Err(e),
            }
        })
    }

    fn put_batch<'a>(
        &'a self,
        root: &'a str,
        items: Vec<BatchItem>,
    ) -> BoxFuture<'a, SandboxFsResult<BatchReport>> {
        Box::pin(async move {
            check_remote_path(root)?;
            for item in &items {
                check_relative_path(item.path())?;
            }
            let mut report = BatchReport {
                items: items.len(),
                bytes: items
                    .iter()
                    .map(|i| match i {
                        BatchItem::File { data, .. } => data.len() as u64,
                        _ => 0,
                    })
                    .sum(),
                requests: 0,
            };
            if items.is_empty() {
                self.mkdir_p(root).await?;
                report.requests = 1;
                return Ok(report);
            }
            let plan = batch::plan(items, MAX_BODY_BYTES);
            for item in &plan.large {
                if let BatchItem::File {
                    path,
                    data,
                    mode,
                    mtime,
                } = item
                {
                    let full = join_remote(root, path);
                    self.write(&full, data.clone()).await?;
                    let meta = MetaUpdate {
                        mode: Some(*mode),
                        mtime: *mtime,
                    };
                    self.set_meta(&full, meta).await?;
                    let len = data.len() as u64;
                    let writes = if len > MAX_BODY_BYTES {
                        len.div_ceil(MAX_BODY_BYTES) as usize + 1
                    } else {
                        1
                    };
                    report.requests += writes + 1;
                }
            }
            for archive in &plan.archives {
                self.upload_archive(root, archive).await?;
                report.requests += 1;
            }
            Ok(report)
        })
    }

    fn walk<'a>(&'a self, root: &'a str) -> BoxFuture<'a, SandboxFsResult<Vec<WalkEntry>>> {
        Box::pin(async move {
            check_remote_path(root)?;
            let out = self.sh("walk", root, walk::WALK_SCRIPT, &[root]).await?;
            if let Err(e) = self.walk_status(root, &out) {
                if matches!(e, SandboxFsError::CommandFailed { .. })
                    && (out.exit_code == Some(127) || out.stderr.contains("printf"))
                {
                    tracing::warn!(
                        url = self.url(),
                        root,
                        "the sandbox has no GNU find; walking by listing (symlinks look like files)"
                    );
                    let cap = WalkCap {
                        entries: self.max_entries,
                        bytes: self.max_listing,
                    };
                    return walk_by_listing(self, root, cap).await;
                }
                return Err(e);
            }
            if out.stdout_truncated || out.stdout.contains('\u{FFFD}') {
                return self.walk_via_file(root).await;
            }
            walk::parse(out.stdout.as_bytes(), root, self.max_entries)
                .map_err(|stop| self.walk_stop(root, stop))
        })
    }

    fn symlink<'a>(&'a self, target: &'a str, path: &'a str) -> BoxFuture<'a, SandboxFsResult<()>> {
        Box::pin(async move {
            check_remote_path(path)?;
            let (parent, name) = split_parent(path);
            let item = BatchItem::Symlink {
                path: name.to_string(),
                target: target.to_string(),
            };
            match self
                .upload_archive(parent, std::slice::from_ref(&item))
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.is_unavailable() => Err(e),
                Err(e) => match self.stat(path).await {
                    // The server cannot put a link where a directory is.
                    Ok(meta) if meta.kind == EntryKind::Dir => Err(SandboxFsError::Exists {
                        path: path.to_string(),
                    }),
                    _ => Err(e),
                },
            }
        })
    }

    fn hash<'a>(&'a self, path: &'a str, algo: HashAlgo) -> BoxFuture<'a, SandboxFsResult<String>> {
        Box::pin(async move {
            check_remote_path(path)?;
            let tool = match algo {
                HashAlgo::Sha256 => "sha256sum",
                HashAlgo::Blake3 if !self.no_b3sum.load(Ordering::Relaxed) => "b3sum",
                HashAlgo::Blake3 => return self.blake3_here(path).await,
            };
            const HASH: &str = r#"if [ ! -f "$2" ]; then if [ -d "$2" ]; then exit 21; fi; exit 66; fi
command -v "$1" >/dev/null 2>&1 || exit 127
"$1" "$2""#;
            let out = self.sh("hash", path, HASH, &[tool, path]).await?;
            match out.exit_code {
                Some(EXIT_MISSING) => Err(SandboxFsError::NotFound {
                    path: path.to_string(),
                }),
                Some(EXIT_IS_DIR) => Err(SandboxFsError::IsDir {
                    path: path.to_string(),
                }),
                Some(127) if algo == HashAlgo::Blake3 => {
                    self.no_b3sum.store(true, Ordering::Relaxed);
                    self.blake3_here(path).await
                }
                _ => {
                    command_result("hash", path, tool, &out)?;
                    let hex = out.stdout.split_whitespace().next().unwrap_or("");
                    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(SandboxFsError::Protocol {
                            url: self.url().to_string(),
                            op: "hash",
                            reason: format!("`{tool}` printed {:?}", out.stdout.trim()),
                        });
                    }
                    Ok(hex.to_ascii_lowercase())
                }
            }
        })
    }

    fn exec(&self, req: ExecRequest) -> BoxFuture<'_, SandboxFsResult<ExecOutput>> {
        Box::pin(async move {
            let command = req.command.clone();
            self.run("exec", &command, req).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_split_off() {
        assert_eq!(split_parent("/a/b/c"), ("/a/b", "c"));
        assert_eq!(split_parent("/c"), ("/", "c"));
    }

    #[test]
    fn tokens_never_print() {
        assert_eq!(format!("{:?}", Token::new("s3cret")), "Token(***)");
    }

    #[test]
    fn urls_are_checked() {
        for bad in [
            "ftp://h/",
            "127.0.0.1:80",
            "http://h/?q=1",
            "http://u:secret@h/",
        ] {
            let err = SandboxAgent::with_token(&SandboxAgentConfig::new(bad), None).unwrap_err();
            assert!(
                matches!(err, SandboxFsError::InvalidConfig { .. }),
                "{bad}: {err}"
            );
        }
        let ok = SandboxAgent::with_token(&SandboxAgentConfig::new("http://127.0.0.1:9/"), None);
        assert_eq!(ok.unwrap().url(), "http://127.0.0.1:9");
    }

    #[test]
    fn a_missing_token_variable_is_named() {
        let mut config = SandboxAgentConfig::new("http://127.0.0.1:9");
        config.token_env = Some("WARDFS_TEST_TOKEN_THAT_IS_NEVER_SET".into());
        let err = SandboxAgent::connect(&config).unwrap_err();
        assert!(err
            .to_string()
            .contains("WARDFS_TEST_TOKEN_THAT_IS_NEVER_SET"));
        assert_eq!(err.code(), crate::core::ErrorCode::AuthFailed);
    }
}

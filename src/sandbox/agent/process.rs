//! Long-running commands through sandbox-agent's process routes (measured on 0.4.2), for
//! `wardfs run --sandbox`: `POST /v1/processes` starts one and answers its id at once,
//! `GET /v1/processes/{id}` says whether it still runs (and its exit code once it ended),
//! `GET /v1/processes/{id}/logs?since=N` returns what it printed after sequence number N
//! (base64 chunks tagged `stdout` or `stderr`), `POST /v1/processes/{id}/kill` sends SIGKILL
//! and `DELETE /v1/processes/{id}` forgets an ended one (the server keeps up to 10 MiB of
//! output per process until then).
//!
//! The server also offers `?follow=true` (server-sent events), but its stream does not end
//! when the process does, so the caller would poll the status anyway: [`SandboxAgent`] polls
//! both, which needs nothing but plain requests.

use hyper::Method;
use serde::Deserialize;
use serde_json::json;

use super::http::{Body, Bounds, Payload};
use super::SandboxAgent;
use crate::core::provider::{ExecRequest, SandboxFsError, SandboxFsResult};

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A piece of what a process printed, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The server's sequence number (increasing over both streams).
    pub sequence: u64,
    pub stream: Stream,
    pub data: Vec<u8>,
}

/// Where a started process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessState {
    pub running: bool,
    /// Its exit code once it ended; `None` while it runs or when a signal ended it.
    pub exit_code: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProcessInfo {
    id: String,
    status: String,
    #[serde(default)]
    exit_code: Option<i32>,
}

#[derive(Deserialize)]
struct LogEntry {
    sequence: u64,
    stream: String,
    data: String,
    #[serde(default)]
    encoding: Option<String>,
}

#[derive(Deserialize)]
struct Logs {
    entries: Vec<LogEntry>,
}

impl SandboxAgent {
    fn process_route(id: &str, tail: &str) -> String {
        format!("/v1/processes/{}{tail}", super::query_value(id))
    }

    async fn process_call(
        &self,
        op: &'static str,
        method: Method,
        route: &str,
        body: Option<Body>,
    ) -> SandboxFsResult<bytes::Bytes> {
        let reply = self
            .http
            .send(
                op,
                route,
                method,
                route,
                body,
                Bounds {
                    timeout: self.http.timeout,
                    limit: self.max_answer,
                    what: Payload::Answer,
                },
            )
            .await?;
        Ok(reply.body)
    }

    /// Starts `req` (its `timeout` is not sent: the caller stops it with [`Self::kill`]) and
    /// returns the process's id.
    pub async fn spawn(&self, req: &ExecRequest) -> SandboxFsResult<String> {
        let body = process_body(req);
        let reply = self
            .process_call(
                "spawn",
                Method::POST,
                "/v1/processes",
                Some(Body::json(&body)),
            )
            .await?;
        let info: ProcessInfo = self.decode("spawn", &reply)?;
        Ok(info.id)
    }

    /// Returns whether the process `id` still runs, and how it ended.
    pub async fn process_state(&self, id: &str) -> SandboxFsResult<ProcessState> {
        let route = Self::process_route(id, "");
        let reply = self
            .process_call("process", Method::GET, &route, None)
            .await?;
        let info: ProcessInfo = self.decode("process", &reply)?;
        Ok(ProcessState {
            running: info.status == "running",
            exit_code: info.exit_code,
        })
    }

    /// Returns what the process `id` printed after sequence number `since`.
    pub async fn process_output(&self, id: &str, since: u64) -> SandboxFsResult<Vec<Chunk>> {
        let route = Self::process_route(id, &format!("/logs?since={since}"));
        let reply = self.process_call("logs", Method::GET, &route, None).await?;
        let logs: Logs = self.decode("logs", &reply)?;
        logs.entries.into_iter().map(|e| self.chunk(e)).collect()
    }

    fn chunk(&self, e: LogEntry) -> SandboxFsResult<Chunk> {
        let stream = match e.stream.as_str() {
            "stderr" => Stream::Stderr,
            _ => Stream::Stdout,
        };
        let data = match e.encoding.as_deref() {
            Some("base64") => decode_base64(&e.data).ok_or_else(|| SandboxFsError::Protocol {
                url: self.url().to_string(),
                op: "logs",
                reason: format!("output chunk {} is not base64", e.sequence),
            })?,
            _ => e.data.into_bytes(),
        };
        Ok(Chunk {
            sequence: e.sequence,
            stream,
            data,
        })
    }

    /// Kills the process `id` (SIGKILL); one that already ended is left as it is.
    pub async fn kill(&self, id: &str) -> SandboxFsResult<()> {
        let route = Self::process_route(id, "/kill");
        self.process_call("kill", Method::POST, &route, None)
            .await
            .map(|_| ())
    }

    /// Forgets the ended process `id` and the output the server kept of it.
    pub async fn forget(&self, id: &str) -> SandboxFsResult<()> {
        let route = Self::process_route(id, "");
        self.process_call("forget", Method::DELETE, &route, None)
            .await
            .map(|_| ())
    }
}

/// The JSON of a process to start, as `POST /v1/processes` and `/v1/processes/run` take it:
/// `command`, `args`, and `cwd` and `env` when `req` has them.
pub(super) fn process_body(req: &ExecRequest) -> serde_json::Value {
    let mut body = json!({ "command": req.command, "args": req.args });
    if let Some(cwd) = &req.cwd {
        body["cwd"] = json!(cwd);
    }
    if !req.env.is_empty() {
        let env: serde_json::Map<String, serde_json::Value> =
            req.env.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        body["env"] = serde_json::Value::Object(env);
    }
    body
}

/// Decodes standard base64 (with or without padding); `None` for anything else.
fn decode_base64(s: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let bytes = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for group in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in group.iter().enumerate() {
            n |= value(*c)? << (18 - 6 * i);
        }
        match group.len() {
            4 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]),
            3 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]),
            2 => out.push((n >> 16) as u8),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::decode_base64;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(decode_base64("aGkK").unwrap(), b"hi\n");
        assert_eq!(decode_base64("ZXJyCg==").unwrap(), b"err\n");
        assert_eq!(decode_base64("YRti").unwrap(), b"a\x1bb");
        assert_eq!(decode_base64("YQ").unwrap(), b"a");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("a*bc").is_none());
        assert!(decode_base64("abcde").is_none());
    }
}

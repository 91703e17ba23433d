//! A `wardfs mcp` client for tests: the real command on a pipe, spoken to as an MCP client does
//! (JSON-RPC lines on its stdin and stdout), past its handshake.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Daemon, BIN};

/// How long a request waits for its answer.
const ANSWER_WAIT: Duration = Duration::from_secs(30);

/// One `wardfs mcp` process of a test's daemon, past its handshake; killed when dropped.
pub struct McpClient {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next_id: u64,
    /// The answer to `initialize` (its `result`).
    pub init: Value,
}

impl McpClient {
    /// Starts `wardfs mcp ARGS` for `d` (its socket and config) and performs the handshake.
    pub fn start(d: &Daemon, args: &[&str]) -> McpClient {
        let mut child = Command::new(BIN)
            .arg("--socket")
            .arg(&d.socket)
            .arg("--config")
            .arg(&d.config)
            .arg("mcp")
            .args(args)
            .env_remove("WARDFS_SOCKET")
            .env_remove("WARDFS_CONFIG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut c = McpClient {
            child,
            stdin,
            lines,
            next_id: 1,
            init: Value::Null,
        };
        let init = c.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "wardfs-tests", "version": "0"}}),
        );
        c.init = init["result"].clone();
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        c
    }

    /// The `wardfs mcp` process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes one JSON-RPC message.
    pub fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Writes `line` as it is (no JSON check), then a newline: what a broken client sends.
    pub fn send_raw(&mut self, line: &[u8]) {
        self.stdin.write_all(line).unwrap();
        self.stdin.write_all(b"\n").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The next message the server writes, whatever it answers.
    pub fn next(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(ANSWER_WAIT)
            .unwrap_or_else(|_| panic!("no message from wardfs mcp in {ANSWER_WAIT:?}"));
        serde_json::from_str(&line).unwrap()
    }

    /// Sends a request; returns the whole answer with its id (other messages are skipped).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.recv_timeout(ANSWER_WAIT).unwrap_or_else(|_| {
                panic!("{method}: no answer from wardfs mcp in {ANSWER_WAIT:?}")
            });
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    /// Calls a tool; returns the whole answer (`result` or a JSON-RPC `error`).
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": args}))
    }

    /// Calls a tool that must succeed; returns its `result`.
    pub fn call_ok(&mut self, tool: &str, args: Value) -> Value {
        let a = self.call(tool, args.clone());
        assert!(
            a["result"].is_object() && a["result"]["isError"] != true,
            "{tool} {args} failed: {a}"
        );
        a["result"].clone()
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

//! `wardfs mcp`'s bound on one message, tried as a client would: raw JSON-RPC lines written to
//! its stdin, answers read from its stdout. rmcp's own transport dropped any line over 16 MiB
//! without a word, so a 17 MiB `write` got no answer at all. Now a message up to twice
//! `limits.max_write_bytes` plus 64 KiB is read; a longer one is answered with a JSON-RPC error
//! naming that key, and the session goes on.

use serde_json::{json, Value};

use crate::support::mcp::McpClient;
use crate::support::Daemon;

/// `limits.max_write_bytes` of these tests (20 MiB): messages may be up to 40 MiB + 64 KiB.
const MAX_WRITE: usize = 20 << 20;
const MAX_MESSAGE: usize = 2 * MAX_WRITE + (64 << 10);

/// The tool result's JSON answer (its structured content).
fn structured(answer: &Value) -> &Value {
    &answer["result"]["structuredContent"]
}

#[test]
fn oversized_messages_are_answered_and_the_session_goes_on() {
    let d = Daemon::start(&format!("[limits]\nmax_write_bytes = {MAX_WRITE}\n"));
    let mut s = McpClient::start(&d, &[]);

    // 17 MiB: over rmcp's own cap (it was dropped without an answer), under this one.
    let content = "x".repeat(17 << 20);
    let a = s.call(
        "write",
        json!({"path": "/workspace/big.txt", "content": content}),
    );
    assert_ne!(a["result"]["isError"], true, "{a}");
    let on_disk = std::fs::metadata(d.zone_dir("workspace").join("big.txt")).unwrap();
    assert_eq!(on_disk.len(), 17 << 20);

    // Over max_write_bytes but under the message bound: the daemon refuses the file, by name.
    let content = "y".repeat(MAX_WRITE + 1);
    let a = s.call(
        "write",
        json!({"path": "/workspace/bigger.txt", "content": content}),
    );
    assert_eq!(a["result"]["isError"], true, "{a}");
    assert_eq!(structured(&a)["code"], "TOO_LARGE", "{a}");
    assert!(!d.zone_dir("workspace").join("bigger.txt").exists());

    // Over the message bound: a JSON-RPC error with the request's id, naming the limit and key.
    let content = "z".repeat(MAX_MESSAGE + 1);
    let a = s.call(
        "write",
        json!({"path": "/workspace/huge.txt", "content": content}),
    );
    assert_eq!(a["error"]["code"], -32600, "{a}");
    assert_eq!(a["error"]["data"]["code"], "TOO_LARGE", "{a}");
    assert_eq!(a["error"]["data"]["limit"], MAX_MESSAGE, "{a}");
    let message = a["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("limits.max_write_bytes") && message.contains(&MAX_MESSAGE.to_string()),
        "{message}"
    );
    assert!(!d.zone_dir("workspace").join("huge.txt").exists());

    // The id after the cut cannot be read: the error carries none.
    let mut line = br#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"write","arguments":{"path":"/workspace/late.txt","content":""#.to_vec();
    line.resize(line.len() + MAX_MESSAGE, b'w');
    line.extend_from_slice(br#""}},"id":999}"#);
    s.send_raw(&line);
    let a = s.next();
    assert!(a.get("id").is_none_or(Value::is_null), "{a}");
    assert_eq!(a["error"]["data"]["code"], "TOO_LARGE", "{a}");

    // The same session still answers.
    let a = s.call("stat", json!({"path": "/workspace/big.txt"}));
    assert_eq!(structured(&a)["size"], 17 << 20, "{a}");
}

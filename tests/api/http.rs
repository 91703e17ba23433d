//! Raw HTTP over the socket (curl --unix-socket): routes, errors, limits, metrics, socket safety.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use serde_json::{json, Value};

use crate::support::api::code;
use crate::support::daemon::serve_command;
use crate::support::tools::{ended, require_tool};
use crate::support::wait::{eventually, wait_until};
use crate::support::Daemon;

/// The OpenAPI document, as the daemon builds it from its route table.
fn document() -> Value {
    serde_json::from_str(wardfs::api::openapi_document()).expect("the document is JSON")
}

/// Every (method, path) a document describes, the method in upper case.
fn documented(doc: &Value) -> Vec<(String, String)> {
    let paths = doc["paths"].as_object().expect("the document has paths");
    paths
        .iter()
        .flat_map(|(p, ops)| {
            ops.as_object()
                .expect("a path item")
                .keys()
                .map(move |m| (m.to_uppercase(), p.clone()))
        })
        .collect()
}

#[test]
fn the_router_serves_exactly_the_routes_the_document_describes() {
    let d = Daemon::start("");
    let (status, body) = d.curl("GET", "/v1/openapi.json", None);
    assert_eq!(status, 200);
    let served: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(served, document());
    let routes = documented(&served);
    assert!(routes.len() >= 44, "{} routes documented", routes.len());
    // What a path no route has gets, so that the checks below can tell a route from none.
    let (status, body) = d.curl("POST", "/v1/fs/no-such-route", Some(b"{}"));
    let fallback = "is not an API route";
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&body).contains(fallback));
    let mut paths: Vec<&String> = routes.iter().map(|(_, p)| p).collect();
    paths.dedup();
    for path in paths {
        // The events stream follows the journal until asked to end.
        let target = if path == "/v1/events" {
            "/v1/events?follow=false"
        } else {
            path
        };
        for method in ["GET", "POST", "PUT", "DELETE", "PATCH"] {
            let (status, body) = d.curl(
                method,
                target,
                (method != "GET").then_some(b"{}".as_slice()),
            );
            let text = String::from_utf8_lossy(&body);
            assert!(!text.contains(fallback), "{method} {path}: {status} {text}");
            if routes.contains(&(method.to_string(), path.clone())) {
                assert_ne!(status, 405, "{method} {path} is documented but not served");
            } else {
                assert_eq!(
                    status, 405,
                    "{method} {path} is served but not documented: {text}"
                );
                let v: Value = serde_json::from_slice(&body)
                    .unwrap_or_else(|e| panic!("{method} {path}: a 405 that is not JSON ({e})"));
                assert_eq!(v["code"], "INVALID_ARGUMENT", "{method} {path}: {v}");
            }
        }
    }
    // A 405 names the methods the route takes.
    let out = Command::new(require_tool("curl", "curl"))
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-D",
            "-",
            "-X",
            "DELETE",
            "--unix-socket",
        ])
        .arg(&d.socket)
        .arg("http://wardfs/v1/status")
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(headers.contains("allow: get"), "{headers}");
}

#[test]
fn health_status_and_errors_are_json() {
    let d = Daemon::start("");
    let (status, body) = d.curl("GET", "/v1/health", None);
    assert_eq!(status, 200);
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap()["ok"], true);
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace/none"}));
    assert_eq!((status, code(&v)), (404, "NOT_FOUND"));
    assert_eq!(v["path"], "/workspace/none");
    assert!(v["message"].as_str().unwrap().contains("/workspace/none"));
    let (status, body) = d.curl("POST", "/v1/fs/read", Some(b"{not json"));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"));
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace/x", "bogus": 1}));
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"));
    assert!(v["message"].as_str().unwrap().contains("bogus"), "{v}");
    let (status, v) = d.post("/v1/nope", &json!({}));
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"));
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace"}));
    assert_eq!((status, code(&v)), (400, "INVALID_PATH"));
}

#[test]
fn oversized_bodies_get_too_large_and_leave_nothing_behind() {
    let d = Daemon::start("[limits]\nmax_write_bytes = 1000\n");
    // Streamed raw upload over the limit: 413, no file, no temp file.
    let big = vec![b'x'; 900_000];
    let (status, body) = d.curl("PUT", "/v1/fs/raw?path=/workspace/big.bin", Some(&big));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!((status, code(&v)), (413, "TOO_LARGE"));
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("limits.max_write_bytes"),
        "{v}"
    );
    // JSON body far over the limit.
    let huge = json!({"path": "/workspace/a.txt", "content": "y".repeat(200_000)});
    let (status, v) = d.post("/v1/fs/write", &huge);
    assert_eq!((status, code(&v)), (413, "TOO_LARGE"));
    // Content over the write limit inside an acceptable body.
    let (status, v) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/a.txt", "content": "z".repeat(1500)}),
    );
    assert_eq!((status, code(&v)), (413, "TOO_LARGE"));
    assert_eq!(
        std::fs::read_dir(d.zone_dir("workspace")).unwrap().count(),
        0,
        "files left behind"
    );
    // An existing file survives a failed replacement.
    let (status, _) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/a.txt", "content": "keep"}),
    );
    assert_eq!(status, 200);
    let (status, _) = d.curl("PUT", "/v1/fs/raw?path=/workspace/a.txt", Some(&big));
    assert_eq!(status, 413);
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("workspace").join("a.txt")).unwrap(),
        "keep"
    );
    assert_eq!(
        std::fs::read_dir(d.zone_dir("workspace")).unwrap().count(),
        1,
        "temp file left behind"
    );
}

#[test]
fn read_limit_and_line_windows_of_large_files() {
    let d = Daemon::start("[limits]\nmax_read_bytes = 1000\n");
    let text: String = (1..=500).map(|i| format!("line {i}\n")).collect();
    std::fs::write(d.zone_dir("workspace").join("big.txt"), &text).unwrap();
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace/big.txt"}));
    assert_eq!((status, code(&v)), (413, "TOO_LARGE"));
    let (status, v) = d.post(
        "/v1/fs/read",
        &json!({"path": "/workspace/big.txt", "offset": 250, "limit": 2}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["content"], "line 250\nline 251\n");
    assert_eq!(v["total_lines"], 500);
    assert_eq!(v["truncated"], true);
    let (status, v) = d.post(
        "/v1/fs/read",
        &json!({"path": "/workspace/big.txt", "offset": 1, "limit": 400}),
    );
    assert_eq!((status, code(&v)), (413, "TOO_LARGE"));
    let (_, v) = d.post(
        "/v1/fs/read",
        &json!({"path": "/workspace/big.txt", "offset": 499, "limit": 10}),
    );
    assert_eq!(v["content"], "line 499\nline 500\n");
    assert_eq!(v["truncated"], false);
}

#[test]
fn metrics_count_requests_latencies_and_error_codes() {
    let d = Daemon::start("");
    d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/m.txt", "content": "x"}),
    );
    d.post("/v1/fs/read", &json!({"path": "/workspace/m.txt"}));
    d.post("/v1/fs/read", &json!({"path": "/workspace/none"}));
    let (status, body) = d.curl("GET", "/metrics", None);
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    assert!(
        text.contains("wardfs_requests_total{route=\"/v1/fs/read\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("wardfs_request_duration_seconds_count{route=\"/v1/fs/write\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("wardfs_errors_total{code=\"NOT_FOUND\",route=\"/v1/fs/read\"} 1"),
        "{text}"
    );
}

#[test]
fn socket_is_private_and_stale_sockets_are_replaced() {
    let mut d = Daemon::start("");
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(d.socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    // A second daemon on the same config (so the same socket and state) refuses to start,
    // naming the first, and leaves it serving.
    let out = serve_command()
        .args(["--no-mount", "--config"])
        .arg(&d.config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "daemon (pid {}) uses the state directory",
            d.pid()
        )),
        "{err}"
    );
    assert_eq!(d.curl("GET", "/v1/health", None).0, 200);
    // After a crash (SIGKILL) the stale socket file is replaced on the next start.
    let pid = d.pid();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    wait_until(
        "the killed daemon to end",
        std::time::Duration::from_secs(10),
        || ended(pid),
    );
    assert!(d.socket.exists(), "a killed daemon leaves its socket");
    d.respawn();
    assert_eq!(d.curl("GET", "/v1/health", None).0, 200);
    d.stop();
}

#[test]
fn other_uids_are_refused_unless_allowed() {
    assert!(
        rustix::process::getuid().is_root(),
        "this test acts as another uid with setpriv and must run as root (CI and `make test` do)"
    );
    let setpriv = require_tool("setpriv", "util-linux");
    let curl = require_tool("curl", "curl");
    let as_nobody = |d: &Daemon| {
        // Open the path for the test so that only SO_PEERCRED stands in the way.
        std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(
            d.socket.parent().unwrap(),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
        Command::new(&setpriv)
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&curl)
            .args(["-sS", "--max-time", "5", "--unix-socket"])
            .arg(&d.socket)
            .arg("http://wardfs/v1/health")
            .output()
            .unwrap()
    };
    let d = Daemon::start("");
    let out = as_nobody(&d);
    assert!(
        !out.status.success(),
        "uid 65534 was served: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let refused = || d.log_text().contains("refused a connection");
    assert!(
        eventually(std::time::Duration::from_secs(10), refused),
        "refusal not logged: {}",
        d.log_text()
    );

    let d = Daemon::start("[api]\nallowed_uids = [65534]\n");
    let out = as_nobody(&d);
    assert!(
        out.status.success(),
        "allowed uid refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ok\":true"));
}

#[test]
fn sigterm_stops_cleanly_and_removes_the_socket() {
    let mut d = Daemon::start("");
    d.stop();
    assert!(!d.socket.exists());
    assert!(d.log_text().contains("SIGTERM"), "{}", d.log_text());
}

#[test]
fn read_only_zone_refuses_changes() {
    let d = Daemon::start("[zones.cache]\nread_only = true\n");
    std::fs::write(d.zone_dir("cache").join("r.txt"), "data").unwrap();
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/cache/r.txt"}));
    assert_eq!(status, 200, "{v}");
    for (route, body) in [
        (
            "/v1/fs/write",
            json!({"path": "/cache/r.txt", "content": "x"}),
        ),
        (
            "/v1/fs/edit",
            json!({"path": "/cache/r.txt", "old": "data", "new": "x"}),
        ),
        ("/v1/fs/delete", json!({"path": "/cache/r.txt"})),
        ("/v1/fs/mkdir", json!({"path": "/cache/d"})),
        (
            "/v1/fs/move",
            json!({"from": "/cache/r.txt", "to": "/workspace/r.txt"}),
        ),
    ] {
        let (status, v) = d.post(route, &body);
        assert_eq!((status, code(&v)), (403, "READ_ONLY"), "{route}");
    }
    let (status, body) = d.curl("PUT", "/v1/fs/raw?path=/cache/r.txt", Some(b"x"));
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    assert_eq!(
        std::fs::read_to_string(d.zone_dir("cache").join("r.txt")).unwrap(),
        "data"
    );
}

#[test]
fn single_mode_disables_cache_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::start_config(&format!(
        "[zones]\nmode = \"single\"\ndir = \"{}\"\n",
        dir.path().display()
    ));
    let (status, v) = d.post("/v1/fs/write", &json!({"path": "/cache/x", "content": "x"}));
    assert_eq!((status, code(&v)), (503, "ZONE_UNAVAILABLE"));
    assert!(
        v["message"].as_str().unwrap().contains("cache_subdir"),
        "{v}"
    );
    let (status, _) = d.post(
        "/v1/fs/write",
        &json!({"path": "/workspace/x", "content": "x"}),
    );
    assert_eq!(status, 200);
    assert_eq!(std::fs::read_to_string(dir.path().join("x")).unwrap(), "x");
}

#[test]
fn docs_api_md_covers_every_route() {
    let root = env!("CARGO_MANIFEST_DIR");
    let guide = std::fs::read_to_string(format!("{root}/docs/api.md"))
        .expect("docs/api.md exists (the README links to it)");
    let openapi = document();
    // One section per route, headed `METHOD /path`.
    for (m, p) in documented(&openapi) {
        let heading = format!("## {m} {p}");
        assert!(
            guide.lines().any(|l| l.trim_end() == heading),
            "docs/api.md has no section `{heading}`"
        );
    }
    // The errors table lists every code the document declares.
    let codes = openapi["components"]["schemas"]["ErrorCode"]["oneOf"]
        .as_array()
        .expect("the document declares the error codes, one schema each");
    assert_eq!(codes.len(), wardfs::core::ErrorCode::ALL.len());
    for c in codes {
        let c = c["const"].as_str().expect("an error code");
        assert!(
            guide.contains(&format!("`{c}`")),
            "docs/api.md does not list the error code {c}"
        );
    }
}

#[test]
fn fifos_and_long_unicode_paths_get_clear_errors_not_hangs_or_panics() {
    let d = Daemon::start("");
    let fifo = d.zone_dir("workspace").join("pipe");
    let st = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(st.success());
    // Reading a FIFO would wait for a writer forever; it is refused at once instead.
    let (status, v) = d.post("/v1/fs/read", &json!({"path": "/workspace/pipe"}));
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
    let (status, _) = d.curl("GET", "/v1/fs/raw?path=/workspace/pipe", None);
    assert_eq!(status, 400);
    // A path over the length limit whose 64th byte falls inside a character.
    let long = format!("/workspace/{}", "é".repeat(3000));
    let (status, v) = d.post("/v1/fs/read", &json!({ "path": long }));
    assert_eq!((status, code(&v)), (400, "INVALID_PATH"), "{v}");
    let (status, body) = d.curl(
        "GET",
        &format!("/v1/log?path={}", wardfs::client::encode(&long)),
        None,
    );
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
    // A bad zone is refused even when the path names a good one.
    let (status, _) = d.curl("GET", "/v1/log?zone=bogus&path=/workspace", None);
    assert_eq!(status, 400);
    // Context over the limit is refused whichever field carries it.
    let (status, v) = d.post(
        "/v1/fs/grep",
        &json!({"pattern": "x", "context": 5000, "before": 1, "after": 1}),
    );
    assert_eq!((status, code(&v)), (400, "INVALID_ARGUMENT"), "{v}");
}

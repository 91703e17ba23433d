//! grep and glob give the same answers as ripgrep and fd on the same tree.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::support::tools::require_tool;
use crate::support::Daemon;

/// A daemon whose workspace is a copy of fixtures/search made into a git repo.
fn fixture_daemon() -> Daemon {
    let d = Daemon::start("");
    let ws = d.zone_dir("workspace");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/search"),
        &ws,
    );
    std::fs::rename(ws.join("_gitignore"), ws.join(".gitignore")).unwrap();
    let mut bin = b"binary header TODO \x00\x01\x02 helper".to_vec();
    bin.extend(std::iter::repeat_n(0u8, 100));
    std::fs::write(ws.join("src/data.bin"), bin).unwrap();
    let git = require_tool("git", "git");
    let st = Command::new(git)
        .args(["init", "-q"])
        .current_dir(&ws)
        .status()
        .unwrap();
    assert!(st.success());
    d
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

fn fd_bin() -> std::path::PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["fdfind", "fd"] {
        if let Some(p) = std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
        {
            return p;
        }
    }
    panic!("fd is not installed; install it with `apt-get install fd-find` (make test does this)")
}

fn sorted_lines(out: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(out)
        .lines()
        .map(|l| l.trim_start_matches("./").to_string())
        .filter(|l| !l.is_empty() && l != "--")
        .collect();
    v.sort();
    v
}

/// Renders our grep result the way `rg --no-heading -n` prints it, with workspace-relative paths.
fn render(v: &Value) -> Vec<String> {
    let strip = |p: &str| p.trim_start_matches("/workspace/").to_string();
    let mut out: Vec<String> = match v["mode"].as_str().unwrap() {
        "files" => v["files"]
            .as_array()
            .map(|a| a.iter().map(|f| strip(f.as_str().unwrap())).collect())
            .unwrap_or_default(),
        "count" => v["counts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| format!("{}:{}", strip(c["path"].as_str().unwrap()), c["count"]))
                    .collect()
            })
            .unwrap_or_default(),
        _ => v["lines"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|l| {
                        let sep = if l["kind"] == "match" { ':' } else { '-' };
                        format!(
                            "{}{sep}{}{sep}{}",
                            strip(l["path"].as_str().unwrap()),
                            l["line"],
                            l["text"].as_str().unwrap()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    };
    out.sort();
    out
}

#[test]
fn grep_matches_ripgrep() {
    let rg = require_tool("rg", "ripgrep");
    let d = fixture_daemon();
    let ws = d.zone_dir("workspace");
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (
            vec!["-F", "TODO"],
            json!({"pattern": "TODO", "literal": true}),
        ),
        (
            vec!["-i", "todo"],
            json!({"pattern": "todo", "ignore_case": true}),
        ),
        (
            vec![r"impl (Drop|Clone) for"],
            json!({"pattern": r"impl (Drop|Clone) for"}),
        ),
        (vec![r"fn \w+_helper"], json!({"pattern": r"fn \w+_helper"})),
        (
            vec!["-g", "*.rs", "helper"],
            json!({"pattern": "helper", "glob": ["*.rs"]}),
        ),
        (
            vec!["-g", "!*.rs", "helper"],
            json!({"pattern": "helper", "glob": ["!*.rs"]}),
        ),
        (
            vec!["-t", "py", "main"],
            json!({"pattern": "main", "type": ["py"]}),
        ),
        (
            vec!["-l", "helper"],
            json!({"pattern": "helper", "mode": "files"}),
        ),
        (
            vec!["-c", "TODO"],
            json!({"pattern": "TODO", "mode": "count"}),
        ),
        (
            vec!["-C", "1", "TODO"],
            json!({"pattern": "TODO", "context": 1}),
        ),
        (
            vec!["-A", "2", "unsafe"],
            json!({"pattern": "unsafe", "after": 2}),
        ),
        (
            vec!["--hidden", "TODO"],
            json!({"pattern": "TODO", "hidden": true}),
        ),
        (
            vec!["--no-ignore", "TODO"],
            json!({"pattern": "TODO", "gitignore": false}),
        ),
        (vec!["-F", "("], json!({"pattern": "(", "literal": true})),
    ];
    for (args, body) in cases {
        let out = Command::new(&rg)
            .args(["--no-heading", "-n", "--no-config", "--color=never"])
            .args(&args)
            .current_dir(&ws)
            .output()
            .unwrap();
        let want = sorted_lines(&out.stdout);
        assert!(
            !want.is_empty(),
            "rg {args:?} found nothing: the case tests nothing"
        );
        let (status, v) = d.post("/v1/fs/grep", &body);
        assert_eq!(status, 200, "{body}: {v}");
        assert_eq!(render(&v), want, "grep {body} differs from rg {args:?}");
    }
    // rg also searches a single file given as the path.
    let (_, v) = d.post(
        "/v1/fs/grep",
        &json!({"pattern": "fn", "path": "/workspace/src/lib.rs"}),
    );
    let out = Command::new(&rg)
        .args(["--no-heading", "-n", "--with-filename", "fn", "src/lib.rs"])
        .current_dir(&ws)
        .output()
        .unwrap();
    assert_eq!(render(&v), sorted_lines(&out.stdout));
}

#[test]
fn glob_matches_fd() {
    let fd = fd_bin();
    let d = fixture_daemon();
    let ws = d.zone_dir("workspace");
    let cases: Vec<(Vec<&str>, Value)> = vec![
        (vec!["-t", "f", "-g", "*.rs"], json!({"pattern": "*.rs"})),
        (
            vec!["-t", "f", "-g", "*.{py,js}"],
            json!({"pattern": "*.{py,js}"}),
        ),
        (
            vec!["-t", "f", "-H", "-g", "*.rs"],
            json!({"pattern": "*.rs", "hidden": true}),
        ),
        (
            vec!["-t", "f", "-I", "-g", "*.rs"],
            json!({"pattern": "*.rs", "gitignore": false}),
        ),
        (
            vec!["-t", "f", "-g", "test_*"],
            json!({"pattern": "test_*"}),
        ),
        (
            vec!["-t", "d", "-g", "*"],
            json!({"pattern": "*", "kind": "dir"}),
        ),
        (
            vec!["-t", "f", "-p", "-g", "**/src/**/*.rs"],
            json!({"pattern": "src/**/*.rs"}),
        ),
    ];
    for (args, body) in cases {
        let out = Command::new(&fd)
            .args(&args)
            .arg(".")
            .current_dir(&ws)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fd {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want: Vec<String> = sorted_lines(&out.stdout)
            .into_iter()
            .map(|l| l.trim_end_matches('/').to_string())
            .collect();
        assert!(
            !want.is_empty(),
            "fd {args:?} found nothing: the case tests nothing"
        );
        let (status, v) = d.post("/v1/fs/glob", &body);
        assert_eq!(status, 200, "{body}: {v}");
        let mut got: Vec<String> = v["matches"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                m["path"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("/workspace/")
                    .to_string()
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "glob {body} differs from fd {args:?}");
    }
}

#[test]
fn glob_is_newest_first_and_capped() {
    let d = Daemon::start("");
    let ws = d.zone_dir("workspace");
    for (i, name) in ["old.txt", "mid.txt", "new.txt"].iter().enumerate() {
        let p = ws.join(name);
        std::fs::write(&p, "x").unwrap();
        let t = std::time::SystemTime::UNIX_EPOCH
            + std::time::Duration::from_secs(1_700_000_000 + i as u64 * 100);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }
    let (_, v) = d.post("/v1/fs/glob", &json!({"pattern": "*.txt"}));
    let paths: Vec<_> = v["matches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        paths,
        [
            "/workspace/new.txt",
            "/workspace/mid.txt",
            "/workspace/old.txt"
        ]
    );
    let (_, v) = d.post("/v1/fs/glob", &json!({"pattern": "*.txt", "limit": 2}));
    assert_eq!(v["matches"].as_array().unwrap().len(), 2);
    assert_eq!(
        (v["total"].as_u64(), v["truncated"].as_bool()),
        (Some(3), Some(true))
    );
    let (status, v) = d.post(
        "/v1/fs/glob",
        &json!({"pattern": "*.txt", "limit": 1_000_000_000}),
    );
    assert_eq!(status, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("limit"));
}

#[test]
fn grep_caps_results_and_skips_binary_files() {
    let d = Daemon::start("[limits]\ngrep_max_results = 5\n");
    let ws = d.zone_dir("workspace");
    let text: String = (0..50).map(|i| format!("needle {i}\n")).collect();
    std::fs::write(ws.join("many.txt"), text).unwrap();
    std::fs::write(ws.join("bin.dat"), b"needle\x00\x00needle").unwrap();
    let (_, v) = d.post("/v1/fs/grep", &json!({"pattern": "needle"}));
    assert_eq!(v["lines"].as_array().unwrap().len(), 5);
    assert_eq!(v["truncated"], true);
    assert!(v["lines"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["path"] == "/workspace/many.txt"));
    let (_, v) = d.post(
        "/v1/fs/grep",
        &json!({"pattern": "needle", "mode": "files"}),
    );
    assert_eq!(v["files"], json!(["/workspace/many.txt"]));
}

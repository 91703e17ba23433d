//! `wardfs mcp --fork NAME`: a server confined to one fork, whose root is `/`.
//!
//! The tools answer as they do unconfined; what changes is the call on its way in and the
//! answer on its way out, both in `Server::call_tool`, before and after whichever tool runs, so
//! no tool can forget a rule. On the way in, [`Fork::arguments`] knows every argument of every
//! tool a confined server offers ([`CONFINED`]) and refuses any other tool or argument; each
//! path argument goes through [`Fork::path`], the one rule that maps a path of the fork (`/src/a.rs`)
//! to the daemon's (`/forks/NAME/src/a.rs`): `..` is resolved within the fork and refused
//! above its root, so the path the daemon gets always lies in the fork (a `/workspace/x` or
//! `/forks/OTHER/x` given is a path inside the fork, and names nothing there). A zone argument
//! may name only the fork, and is set to it; a fork name only this one; a checkpoint id only
//! one of the fork's (the caller asks the daemon, [`Fork::checkpoint_ids`]). On the way out,
//! [`Fork::answer`] drops the rows of other zones (events, checkpoints, restores, forks) and
//! writes every path member, and the paths in an error's message, relative to the fork's root.
//!
//! The tools that act on other zones are not offered: `fork` (a new fork would lie outside),
//! `merge` and `update` (they write or read the parent), the git tools but `git_status` and
//! `git_stage` of the fork's own files (a repository the workspace pulled, as the fork holds
//! it), the mirror and sandbox tools. A person merges a confined agent's work (`wardfs merge
//! NAME`) after reading `wardfs changes NAME`, or reviews what it staged.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::Value;

use crate::core::text;

/// How a confined tool takes one of its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    /// A path in the fork, mapped by [`Fork::path`].
    Path,
    /// The same, the fork's root when left out (where the daemon's default is `/workspace`).
    PathOrRoot,
    /// A list of paths in the fork.
    Paths,
    /// A zone: only the fork's, and set to it unless a `path` argument names the place.
    Zone,
    /// A fork's name: only this fork's.
    ForkName,
    /// The same, set to this fork's when left out (where the daemon's default is the workspace).
    OwnFork,
    /// A checkpoint id: only one of the fork's.
    Checkpoint,
    /// Anything else (text, numbers, switches), passed as it is.
    Plain,
}

use Arg::*;

/// The tools a confined server offers, each with every argument it takes (the tool's
/// parameters, `params.rs`).
const CONFINED: &[(&str, &[(&str, Arg)])] = &[
    (
        "read",
        &[("path", Path), ("offset", Plain), ("limit", Plain)],
    ),
    (
        "write",
        &[("path", Path), ("content", Plain), ("fsync", Plain)],
    ),
    (
        "edit",
        &[
            ("path", Path),
            ("old", Plain),
            ("new", Plain),
            ("replace_all", Plain),
        ],
    ),
    ("ls", &[("path", PathOrRoot)]),
    (
        "glob",
        &[
            ("pattern", Plain),
            ("path", PathOrRoot),
            ("gitignore", Plain),
            ("hidden", Plain),
            ("kind", Plain),
            ("limit", Plain),
        ],
    ),
    (
        "grep",
        &[
            ("pattern", Plain),
            ("path", PathOrRoot),
            ("literal", Plain),
            ("ignore_case", Plain),
            ("glob", Plain),
            ("type", Plain),
            ("context", Plain),
            ("before", Plain),
            ("after", Plain),
            ("mode", Plain),
            ("limit", Plain),
            ("gitignore", Plain),
            ("hidden", Plain),
        ],
    ),
    ("stat", &[("path", Path)]),
    ("rm", &[("path", Path), ("recursive", Plain)]),
    ("mv", &[("from", Path), ("to", Path), ("overwrite", Plain)]),
    (
        "checkpoint",
        &[("message", Plain), ("zone", Zone), ("path", Path)],
    ),
    ("checkpoint_list", &[("zone", Zone), ("limit", Plain)]),
    (
        "checkpoint_diff",
        &[("from", Checkpoint), ("to", Checkpoint)],
    ),
    ("restore", &[("id", Checkpoint), ("paths", Paths)]),
    (
        "events",
        &[
            ("since", Plain),
            ("zone", Zone),
            ("path", Path),
            ("limit", Plain),
        ],
    ),
    ("changes", &[("name", ForkName), ("patch", Plain)]),
    ("forks", &[]),
    (
        "git_status",
        &[("repo", Path), ("rescan", Plain), ("fork", OwnFork)],
    ),
    (
        "git_stage",
        &[
            ("message", Plain),
            ("files", Paths),
            ("repo", Path),
            ("branch", Plain),
            ("fork", OwnFork),
        ],
    ),
];

/// The members of an answer that hold virtual paths (or lists of them).
const PATH_MEMBERS: [&str; 11] = [
    "path",
    "repo",
    "to_path",
    "scope",
    "paths",
    "files",
    "restored",
    "removed",
    "conflicts",
    "not_kept",
    "refused",
];

/// A call refused before it reaches the daemon: the tool error's `code`, `message`, `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: &'static str,
    pub message: String,
    pub path: Option<String>,
}

/// The fork a server is confined to.
#[derive(Debug, Clone)]
pub struct Fork {
    name: String,
    /// Its zone, `forks/NAME`.
    zone: String,
    /// Its root as the daemon names it, `/forks/NAME`.
    root: String,
}

/// Returns whether `b` may be part of a fork's name (which `check_name` enforces).
fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')
}

impl Fork {
    /// The fork `name`; refuses a name no fork can have.
    pub fn new(name: &str) -> Result<Fork, String> {
        crate::fork::check_name(name).map_err(|e| e.to_string())?;
        Ok(Fork {
            name: name.to_string(),
            zone: format!("{}/{name}", crate::core::path::FORKS_DIR),
            root: format!("/{}/{name}", crate::core::path::FORKS_DIR),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fork's zone, `forks/NAME`.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// The daemon's path of `given`, a path in the fork whose root is `/` (`src/a.rs` is
    /// taken from the root too): `.` and empty parts dropped, `..` resolved within the fork;
    /// refused when it climbs above the root (OUTSIDE_ZONE) or holds a NUL (INVALID_PATH). The
    /// one rule every path of every tool goes through.
    pub fn path(&self, given: &str) -> Result<String, Refusal> {
        let refuse = |code, why: &str| Refusal {
            code,
            message: format!("{}: {why}", text::name(given)),
            path: Some(given.to_string()),
        };
        if given.contains('\0') {
            return Err(refuse("INVALID_PATH", "contains a NUL byte"));
        }
        let mut parts: Vec<&str> = Vec::new();
        for part in given.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        let why = format!(
                            "`..` climbs above the root (/) of fork {}, the only place this \
                             server serves",
                            self.name
                        );
                        return Err(refuse("OUTSIDE_ZONE", &why));
                    }
                }
                name => parts.push(name),
            }
        }
        Ok(if parts.is_empty() {
            self.root.clone()
        } else {
            format!("{}/{}", self.root, parts.join("/"))
        })
    }

    /// The path a person sees of the daemon's `path`: relative to the fork's root (`/src/a.rs`,
    /// `/` for the root); any other path is left as it is.
    pub fn outward(&self, path: &str) -> String {
        match path.strip_prefix(&self.root) {
            Some("") => "/".to_string(),
            Some(rest) if rest.starts_with('/') => rest.to_string(),
            _ => path.to_string(),
        }
    }

    /// `message` with each mention of a path in the fork written relative to its root.
    pub fn outward_text(&self, message: &str) -> String {
        let mut out = String::with_capacity(message.len());
        let mut rest = message;
        while let Some(at) = rest.find(&self.root) {
            let after = &rest[at + self.root.len()..];
            out.push_str(&rest[..at]);
            match after.bytes().next() {
                Some(b'/') => {}
                Some(b) if name_byte(b) => out.push_str(&self.root),
                _ => out.push('/'),
            }
            rest = after;
        }
        out.push_str(rest);
        out
    }

    /// The arguments each confined tool takes, or `None` for a tool not offered.
    fn spec(tool: &str) -> Option<&'static [(&'static str, Arg)]> {
        CONFINED.iter().find(|(t, _)| *t == tool).map(|(_, a)| *a)
    }

    /// Confines the arguments `args` of a call of `tool` in place (see the module's doc).
    /// Returns the checkpoint ids they name, which must be the fork's.
    pub fn arguments(&self, tool: &str, args: &mut JsonObject) -> Result<Vec<i64>, Refusal> {
        let refuse = |code, message: String| Refusal {
            code,
            message,
            path: None,
        };
        let Some(spec) = Fork::spec(tool) else {
            return Err(refuse(
                "INVALID_ARGUMENT",
                format!(
                    "{tool} is not offered by a server confined to fork {}",
                    self.name
                ),
            ));
        };
        // `null` is how a client leaves an optional argument out, and the tool takes it so: it
        // must get the fork's default, not the daemon's (`ls` of null would list /workspace).
        args.retain(|_, v| !v.is_null());
        let mut ids = Vec::new();
        for (key, value) in args.iter_mut() {
            let Some((_, arg)) = spec.iter().find(|(k, _)| k == key) else {
                return Err(refuse(
                    "INVALID_ARGUMENT",
                    format!(
                        "{tool}: `{}` is not taken by a server confined to fork {}",
                        text::name(key),
                        self.name
                    ),
                ));
            };
            self.argument(*arg, key, value, &mut ids)?;
        }
        for (key, arg) in spec {
            if args.contains_key(*key) {
                continue;
            }
            match arg {
                PathOrRoot => {
                    args.insert(key.to_string(), Value::String(self.root.clone()));
                }
                Zone if !args.contains_key("path") => {
                    args.insert(key.to_string(), Value::String(self.zone.clone()));
                }
                OwnFork => {
                    args.insert(key.to_string(), Value::String(self.name.clone()));
                }
                _ => {}
            }
        }
        Ok(ids)
    }

    /// Confines one argument `key` taken as `arg`; a value of the wrong type is left for the
    /// tool's schema to refuse.
    fn argument(
        &self,
        arg: Arg,
        key: &str,
        value: &mut Value,
        ids: &mut Vec<i64>,
    ) -> Result<(), Refusal> {
        let refuse = |what: &str| Refusal {
            code: "OUTSIDE_ZONE",
            message: format!("{key}: {what}: this server serves only fork {}", self.name),
            path: None,
        };
        match (arg, value) {
            (Path | PathOrRoot, Value::String(s)) => *s = self.path(s)?,
            (Paths, Value::Array(list)) => {
                for item in list {
                    if let Value::String(s) = item {
                        *s = self.path(s)?;
                    }
                }
            }
            (Zone, Value::String(s)) => {
                if s.trim_start_matches('/') != self.zone {
                    return Err(refuse(&format!(
                        "`{}` is not this fork (leave zone out)",
                        text::name(s)
                    )));
                }
                *s = self.zone.clone();
            }
            (ForkName | OwnFork, Value::String(s)) if *s != self.name => {
                return Err(refuse(&format!(
                    "`{}` is not this fork (its name is {})",
                    text::name(s),
                    self.name
                )));
            }
            (Checkpoint, v) => ids.extend(v.as_i64()),
            _ => {}
        }
        Ok(())
    }

    /// The checkpoint ids of the daemon's answer to
    /// [`Fork::checkpoints_route`]; `None` when it is not such an answer.
    pub fn checkpoint_ids(answer: &[u8]) -> Option<Vec<i64>> {
        let v: Value = serde_json::from_slice(answer).ok()?;
        let rows = v.get("checkpoints")?.as_array()?;
        Some(rows.iter().filter_map(|r| r["id"].as_i64()).collect())
    }

    /// The route that lists the fork's checkpoints (all it keeps).
    pub fn checkpoints_route(&self) -> String {
        format!(
            "/v1/checkpoints?zone={}&limit=10000",
            crate::client::encode(&self.zone)
        )
    }

    /// The refusal of a checkpoint id that is not one of the fork's.
    pub fn not_its_checkpoint(&self, id: i64) -> Refusal {
        Refusal {
            code: "NOT_FOUND",
            message: format!(
                "checkpoint {id}: fork {} has no such checkpoint (checkpoint_list lists its own)",
                self.name
            ),
            path: None,
        }
    }

    /// Rewrites the answer `result` of `tool`: other zones' rows dropped, paths relative to the
    /// fork's root, and the text a model reads made again from the rewritten JSON when it was
    /// that JSON (a `read`'s text is the file's and stays as it is).
    pub fn answer(&self, tool: &str, result: &mut CallToolResult) {
        let Some(v) = result.structured_content.as_mut() else {
            return;
        };
        let before = v.clone();
        self.keep_own_rows(tool, v);
        self.rewrite(v);
        if result.is_error == Some(true) {
            if let Some(Value::String(m)) = v.get_mut("message") {
                *m = self.outward_text(m);
            }
        }
        let was_json = match result.content.as_slice() {
            [block] => block
                .as_text()
                .and_then(|t| serde_json::from_str::<Value>(&t.text).ok())
                .is_some_and(|t| t == before),
            _ => false,
        };
        if was_json {
            result.content = vec![ContentBlock::text(v.to_string())];
        }
    }

    /// Drops the rows of an answer that are not the fork's: events and checkpoints of other
    /// zones, other forks.
    fn keep_own_rows(&self, tool: &str, v: &mut Value) {
        let zone = |row: &Value| row.get("zone").and_then(Value::as_str) == Some(&self.zone);
        let keep = |v: &mut Value, key: &str, own: &dyn Fn(&Value) -> bool| {
            if let Some(rows) = v.get_mut(key).and_then(Value::as_array_mut) {
                rows.retain(own);
            }
        };
        match tool {
            "events" => keep(v, "events", &zone),
            "checkpoint_list" => {
                keep(v, "checkpoints", &zone);
                keep(v, "restores", &zone);
            }
            "forks" => keep(v, "forks", &|row: &Value| row["name"] == self.name.as_str()),
            _ => {}
        }
    }

    /// Writes every path member of `v`, at any depth, relative to the fork's root.
    fn rewrite(&self, v: &mut Value) {
        match v {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    if PATH_MEMBERS.contains(&key.as_str()) {
                        self.rewrite_paths(child);
                    }
                    self.rewrite(child);
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.rewrite(i)),
            _ => {}
        }
    }

    /// A path member: a path, or a list of paths.
    fn rewrite_paths(&self, v: &mut Value) {
        match v {
            Value::String(s) => *s = self.outward(s),
            Value::Array(items) => {
                for item in items {
                    if let Value::String(s) = item {
                        *s = self.outward(s);
                    }
                }
            }
            _ => {}
        }
    }
}

/// Returns whether a server confined to a fork offers `tool`.
pub fn offers(tool: &str) -> bool {
    Fork::spec(tool).is_some()
}

/// The instructions of a confined server.
pub fn instructions(fork: &Fork) -> String {
    format!(
        "wardfs serves you fork {name}, a copy-on-write copy of a workspace of your own; its \
         root is /, and nothing outside it can be reached. Read files with `read` (whole or a \
         window of lines), change them with `write` or `edit`, find them with `glob` and \
         `grep`; paths start at the fork's root (/src/main.rs), where the tools' descriptions \
         say /workspace/src/main.rs. Take a `checkpoint` before a risky change, `restore` \
         one to go back. `changes` with name {name} lists what you changed; a person merges \
         it into the workspace. In a repository the workspace pulled, `git_status` lists your \
         changes and `git_stage` stages them as a commit a person reviews. A failed call returns an error whose JSON has a stable `code` \
         (NOT_FOUND, NOT_UNIQUE, OUTSIDE_ZONE, ...) and a `message` saying what to fix.",
        name = fork.name
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fork() -> Fork {
        Fork::new("try-a").unwrap()
    }

    #[test]
    fn a_path_of_the_fork_is_mapped_into_it_and_never_above_it() {
        let f = fork();
        for (given, mapped) in [
            ("/", "/forks/try-a"),
            ("", "/forks/try-a"),
            ("/src/a.rs", "/forks/try-a/src/a.rs"),
            ("src//./a.rs/", "/forks/try-a/src/a.rs"),
            ("/src/../a.rs", "/forks/try-a/a.rs"),
            ("/workspace/x", "/forks/try-a/workspace/x"),
            ("/forks/other/x", "/forks/try-a/forks/other/x"),
            ("/%2e%2e/workspace", "/forks/try-a/%2e%2e/workspace"),
            ("/..\\workspace", "/forks/try-a/..\\workspace"),
            ("/\u{2025}/workspace", "/forks/try-a/\u{2025}/workspace"),
        ] {
            assert_eq!(f.path(given).unwrap(), mapped, "{given:?}");
        }
        for given in [
            "..",
            "/..",
            "../workspace/x",
            "/../../workspace",
            "/src/../../workspace/x",
            "/a/b/../../../forks/other",
        ] {
            let r = f.path(given).unwrap_err();
            assert_eq!(r.code, "OUTSIDE_ZONE", "{given:?}");
            assert_eq!(r.path.as_deref(), Some(given));
        }
        assert_eq!(f.path("/a\0/../..").unwrap_err().code, "INVALID_PATH");
    }

    #[test]
    fn only_fork_names_are_taken() {
        assert!(Fork::new("../x").is_err());
        assert!(Fork::new("a/b").is_err());
        assert!(Fork::new("").is_err());
    }

    #[test]
    fn every_argument_of_a_confined_tool_is_known_and_paths_are_mapped() {
        let f = fork();
        let args = |v: Value| v.as_object().unwrap().clone();
        let mut a = args(json!({"from": "/a", "to": "../../workspace/b"}));
        assert_eq!(f.arguments("mv", &mut a).unwrap_err().code, "OUTSIDE_ZONE");
        let mut a = args(json!({"pattern": "x"}));
        f.arguments("grep", &mut a).unwrap();
        assert_eq!(a["path"], "/forks/try-a");
        let mut a = args(json!({"paths": ["/a", "b/c"], "id": 4}));
        assert_eq!(f.arguments("restore", &mut a).unwrap(), vec![4]);
        assert_eq!(a["paths"], json!(["/forks/try-a/a", "/forks/try-a/b/c"]));
        let mut a = args(json!({}));
        f.arguments("checkpoint", &mut a).unwrap();
        assert_eq!(a["zone"], "forks/try-a");
        let mut a = args(json!({"path": "/src"}));
        f.arguments("checkpoint", &mut a).unwrap();
        assert!(!a.contains_key("zone"));
        let mut a = args(json!({"zone": "workspace"}));
        assert_eq!(
            f.arguments("checkpoint_list", &mut a).unwrap_err().code,
            "OUTSIDE_ZONE"
        );
        let mut a = args(json!({"name": "other"}));
        assert_eq!(
            f.arguments("changes", &mut a).unwrap_err().code,
            "OUTSIDE_ZONE"
        );
        let mut a = args(json!({"name": "x"}));
        assert_eq!(
            f.arguments("fork", &mut a).unwrap_err().code,
            "INVALID_ARGUMENT"
        );
        let mut a = args(json!({"path": null}));
        f.arguments("ls", &mut a).unwrap();
        assert_eq!(a["path"], "/forks/try-a");
        let mut a = args(json!({"zone": null, "path": null}));
        f.arguments("checkpoint", &mut a).unwrap();
        assert_eq!(a["zone"], "forks/try-a");
        assert!(!a.contains_key("path"));
        let mut a = args(json!({"path": "/a", "sneaky": "/workspace"}));
        assert_eq!(
            f.arguments("read", &mut a).unwrap_err().code,
            "INVALID_ARGUMENT"
        );
    }

    #[test]
    fn answers_name_paths_from_the_forks_root() {
        let f = fork();
        let mut r = CallToolResult::structured(json!({
            "matches": [{"path": "/forks/try-a/src/a.rs"}],
            "files": ["/forks/try-a/b", "/forks/try-a-2/c"],
            "path": "/forks/try-a",
            "content": "/forks/try-a/kept as written",
        }));
        f.answer("glob", &mut r);
        let v = r.structured_content.clone().unwrap();
        assert_eq!(v["matches"][0]["path"], "/src/a.rs");
        assert_eq!(v["files"], json!(["/b", "/forks/try-a-2/c"]));
        assert_eq!(v["path"], "/");
        assert_eq!(v["content"], "/forks/try-a/kept as written");
        let text = r.content[0].as_text().unwrap().text.clone();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        let mut e = CallToolResult::structured_error(json!({"code": "NOT_FOUND",
            "message": "/forks/try-a/x: not found; `/forks/try-a` has y, /forks/try-ab too",
            "path": "/forks/try-a/x"}));
        f.answer("read", &mut e);
        let v = e.structured_content.unwrap();
        assert_eq!(v["message"], "/x: not found; `/` has y, /forks/try-ab too");
        assert_eq!(v["path"], "/x");
    }

    #[test]
    fn rows_of_other_zones_and_forks_are_dropped() {
        let f = fork();
        let mut r = CallToolResult::structured(json!({"events": [
            {"zone": "workspace", "path": "/workspace/secret"},
            {"zone": "forks/try-a", "path": "/forks/try-a/mine"}], "cursor": "1-0", "more": false}));
        f.answer("events", &mut r);
        assert_eq!(
            r.structured_content.unwrap()["events"],
            json!([{"zone": "forks/try-a", "path": "/mine"}])
        );
        let mut r = CallToolResult::structured(json!({"forks": [
            {"name": "other", "path": "/forks/other"}, {"name": "try-a", "path": "/forks/try-a"}]}));
        f.answer("forks", &mut r);
        assert_eq!(
            r.structured_content.unwrap()["forks"],
            json!([{"name": "try-a", "path": "/"}])
        );
    }

    #[test]
    fn every_confined_tool_exists() {
        for (tool, _) in CONFINED {
            assert!(super::super::TOOLS.contains(tool), "{tool}");
        }
    }
}

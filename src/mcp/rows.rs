//! The journal's and the checkpoints' rows with virtual paths, as every MCP tool gives paths.
//!
//! The daemon's `/v1/events`, `/v1/log` and `/v1/checkpoints` rows name a path by its zone and
//! its path relative to the zone's root (`{"zone": "workspace", "path": "src/lib.rs"}`); the
//! tools that pass such rows on (`events`, `checkpoint`, `checkpoint_list`) keep `zone` and
//! write each path as the virtual path every other tool uses (`/workspace/src/lib.rs`,
//! `/forks/NAME/src/lib.rs`). A row of a zone that holds no files (`sandboxes`: its path is a
//! sandbox's name) is left as it is.

use serde_json::Value;

use crate::core::path::FORKS_DIR;

/// Returns the virtual path of `rel` (relative to the root of `zone`).
fn virtual_path(zone: &str, rel: &str) -> String {
    let rel = rel.trim_start_matches('/');
    if rel.is_empty() {
        format!("/{zone}")
    } else {
        format!("/{zone}/{rel}")
    }
}

/// Returns the file zone a row names in its `zone` field, if it names one: `cache`,
/// `workspace` or a fork's `forks/NAME` (by name: this process knows no fork of the daemon's).
fn zone_of(row: &Value) -> Option<String> {
    let zone = row.get("zone").and_then(Value::as_str)?;
    let fork = zone
        .strip_prefix(FORKS_DIR)
        .and_then(|r| r.strip_prefix('/'))
        .is_some_and(|name| crate::fork::check_name(name).is_ok());
    (matches!(zone, "cache" | "workspace") || fork).then(|| zone.to_string())
}

/// Rewrites the string at `row[key]` (when it is one) as a virtual path of `zone`.
fn rewrite(row: &mut Value, key: &str, zone: &str) {
    if let Some(slot) = row.get_mut(key) {
        if let Some(rel) = slot.as_str() {
            *slot = Value::String(virtual_path(zone, rel));
        }
    }
}

/// A journal row (an `events` change): `path` and `to_path` become virtual paths.
pub(super) fn change_row(row: &mut Value) {
    if let Some(zone) = zone_of(row) {
        rewrite(row, "path", &zone);
        rewrite(row, "to_path", &zone);
    }
}

/// A checkpoint row: `scope` (the directory it was taken of, when not the whole zone) becomes
/// a virtual path.
pub(super) fn checkpoint_row(row: &mut Value) {
    if let Some(zone) = zone_of(row) {
        rewrite(row, "scope", &zone);
    }
}

/// A restore row of `checkpoint_list`: each of `paths` becomes a virtual path.
pub(super) fn restore_row(row: &mut Value) {
    let Some(zone) = zone_of(row) else {
        return;
    };
    if let Some(paths) = row.get_mut("paths").and_then(Value::as_array_mut) {
        for p in paths {
            if let Some(rel) = p.as_str() {
                *p = Value::String(virtual_path(&zone, rel));
            }
        }
    }
}

/// A `checkpoint_list` answer: its checkpoints and its restores.
pub(super) fn checkpoint_list(answer: &mut Value) {
    for (key, fix) in [
        ("checkpoints", checkpoint_row as fn(&mut Value)),
        ("restores", restore_row),
    ] {
        if let Some(rows) = answer.get_mut(key).and_then(Value::as_array_mut) {
            rows.iter_mut().for_each(fix);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_change_names_its_paths_as_virtual_paths() {
        let mut row = json!({"kind": "change", "zone": "workspace", "path": "src/lib.rs",
                             "to_path": null, "op": "write"});
        change_row(&mut row);
        assert_eq!(row["path"], "/workspace/src/lib.rs");
        assert_eq!(row["to_path"], Value::Null);
        assert_eq!(row["zone"], "workspace");
        let mut moved = json!({"zone": "cache", "path": "a", "to_path": "b/c"});
        change_row(&mut moved);
        assert_eq!(
            moved,
            json!({"zone": "cache", "path": "/cache/a", "to_path": "/cache/b/c"})
        );
        let mut root = json!({"zone": "workspace", "path": ""});
        change_row(&mut root);
        assert_eq!(root["path"], "/workspace");
    }

    #[test]
    fn a_forks_row_names_its_paths_in_the_fork() {
        let mut row = json!({"zone": "forks/try-a", "path": "src/a.rs", "to_path": null});
        change_row(&mut row);
        assert_eq!(row["path"], "/forks/try-a/src/a.rs");
        let mut odd = json!({"zone": "forks/../x", "path": "a"});
        change_row(&mut odd);
        assert_eq!(odd["path"], "a");
    }

    #[test]
    fn a_sandbox_row_keeps_the_sandbox_name() {
        let mut row = json!({"zone": "sandboxes", "path": "dev", "op": "sandbox-created"});
        change_row(&mut row);
        assert_eq!(row["path"], "dev");
    }

    #[test]
    fn checkpoints_and_restores_name_virtual_paths() {
        let mut list = json!({
            "checkpoints": [{"id": 2, "zone": "workspace", "scope": "src"},
                            {"id": 1, "zone": "cache", "scope": null}],
            "restores": [{"id": 1, "zone": "workspace", "paths": ["a.txt", "docs"]}],
        });
        checkpoint_list(&mut list);
        assert_eq!(list["checkpoints"][0]["scope"], "/workspace/src");
        assert_eq!(list["checkpoints"][1]["scope"], Value::Null);
        assert_eq!(
            list["restores"][0]["paths"],
            json!(["/workspace/a.txt", "/workspace/docs"])
        );
    }
}

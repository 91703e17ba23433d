//! Per-file diffs of a staged commit: git-format unified patches (what GitHub will show), with
//! binary and oversized files flagged instead of dumped, and hunks parsed into typed lines for
//! the API.

use git2::{Delta, DiffOptions, Patch, Repository, Tree};
use serde::{Deserialize, Serialize};

use super::error::{GitError, GitResult};
use crate::state::StagedFileRow;

/// Diffs `old` → `new`, one row per changed path (renames are a delete and a create).
pub fn file_patches(
    repo: &Repository,
    old: &Tree<'_>,
    new: &Tree<'_>,
    max_bytes: u64,
) -> GitResult<Vec<StagedFileRow>> {
    let mut opts = DiffOptions::new();
    opts.context_lines(3).include_typechange(true);
    let diff = repo
        .diff_tree_to_tree(Some(old), Some(new), Some(&mut opts))
        .map_err(GitError::git("diff"))?;
    let mut out = Vec::with_capacity(diff.deltas().len());
    for (i, delta) in diff.deltas().enumerate() {
        let operation = match delta.status() {
            Delta::Added => "create",
            Delta::Deleted => "delete",
            _ => "update",
        };
        let path = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let oid = (operation != "delete").then(|| delta.new_file().id().to_string());
        let oversized = delta.new_file().size().max(delta.old_file().size()) > max_bytes;
        let mut row = StagedFileRow {
            path,
            operation: operation.into(),
            additions: 0,
            deletions: 0,
            binary: false,
            oversized,
            oid,
            diff: None,
        };
        if !oversized {
            if let Some(mut patch) = Patch::from_diff(&diff, i).map_err(GitError::git("diff"))? {
                row.binary = patch.delta().flags().is_binary();
                if !row.binary {
                    let (_, adds, dels) = patch.line_stats().map_err(GitError::git("diff"))?;
                    row.additions = adds as u64;
                    row.deletions = dels as u64;
                    let buf = patch.to_buf().map_err(GitError::git("diff"))?;
                    row.diff = Some(String::from_utf8_lossy(&buf).into_owned());
                }
            }
        }
        out.push(row);
    }
    Ok(out)
}

/// One line of a hunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct HunkLine {
    /// `context`, `add` or `delete`.
    pub kind: String,
    pub old_line: Option<u32>,
    pub new_line: Option<u32>,
    pub text: String,
}

/// One hunk of a file's diff.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Hunk {
    /// The `@@ -a,b +c,d @@` header.
    pub header: String,
    pub lines: Vec<HunkLine>,
}

/// Parses the hunks of a unified patch (as stored for a staged file).
pub fn hunks(patch: &str) -> Vec<Hunk> {
    let mut out: Vec<Hunk> = Vec::new();
    let (mut old, mut new) = (0u32, 0u32);
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("@@ ") {
            let nums: Vec<u32> = rest
                .split(' ')
                .take(2)
                .map(|r| {
                    r.trim_start_matches(['-', '+'])
                        .split(',')
                        .next()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(0)
                })
                .collect();
            old = nums.first().copied().unwrap_or(0);
            new = nums.get(1).copied().unwrap_or(0);
            out.push(Hunk {
                header: line.to_string(),
                lines: Vec::new(),
            });
            continue;
        }
        let Some(h) = out.last_mut() else { continue };
        let (kind, text) = match line.as_bytes().first() {
            Some(b'+') => ("add", &line[1..]),
            Some(b'-') => ("delete", &line[1..]),
            Some(b' ') => ("context", &line[1..]),
            _ => continue, // "\ No newline at end of file"
        };
        let (o, n) = match kind {
            "add" => (None, Some(new)),
            "delete" => (Some(old), None),
            _ => (Some(old), Some(new)),
        };
        if kind != "add" {
            old += 1;
        }
        if kind != "delete" {
            new += 1;
        }
        h.lines.push(HunkLine {
            kind: kind.to_string(),
            old_line: o,
            new_line: n,
            text: text.to_string(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::hunks;

    #[test]
    fn hunks_number_their_lines() {
        let p = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\\ No newline at end of file\n";
        let h = hunks(p);
        assert_eq!(h.len(), 1);
        let kinds: Vec<_> = h[0]
            .lines
            .iter()
            .map(|l| (l.kind.as_str(), l.old_line, l.new_line))
            .collect();
        assert_eq!(
            kinds,
            [
                ("context", Some(1), Some(1)),
                ("delete", Some(2), None),
                ("add", None, Some(2)),
                ("context", Some(3), Some(3)),
            ]
        );
    }
}

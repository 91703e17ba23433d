//! Per-file diffs of a staged commit: git-format unified patches (what GitHub will show), with
//! binary and oversized files flagged instead of dumped, and hunks parsed into typed lines for
//! the API.

use git2::{Delta, DiffOptions, Patch, Repository, Tree};
use serde::{Deserialize, Serialize};

use super::error::{libgit2, Libgit2Error};
use crate::state::StagedFileRow;

/// Diffs `old` → `new`, one row per changed path (renames are a delete and a create).
pub fn file_patches(
    repo: &Repository,
    old: &Tree<'_>,
    new: &Tree<'_>,
    max_bytes: u64,
) -> Result<Vec<StagedFileRow>, Libgit2Error> {
    let mut opts = DiffOptions::new();
    opts.context_lines(3).include_typechange(true);
    let diff = repo
        .diff_tree_to_tree(Some(old), Some(new), Some(&mut opts))
        .map_err(libgit2("diff"))?;
    let odb = repo.odb().map_err(libgit2("open object database"))?;
    // A tree diff does not know the files' sizes, and libgit2 would read a big blob whole to
    // learn it: each size comes from its object's header instead (0 when unknown: a submodule).
    let size = |f: git2::DiffFile<'_>| {
        if f.id().is_zero() {
            return 0;
        }
        odb.read_header(f.id()).map(|(n, _)| n as u64).unwrap_or(0)
    };
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
        let oversized = size(delta.new_file()).max(size(delta.old_file())) > max_bytes;
        let mut row = StagedFileRow {
            path,
            operation: operation.into(),
            additions: 0,
            deletions: 0,
            binary: false,
            oversized,
            oid,
            diff: None,
            writers: Vec::new(),
        };
        if !oversized {
            if let Some(mut patch) = Patch::from_diff(&diff, i).map_err(libgit2("diff"))? {
                row.binary = patch.delta().flags().is_binary();
                if !row.binary {
                    let (_, adds, dels) = patch.line_stats().map_err(libgit2("diff"))?;
                    row.additions = adds as u64;
                    row.deletions = dels as u64;
                    let buf = patch.to_buf().map_err(libgit2("diff"))?;
                    row.diff = Some(String::from_utf8_lossy(&buf).into_owned());
                }
            }
        }
        out.push(row);
    }
    Ok(out)
}

/// One line of a hunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct HunkLine {
    /// `context`, `add` or `delete`.
    pub kind: String,
    /// Its 1-based line number in the old file; null for `add`.
    pub old_line: Option<u32>,
    /// Its 1-based line number in the new file; null for `delete`.
    pub new_line: Option<u32>,
    /// The line without its `+`/`-`/space prefix and line ending.
    pub text: String,
}

/// One hunk of a file's diff.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Hunk {
    /// The `@@ -a,b +c,d @@` header.
    pub header: String,
    /// Its lines, in order.
    pub lines: Vec<HunkLine>,
}

/// One line of a git-format unified patch of one file, with its line numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchLine<'a> {
    /// A line before the first hunk: `diff --git`, `index`, modes, `---`/`+++`.
    Meta(&'a str),
    /// A hunk's `@@ -a,b +c,d @@` header.
    Header(&'a str),
    /// An unchanged line and its numbers on both sides.
    Context { old: u32, new: u32, text: &'a str },
    /// A deleted line and its number in the old file.
    Delete { old: u32, text: &'a str },
    /// An added line and its number in the new file.
    Add { new: u32, text: &'a str },
    /// `\ No newline at end of file`.
    Note(&'a str),
}

/// The one unified-diff reader: the API's hunks and the review page's word diffs are both built
/// on it.
pub fn patch_lines(patch: &str) -> impl Iterator<Item = PatchLine<'_>> {
    let (mut old, mut new, mut in_hunk) = (0u32, 0u32, false);
    patch.lines().map(move |line| {
        if let Some(rest) = line.strip_prefix("@@") {
            (old, new) = hunk_starts(rest);
            in_hunk = true;
            return PatchLine::Header(line);
        }
        if !in_hunk {
            return PatchLine::Meta(line);
        }
        if let Some(text) = line.strip_prefix('-') {
            old += 1;
            PatchLine::Delete { old: old - 1, text }
        } else if let Some(text) = line.strip_prefix('+') {
            new += 1;
            PatchLine::Add { new: new - 1, text }
        } else if line.starts_with('\\') {
            PatchLine::Note(line)
        } else {
            let text = line.strip_prefix(' ').unwrap_or(line);
            (old, new) = (old + 1, new + 1);
            PatchLine::Context {
                old: old - 1,
                new: new - 1,
                text,
            }
        }
    })
}

/// Reads the start lines of `@@ -a,b +c,d @@` (given what follows the first `@@`).
fn hunk_starts(rest: &str) -> (u32, u32) {
    let (mut old, mut new) = (0, 0);
    let num = |s: &str| {
        s.split(',')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    for part in rest.split_whitespace() {
        if let Some(s) = part.strip_prefix('-') {
            old = num(s);
        } else if let Some(s) = part.strip_prefix('+') {
            new = num(s);
        } else if part == "@@" {
            break;
        }
    }
    (old, new)
}

/// Parses the hunks of a unified patch (as stored for a staged file).
pub fn hunks(patch: &str) -> Vec<Hunk> {
    let mut out: Vec<Hunk> = Vec::new();
    for line in patch_lines(patch) {
        let (kind, old_line, new_line, text) = match line {
            PatchLine::Header(h) => {
                out.push(Hunk {
                    header: h.to_string(),
                    lines: Vec::new(),
                });
                continue;
            }
            PatchLine::Meta(_) | PatchLine::Note(_) => continue,
            PatchLine::Context { old, new, text } => ("context", Some(old), Some(new), text),
            PatchLine::Delete { old, text } => ("delete", Some(old), None, text),
            PatchLine::Add { new, text } => ("add", None, Some(new), text),
        };
        if let Some(h) = out.last_mut() {
            h.lines.push(HunkLine {
                kind: kind.to_string(),
                old_line,
                new_line,
                text: text.to_string(),
            });
        }
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

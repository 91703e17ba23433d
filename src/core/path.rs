//! Virtual paths: `/<zone>/<relative path>`, normalized.
//!
//! Normalization is the first half of the security boundary (the second is resolving beneath a
//! directory fd, see [`super::zone`]). A [`VPath`] never holds an empty component, `.`, `..`, a NUL
//! byte or a component longer than [`MAX_NAME`]; `..` is folded lexically and may never climb above
//! the zone root. Whatever the input looked like, the relative part is safe to hand to `openat2`.

use std::fmt;

use serde::Serialize;

use super::error::{FsError, FsResult};

/// Longest file name (one component) accepted, as on Linux filesystems.
pub const MAX_NAME: usize = 255;
/// Longest virtual path accepted, as Linux's `PATH_MAX`.
pub const MAX_PATH: usize = 4096;

pub use crate::config::{ZoneId, FORKS_DIR};

/// What a virtual path names: the top level (`/`), or a place inside a zone.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// `/`: the directory holding the zones.
    Top,
    /// A path inside a zone (its root when `rel` is empty).
    Zone(VPath),
}

/// A normalized path inside a zone.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VPath {
    zone: ZoneId,
    /// Relative path without leading or trailing slash; empty for the zone root.
    rel: String,
}

impl VPath {
    /// Returns the zone root of `zone`.
    pub fn root(zone: ZoneId) -> VPath {
        VPath {
            zone,
            rel: String::new(),
        }
    }

    /// Builds a path from a zone and a relative path, normalizing the relative part.
    pub fn new(zone: ZoneId, rel: &str) -> FsResult<VPath> {
        let full = format!("/{}/{}", zone.name(), rel);
        match parse(&full)? {
            Target::Zone(p) if p.zone == zone => Ok(p),
            _ => Err(FsError::OutsideZone {
                path: full,
                rule: format!("`{rel}` climbs above the zone root"),
            }),
        }
    }

    /// Returns the zone.
    pub fn zone(&self) -> ZoneId {
        self.zone
    }

    /// Returns the relative part (empty for the zone root).
    pub fn rel(&self) -> &str {
        &self.rel
    }

    /// Returns true for the zone root.
    pub fn is_root(&self) -> bool {
        self.rel.is_empty()
    }

    /// Returns the last component, or `None` for the zone root.
    pub fn name(&self) -> Option<&str> {
        if self.rel.is_empty() {
            None
        } else {
            Some(self.rel.rsplit('/').next().unwrap_or(&self.rel))
        }
    }

    /// Returns the parent path, or `None` for the zone root.
    pub fn parent(&self) -> Option<VPath> {
        if self.rel.is_empty() {
            return None;
        }
        let rel = match self.rel.rfind('/') {
            Some(i) => self.rel[..i].to_string(),
            None => String::new(),
        };
        Some(VPath {
            zone: self.zone,
            rel,
        })
    }

    /// Returns the relative path of the parent directory ("." for the zone root's children).
    pub fn parent_rel(&self) -> &str {
        match self.rel.rfind('/') {
            Some(i) => &self.rel[..i],
            None => ".",
        }
    }

    /// Returns this path joined with a relative path (normalized; may not climb out of the zone).
    pub fn join(&self, rel: &str) -> FsResult<VPath> {
        if rel.starts_with('/') {
            return Err(FsError::InvalidPath {
                path: rel.to_string(),
                rule: "expected a relative path".into(),
            });
        }
        VPath::new(self.zone, &format!("{}/{}", self.rel, rel))
    }

    /// Returns the path of `name` in this directory: [`VPath::join`] for one name, without
    /// parsing the whole path again (the mount names each file it changes this way). Anything but
    /// one plain name (empty, `.`, `..`, a slash) goes through [`VPath::join`]'s rules.
    pub fn child(&self, name: &str) -> FsResult<VPath> {
        let plain = !matches!(name, "" | "." | "..") && !name.contains(['/', '\0']);
        // "/" zone "/" rel "/" name, as `parse` measures it.
        let full = 2 + self.zone.name().len() + self.rel.len() + 1 + name.len();
        if !plain || name.len() > MAX_NAME || full > MAX_PATH {
            return self.join(name);
        }
        let mut rel = String::with_capacity(self.rel.len() + 1 + name.len());
        if !self.rel.is_empty() {
            rel.push_str(&self.rel);
            rel.push('/');
        }
        rel.push_str(name);
        Ok(VPath {
            zone: self.zone,
            rel,
        })
    }

    /// Returns true when `self` is `other` or lies beneath it.
    pub fn starts_with(&self, other: &VPath) -> bool {
        self.zone == other.zone
            && (other.rel.is_empty()
                || self.rel == other.rel
                || (self.rel.starts_with(&other.rel)
                    && self.rel.as_bytes().get(other.rel.len()) == Some(&b'/')))
    }
}

impl fmt::Display for VPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rel.is_empty() {
            write!(f, "/{}", self.zone.name())
        } else {
            write!(f, "/{}/{}", self.zone.name(), self.rel)
        }
    }
}

impl Serialize for VPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn invalid(input: &str, rule: impl Into<String>) -> FsError {
    FsError::InvalidPath {
        path: input.to_string(),
        rule: rule.into(),
    }
}

/// Folds `.` and `..` out of an absolute path without touching the disk.
pub fn fold(p: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut out = std::path::PathBuf::from("/");
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

/// Parses and normalizes a virtual path.
///
/// Accepts `/cache/...` and `/workspace/...` (a missing leading slash is tolerated, repeated slashes
/// and `.` are dropped, `..` is folded); rejects NUL bytes, unknown zones, overlong names and any `..`
/// that would climb above the zone root.
pub fn parse(input: &str) -> FsResult<Target> {
    if input.is_empty() {
        return Err(invalid(
            input,
            "empty path; paths look like /workspace/src/main.rs",
        ));
    }
    if input.len() > MAX_PATH {
        return Err(invalid(
            super::text::head(input, 64),
            format!("longer than {MAX_PATH} bytes"),
        ));
    }
    if input.contains('\0') {
        return Err(invalid(input, "contains a NUL byte"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for comp in input.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                // A zone's root is `/workspace` (one name) or `/forks/NAME` (two): `..` never
                // climbs from one fork into another.
                let root = if parts.first() == Some(&"forks") {
                    2
                } else {
                    1
                };
                if parts.len() <= root {
                    return Err(FsError::OutsideZone {
                        path: input.to_string(),
                        rule: "`..` climbs above the zone root".into(),
                    });
                }
                parts.pop();
            }
            name => {
                if name.len() > MAX_NAME {
                    return Err(invalid(
                        input,
                        format!(
                            "a name is {} bytes, over the limit of {MAX_NAME}",
                            name.len()
                        ),
                    ));
                }
                parts.push(name);
            }
        }
    }
    let Some(first) = parts.first() else {
        return Ok(Target::Top);
    };
    if *first == crate::config::FORKS_DIR {
        return parse_fork(input, &parts);
    }
    let Some(zone) = ZoneId::from_name(first) else {
        return Err(invalid(
            input,
            format!("unknown zone `{first}`; paths start with /cache, /workspace or /forks/NAME"),
        ));
    };
    Ok(Target::Zone(VPath {
        zone,
        rel: parts[1..].join("/"),
    }))
}

/// A path in a fork: `/forks/NAME/...` (`parts` are its names, `forks` first).
fn parse_fork(input: &str, parts: &[&str]) -> FsResult<Target> {
    let Some(name) = parts.get(1) else {
        return Err(invalid(
            input,
            "names the forks' directory; name a fork (/forks/NAME) or a path inside one",
        ));
    };
    let Some(zone) = ZoneId::fork(name) else {
        return Err(FsError::NotFound {
            path: input.to_string(),
        });
    };
    Ok(Target::Zone(VPath {
        zone,
        rel: parts[2..].join("/"),
    }))
}

/// Parses a path that must name something inside a zone (not the top level).
pub fn parse_in_zone(input: &str) -> FsResult<VPath> {
    match parse(input)? {
        Target::Zone(p) => Ok(p),
        Target::Top => Err(invalid(
            input,
            "names the top level; name a zone (/cache or /workspace) or a path inside one",
        )),
    }
}

/// Parses a path that must name a file or directory inside a zone, not a zone root.
pub fn parse_entry(input: &str) -> FsResult<VPath> {
    let p = parse_in_zone(input)?;
    if p.is_root() {
        return Err(invalid(
            input,
            "names a zone root; name a file or directory inside the zone",
        ));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> String {
        match parse(s).unwrap() {
            Target::Top => "/".into(),
            Target::Zone(p) => p.to_string(),
        }
    }

    fn code(s: &str) -> &'static str {
        parse(s).unwrap_err().code().as_str()
    }

    #[test]
    fn normalizes() {
        assert_eq!(ok("/workspace/a/b"), "/workspace/a/b");
        assert_eq!(ok("workspace//a/./b/"), "/workspace/a/b");
        assert_eq!(ok("/workspace/a/../b"), "/workspace/b");
        assert_eq!(ok("/cache"), "/cache");
        assert_eq!(ok("/"), "/");
        assert_eq!(ok("/workspace/%2e%2e"), "/workspace/%2e%2e");
    }

    #[test]
    fn rejects() {
        assert_eq!(code("/workspace/.."), "OUTSIDE_ZONE");
        assert_eq!(code("/workspace/a/../../cache"), "OUTSIDE_ZONE");
        // A fork's root is `/forks/NAME`: `..` from it never reaches another fork (whether or
        // not that one exists).
        assert_eq!(code("/forks/f/../g/x"), "OUTSIDE_ZONE");
        assert_eq!(code("/forks/f/a/../../g"), "OUTSIDE_ZONE");
        assert_eq!(code("/.."), "OUTSIDE_ZONE");
        assert_eq!(code("/etc/passwd"), "INVALID_PATH");
        assert_eq!(code("/workspace/a\0b"), "INVALID_PATH");
        assert_eq!(code(""), "INVALID_PATH");
        assert_eq!(
            code(&format!("/workspace/{}", "x".repeat(256))),
            "INVALID_PATH"
        );
    }

    #[test]
    fn parents_and_names() {
        let p = parse_entry("/workspace/a/b.txt").unwrap();
        assert_eq!(p.name(), Some("b.txt"));
        assert_eq!(p.parent_rel(), "a");
        assert_eq!(p.parent().unwrap().to_string(), "/workspace/a");
        let q = parse_entry("/workspace/b.txt").unwrap();
        assert_eq!(q.parent_rel(), ".");
        assert!(p.starts_with(&VPath::root(ZoneId::Workspace)));
        assert!(!parse_entry("/workspace/ab")
            .unwrap()
            .starts_with(&parse_entry("/workspace/a").unwrap()));
    }

    /// `child` gives what `join` gives for every name, the hostile ones included.
    #[test]
    fn child_is_join_for_one_name() {
        let long = "n".repeat(MAX_NAME + 1);
        let deep = format!("/workspace/{}", vec!["d".repeat(200); 20].join("/"));
        let names = [
            "a",
            "a b",
            "..",
            ".",
            "",
            "x/../y",
            "a\0b",
            "\u{1b}[1m",
            long.as_str(),
        ];
        for dir in ["/workspace", "/workspace/a/b", deep.as_str()] {
            let dir = parse_in_zone(dir).unwrap();
            for name in names {
                let (c, j) = (dir.child(name), dir.join(name));
                match (&c, &j) {
                    (Ok(c), Ok(j)) => assert_eq!(c, j, "{dir} + {name:?}"),
                    (Err(c), Err(j)) => assert_eq!(c.code(), j.code(), "{dir} + {name:?}"),
                    _ => panic!("{dir} + {name:?}: child {c:?}, join {j:?}"),
                }
            }
        }
    }
}

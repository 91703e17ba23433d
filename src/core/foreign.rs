//! Names, paths and symlink targets that come from outside wardfs: a repository's trees, a
//! sandbox's listings and walks. This is the one validator git pull, mirror pull and remote
//! listings (API and mount) all call, so a hostile repository or sandbox meets the same rule at
//! every entry point.
//!
//! The rules follow git's own `verify_path`: a component is never empty, `.`, `..`, never holds
//! `/` or NUL, never exceeds [`MAX_NAME`] bytes, and (for repository trees, [`GitDir::Refuse`]) is
//! never `.git` in any letter case, nor a name Windows or macOS would read as `.git` (trailing dots
//! and spaces). A symlink target is judged by where it resolves *through the links the same tree
//! holds* ([`LinkResolver`]), never by counting `..`: `d/p -> ..` plus `e -> d/p/d/p/../../x` climbs
//! above the root even though `e`'s target alone looks harmless.

use std::collections::HashMap;

use super::error::FsError;
use super::path::MAX_NAME;

/// How many links one resolution may pass through before it is called a loop (Linux's limit).
pub const MAX_LINK_HOPS: usize = 40;

/// Whether a component named `.git` (in any case) is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GitDir {
    /// Repository trees: a `.git` entry would plant hooks or config in the working tree.
    Refuse,
    /// Sandbox listings: a project inside a sandbox may hold its own repository.
    Allow,
}

/// Why a foreign name, path or link target was refused. `path` is the input as received (lossy
/// UTF-8), so the message names it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?}: {rule}")]
pub struct ForeignPathError {
    pub path: String,
    pub rule: &'static str,
}

impl ForeignPathError {
    fn new(path: &[u8], rule: &'static str) -> ForeignPathError {
        ForeignPathError {
            path: String::from_utf8_lossy(path).into_owned(),
            rule,
        }
    }
}

impl From<ForeignPathError> for FsError {
    fn from(e: ForeignPathError) -> FsError {
        FsError::InvalidPath {
            path: e.path,
            rule: e.rule.to_string(),
        }
    }
}

/// Whether `name` is `.git` as git, or a disk git may one day be checked out on, reads it: in any
/// letter case; with trailing dots and spaces or an NTFS stream (`.git.`, `.git::$INDEX_ALLOCATION`);
/// as NTFS's short name `git~1`; or with the code points HFS+ ignores (`.g\u{200c}it`).
fn is_git_dir(name: &[u8]) -> bool {
    is_ntfs_git_dir(name) || std::str::from_utf8(name).is_ok_and(is_hfs_git_dir)
}

/// `.git` or `git~1` (any case), then only dots and spaces up to the end or to a `:` (an NTFS
/// alternate data stream).
fn is_ntfs_git_dir(name: &[u8]) -> bool {
    let strip = |prefix: &[u8]| {
        (name.len() >= prefix.len() && name[..prefix.len()].eq_ignore_ascii_case(prefix))
            .then(|| &name[prefix.len()..])
    };
    let Some(rest) = strip(b".git").or_else(|| strip(b"git~1")) else {
        return false;
    };
    let before_stream = rest.split(|b| *b == b':').next().unwrap_or(rest);
    before_stream.iter().all(|b| matches!(b, b'.' | b' '))
}

/// `.git` (any case) once the code points HFS+ leaves out of names are left out.
fn is_hfs_git_dir(name: &str) -> bool {
    let ignorable = |c: char| matches!(c, '\u{200C}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{206A}'..='\u{206F}' | '\u{FEFF}');
    let mut shown = name.chars().filter(|c| !ignorable(*c));
    let mut expected = ".git".chars();
    loop {
        match (shown.next(), expected.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a.eq_ignore_ascii_case(&b) => {}
            _ => return false,
        }
    }
}

/// Checks one component of a foreign path (a tree entry's name, a listing's name).
pub fn check_name(name: &[u8], git: GitDir) -> Result<(), ForeignPathError> {
    let rule = if name.is_empty() {
        "an empty name"
    } else if name == b"." || name == b".." {
        "a name that is `.` or `..`"
    } else if name.contains(&b'/') {
        "a name that contains `/`"
    } else if name.contains(&0) {
        "a name that contains a NUL byte"
    } else if name.len() > MAX_NAME {
        "a name longer than 255 bytes"
    } else if git == GitDir::Refuse && is_git_dir(name) {
        "a name that is `.git` (in some letter case); git refuses it too"
    } else if std::str::from_utf8(name).is_err() {
        "a name that is not UTF-8"
    } else {
        return Ok(());
    };
    Err(ForeignPathError::new(name, rule))
}

/// Checks a foreign relative path (`a/b/c`): every component as [`check_name`], no leading or
/// trailing slash. The result is safe to join beneath the directory it was meant for.
pub fn check_rel(path: &str, git: GitDir) -> Result<(), ForeignPathError> {
    if path.is_empty() {
        return Err(ForeignPathError::new(b"", "an empty path"));
    }
    if path.len() > super::path::MAX_PATH {
        return Err(ForeignPathError::new(
            &path.as_bytes()[..64],
            "a path longer than 4096 bytes",
        ));
    }
    for comp in path.split('/') {
        check_name(comp.as_bytes(), git).map_err(|e| ForeignPathError {
            path: path.to_string(),
            rule: e.rule,
        })?;
    }
    Ok(())
}

/// Resolves symlink targets through the links one tree (or listing) holds, to decide whether a
/// link stays beneath the tree's root. Paths are relative to that root, `/`-separated.
#[derive(Debug, Default, Clone)]
pub struct LinkResolver {
    links: HashMap<String, String>,
}

impl LinkResolver {
    /// Returns a resolver that knows no links.
    pub fn new() -> LinkResolver {
        LinkResolver::default()
    }

    /// Records that `path` is a symlink to `target` in the tree.
    pub fn add(&mut self, path: &str, target: &str) {
        self.links.insert(path.to_string(), target.to_string());
    }

    /// Returns the path (relative to the root, "" for the root itself) that the link at `path`
    /// pointing at `target` resolves to, following the tree's other links; fails when the target
    /// is absolute, climbs above the root at any step, or loops.
    pub fn resolve(&self, path: &str, target: &str) -> Result<String, ForeignPathError> {
        let err = |rule| ForeignPathError {
            path: format!("{path} -> {target}"),
            rule,
        };
        // Components still to walk, last first; `at` is where the walk stands.
        let mut todo: Vec<String> = Vec::new();
        let mut at: Vec<String> = path.split('/').map(String::from).collect();
        at.pop();
        // Every target on the way is checked, not only the first: a link the walk passes
        // through may hold NUL or be empty too.
        let push_target = |todo: &mut Vec<String>, t: &str| -> Result<(), ForeignPathError> {
            if t.is_empty() || t.contains('\0') {
                return Err(err("a symlink target that is empty or holds NUL"));
            }
            if t.starts_with('/') {
                return Err(err("a symlink to an absolute path, outside the tree"));
            }
            todo.extend(t.split('/').rev().map(String::from));
            Ok(())
        };
        push_target(&mut todo, target)?;
        let mut hops = 0;
        while let Some(c) = todo.pop() {
            match c.as_str() {
                "" | "." => {}
                ".." => {
                    if at.pop().is_none() {
                        return Err(err("a symlink that resolves above the tree's root"));
                    }
                }
                _ => {
                    if c.len() > MAX_NAME {
                        return Err(err(
                            "a symlink whose target holds a name longer than 255 bytes",
                        ));
                    }
                    at.push(c);
                    if at.iter().map(|c| c.len() + 1).sum::<usize>() > super::path::MAX_PATH {
                        return Err(err(
                            "a symlink that resolves to a path longer than 4096 bytes",
                        ));
                    }
                    let here = at.join("/");
                    if let Some(t) = self.links.get(&here) {
                        hops += 1;
                        if hops > MAX_LINK_HOPS {
                            return Err(err("a symlink loop (more than 40 links)"));
                        }
                        at.pop();
                        push_target(&mut todo, t)?;
                    }
                }
            }
        }
        Ok(at.join("/"))
    }

    /// Checks every recorded link; returns the first that escapes, naming it.
    pub fn check_all(&self) -> Result<(), ForeignPathError> {
        let mut paths: Vec<&String> = self.links.keys().collect();
        paths.sort();
        for p in paths {
            self.resolve(p, &self.links[p])?;
        }
        Ok(())
    }
}

/// Masks permission bits that came from outside: no setuid, setgid or sticky bit, nothing the
/// umask takes away. Directories keep their search bits.
pub fn mask_mode(mode: u32, umask: u32) -> u32 {
    mode & 0o777 & !umask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for bad in [
            &b""[..],
            b".",
            b"..",
            b"a/b",
            b"a\0b",
            b".git",
            b".GIT",
            b".Git.",
            b".git ",
            b"GIT~1",
            b"git~1...",
            b".git::$INDEX_ALLOCATION",
            b".GIT:stream",
            ".g\u{200c}it".as_bytes(),
            "\u{feff}.GI\u{200d}T".as_bytes(),
            ".git\u{206a}".as_bytes(),
            b"\xff",
        ] {
            assert!(check_name(bad, GitDir::Refuse).is_err(), "{bad:?}");
        }
        assert!(check_name(&[b'x'; 256], GitDir::Allow).is_err());
        for good in [
            &b"a"[..],
            b".gitignore",
            b".gitmodules",
            b"..a",
            b"a..",
            b".github",
            b"git",
            b"git~2",
            b".git-x",
            b".gi",
            ".git\u{e9}".as_bytes(),
        ] {
            assert!(check_name(good, GitDir::Refuse).is_ok(), "{good:?}");
        }
        assert!(check_name(b".git", GitDir::Allow).is_ok());
    }

    #[test]
    fn paths() {
        assert!(check_rel("a/b/c", GitDir::Refuse).is_ok());
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "a/../b",
            "a/./b",
            "x/.git/hooks",
            "..",
            "a/.GiT",
        ] {
            let e = check_rel(bad, GitDir::Refuse).unwrap_err();
            assert_eq!(e.path, bad);
        }
    }

    #[test]
    fn links_resolve_through_the_tree() {
        let mut r = LinkResolver::new();
        assert_eq!(r.resolve("a/b", "c").unwrap(), "a/c");
        assert_eq!(r.resolve("a/b", "../c").unwrap(), "c");
        assert!(r.resolve("a/b", "../../c").is_err());
        assert!(r.resolve("b", "/etc/passwd").is_err());
        assert_eq!(r.resolve("a/b", "./x/../y").unwrap(), "a/y");
        // `d/p -> ..` is harmless alone; through it, `e` climbs out.
        r.add("d/p", "..");
        r.add("e", "d/p/d/p/d/p/../../etc/passwd");
        assert_eq!(r.resolve("d/p", "..").unwrap(), "");
        let e = r.check_all().unwrap_err();
        assert!(e.path.starts_with("e -> "), "{e}");
        // Loops are refused, not followed forever.
        let mut l = LinkResolver::new();
        l.add("x", "y");
        l.add("y", "x");
        assert!(l.check_all().unwrap_err().rule.contains("loop"));
        // A link through a link whose target holds NUL is refused (found by fuzz/foreign).
        let mut n = LinkResolver::new();
        n.add("y", "\0\0\tx(");
        assert!(n.resolve("x", "y").is_err());
        // A link through an absolute link escapes.
        let mut a = LinkResolver::new();
        a.add("abs", "/etc");
        assert!(a.resolve("f", "abs/passwd").is_err());
    }

    #[test]
    fn modes_are_masked() {
        assert_eq!(mask_mode(0o4777, 0o022), 0o755);
        assert_eq!(mask_mode(0o2644, 0o022), 0o644);
        assert_eq!(mask_mode(0o1777, 0o002), 0o775);
    }
}

//! Paths as a person types them, turned into the virtual paths the daemon takes.
//!
//! Three forms name the same file: the virtual path (`/workspace/src/lib.rs`), a path through
//! the mount (`~/p/.wardfs/mnt/workspace/src/lib.rs`, or `lib.rs` typed in
//! `mnt/workspace/src`), and a path in a zone's own directory (`~/p/.wardfs/workspace/src/lib.rs`).
//! A relative path is taken from where the caller stands, as git takes paths relative to the
//! work tree. The translation is lexical (`.` and `..` folded, no symlink followed): the daemon
//! still checks the result like any other path, so nothing here is a security boundary.

use std::path::{Path, PathBuf};

use crate::core::ZoneId;

impl Layout {
    /// Returns the layout the daemon reported (`mount`, and each zone's name and `root`: a
    /// local directory, or `sandbox:path` for a zone served from a sandbox), with the real
    /// (symlink-free) form of each local path added where it differs.
    pub fn new(mount: &str, zones: impl IntoIterator<Item = (String, Option<String>)>) -> Layout {
        let mount = PathBuf::from(mount);
        let mut mounts = vec![mount.clone()];
        // The mount point itself is not looked at: a stale mount would make that hang or fail.
        if let (Some(parent), Some(name)) = (mount.parent(), mount.file_name()) {
            if let Ok(real) = std::fs::canonicalize(parent) {
                mounts.push(real.join(name));
            }
        }
        mounts.dedup();
        let mut out = Vec::new();
        for (name, root) in zones {
            let dir = root.filter(|r| r.starts_with('/')).map(PathBuf::from);
            if let Some(real) = dir.as_ref().and_then(|d| std::fs::canonicalize(d).ok()) {
                if Some(&real) != dir.as_ref() {
                    out.push((name.clone(), Some(real)));
                }
            }
            out.push((name, dir));
        }
        Layout { mounts, zones: out }
    }
}

/// Returns where the caller stands: `$PWD` when it names the current directory (the path the
/// person typed their way to, through symlinks), else the kernel's.
pub fn cwd() -> PathBuf {
    use std::os::unix::fs::MetadataExt as _;
    let kernel = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"));
    let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    };
    match std::env::var_os("PWD").map(PathBuf::from) {
        Some(pwd) if pwd.is_absolute() && same(&pwd, &kernel) => pwd,
        _ => kernel,
    }
}

/// Where the daemon's zones are on this machine (from `/v1/status`).
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// The mount point (whether or not it is mounted now), as configured and, when they differ,
    /// with its symlinks resolved (the form `getcwd` gives).
    pub mounts: Vec<PathBuf>,
    /// Each zone's name and, for a zone backed by a local directory, that directory.
    pub zones: Vec<(String, Option<PathBuf>)>,
}

/// Returns true when `input` is already a virtual path (`/`, `/workspace/…`, `/forks/NAME/…`,
/// or a zone's name without the leading slash, which the daemon tolerates), so no layout is
/// needed.
pub fn is_virtual(input: &str) -> bool {
    let Some(rest) = input.strip_prefix('/') else {
        return false;
    };
    let first = rest.split('/').next().unwrap_or("");
    first.is_empty() || first == FORKS || ZoneId::ALL.iter().any(|z| z.name() == first)
}

/// The top-level directory of the forks' virtual paths (`/forks/NAME/…`).
const FORKS: &str = "forks";

/// Returns the virtual path of `input`, taken from `cwd` when relative, or why it names no
/// place in a zone.
pub fn to_virtual(input: &str, cwd: &Path, layout: &Layout) -> Result<String, String> {
    if is_virtual(input) {
        return Ok(input.to_string());
    }
    let full = crate::core::path::fold(&cwd.join(input));
    if let Some(v) = layout.mounts.iter().find_map(|m| beneath(&full, m, "")) {
        return Ok(v);
    }
    for (name, dir) in &layout.zones {
        if let Some(v) = dir.as_ref().and_then(|d| beneath(&full, d, name)) {
            return Ok(v);
        }
    }
    // Outside every zone, a relative path starting with a zone's name is the tolerated virtual
    // form (`workspace/notes.md`).
    if !input.starts_with('/') && is_virtual(&format!("/{input}")) {
        return Ok(format!("/{input}"));
    }
    Err(outside(input, &full, layout))
}

/// Returns the virtual path of `full` when it lies beneath `dir` (the mount, `zone` empty, or a
/// zone's directory).
fn beneath(full: &Path, dir: &Path, zone: &str) -> Option<String> {
    let rest = full.strip_prefix(crate::core::path::fold(dir)).ok()?;
    let rest = rest.to_str()?;
    let v = match (zone, rest) {
        ("", "") => "/".to_string(),
        ("", r) => format!("/{r}"),
        (z, "") => format!("/{z}"),
        (z, r) => format!("/{z}/{r}"),
    };
    Some(v)
}

fn outside(input: &str, full: &Path, layout: &Layout) -> String {
    let dirs: Vec<String> = layout
        .zones
        .iter()
        .filter_map(|(n, d)| d.as_ref().map(|d| format!("/{n} in {}", d.display())))
        .collect();
    let mut s = format!(
        "`{input}` ({}) is not in a zone: name it as a virtual path (/workspace/…), or a path \
         under the mount ({})",
        full.display(),
        layout
            .mounts
            .first()
            .map(|m| m.display().to_string())
            .unwrap_or_default()
    );
    if !dirs.is_empty() {
        s += &format!(" or in a zone's directory ({})", dirs.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            mounts: vec!["/home/me/p/.wardfs/mnt".into()],
            zones: vec![
                ("cache".into(), Some("/home/me/p/.wardfs/cache".into())),
                ("workspace".into(), Some("/srv/work".into())),
            ],
        }
    }

    fn v(input: &str, cwd: &str) -> Result<String, String> {
        to_virtual(input, Path::new(cwd), &layout())
    }

    #[test]
    fn virtual_paths_pass_unchanged_wherever_one_stands() {
        assert_eq!(v("/workspace/a.rs", "/tmp").unwrap(), "/workspace/a.rs");
        assert_eq!(v("/", "/srv/work/src").unwrap(), "/");
        assert_eq!(v("/cache", "/").unwrap(), "/cache");
        assert_eq!(v("/forks/a/x.rs", "/tmp").unwrap(), "/forks/a/x.rs");
        let in_fork = "/home/me/p/.wardfs/mnt/forks/a/src";
        assert_eq!(v("lib.rs", in_fork).unwrap(), "/forks/a/src/lib.rs");
    }

    #[test]
    fn relative_paths_are_taken_from_where_one_stands_in_the_mount_or_a_zone() {
        let mnt = "/home/me/p/.wardfs/mnt/workspace/src";
        assert_eq!(v("lib.rs", mnt).unwrap(), "/workspace/src/lib.rs");
        assert_eq!(v("../Cargo.toml", mnt).unwrap(), "/workspace/Cargo.toml");
        assert_eq!(v(".", mnt).unwrap(), "/workspace/src");
        assert_eq!(v("./x/../y", "/srv/work").unwrap(), "/workspace/y");
        assert_eq!(v("..", "/home/me/p/.wardfs/mnt/cache").unwrap(), "/");
    }

    #[test]
    fn real_paths_of_the_mount_and_of_a_zones_directory_name_their_file() {
        assert_eq!(
            v("/home/me/p/.wardfs/mnt/cache/paper.pdf", "/").unwrap(),
            "/cache/paper.pdf"
        );
        assert_eq!(
            v("/home/me/p/.wardfs/cache/paper.pdf", "/").unwrap(),
            "/cache/paper.pdf"
        );
        assert_eq!(
            v("/srv/work/src/lib.rs", "/").unwrap(),
            "/workspace/src/lib.rs"
        );
        assert_eq!(v("/srv/work", "/").unwrap(), "/workspace");
    }

    #[test]
    fn a_path_outside_every_zone_is_refused_with_the_forms_that_work() {
        let e = v("notes.md", "/home/me").unwrap_err();
        assert!(e.contains("/home/me/notes.md"), "{e}");
        assert!(e.contains("/home/me/p/.wardfs/mnt"), "{e}");
        assert!(e.contains("/srv/work"), "{e}");
        // A prefix that is not a whole component is not beneath the directory.
        assert!(v("/srv/workshop/a", "/").is_err());
        assert!(v("/etc/passwd", "/srv/work").is_err());
    }

    #[test]
    fn a_zone_name_typed_without_its_slash_outside_the_zones_is_still_virtual() {
        assert_eq!(
            v("workspace/notes.md", "/home/me").unwrap(),
            "/workspace/notes.md"
        );
        // Inside a zone, a relative path is relative, whatever its first name.
        assert_eq!(
            v("workspace/notes.md", "/srv/work").unwrap(),
            "/workspace/workspace/notes.md"
        );
    }
}

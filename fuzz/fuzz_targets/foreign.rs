//! The validator of names, paths and symlink targets from repositories and sandboxes
//! (`wardfs::core::foreign`), used by git pull, mirror pull and remote listings: whatever the
//! bytes, an accepted name is a plain component, an accepted path joins beneath its directory,
//! and a link the resolver accepts ends beneath the tree's root (never a panic, never a hang).
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardfs::core::foreign::{check_name, check_rel, GitDir, LinkResolver};
use wardfs::core::{VPath, ZoneId};

fuzz_target!(|data: &[u8]| {
    for git in [GitDir::Refuse, GitDir::Allow] {
        if check_name(data, git).is_ok() {
            assert!(!data.is_empty() && data != b"." && data != b"..");
            assert!(!data.contains(&b'/') && !data.contains(&0));
            if git == GitDir::Refuse {
                assert!(!data.eq_ignore_ascii_case(b".git"));
            }
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if text.len() < 4000 && check_rel(text, GitDir::Refuse).is_ok() {
        let dir = VPath::new(ZoneId::Workspace, "deep/r").expect("a plain path");
        let joined = dir.join(text).expect("an accepted path joins");
        assert!(joined.starts_with(&dir), "{text:?} escaped to {joined}");
        assert_eq!(joined.rel(), format!("deep/r/{text}"), "{text:?} was not plain");
    }
    // Lines of `path\ttarget`: a tree's links; every accepted link resolves beneath the root.
    let mut tree = LinkResolver::new();
    let mut links = Vec::new();
    for line in text.lines().take(64) {
        if let Some((path, target)) = line.split_once('\t') {
            if check_rel(path, GitDir::Refuse).is_ok() {
                tree.add(path, target);
                links.push((path, target));
            }
        }
    }
    for (path, target) in links {
        if let Ok(end) = tree.resolve(path, target) {
            assert!(
                end.is_empty() || check_rel(&end, GitDir::Allow).is_ok(),
                "{path} -> {target} resolved to {end:?}"
            );
        }
    }
    let _ = tree.check_all();
});

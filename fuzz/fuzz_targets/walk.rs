//! The parser of `find -printf` records from a sandbox: any bytes a sandbox sends give a clean
//! error or entries, never a panic; a symlink's target is kept only for symlinks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardfs::core::EntryKind;
use wardfs::sandbox::agent::fuzzing::parse_walk;

fuzz_target!(|data: &[u8]| {
    if let Ok(entries) = parse_walk(data) {
        for e in entries {
            assert!(!e.path.contains('\0'));
            assert_eq!(
                e.meta.link_target.is_some(),
                e.meta.kind == EntryKind::Symlink
            );
        }
    }
});

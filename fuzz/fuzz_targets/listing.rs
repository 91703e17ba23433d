//! The reader of a sandbox's directory listings (`GET /v1/fs/entries`), entry by entry: any
//! bytes give a clean error or entries, never a panic; no kept name is empty, `.`, `..` or holds
//! `/` or NUL; and never more entries than the cap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardfs::sandbox::agent::fuzzing::parse_listing;

fuzz_target!(|data: &[u8]| {
    let Some((&cap, body)) = data.split_first() else {
        return;
    };
    if let Ok(entries) = parse_listing(body, usize::from(cap)) {
        assert!(entries.len() <= usize::from(cap));
        for e in entries {
            assert!(!e.name.is_empty() && e.name != "." && e.name != "..");
            assert!(!e.name.contains('/') && !e.name.contains('\0'));
        }
    }
});

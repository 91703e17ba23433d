//! Path normalization, the security boundary: whatever the input, an accepted path is a plain
//! relative path inside its zone (no `..`, `.`, empty component, NUL) and parses back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardfs::core::path::{parse, parse_entry, parse_in_zone};
use wardfs::core::{Target, VPath};

fn check(vp: &VPath) {
    let rel = vp.rel();
    assert!(!rel.contains('\0'), "NUL in {rel:?}");
    assert!(
        !rel.starts_with('/') && !rel.ends_with('/'),
        "slash at an end of {rel:?}"
    );
    if !rel.is_empty() {
        for part in rel.split('/') {
            assert!(
                !part.is_empty() && part != "." && part != "..",
                "bad component in {rel:?}"
            );
        }
    }
    let again = parse_in_zone(&vp.to_string()).expect("a normalized path parses again");
    assert_eq!(&again, vp, "normalization is not idempotent");
}

fuzz_target!(|data: &[u8]| {
    let Ok(input) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(Target::Zone(vp)) = parse(input) {
        check(&vp);
    }
    if let Ok(vp) = parse_in_zone(input) {
        check(&vp);
        if let Some(parent) = vp.parent() {
            check(&parent);
        }
        if let Ok(joined) = vp.join(input) {
            check(&joined);
            assert!(joined.starts_with(&vp), "{joined} escaped {vp}");
        }
    }
    if let Ok(vp) = parse_entry(input) {
        check(&vp);
    }
});

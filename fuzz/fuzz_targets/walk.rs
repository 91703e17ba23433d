//! The parser of `find -printf` records from a sandbox: any bytes a sandbox sends give a clean
//! error or entries, never a panic; a symlink's target is kept only for symlinks; and the
//! listing read as a stream, in pieces of any size (as a download arrives), gives exactly what
//! it gives read whole.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardfs::core::EntryKind;
use wardfs::sandbox::agent::fuzzing::{parse_walk, parse_walk_in_pieces};

fuzz_target!(|data: &[u8]| {
    let Some((&piece, listing)) = data.split_first() else {
        return;
    };
    let whole = parse_walk(listing);
    if let Ok(entries) = &whole {
        for e in entries {
            assert!(!e.path.contains('\0'));
            assert_eq!(
                e.meta.link_target.is_some(),
                e.meta.kind == EntryKind::Symlink
            );
        }
    }
    let streamed = parse_walk_in_pieces(listing, usize::from(piece) + 1);
    assert_eq!(whole, streamed, "pieces of {}", usize::from(piece) + 1);
});

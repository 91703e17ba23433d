//! The upload tar packer: items built from the input are planned into archives that each stay
//! under the body limit and hold, read back, exactly the items planned for them.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use wardfs::core::provider::BatchItem;
use wardfs::sandbox::agent::fuzzing::pack;

/// Items from `data`: records split on `\n`, the first byte the kind, then `path\tcontent`.
fn items(data: &[u8]) -> Vec<BatchItem> {
    let text = String::from_utf8_lossy(data);
    text.split('\n')
        .filter_map(|rec| {
            let mut chars = rec.chars();
            let kind = chars.next()?;
            let rest = chars.as_str();
            let (path, body) = rest.split_once('\t').unwrap_or((rest, ""));
            if path.is_empty() || path.contains('\0') {
                return None;
            }
            let path = path.to_string();
            Some(match kind as u32 % 3 {
                0 => BatchItem::File {
                    path,
                    data: Bytes::from(body.as_bytes().repeat(kind as usize % 64 + 1)),
                    mode: kind as u32 & 0o7777,
                    mtime: Some(1_700_000_000),
                },
                1 => BatchItem::Dir { path, mode: 0o755 },
                _ => BatchItem::Symlink {
                    path,
                    target: body.replace('\0', ""),
                },
            })
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let limit = 4096 + (data.first().copied().unwrap_or(0) as u64) * 64;
    let items = items(data);
    let count = items.len();
    let (archives, large) = pack(items, limit);
    let mut seen = large.len();
    for (planned, bytes) in archives {
        seen += planned.len();
        let Ok(bytes) = bytes else { continue };
        assert!(bytes.len() as u64 <= limit, "{} > {limit}", bytes.len());
        let mut ar = tar::Archive::new(&bytes[..]);
        let read = ar.entries().expect("archive readable").count();
        assert_eq!(read, planned.len(), "entries read back");
    }
    assert_eq!(seen, count, "every item is planned once");
});

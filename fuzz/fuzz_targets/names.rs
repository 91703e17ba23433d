//! The names shown to people (`wardfs::core::text`): whatever the bytes, `name_bytes` and
//! `line` give nothing a terminal acts on (no control character, no bidirectional override),
//! and `name_bytes` names exactly what it was given: a quoted name decodes back to its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wardfs::core::text::{line, name_bytes};

/// Whether `c` could drive a terminal or reorder what it shows.
fn acts(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

fn push_char(out: &mut Vec<u8>, c: char) {
    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
}

/// Reads back a quoted name: `\ooo` (one byte), C escapes, `\u{…}`, `\"` and `\\`.
fn decode(quoted: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chars = quoted[1..quoted.len() - 1].chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            push_char(&mut out, c);
            continue;
        }
        match chars.next().expect("a complete escape") {
            'n' => out.push(b'\n'),
            'r' => out.push(b'\r'),
            't' => out.push(b'\t'),
            'a' => out.push(7),
            'b' => out.push(8),
            'f' => out.push(12),
            'v' => out.push(11),
            'u' => {
                assert_eq!(chars.next(), Some('{'));
                let hex: String = chars.by_ref().take_while(|c| *c != '}').collect();
                let code = u32::from_str_radix(&hex, 16).expect("hex");
                push_char(&mut out, char::from_u32(code).expect("a character"));
            }
            d @ '0'..='3' => {
                let oct: String = [d, chars.next().unwrap(), chars.next().unwrap()]
                    .iter()
                    .collect();
                out.push(u8::from_str_radix(&oct, 8).expect("octal"));
            }
            other => push_char(&mut out, other),
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let shown = name_bytes(data);
    assert!(!shown.chars().any(acts), "{shown:?}");
    if shown.starts_with('"') && shown.len() >= 2 && shown.as_bytes() != data {
        assert_eq!(decode(&shown), data, "{shown:?}");
    } else {
        assert_eq!(shown.as_bytes(), data, "shown unquoted, so unchanged");
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let l = line(text);
        assert!(!l.chars().any(|c| c != '\t' && acts(c)), "{l:?}");
    }
});

//! Decoding a JSON string where it lies: the decoded text is never longer than its JSON form, so
//! it is written over that form from its start, and a large string (a write's `content`) costs
//! no second buffer.
//!
//! The input has been through serde_json (as a `RawValue`), which checked the quotes, the
//! escapes' letters and hex digits, and that no control character is unescaped; this decoder
//! checks again and, like serde_json's own decoding to `String`, refuses a lone surrogate.

/// Decodes the JSON string `buf` (quotes included) into `buf`'s start and returns the length of
/// the decoded UTF-8 text; the error says what is wrong, for a message naming the field.
pub fn decode_in_place(buf: &mut [u8]) -> Result<usize, String> {
    let end = buf.len().wrapping_sub(1);
    if buf.len() < 2 || buf[0] != b'"' || buf[end] != b'"' {
        return Err("expected a string".into());
    }
    let (mut read, mut written) = (1, 0);
    while read < end {
        if buf[read] != b'\\' {
            let plain = memchr::memchr(b'\\', &buf[read..end]).unwrap_or(end - read);
            buf.copy_within(read..read + plain, written);
            read += plain;
            written += plain;
        } else if read + 1 == end {
            return Err("an escape cut short by the closing quote".into());
        } else if let Some(b) = short_escape(buf[read + 1]) {
            buf[written] = b;
            read += 2;
            written += 1;
        } else {
            let (c, len) = unicode(&buf[read..end])?;
            read += len;
            written += c.encode_utf8(&mut buf[written..read]).len();
        }
    }
    Ok(written)
}

/// The byte a two-character escape `\<letter>` stands for; `None` for `u` (see [`unicode`])
/// and for letters JSON has no escape for.
fn short_escape(letter: u8) -> Option<u8> {
    Some(match letter {
        b'"' => b'"',
        b'\\' => b'\\',
        b'/' => b'/',
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        _ => return None,
    })
}

/// A `\uXXXX` escape at the start of `s`, or a surrogate pair of two.
fn unicode(s: &[u8]) -> Result<(char, usize), String> {
    if s.get(1) != Some(&b'u') {
        return Err("an escape that JSON does not have".into());
    }
    let first = hex4(s, 2)?;
    if (0xDC00..=0xDFFF).contains(&first) {
        return Err(format!("a lone surrogate \\u{first:04x}"));
    }
    if !(0xD800..=0xDBFF).contains(&first) {
        return char::from_u32(first)
            .map(|c| (c, 6))
            .ok_or_else(|| format!("\\u{first:04x} is not a character"));
    }
    let second = match s.get(6..8) {
        Some(b"\\u") => hex4(s, 8)?,
        _ => return Err(format!("a lone surrogate \\u{first:04x}")),
    };
    if !(0xDC00..=0xDFFF).contains(&second) {
        return Err(format!("a lone surrogate \\u{first:04x}"));
    }
    let c = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
    char::from_u32(c)
        .map(|c| (c, 12))
        .ok_or_else(|| format!("\\u{first:04x}\\u{second:04x} is not a character"))
}

/// The four hex digits at `s[at..at + 4]`.
fn hex4(s: &[u8], at: usize) -> Result<u32, String> {
    s.get(at..at + 4)
        .and_then(|h| std::str::from_utf8(h).ok())
        .and_then(|h| u32::from_str_radix(h, 16).ok())
        .filter(|_| s[at..at + 4].iter().all(u8::is_ascii_hexdigit))
        .ok_or_else(|| "a \\u escape without four hex digits".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Decodes `json` in place and returns the text, as a `String`.
    fn decoded(json: &str) -> Result<String, String> {
        let mut buf = json.as_bytes().to_vec();
        let n = decode_in_place(&mut buf)?;
        buf.truncate(n);
        Ok(String::from_utf8(buf).expect("decoded text is UTF-8"))
    }

    #[test]
    fn every_escape_decodes_as_serde_json_decodes_it() {
        for json in [
            r#""""#,
            r#""plain text""#,
            r#""\"\\\/\b\f\n\r\t""#,
            r#""caf\u00e9 \u20ac \ud83d\ude00 end""#,
            r#""\u0000\u001f\uffff""#,
            "\"raw UTF-8: é € 😀\"",
            r#""\\u0041 is not an escape""#,
            r#""ends with an escape\n""#,
        ] {
            let want: String = serde_json::from_str(json).unwrap();
            assert_eq!(decoded(json).unwrap(), want, "{json}");
        }
    }

    #[test]
    fn a_lone_surrogate_or_a_broken_escape_is_refused() {
        for json in [
            r#""\ud83d""#,
            r#""\ud83d tail""#,
            r#""\ude00""#,
            r#""\ud83d\u0041""#,
            r#""\u12""#,
            r#""\u12g4""#,
            r#""\u+123""#,
            r#""\x""#,
            r#""\""#,
            r#"unquoted"#,
            r#"""#,
            "",
        ] {
            assert!(decoded(json).is_err(), "{json:?} was accepted");
            assert!(
                serde_json::from_str::<String>(json).is_err(),
                "serde_json accepts {json:?}"
            );
        }
    }

    proptest! {
        /// Whatever the text, its JSON form decodes back to it, with every character escaped
        /// or none.
        #[test]
        fn any_text_round_trips(text in any::<String>()) {
            let json = serde_json::to_string(&text).unwrap();
            prop_assert_eq!(decoded(&json).unwrap(), text.clone());
            let escaped: String = text
                .encode_utf16()
                .map(|u| format!("\\u{u:04x}"))
                .collect();
            prop_assert_eq!(decoded(&format!("\"{escaped}\"")).unwrap(), text);
        }
    }
}

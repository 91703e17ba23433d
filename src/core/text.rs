//! How things are said to people: a count with its noun, and names and lines that cannot
//! drive a terminal.
//!
//! Every message a person reads (the CLI, the journal's details, the API's messages) counts
//! things through [`count`], so nothing says "1 files". Every name and every line of a file shown
//! to a person on a terminal goes through [`name`] or [`line`]: a file named `ESC]0;…BEL` or
//! `\r ESC[2K` would otherwise retitle the terminal or erase and forge the rows a reviewer reads.
//! JSON output keeps names exact; only what is printed for people is escaped.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Returns whether a character must not reach a terminal raw: C0 and C1 controls, DEL, and the
/// bidirectional overrides and isolates that reorder what is shown (U+202A–U+202E,
/// U+2066–U+2069), as well as the line and paragraph separators.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{2028}' | '\u{2029}')
}

/// Writes the escape of one unsafe character: C escapes where C has one, else `\ooo` (octal, as
/// git quotes names: one per byte of its UTF-8, so that `\ooo` always stands for one byte) below
/// U+0100 and `\u{…}` above.
fn escape_char(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\u{b}' => out.push_str("\\v"),
        c if (c as u32) < 0x100 => {
            for b in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(out, "\\{b:03o}");
            }
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// Returns a file name or path as it may be shown on a terminal: unchanged when it holds no
/// unsafe character, else in double quotes with every unsafe character, `"` and `\` escaped
/// (git's `core.quotePath` style: `"a\033]0;x\a.txt"`).
pub fn name(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    out.push('"');
    quote_into(&mut out, s);
    out.push('"');
    Cow::Owned(out)
}

/// Writes `s` as [`name`] does inside its quotes.
fn quote_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if unsafe_char(c) => escape_char(out, c),
            c => out.push(c),
        }
    }
}

/// Returns a name given as bytes as it may be shown: [`name`] when it is UTF-8, else in double
/// quotes with each byte that is not part of a character as `\ooo` (octal, as git quotes names:
/// `"caf\351.txt"`), so a name no wardfs path can hold is still named exactly.
pub fn name_bytes(b: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(b) {
        return name(s);
    }
    let mut out = String::with_capacity(b.len() + 8);
    out.push('"');
    for chunk in b.utf8_chunks() {
        quote_into(&mut out, chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(out, "\\{byte:03o}");
        }
    }
    out.push('"');
    Cow::Owned(out)
}

/// Returns the longest start of `s` of at most `max` bytes that ends between characters: how a
/// long input is shown in a message.
pub fn head(s: &str, max: usize) -> &str {
    let end = (0..=max.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0);
    &s[..end]
}

/// Returns the longest end of `s` of at most `max` bytes that starts between characters: the
/// last of a long output kept.
pub fn tail(s: &str, max: usize) -> &str {
    let start = (s.len().saturating_sub(max)..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    &s[start..]
}

/// Returns a line of a file (a diff line, a grep match) as it may be shown on a terminal: tabs
/// kept, every other unsafe character escaped, no quotes added.
pub fn line(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| c != '\t' && unsafe_char(c)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\t' => out.push('\t'),
            c if unsafe_char(c) => escape_char(&mut out, c),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Returns `n` with `noun` in the right number: `1 file`, `2 files`, `1 entry`, `3 entries`.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        return format!("1 {noun}");
    }
    let plural = match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{stem}ies"),
        _ if noun.ends_with('s') || noun.ends_with("sh") || noun.ends_with("ch") => {
            format!("{noun}es")
        }
        _ => format!("{noun}s"),
    };
    format!("{n} {plural}")
}

#[cfg(test)]
mod tests {
    use super::{count, head, line, name, name_bytes, tail};

    #[test]
    fn heads_and_tails_keep_whole_characters() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 3), "ab");
        assert_eq!(tail("aé", 1), "", "half of é is not kept");
        assert_eq!(tail("aéb", 2), "b");
        assert_eq!(tail("aéb", 3), "éb");
        assert_eq!(head("éa", 1), "");
        assert_eq!(head("éa", 3), "éa");
    }

    #[test]
    fn a_name_that_is_not_utf8_is_quoted_byte_for_byte_and_its_characters_escaped() {
        assert_eq!(name_bytes(b"plain.txt"), "plain.txt");
        assert_eq!(name_bytes(b"caf\xe9.txt"), "\"caf\\351.txt\"");
        assert_eq!(
            name_bytes(b"a\"b\\c\x1b\xff\xc3\xa9"),
            "\"a\\\"b\\\\c\\033\\377\u{e9}\""
        );
        // Whatever the bytes: nothing a terminal acts on, and nothing but what was given.
        let all: Vec<u8> = (0..=255).collect();
        let shown = name_bytes(&all);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
    }

    #[test]
    fn plain_names_pass_unchanged_and_unsafe_ones_are_quoted_and_escaped() {
        assert_eq!(name("src/lib.rs"), "src/lib.rs");
        assert_eq!(name("ünïcödé 名前.txt"), "ünïcödé 名前.txt");
        assert_eq!(name("a\x1b]0;pwned\x07.txt"), "\"a\\033]0;pwned\\a.txt\"");
        assert_eq!(name("x\r\x1b[2Kforged"), "\"x\\r\\033[2Kforged\"");
        assert_eq!(name("two\nlines"), "\"two\\nlines\"");
        assert_eq!(name("q\"\\\x7f"), "\"q\\\"\\\\\\177\"");
        assert_eq!(name("\u{9b}31m"), "\"\\302\\23331m\"");
        assert_eq!(name("abc\u{202E}gpj.exe"), "\"abc\\u{202e}gpj.exe\"");
        // Nothing unsafe survives, whatever the input.
        for c in (0u32..0x110000).filter_map(char::from_u32) {
            let shown = name(&c.to_string()).into_owned();
            assert!(!shown.chars().any(super::unsafe_char), "{c:?} -> {shown:?}");
        }
    }

    #[test]
    fn lines_keep_tabs_and_escape_the_rest_without_quotes() {
        assert_eq!(line("\tlet x = 1;"), "\tlet x = 1;");
        assert_eq!(line("ok\r\x1b[2K+forged"), "ok\\r\\033[2K+forged");
        assert_eq!(line("\"quoted\" \\ stays"), "\"quoted\" \\ stays");
    }

    #[test]
    fn one_is_singular_and_everything_else_plural() {
        assert_eq!(count(1u64, "file"), "1 file");
        assert_eq!(count(0u64, "file"), "0 files");
        assert_eq!(count(2u32, "file"), "2 files");
        assert_eq!(count(1u64, "entry"), "1 entry");
        assert_eq!(count(3u64, "entry"), "3 entries");
        assert_eq!(count(2u64, "day"), "2 days");
        assert_eq!(count(2u64, "conflict"), "2 conflicts");
        assert_eq!(count(2u64, "match"), "2 matches");
    }
}

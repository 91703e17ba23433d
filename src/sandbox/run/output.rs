//! A run's output on its way out: the secrets it passed in masked ([`Masker`]), cut into whole
//! characters ([`Utf8Carry`]), its last bytes kept and all counted ([`Tail`]).

use std::collections::VecDeque;

/// What a secret's value becomes in a run's output.
pub(super) const MASK: &[u8] = b"***";
/// Values shorter than this are not masked: masking `a` would mask every `a` printed.
pub(super) const MASK_MIN: usize = 6;

/// Replaces the values of the variables a run passed in with [`MASK`] in what the command
/// prints, as CI services mask their secrets in logs. A value split across two chunks is still
/// masked: the end of a chunk that could begin a value waits for the next chunk (or the end).
/// Only the exact bytes are masked: a command that encodes its secret (base64, reversed) prints
/// it; a run is given only the variables its sandbox's `run_env` lists.
pub(super) struct Masker {
    secrets: Vec<Vec<u8>>,
    held: Vec<u8>,
}

impl Masker {
    pub(super) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Masker {
        let mut secrets: Vec<Vec<u8>> = values
            .into_iter()
            .filter(|v| v.len() >= MASK_MIN)
            .map(|v| v.as_bytes().to_vec())
            .collect();
        // The longest first: a value that contains another is masked whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Masker {
            secrets,
            held: Vec::new(),
        }
    }

    /// Returns `data` masked, less what must wait for the next chunk.
    pub(super) fn feed(&mut self, data: &[u8]) -> Vec<u8> {
        if self.secrets.is_empty() {
            return data.to_vec();
        }
        self.held.extend_from_slice(data);
        let buf = std::mem::take(&mut self.held);
        let (mut out, rest) = self.mask(&buf);
        let hold = self.partial_suffix(rest);
        out.extend_from_slice(&rest[..rest.len() - hold]);
        self.held = rest[rest.len() - hold..].to_vec();
        out
    }

    /// Returns what was held back, at the end of the stream.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }

    /// Masks every whole value in `buf`; returns the masked part and the unmasked rest after
    /// the last value found (which may still begin one).
    fn mask<'b>(&self, buf: &'b [u8]) -> (Vec<u8>, &'b [u8]) {
        let mut out = Vec::with_capacity(buf.len());
        let mut i = 0;
        let mut done = 0;
        while i < buf.len() {
            match self.secrets.iter().find(|s| buf[i..].starts_with(s)) {
                Some(s) => {
                    out.extend_from_slice(&buf[done..i]);
                    out.extend_from_slice(MASK);
                    i += s.len();
                    done = i;
                }
                None => i += 1,
            }
        }
        (out, &buf[done..])
    }

    /// The length of the longest end of `buf` that begins some value (shorter than it).
    fn partial_suffix(&self, buf: &[u8]) -> usize {
        let longest = self.secrets.first().map_or(0, Vec::len);
        (1..longest.min(buf.len() + 1))
            .rev()
            .find(|&n| {
                let end = &buf[buf.len() - n..];
                self.secrets
                    .iter()
                    .any(|s| s.len() > n && s.starts_with(end))
            })
            .unwrap_or(0)
    }
}

/// One stream of a run's output: masked, kept, made text.
pub(super) struct Output {
    mask: Masker,
    carry: Utf8Carry,
    pub(super) tail: Tail,
}

impl Output {
    pub(super) fn new(keep: usize, mask: Masker) -> Output {
        Output {
            mask,
            carry: Utf8Carry::default(),
            tail: Tail::new(keep),
        }
    }

    /// Takes a chunk the command printed; returns the text to pass on.
    pub(super) fn feed(&mut self, data: &[u8]) -> String {
        let data = self.mask.feed(data);
        self.tail.push(&data);
        self.carry.feed(&data)
    }

    /// Takes the end of the stream; returns what was held back.
    pub(super) fn finish(&mut self) -> String {
        let data = self.mask.finish();
        self.tail.push(&data);
        self.carry.feed(&data)
    }
}

/// The last bytes of a stream and how many there were.
pub(super) struct Tail {
    keep: usize,
    bytes: VecDeque<u8>,
    pub(super) total: u64,
}

impl Tail {
    pub(super) fn new(keep: usize) -> Tail {
        Tail {
            keep,
            bytes: VecDeque::new(),
            total: 0,
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let data = &data[data.len().saturating_sub(self.keep)..];
        let over = (self.bytes.len() + data.len()).saturating_sub(self.keep);
        self.bytes.drain(..over);
        self.bytes.extend(data);
    }

    pub(super) fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        String::from_utf8_lossy(&[a, b].concat()).into_owned()
    }
}

/// Turns chunks into text without splitting a character across two chunks.
#[derive(Default)]
pub(super) struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    pub(super) fn feed(&mut self, data: &[u8]) -> String {
        self.pending.extend_from_slice(data);
        let keep = match std::str::from_utf8(&self.pending) {
            Ok(_) => 0,
            // An incomplete character at the end waits for the next chunk.
            Err(e) if e.error_len().is_none() => self.pending.len() - e.valid_up_to(),
            Err(_) => 0,
        };
        let rest = self.pending.split_off(self.pending.len() - keep);
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(m: &mut Masker, chunks: &[&str]) -> String {
        let mut out = Vec::new();
        for c in chunks {
            out.extend(m.feed(c.as_bytes()));
        }
        out.extend(m.finish());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn secrets_are_masked_even_split_across_chunks() {
        let mut m = Masker::new(["s3cr3t-value", "abc"]);
        assert_eq!(
            through(&mut m, &["key=s3cr3t-value\n"]),
            "key=***\n",
            "whole"
        );
        assert_eq!(
            through(&mut m, &["key=s3c", "r3t-va", "lue and s3cr3t-valu"]),
            "key=*** and s3cr3t-valu",
            "split, and a prefix left at the end"
        );
        assert_eq!(
            through(&mut m, &["abc s3cr3t-values"]),
            "abc ***s",
            "a short value is not masked"
        );
        let mut none = Masker::new(Vec::<&str>::new());
        assert_eq!(through(&mut none, &["s3cr3t-value"]), "s3cr3t-value");
    }

    #[test]
    fn a_value_within_another_is_masked_whole() {
        let mut m = Masker::new(["secret1", "secret1-and-more"]);
        assert_eq!(through(&mut m, &["secret1-and-more secret1"]), "*** ***");
    }

    #[test]
    fn tails_keep_the_last_bytes_and_count_all() {
        let mut t = Tail::new(4);
        t.push(b"abc");
        t.push(b"defgh");
        t.push(b"i");
        assert_eq!(t.text(), "fghi");
        assert_eq!(t.total, 9);
        t.push(b"0123456789");
        assert_eq!(t.text(), "6789");
    }

    #[test]
    fn characters_split_across_chunks_are_joined() {
        let mut c = Utf8Carry::default();
        let e = "é".as_bytes();
        assert_eq!(c.feed(&[b'a', e[0]]), "a");
        assert_eq!(c.feed(&[e[1], b'b']), "éb");
        assert_eq!(c.feed(&[0xff, b'c']), "\u{fffd}c");
    }
}

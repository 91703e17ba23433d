//! Config parsing from a TOML string: any text gives settings or a `ConfigError`, never a panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use wardfs::config::Settings;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let base = std::env::temp_dir().join("wardfs-fuzz-config");
    if let Err(e) = Settings::from_str(text, "fuzz.toml", Path::new(&base), None) {
        // Every rejection says something.
        assert!(!e.to_string().is_empty());
    }
});

//! Glob and grep pattern parsing, through the core's own entry points (`Zones::glob`,
//! `Zones::grep`) over a small zone: any pattern gives results or an `INVALID_ARGUMENT`-style
//! error, never a panic, and every result stays inside the zone.
#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use wardfs::config::Settings;
use wardfs::core::{system_clock, GlobOptions, GrepOptions, Zones};
use wardfs::state::Db;

fn zones() -> &'static Zones {
    static ZONES: OnceLock<(tempfile::TempDir, Zones)> = OnceLock::new();
    &ZONES
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let ws = dir.path().join("root/workspace/src");
            std::fs::create_dir_all(&ws).unwrap();
            std::fs::write(
                ws.join("main.rs"),
                "fn main() {\n    println!(\"hi\");\n}\n",
            )
            .unwrap();
            std::fs::write(ws.join("a b.txt"), "alpha\nbeta\n[gamma]\n").unwrap();
            std::fs::create_dir_all(dir.path().join("root/cache")).unwrap();
            let settings =
                Settings::from_str("[zones]\nroot = \"root\"\n", "fuzz", dir.path(), None).unwrap();
            let db = Arc::new(Db::open_in_memory().unwrap());
            let zones = Zones::open(&settings, db, system_clock()).unwrap();
            (dir, zones)
        })
        .1
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // The first line is the pattern, an optional second line a glob filter for grep.
    let mut lines = text.splitn(2, '\n');
    let pattern = lines.next().unwrap_or("").to_string();
    let filter = lines.next().map(str::to_string);
    let zones = zones();
    let glob = GlobOptions {
        pattern: pattern.clone(),
        kind: Some("any".into()),
        ..Default::default()
    };
    if let Ok(found) = zones.glob(&glob) {
        for m in found.matches {
            assert!(m.path.starts_with("/workspace/"), "{}", m.path);
        }
    }
    let mut grep = GrepOptions {
        pattern,
        ..Default::default()
    };
    grep.glob = filter.into_iter().collect();
    let _ = zones.grep(&grep);
});

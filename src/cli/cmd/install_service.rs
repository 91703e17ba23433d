//! `wardfs install-service`: put the systemd user unit in place.
//!
//! The unit is the repository's `systemd/wardfs.service` (embedded), with `ExecStart` naming the
//! absolute path of the running binary and the config it should serve. Writing is idempotent: an
//! identical unit is left untouched, a different one is replaced atomically. Nothing here talks to
//! systemd; the `systemctl --user` commands to run are printed instead.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The unit as kept in the repository.
pub const UNIT_TEMPLATE: &str = include_str!("../../../systemd/wardfs.service");

/// The unit's file name.
pub const UNIT_NAME: &str = "wardfs.service";

/// Install the systemd user unit (Type=notify) that runs `wardfs serve`
///
/// Writes wardfs.service to $XDG_CONFIG_HOME/systemd/user/ (default ~/.config/systemd/user/) with
/// the absolute path of this binary, and prints the `systemctl --user` commands that enable it.
/// With --config, the service serves that config file; otherwise the embedded default from ~.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Print the unit to stdout instead of writing it
    #[arg(long)]
    pub print: bool,
    /// Write the unit into this directory instead of the systemd user unit directory
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// A unit that cannot be built or written.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{what} {path:?}: {rule}")]
    BadPath {
        what: &'static str,
        path: PathBuf,
        rule: &'static str,
    },
    #[error("cannot find the running wardfs binary: {0}")]
    CurrentExe(std::io::Error),
    #[error("neither $XDG_CONFIG_HOME nor $HOME is set: pass --dir")]
    NoConfigDir,
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

pub fn run(config: Option<&Path>, json: bool, args: &Args) -> ExitCode {
    match install(config, json, args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "code": null, "message": e.to_string() })
                );
            }
            eprintln!("wardfs: {e}");
            ExitCode::from(2)
        }
    }
}

fn install(config: Option<&Path>, json: bool, args: &Args) -> Result<(), InstallError> {
    let exe = std::env::current_exe().map_err(InstallError::CurrentExe)?;
    let config = config
        .map(Path::to_path_buf)
        .or_else(|| {
            std::env::var_os(crate::config::CONFIG_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .map(|c| std::path::absolute(&c).unwrap_or(c));
    let unit = render(&exe, config.as_deref())?;
    if args.print {
        print!("{unit}");
        return Ok(());
    }
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => dirs::config_dir()
            .ok_or(InstallError::NoConfigDir)?
            .join("systemd")
            .join("user"),
    };
    let path = dir.join(UNIT_NAME);
    let changed = write_if_changed(&path, &unit)?;
    let commands = [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now wardfs",
        "journalctl --user -u wardfs -f",
    ];
    if json {
        println!(
            "{}",
            serde_json::json!({
                "path": path.display().to_string(),
                "changed": changed,
                "exec": exe.display().to_string(),
                "config": config.as_ref().map(|c| c.display().to_string()),
                "commands": commands,
            })
        );
    } else {
        println!(
            "{} {}",
            if changed { "wrote" } else { "unchanged:" },
            path.display()
        );
        println!("enable and start it with:");
        for c in &commands[..2] {
            println!("  {c}");
        }
        println!("follow its log with:\n  {}", commands[2]);
    }
    Ok(())
}

/// Returns the unit with `ExecStart` running `exe serve [--config CONFIG]`.
pub fn render(exe: &Path, config: Option<&Path>) -> Result<String, InstallError> {
    let bin = quote("the wardfs binary", exe)?;
    let with_config = |cmd: &str| -> Result<String, InstallError> {
        let mut line = format!("{bin} {cmd}");
        if let Some(c) = config {
            line.push_str(&format!(" --config {}", quote("the config file", c)?));
        }
        Ok(line)
    };
    let exec = format!("ExecStart={}", with_config("serve")?);
    let stop_post = format!("ExecStopPost=-{}", with_config("unmount")?);
    let mut out = String::with_capacity(UNIT_TEMPLATE.len() + 64);
    for line in UNIT_TEMPLATE.lines() {
        if line.starts_with("ExecStart=") {
            out.push_str(&exec);
        } else if line.starts_with("ExecStopPost=") {
            out.push_str(&stop_post);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    Ok(out)
}

/// Quotes a path for a systemd command line: `%` specifiers, `$` variables and backslashes are
/// escaped, the whole is in double quotes.
fn quote(what: &'static str, p: &Path) -> Result<String, InstallError> {
    let bad = |rule| InstallError::BadPath {
        what,
        path: p.to_path_buf(),
        rule,
    };
    let s = p.to_str().ok_or_else(|| bad("must be valid UTF-8"))?;
    if !p.is_absolute() {
        return Err(bad("must be an absolute path"));
    }
    if s.chars().any(|c| c.is_control()) {
        return Err(bad("must not contain control characters (newlines, tabs)"));
    }
    let mut q = String::from("\"");
    for c in s.chars() {
        match c {
            '%' => q.push_str("%%"),
            '$' => q.push_str("$$"),
            '\\' => q.push_str("\\\\"),
            '"' => q.push_str("\\\""),
            c => q.push(c),
        }
    }
    q.push('"');
    Ok(q)
}

/// Writes `text` to `path` unless it already holds exactly that; returns whether it wrote.
fn write_if_changed(path: &Path, text: &str) -> Result<bool, InstallError> {
    let werr = |source| InstallError::Write {
        path: path.to_path_buf(),
        source,
    };
    if std::fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(werr)?;
    let tmp = dir.join(format!(".{UNIT_NAME}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(werr)?;
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        werr(e)
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_start_names_the_binary_and_config_quoted() {
        let unit = render(
            Path::new("/opt/my tools/wardfs"),
            Some(Path::new("/home/me/100%/c.toml")),
        )
        .unwrap();
        assert!(unit.contains(
            "\nExecStart=\"/opt/my tools/wardfs\" serve --config \"/home/me/100%%/c.toml\"\n"
        ));
        assert_eq!(unit.matches("ExecStart=").count(), 1, "{unit}");
        // After every exit, crashes included, the same binary detaches a dead daemon's mount.
        assert!(unit.contains(
            "\nExecStopPost=-\"/opt/my tools/wardfs\" unmount --config \"/home/me/100%%/c.toml\"\n"
        ), "{unit}");
        assert!(unit.contains("Type=notify") && unit.contains("LimitNOFILE="));
        let e = render(Path::new("wardfs"), None).unwrap_err().to_string();
        assert!(e.contains("absolute"), "{e}");
    }
}

//! `wardfs git watch` and `wardfs git fsmonitor-hook`: git's file-system monitor from the
//! journal, for a person's own checkout inside a zone (`crate::git::fsmonitor` answers).
//!
//! `watch PATH` writes `core.fsmonitor` (this binary by its absolute path, with the daemon's
//! socket, each quoted for the shell: git runs the value through `sh`), `core.fsmonitorHookVersion
//! = 2` and `core.untrackedCache = true` into the checkout's own repository config, with
//! libgit2 (no git command runs in the checkout). `watch --zone ZONE` writes nothing into
//! checkouts: it writes those settings into a file of the person's own
//! (`$XDG_CONFIG_HOME/wardfs/git-fsmonitor-ZONE.gitconfig`) and includes it from their global
//! git config for every git directory under the zone (`includeIf "gitdir:…"`, through the mount
//! and in the zone's directory), a place no agent, sandbox or pull writes.
//!
//! `fsmonitor-hook VERSION TOKEN` is what git runs, in the checkout's work tree: it asks the
//! daemon and prints git's answer (the new token, NUL, then each changed path and a NUL, or `/`
//! for everything). It never fails: when the daemon cannot be asked (not running, no answer
//! within [`HOOK_TIMEOUT`]) it answers everything, quietly when the daemon is not running, so
//! `git status` stays right.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::cli::{ClientError, Ctx, Outcome};
use crate::client::encode;
use crate::client::paths;
use crate::core::text;
use crate::core::ResolveResult;
use crate::git::fsmonitor::FsmonitorAnswer;

/// How long the hook waits for the daemon's answer before it answers everything.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// How every `core.fsmonitor` value `watch` writes ends; a value ending so is wardfs's.
const HOOK_TAIL: &str = " git fsmonitor-hook";

/// The token the hook answers with when the daemon cannot be asked: not a token, so the next
/// answer is everything too.
const NO_TOKEN: &str = "wardfs:unavailable";

/// Runs `wardfs git fsmonitor-hook VERSION TOKEN` (see the module doc); `--json` prints the
/// daemon's answer as it came (with the reason for "everything") instead.
pub async fn hook(ctx: &Ctx, version: &str, token: &str) -> Result<Outcome, ClientError> {
    let out = if version != "2" {
        // Protocol 1 (a time for a token) is not answered from the journal: everything.
        b"/".to_vec()
    } else {
        match ask(ctx, token).await {
            Ok(a) if ctx.json => serde_json::to_vec(&a).unwrap_or_default(),
            Ok(a) => for_git(&a),
            Err(e) => {
                if !matches!(e, ClientError::NotRunning { .. }) {
                    eprintln!(
                        "wardfs git fsmonitor-hook: {}; git looks at every file",
                        text::line(&e.to_string())
                    );
                }
                format!("{NO_TOKEN}\0/\0").into_bytes()
            }
        }
    };
    let mut stdout = std::io::stdout().lock();
    // git reads the whole output; a write error (git gone) leaves nothing to tell.
    let _ = stdout.write_all(&out).and_then(|_| stdout.flush());
    Ok(Outcome::Ok)
}

/// Asks the daemon about the checkout git runs the hook in (its work tree is the current
/// directory, as the kernel has it).
async fn ask(ctx: &Ctx, token: &str) -> Result<FsmonitorAnswer, ClientError> {
    let dir = std::env::current_dir()
        .map_err(|e| ClientError::Local(format!("the current directory: {e}")))?;
    let dir = dir.to_str().ok_or_else(|| {
        ClientError::Local(format!(
            "the work tree {} is not UTF-8",
            text::name(&dir.to_string_lossy())
        ))
    })?;
    let route = format!(
        "/v1/git/fsmonitor?dir={}&token={}",
        encode(dir),
        encode(token)
    );
    tokio::time::timeout(HOOK_TIMEOUT, ctx.client.get(&route))
        .await
        .map_err(|_| {
            ClientError::Local(format!(
                "the daemon did not answer within {} s",
                HOOK_TIMEOUT.as_secs()
            ))
        })?
}

/// git's form of an answer: the token, NUL, then `/` or each path, each followed by a NUL.
fn for_git(a: &FsmonitorAnswer) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(a.token.len() + 2 + a.paths.iter().map(|p| p.len() + 1).sum::<usize>());
    out.extend_from_slice(a.token.as_bytes());
    out.push(0);
    if a.everything {
        out.extend_from_slice(b"/\0");
        return out;
    }
    for p in a.paths.iter().filter(|p| !p.is_empty()) {
        out.extend_from_slice(p.as_bytes());
        out.push(0);
    }
    out
}

/// Runs `wardfs git watch [PATH] [--zone ZONE] [--off]`.
pub async fn watch(
    ctx: &Ctx,
    path: Option<&str>,
    zone: Option<&str>,
    off: bool,
) -> Result<Outcome, ClientError> {
    match zone {
        Some(z) => watch_zone(ctx, z, off).await,
        None => watch_checkout(ctx, path.unwrap_or("."), off).await,
    }
}

/// The `core.fsmonitor` value: this binary and the daemon's socket, each an absolute path
/// quoted for the shell, neither inside a zone (an agent could replace what git then runs).
async fn hook_command(ctx: &Ctx) -> Result<String, ClientError> {
    let exe = std::env::current_exe()
        .map_err(|e| ClientError::Local(format!("cannot tell where this wardfs binary is: {e}")))?;
    let socket = absolute(ctx.client.socket());
    for (what, p) in [
        ("the wardfs binary", &exe),
        ("the daemon's socket", &socket),
    ] {
        if let Ok(v) = ctx.vpath(&p.to_string_lossy()).await {
            return Err(refused(format!(
                "{what} {} lies in the zone {v}, where an agent could replace what git would \
                 run; install wardfs outside the zones (e.g. `cargo install --path .`)",
                text::name(&p.to_string_lossy())
            )));
        }
    }
    Ok(format!(
        "{} --socket {}{HOOK_TAIL}",
        shell_quote(&exe, "the wardfs binary")?,
        shell_quote(&socket, "the daemon's socket")?
    ))
}

/// `p` in single quotes for `sh`; refused when it holds a character that cannot go in them
/// plainly (a quote, a control character) or is not UTF-8.
fn shell_quote(p: &Path, what: &str) -> Result<String, ClientError> {
    let s = p
        .to_str()
        .filter(|s| !s.chars().any(|c| c == '\'' || c.is_control()));
    match s {
        Some(s) => Ok(format!("'{s}'")),
        None => Err(refused(format!(
            "{what}'s path {} holds a quote, a control character or bytes that are not UTF-8, \
             which git's config cannot hand to the shell safely; move it to a plain path",
            text::name(&p.to_string_lossy())
        ))),
    }
}

fn refused(message: String) -> ClientError {
    ClientError::Api {
        code: crate::core::ErrorCode::InvalidArgument,
        message,
        path: None,
    }
}

/// `p` made absolute from where the caller stands (`.` and `..` folded).
fn absolute(p: &Path) -> PathBuf {
    let full = paths::cwd().join(p);
    let mut out = PathBuf::from("/");
    for c in full.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    out
}

/// The checkout holding `input` (a path as typed: through the mount, in a zone's directory, or
/// virtual): its work tree on this machine and as a virtual path.
async fn find_checkout(
    ctx: &Ctx,
    input: &str,
) -> Result<(git2::Repository, PathBuf, String), ClientError> {
    let host = if paths::is_virtual(input) {
        let r: ResolveResult = ctx
            .client
            .post("/v1/fs/resolve", &json!({ "path": input }))
            .await?;
        PathBuf::from(r.real_path)
    } else {
        absolute(Path::new(input))
    };
    let at = ctx.vpath(&host.to_string_lossy()).await?;
    let repo = git2::Repository::discover(&host).map_err(|e| ClientError::Api {
        code: crate::core::ErrorCode::NotFound,
        message: format!(
            "{} ({at}) is in no git repository: {}",
            text::name(input),
            e.message()
        ),
        path: Some(at.clone()),
    })?;
    let tree = repo.workdir().map(Path::to_path_buf).ok_or_else(|| {
        refused(format!(
            "the repository of {at} is bare: it has no work tree"
        ))
    })?;
    let holds_at = |t: &String| t != "/" && (at == *t || at.starts_with(&format!("{t}/")));
    let tree_at = ctx
        .vpath(&tree.to_string_lossy())
        .await
        .ok()
        .filter(holds_at)
        .ok_or_else(|| {
            refused(format!(
                "the repository of {at} has its work tree at {}, which is not inside a zone",
                text::name(&tree.to_string_lossy())
            ))
        })?;
    Ok((repo, tree, tree_at))
}

/// `watch PATH` and `watch PATH --off`: the checkout's own repository config.
async fn watch_checkout(ctx: &Ctx, input: &str, off: bool) -> Result<Outcome, ClientError> {
    let (repo, tree, at) = find_checkout(ctx, input).await?;
    let command = if off {
        None
    } else {
        Some(hook_command(ctx).await?)
    };
    let git = |e: git2::Error| {
        ClientError::Local(format!("the repository config of {at}: {}", e.message()))
    };
    let mut config = repo
        .config()
        .and_then(|c| c.open_level(git2::ConfigLevel::Local))
        .map_err(git)?;
    let before = config.get_string("core.fsmonitor").ok();
    let ours = before.as_deref().is_some_and(|b| b.ends_with(HOOK_TAIL));
    match &command {
        Some(cmd) => {
            config.set_str("core.fsmonitor", cmd).map_err(git)?;
            config
                .set_i32("core.fsmonitorHookVersion", 2)
                .map_err(git)?;
            config.set_bool("core.untrackedCache", true).map_err(git)?;
        }
        None if ours => {
            config.remove("core.fsmonitor").map_err(git)?;
            let _ = config.remove("core.fsmonitorHookVersion");
        }
        None => {}
    }
    let replaced = before.as_ref().filter(|_| !ours);
    if ctx.json {
        println!(
            "{}",
            json!({
                "repo": at, "work_tree": tree.to_string_lossy(), "on": command.is_some(),
                "fsmonitor": command, "left": if off { replaced } else { None },
                "replaced": if off { None } else { replaced },
            })
        );
        return Ok(Outcome::Ok);
    }
    let tree_s = tree.to_string_lossy();
    let shown = text::name(&tree_s);
    match (&command, replaced) {
        (Some(_), prev) => {
            if let Some(prev) = prev {
                println!(
                    "replaced core.fsmonitor = {} (not wardfs's)",
                    text::name(prev)
                );
            }
            println!(
                "git in {at} ({shown}) asks wardfs what changed: core.fsmonitor and \
                 core.untrackedCache = true are set in its config.\nThe next `git status` looks \
                 at every file once; later ones only at what the journal names."
            );
        }
        (None, Some(prev)) => println!(
            "core.fsmonitor of {at} is not wardfs's ({}): left as it is",
            text::name(prev)
        ),
        (None, None) if ours => {
            println!("git in {at} ({shown}) no longer asks wardfs (core.untrackedCache is left on)")
        }
        (None, None) => println!("git in {at} did not ask wardfs: nothing to turn off"),
    }
    Ok(Outcome::Ok)
}

/// The `gitdir:` patterns of every git directory under `zone`: through each form of the
/// mount, and in each form of the zone's directory.
async fn zone_patterns(ctx: &Ctx, zone: &str) -> Result<Vec<String>, ClientError> {
    let layout = ctx.layout().await?;
    let dirs: Vec<&PathBuf> = layout
        .zones
        .iter()
        .filter(|(n, _)| n == zone)
        .filter_map(|(_, d)| d.as_ref())
        .collect();
    if dirs.is_empty() {
        let names: Vec<&str> = layout.zones.iter().map(|(n, _)| n.as_str()).collect();
        return Err(refused(format!(
            "--zone {}: not a zone served from a directory here (zones: {})",
            text::name(zone),
            names.join(", ")
        )));
    }
    let mut out: Vec<String> = Vec::new();
    let places = layout
        .mounts
        .iter()
        .map(|m| m.join(zone))
        .chain(dirs.into_iter().cloned());
    for p in places {
        let s = p
            .to_str()
            .filter(|s| !s.chars().any(|c| c.is_control() || "'*?[\\".contains(c)));
        let Some(s) = s else {
            return Err(refused(format!(
                "{} holds a character a gitdir pattern cannot take plainly (*, ?, [, \\, a \
                 quote, a control character); use `wardfs git watch PATH` in each checkout",
                text::name(&p.to_string_lossy())
            )));
        };
        let pattern = format!("gitdir:{}/", s.trim_end_matches('/'));
        if !out.contains(&pattern) {
            out.push(pattern);
        }
    }
    Ok(out)
}

/// The file `watch --zone` writes for `zone` and includes from the global git config.
fn include_file(zone: &str) -> Result<PathBuf, ClientError> {
    let base = dirs::config_dir().ok_or_else(|| {
        ClientError::Local("no config directory ($XDG_CONFIG_HOME, $HOME)".into())
    })?;
    Ok(base
        .join("wardfs")
        .join(format!("git-fsmonitor-{zone}.gitconfig")))
}

/// Runs `git -c core.fsmonitor=false config ARGS` in `/` (never in a checkout); `ok_codes`:
/// exit codes that are not failures (5: nothing to unset).
fn git_config(args: &[&str], ok_codes: &[i32]) -> Result<(), ClientError> {
    let out = std::process::Command::new("git")
        .current_dir("/")
        .args(["-c", "core.fsmonitor=false", "config"])
        .args(args)
        .output()
        .map_err(|e| ClientError::Local(format!("cannot run git config: {e}")))?;
    let code = out.status.code().unwrap_or(-1);
    if out.status.success() || ok_codes.contains(&code) {
        return Ok(());
    }
    Err(ClientError::Local(format!(
        "git config {} failed: {}",
        args.join(" "),
        text::line(String::from_utf8_lossy(&out.stderr).trim())
    )))
}

/// `watch --zone ZONE` and `watch --zone ZONE --off`: the global git config includes (or no
/// longer includes) a file of wardfs's settings for every git directory under the zone.
async fn watch_zone(ctx: &Ctx, zone: &str, off: bool) -> Result<Outcome, ClientError> {
    let patterns = zone_patterns(ctx, zone).await?;
    let file = include_file(zone)?;
    let file_s = file.to_string_lossy().to_string();
    if off {
        for p in &patterns {
            git_config(
                &["--global", "--unset-all", &format!("includeIf.{p}.path")],
                &[5],
            )?;
        }
        let _ = std::fs::remove_file(&file);
    } else {
        let command = hook_command(ctx).await?;
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                ClientError::Local(format!("cannot make {}: {e}", parent.display()))
            })?;
        }
        for (key, value) in [
            ("core.fsmonitor", command.as_str()),
            ("core.fsmonitorHookVersion", "2"),
            ("core.untrackedCache", "true"),
        ] {
            git_config(&["--file", &file_s, key, value], &[])?;
        }
        for p in &patterns {
            git_config(&["--global", &format!("includeIf.{p}.path"), &file_s], &[])?;
        }
    }
    if ctx.json {
        println!(
            "{}",
            json!({ "zone": zone, "on": !off, "include": file_s, "patterns": patterns })
        );
        return Ok(Outcome::Ok);
    }
    let verb = if off {
        "no longer includes"
    } else {
        "includes"
    };
    println!(
        "your global git config {verb} {} for every checkout in /{zone}:",
        text::name(&file_s)
    );
    for p in &patterns {
        println!("  includeIf \"{}\"", text::name(p));
    }
    Ok(Outcome::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_take_gits_form() {
        let a = FsmonitorAnswer {
            token: "wardfs:ab:workspace:7".into(),
            everything: false,
            reason: None,
            paths: vec!["a b".into(), "src/lib.rs".into()],
        };
        assert_eq!(for_git(&a), b"wardfs:ab:workspace:7\0a b\0src/lib.rs\0");
        let none = FsmonitorAnswer {
            paths: vec![],
            ..a.clone()
        };
        assert_eq!(for_git(&none), b"wardfs:ab:workspace:7\0");
        let all = FsmonitorAnswer {
            everything: true,
            ..a
        };
        assert_eq!(for_git(&all), b"wardfs:ab:workspace:7\0/\0");
    }

    #[test]
    fn only_plain_paths_are_quoted_for_the_shell() {
        assert_eq!(
            shell_quote(Path::new("/usr/bin/wardfs"), "x").unwrap(),
            "'/usr/bin/wardfs'"
        );
        assert_eq!(
            shell_quote(Path::new("/a b/$(x)"), "x").unwrap(),
            "'/a b/$(x)'"
        );
        for bad in ["/it's/wardfs", "/a\nb", "/a\x1b]0;x\x07"] {
            assert!(shell_quote(Path::new(bad), "x").is_err(), "{bad:?}");
        }
    }
}

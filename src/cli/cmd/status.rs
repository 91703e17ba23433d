//! `wardfs status`: what the daemon serves, where to open an editor, and how it is doing.

use crate::cli::output::print_json;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::text;
use crate::proto::{EditorDir, Status};

/// Show the daemon's zones, socket, mount, the directory to open in an editor, and journal
#[derive(Debug, clap::Args)]
pub struct Args {}

pub async fn run(ctx: &Ctx, _: &Args) -> Result<Outcome, ClientError> {
    let raw = ctx.client.get_raw("/v1/status").await?;
    if ctx.json {
        print_json(&raw);
        return Ok(Outcome::Ok);
    }
    let s: Status = crate::cli::output::decode(&raw)?;
    println!("wardfs {} (pid {}, up {}s)", s.version, s.pid, s.uptime_s);
    println!("config:  {}", s.config);
    println!("socket:  {}", s.socket);
    println!(
        "mount:   {} ({})",
        s.mount,
        if s.mounted { "mounted" } else { "not mounted" }
    );
    if let Some(e) = &s.editor {
        println!(
            "editor:  {} ({})",
            text::name(&e.dir),
            editor_note(s.mounted, e)
        );
    }
    println!("state:   {} ({} journal rows)", s.state_db, s.journal_rows);
    println!(
        "staged:  {} commit(s) awaiting review{}",
        s.staged_awaiting_review,
        if s.staged_awaiting_review > 0 {
            " (`wardfs staged list`)"
        } else {
            ""
        }
    );
    for z in &s.zones {
        match (&z.root, &z.reason) {
            (Some(root), _) => println!(
                "zone /{:<10} {}{}",
                z.name,
                root,
                if z.read_only { " (read-only)" } else { "" }
            ),
            (None, reason) => println!(
                "zone /{:<10} unavailable: {}",
                z.name,
                reason.as_deref().unwrap_or("")
            ),
        }
    }
    for sb in &s.sandboxes {
        match &sb.last_error {
            Some(e) => println!("sandbox {:<8} {} ({e})", sb.name, sb.status),
            None => println!("sandbox {:<8} {}", sb.name, sb.status),
        }
    }
    for p in &s.pending_write_backs {
        println!(
            "pending  {} ({} bytes, not yet in the sandbox after {} attempt(s): {})",
            p.path, p.bytes, p.attempts, p.last_error
        );
    }
    Ok(Outcome::Ok)
}

/// What the `editor:` line says of the directory to open in an editor.
fn editor_note(mounted: bool, e: &EditorDir) -> &'static str {
    match (mounted, e.every_change) {
        (true, true) => "open this in an editor: its watchers hear every change, whoever makes it",
        (false, _) => {
            "no mount: open the workspace's own directory, whose watchers hear every change"
        }
        (true, false) => {
            "served from a sandbox: its watchers hear the changes made through the mount only"
        }
    }
}

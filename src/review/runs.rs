//! The runs section of the timeline tab: the latest commands run in sandboxes (`wardfs run
//! --sandbox`), each with how it ended, the workspace files it brought back and the last of
//! its output, so a reviewer sees what a run printed beside what it changed.
//!
//! Read from `GET /v1/runs?output=true` (the last 16 KiB of each stream, the values of the
//! variables a run was given masked by the daemon). Everything shown is escaped
//! ([`escape`]); at most [`RUNS_SHOWN`] runs and [`PATHS_SHOWN`] paths each.

use std::fmt::Write as _;

use serde::Deserialize;

use super::render::escape;
use super::timeline::PATHS_SHOWN;
use super::Failure;
use crate::client::Client;
use crate::state::RunRow;

/// Runs the section lists.
pub const RUNS_SHOWN: usize = 10;

#[derive(Deserialize)]
struct RunList {
    runs: Vec<RunRow>,
}

/// Reads the latest runs, with their output.
pub async fn load(client: &Client) -> Result<Vec<RunRow>, Failure> {
    let route = format!("/v1/runs?limit={RUNS_SHOWN}&output=true");
    let list: RunList = client.get(&route).await.map_err(|e| Failure::daemon(&e))?;
    Ok(list.runs)
}

/// How a run ended, in a few words.
fn ended(r: &RunRow) -> String {
    match (r.exit_code, r.timed_out, r.cancelled) {
        (_, true, _) => "timed out".into(),
        (_, _, true) => "cancelled".into(),
        (Some(c), _, _) => format!("exit {c}"),
        (None, _, _) => "killed".into(),
    }
}

/// Draws the section.
pub fn section(out: &mut String, runs: &Result<Vec<RunRow>, Failure>) {
    out.push_str("<section class=\"runs\" id=\"runs\"><h2>Runs in sandboxes</h2>");
    match runs {
        Err(f) => {
            let _ = write!(
                out,
                "<p class=\"error\">Cannot list the runs: {}</p>",
                escape(&f.text)
            );
        }
        Ok(runs) if runs.is_empty() => out.push_str("<p class=\"summary\">No run yet.</p>"),
        Ok(runs) => {
            out.push_str("<ul class=\"run-list\">");
            for r in runs {
                run(out, r);
            }
            out.push_str("</ul>");
        }
    }
    out.push_str("</section>");
}

/// One run: what ran and how it ended, the files it brought back, its output.
fn run(out: &mut String, r: &RunRow) {
    let ok = r.exit_code == Some(0);
    let _ = write!(
        out,
        "<li class=\"run\" data-run=\"{id}\"><span class=\"ended {cls}\">{}</span> \
         <code class=\"command\">{}</code> in <strong>{}</strong>{}, {} ({} ms)",
        escape(&ended(r)),
        escape(&r.command.join(" ")),
        escape(&r.sandbox),
        if r.cwd.is_empty() {
            String::new()
        } else {
            format!(" (<code>{}</code>)", escape(&r.cwd))
        },
        super::render::time_html(r.started_at),
        r.duration_ms,
        id = escape(&r.id),
        cls = if ok { "ok" } else { "failed" },
    );
    if r.changed_total > 0 {
        let _ = write!(out, "<p class=\"summary\">{} back:", r.changed_total);
        for p in r.changed.iter().take(PATHS_SHOWN) {
            let _ = write!(out, " <code class=\"path\">/workspace/{}</code>", escape(p));
        }
        let more = r.changed_total.saturating_sub(PATHS_SHOWN as u64);
        if more > 0 {
            let _ = write!(out, " <span class=\"more\">and {more} more</span>");
        }
        out.push_str("</p>");
    }
    stream(out, "stdout", r.stdout_tail.as_deref(), r.stdout_bytes);
    stream(out, "stderr", r.stderr_tail.as_deref(), r.stderr_bytes);
    out.push_str("</li>");
}

/// One stream's last bytes, folded.
fn stream(out: &mut String, name: &str, tail: Option<&str>, total: u64) {
    let Some(tail) = tail.filter(|t| !t.is_empty()) else {
        return;
    };
    let cut = if (tail.len() as u64) < total {
        format!(", the last {} of {} bytes", tail.len(), total)
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "<details class=\"output\"><summary>{name}{cut}</summary><pre class=\"{name}\">{}</pre>\
         </details>",
        escape(tail)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a_run() -> RunRow {
        RunRow {
            id: "dev-1-0".into(),
            sandbox: "dev".into(),
            started_at: 1,
            command: vec!["sh".into(), "-c".into(), "echo <b>hi</b>".into()],
            cwd: String::new(),
            exit_code: Some(1),
            timed_out: false,
            cancelled: false,
            duration_ms: 12,
            stdout_bytes: 20_000,
            stderr_bytes: 0,
            changed: vec!["out/<i>.txt".into()],
            changed_total: 1,
            stdout_tail: Some("<script>alert(1)</script>\n".into()),
            stderr_tail: Some(String::new()),
        }
    }

    #[test]
    fn a_run_shows_its_output_beside_what_it_changed_all_escaped() {
        let mut out = String::new();
        section(&mut out, &Ok(vec![a_run()]));
        assert!(out.contains("exit 1"), "{out}");
        assert!(out.contains("/workspace/out/&lt;i&gt;.txt"), "{out}");
        assert!(
            out.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{out}"
        );
        assert!(!out.contains("<script>"), "{out}");
        assert!(!out.contains("<b>hi"), "{out}");
        assert!(out.contains("the last 26 of 20000 bytes"), "{out}");
        assert!(
            !out.contains(">stderr"),
            "an empty stream is left out: {out}"
        );
    }
}

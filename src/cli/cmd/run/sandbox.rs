//! `wardfs run --sandbox NAME … -- COMMAND`: the client of `POST /v1/run`; `wardfs runs
//! [NAME]`: the client of `GET /v1/runs`.
//!
//! Prints the command's stdout and stderr to ours as the daemon streams them: on a terminal
//! with control characters escaped ([`text::line`], line by line) unless `--raw`, else as they
//! are. Then a summary on stderr (what came back, conflicts) when stderr is a terminal or the
//! sync changed something, and exits with the command's exit code. With `--json` every line
//! of the stream is printed as the daemon sent it.

use std::io::{IsTerminal as _, Write as _};
use std::ops::ControlFlow;

use serde::Deserialize;

use super::Args;
use crate::cli::{ClientError, Ctx, Outcome};
use crate::core::{text, ErrorCode};
use crate::sandbox::run::RunResult;

/// The exit code of a command killed at its deadline (as `timeout(1)` says it).
const EXIT_TIMED_OUT: u8 = 124;
/// The exit code of a command killed otherwise (128 + SIGKILL).
const EXIT_KILLED: u8 = 137;
/// The exit code of a run stopped by Ctrl-C (128 + SIGINT).
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Deserialize)]
struct Line {
    event: String,
    #[serde(default)]
    data: String,
    #[serde(default)]
    error: Option<WireError>,
    /// `started`'s.
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    sandbox: Option<String>,
}

/// What a line of a run's answer said, besides output.
enum Taken {
    Nothing,
    /// `started`: the run's id and sandbox.
    Started {
        run_id: String,
        sandbox: String,
    },
    /// `exited`: how it ended.
    Exited(RunResult),
}

#[derive(Deserialize)]
struct WireError {
    code: ErrorCode,
    message: String,
    #[serde(default)]
    path: Option<String>,
}

/// Where the command's output goes, and how.
struct Sink {
    escape_out: bool,
    escape_err: bool,
}

impl Sink {
    fn new(raw: bool) -> Sink {
        Sink {
            escape_out: !raw && std::io::stdout().is_terminal(),
            escape_err: !raw && std::io::stderr().is_terminal(),
        }
    }

    fn write(&self, stdout: bool, data: &str) {
        let escape = if stdout {
            self.escape_out
        } else {
            self.escape_err
        };
        let shown = if escape {
            escaped(data)
        } else {
            data.to_string()
        };
        // A closed pipe (`| head`) is not the run's failure: the command runs on.
        let _ = if stdout {
            let mut o = std::io::stdout().lock();
            o.write_all(shown.as_bytes()).and_then(|_| o.flush())
        } else {
            let mut e = std::io::stderr().lock();
            e.write_all(shown.as_bytes()).and_then(|_| e.flush())
        };
    }
}

/// Returns output as it may reach a terminal: line breaks kept, every other control character
/// escaped.
fn escaped(data: &str) -> String {
    data.split('\n')
        .map(|l| text::line(l).into_owned())
        .collect::<Vec<_>>()
        .join("\n")
}

fn decode(raw: &[u8]) -> Result<serde_json::Value, ClientError> {
    serde_json::from_slice(raw).map_err(|e| ClientError::Transport(format!("bad answer: {e}")))
}

pub async fn run(ctx: &Ctx, sandbox: &str, a: &Args) -> Result<Outcome, ClientError> {
    let body = serde_json::json!({
        "sandbox": sandbox,
        "command": a.command,
        "cwd": a.cwd,
        "env": a.env,
        "timeout_secs": a.timeout,
        "no_sync": a.no_sync,
        "parallel": a.parallel,
    });
    read_run(ctx, &Sink::new(a.raw), Open::Start(&body)).await
}

/// Where a run's lines come from.
enum Open<'a> {
    /// `POST /v1/run` with this body.
    Start(&'a serde_json::Value),
    /// `GET /v1/runs/{id}/events`.
    Follow(&'a str),
}

/// Reads a run's lines to its end: prints its output, then says what came back and returns
/// the command's exit code. The first Ctrl-C stops the remote process (and the run's end is
/// still read); the second leaves at once.
async fn read_run(ctx: &Ctx, sink: &Sink, open: Open<'_>) -> Result<Outcome, ClientError> {
    let run_id = std::cell::RefCell::new(match open {
        Open::Follow(id) => Some(id.to_string()),
        Open::Start(_) => None,
    });
    let mut ended: Option<Result<RunResult, ClientError>> = None;
    let mut sandbox = String::new();
    let stopped = {
        let on_line = |raw: &[u8]| {
            if ctx.json {
                println!("{}", String::from_utf8_lossy(raw));
            }
            match take(raw, sink, ctx.json) {
                Ok(Taken::Nothing) => ControlFlow::Continue(()),
                Ok(Taken::Started {
                    run_id: id,
                    sandbox: name,
                }) => {
                    *run_id.borrow_mut() = Some(id);
                    sandbox = name;
                    ControlFlow::Continue(())
                }
                Ok(Taken::Exited(r)) => {
                    ended = Some(Ok(r));
                    ControlFlow::Break(())
                }
                Err(e) => {
                    ended = Some(Err(e));
                    ControlFlow::Break(())
                }
            }
        };
        let read = async {
            match open {
                Open::Start(body) => ctx.client.post_lines("/v1/run", body, on_line).await,
                Open::Follow(id) => {
                    let route = format!("/v1/runs/{}/events", crate::client::encode(id));
                    ctx.client.get_lines(&route, on_line).await
                }
            }
        };
        tokio::pin!(read);
        tokio::select! {
            r = &mut read => { r?; false }
            _ = tokio::signal::ctrl_c() => {
                let id = run_id.borrow().clone();
                let Some(id) = id else {
                    return Ok(Outcome::Exit(EXIT_INTERRUPTED));
                };
                cancel(ctx, &id).await;
                tokio::select! {
                    r = &mut read => { r?; true }
                    _ = tokio::signal::ctrl_c() => return Ok(Outcome::Exit(EXIT_INTERRUPTED)),
                }
            }
        }
    };
    let result = ended.unwrap_or_else(|| {
        Err(ClientError::Transport(
            "the daemon ended the run's answer without its end".into(),
        ))
    })?;
    if !ctx.json {
        summary(&sandbox, &result);
    }
    if stopped && result.cancelled {
        return Ok(Outcome::Exit(EXIT_INTERRUPTED));
    }
    Ok(Outcome::Exit(exit_code(&result)))
}

/// Asks the daemon to stop run `id`'s command (Ctrl-C).
async fn cancel(ctx: &Ctx, id: &str) {
    eprintln!("wardfs: stopping the command (Ctrl-C again to leave it running)");
    let route = format!("/v1/runs/{}/cancel", crate::client::encode(id));
    if let Err(e) = ctx
        .client
        .post::<_, serde_json::Value>(&route, &serde_json::json!({}))
        .await
    {
        eprintln!("wardfs: could not stop it: {}", text::line(&e.to_string()));
    }
}

/// Handles one line: prints output, returns the result on `exited`, the error on `error`.
fn take(raw: &[u8], sink: &Sink, json: bool) -> Result<Taken, ClientError> {
    let line: Line = serde_json::from_slice(raw)
        .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))?;
    match line.event.as_str() {
        "stdout" | "stderr" if !json => sink.write(line.event == "stdout", &line.data),
        "started" => {
            return Ok(Taken::Started {
                run_id: line.run_id.unwrap_or_default(),
                sandbox: line.sandbox.unwrap_or_default(),
            })
        }
        "exited" => {
            let r: RunResult = serde_json::from_value(decode(raw)?)
                .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))?;
            return Ok(Taken::Exited(r));
        }
        "error" => {
            let e = line
                .error
                .ok_or_else(|| ClientError::Transport("an error line without its error".into()))?;
            return Err(ClientError::Api {
                code: e.code,
                message: e.message,
                path: e.path,
            });
        }
        _ => {}
    }
    Ok(Taken::Nothing)
}

/// Says on stderr what came back, when there is something to say.
fn summary(sandbox: &str, r: &RunResult) {
    let mut e = std::io::stderr().lock();
    if r.timed_out {
        let _ = writeln!(e, "wardfs: the command was killed at its deadline");
    }
    if !r.changed.is_empty() {
        let _ = writeln!(
            e,
            "wardfs: {} back from sandbox {}",
            text::count(r.changed.len() as u64, "change"),
            text::name(sandbox)
        );
    }
    for c in &r.conflicts {
        let copy = c
            .remote_copy
            .as_deref()
            .map(|p| format!(" (the sandbox's copy: {})", text::name(p)))
            .unwrap_or_default();
        let _ = writeln!(
            e,
            "wardfs: conflict: {}: {}{copy}",
            text::name(&c.path),
            text::line(&c.reason)
        );
    }
}

/// List recent runs in sandboxes
///
/// The newest runs (of sandbox NAME when given), newest first: when each started, the sandbox,
/// how it ended (exit code, `timeout`, `cancelled`, `killed`), how long it ran, how many
/// workspace files it changed, its directory, its command and its id. `--json` adds the
/// changed paths. With --follow ID, takes up a run again (see `wardfs run`).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  wardfs runs                 # every sandbox's
  wardfs runs dev -n 5        # the last five in sandbox dev
  wardfs runs --follow dev-18c2f3a4b5d-0   # a run whose client died, to its end")]
pub struct RunsArgs {
    /// Only this sandbox's runs
    pub sandbox: Option<String>,
    /// Take up run ID again (one whose `wardfs run` died or was left with a second Ctrl-C):
    /// print its output from the start, then what came back, and exit with its exit code
    #[arg(long, value_name = "ID", conflicts_with_all = ["sandbox", "limit"])]
    pub follow: Option<String>,
    /// Most runs to list
    #[arg(short = 'n', long, default_value_t = 20)]
    pub limit: usize,
}

pub async fn runs(ctx: &Ctx, a: &RunsArgs) -> Result<Outcome, ClientError> {
    if let Some(id) = &a.follow {
        return read_run(ctx, &Sink::new(false), Open::Follow(id)).await;
    }
    let mut route = format!("/v1/runs?limit={}", a.limit);
    if let Some(s) = &a.sandbox {
        route.push_str(&format!("&sandbox={}", crate::client::encode(s)));
    }
    let body: serde_json::Value = ctx.client.get(&route).await?;
    if ctx.json {
        println!("{body}");
        return Ok(Outcome::Ok);
    }
    let rows: Vec<crate::state::RunRow> = serde_json::from_value(body["runs"].clone())
        .map_err(|e| ClientError::Transport(format!("bad answer: {e}")))?;
    if rows.is_empty() {
        println!("no runs");
    }
    for r in rows {
        let ended = match (r.exit_code, r.timed_out, r.cancelled) {
            (_, true, _) => "timeout".to_string(),
            (_, _, true) => "cancelled".to_string(),
            (Some(c), _, _) => format!("exit {c}"),
            (None, _, _) => "killed".to_string(),
        };
        let command: Vec<String> = r
            .command
            .iter()
            .map(|c| text::name(c).into_owned())
            .collect();
        let cwd = if r.cwd.is_empty() {
            String::new()
        } else {
            format!(" (in {})", text::name(&r.cwd))
        };
        println!(
            "{}  {:<12} {:<9} {:>7} ms  {:<12} {}{cwd}  [{}]",
            crate::cli::output::time(r.started_at),
            text::name(&r.sandbox),
            ended,
            r.duration_ms,
            text::count(r.changed_total, "change"),
            command.join(" "),
            text::name(&r.id)
        );
    }
    Ok(Outcome::Ok)
}

fn exit_code(r: &RunResult) -> u8 {
    match (r.exit_code, r.timed_out) {
        (_, true) => EXIT_TIMED_OUT,
        (Some(c), _) => u8::try_from(c).unwrap_or(1),
        (None, _) => EXIT_KILLED,
    }
}

#[cfg(test)]
mod tests {
    use super::escaped;

    #[test]
    fn output_keeps_its_lines_and_loses_its_escapes() {
        assert_eq!(escaped("a\nb\n"), "a\nb\n");
        assert_eq!(escaped("x\x1b]0;t\x07y\r\n"), "x\\033]0;t\\ay\\r\n");
    }
}

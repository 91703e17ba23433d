//! Progress of long operations (git pull and push, mirror push and pull) as a person sees it.
//!
//! On a terminal each phase gets one progress bar, redrawn in place (indicatif) and left on
//! screen, finished, when the next phase starts. When standard error is not a terminal (a log, a
//! CI job) a phase prints a plain line when it ends, and one every [`LINE_EVERY`] while it runs,
//! so a long transfer still shows it is alive. With `--json` nothing is printed: the answer on
//! standard output is the whole story.

use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::output::size;

/// How often a running phase prints a line when standard error is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(5);

/// One progress update, whatever the operation: `done` of `total` (0 when not known) `unit`s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// What is being done, as shown: `fetch`, `write`, `pushing to dev`, ….
    pub phase: String,
    pub done: u64,
    pub total: u64,
    /// `objects`, `files`, … (empty for a phase without counts, such as connecting).
    pub unit: &'static str,
    /// Bytes moved so far, when the phase moves bytes.
    pub bytes: Option<u64>,
}

impl Tick {
    /// Returns the plain line for this update: `fetch: 3946/3946 objects (100%), 1.2 MiB`.
    pub fn line(&self) -> String {
        let mut s = self.phase.clone();
        if !self.unit.is_empty() {
            match (self.done * 100).checked_div(self.total) {
                Some(pct) => s += &format!(": {}/{} {} ({pct}%)", self.done, self.total, self.unit),
                None => s += &format!(": {} {}", self.done, self.unit),
            }
        }
        if let Some(b) = self.bytes {
            s += &format!(", {}", size(b));
        }
        s
    }

    fn complete(&self) -> bool {
        self.total > 0 && self.done >= self.total
    }
}

/// Where updates go.
enum Sink {
    Bar(Option<ProgressBar>),
    Lines { last_line: Option<Instant> },
    Off,
}

/// Shows the updates of one operation; [`View::finish`] when the answer has come.
pub struct View {
    sink: Sink,
    current: Option<Tick>,
}

impl View {
    /// Returns a view for standard error: bars on a terminal (`TERM` not `dumb`), lines
    /// otherwise, nothing when `json` is set.
    pub fn new(json: bool) -> View {
        let tty =
            std::io::stderr().is_terminal() && std::env::var_os("TERM").is_none_or(|t| t != "dumb");
        let sink = match (json, tty) {
            (true, _) => Sink::Off,
            (false, true) => Sink::Bar(None),
            (false, false) => Sink::Lines { last_line: None },
        };
        View {
            sink,
            current: None,
        }
    }

    /// Shows one update.
    pub fn update(&mut self, tick: Tick) {
        let new_phase = self.current.as_ref().is_none_or(|c| c.phase != tick.phase);
        if new_phase {
            self.end_phase();
        }
        match &mut self.sink {
            Sink::Off => {}
            Sink::Bar(bar) => {
                let bar = bar.get_or_insert_with(|| new_bar(&tick));
                show_on_bar(bar, &tick);
            }
            Sink::Lines { last_line } => {
                let due = last_line.is_none_or(|t| t.elapsed() >= LINE_EVERY);
                // The first line of a phase waits LINE_EVERY: a short phase prints only its end.
                if tick.complete() || (due && !new_phase) {
                    eprintln!("{}", tick.line());
                }
                if tick.complete() || due || new_phase {
                    *last_line = Some(Instant::now());
                }
            }
        }
        self.current = Some(tick);
    }

    /// Ends the last phase: its bar stays on screen, finished, or its last line is printed.
    pub fn finish(mut self) {
        self.end_phase();
    }

    fn end_phase(&mut self) {
        let Some(last) = self.current.take() else {
            return;
        };
        match &mut self.sink {
            Sink::Off => {}
            Sink::Bar(bar) => {
                if let Some(bar) = bar.take() {
                    bar.finish();
                }
            }
            Sink::Lines { .. } => {
                if !last.complete() {
                    eprintln!("{}", last.line());
                }
            }
        }
    }
}

/// Returns a bar for a phase: with a length when the total is known, a spinner otherwise.
fn new_bar(tick: &Tick) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(
        (tick.total > 0).then_some(tick.total),
        ProgressDrawTarget::stderr_with_hz(10),
    );
    let template = if tick.total > 0 {
        "{prefix}: [{bar:30}] {pos}/{len} {msg} ({elapsed})"
    } else {
        "{spinner} {prefix}: {pos} {msg} ({elapsed})"
    };
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(tick.phase.clone());
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn show_on_bar(bar: &ProgressBar, tick: &Tick) {
    if tick.total > 0 {
        bar.set_length(tick.total);
    }
    bar.set_position(tick.done);
    let mut msg = tick.unit.to_string();
    if let Some(b) = tick.bytes {
        msg += &format!(", {}", size(b));
    }
    bar.set_message(msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(phase: &str, done: u64, total: u64) -> Tick {
        Tick {
            phase: phase.into(),
            done,
            total,
            unit: "objects",
            bytes: Some(done * 1024),
        }
    }

    #[test]
    fn a_line_names_the_phase_the_counts_and_the_bytes() {
        assert_eq!(
            tick("fetch", 3946, 3946).line(),
            "fetch: 3946/3946 objects (100%), 3.9 MiB"
        );
        let unknown = Tick {
            total: 0,
            ..tick("receive", 7, 0)
        };
        assert_eq!(unknown.line(), "receive: 7 objects, 7.0 KiB");
        let bare = Tick {
            phase: "connecting to dev".into(),
            done: 0,
            total: 0,
            unit: "",
            bytes: None,
        };
        assert_eq!(bare.line(), "connecting to dev");
    }
}

//! The rate limit of streamed progress (`"progress": true` on pull, push and mirror routes).
//!
//! A transfer reports far more often than anyone can read: libgit2 calls back once per object
//! received and again, with the same counts, for every delta it resolves. The client is sent at
//! most ten updates a second, the first update of each phase, and one update (never more) saying
//! a phase is complete; an update equal to the one sent before is never sent.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The shortest time between two updates of one phase.
const INTERVAL: Duration = Duration::from_millis(100);

/// The last update sent.
struct Sent {
    phase: String,
    done: u64,
    total: u64,
    at: Instant,
}

/// Decides which progress updates reach the client.
#[derive(Default)]
pub struct Gate {
    last: Mutex<Option<Sent>>,
}

impl Gate {
    /// Returns true when the update (`done` of `total` in `phase`; `total` 0 when unknown) is to
    /// be sent, and remembers it as sent.
    pub fn pass(&self, phase: &str, done: u64, total: u64) -> bool {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let send = match last.as_ref() {
            None => true,
            Some(l) if l.phase != phase => true,
            Some(l) if l.done == done && l.total == total => false,
            Some(_) if total > 0 && done >= total => true,
            Some(l) => l.at.elapsed() >= INTERVAL,
        };
        if send {
            *last = Some(Sent {
                phase: phase.to_string(),
                done,
                total,
                at: Instant::now(),
            });
        }
        send
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_its_first_update_and_its_completion_once() {
        let gate = Gate::default();
        let passed = (0..=1000u64)
            .filter(|&i| gate.pass("fetch", i, 1000))
            .count();
        assert_eq!(passed, 2, "the first update and the completion");
        // libgit2 repeats the complete counts while it resolves deltas: none of them is sent.
        assert!((0..500).all(|_| !gate.pass("fetch", 1000, 1000)));
    }

    #[test]
    fn a_new_phase_passes_at_once_and_later_updates_wait_their_turn() {
        let gate = Gate::default();
        assert!(gate.pass("fetch", 10, 10));
        assert!(gate.pass("write", 0, 50));
        assert!(!gate.pass("write", 1, 50), "within 100 ms of the last");
        std::thread::sleep(INTERVAL);
        assert!(gate.pass("write", 2, 50));
        assert!(gate.pass("write", 50, 50));
    }

    #[test]
    fn unknown_totals_are_rate_limited_and_never_complete() {
        let gate = Gate::default();
        assert!(gate.pass("receive", 1, 0));
        assert!((2..100).all(|i| !gate.pass("receive", i, 0)));
    }
}

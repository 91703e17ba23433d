//! Tests of git sync against real git servers on loopback: `git daemon` (git://) and
//! `git http-backend` behind `lighttpd` with Basic auth (http://), each with fresh bare
//! repositories in temp dirs. The servers are `crate::support::git_servers`, the daemon
//! `Daemon::git`; `smoke` proves the servers with the git CLI; `hostile` serves crafted packs and
//! trees (issue 29: delta bombs, submodule floods, entries whose object is not what their mode
//! says) and stages a big file, measuring the daemon's peak memory; `forks` stages a fork's
//! changes (issue 30); `fsmonitor` runs git's `status` through a real mount with the journal as
//! its file-system monitor (issue 31).

mod first_hour;
mod forks;
mod fsmonitor;
mod hostile;
mod scenarios;
mod smoke;

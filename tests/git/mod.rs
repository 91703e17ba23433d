//! Tests of git sync against real git servers on loopback: `git daemon` (git://) and
//! `git http-backend` behind `lighttpd` with Basic auth (http://), each with fresh bare
//! repositories in temp dirs. The servers are `crate::support::git_servers`, the daemon
//! `Daemon::git`; `smoke` proves the servers with the git CLI.

mod first_hour;
mod scenarios;
mod smoke;

//! Tests of git sync against real git servers on loopback: `git daemon` (git://) and
//! `git http-backend` behind `lighttpd` with Basic auth (http://), each with fresh bare
//! repositories in temp dirs. `servers` is the harness; `smoke` proves it with the git CLI.

pub mod daemon;
mod scenarios;
pub mod servers;
mod smoke;

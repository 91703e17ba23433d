//! Integration tests of the daemon: a real `sandfs serve` on a temp socket, driven through the
//! CLI, raw HTTP (curl), and the library's client. One test binary for the whole area.

mod cli;
mod concurrency;
mod escape;
mod grep;
mod http;
mod parity;
mod service;
mod support;

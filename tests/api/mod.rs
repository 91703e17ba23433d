//! Integration tests of the daemon: a real `wardfs serve` on a temp socket, driven through the
//! CLI, raw HTTP (curl), and the library's client.

mod cli;
mod concurrency;
mod escape;
mod events;
mod first_hour;
mod forks;
mod grep;
mod http;
mod parity;
mod service;

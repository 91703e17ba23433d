//! One module per subcommand.

pub mod cat;
pub mod completions;
pub mod doctor;
pub mod edit;
pub mod exists;
pub mod gc;
pub mod git;
pub mod glob;
pub mod grep;
pub mod install_service;
pub mod log;
pub mod ls;
pub mod mcp;
pub mod mirror;
pub mod mkdir;
pub mod mv;
pub mod read;
pub mod resolve;
pub mod review;
pub mod rm;
pub mod sandbox;
pub mod serve;
pub mod staged;
pub mod stat;
pub mod status;
pub mod write;

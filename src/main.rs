//! The `wardfs` binary: see [`wardfs::cli`].

fn main() -> std::process::ExitCode {
    // The mount's echo helper: started by the daemon (`wardfs::fuse::echo_helper`), never by
    // hand.
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(wardfs::fuse::ECHO_HELPER_ARG.as_ref()) {
        return wardfs::fuse::echo_helper(args);
    }
    wardfs::cli::main()
}

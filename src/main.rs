//! The `wardfs` binary: see [`wardfs::cli`].

fn main() -> std::process::ExitCode {
    wardfs::cli::main()
}

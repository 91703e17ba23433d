//! The `sandfs` binary: see [`sandfs::cli`].

fn main() -> std::process::ExitCode {
    sandfs::cli::main()
}

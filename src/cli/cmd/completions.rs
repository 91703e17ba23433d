//! `wardfs completions`: print a shell completion script, generated from the command definitions
//! by `clap_complete`, so it can never fall behind the real subcommands and flags.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// Print the shell completion script for bash, zsh, fish, elvish or powershell
///
/// bash: `wardfs completions bash > ~/.local/share/bash-completion/completions/wardfs`;
/// zsh: `wardfs completions zsh > ~/.zfunc/_wardfs` (with ~/.zfunc in $fpath);
/// fish: `wardfs completions fish > ~/.config/fish/completions/wardfs.fish`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to generate completions for
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: &Args) -> ExitCode {
    let mut cmd = crate::cli::Cli::command();
    // Generated into memory (a few kB): `clap_complete` panics when its writer fails, and a
    // reader that stops early (`| head`) is no reason for a backtrace.
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "wardfs", &mut script);
    let mut out = std::io::stdout().lock();
    match out.write_all(&script).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        // Only reached where SIGPIPE is ignored (see `cli::main`): as quiet as the signal.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wardfs completions: cannot write the script: {e}");
            ExitCode::from(1)
        }
    }
}

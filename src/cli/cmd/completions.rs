//! `sandfs completions`: print a shell completion script, generated from the command definitions
//! by `clap_complete`, so it can never fall behind the real subcommands and flags.

use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// Print the shell completion script for bash, zsh, fish, elvish or powershell
///
/// bash: `sandfs completions bash > ~/.local/share/bash-completion/completions/sandfs`;
/// zsh: `sandfs completions zsh > ~/.zfunc/_sandfs` (with ~/.zfunc in $fpath);
/// fish: `sandfs completions fish > ~/.config/fish/completions/sandfs.fish`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to generate completions for
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(args: &Args) -> ExitCode {
    let mut cmd = crate::cli::Cli::command();
    clap_complete::generate(args.shell, &mut cmd, "sandfs", &mut std::io::stdout());
    ExitCode::SUCCESS
}

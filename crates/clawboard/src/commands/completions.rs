use clap::{Args, CommandFactory};
use clap_complete::Shell;

use crate::cli::{Cli, EXIT_OK};

/// Print a shell completion script
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard completions bash > /etc/bash_completion.d/clawboard
  clawboard completions zsh > \"${fpath[1]}/_clawboard\"
  clawboard completions fish > ~/.config/fish/completions/clawboard.fish")]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: Shell,
}

pub fn run(a: CompletionsArgs) -> anyhow::Result<u8> {
    let mut cmd = Cli::command();
    // Into memory first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "clawboard", &mut script);
    std::io::Write::write_all(&mut std::io::stdout().lock(), &script)?;
    Ok(EXIT_OK)
}

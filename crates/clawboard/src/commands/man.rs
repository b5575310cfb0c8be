use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};

use crate::cli::{Cli, EXIT_OK};

/// Print the man page, or write one page per subcommand into a directory
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard man | man -l -
  clawboard man --dir /usr/local/share/man/man1")]
pub struct ManArgs {
    /// Write clawboard.1 and clawboard-SUBCOMMAND.1 pages here instead of printing
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn run(a: ManArgs) -> anyhow::Result<u8> {
    let cmd = Cli::command();
    match a.dir {
        None => clap_mangen::Man::new(cmd).render(&mut std::io::stdout())?,
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir).with_context(|| format!("writing man pages to {}", dir.display()))?;
        }
    }
    Ok(EXIT_OK)
}

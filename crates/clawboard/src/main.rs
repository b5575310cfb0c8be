//! The `clawboard` binary: parses the command line and hands over to [`cli::run`].

mod cli;
mod commands;
mod config;
mod daemon;
mod logging;
mod output;

fn main() -> std::process::ExitCode {
    cli::run(std::env::args_os())
}

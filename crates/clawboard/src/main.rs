//! The `clawboard` binary: parses the command line and hands over to [`cli::run`].

/// `println!` that hands back the write's error instead of panicking: `clawboard
/// status | head -1` closes the pipe early, and the command then stops quietly
/// (see `cli::run`), as other Unix tools do.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

/// `print!`, as [`outln!`].
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod cli;
mod commands;
mod config;
mod daemon;
mod local;
mod logging;
mod output;
mod retention;
mod telemetry;

fn main() -> std::process::ExitCode {
    cli::run(std::env::args_os())
}

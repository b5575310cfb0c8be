//! The command line: global flags, the subcommands, exit codes.
//!
//! Exit codes: 0 ok, 1 failure, 2 usage error or bad input.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::commands;
use crate::config::{self, LogFormat, Settings};

/// Exit code for success.
pub const EXIT_OK: u8 = 0;
/// Exit code for an operation that failed (I/O, a tree that is not initialized …).
pub const EXIT_FAILURE: u8 = 1;
/// Exit code for a usage error or bad input (invalid file, bad id, bad config).
pub const EXIT_BAD_INPUT: u8 = 2;

const EXAMPLES: &str = "\
Examples:
  clawboard demo                                   # try it: a throwaway tree, three tasks and a Doc Update lap
  clawboard init                                   # create ~/clawos/blackboard
  clawboard task submit config/examples/task.json  # submit a task
  clawboard task list --status pending             # what is waiting
  clawboard validate tasks/*/task.json             # check files, every problem by field";

/// A filesystem blackboard for teams of AI agent roles.
///
/// People and assistants drop task.json files into the tree; clawboard keeps every
/// step as plain files. Root: --root, else CLAWBOARD_ROOT, else `root` in the config
/// file, else ~/clawos/blackboard.
#[derive(Debug, Parser)]
#[command(name = "clawboard", version, after_help = EXAMPLES, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand takes.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Blackboard root directory [env: CLAWBOARD_ROOT] [default: ~/clawos/blackboard]
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Config file [env: CLAWBOARD_CONFIG] [default: ~/.config/clawboard/clawboard.toml, else
    /// /etc/clawboard/clawboard.toml, if present]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// More log output (-v debug, -vv trace)
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Less log output (errors only)
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub quiet: u8,

    /// Machine-readable JSON output
    #[arg(long, global = true)]
    pub json: bool,

    /// Log line format [env: CLAWBOARD_LOG_FORMAT]
    #[arg(long, global = true, value_enum, value_name = "FORMAT")]
    pub log_format: Option<LogFormat>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Init(commands::init::InitArgs),
    Validate(commands::validate::ValidateArgs),
    #[command(subcommand)]
    Task(commands::task::TaskCommand),
    Status(commands::status::StatusArgs),
    Doctor(commands::doctor::DoctorArgs),
    Daemon(commands::daemon::DaemonArgs),
    #[command(subcommand, name = "escalations", visible_alias = "escalation")]
    Escalation(commands::escalation::EscalationCommand),
    #[command(subcommand)]
    Sync(commands::sync::SyncCommand),
    #[command(subcommand)]
    Archive(commands::archive::ArchiveCommand),
    Harvest(commands::archive::HarvestArgs),
    Report(commands::report::ReportArgs),
    #[command(subcommand)]
    Retention(commands::retention::RetentionCommand),
    #[command(subcommand)]
    Acl(commands::acl::AclCommand),
    Write(commands::write::WriteArgs),
    #[command(subcommand)]
    Board(commands::board::BoardCommand),
    #[command(subcommand, name = "entry", visible_alias = "entries")]
    Entry(commands::entry::EntryCommand),
    #[command(subcommand)]
    Slice(commands::slice::SliceCommand),
    #[command(subcommand)]
    Role(commands::role::RoleCommand),
    #[command(subcommand)]
    Web(commands::web::WebCommand),
    Run(commands::run::RunArgs),
    Demo(commands::demo::DemoArgs),
    Completions(commands::completions::CompletionsArgs),
    Man(commands::man::ManArgs),
    #[command(name = clawboard_roles::sandbox::EXEC_COMMAND, hide = true)]
    SandboxExec(commands::sandbox::SandboxExecArgs),
}

/// Parses `args`, runs the command, and maps the outcome to an exit code.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print(); // stdout/stderr closed: nothing better to do
            return ExitCode::from(if e.use_stderr() { EXIT_BAD_INPUT } else { EXIT_OK });
        }
    };
    // A sandboxed role's start: no config, no log, nothing but the sandbox.
    let cli = match cli {
        Cli { command: Command::SandboxExec(a), .. } => return commands::sandbox::exec(a),
        cli => cli,
    };
    let settings = match config::resolve(&cli.global, &config::Env::from_process()) {
        Ok(s) => s,
        // The doctor's first check is the config: a failed one is its report.
        Err(e) if matches!(cli.command, Command::Doctor(_)) => {
            return ExitCode::from(commands::doctor::config_failed(cli.global.json, &e));
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let mut settings = settings;
    if matches!(cli.command, Command::Daemon(_) | Command::Demo(_)) {
        settings.log_for_a_daemon();
    }
    crate::logging::init(&settings);
    match dispatch(cli.command, &cli.global, &settings) {
        Ok(code) => ExitCode::from(code),
        // The reader of our output went away (`clawboard status | head -1`): what
        // it wanted it has; stop quietly, as other Unix tools do.
        Err(e) if is_broken_pipe(&e) => ExitCode::from(EXIT_OK),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code_of(&e))
        }
    }
}

/// Whether `e` is a write to a closed pipe (our stdout's reader exited).
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
    })
}

/// 2 for bad input (a core error that says so, or a [`BadInput`]), 1 otherwise.
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    let bad = e.chain().any(|c| {
        c.downcast_ref::<clawboard_core::Error>().is_some_and(clawboard_core::Error::is_bad_input)
            || c.downcast_ref::<BadInput>().is_some()
            || c.downcast_ref::<clawboard_board::Error>().is_some_and(clawboard_board::Error::is_bad_input)
            || c.downcast_ref::<clawboard_entries::Error>().is_some_and(clawboard_entries::Error::is_bad_input)
    });
    if bad { EXIT_BAD_INPUT } else { EXIT_FAILURE }
}

/// An error caused by what the user gave (exit code 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// A sync configuration error is bad input (exit code 2); anything else a failure.
pub fn sync_error(e: clawboard_sync::Error) -> anyhow::Error {
    match e {
        clawboard_sync::Error::Config { .. } => BadInput(e.to_string()).into(),
        other => other.into(),
    }
}

fn dispatch(command: Command, global: &GlobalArgs, s: &Settings) -> anyhow::Result<u8> {
    match command {
        Command::Init(a) => commands::init::run(a, s),
        Command::Validate(a) => commands::validate::run(a, s),
        Command::Task(c) => commands::task::run(c, s),
        Command::Status(a) => commands::status::run(a, s),
        Command::Doctor(a) => commands::doctor::run(a, s),
        Command::Daemon(a) => commands::daemon::run(a, global, s),
        Command::Escalation(c) => commands::escalation::run(c, s),
        Command::Sync(c) => commands::sync::run(c, s),
        Command::Archive(c) => commands::archive::run(c, s),
        Command::Harvest(a) => commands::archive::harvest(a, s),
        Command::Report(a) => commands::report::run(a, s),
        Command::Retention(c) => commands::retention::run(c, s),
        Command::Acl(c) => commands::acl::run(c, s),
        Command::Role(c) => commands::role::run(c, s),
        Command::Write(a) => commands::write::run(a, s),
        Command::Board(c) => commands::board::run(c, s),
        Command::Entry(c) => commands::entry::run(c, s),
        Command::Slice(c) => commands::slice::run(c, s),
        Command::Run(a) => commands::run::run(a, s),
        Command::Web(c) => commands::web::run(c, s),
        Command::Demo(a) => commands::demo::run(a, global, s),
        Command::Completions(a) => commands::completions::run(a),
        Command::Man(a) => commands::man::run(a),
        Command::SandboxExec(_) => {
            anyhow::bail!("{} runs before any config is read", clawboard_roles::sandbox::EXEC_COMMAND)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_subcommand_help_has_an_example() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let name = format!("{path} {}", cmd.get_name());
            let help = cmd.get_after_help().map(|h| h.to_string()).unwrap_or_default();
            if !help.contains("Example") && cmd.get_name() != "help" {
                missing.push(name.clone());
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "no example in --help of: {missing:?}");
    }

    /// `--help` says what each argument and option is: none shows an empty line.
    #[test]
    fn every_argument_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            let name = format!("{path} {}", cmd.get_name());
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() && !arg.is_hide_set() {
                    missing.push(format!("{name} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "", &mut missing);
        assert!(missing.is_empty(), "arguments without a help line: {missing:#?}");
    }
}

//! `clawboard __sandbox-exec`: how the daemon starts a sandboxed role (docs/SANDBOX.md).
//! Not for people: it restricts itself with Landlock to everything but the
//! `--deny` paths, then executes the role's program in its own place, keeping
//! its process id, process group, environment, directory and pipes.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use clawboard_roles::sandbox::{self, Denied};

/// Exit code when the sandbox could not be set up (the role did not run).
const EXIT_NO_SANDBOX: u8 = 126;
/// Exit code when the role's program could not be executed.
const EXIT_NO_PROGRAM: u8 = 127;

/// Run a role's program under the Landlock sandbox (the daemon's, internal)
#[derive(Debug, Args)]
#[command(after_help = "Example (what the daemon runs for a sandboxed role; try a program under the sandbox):
  clawboard __sandbox-exec --deny /var/lib/clawboard --program /usr/bin/python3 -- python3 role.py")]
pub struct SandboxExecArgs {
    /// A path the program may not read, list, write or execute (repeatable)
    #[arg(long = "deny", required = true, value_name = "PATH")]
    pub deny: Vec<PathBuf>,
    /// The program's file, already looked up on PATH
    #[arg(long, value_name = "FILE")]
    pub program: PathBuf,
    /// The program's argv, argv[0] first
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub argv: Vec<OsString>,
}

/// Never returns on success: the process becomes the role's program. What it
/// prints on failure reaches the role's attempt record as its stderr.
pub fn exec(a: SandboxExecArgs) -> ExitCode {
    let restricted = Denied::new(a.deny).and_then(|d| sandbox::restrict_self(&d));
    if let Err(e) = restricted {
        eprintln!("clawboard: the role's sandbox could not be set up, so it did not run: {e}");
        return ExitCode::from(EXIT_NO_SANDBOX);
    }
    let Some((argv0, args)) = a.argv.split_first() else {
        eprintln!("clawboard: the role has no argv");
        return ExitCode::from(EXIT_NO_PROGRAM);
    };
    let e = std::process::Command::new(&a.program).arg0(argv0).args(args).exec();
    eprintln!("clawboard: cannot start {argv0:?} ({}) in the sandbox: {e}", a.program.display());
    ExitCode::from(EXIT_NO_PROGRAM)
}

use clap::Args;

use crate::cli::{EXIT_OK, GlobalArgs};
use crate::config::Settings;

/// Run the daemon in the foreground: intake, role dispatch, the local API
#[derive(Debug, Args)]
#[command(after_help = "Stops cleanly on SIGTERM or SIGINT (running roles get daemon.shutdown_grace
to finish). SIGHUP reads the config (and its env_file) again and applies, as one,
[lifecycle] (max_tasks and max_parallel_roles at once), [roles.*],
[llm.providers.*], [sandbox], the ACL (acl.toml), [board] templates,
[blueprints] and [lanes]; a change to any other section (root, limits, log,
daemon, node, sync, archive, harvest, reports, web, notify, retention, github)
refuses the whole reload, named in the log, until a restart. Under systemd it is
a Type=notify service (see systemd/).

Examples:
  clawboard daemon
  clawboard daemon --root /srv/blackboard --config /etc/clawboard/clawboard.toml
  CLAWBOARD_LOG=debug clawboard daemon --log-format json")]
pub struct DaemonArgs {}

/// Exit code after a panic: the daemon must not limp on with a dead task, and
/// systemd (`Restart=on-failure`) starts it again, resuming every task.
const EXIT_PANIC: i32 = 70;

pub fn run(_: DaemonArgs, args: &GlobalArgs, s: &Settings) -> anyhow::Result<u8> {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!("panic: {info}; exiting so that the service manager restarts the daemon");
        default_hook(info);
        std::process::exit(EXIT_PANIC);
    }));
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().thread_name("clawboard").build()?;
    let result = runtime.block_on(crate::daemon::run(args.clone(), s.clone()));
    // Every cursor is durable by now; a blocking thread still in a git request (a
    // remote that never answers) is not waited for beyond this.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    result?;
    Ok(EXIT_OK)
}

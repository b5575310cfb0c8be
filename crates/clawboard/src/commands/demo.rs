use std::path::PathBuf;

use clap::Args;
use clawboard_core::Store;
use clawboard_core::formats::TaskStatus;

use crate::cli::EXIT_OK;
use crate::commands::task::{load_tasks, submit_bytes};
use crate::config::Settings;

/// The example task every demo submits (also `config/examples/task.json`).
const EXAMPLE_TASK: &str = include_str!("../../../../config/examples/task.json");

/// Try clawboard on a throwaway tree: init, submit the example task, list
#[derive(Debug, Args)]
#[command(after_help = "Runs on embedded defaults; needs no config and no cloud account. The tree
is created in a new temporary directory (or --dir) and kept, so you can look at it.

Examples:
  clawboard demo
  clawboard demo --dir /tmp/my-demo")]
pub struct DemoArgs {
    /// Where to create the demo tree [default: a new directory under $TMPDIR]
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

pub fn run(a: DemoArgs, s: &Settings) -> anyhow::Result<u8> {
    let root = match a.dir {
        Some(d) => d,
        None => {
            let stamp = chrono::Utc::now().format("%Y%m%d-%H%M%S");
            std::env::temp_dir().join(format!("clawboard-demo-{stamp}-{}", std::process::id()))
        }
    };
    println!("1. clawboard init --root {}", root.display());
    let (store, report) = Store::init(&root)?;
    let store = store.with_max_file_bytes(s.max_file_bytes);
    println!(
        "   created {} directories and files (tasks/, gm/, roles/, escalations/, shared/, harvest/, reports/, inbox/)",
        report.created.len()
    );
    println!("2. clawboard task submit config/examples/task.json");
    let task = submit_bytes(&store, "config/examples/task.json", EXAMPLE_TASK.as_bytes())?;
    println!("   submitted {} ({}, {}): {}", task.task_id, task.kind, task.priority, task.description);
    println!("3. clawboard task list");
    let pending = load_tasks(&store, Some(TaskStatus::Pending), None)?;
    for t in &pending {
        println!("   {}  {}  {}  {}", t.task_id, t.status, t.kind, t.description);
    }
    println!();
    println!("The tree is at {}; look around:", root.display());
    println!("   clawboard --root {} status", root.display());
    println!("   clawboard --root {} task show {}", root.display(), task.task_id);
    Ok(EXIT_OK)
}

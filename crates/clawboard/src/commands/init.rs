use clap::Args;
use clawboard_core::Store;

use crate::cli::EXIT_OK;
use crate::config::Settings;
use crate::output;

/// Create the blackboard tree (idempotent: a second run changes nothing)
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard init                          # ~/clawos/blackboard
  clawboard init --root /srv/blackboard   # somewhere else
  clawboard init --json                   # what was created, as JSON")]
pub struct InitArgs {}

pub fn run(_: InitArgs, s: &Settings) -> anyhow::Result<u8> {
    let (_, report) = Store::init(&s.root)?;
    if s.json {
        output::json(&report)?;
        return Ok(EXIT_OK);
    }
    let root = report.root.display();
    if report.created.is_empty() {
        println!("Nothing to do: the blackboard at {root} is complete.");
    } else {
        println!("Initialized the blackboard at {root} ({} created):", report.created.len());
        for item in &report.created {
            println!("  + {item}");
        }
    }
    for tmp in &report.removed_temp_files {
        println!("Removed {tmp}, a temp file left by an interrupted write.");
    }
    Ok(EXIT_OK)
}

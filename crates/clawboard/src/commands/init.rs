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
    let others = foreign_entries(&s.root);
    let (_, report) = Store::init(&s.root)?;
    if s.json {
        output::json(&report)?;
        return Ok(EXIT_OK);
    }
    let root = report.root.display();
    if report.created.is_empty() {
        outln!("Nothing to do: the blackboard at {root} is complete.")?;
    } else {
        outln!("Initialized the blackboard at {root} ({} created):", report.created.len())?;
        for item in &report.created {
            outln!("  + {item}")?;
        }
    }
    for tmp in &report.removed_temp_files {
        outln!("Removed {tmp}, a temp file left by an interrupted write.")?;
    }
    if !others.is_empty() {
        // A tree made inside a directory of other things: said, not refused.
        let shown: Vec<&str> = others.iter().take(5).map(String::as_str).collect();
        let more = if others.len() > 5 { format!(" and {} more", others.len() - 5) } else { String::new() };
        outln!(
            "Note: {root} was not a blackboard and already held {}{more}; left as they are. A tree of its own directory is easier to sync and back up.",
            shown.join(", ")
        )?;
    }
    Ok(EXIT_OK)
}

/// The top-level names in `root` that are none of the tree's, when `root` is a
/// directory that is not yet a blackboard (no `.clawboard/`).
fn foreign_entries(root: &std::path::Path) -> Vec<String> {
    if root.join(".clawboard").exists() {
        return Vec::new();
    }
    let ours: std::collections::BTreeSet<&str> =
        clawboard_core::layout::DIRS.iter().filter_map(|d| d.split('/').next()).collect();
    let Ok(read) = std::fs::read_dir(root) else { return Vec::new() };
    let mut names: Vec<String> = read
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !ours.contains(n.as_str()))
        .collect();
    names.sort();
    names
}

//! `clawboard acl check`: explain an access decision of `config/acl.toml`.

use clap::{Args, Subcommand};
use clawboard_core::acl::Op;

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK};
use crate::config::Settings;
use crate::output;

/// Access control: who may read and write what (config/acl.toml)
#[derive(Debug, Subcommand)]
#[command(after_help = "The policy: acl.toml beside the config file when it exists, else the
embedded seed matrix (the repository's config/acl.toml). docs/ACL.md has the rules.

Examples:
  clawboard acl check --as creator-code --task t1 --write tasks/t1/result.json
  clawboard acl check --as coding-pm --read gm/decisions.md
  clawboard acl check --as gm --write shared/risk-limits.json --json
  clawboard acl check --as title-worker --write board:control.retries")]
pub enum AclCommand {
    Check(CheckArgs),
}

/// Explain whether ROLE may read or write PATH, and which rule decides (exit 0 allowed, 1 refused)
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard acl check --as creator-code --task t1 --write tasks/t1/result.json
  clawboard acl check --as assistant --read escalations/20261121T101500.123456Z-3f2a.json
  clawboard acl check --as body-worker --read board:meta.intent     # a task's board (seed 000's zone table)")]
pub struct CheckArgs {
    /// The role id (gm, validator, platform-pm, assistant, any *-pm, any other role = worker; or human, daemon)
    #[arg(long = "as", value_name = "ROLE")]
    pub role: String,
    /// The task the role runs for (a worker writes only inside it)
    #[arg(long, value_name = "ID")]
    pub task: Option<String>,
    /// Check reading
    #[arg(long, conflicts_with = "write", required_unless_present = "write")]
    pub read: bool,
    /// Check writing
    #[arg(long)]
    pub write: bool,
    /// The path, relative to the blackboard root; or `board:ZONE.KEY` for a task's
    /// board (the role's component type comes from its [roles.ID] entry)
    pub path: String,
}

pub fn run(c: AclCommand, s: &Settings) -> anyhow::Result<u8> {
    let AclCommand::Check(a) = c;
    let (acl, source) = crate::config::engine::load_acl(s)?;
    let op = if a.write { Op::Write } else { Op::Read };
    let d = match a.path.strip_prefix("board:") {
        Some(p) => {
            let path = clawboard_board::BoardPath::parse(p)
                .map_err(|e| BadInput(format!("{}: at position {}: {}", a.path, e.pos + "board:".len(), e.reason)))?;
            let (component, how) = match s.roles.roles.get(&a.role) {
                Some(r) => r.component_of(&a.role),
                None => clawboard_core::acl::Component::default_for_role(&a.role),
            };
            let bop = if a.write { clawboard_core::acl::BoardOp::Write } else { clawboard_core::acl::BoardOp::Read };
            acl.check_board(&a.role, component, &how, bop, path.zone)
        }
        None => acl.check(&a.role, a.task.as_deref(), op, &a.path),
    };
    if s.json {
        output::json(
            &serde_json::json!({"acl": source, "role": a.role, "task": a.task, "op": op, "path": a.path, "decision": d}),
        )?;
    } else {
        let verb = if a.write { "write" } else { "read" };
        outln!(
            "{}: {} may {}{verb} {}",
            if d.allowed { "allowed" } else { "refused" },
            a.role,
            if d.allowed { "" } else { "not " },
            output::printable(&format!("{:?}", a.path))
        )?;
        outln!("rule: {}", d.rule)?;
        for step in &d.why {
            outln!("  - {}", output::printable(step))?;
        }
        outln!("acl: {source}")?;
    }
    Ok(if d.allowed { EXIT_OK } else { EXIT_FAILURE })
}

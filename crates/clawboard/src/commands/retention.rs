//! `clawboard retention plan|run`: apply `retention.yaml` to the tree.

use clap::{Args, Subcommand};
use clawboard_core::retention::{self, Item, Plan};

use crate::cli::EXIT_OK;
use crate::commands::open_store;
use crate::config::Settings;
use crate::output::{self, Table};

/// Apply the retention policy (retention.yaml)
#[derive(Debug, Subcommand)]
#[command(after_help = "A task goes only when its content is confirmed in the bucket (with sync on)
and its memory harvest is in a pushed archive commit (with the archive on);
otherwise it is held back and `plan` says why. Tasks still pending or running
never go. The daemon runs this on retention.schedule (hourly).

Examples:
  clawboard retention plan
  clawboard retention plan --json
  clawboard retention run
  clawboard retention run --force      # also what is held back: loudly, and only if you must")]
pub enum RetentionCommand {
    Plan(PlanArgs),
    Run(RunArgs),
}

/// Show what would be deleted, what is held back and why
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard retention plan
  clawboard retention plan --json")]
pub struct PlanArgs {}

/// Delete what the policy says is due (deletions reach the bucket as deletes)
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard retention run
  clawboard retention run --force")]
pub struct RunArgs {
    /// Also delete what is held back (not yet in the bucket or the archive)
    #[arg(long)]
    pub force: bool,
}

/// The plan for now, with the policy's source.
pub fn plan_now(s: &Settings) -> anyhow::Result<(Plan, String)> {
    let (policy, source) = s.retention.policy()?;
    let store = open_store(s)?;
    let guard = crate::retention::TreeGuard::new(s, &store)?;
    let summary = crate::commands::task::daemon_summary(store.root());
    Ok((retention::plan_with(&store, &policy, chrono::Utc::now(), &guard, summary.as_ref())?, source))
}

fn age(secs: i64) -> String {
    match secs {
        s if s >= 2 * 86_400 => format!("{}d", s / 86_400),
        s if s >= 3600 => format!("{}h", s / 3600),
        s => format!("{}m", s / 60),
    }
}

fn table(items: &[Item], held: bool) -> String {
    let mut t = Table::new(&["ITEM", "AGE", "RULE", if held { "HELD BACK BECAUSE" } else { "" }]);
    for i in items {
        t.row(vec![i.subject.label(), age(i.age_secs), i.because.clone(), i.held.clone().unwrap_or_default()]);
    }
    t.render()
}

pub fn run(c: RetentionCommand, s: &Settings) -> anyhow::Result<u8> {
    let (plan, source) = plan_now(s)?;
    match c {
        RetentionCommand::Plan(_) => {
            if s.json {
                output::json(&serde_json::json!({"policy": source, "plan": plan}))?;
                return Ok(EXIT_OK);
            }
            outln!("Policy: {source}")?;
            if plan.delete.is_empty() {
                outln!("Nothing is due.")?;
            } else {
                outln!("\nWould delete ({}):", plan.delete.len())?;
                out!("{}", table(&plan.delete, false))?;
            }
            if !plan.held.is_empty() {
                outln!("\nHeld back ({}):", plan.held.len())?;
                out!("{}", table(&plan.held, true))?;
            }
            outln!("\n{} more item(s) the policy covers are not due yet.", plan.kept)?;
            for skipped in &plan.skipped {
                outln!("skipped: {skipped}")?;
            }
            Ok(EXIT_OK)
        }
        RetentionCommand::Run(a) => {
            if a.force && !plan.held.is_empty() {
                eprintln!(
                    "warning: --force: deleting {} item(s) retention held back; their content may not be in the bucket or the archive",
                    plan.held.len()
                );
            }
            let store = open_store(s)?;
            let report = retention::execute(&store, &plan, a.force, &crate::retention::TreeGuard::new(s, &store)?)?;
            let records = clawboard_entries::handling::prune(&store)?;
            if s.json {
                output::json(&serde_json::json!({
                    "policy": source, "report": report, "held": plan.held.len(), "lane_records": records
                }))?;
            } else {
                outln!(
                    "Deleted {} task(s), {} file(s), {} memory-queue entr{}, {} lane record(s){}; {} held back.",
                    report.tasks,
                    report.files,
                    report.queue_entries,
                    if report.queue_entries == 1 { "y" } else { "ies" },
                    records,
                    if report.forced > 0 { format!(" ({} forced)", report.forced) } else { String::new() },
                    if a.force { 0 } else { plan.held.len() }
                )?;
                for f in &report.failed {
                    eprintln!("not deleted: {f}");
                }
            }
            Ok(if report.failed.is_empty() { EXIT_OK } else { crate::cli::EXIT_FAILURE })
        }
    }
}

//! `clawboard report daily|weekly|monthly [--date D]`: the evolution reports.

use clap::{Args, ValueEnum};
use clawboard_records::reports::{self, Kind, Period};

use crate::cli::{BadInput, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ReportKind {
    Daily,
    Weekly,
    Monthly,
}

/// Write an evolution report (reports/daily|weekly|monthly/)
#[derive(Debug, Args)]
#[command(after_help = "The report covers the UTC day, ISO week or month that contains --date
(default: today, marked partial while the period runs) and compares it with the
period before. The daemon writes the period that just ended on [reports] schedules.

Examples:
  clawboard report daily
  clawboard report weekly --date 2026-11-20     # writes reports/weekly/2026-W47.md
  clawboard report monthly --date 2026-10-01 --stdout")]
pub struct ReportArgs {
    /// Which report: daily, weekly or monthly
    #[arg(value_enum)]
    pub kind: ReportKind,
    /// A day in the period (YYYY-MM-DD, UTC)
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub date: Option<String>,
    /// Print the report instead of writing it
    #[arg(long)]
    pub stdout: bool,
}

pub fn kind_of(k: ReportKind) -> Kind {
    match k {
        ReportKind::Daily => Kind::Daily,
        ReportKind::Weekly => Kind::Weekly,
        ReportKind::Monthly => Kind::Monthly,
    }
}

pub fn run(a: ReportArgs, s: &Settings) -> anyhow::Result<u8> {
    let now = chrono::Utc::now();
    let day = match &a.date {
        None => now.date_naive(),
        Some(d) => chrono::NaiveDate::parse_from_str(d, "%Y-%m-%d")
            .map_err(|e| BadInput(format!("--date {d:?}: not a date like 2026-11-20 ({e})")))?,
    };
    let store = open_store(s)?;
    let period = Period::containing(kind_of(a.kind), day);
    if a.stdout {
        out!("{}", reports::render(&store, period, now, s.retention.kept())?)?;
        return Ok(EXIT_OK);
    }
    let rel = reports::write(&store, period, now, s.retention.kept())?;
    if s.json {
        crate::output::json(&serde_json::json!({"report": rel, "period": period.name()}))?;
    } else {
        outln!("Wrote {rel}")?;
    }
    Ok(EXIT_OK)
}

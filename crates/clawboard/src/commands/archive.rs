use clap::{Args, Subcommand};
use clawboard_archive::{Archive, HarvestReport, RunReport};

use crate::cli::{BadInput, EXIT_FAILURE, EXIT_OK};
use crate::commands::open_store;
use crate::config::Settings;
use crate::output;

/// The memory archive: the git `memory` branch
#[derive(Debug, Subcommand)]
#[command(after_help = "The archive is a bare git repository in .clawboard/archive/memory.git whose
branch (archive.branch, default memory) holds the memory extracted from the tree
(docs/ARCHIVE.md). With archive.remote set (https:// or ssh), each run pushes it;
a token comes from CLAWBOARD_GIT_TOKEN, else GITHUB_TOKEN, else archive.token_file.
The daemon runs it on archive.schedule (every 6 hours); these commands work with
or without it.

Examples:
  clawboard archive now        # harvest, extract, commit, push
  clawboard archive status     # last commit, last push, pending, last error
  clawboard archive log -n 5   # the newest commits")]
pub enum ArchiveCommand {
    Now(NowArgs),
    Status(StatusArgs),
    Log(LogArgs),
}

/// Harvest, extract and commit now, then push when a remote is configured
#[derive(Debug, Args)]
#[command(after_help = "Exit code 0 when everything was archived (and pushed), 1 when a file was
refused or the push failed (the commit stays and is pushed on the next run).

Examples:
  clawboard archive now
  clawboard archive now --no-harvest
  CLAWBOARD_GIT_TOKEN=… clawboard archive now --json")]
pub struct NowArgs {
    /// Only extract, commit and push (the harvests as they are)
    #[arg(long)]
    pub no_harvest: bool,
}

/// Last commit, last push, commits not pushed yet, last error
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard archive status
  clawboard archive status --json")]
pub struct StatusArgs {}

/// The newest commits of the memory branch
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  clawboard archive log
  clawboard archive log -n 50 --json")]
pub struct LogArgs {
    /// How many commits
    #[arg(short = 'n', long, default_value_t = 20)]
    pub count: usize,
}

/// Regenerate the daily and weekly memory harvests
#[derive(Debug, Args)]
#[command(after_help = "Gathers the memory cells of every task's memory-harvest.json into
harvest/daily/{YYYY-MM-DD}.json (days in UTC, by harvestedAt) and the best cells
per role (harvest.top_per_role) into harvest/weekly/{YYYY-Www}.json, then marks the
harvested tasks' memory-queue entries completed. Without --date: today, yesterday
and every day a pending queue entry's task was harvested. Running it again
changes nothing.

Examples:
  clawboard harvest
  clawboard harvest --date 2026-11-20 --date 2026-11-21")]
pub struct HarvestArgs {
    /// A day to harvest (UTC), YYYY-MM-DD; repeat for more
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub date: Vec<chrono::NaiveDate>,
}

/// The archive of the configured tree, for this node.
pub fn open(s: &Settings) -> anyhow::Result<Archive> {
    let store = open_store(s)?;
    if !s.archive.enabled {
        return Err(BadInput(format!(
            "the archive is off in {} (archive.enabled = false)",
            s.config_file.as_ref().map_or("the config".to_owned(), |p| p.display().to_string())
        ))
        .into());
    }
    let node = clawboard_sync::node_id(store.root(), s.node_id.as_deref()).map_err(crate::cli::sync_error)?;
    Ok(Archive::new(store, s.archive.settings.clone(), node))
}

pub fn run(c: ArchiveCommand, s: &Settings) -> anyhow::Result<u8> {
    let archive = open(s)?;
    match c {
        ArchiveCommand::Now(a) => now(&archive, s, a.no_harvest),
        ArchiveCommand::Status(_) => status(&archive, s),
        ArchiveCommand::Log(a) => log(&archive, s, a.count),
    }
}

fn now(archive: &Archive, s: &Settings, no_harvest: bool) -> anyhow::Result<u8> {
    let harvest = match no_harvest {
        true => HarvestReport::default(),
        false => archive.harvest(chrono::Utc::now(), &s.archive.harvest, None)?,
    };
    let report = archive.run(chrono::Utc::now());
    // A run that committed and then failed to push still says what it committed.
    let made = match &report {
        Ok(r) => Some(r),
        Err(e) => e.report(),
    };
    if s.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            harvest: &'a HarvestReport,
            #[serde(skip_serializing_if = "Option::is_none")]
            archive: Option<&'a RunReport>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<String>,
        }
        output::json(&Out { harvest: &harvest, archive: made, error: report.as_ref().err().map(ToString::to_string) })?;
    } else {
        if !no_harvest {
            print_harvest(&harvest)?;
        }
        if let Some(r) = made {
            print_run(archive, r)?;
        }
    }
    let report = report?;
    Ok(if report.commit.problems.is_empty() && harvest.problems.is_empty() { EXIT_OK } else { EXIT_FAILURE })
}

pub fn print_harvest(h: &HarvestReport) -> std::io::Result<()> {
    outln!(
        "harvest: {} file(s) written, {} unchanged, {} memory-queue entr{} completed",
        h.written.len(),
        h.unchanged,
        h.queue_completed,
        if h.queue_completed == 1 { "y" } else { "ies" }
    )?;
    for p in &h.problems {
        eprintln!("warning: harvest skipped {p}");
    }
    Ok(())
}

fn print_run(archive: &Archive, r: &RunReport) -> std::io::Result<()> {
    let c = &r.commit;
    match &c.commit {
        Some(id) => outln!(
            "archive: commit {} on {} ({}; {} sources, {} read) in {} ms",
            id.get(..12).unwrap_or(id),
            archive.settings().branch,
            c.summary(),
            c.sources,
            c.read,
            c.elapsed_ms
        )?,
        None => outln!("archive: nothing changed ({} sources, {} read) in {} ms", c.sources, c.read, c.elapsed_ms)?,
    }
    for p in &c.problems {
        eprintln!("error: {p}");
    }
    match (&r.push, archive.settings().remote.as_deref()) {
        (Some(p), Some(remote)) => match &p.pushed {
            Some(id) => outln!(
                "archive: {} at {} on {} ({} attempt(s), {} merge(s)) in {} ms",
                archive.settings().branch,
                id.get(..12).unwrap_or(id),
                clawboard_archive::repo::redact(remote),
                p.attempts,
                p.merges,
                p.elapsed_ms
            )?,
            None => outln!("archive: nothing to push")?,
        },
        // The run committed, then its push failed: the error that follows says why.
        (None, Some(remote)) => outln!(
            "archive: not pushed to {}: the commit stays in this node's repository and the next run pushes it",
            clawboard_archive::repo::redact(remote)
        )?,
        _ => outln!("archive: no remote (archive.remote): the commits stay in this node's repository")?,
    }
    Ok(())
}

fn status(archive: &Archive, s: &Settings) -> anyhow::Result<u8> {
    let st = archive.status()?;
    if s.json {
        output::json(&st)?;
        return Ok(EXIT_OK);
    }
    let short = |id: &Option<String>| id.as_deref().map_or("-".to_owned(), |i| i.chars().take(12).collect());
    let at = |t: &Option<String>| t.as_deref().map_or(String::new(), |t| format!(" at {t}"));
    let mut t = output::Table::new(&["", ""]);
    t.row(vec!["repository".into(), st.repository.clone()]);
    t.row(vec!["branch".into(), format!("{} ({} commits, head {})", st.branch, st.commits, short(&st.head))]);
    t.row(vec![
        "remote".into(),
        st.remote.clone().unwrap_or_else(|| "none: commits stay local (set archive.remote)".into()),
    ]);
    t.row(vec!["last run".into(), st.file.last_run_at.clone().unwrap_or_else(|| "never".into())]);
    t.row(vec!["last commit".into(), format!("{}{}", short(&st.file.last_commit), at(&st.file.last_commit_at))]);
    if st.remote.is_some() {
        t.row(vec!["last push".into(), format!("{}{}", short(&st.file.last_pushed), at(&st.file.last_push_at))]);
        t.row(vec!["pending".into(), format!("{} commit(s) not pushed", st.pending)]);
    }
    t.row(vec![
        "last error".into(),
        match &st.file.last_error {
            Some(e) => format!("{e}{}", at(&st.file.last_error_at)),
            None => "none".into(),
        },
    ]);
    // The header row is empty: skip it.
    out!("{}", t.render().split_once('\n').map_or("", |(_, rest)| rest))?;
    Ok(EXIT_OK)
}

fn log(archive: &Archive, s: &Settings, n: usize) -> anyhow::Result<u8> {
    let entries = archive.log(n)?;
    if s.json {
        output::json(&entries)?;
        return Ok(EXIT_OK);
    }
    if entries.is_empty() {
        outln!("no commits yet (run `clawboard archive now`)")?;
        return Ok(EXIT_OK);
    }
    let remote = archive.settings().remote.is_some();
    let mut t = output::Table::new(&["COMMIT", "TIME", "FILES", "PUSHED", "MESSAGE"]);
    for e in entries {
        t.row(vec![
            e.id.chars().take(12).collect(),
            e.time,
            e.files.to_string(),
            match (remote, e.pushed) {
                (false, _) => "-".into(),
                (true, true) => "yes".into(),
                (true, false) => "no".into(),
            },
            output::truncate(&e.message, 80),
        ]);
    }
    out!("{}", t.render())?;
    Ok(EXIT_OK)
}

pub fn harvest(a: HarvestArgs, s: &Settings) -> anyhow::Result<u8> {
    let days = if a.date.is_empty() { None } else { Some(a.date) };
    let now = chrono::Utc::now();
    let report = if s.archive.enabled {
        open(s)?.harvest(now, &s.archive.harvest, days)?
    } else {
        clawboard_archive::harvest::run(&open_store(s)?, now, &s.archive.harvest, days)?
    };
    if s.json {
        output::json(&report)?;
    } else {
        print_harvest(&report)?;
        for w in &report.written {
            outln!("  wrote {w}")?;
        }
    }
    Ok(if report.problems.is_empty() { EXIT_OK } else { EXIT_FAILURE })
}

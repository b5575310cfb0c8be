//! Prometheus text exposition (format 0.0.4) of the daemon: served at `/metrics` on
//! the web listener and on the Unix socket. Counters and the histogram live in
//! memory since start; gauges are read from the tree at scrape time.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clawboard_core::Store;
use clawboard_core::formats::{Level, TaskStatus};

/// A cumulative histogram with fixed buckets (seconds).
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

/// Intake to dispatch: from milliseconds (an idle daemon) to minutes (a full queue).
pub const LATENCY_BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if secs <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros.fetch_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", c.load(Ordering::Relaxed));
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let _ = writeln!(out, "{name}_sum {}", self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6);
        let _ = writeln!(out, "{name}_count {count}");
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value, escaped as the text format asks.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// What a scrape reports; the parts that need the daemon's memory are passed in.
pub struct Inputs<'a> {
    pub store: &'a Store,
    pub latency: &'a Histogram,
    pub runs: Vec<(&'static str, u64)>,
    pub queue: &'a super::dispatch::QueueStats,
    pub sync_enabled: bool,
    pub archive_enabled: bool,
    pub notify_failures: u64,
    pub web_refusals: u64,
    pub acl_refusals: u64,
    pub board_refusals: u64,
    /// The runner's jobs, each with its row.
    pub jobs: Vec<(&'static str, std::sync::Arc<super::jobs::JobStats>)>,
    /// The recorder's last sequence number (a consumer's lag is measured from it).
    pub journal_seq: u64,
}

/// The whole exposition. Reads the tree (tasks, escalations, sync and archive state).
pub fn render(i: &Inputs) -> String {
    let mut o = String::new();
    let root = i.store.root();
    // Sources that could not be read: their gauges would read 0, so they are named.
    let mut errors: Vec<&str> = Vec::new();
    task_metrics(&mut o, i, &mut errors);

    family(&mut o, "clawboard_queue", "gauge", "Tasks in the daemon's queue by state.");
    let _ = writeln!(o, "clawboard_queue{{state=\"waiting\"}} {}", i.queue.waiting);
    let _ = writeln!(o, "clawboard_queue{{state=\"running\"}} {}", i.queue.running);
    let _ = writeln!(o, "clawboard_queue{{state=\"held\"}} {}", i.queue.held);

    i.latency.render(
        &mut o,
        "clawboard_intake_to_dispatch_seconds",
        "Time from a task's intake to the start of its first drive.",
    );

    family(&mut o, "clawboard_role_runs_total", "counter", "Role runs since the daemon started, by outcome.");
    let mut runs: BTreeMap<&str, u64> = ["ok", "failed", "timed_out", "interrupted"].iter().map(|k| (*k, 0)).collect();
    runs.extend(i.runs.iter().copied());
    for (outcome, n) in &runs {
        let _ = writeln!(o, "clawboard_role_runs_total{{outcome=\"{}\"}} {n}", label(outcome));
    }

    escalation_metrics(&mut o, i, &mut errors);
    if i.sync_enabled && !sync_metrics(&mut o, root) {
        errors.push("sync");
    }
    if i.archive_enabled {
        archive_metrics(&mut o, root);
    }
    let counters = [
        (
            "clawboard_notify_failures_total",
            "Escalation notifications that failed after all retries.",
            i.notify_failures,
        ),
        ("clawboard_web_refusals_total", "Web requests refused (no or wrong token, cross-site POST).", i.web_refusals),
        ("clawboard_acl_refusals_total", "Role writes refused: unknown or expired token, or the ACL.", i.acl_refusals),
        (
            "clawboard_board_refusals_total",
            "Board requests of roles refused: unknown or expired token, another task, or seed 000's zone table.",
            i.board_refusals,
        ),
    ];
    for (name, help, n) in counters {
        family(&mut o, name, "counter", help);
        let _ = writeln!(o, "{name} {n}");
    }
    jobs(&mut o, i);
    crate::telemetry::render_metrics(&mut o);
    clawboard_roles::telemetry::metrics::render(&mut o);
    family(
        &mut o,
        "clawboard_scrape_errors",
        "gauge",
        "1 for each source this scrape could not read (its gauges read 0).",
    );
    for source in ["tasks", "escalations", "sync"] {
        let _ = writeln!(o, "clawboard_scrape_errors{{source=\"{source}\"}} {}", u8::from(errors.contains(&source)));
    }
    o
}

/// Tasks in `tasks/` by status, and those whose `task.json` cannot be read.
fn task_metrics(o: &mut String, i: &Inputs, errors: &mut Vec<&str>) {
    let mut by_status: BTreeMap<&str, u64> =
        [TaskStatus::Pending, TaskStatus::Running, TaskStatus::Completed, TaskStatus::Failed]
            .iter()
            .map(|s| (s.as_str(), 0))
            .collect();
    let mut unreadable = 0;
    let tasks = i.store.tasks().unwrap_or_else(|e| {
        tracing::warn!("metrics: cannot list tasks/: {e}");
        errors.push("tasks");
        Vec::new()
    });
    for (_, t) in tasks {
        match t {
            Ok(t) => *by_status.entry(t.status.as_str()).or_default() += 1,
            Err(_) => unreadable += 1,
        }
    }
    family(o, "clawboard_tasks", "gauge", "Tasks in tasks/ by status.");
    for (s, n) in &by_status {
        let _ = writeln!(o, "clawboard_tasks{{status=\"{s}\"}} {n}");
    }
    family(o, "clawboard_tasks_unreadable", "gauge", "Task directories whose task.json cannot be read.");
    let _ = writeln!(o, "clawboard_tasks_unreadable {unreadable}");
}

/// Undecided escalations by level.
fn escalation_metrics(o: &mut String, i: &Inputs, errors: &mut Vec<&str>) {
    let mut pending: BTreeMap<&str, u64> =
        [Level::Critical, Level::High, Level::Normal].iter().map(|l| (l.as_str(), 0)).collect();
    let filter = clawboard_records::review::Filter { level: None, pending_only: true };
    match clawboard_records::review::list(i.store, filter) {
        Ok((entries, _)) => {
            for e in entries {
                *pending.entry(e.escalation.level.as_str()).or_default() += 1;
            }
        }
        Err(e) => {
            tracing::warn!("metrics: cannot list escalations/: {e}");
            errors.push("escalations");
        }
    }
    family(o, "clawboard_escalations_pending", "gauge", "Undecided escalations by level.");
    for (l, n) in &pending {
        let _ = writeln!(o, "clawboard_escalations_pending{{level=\"{l}\"}} {n}");
    }
}

/// One row per background job of the runner (see `jobs.rs`).
fn jobs(o: &mut String, i: &Inputs) {
    use std::sync::atomic::Ordering::Relaxed;
    family(o, "clawboard_job_rounds_total", "counter", "Rounds (a worker's runs, a consumer's batches) per job.");
    for (name, s) in &i.jobs {
        let _ = writeln!(o, "clawboard_job_rounds_total{{job=\"{}\"}} {}", label(name), s.rounds.load(Relaxed));
    }
    family(o, "clawboard_job_failures_total", "counter", "Rounds that failed, per job.");
    for (name, s) in &i.jobs {
        let _ = writeln!(o, "clawboard_job_failures_total{{job=\"{}\"}} {}", label(name), s.failures.load(Relaxed));
    }
    family(o, "clawboard_job_failing", "gauge", "1 while a job's last round failed.");
    for (name, s) in &i.jobs {
        let _ = writeln!(o, "clawboard_job_failing{{job=\"{}\"}} {}", label(name), s.failing.load(Relaxed));
    }
    family(o, "clawboard_job_lag_entries", "gauge", "Journal entries a consumer has not handled yet.");
    for (name, s) in i.jobs.iter().filter(|(_, s)| s.consumer) {
        let lag = i.journal_seq.saturating_sub(s.position.load(Relaxed));
        let _ = writeln!(o, "clawboard_job_lag_entries{{job=\"{}\"}} {lag}", label(name));
    }
}

fn age_secs(rfc3339: &str) -> Option<f64> {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Some(((chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_milliseconds() as f64 / 1000.0).max(0.0))
}

/// False when the pending changes could not be read.
fn sync_metrics(o: &mut String, root: &Path) -> bool {
    let ok = match clawboard_sync::push::pending(root) {
        Ok(p) => {
            family(o, "clawboard_sync_pending_changes", "gauge", "Journal entries not pushed to the bucket yet.");
            let _ = writeln!(o, "clawboard_sync_pending_changes {}", p.entries);
            family(o, "clawboard_sync_lag_seconds", "gauge", "Age of the oldest change not pushed yet (0 when none).");
            let _ = writeln!(o, "clawboard_sync_lag_seconds {}", p.oldest_age_secs.unwrap_or(0));
            true
        }
        Err(e) => {
            tracing::warn!("metrics: cannot read the sync journal cursor: {e}");
            false
        }
    };
    if let Some(s) = clawboard_sync::push::read_status(root) {
        if let Some(age) = s.last_push_at.as_deref().and_then(age_secs) {
            family(o, "clawboard_sync_last_push_age_seconds", "gauge", "Seconds since the last successful push.");
            let _ = writeln!(o, "clawboard_sync_last_push_age_seconds {age}");
        }
        if let Some(age) = s.last_pull_at.as_deref().and_then(age_secs) {
            family(o, "clawboard_sync_last_pull_age_seconds", "gauge", "Seconds since the last successful pull.");
            let _ = writeln!(o, "clawboard_sync_last_pull_age_seconds {age}");
        }
    }
    ok
}

fn archive_metrics(o: &mut String, root: &Path) {
    let s = clawboard_archive::repo::read_status_file(root);
    family(
        o,
        "clawboard_archive_last_commit_age_seconds",
        "gauge",
        "Seconds since the last archive commit (absent before the first).",
    );
    if let Some(age) = s.last_commit_at.as_deref().and_then(age_secs) {
        let _ = writeln!(o, "clawboard_archive_last_commit_age_seconds {age}");
    }
    family(
        o,
        "clawboard_archive_last_push_age_seconds",
        "gauge",
        "Seconds since the last archive push (absent before the first).",
    );
    if let Some(age) = s.last_push_at.as_deref().and_then(age_secs) {
        let _ = writeln!(o, "clawboard_archive_last_push_age_seconds {age}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(50));
        h.observe(Duration::from_millis(500));
        h.observe(Duration::from_secs(5));
        let mut o = String::new();
        h.render(&mut o, "x", "help");
        assert!(o.contains("x_bucket{le=\"0.1\"} 1\n"), "{o}");
        assert!(o.contains("x_bucket{le=\"1\"} 2\n"), "{o}");
        assert!(o.contains("x_bucket{le=\"+Inf\"} 3\n"), "{o}");
        assert!(o.contains("x_sum 5.55\n") && o.contains("x_count 3\n"), "{o}");
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}

//! Evolution reports (seed 002 "进化报告"): `reports/daily/{YYYY-MM-DD}.md`,
//! `reports/weekly/{YYYY-Www}.md`, `reports/monthly/{YYYY-MM}.md`.
//!
//! A report covers one UTC period and compares it with the one before: tasks by
//! type and outcome, validator scores, iterations, escalations and decisions, the
//! top memory cells, and each PM's results. Everything comes from the tree's
//! timestamps (`completedAt`, `createdAt`, `decidedAt`, harvest file names), never
//! from the clock, except the "generated at" line: for a fixed tree and a fixed
//! `now` the report is byte-for-byte the same.

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use clawboard_core::formats::{DailyHarvest, Decision, HarvestedCell, Level, TaskStatus};
use clawboard_core::{Error, RelPath, Store, layout};

use crate::review::{self, Filter, TaskView};

/// How long retention keeps ended tasks (`None`: forever, or retention is off). A
/// report reaching back further says that its counts from before then are short.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Kept {
    pub completed: Option<std::time::Duration>,
    pub failed: Option<std::time::Duration>,
}

impl Kept {
    /// What `policy` keeps, for a tree where retention runs.
    pub fn of(policy: &clawboard_core::retention::Policy) -> Kept {
        use clawboard_core::retention::{Keep, Rule};
        let kept = |r: Rule| match policy.keep(r) {
            Keep::For(d) => Some(d),
            Keep::Permanent => None,
        };
        Kept { completed: kept(Rule::TasksCompleted), failed: kept(Rule::TasksFailed) }
    }

    /// A line for each kind of ended task that retention may have deleted from a
    /// report that reaches back to `from`, made at `now`.
    fn notes(&self, from: DateTime<Utc>, now: DateTime<Utc>) -> Vec<String> {
        let mut out = Vec::new();
        for (status, key, keep) in [
            ("completed", "retention.tasks.completed", self.completed),
            ("failed", "retention.tasks.failed", self.failed),
        ] {
            let Some(keep) = keep else { continue };
            let Some(horizon) = Duration::from_std(keep).ok().and_then(|d| now.checked_sub_signed(d)) else { continue };
            if horizon > from {
                out.push(format!(
                    "- Retention deletes {status} tasks {} after they end (`{key}`): those that ended before {} may be gone from the tree, so the counts of {status} tasks before then (and their submitted, type, score and PM figures) are short.",
                    clawboard_core::retention::human(keep),
                    horizon.format("%Y-%m-%dT%H:%M:%SZ")
                ));
            }
        }
        out
    }
}

/// The three kinds of report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Daily,
    Weekly,
    Monthly,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Daily => "daily",
            Kind::Weekly => "weekly",
            Kind::Monthly => "monthly",
        }
    }
}

/// One UTC day, ISO week or month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    pub kind: Kind,
    /// The first day.
    pub first: NaiveDate,
}

impl Period {
    /// The period of `kind` that contains `day`.
    pub fn containing(kind: Kind, day: NaiveDate) -> Period {
        let first = match kind {
            Kind::Daily => day,
            Kind::Weekly => day - Duration::days(i64::from(day.weekday().num_days_from_monday())),
            Kind::Monthly => day.with_day(1).unwrap_or(day),
        };
        Period { kind, first }
    }

    /// The day after the last one.
    pub fn end(&self) -> NaiveDate {
        match self.kind {
            Kind::Daily => self.first + Duration::days(1),
            Kind::Weekly => self.first + Duration::days(7),
            Kind::Monthly => self.first.checked_add_months(chrono::Months::new(1)).unwrap_or(self.first),
        }
    }

    pub fn previous(&self) -> Period {
        Period::containing(self.kind, self.first - Duration::days(1))
    }

    /// `2026-11-21`, `2026-W47`, `2026-11`: the file name without `.md`.
    pub fn name(&self) -> String {
        match self.kind {
            Kind::Daily => self.first.format("%Y-%m-%d").to_string(),
            Kind::Weekly => {
                let w = self.first.iso_week();
                format!("{}-W{:02}", w.year(), w.week())
            }
            Kind::Monthly => self.first.format("%Y-%m").to_string(),
        }
    }

    /// `reports/daily/2026-11-21.md` and so on.
    pub fn rel(&self) -> String {
        layout::report_file(self.kind.name(), &self.name())
    }

    fn bounds(&self) -> (DateTime<Utc>, DateTime<Utc>) {
        (self.first.and_time(chrono::NaiveTime::MIN).and_utc(), self.end().and_time(chrono::NaiveTime::MIN).and_utc())
    }

    fn contains(&self, t: DateTime<Utc>) -> bool {
        let (a, b) = self.bounds();
        a <= t && t < b
    }

    fn days(&self) -> impl Iterator<Item = NaiveDate> + '_ {
        self.first.iter_days().take_while(|d| *d < self.end())
    }
}

fn utc(t: &clawboard_core::Timestamp) -> DateTime<Utc> {
    t.instant().with_timezone(&Utc)
}

/// What the tree holds, read once for both periods.
struct Facts {
    tasks: Vec<TaskView>,
    escalations: Vec<review::EscalationFile>,
}

/// The numbers of one period.
#[derive(Default)]
struct Stats {
    submitted: usize,
    completed: usize,
    failed: usize,
    by_type: BTreeMap<String, (usize, usize)>,
    scores: Vec<f64>,
    iterations: Vec<f64>,
    first_pass: usize,
    raised: BTreeMap<Level, usize>,
    approved: usize,
    rejected: usize,
    /// PM → (tasks, completed, failed, scores, iterations)
    pms: BTreeMap<String, PmStats>,
}

#[derive(Default)]
struct PmStats {
    completed: usize,
    failed: usize,
    scores: Vec<f64>,
    iterations: Vec<f64>,
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn rate(ok: usize, all: usize) -> Option<f64> {
    (all > 0).then(|| ok as f64 / all as f64)
}

fn ended_in(t: &TaskView, p: &Period) -> bool {
    matches!(t.status, TaskStatus::Completed | TaskStatus::Failed)
        && t.completed_at.as_ref().is_some_and(|c| p.contains(utc(c)))
}

impl Stats {
    fn of(facts: &Facts, p: &Period) -> Stats {
        let mut s = Stats::default();
        for t in &facts.tasks {
            if p.contains(utc(&t.created_at)) {
                s.submitted += 1;
            }
            if !ended_in(t, p) {
                continue;
            }
            let done = t.status == TaskStatus::Completed;
            let cell = s.by_type.entry(t.kind.clone()).or_default();
            let pm = s.pms.entry(t.pm.clone().unwrap_or_else(|| "(none)".to_owned())).or_default();
            if done {
                s.completed += 1;
                cell.0 += 1;
                pm.completed += 1;
            } else {
                s.failed += 1;
                cell.1 += 1;
                pm.failed += 1;
            }
            if let (Some(score), Some(i)) = (t.score, t.iterations) {
                s.scores.push(score);
                s.iterations.push(f64::from(i));
                pm.scores.push(score);
                pm.iterations.push(f64::from(i));
                if i == 1 && t.pass == Some(true) {
                    s.first_pass += 1;
                }
            }
        }
        for e in &facts.escalations {
            if e.raised_at().is_some_and(|t| p.contains(t)) {
                *s.raised.entry(e.escalation.level).or_default() += 1;
            }
            if e.escalation.decided_at.as_ref().is_some_and(|t| p.contains(utc(t))) {
                match e.escalation.decision {
                    Some(Decision::Approved) => s.approved += 1,
                    Some(Decision::Rejected) => s.rejected += 1,
                    None => {}
                }
            }
        }
        s
    }

    fn ended(&self) -> usize {
        self.completed + self.failed
    }
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |v| format!("{v:.1}"))
}

fn pct(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |v| format!("{:.0}%", v * 100.0))
}

fn delta_count(now: usize, before: usize) -> String {
    match now.cmp(&before) {
        std::cmp::Ordering::Equal => "=".to_owned(),
        std::cmp::Ordering::Greater => format!("+{}", now - before),
        std::cmp::Ordering::Less => format!("-{}", before - now),
    }
}

fn delta_num(now: Option<f64>, before: Option<f64>, scale: f64, unit: &str) -> String {
    match (now, before) {
        (Some(a), Some(b)) => {
            let d = (a - b) * scale;
            if d.abs() < 0.05 { "=".to_owned() } else { format!("{d:+.1}{unit}") }
        }
        _ => "–".to_owned(),
    }
}

/// Markdown table cell text: one line, no pipes.
fn cell(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

fn title(p: &Period) -> String {
    let last = p.end() - Duration::days(1);
    match p.kind {
        Kind::Daily => format!("Daily report — {}", p.name()),
        Kind::Weekly => format!("Weekly report — {} ({} to {})", p.name(), p.first, last),
        Kind::Monthly => format!("Monthly report — {} ({} to {})", p.name(), p.first, last),
    }
}

/// The top memory cells harvested in the period (from `harvest/daily/`), deduplicated
/// by role and content, highest value first.
fn top_cells(store: &Store, p: &Period, n: usize) -> Vec<HarvestedCell> {
    let mut best: BTreeMap<(String, String), HarvestedCell> = BTreeMap::new();
    for day in p.days() {
        let Ok(rel) = RelPath::new(&layout::daily_harvest_file(&day.format("%Y-%m-%d").to_string())) else {
            continue;
        };
        let Ok(h) = store.read::<DailyHarvest>(&rel) else { continue };
        for c in h.cells {
            let key = (c.role_id.to_string(), c.content.clone());
            if best.get(&key).is_none_or(|b| b.value < c.value) {
                best.insert(key, c);
            }
        }
    }
    let mut cells: Vec<HarvestedCell> = best.into_values().collect();
    cells.sort_by(|a, b| {
        b.value.total_cmp(&a.value).then_with(|| a.role_id.cmp(&b.role_id)).then_with(|| a.content.cmp(&b.content))
    });
    cells.truncate(n);
    cells
}

/// Renders the report of `period` from the tree; `now` only appears as "generated at".
pub fn render(store: &Store, period: Period, now: DateTime<Utc>, kept: Kept) -> Result<String, Error> {
    let (escalations, _) = review::list(store, Filter::default())?;
    let prev = period.previous();
    // Only tasks created or ended in the two periods count.
    let (from, _) = prev.bounds();
    let (_, to) = period.bounds();
    let relevant = |t: &clawboard_core::formats::Task| {
        let within = |x: &clawboard_core::Timestamp| (from..to).contains(&utc(x));
        within(&t.created_at) || t.completed_at.as_ref().is_some_and(within)
    };
    let (tasks, _) = review::tasks(store, relevant, usize::MAX)?;
    let facts = Facts { tasks, escalations };
    let (s, b) = (Stats::of(&facts, &period), Stats::of(&facts, &prev));
    let mut o = String::new();
    header(&mut o, &period, now, kept);
    task_section(&mut o, &period, &s, &b);
    scores_section(&mut o, &period, &facts);
    escalations_section(&mut o, &period, &facts, &s, &b);
    memory_section(&mut o, store, &period);
    pm_section(&mut o, &s, &b);
    Ok(o)
}

/// The title, the period and what the numbers may miss.
fn header(o: &mut String, period: &Period, now: DateTime<Utc>, kept: Kept) {
    let prev = period.previous();
    let (from, _) = prev.bounds();
    let (start, end) = period.bounds();
    let _ = writeln!(o, "# {}\n", title(period));
    let _ = writeln!(
        o,
        "Period: {} to {} (UTC), compared with {}.",
        start.format("%Y-%m-%dT%H:%M:%SZ"),
        end.format("%Y-%m-%dT%H:%M:%SZ"),
        prev.name()
    );
    let partial = if now < end { " The period is not over yet: the numbers are partial." } else { "" };
    let _ = writeln!(o, "Generated at {}.{partial}\n", now.format("%Y-%m-%dT%H:%M:%SZ"));
    let notes = kept.notes(from, now);
    if !notes.is_empty() {
        let _ = writeln!(o, "{}\n", notes.join("\n"));
    }
}

/// The tasks' counts and rates against the previous period, and by type.
fn task_section(o: &mut String, period: &Period, s: &Stats, b: &Stats) {
    let _ = writeln!(o, "## Tasks\n");
    let _ = writeln!(o, "| | this {0} | previous {0} | change |", period_word(period.kind));
    let _ = writeln!(o, "|---|---:|---:|---:|");
    let mut row = |name: &str, a: String, bb: String, d: String| {
        let _ = writeln!(o, "| {name} | {a} | {bb} | {d} |");
    };
    row("submitted", s.submitted.to_string(), b.submitted.to_string(), delta_count(s.submitted, b.submitted));
    row("ended", s.ended().to_string(), b.ended().to_string(), delta_count(s.ended(), b.ended()));
    row("completed", s.completed.to_string(), b.completed.to_string(), delta_count(s.completed, b.completed));
    row("failed", s.failed.to_string(), b.failed.to_string(), delta_count(s.failed, b.failed));
    let (ra, rb) = (rate(s.completed, s.ended()), rate(b.completed, b.ended()));
    row("completion rate", pct(ra), pct(rb), delta_num(ra, rb, 100.0, " pts"));
    let (ma, mb) = (mean(&s.scores), mean(&b.scores));
    row("mean validator score", num(ma), num(mb), delta_num(ma, mb, 1.0, ""));
    let (ia, ib) = (mean(&s.iterations), mean(&b.iterations));
    row("mean iterations", num(ia), num(ib), delta_num(ia, ib, 1.0, ""));
    let (fa, fb) = (rate(s.first_pass, s.scores.len()), rate(b.first_pass, b.scores.len()));
    row("passed at the first iteration", pct(fa), pct(fb), delta_num(fa, fb, 100.0, " pts"));

    let _ = writeln!(o, "\n### By type and outcome\n");
    if s.by_type.is_empty() {
        let _ = writeln!(o, "No task ended in this period.");
    } else {
        let _ = writeln!(o, "| type | completed | failed | previous (completed/failed) |");
        let _ = writeln!(o, "|---|---:|---:|---:|");
        for (kind, (c, f)) in &s.by_type {
            let (pc, pf) = b.by_type.get(kind).copied().unwrap_or_default();
            let _ = writeln!(o, "| {kind} | {c} | {f} | {pc}/{pf} |");
        }
    }
}

/// Every task that ended in the period (the first 30), its score and iterations.
fn scores_section(o: &mut String, period: &Period, facts: &Facts) {
    let _ = writeln!(o, "\n## Validator scores and iterations\n");
    let mut ended: Vec<&TaskView> = facts.tasks.iter().filter(|t| ended_in(t, period)).collect();
    ended.sort_by(|a, b| {
        let at = |t: &TaskView| t.completed_at.as_ref().map(utc);
        at(a).cmp(&at(b)).then_with(|| a.task_id.cmp(&b.task_id))
    });
    if ended.is_empty() {
        let _ = writeln!(o, "No task ended in this period.");
        return;
    }
    let _ = writeln!(o, "| task | type | PM | outcome | iterations | score |");
    let _ = writeln!(o, "|---|---|---|---|---:|---:|");
    const MAX_ROWS: usize = 30;
    for t in ended.iter().take(MAX_ROWS) {
        let _ = writeln!(
            o,
            "| [{id}](../../{rel}) | {} | {} | {} | {} | {} |",
            t.kind,
            t.pm.as_deref().unwrap_or("–"),
            t.status,
            t.iterations.map_or_else(|| "–".to_owned(), |i| i.to_string()),
            num(t.score),
            id = t.task_id,
            rel = layout::task_file(&t.task_id, layout::TASK_FILE),
        );
    }
    if ended.len() > MAX_ROWS {
        let _ = writeln!(o, "\n… and {} more.", ended.len() - MAX_ROWS);
    }
}

/// Escalations raised and decided, those still waiting, and each decision.
fn escalations_section(o: &mut String, period: &Period, facts: &Facts, s: &Stats, b: &Stats) {
    let (_, end) = period.bounds();
    let _ = writeln!(o, "\n## Escalations and decisions\n");
    let levels = |st: &Stats| {
        [Level::Critical, Level::High, Level::Normal]
            .iter()
            .map(|l| format!("{} {l}", st.raised.get(l).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let raised = |st: &Stats| st.raised.values().sum::<usize>();
    let _ = writeln!(o, "- raised: {} ({}); previous {} ({})", raised(s), levels(s), raised(b), levels(b));
    let _ = writeln!(
        o,
        "- decided: {} approved, {} rejected; previous {} approved, {} rejected",
        s.approved, s.rejected, b.approved, b.rejected
    );
    let open_at_end = facts
        .escalations
        .iter()
        .filter(|e| {
            e.raised_at().is_some_and(|t| t < end)
                && e.escalation.decided_at.as_ref().is_none_or(|d| utc(d) >= end)
                && e.escalation.requires_human_approval
        })
        .count();
    let _ = writeln!(o, "- waiting for a human at the end of the period: {open_at_end}");
    let mut decided: Vec<&review::EscalationFile> = facts
        .escalations
        .iter()
        .filter(|e| e.escalation.decided_at.as_ref().is_some_and(|t| period.contains(utc(t))))
        .collect();
    decided.sort_by(|a, b| {
        let at = |e: &review::EscalationFile| e.escalation.decided_at.as_ref().map(utc);
        at(a).cmp(&at(b)).then_with(|| a.id.cmp(&b.id))
    });
    if decided.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n| decided at | escalation | level | task | decision | by | note |");
    let _ = writeln!(o, "|---|---|---|---|---|---|---|");
    for e in decided {
        let x = &e.escalation;
        let _ = writeln!(
            o,
            "| {} | {} | {} | {} | {} | {} | {} |",
            x.decided_at.as_ref().map_or("–", |t| t.as_str()),
            e.id,
            x.level,
            x.task_id.as_ref().map_or("–", |t| t.as_str()),
            x.decision.map_or("–", Decision::as_str),
            cell(x.decided_by.as_deref().unwrap_or("–")),
            cell(x.note.as_deref().unwrap_or("")),
        );
    }
}

/// The period's ten most valuable memory cells.
fn memory_section(o: &mut String, store: &Store, period: &Period) {
    let _ = writeln!(o, "\n## Top memory cells\n");
    let cells = top_cells(store, period, 10);
    if cells.is_empty() {
        let _ = writeln!(o, "No memory harvested in this period ({}/ has no cells for it).", layout::HARVEST_DAILY);
        return;
    }
    let _ = writeln!(o, "| value | role | kind | content | task |");
    let _ = writeln!(o, "|---:|---|---|---|---|");
    for c in cells {
        let _ = writeln!(
            o,
            "| {:.2} | {} | {} | {} | {} |",
            c.value,
            c.role_id,
            cell(&c.kind),
            cell(&c.content),
            c.task_id
        );
    }
}

/// Each PM's tasks of the period, against its completion rate the period before.
fn pm_section(o: &mut String, s: &Stats, b: &Stats) {
    let _ = writeln!(o, "\n## PM performance\n");
    if s.pms.is_empty() {
        let _ = writeln!(o, "No task ended in this period.");
        return;
    }
    let _ = writeln!(
        o,
        "| PM | ended | completed | failed | completion rate | mean score | mean iterations | previous completion rate |"
    );
    let _ = writeln!(o, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (pm, p) in &s.pms {
        let prev = b.pms.get(pm).and_then(|q| rate(q.completed, q.completed + q.failed));
        let _ = writeln!(
            o,
            "| {pm} | {} | {} | {} | {} | {} | {} | {} |",
            p.completed + p.failed,
            p.completed,
            p.failed,
            pct(rate(p.completed, p.completed + p.failed)),
            num(mean(&p.scores)),
            num(mean(&p.iterations)),
            pct(prev),
        );
    }
    let _ = writeln!(o, "\nAll-time figures per PM are in [{0}](../../{0}).", layout::PM_PERFORMANCE);
}

fn period_word(k: Kind) -> &'static str {
    match k {
        Kind::Daily => "day",
        Kind::Weekly => "week",
        Kind::Monthly => "month",
    }
}

/// Writes the report of `period` and returns its path (relative to the root).
pub fn write(store: &Store, period: Period, now: DateTime<Utc>, kept: Kept) -> Result<String, Error> {
    // Sealed: a copy edited by hand is then told apart when nodes' versions meet.
    let text = clawboard_core::formats::seal(&render(store, period, now, kept)?);
    let rel = period.rel();
    store.write_bytes(&RelPath::new(&rel)?, text.as_bytes())?;
    Ok(rel)
}

#[cfg(test)]
mod tests;

//! The daily and weekly harvests (`harvest/daily/{YYYY-MM-DD}.json`,
//! `harvest/weekly/{YYYY-Www}.json`), gathered from the tasks' `memory-harvest.json`.
//!
//! Days and weeks are UTC; a task belongs to the day of its `harvestedAt`. A harvest
//! is a pure function of its inputs (its `generatedAt` is the newest input's time),
//! so running it again writes nothing, and two nodes with the same tasks write the
//! same bytes.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc};
use clawboard_core::formats::{
    DailyHarvest, HarvestedCell, HarvestedPollination, MemoryQueue, QueueStatus, WeeklyHarvest,
};
use clawboard_core::{Id, RelPath, Store, layout};
use serde_json::Map;

use crate::Error;
pub use crate::source::Input;
use crate::source::{Stamp, read_input};

/// `[harvest]`.
#[derive(Debug, Clone)]
pub struct HarvestSettings {
    /// Cells kept per role in a weekly harvest (and cross-pollination candidates per source role).
    pub top_per_role: u32,
    /// The harvests' own files are read back up to this size (`archive.max_file_size`,
    /// 50 MiB), not the store's `limits.max_file_size` (16 MiB) meant for what roles
    /// write: a busy day's harvest may pass 16 MiB, and one past this could not be
    /// archived either.
    pub max_file_bytes: u64,
}

impl Default for HarvestSettings {
    fn default() -> Self {
        HarvestSettings { top_per_role: 10, max_file_bytes: crate::settings::MAX_FILE_BYTES }
    }
}

/// What a harvest run did.
#[derive(Debug, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HarvestReport {
    /// Files written (relative paths); a harvest whose content did not change is not rewritten.
    pub written: Vec<String>,
    pub unchanged: usize,
    /// Memory-queue entries marked `completed` because their task is in a daily harvest.
    pub queue_completed: usize,
    /// Inputs skipped, each naming the file and the reason.
    pub problems: Vec<String>,
}

/// The ISO week `YYYY-Www` a day belongs to.
pub fn week_of(day: NaiveDate) -> String {
    let w = day.iso_week();
    format!("{}-W{:02}", w.year(), w.week())
}

/// The seven days of an ISO week written `YYYY-Www`.
pub fn days_of(week: &str) -> Option<Vec<NaiveDate>> {
    let monday = clawboard_core::kind::parse_iso_week(week)?;
    Some((0..7).map(|d| monday + Duration::days(d)).collect())
}

/// Where the harvest remembers each task file's stamp and `harvestedAt`, so that a
/// run reads only the files of the days it harvests (and the ones that changed).
pub const INDEX: &str = layout::HARVEST_INDEX;

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Index {
    #[serde(default)]
    tasks: BTreeMap<String, (Stamp, String)>,
}

/// Reads the memory harvests of every task harvested on `since`'s day or later (all
/// of them without `since`). A file whose stamp (size, mtime, inode) is the one the
/// index recorded, with a `harvestedAt` before that, is not read again.
pub fn gather(store: &Store, since: Option<NaiveDate>, problems: &mut Vec<String>) -> Result<Vec<Input>, Error> {
    let dir = store.root().join(layout::TASKS);
    if !crate::source::real_dir(store.root(), layout::TASKS) {
        return Ok(Vec::new());
    }
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let index_path = store.root().join(INDEX);
    let old: Index = std::fs::read(&index_path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default();
    let mut index = Index::default();
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
        if clawboard_core::check_id(&name).is_err() {
            continue;
        }
        let file = entry.path().join(layout::HARVEST_FILE);
        // Never follows a symlink: the file and its task directory must be what they say.
        let Ok(meta) = std::fs::symlink_metadata(&file) else { continue };
        if !meta.is_file() || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let stamp = Stamp::of(&meta);
        if let (Some(since), Some((s, at))) = (since, old.tasks.get(&name))
            && *s == stamp
            && let Ok(t) = DateTime::parse_from_rfc3339(at)
            && t.with_timezone(&Utc).date_naive() < since
        {
            index.tasks.insert(name, (stamp, at.clone()));
            continue;
        }
        match read_input(store, &name) {
            Ok(i) => {
                index.tasks.insert(name, (stamp, i.stamp.as_str().to_owned()));
                out.push(i);
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    if index.tasks != old.tasks {
        let text =
            serde_json::to_vec(&index).map_err(|e| Error::Invalid { path: INDEX.into(), reason: e.to_string() })?;
        let dir = index_path.parent().unwrap_or(store.root());
        crate::write_state(dir, "harvest-index.json", &text)?;
    }
    out.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    Ok(out)
}

fn cells_of(i: &Input) -> impl Iterator<Item = HarvestedCell> + '_ {
    i.harvest.experiences.iter().flat_map(move |e| {
        e.cells.iter().map(move |c| HarvestedCell {
            role_id: e.role_id.clone(),
            task_id: i.task_id.clone(),
            task_type: i.task_type,
            kind: c.kind.clone(),
            content: c.content.clone(),
            value: c.value,
            extra: c.extra.clone(),
        })
    })
}

fn pollination_of(i: &Input) -> impl Iterator<Item = HarvestedPollination> + '_ {
    i.harvest.cross_pollination_candidates.iter().map(move |p| HarvestedPollination {
        task_id: i.task_id.clone(),
        from_role: p.from_role.clone(),
        to_role: p.to_role.clone(),
        pattern: p.pattern.clone(),
        value: p.value,
        extra: p.extra.clone(),
    })
}

/// Highest value first; ties in a fixed order so that the output is deterministic.
fn cell_order(a: &HarvestedCell, b: &HarvestedCell) -> std::cmp::Ordering {
    b.value
        .total_cmp(&a.value)
        .then_with(|| a.role_id.cmp(&b.role_id))
        .then_with(|| a.task_id.cmp(&b.task_id))
        .then_with(|| a.content.cmp(&b.content))
        .then_with(|| a.kind.cmp(&b.kind))
}

fn pollination_order(a: &HarvestedPollination, b: &HarvestedPollination) -> std::cmp::Ordering {
    b.value
        .total_cmp(&a.value)
        .then_with(|| a.from_role.cmp(&b.from_role))
        .then_with(|| a.to_role.cmp(&b.to_role))
        .then_with(|| a.task_id.cmp(&b.task_id))
        .then_with(|| a.pattern.cmp(&b.pattern))
}

/// One item per key, the first in `order` (the highest value), sorted by `order`.
fn dedup<T, K: Ord>(
    items: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> K,
    order: fn(&T, &T) -> std::cmp::Ordering,
) -> Vec<T> {
    let mut best: BTreeMap<K, T> = BTreeMap::new();
    for item in items {
        let k = key(&item);
        if best.get(&k).is_none_or(|old| order(&item, old).is_lt()) {
            best.insert(k, item);
        }
    }
    let mut out: Vec<T> = best.into_values().collect();
    out.sort_by(order);
    out
}

/// The same role and the same content count once, keeping the highest value.
fn dedup_cells(cells: impl IntoIterator<Item = HarvestedCell>) -> Vec<HarvestedCell> {
    dedup(cells, |c| (c.role_id.clone(), c.content.clone()), cell_order)
}

/// The same source role, target role and pattern count once.
fn dedup_pollination(items: impl IntoIterator<Item = HarvestedPollination>) -> Vec<HarvestedPollination> {
    dedup(items, |p| (p.from_role.clone(), p.to_role.clone(), p.pattern.clone()), pollination_order)
}

/// The daily harvest of `day` from `inputs` (those harvested that day); `None` when
/// no task was harvested that day.
pub fn daily(day: NaiveDate, inputs: &[Input], carried: Option<&DailyHarvest>) -> Option<DailyHarvest> {
    let todays: Vec<&Input> = inputs.iter().filter(|i| i.harvested_at.date_naive() == day).collect();
    let carried = carried.filter(|c| !c.tasks.is_empty());
    let newest = todays
        .iter()
        .map(|i| (i.harvested_at, i.stamp.clone()))
        .chain(carried.map(|c| (c.generated_at.instant().with_timezone(&Utc), c.generated_at.clone())))
        .max_by_key(|(t, _)| *t)?;
    let carried_cells = carried.into_iter().flat_map(|c| c.cells.iter().cloned());
    let carried_pollination = carried.into_iter().flat_map(|c| c.cross_pollination.iter().cloned());
    let tasks: BTreeSet<Id> = todays
        .iter()
        .map(|i| i.task_id.clone())
        .chain(carried.into_iter().flat_map(|c| c.tasks.iter().cloned()))
        .collect();
    Some(DailyHarvest {
        date: day.format("%Y-%m-%d").to_string(),
        generated_at: newest.1,
        tasks: tasks.into_iter().collect(),
        cells: dedup_cells(todays.iter().flat_map(|i| cells_of(i)).chain(carried_cells)),
        cross_pollination: dedup_pollination(todays.iter().flat_map(|i| pollination_of(i)).chain(carried_pollination)),
        extra: Map::new(),
    })
}

/// What an existing daily harvest holds of tasks not read this time: their
/// `memory-harvest.json` is gone (retention removed them) or cannot be read now (a
/// bad edit, reported as a problem). Kept, so that regenerating a day never loses
/// its memory; a task read again replaces its cells.
fn carried_over(existing: DailyHarvest, present: &BTreeSet<Id>) -> DailyHarvest {
    let gone = |t: &Id| !present.contains(t);
    DailyHarvest {
        tasks: existing.tasks.iter().filter(|t| gone(t)).cloned().collect(),
        cells: existing.cells.into_iter().filter(|c| gone(&c.task_id)).collect(),
        cross_pollination: existing.cross_pollination.into_iter().filter(|p| gone(&p.task_id)).collect(),
        ..existing
    }
}

/// The weekly harvest of `week` (`YYYY-Www`): the best `top` cells per role among
/// that week's daily harvests and the tasks harvested that week (a daily harvest
/// may outlive its tasks, and a task its daily harvest). `None` for an empty week.
pub fn weekly(week: &str, inputs: &[Input], dailies: &[DailyHarvest], top: u32) -> Option<WeeklyHarvest> {
    let days: BTreeSet<NaiveDate> = days_of(week)?.into_iter().collect();
    let dailies: Vec<&DailyHarvest> = dailies
        .iter()
        .filter(|d| NaiveDate::parse_from_str(&d.date, "%Y-%m-%d").is_ok_and(|d| days.contains(&d)))
        .collect();
    let inputs: Vec<&Input> = inputs.iter().filter(|i| days.contains(&i.harvested_at.date_naive())).collect();
    let newest = inputs
        .iter()
        .map(|i| (i.harvested_at, i.stamp.clone()))
        .chain(dailies.iter().map(|d| (d.generated_at.instant().with_timezone(&Utc), d.generated_at.clone())))
        .max_by_key(|(t, _)| *t)?;
    let cells = dedup_cells(
        dailies.iter().flat_map(|d| d.cells.iter().cloned()).chain(inputs.iter().flat_map(|i| cells_of(i))),
    );
    let pollination = dedup_pollination(
        dailies
            .iter()
            .flat_map(|d| d.cross_pollination.iter().cloned())
            .chain(inputs.iter().flat_map(|i| pollination_of(i))),
    );
    let tasks: BTreeSet<Id> =
        dailies.iter().flat_map(|d| d.tasks.iter().cloned()).chain(inputs.iter().map(|i| i.task_id.clone())).collect();
    Some(WeeklyHarvest {
        week: week.to_owned(),
        generated_at: newest.1,
        top_per_role: top,
        tasks: tasks.into_iter().collect(),
        cells: top_n(cells, top as usize, |c| c.role_id.clone()),
        cross_pollination: top_n(pollination, top as usize, |p| p.from_role.clone()),
        extra: Map::new(),
    })
}

/// The first `n` items per key of an already sorted list, in the list's order.
fn top_n<T>(sorted: Vec<T>, n: usize, key: impl Fn(&T) -> Id) -> Vec<T> {
    let mut seen: BTreeMap<Id, usize> = BTreeMap::new();
    sorted
        .into_iter()
        .filter(|item| {
            let count = seen.entry(key(item)).or_default();
            *count += 1;
            *count <= n
        })
        .collect()
}

/// Regenerates the daily harvests of `days` (default: today and yesterday, and every
/// day a `pending` memory-queue entry's task was harvested) and the weekly harvests
/// of their weeks, then marks the queue entries of harvested tasks `completed`.
pub fn run(
    store: &Store,
    now: DateTime<Utc>,
    settings: &HarvestSettings,
    days: Option<Vec<NaiveDate>>,
) -> Result<HarvestReport, Error> {
    let mut report = HarvestReport::default();
    let today = now.date_naive();
    let queue_rel = RelPath::new(layout::MEMORY_QUEUE)?;
    let queue: MemoryQueue = match store.read(&queue_rel) {
        Ok(q) => q,
        Err(clawboard_core::Error::NotFound { .. }) => MemoryQueue::default(),
        Err(e) => {
            report.problems.push(e.to_string());
            MemoryQueue::default()
        }
    };
    let pending: BTreeSet<Id> =
        queue.queue.iter().filter(|e| e.status == QueueStatus::Pending).map(|e| e.task_id.clone()).collect();

    let mut days: BTreeSet<NaiveDate> = match days {
        Some(d) => d.into_iter().collect(),
        None => [today, today - Duration::days(1)].into_iter().collect(),
    };
    // Tasks still pending in the queue add their days: a day is always rebuilt from
    // all of its tasks, so those days' tasks are all read below.
    let mut pending_inputs = Vec::new();
    for task in &pending {
        if let Ok(i) = read_input(store, task.as_str()) {
            days.insert(i.harvested_at.date_naive());
            pending_inputs.push(i);
        }
    }
    // Never a harvest of a day that has not begun.
    days.retain(|d| *d <= today);
    let earliest = days.iter().min().copied().unwrap_or(today);
    let mut inputs = gather(store, Some(earliest), &mut report.problems)?;
    for i in pending_inputs {
        if !inputs.iter().any(|x| x.task_id == i.task_id) {
            inputs.push(i);
        }
    }
    let present: BTreeSet<Id> = inputs.iter().map(|i| i.task_id.clone()).collect();
    // The harvests this run reads back are its own output, read with its own limit.
    let own = store.clone().with_max_file_bytes(settings.max_file_bytes.max(store.max_file_bytes()));

    let mut harvested: BTreeSet<Id> = BTreeSet::new();
    let mut dailies: Vec<DailyHarvest> = Vec::new();
    for day in &days {
        let rel = RelPath::new(&layout::daily_harvest_file(&day.format("%Y-%m-%d").to_string()))?;
        let carried = match own.read::<DailyHarvest>(&rel) {
            Ok(old) => Some(carried_over(old, &present)),
            Err(clawboard_core::Error::NotFound { .. }) => None,
            Err(e) => {
                report.problems.push(e.to_string());
                None
            }
        };
        let Some(h) = daily(*day, &inputs, carried.as_ref()) else { continue };
        harvested.extend(h.tasks.iter().cloned());
        save(&own, &rel, &h, &mut report)?;
        dailies.push(h);
    }
    let weeks: BTreeSet<String> = days.iter().map(|d| week_of(*d)).collect();
    for week in weeks {
        let Some(week_days) = days_of(&week) else { continue };
        // The week's other daily harvests, as written before.
        let mut all = dailies.clone();
        for d in week_days {
            let date = d.format("%Y-%m-%d").to_string();
            if all.iter().any(|h| h.date == date) {
                continue;
            }
            let rel = RelPath::new(&layout::daily_harvest_file(&date))?;
            match own.read::<DailyHarvest>(&rel) {
                Ok(h) => all.push(h),
                Err(clawboard_core::Error::NotFound { .. }) => {}
                Err(e) => report.problems.push(e.to_string()),
            }
        }
        let Some(h) = weekly(&week, &inputs, &all, settings.top_per_role) else { continue };
        let rel = RelPath::new(&layout::weekly_harvest_file(&week))?;
        save(&own, &rel, &h, &mut report)?;
    }

    if pending.iter().any(|t| harvested.contains(t)) {
        report.queue_completed = store.update_json(&queue_rel, |q: &mut MemoryQueue| {
            let mut n = 0;
            for e in q.queue.iter_mut() {
                if e.status == QueueStatus::Pending && harvested.contains(&e.task_id) {
                    e.status = QueueStatus::Completed;
                    n += 1;
                }
            }
            n
        })?;
    }
    Ok(report)
}

/// Writes `value` unless the file already holds exactly it.
fn save<T>(store: &Store, rel: &RelPath, value: &T, report: &mut HarvestReport) -> Result<(), Error>
where
    T: clawboard_core::Format + PartialEq,
{
    if store.read::<T>(rel).is_ok_and(|old| &old == value) {
        report.unchanged += 1;
        return Ok(());
    }
    store.write_json(rel, value)?;
    report.written.push(rel.as_path().display().to_string());
    Ok(())
}

#[cfg(test)]
mod tests;

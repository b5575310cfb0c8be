//! Doctor's checks of the team the config sets up: a PM for every task type, a
//! validator and a harvester (or what their absence means), each command role's
//! files where the daemon will look for them, and the blueprints that can run.

use std::path::Path;

use clawboard_core::formats::TaskType;

use super::Check;
use crate::config::Settings;

const TYPES: [TaskType; 4] = [TaskType::Coding, TaskType::Writing, TaskType::Research, TaskType::Quant];

/// Every check of the team, with `cwd` as the daemon's working directory.
pub fn checks(s: &Settings, cwd: &Path) -> Vec<Check> {
    vec![pms(s), member(s, "validator"), member(s, "harvester"), commands(s, cwd), blueprints(s)]
}

/// A PM for each task type: a task without `assignedPM` of a type with none fails.
fn pms(s: &Settings) -> Check {
    let by_type = &s.roles.lifecycle.pm_for_type;
    let missing: Vec<&str> = TYPES.iter().filter(|t| !by_type.contains_key(t)).map(|t| t.as_str()).collect();
    let set: Vec<String> = by_type.iter().map(|(t, pm)| format!("{} → {pm}", t.as_str())).collect();
    if missing.is_empty() {
        return Check::ok("team.pm", set.join(", "));
    }
    let detail = format!(
        "no PM for {}: a task of that type fails with \"no PM for this task\" unless it names its assignedPM{}",
        missing.join(", "),
        if set.is_empty() { String::new() } else { format!(" (set: {})", set.join(", ")) }
    );
    let example = missing.first().copied().unwrap_or("coding");
    Check::fail(
        "team.pm",
        detail,
        format!(
            "set [lifecycle.pm_for_type] {example} = \"ROLE\" for each, ROLE one of [roles] (a working team: config/examples/local.toml)"
        ),
    )
}

/// The validator or the harvester: named, or what running without one means.
fn member(s: &Settings, which: &str) -> Check {
    let lc = &s.roles.lifecycle;
    let (named, without) = match which {
        "validator" => (&lc.validator, "every team result passes unchecked and no task iterates"),
        _ => (&lc.harvester, "no memory is harvested from finished tasks (roles/memory-queue.json stays as it is)"),
    };
    match named {
        Some(role) => Check::ok(format!("team.{which}"), role.clone()),
        None => Check::warn(
            format!("team.{which}"),
            format!("no {which}: {without}"),
            format!("set [lifecycle] {which} = \"ROLE\" if that is not meant"),
        ),
    }
}

/// Each command role's program and file arguments, found where its runs will look.
fn commands(s: &Settings, cwd: &Path) -> Check {
    let mut bad = Vec::new();
    let (mut commands, mut others) = (0, 0);
    for (id, role) in &s.roles.roles {
        if role.command.is_none() {
            others += 1;
            continue;
        }
        commands += 1;
        if let Err(e) = clawboard_roles::runner::check_command(role, cwd) {
            bad.push(format!("roles.{id}: {e}"));
        }
    }
    let detail = format!(
        "{} role(s): {commands} command(s), {others} HTTP or model; relative paths resolve from the daemon's working directory (systemd: / unless WorkingDirectory= is set) or the role's cwd",
        commands + others
    );
    if bad.is_empty() {
        return Check::ok("team.roles", detail);
    }
    Check::fail(
        "team.roles",
        format!("{}; {detail}", bad.join("; ")),
        "give the program and its script absolute paths, or set the role's cwd (the example roles are installed in /usr/share/clawboard/roles)",
    )
}

/// The blueprints that can run, those that cannot and why, and what loads but looks wrong.
fn blueprints(s: &Settings) -> Check {
    let ids = s.blueprints.ids();
    let unavailable = s.blueprints.unavailable();
    let mut parts = Vec::new();
    if !ids.is_empty() {
        parts.push(format!("{} can run: {}", ids.len(), ids.join(", ")));
    }
    if !unavailable.is_empty() {
        // Each reason names the file and step; the role it lacks says enough here.
        let why: Vec<String> = unavailable
            .iter()
            .map(|(id, why)| match why.rsplit_once(": ") {
                Some((_, tail)) => format!("{id} ({tail})"),
                None => format!("{id} ({why})"),
            })
            .collect();
        parts.push(format!("{} cannot run here: {}", unavailable.len(), why.join("; ")));
    }
    if parts.is_empty() {
        parts.push("none defined".to_owned());
    }
    let warnings = s.blueprints.warnings();
    let detail = parts.join("; ");
    if !warnings.is_empty() {
        return Check::warn(
            "blueprints",
            format!("{detail}; {}", warnings.join("; ")),
            "lower each step's max_tokens, or run it as a skill",
        );
    }
    Check::ok("blueprints", detail)
}

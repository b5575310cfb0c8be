//! The engine's config, built from the settings in one place (the daemon's start,
//! its reload on SIGHUP, `clawboard run`), and what a reload cannot change.
//!
//! A reload builds a whole new [`EngineConfig`] (roles, lifecycle, ACL, slice
//! templates, blueprints, lanes) and swaps it in at once. The other sections
//! configure what the daemon set up at its start (the store, the bucket, the
//! archive, the web page, the jobs' schedules); a reload that changes one of them
//! is refused, naming it, and the old config stays in force.

use std::sync::Arc;

use clawboard_core::acl::{Acl, DEFAULT_ACL};
use clawboard_roles::EngineConfig;

use super::Settings;
use crate::cli::BadInput;

/// The ACL in force, and where it came from: `acl.toml` beside the config file
/// when it exists, else the embedded seed matrix.
pub fn load_acl(s: &Settings) -> anyhow::Result<(Acl, String)> {
    let beside = s.config_file.as_deref().and_then(std::path::Path::parent).map(|d| d.join("acl.toml"));
    match beside.filter(|p| p.exists()) {
        Some(p) => {
            let name = p.display().to_string();
            let text =
                std::fs::read_to_string(&p).map_err(|e| BadInput(format!("{name}: cannot read the ACL: {e}")))?;
            Ok((Acl::parse(&name, &text).map_err(|e| BadInput(e.to_string()))?, name))
        }
        None => Ok((
            Acl::parse("config/acl.toml (embedded)", DEFAULT_ACL).map_err(|e| BadInput(e.to_string()))?,
            "the embedded seed matrix".to_owned(),
        )),
    }
}

/// The engine's whole config from `s` (the ACL read now), and the ACL's source.
pub fn build(s: &Settings) -> anyhow::Result<(EngineConfig, String)> {
    let (acl, source) = load_acl(s)?;
    let config = EngineConfig {
        roles: Arc::new(s.roles.clone()),
        acl: Some(Arc::new(acl)),
        templates: Arc::new(s.templates.clone()),
        blueprints: Arc::new(s.blueprints.clone()),
        lanes: Arc::new(s.lanes.clone()),
    };
    Ok((config, source))
}

/// The config keys `new` changes that a running daemon cannot take without a
/// restart (empty: the reload may go ahead).
pub fn restart_only_changes(old: &Settings, new: &Settings) -> Vec<&'static str> {
    // Each section as it was resolved: the same text, the same setting. (Secrets
    // print redacted: a rotated key file is read at its next use anyway.)
    let sections: [(&'static str, String, String); 14] = [
        ("root", format!("{:?}", old.root), format!("{:?}", new.root)),
        ("limits.max_file_size", old.max_file_bytes.to_string(), new.max_file_bytes.to_string()),
        (
            "log",
            format!("{:?}{:?}", old.log_filter, old.log_format),
            format!("{:?}{:?}", new.log_filter, new.log_format),
        ),
        ("daemon", format!("{:?}", old.daemon), format!("{:?}", new.daemon)),
        ("node.id", format!("{:?}", old.node_id), format!("{:?}", new.node_id)),
        ("sync", format!("{:?}", old.sync), format!("{:?}", new.sync)),
        ("archive", format!("{:?}", arch(old)), format!("{:?}", arch(new))),
        ("harvest", format!("{:?}", harvest(old)), format!("{:?}", harvest(new))),
        ("reports", format!("{:?}", old.review.reports), format!("{:?}", new.review.reports)),
        ("web", format!("{:?}", old.review.web), format!("{:?}", new.review.web)),
        ("notify", format!("{:?}", old.review.notify), format!("{:?}", new.review.notify)),
        ("retention", format!("{:?}", old.retention), format!("{:?}", new.retention)),
        ("github", format!("{:?}", old.github), format!("{:?}", new.github)),
        ("telemetry", format!("{:?}", old.telemetry), format!("{:?}", new.telemetry)),
    ];
    sections.into_iter().filter(|(_, a, b)| a != b).map(|(key, _, _)| key).collect()
}

/// `[archive]` alone (`ArchiveConfig` also holds `[harvest]`).
fn arch(s: &Settings) -> (bool, &str, std::time::Duration, &clawboard_archive::ArchiveSettings) {
    let a = &s.archive;
    (a.enabled, &a.schedule.text, a.retry, &a.settings)
}

fn harvest(s: &Settings) -> (&str, &clawboard_archive::HarvestSettings) {
    (&s.archive.harvest_schedule.text, &s.archive.harvest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::resolve_at;

    #[test]
    fn what_the_engine_runs_by_reloads_and_the_rest_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let resolve_text = |text: &str| resolve_at(dir.path(), text);
        let base = "[roles.w]\ncommand = [\"true\"]\n";
        let old = resolve_text(base);
        let same = resolve_text(base);
        assert!(restart_only_changes(&old, &same).is_empty(), "the same file: nothing changed");
        let roles = resolve_text("[roles.w]\ncommand = [\"false\"]\n[lifecycle]\nmax_tasks = 3\n");
        assert!(restart_only_changes(&old, &roles).is_empty(), "roles and lifecycle reload");
        let lanes = resolve_text(&format!("{base}[lanes.l.actors.Bot]\nrole = \"w\"\n"));
        assert!(restart_only_changes(&old, &lanes).is_empty(), "lanes reload");
        let moved =
            resolve_text(&format!("{base}[sync]\nschedule = \"*/7 * * * * *\"\n[web]\nlisten = \"127.0.0.1:7070\"\n"));
        assert_eq!(restart_only_changes(&old, &moved), ["sync", "web"]);
        let grace =
            resolve_text(&format!("{base}[daemon]\nshutdown_grace = \"3s\"\n[limits]\nmax_file_size = \"1 MiB\"\n"));
        assert_eq!(restart_only_changes(&old, &grace), ["limits.max_file_size", "daemon"]);
    }

    #[test]
    fn the_built_config_holds_every_part_of_the_settings() {
        let dir = tempfile::tempdir().unwrap();
        let s = resolve_at(dir.path(), "[roles.w]\ncommand = [\"true\"]\n[lanes.l.actors.Bot]\nrole = \"w\"\n");
        let (c, source) = build(&s).unwrap();
        assert!(c.roles.roles.contains_key("w"));
        assert!(c.lanes.actor_of_role("w", "any-project").is_some(), "the lane's actor");
        assert!(c.acl.is_some());
        assert_eq!(source, "the embedded seed matrix");
        assert!(c.templates.len() >= 4, "the seed's templates");
    }
}

//! clawboard-roles owns running a task: role runners (a command or an HTTP
//! endpoint), the lifecycle engine that carries a task from `pending` to
//! `completed` or `failed`, intake of dropped files, claims, and escalations.
//! It never touches the network except to call a configured HTTP role, and keeps
//! all of a task's state in its directory so any step can be resumed.
//!
//! # Layout
//! - [`config`]: `[lifecycle]` and `[roles.ID]` config.
//! - [`intake`]: inbox/task.json → validated, claimed task; rejections with reasons.
//! - [`claims`]: claim a task once; the set of active tasks to resume.
//! - [`engine`]: [`Engine::drive`], the lifecycle state machine; `engine/step.rs` runs
//!   one step with retries, backoff and fallback.
//! - [`runner`]: one run of a role; timeouts kill the process group.
//! - [`attempts`]: the record of every run, with its raw output.
//! - [`context`]: the JSON a role receives. [`output`]: what it must print.
//! - [`escalations`]: raise, hold, approve/reject. [`status_page`]: `status.md`.

pub mod attempts;
pub mod claims;
pub mod config;
pub mod context;
pub mod engine;
pub mod escalations;
pub mod gm;
pub mod intake;
pub mod output;
pub mod reports;
pub mod review;
pub mod runner;
pub mod status_page;

pub use config::{LifecycleConfig, RoleConfig, RolesConfig};
pub use engine::step::clear_active_instances;
pub use engine::{Engine, Outcome, Shutdown};

/// `n` random bytes as lowercase hex (from the OS's random source).
pub fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    if getrandom::fill(&mut buf).is_err() {
        // No OS randomness (never seen on Linux): fall back to time and pid, which
        // is still unique enough for ids, though not for secrets.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8 ^ (std::process::id() as u8).wrapping_mul(i as u8 + 1);
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// `n` random bytes as lowercase hex for a secret: only from the OS's random source,
/// `None` without one (no predictable fallback).
pub fn secret_hex(n: usize) -> Option<String> {
    let mut buf = vec![0u8; n];
    getrandom::fill(&mut buf).ok()?;
    Some(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal byte strings, in time that does not depend on where they differ (for tokens).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A fresh task id: `task-YYYYMMDD-HHMMSS-xxxxxx`.
pub fn new_task_id() -> clawboard_core::Id {
    let id = format!("task-{}-{}", chrono::Utc::now().format("%Y%m%d-%H%M%S"), random_hex(3));
    clawboard_core::Id::new(id).unwrap_or_else(|_| unreachable!("generated task ids are valid"))
}

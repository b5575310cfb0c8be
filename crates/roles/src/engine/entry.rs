//! A role run for a blackboard entry (a lane's actor, seed 004), outside any
//! task: the same runner, permits, token and kill signal as a task's step, with
//! the role's retries and backoff. No attempt files: the lane's handling record
//! keeps one line per run.

use clawboard_core::Timestamp;

use super::InstanceInfo;
use crate::runner::{self, RunIdentity, RunStatus};

/// How the runs for one entry ended.
#[derive(Debug)]
pub enum EntryRun {
    /// A run exited and its output passed the check: the output.
    Done { stdout: Vec<u8>, runs: Vec<String> },
    /// Every run failed; the last reason.
    Failed { error: String, runs: Vec<String> },
    /// The daemon is stopping; nothing was decided.
    Stopped,
}

impl crate::Engine {
    /// Runs `role_id` with `context` for entry `entry_id` until a run's stdout
    /// passes `check` or its retries are spent.
    pub async fn run_for_entry(
        &self,
        role_id: &str,
        entry_id: &str,
        context: &serde_json::Value,
        shape: &crate::reply::ReplyShape,
        check: impl Fn(&[u8]) -> Result<(), String>,
    ) -> EntryRun {
        let cfg = self.config();
        let Some(role) = cfg.roles.get(role_id) else {
            return EntryRun::Failed {
                error: format!("role {role_id:?} is not configured under [roles]"),
                runs: Vec::new(),
            };
        };
        let mut runs = Vec::new();
        let mut error = String::new();
        for retry in 0..=role.max_retries {
            if *self.shutdown.stopping.borrow() {
                return EntryRun::Stopped;
            }
            if retry > 0 {
                let delay = role.retry_backoff.saturating_mul(1 << (retry - 1).min(16));
                let mut stopping = self.shutdown.stopping.clone();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = runner::fired(&mut stopping) => return EntryRun::Stopped,
                }
            }
            let Ok(_permit) = self.roles.clone().acquire_owned().await else { return EntryRun::Stopped };
            let instance = format!("inst-{}", clawboard_core::id::random_hex(6));
            let who = RunIdentity {
                root: self.store.root().display().to_string(),
                task_id: String::new(),
                role: role_id.to_owned(),
                instance_id: instance.clone(),
                token: clawboard_core::token::secret_hex(16).unwrap_or_default(),
                sandbox: cfg.sandbox.for_role(role),
            };
            let started_at = Timestamp::now();
            self.instances.lock().push(InstanceInfo {
                id: instance.clone(),
                role: role_id.to_owned(),
                task_id: String::new(),
                step: format!("entry {entry_id}"),
                started_at: started_at.clone(),
                token: who.token.clone(),
            });
            let mut ctx = context.clone();
            if let Some(o) = ctx.as_object_mut() {
                o.insert("instanceId".into(), instance.clone().into());
                o.insert("attempt".into(), (retry + 1).into());
            }
            let bytes = serde_json::to_vec(&ctx).unwrap_or_default();
            let mut kill = self.shutdown.kill.clone();
            let out = runner::run_shaped(role, &bytes, shape, &who, &mut kill).await;
            self.instances.lock().retain(|i| i.id != instance);
            let checked = match out.status {
                RunStatus::Exited => check(&out.stdout).map_err(|e| format!("invalid output: {e}")),
                _ => Err(out.error.clone().unwrap_or_else(|| "failed".into())),
            };
            let status = match (&checked, out.status) {
                (Ok(()), _) => clawboard_records::attempts::AttemptStatus::Ok,
                (Err(_), RunStatus::Exited) => clawboard_records::attempts::AttemptStatus::Failed,
                (Err(_), s) => s.into(),
            };
            self.count_run(status);
            let tail = clawboard_records::attempts::tail(&out.stderr, 500);
            runs.push(format!(
                "{started_at} {role_id} {instance}: {}{}",
                match &checked {
                    Ok(()) => "ok".to_owned(),
                    Err(e) => e.clone(),
                },
                if tail.is_empty() || checked.is_ok() { String::new() } else { format!(" (stderr: {tail})") }
            ));
            match (checked, out.status) {
                (Ok(()), _) => return EntryRun::Done { stdout: out.stdout, runs },
                (Err(_), RunStatus::Interrupted) => return EntryRun::Stopped,
                (Err(e), _) => {
                    tracing::warn!(entry = entry_id, role = role_id, attempt = retry + 1, "entry run failed: {e}");
                    error = format!("{role_id}: {e}");
                    if out.skip_retries {
                        break;
                    }
                }
            }
        }
        EntryRun::Failed { error, runs }
    }
}

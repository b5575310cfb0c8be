//! A role run for a blackboard entry (a lane's actor, seed 004), outside any
//! task, through the same executor as a task's step (`engine/call.rs`): the
//! role's retries with backoff, its fallbacks, feedback on a refused reply,
//! permits, a token valid while it runs, the kill signal, and an attempt record
//! for every run in `.clawboard/lanes/{id}/attempts/`. After a crash, a run found
//! finished there is not run again.

use clawboard_core::lock::Lock;
use clawboard_core::{Error, Timestamp};
use clawboard_records::attempts::{self, Attempt, AttemptStatus};
use serde_json::Value;

use super::call::{self, Call, RoleOutput, Site};
use super::{InstanceInfo, StepError};
use crate::config::RoleConfig;
use crate::output::RaisedEscalation;
use crate::reply::ReplyShape;
use crate::runner::RunOutcome;

/// What to run for an entry.
#[derive(Debug, Clone)]
pub struct EntryCall<'a> {
    /// The actor's role.
    pub role: &'a str,
    pub entry_id: &'a clawboard_core::Id,
    /// The step its attempt records name: the lane and the actor (`docupdate/Aya`).
    pub step: String,
    /// What the role is handed on stdin.
    pub context: Value,
    /// The reply's shape, for a model role.
    pub shape: ReplyShape,
}

/// How the runs for one entry ended. `runs` has one line per attempt recorded
/// for the entry, oldest first.
#[derive(Debug)]
pub enum EntryRun {
    /// An attempt's output passed the check (now, or before a restart): the output.
    Done { stdout: Vec<u8>, runs: Vec<String> },
    /// Every role of the chain failed; the last reason.
    Failed { error: String, runs: Vec<String> },
    /// The daemon is stopping; nothing was decided.
    Stopped,
}

impl crate::Engine {
    /// Runs the call's role (then its fallbacks) until a run's stdout passes
    /// `check` or the retries are spent. `Err`: its records could not be written.
    pub async fn run_for_entry(
        &self,
        call: EntryCall<'_>,
        check: impl Fn(&[u8]) -> Result<(), String>,
    ) -> Result<EntryRun, Error> {
        let site = EntrySite::open(self, &call)?;
        let accept = |stdout: &[u8]| check(stdout).map(|()| Accepted(stdout.to_vec()));
        let done = match call::finished(&site, &call.step, &accept) {
            Ok(found) => found,
            Err(e) => return stopped_or(e, &site),
        };
        if let Some((_, Accepted(stdout))) = done {
            tracing::info!(entry = %call.entry_id, "its role finished before a restart; not run again");
            return Ok(EntryRun::Done { stdout, runs: site.runs() });
        }
        let chain = Call::fallbacks_of(&self.roles(), call.role);
        let run = Call { step: &call.step, chain, retries: None };
        match call::run(&site, &run, &accept).await {
            Ok((_, Accepted(stdout))) => Ok(EntryRun::Done { stdout, runs: site.runs() }),
            Err(e) => stopped_or(e, &site),
        }
    }
}

/// An entry call that did not end with an accepted output.
fn stopped_or(e: StepError, site: &EntrySite<'_>) -> Result<EntryRun, Error> {
    match e {
        StepError::Failed(error) => Ok(EntryRun::Failed { error, runs: site.runs() }),
        StepError::Store(e) => Err(e),
        // Neither fences nor holds apply to an entry: only the stop.
        StepError::Stopped | StepError::Fenced | StepError::Held(_) => Ok(EntryRun::Stopped),
    }
}

/// A run's stdout that passed the entry's check.
struct Accepted(Vec<u8>);

impl RoleOutput for Accepted {}

/// An entry's handling: its context as given, its attempts beside its record.
struct EntrySite<'e> {
    engine: &'e crate::Engine,
    entry_id: String,
    dir: String,
    context: Value,
    shape: ReplyShape,
    attempts: Lock<Vec<Attempt>>,
}

impl<'e> EntrySite<'e> {
    /// Loads the entry's attempts; one a crash cut short is recorded as interrupted.
    fn open(engine: &'e crate::Engine, call: &EntryCall<'_>) -> Result<EntrySite<'e>, Error> {
        let dir = attempts::entry_attempts_dir(call.entry_id.as_str());
        let mut loaded = attempts::load_in(&engine.store, &dir)?;
        for a in loaded.iter_mut().filter(|a| a.status == AttemptStatus::Running) {
            a.status = AttemptStatus::Interrupted;
            a.error = Some("interrupted: the daemon stopped while this ran".into());
            a.ended_at = Some(Timestamp::now());
            attempts::save_in(&engine.store, &dir, a)?;
        }
        Ok(EntrySite {
            engine,
            entry_id: call.entry_id.to_string(),
            dir,
            context: call.context.clone(),
            shape: call.shape.clone(),
            attempts: Lock::new(loaded),
        })
    }

    /// One line per attempt: when, role, instance, record, outcome.
    fn runs(&self) -> Vec<String> {
        let line = |a: &Attempt| {
            let outcome = match (a.status, &a.error) {
                (AttemptStatus::Ok, _) => "ok".to_owned(),
                (_, Some(e)) => e.clone(),
                (s, None) => format!("{s:?}").to_lowercase(),
            };
            format!("{} {} {} ({}): {outcome}", a.started_at, a.role, a.instance_id, a.file_stem())
        };
        self.attempts.lock().iter().map(line).collect()
    }
}

impl Site for EntrySite<'_> {
    type Handed = ();

    fn engine(&self) -> &crate::Engine {
        self.engine
    }

    fn task_id(&self) -> &str {
        ""
    }

    fn records_dir(&self) -> &str {
        &self.dir
    }

    fn attempts(&self) -> &Lock<Vec<Attempt>> {
        &self.attempts
    }

    async fn hand(&self, _: &str, _: &RoleConfig, _: &str) -> Result<Option<()>, StepError> {
        Ok(None)
    }

    fn context(&self, _: Option<&()>, _: &str, _: &RoleConfig) -> Value {
        self.context.clone()
    }

    fn shape(&self, cut_offs: u32) -> ReplyShape {
        self.shape.clone().grown(cut_offs)
    }

    /// Listed for the API (its token works while it runs), not in `roles/active.json`.
    fn started(&self, attempt: &Attempt, token: &str, _: Option<&mut ()>) -> Result<(), StepError> {
        self.engine.instances.lock().push(InstanceInfo {
            id: attempt.instance_id.clone(),
            role: attempt.role.clone(),
            task_id: String::new(),
            step: format!("entry {}", self.entry_id),
            started_at: attempt.started_at.clone(),
            token: token.to_owned(),
        });
        Ok(())
    }

    fn recorded(
        &self,
        _: (),
        _: &Attempt,
        _: &RunOutcome,
    ) -> Result<Option<clawboard_board::ledger::Handout>, StepError> {
        Ok(None)
    }

    fn ended(&self, instance: &str) -> Result<(), StepError> {
        self.engine.instances.lock().retain(|i| i.id != instance);
        Ok(())
    }

    fn succeeded(&self, _: &Attempt, _: &[RaisedEscalation]) -> Result<(), StepError> {
        Ok(())
    }

    fn failed(&self, _kind: &str, message: &str, _error: &str, retry: u32) -> Result<(), StepError> {
        tracing::warn!(entry = %self.entry_id, retry, "entry run failed: {message}");
        Ok(())
    }
}

//! Phase 4 of a blueprint run: the final content gathered from the board, checked
//! once more by the sensitive-word filter and platform compliance, and the output
//! contract (seed 001) built around it: the steps executed, tokens, time, the
//! board's snapshot and the quality report. Saved as the task's `result.json`
//! (`output`), checked against the contract first.

use clawboard_blueprint::contract::{
    ComponentType, ExecutionResult, FinalContent, Output, PlatformVersion, QualityReport, RunStatus, StepExecuted,
    StepStatus,
};
use clawboard_blueprint::format::{Component, Middleware};
use clawboard_blueprint::middleware as mw;
use clawboard_board::ErrorEntry;
use clawboard_core::formats::{BoardFile, TaskResult, Zone};
use clawboard_core::{Timestamp, layout};
use serde_json::{Map, Value, json};

use super::{Executed, Vm, failed, parts_of};
use crate::engine::StepError;
use crate::engine::run::rel;

fn text_at<'a>(zone: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    let (first, rest) = keys.split_first()?;
    let mut v = zone.get(*first)?;
    for k in rest {
        v = v.get(*k)?;
    }
    v.as_str().filter(|s| !s.is_empty())
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Vm<'_, '_> {
    /// Builds, checks and saves the output contract; `stopped`: why the run stopped
    /// short, if it did. With it, why the run is no success, if it is not.
    pub(crate) async fn finish(&self, stopped: Option<&str>) -> Result<(Output, Option<String>), StepError> {
        let board = self.run.board_state()?;
        let produced = self.journal.lock().executed.iter().any(|e| matches!(e.status, "completed" | "retried"));
        let mut status = match (stopped, produced) {
            (None, _) => RunStatus::Success,
            (Some(_), true) => RunStatus::Partial,
            (Some(_), false) => RunStatus::Failed,
        };
        let mut not_run = Vec::new();
        let (final_content, filter_passed, compliant) = if status == RunStatus::Failed {
            not_run.push("sensitive_filter: no step produced anything".to_owned());
            not_run.push("platform_compliance: no step produced anything".to_owned());
            (self.diagnosis()?, None, None)
        } else {
            let (content, passed, compliant) = self.final_content(&board).await?;
            (content, passed, Some(compliant))
        };
        if !self.middleware_on() {
            let off = "execution_config.enable_middleware is false";
            not_run.push(format!("sensitive_filter: {off}"));
            not_run.push(format!("quality_target: {off}"));
        }
        // Content that still holds a listed word, is over a platform's limits, is
        // empty, or scored under the quality target is not a success, whatever the
        // steps did; the summary says why.
        let mut short = Vec::new();
        if status != RunStatus::Failed {
            if filter_passed == Some(false) {
                short.push(
                    "the final content still holds a sensitive word (quality_report.sensitive_filter_passed)"
                        .to_owned(),
                );
            }
            if compliant == Some(false) {
                short.push(
                    "the final content is over a platform's limits (quality_report.platform_compliance)".to_owned(),
                );
            }
            if final_content.body.trim().is_empty() && final_content.platform_versions.is_empty() {
                short.push(self.empty_content_note());
            }
            // Held to the target only when every step ran (a run cut short has
            // its reason already, and its score may be of an earlier round).
            if self.middleware_on()
                && stopped.is_none()
                && let Some(why) = self.quality_shortfall(&board)?
            {
                short.push(why);
            }
        }
        let why = match stopped {
            Some(s) => Some(s.to_owned()),
            None if !short.is_empty() => {
                status = RunStatus::Partial;
                Some(short.join("; "))
            }
            None => None,
        };
        let output = self.contract(&board, status, final_content, (filter_passed, compliant), not_run)?;
        output.check().map_err(failed)?;
        self.save(&output, why.as_deref())?;
        Ok((output, why))
    }

    /// The contract around the final content: the steps, tokens, time, snapshot
    /// and quality report.
    fn contract(
        &self,
        board: &BoardFile,
        status: RunStatus,
        final_content: FinalContent,
        (filter_passed, compliant): (Option<bool>, Option<bool>),
        checks_not_run: Vec<String>,
    ) -> Result<Output, StepError> {
        let scores = board.control_zone.get("quality_scores").and_then(Value::as_object);
        let numbers: Vec<f64> = scores.map(|m| m.values().filter_map(Value::as_f64).collect()).unwrap_or_default();
        let clamp = |x: f64| if x.is_finite() { x.clamp(0.0, 100.0) } else { 0.0 };
        let overall = if numbers.is_empty() { 0.0 } else { numbers.iter().sum::<f64>() / numbers.len() as f64 };
        let virality = scores.and_then(|m| m.get("virality")).and_then(Value::as_f64).unwrap_or(0.0);
        let j = self.journal.lock();
        Ok(Output {
            execution_result: ExecutionResult {
                status,
                blueprint_id: self.bp.id.clone(),
                steps_executed: j.executed.iter().map(step_executed).collect(),
                total_tokens_used: self.tokens_used()?,
                execution_time_ms: self.elapsed_ms(),
            },
            blackboard_snapshot: snapshot(&*self.run.board_state()?),
            quality_report: QualityReport {
                overall_score: clamp(overall),
                virality_score: clamp(virality),
                sensitive_filter_passed: filter_passed,
                platform_compliance: compliant,
                improvements_applied: j.improvements.clone(),
                checks_not_run,
            },
            final_content,
        })
    }

    /// When nothing was produced, the original input comes back with the diagnosis.
    fn diagnosis(&self) -> Result<FinalContent, StepError> {
        let u = &self.input.user_input;
        let input = serde_json::to_string_pretty(u).map_err(failed)?;
        let errors: Vec<String> = self.journal.lock().errors.iter().map(|e| format!("- {e}")).collect();
        if !self.journal.lock().findings.is_empty() {
            // What the filter refused on the way, on the record.
            self.write_filter_record(false)?;
        }
        Ok(FinalContent {
            title: u.topic.clone(),
            body: format!("No step produced anything.\n\nDiagnosis:\n{}\n\nThe input:\n{input}", errors.join("\n")),
            platform_versions: Vec::new(),
        })
    }

    /// Why the final content is empty: the places it is taken from.
    fn empty_content_note(&self) -> String {
        let own: Vec<String> =
            self.bp.steps.iter().filter(|s| s.output_default).map(|s| format!("content.results.{}", s.id)).collect();
        let mut places = vec!["content.body.content", "content.thread", "content.platform_versions"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        places.extend(own);
        format!("the final content is empty: no step wrote a text to {}", places.join(", "))
    }

    /// Seed 001's quality gate after the last round: the virality score under
    /// `quality_threshold` (or none at all where a step carries the gate) is no
    /// success. Noted in `control.errors` (once) and in the run's errors.
    fn quality_shortfall(&self, board: &BoardFile) -> Result<Option<String>, StepError> {
        let target = self.input.execution_config.quality_threshold;
        let gate = self.bp.steps.iter().find(|s| s.middleware.contains(&Middleware::QualityGate));
        let score = board.control_zone.get("quality_scores").and_then(|m| m.get("virality")).and_then(Value::as_f64);
        let rounds = match (&self.bp.repeat, board.control_zone.get("iteration_count").and_then(Value::as_u64)) {
            (Some(_), Some(n)) => format!(" after round {n}, the last"),
            (Some(_), None) => " after round 1, the last".to_owned(),
            (None, _) => String::new(),
        };
        let why = match score {
            Some(v) if v < target => {
                format!("quality target not met: virality {v} is under the target {target}{rounds}")
            }
            None if gate.is_some() => {
                format!("quality target not met: no virality score to hold to the target {target}")
            }
            _ => return Ok(None),
        };
        let step_id = gate.map_or("quality_gate", |s| s.id.as_str());
        let known = board.control_zone.get("errors").and_then(Value::as_array).is_some_and(|errors| {
            errors.iter().any(|e| e.get("message").and_then(Value::as_str) == Some(why.as_str()))
        });
        if !known {
            let e = ErrorEntry {
                step_id: step_id.to_owned(),
                error_type: "quality_below_threshold".to_owned(),
                message: why.clone(),
                timestamp: Timestamp::now().to_string(),
            };
            self.run.board_write(Ok(clawboard_board::Op::append_error(&e)))?;
        }
        self.journal.lock().errors.push(why.clone());
        Ok(Some(why))
    }

    /// The final content from the board, after the last sensitive-word check and
    /// platform compliance: (content, filter passed, compliant). With the built-in
    /// filter, each part is filtered with its own platform's words before it is
    /// held to that platform's limits (a replacement may lengthen a title); a
    /// filter role checks the assembled content instead, and the title is cut
    /// after its fixes.
    async fn final_content(&self, board: &BoardFile) -> Result<(FinalContent, Option<bool>, bool), StepError> {
        let c = &board.content_zone;
        let topic = board.meta_zone.get("topic").and_then(Value::as_str).unwrap_or_default();
        let title = text_at(c, &["hook", "selected"])
            .or_else(|| text_at(c, &["hook", "title"]))
            .map(str::to_owned)
            .or_else(|| self.own_result_text(c, &["selected", "title"]))
            .unwrap_or_else(|| topic.to_owned());
        let thread = strings(c.get("thread"));
        let body = match text_at(c, &["body", "content"]) {
            Some(b) => b.to_owned(),
            None if !thread.is_empty() => thread.join("\n\n"),
            None => self.own_result_text(c, &["content", "body", "text"]).unwrap_or_default(),
        };
        let hashtags = strings(c.get("hashtags"));
        let built_in = self.filter_role.is_none() && self.middleware_on();
        let mut passed = true;
        // The built-in filter on one part, its findings on the record.
        let mut filter = |platform: &str, at: &str, parts: mw::Parts| -> Result<mw::Parts, StepError> {
            if !built_in {
                return Ok(parts);
            }
            let value = serde_json::to_value(&parts).map_err(failed)?;
            let f = mw::sensitive_filter(&self.mw, platform, at, &value);
            passed &= f.passed;
            if !f.findings.is_empty() {
                let mut j = self.journal.lock();
                j.findings.extend(f.findings.iter().filter_map(|x| serde_json::to_value(x).ok()));
                j.fixes.extend(f.findings.iter().filter(|x| x.fixed).map(mw::fix_note));
                j.improve(f.findings.iter().filter(|x| x.fixed).map(mw::fix_note));
                j.errors.extend(f.unfixed());
            }
            serde_json::from_value(f.value).map_err(failed)
        };
        let mut versions = Vec::new();
        let mut unknown = Vec::new();
        if let Some(map) = c.get("platform_versions").and_then(Value::as_object) {
            for (i, (platform, v)) in map.iter().enumerate() {
                if !mw::PLATFORMS.contains(&platform.as_str()) {
                    unknown.push(format!("platform_versions.{platform}: {platform:?} is not a platform"));
                }
                let mut parts = parts_of(v);
                if v.get("hashtags").is_none() {
                    parts.hashtags = hashtags.clone();
                }
                let parts = filter(platform, &format!("final_content.platform_versions.{i}"), parts)?;
                let checked = mw::platform_compliance(&self.mw, platform, &parts);
                let p = checked.parts;
                let text =
                    [p.title.as_str(), p.body.as_str()].iter().filter(|s| !s.is_empty()).copied().collect::<Vec<_>>();
                versions.push((
                    PlatformVersion { platform: platform.clone(), content: text.join("\n\n"), hashtags: p.hashtags },
                    checked.adjustments,
                    checked.failures,
                ));
            }
        }
        let own = mw::Parts { title: title.to_owned(), body, hashtags: Vec::new(), thread: None };
        let own = filter(&self.platform, "final_content", own)?;
        let mut content = FinalContent {
            title: own.title,
            body: own.body,
            platform_versions: versions.iter().map(|(v, _, _)| v.clone()).collect(),
        };
        let compliant = versions.iter().all(|(_, _, f)| f.is_empty()) && unknown.is_empty();
        {
            let mut j = self.journal.lock();
            for (_, adj, fails) in &versions {
                j.improve(adj.iter().cloned());
                j.errors.extend(fails.iter().map(|f| format!("platform compliance: {f}")));
            }
            j.errors.extend(unknown.into_iter().map(|u| format!("platform compliance: {u}")));
        }
        if let (Some(role), true) = (self.filter_role.clone(), self.middleware_on()) {
            // The filter role checks the final content too, written to `content.final_content`.
            let target = clawboard_board::BoardPath::parse("content.final_content").map_err(|e| failed(e.reason))?;
            let value = serde_json::to_value(&content).map_err(failed)?;
            // The assembled content is the VM's (the orchestrator's) to place.
            let vm = clawboard_board::Caller::daemon();
            match self.role_check(&role, ("bp/final", 1), &vm, &target, value).await? {
                Ok(fixed) => content = serde_json::from_value(fixed).map_err(failed)?,
                Err(why) => {
                    passed = false;
                    self.journal.lock().errors.push(why);
                }
            }
        } else if built_in {
            self.write_filter_record(passed)?;
        }
        // The title is held to the task's platform last, after every fix (a body
        // is the versions' business).
        let title_only =
            mw::Parts { title: content.title.clone(), body: String::new(), hashtags: Vec::new(), thread: None };
        let cut = mw::platform_compliance(&self.mw, &self.platform, &title_only);
        self.journal.lock().improve(cut.adjustments);
        content.title = cut.parts.title;
        Ok((content, self.middleware_on().then_some(passed), compliant))
    }

    /// A text of the last step (in the blueprint's order) that wrote its result
    /// to its own place (`content.results.{id}`, a step without `output`): an
    /// object's first of `keys` that is a string, or (for a body) a string result.
    /// Seed 001's examples name no output: their last step's text is the body,
    /// a title among their results the title.
    fn own_result_text(&self, c: &Map<String, Value>, keys: &[&str]) -> Option<String> {
        let results = c.get("results")?;
        let body = keys.contains(&"content");
        self.bp.steps.iter().rev().filter(|s| s.output_default).find_map(|s| {
            let v = results.get(&s.id)?;
            let text = match v {
                Value::String(t) if body => Some(t.as_str()),
                Value::Object(o) => keys.iter().find_map(|k| o.get(*k).and_then(Value::as_str)),
                _ => None,
            }?;
            (!text.trim().is_empty()).then(|| text.to_owned())
        })
    }

    /// Seed 000's completion phase, after the snapshot and the assembly: the
    /// run's temporary data leaves the live board (its history keeps all of
    /// it, as does the contract's `blackboard_snapshot`): the losing candidates'
    /// texts (their type and score stay), the executor's own status keys of
    /// candidates and later rounds (`title-c2`, `r2-body`), and the assembled
    /// content a filter role was handed (`content.final_content`). Idempotent,
    /// so a drive resumed after a crash does it again safely.
    pub(crate) fn clear_temporary(&self) -> Result<(), StepError> {
        let board = self.run.board_state()?;
        for s in self.bp.steps.iter().filter(|s| s.compete.is_some()) {
            let Some(path) = &s.output else { continue };
            let at = |key: &str| clawboard_board::BoardPath::parse(&format!("{path}.{key}")).ok();
            let (Some(variants_at), Some(selected_at)) = (at("variants"), at("selected")) else { continue };
            let selected = clawboard_board::ops::get(&board, &selected_at).and_then(Value::as_str);
            let Some(variants) = clawboard_board::ops::get(&board, &variants_at).and_then(Value::as_array) else {
                continue;
            };
            let mut kept_winner = false;
            let trimmed: Vec<Value> = variants
                .iter()
                .map(|v| {
                    let winner = !kept_winner && v.get("content").and_then(Value::as_str) == selected;
                    kept_winner |= winner;
                    match v.as_object() {
                        Some(m) if !winner => Value::Object(
                            m.iter().filter(|(k, _)| *k != "content").map(|(k, x)| (k.clone(), x.clone())).collect(),
                        ),
                        _ => v.clone(),
                    }
                })
                .collect();
            self.put(&variants_at.to_string(), Value::Array(trimmed))?;
        }
        let ids: Vec<&str> = self.bp.steps.iter().map(|s| s.id.as_str()).collect();
        let scratch = board.control_zone.get("step_status").and_then(Value::as_object).map(|m| {
            m.keys().filter(|k| !ids.contains(&k.as_str())).map(|k| format!("control.step_status.{k}")).collect()
        });
        let mut paths: Vec<String> = scratch.unwrap_or_default();
        paths.push("content.final_content".into());
        for p in paths {
            let p = clawboard_board::BoardPath::parse(&p).map_err(|e| failed(format!("{p}: {}", e.reason)))?;
            self.run.board_write(clawboard_board::Op::clear(p))?;
        }
        Ok(())
    }

    /// Tokens of the run: what the roles reported, or else the slices handed to them.
    fn tokens_used(&self) -> Result<u64, StepError> {
        let entries = clawboard_board::ledger::list(self.run.engine.store(), &self.run.id).map_err(|e| match e {
            clawboard_board::Error::Store(e) => StepError::Store(e),
            other => failed(other),
        })?;
        Ok(entries
            .iter()
            .filter(|e| e.step.starts_with("bp/") && e.outcome != "over_budget")
            .map(|e| match &e.usage {
                Some(u) => u.prompt_tokens + u.completion_tokens,
                None => e.tokens,
            })
            .sum())
    }

    /// The run's wall time in this drive (after a restart, from the restart).
    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `result.json` with the contract under `output` (a summary a person reads first).
    fn save(&self, output: &Output, stopped: Option<&str>) -> Result<(), StepError> {
        let status = match output.execution_result.status {
            RunStatus::Success => "success",
            RunStatus::Partial => "partial",
            RunStatus::Failed => "failed",
        };
        let mut summary = format!(
            "{} ({status}): {} — {} steps, virality {}",
            self.bp.id,
            output.final_content.title,
            output.execution_result.steps_executed.len(),
            output.quality_report.virality_score
        );
        for line in output.fallbacks() {
            summary.push_str(&format!("; {line}"));
        }
        if let Some(why) = stopped {
            summary.push_str(&format!("; stopped: {why}"));
        }
        let mut extra = Map::new();
        extra.insert("output".into(), serde_json::to_value(output).map_err(failed)?);
        let result = TaskResult {
            task_id: self.run.task.task_id.clone(),
            produced_at: Timestamp::now(),
            summary,
            artifacts: Vec::new(),
            contributions: Vec::new(),
            iteration: Some(1),
            extra,
        };
        self.run.engine.store.write_json(&rel(&self.run.id, layout::RESULT_FILE)?, &result)?;
        Ok(())
    }
}

/// A step of `steps_executed`.
fn step_executed(e: &Executed) -> StepExecuted {
    StepExecuted {
        step_id: e.step_id.clone(),
        component: e.role.clone(),
        component_type: match e.component {
            Component::Worker => ComponentType::Worker,
            Component::Skill => ComponentType::Skill,
        },
        status: match e.status {
            "retried" => StepStatus::Retried,
            "failed" => StepStatus::Failed,
            "skipped" => StepStatus::Skipped,
            _ => StepStatus::Completed,
        },
        retries: e.retries,
        output_key: e.output_key.clone(),
        fallback: e.fallback.clone(),
    }
}

/// The board's three zones, as the contract's `blackboard_snapshot`.
fn snapshot(board: &BoardFile) -> Value {
    json!({
        Zone::Meta.key(): board.meta_zone,
        Zone::Content.key(): board.content_zone,
        Zone::Control.key(): board.control_zone,
    })
}

//! Phase 4 of a blueprint run: the final content gathered from the board, checked
//! once more by the sensitive-word filter and platform compliance, and the output
//! contract (seed 001) built around it: the steps executed, tokens, time, the
//! board's snapshot and the quality report. Saved as the task's `result.json`
//! (`output`), checked against the contract first.

use clawboard_blueprint::contract::{
    ComponentType, ExecutionResult, FinalContent, Output, PlatformVersion, QualityReport, RunStatus, StepExecuted,
    StepStatus,
};
use clawboard_blueprint::format::Component;
use clawboard_blueprint::middleware as mw;
use clawboard_core::formats::{BoardFile, TaskResult, Zone};
use clawboard_core::{Timestamp, layout};
use serde_json::{Map, Value, json};

use super::{Vm, failed, parts_of};
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
    /// short, if it did.
    pub(crate) async fn finish(&self, stopped: Option<&str>) -> Result<Output, StepError> {
        let board = self.run.board_state()?;
        let produced = self.journal.lock().executed.iter().any(|e| matches!(e.status, "completed" | "retried"));
        let status = match (stopped, produced) {
            (None, _) => RunStatus::Success,
            (Some(_), true) => RunStatus::Partial,
            (Some(_), false) => RunStatus::Failed,
        };
        let (final_content, filter_passed, compliant) = if status == RunStatus::Failed {
            // Nothing was produced: the original input comes back, with the diagnosis.
            let u = &self.input.user_input;
            let input = serde_json::to_string_pretty(u).map_err(failed)?;
            let errors: Vec<String> = self.journal.lock().errors.iter().map(|e| format!("- {e}")).collect();
            let content = FinalContent {
                title: u.topic.clone(),
                body: format!("No step produced anything.\n\nDiagnosis:\n{}\n\nThe input:\n{input}", errors.join("\n")),
                platform_versions: Vec::new(),
            };
            if !self.journal.lock().findings.is_empty() {
                // What the filter refused on the way, on the record.
                self.write_filter_record(false)?;
            }
            (content, true, false)
        } else {
            self.final_content(&board).await?
        };
        // Content that still holds a listed word, or is over a platform's limit,
        // is not a success, whatever the steps did; the summary says why.
        let mut held_back = Vec::new();
        if !filter_passed {
            held_back.push("the final content still holds a sensitive word (quality_report.sensitive_filter_passed)");
        }
        if !compliant && status != RunStatus::Failed {
            held_back.push("the final content is over a platform's limits (quality_report.platform_compliance)");
        }
        let content_note = held_back.join("; ");
        let (status, stopped) = match (status, stopped) {
            (RunStatus::Success, None) if !held_back.is_empty() => (RunStatus::Partial, Some(content_note.as_str())),
            other => other,
        };
        let scores = board.control_zone.get("quality_scores").and_then(Value::as_object);
        let numbers: Vec<f64> = scores.map(|m| m.values().filter_map(Value::as_f64).collect()).unwrap_or_default();
        let clamp = |x: f64| if x.is_finite() { x.clamp(0.0, 100.0) } else { 0.0 };
        let overall = if numbers.is_empty() { 0.0 } else { numbers.iter().sum::<f64>() / numbers.len() as f64 };
        let virality = scores.and_then(|m| m.get("virality")).and_then(Value::as_f64).unwrap_or(0.0);
        let j = self.journal.lock();
        let output = Output {
            execution_result: ExecutionResult {
                status,
                blueprint_id: self.bp.id.clone(),
                steps_executed: j
                    .executed
                    .iter()
                    .map(|e| StepExecuted {
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
                    })
                    .collect(),
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
            },
            final_content,
        };
        drop(j);
        output.check().map_err(failed)?;
        self.save(&output, stopped)?;
        Ok(output)
    }

    /// The final content from the board, after the last sensitive-word check and
    /// platform compliance: (content, filter passed, compliant). With the built-in
    /// filter, each part is filtered with its own platform's words before it is
    /// held to that platform's limits (a replacement may lengthen a title); a
    /// filter role checks the assembled content instead, and the title is cut
    /// after its fixes.
    async fn final_content(&self, board: &BoardFile) -> Result<(FinalContent, bool, bool), StepError> {
        let c = &board.content_zone;
        let topic = board.meta_zone.get("topic").and_then(Value::as_str).unwrap_or_default();
        let title = text_at(c, &["hook", "selected"]).or_else(|| text_at(c, &["hook", "title"])).unwrap_or(topic);
        let thread = strings(c.get("thread"));
        let body = match text_at(c, &["body", "content"]) {
            Some(b) => b.to_owned(),
            None => thread.join("\n\n"),
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
            match self.role_check(&role, "bp/final", 1, &target, value).await? {
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
        Ok((content, passed, compliant))
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

/// The board's three zones, as the contract's `blackboard_snapshot`.
fn snapshot(board: &BoardFile) -> Value {
    json!({
        Zone::Meta.key(): board.meta_zone,
        Zone::Content.key(): board.content_zone,
        Zone::Control.key(): board.control_zone,
    })
}

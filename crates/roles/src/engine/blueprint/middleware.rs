//! The middleware of a blueprint step (seed 001): the output check with the
//! built-in sensitive-word filter and platform compliance (a refused output is a
//! failed attempt of the executor), the findings kept for the quality report and
//! `control.sensitive_filter`, and the filter role that may replace the built-in.

use clawboard_blueprint::format::{Middleware, Step};
use clawboard_blueprint::middleware as mw;
use clawboard_board::{BoardPath, Caller, Op};
use serde_json::{Map, Value, json};

use super::{BlueprintOutput, Outputs, Vm, failed, step_name};
use crate::context::{StepInfo, StepPlan};
use crate::engine::StepError;

impl Vm<'_, '_> {
    /// The output check of a step's attempt: the value fits its board path, and
    /// passes the middleware after the middleware's own fixes (else the attempt
    /// fails as `sensitive_filter_failed` / `platform_compliance_failed` and is retried).
    pub(super) fn check(&self, s: &Step, o: &BlueprintOutput, candidate: bool) -> Result<(), String> {
        let Some(path) = &s.output else { return Ok(()) };
        let Some(value) = &o.output else {
            // A step without `output` in the file may print nothing to keep.
            if s.output_default {
                return Ok(());
            }
            return Err(format!("stdout /output: missing; step {} writes its output to {path}", s.id));
        };
        if candidate {
            if value.get("content").and_then(Value::as_str).is_none() {
                return Err("stdout /output/content: a competing candidate prints {\"content\": TEXT, ...}".into());
            }
            if o.score.is_none_or(|x| !x.is_finite()) {
                return Err("stdout /score: a competing candidate needs a number to be selected by".into());
            }
        }
        let (fixed, _) = self.fixed(s, path, value, candidate.then_some(0))?;
        if !candidate {
            Op::set(path.clone(), fixed)
                .and_then(|op| op.check_value(clawboard_board::ops::DEFAULT_MAX_VALUE_BYTES))
                .map_err(|(at, why)| format!("stdout /output: {at}: {why}"))?;
        }
        Ok(())
    }

    /// The value after the middleware's fixes, with its findings and notes; `Err`
    /// when a check still fails after them.
    /// `variant`: the candidate's place among the variants, for a competing step.
    pub(super) fn fixed(
        &self,
        s: &Step,
        path: &BoardPath,
        value: &Value,
        variant: Option<usize>,
    ) -> Result<(Value, Fixes), String> {
        let mut fixes = Fixes::default();
        if !self.middleware_on() {
            return Ok((value.clone(), fixes));
        }
        let at = match variant {
            Some(i) => format!("{path}.variants.{i}"),
            None => path.to_string(),
        };
        // A filter role, when configured, checks instead (after the attempt: `filter_by_role`).
        let f = if self.filter_role.is_some() {
            mw::Filtered { value: value.clone(), findings: Vec::new(), passed: true }
        } else {
            self.filter_at(path, &at, value)
        };
        if !f.passed {
            // Kept for control.sensitive_filter: what was refused, not only what was fixed.
            {
                let mut j = self.journal.lock();
                for x in f.findings.iter().filter(|x| !x.fixed).filter_map(|x| serde_json::to_value(x).ok()) {
                    if !j.findings.contains(&x) {
                        j.findings.push(x);
                    }
                }
            }
            // In fix_note's words (`sensitive word "X" in PATH (no replacement configured)`),
            // which the retried role is told as its feedback.
            let left: Vec<String> = f.findings.iter().filter(|x| !x.fixed).map(mw::fix_note).collect();
            return Err(format!("sensitive_filter_failed: {}; rewrite without it", left.join("; ")));
        }
        fixes.notes.extend(f.findings.iter().map(mw::fix_note));
        fixes.findings.extend(f.findings.iter().filter_map(|x| serde_json::to_value(x).ok()));
        let mut v = f.value;
        if s.middleware.contains(&Middleware::PlatformCompliance) {
            let (adjusted, notes, failures) = self.comply(path, &v);
            if !failures.is_empty() {
                return Err(format!("platform_compliance_failed: {}", failures.join("; ")));
            }
            v = adjusted;
            fixes.adjustments = notes;
        }
        Ok((v, fixes))
    }

    /// The built-in sensitive-word filter on a step's output at `path` (shown as
    /// `at`): each version of `content.platform_versions` with its own platform's
    /// words (a version's platform is its key), any other output with the task's.
    pub(super) fn filter_at(&self, path: &BoardPath, at: &str, value: &Value) -> mw::Filtered {
        match version_platform(path) {
            Versions::All => match value.as_object() {
                Some(map) => {
                    let mut out = mw::Filtered { value: json!({}), findings: Vec::new(), passed: true };
                    let mut fixed = Map::new();
                    for (platform, version) in map {
                        let f = mw::sensitive_filter(&self.mw, platform, &format!("{at}.{platform}"), version);
                        fixed.insert(platform.clone(), f.value);
                        out.findings.extend(f.findings);
                        out.passed &= f.passed;
                    }
                    out.value = Value::Object(fixed);
                    out
                }
                None => mw::sensitive_filter(&self.mw, &self.platform, at, value),
            },
            Versions::One(platform) => mw::sensitive_filter(&self.mw, platform, at, value),
            Versions::No => mw::sensitive_filter(&self.mw, &self.platform, at, value),
        }
    }

    /// Platform compliance of a step's output at `path`: each version of a
    /// `platform_versions` map by its own platform (a key that is no platform
    /// fails); any other output (a title, a body, hashtags, a thread) by the
    /// task's platform. Titles and hashtag lists are cut; the rest fails.
    pub(super) fn comply(&self, path: &BoardPath, value: &Value) -> (Value, Vec<String>, Vec<String>) {
        let mut out = value.clone();
        let mut notes = Vec::new();
        let mut failures = Vec::new();
        let mut check = |platform: &str, v: &mut Value, key: Option<&str>| {
            let parts = match key {
                Some(k) => parts_of_output(k, v),
                None => parts_of(v),
            };
            let checked = mw::platform_compliance(&self.mw, platform, &parts);
            notes.extend(checked.adjustments.clone());
            failures.extend(checked.failures.clone());
            match key {
                Some(k) => write_output_parts(k, &checked.parts, v),
                None => write_parts(&checked.parts, v),
            }
        };
        let mut unknown = Vec::new();
        match version_platform(path) {
            Versions::All => {
                if let Some(map) = out.as_object_mut() {
                    for (platform, version) in map.iter_mut() {
                        if mw::PLATFORMS.contains(&platform.as_str()) {
                            check(platform, version, None);
                        } else {
                            unknown.push(platform.clone());
                        }
                    }
                }
            }
            Versions::One(platform) if mw::PLATFORMS.contains(&platform) => check(platform, &mut out, None),
            Versions::One(platform) => unknown.push(platform.to_owned()),
            Versions::No => {
                if let Some(key) = path.keys.first() {
                    check(&self.platform, &mut out, Some(key));
                }
            }
        }
        for p in unknown {
            // No limits would apply to it: a misspelt or unknown platform is refused.
            failures
                .push(format!("platform_versions.{p}: {p:?} is not a platform (one of {})", mw::PLATFORMS.join(", ")));
        }
        (out, notes, failures)
    }

    /// Adds a step's middleware findings to the journal and to `control.sensitive_filter`.
    pub(super) fn note(&self, fx: Fixes) -> Result<(), StepError> {
        if fx.findings.is_empty() && fx.adjustments.is_empty() {
            return Ok(());
        }
        let found = !fx.findings.is_empty();
        {
            let mut j = self.journal.lock();
            j.findings.extend(fx.findings);
            j.improve(fx.notes.iter().cloned());
            j.fixes.extend(fx.notes);
            j.improve(fx.adjustments);
        }
        if found { self.write_filter_record(true) } else { Ok(()) }
    }

    /// The filter role's verdict on `value` written at `target` by `by` (an
    /// executor step of its own, `…/filter`, handed `target` and the platform):
    /// the value as fixed, or why it was refused.
    pub(crate) async fn role_check(
        &self,
        role: &str,
        (step, round): (&str, u32),
        by: &Caller,
        target: &BoardPath,
        value: Value,
    ) -> Result<Result<Value, String>, StepError> {
        // The value goes on the board for the filter to read; the fixed one replaces it.
        self.put_as(by, &target.to_string(), value.clone())?;
        let mut extra = Map::new();
        extra.insert("blueprint_id".into(), json!(self.bp.id));
        extra.insert("checks".into(), json!(target.to_string()));
        extra.insert("platform".into(), json!(self.platform));
        // The words in force (the config's, not the shipped file's), so that a
        // filter role checks what the built-in filter would.
        let words = self.mw.words_for(&self.platform);
        let replacements: Map<String, Value> =
            words.iter().filter_map(|w| self.mw.replacements.get(*w).map(|r| ((*w).to_owned(), json!(r)))).collect();
        extra.insert("sensitive_words".into(), json!(words));
        extra.insert("replacements".into(), Value::Object(replacements));
        let info = StepInfo {
            kind: "blueprint",
            reply: None,
            step: format!("{step}/filter"),
            iteration: round,
            max_iterations: round,
            extra,
            plan: Some(StepPlan {
                scope: Some(vec![target.to_string(), "meta.platform".into()]),
                template: None,
                max_tokens: None,
                retries: self.input.execution_config.max_retries,
                fallback: None,
            }),
        };
        let (_, verdict) = self
            .run
            .step::<BlueprintOutput>(&info, role, |o| match o.output.as_ref().and_then(|v| v.get("passed")) {
                Some(Value::Bool(_)) => Ok(()),
                _ => Err("stdout /output/passed: a filter role prints {\"output\": {\"passed\": BOOL, ...}}".into()),
            })
            .await?;
        let v = verdict.output.unwrap_or_default();
        let findings: Vec<Value> = v.get("findings").and_then(Value::as_array).cloned().unwrap_or_default();
        let notes: Vec<String> = v
            .get("fixes_applied")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        let passed = v.get("passed").and_then(Value::as_bool).unwrap_or(false);
        {
            let mut j = self.journal.lock();
            j.findings.extend(findings.iter().cloned());
            j.improve(notes.iter().cloned());
            j.fixes.extend(notes);
        }
        self.write_filter_record(passed)?;
        if !passed {
            let left: Vec<String> = findings
                .iter()
                .filter(|f| f.get("fixed").and_then(Value::as_bool) != Some(true))
                .map(|f| {
                    format!(
                        "sensitive word {} in {}",
                        f.get("word").unwrap_or(&Value::Null),
                        f.get("path").unwrap_or(&Value::Null)
                    )
                })
                .collect();
            return Ok(Err(format!("{} (the filter role {role} refused the output)", left.join(", "))));
        }
        let key = target.keys.last().cloned().unwrap_or_default();
        Ok(Ok(v.get("fixed").and_then(|f| f.get(&key)).cloned().unwrap_or(value)))
    }

    /// A step's outputs through the filter role: fixed in place, or why refused.
    pub(super) async fn filter_by_role(
        &self,
        role: &str,
        s: &Step,
        round: u32,
        redo: u32,
        outs: &mut Outputs,
    ) -> Result<Option<String>, StepError> {
        let Some(path) = &s.output else { return Ok(None) };
        let Some((first, _)) = outs.first() else { return Ok(None) };
        let by = self.writer(s, first);
        let name = step_name(&self.bp, s, round, None, redo);
        if s.compete.is_some() {
            let target = BoardPath::parse(&format!("{path}.variants")).map_err(|e| failed(e.reason))?;
            let raw: Vec<Value> = outs
                .iter()
                .map(|(_, o)| {
                    let mut v = o.output.clone().unwrap_or_default();
                    if let Some(m) = v.as_object_mut() {
                        m.insert("score".into(), json!(o.score.unwrap_or(0.0)));
                    }
                    v
                })
                .collect();
            match self.role_check(role, (&name, round), &by, &target, Value::Array(raw)).await? {
                Err(why) => Ok(Some(why)),
                Ok(fixed) => {
                    for ((_, o), f) in outs.iter_mut().zip(fixed.as_array().cloned().unwrap_or_default()) {
                        o.output = Some(f);
                    }
                    Ok(None)
                }
            }
        } else {
            let raw = outs.first().and_then(|(_, o)| o.output.clone()).unwrap_or_default();
            match self.role_check(role, (&name, round), &by, path, raw).await? {
                Err(why) => Ok(Some(why)),
                Ok(fixed) => {
                    if let Some((_, o)) = outs.first_mut() {
                        o.output = Some(fixed);
                    }
                    Ok(None)
                }
            }
        }
    }

    /// The filter's record on the board: every finding so far, all fixed.
    pub(super) fn write_filter_record(&self, passed: bool) -> Result<(), StepError> {
        let (findings, fixes) = {
            let j = self.journal.lock();
            (j.findings.clone(), j.fixes.clone())
        };
        self.put("control.sensitive_filter", json!({"passed": passed, "findings": findings, "fixes_applied": fixes}))
    }
}

/// Where in `platform_versions` a step's output is.
enum Versions<'p> {
    /// `content.platform_versions`: a map of platform → version.
    All,
    /// `content.platform_versions.PLATFORM`: one version.
    One(&'p str),
    /// Elsewhere.
    No,
}

fn version_platform(path: &BoardPath) -> Versions<'_> {
    if path.zone != clawboard_core::formats::Zone::Content {
        return Versions::No;
    }
    match path.keys.as_slice() {
        [first] if first == "platform_versions" => Versions::All,
        [first, platform] if first == "platform_versions" => Versions::One(platform),
        _ => Versions::No,
    }
}

/// A platform version's parts, as platform compliance checks them.
pub(crate) fn parts_of(version: &Value) -> mw::Parts {
    let text = |k: &str| version.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
    let list = |k: &str| {
        version
            .get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
    };
    mw::Parts {
        title: text("title"),
        body: text("body"),
        hashtags: list("hashtags").unwrap_or_default(),
        thread: list("thread"),
    }
}

/// Writes adjusted parts back into a platform version (only the fields it has).
pub(crate) fn write_parts(parts: &mw::Parts, version: &mut Value) {
    let Some(v) = version.as_object_mut() else { return };
    if v.contains_key("title") {
        v.insert("title".into(), json!(parts.title));
    }
    if v.contains_key("hashtags") {
        v.insert("hashtags".into(), json!(parts.hashtags));
    }
}

/// The parts of a step's output at `content.KEY` that platform compliance
/// checks: a hook's title, a body's text, hashtags, a thread.
pub(super) fn parts_of_output(key: &str, v: &Value) -> mw::Parts {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    let list = |v: &Value| v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect());
    let mut p = mw::Parts { title: String::new(), body: String::new(), hashtags: Vec::new(), thread: None };
    match key {
        "hook" => p.title = text("selected").or_else(|| text("title")).or_else(|| text("content")).unwrap_or_default(),
        "body" => {
            p.body = text("content").or_else(|| v.as_str().map(str::to_owned)).unwrap_or_default();
            // A body is not a tweet: tweets are a thread's or a platform version's.
            p.thread = Some(Vec::new());
        }
        "hashtags" => p.hashtags = list(v).unwrap_or_default(),
        "thread" => p.thread = list(v),
        _ => {}
    }
    p
}

/// Writes cut parts back into a step's output at `content.KEY`.
pub(super) fn write_output_parts(key: &str, p: &mw::Parts, v: &mut Value) {
    match (key, v) {
        ("hook", Value::Object(m)) => {
            // Into the field the title was read from (see `parts_of_output`), and
            // only that one: beside a `title`, `content` is an opening, not a title.
            let from = ["selected", "title", "content"].into_iter().find(|k| m.get(*k).is_some_and(Value::is_string));
            if let Some(k) = from {
                m.insert(k.into(), json!(p.title));
            }
        }
        ("hashtags", v @ Value::Array(_)) => *v = json!(p.hashtags),
        _ => {}
    }
}

/// What the middleware did to one value.
#[derive(Debug, Default)]
pub(super) struct Fixes {
    pub findings: Vec<Value>,
    pub notes: Vec<String>,
    pub adjustments: Vec<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_cut_title_goes_back_where_it_came_from_only() {
        // A hook with a title and an opening paragraph in `content`: the title is cut, the opening kept.
        let mut hook = json!({"title": "a long title", "content": "the opening paragraph"});
        let mut p = parts_of_output("hook", &hook);
        assert_eq!(p.title, "a long title");
        p.title = "a long".into();
        write_output_parts("hook", &p, &mut hook);
        assert_eq!(hook, json!({"title": "a long", "content": "the opening paragraph"}));
        // A selected title wins over the rest, and only it is cut.
        let mut hook = json!({"selected": "the winner", "title": "draft"});
        let mut p = parts_of_output("hook", &hook);
        p.title = "the".into();
        write_output_parts("hook", &p, &mut hook);
        assert_eq!(hook, json!({"selected": "the", "title": "draft"}));
    }

    #[test]
    fn a_platform_version_is_known_by_its_path() {
        let p = |s: &str| BoardPath::parse(s).unwrap();
        assert!(matches!(version_platform(&p("content.platform_versions")), Versions::All));
        assert!(matches!(version_platform(&p("content.platform_versions.twitter")), Versions::One("twitter")));
        assert!(matches!(version_platform(&p("content.platform_versions.twitter.title")), Versions::No));
        assert!(matches!(version_platform(&p("content.hook")), Versions::No));
        assert!(matches!(version_platform(&p("control.platform_versions")), Versions::No));
    }
}

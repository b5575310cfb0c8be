//! What each kind of role prints on stdout: one JSON document, checked here with
//! an error that names the field. Any role may add `escalations`.

use clawboard_core::formats::{Artifact, Cell, Criteria, CrossPollination, Experience, Issue};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// An escalation a role raises in its output: a record's format, so it is the
/// records crate's.
pub use clawboard_records::escalations::RaisedEscalation;

/// A PM's output: the team to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PmOutput {
    pub team: Vec<TeamPick>,
    #[serde(default)]
    pub reasoning: Option<String>,
    #[serde(default)]
    pub workflow: Option<String>,
    #[serde(default)]
    pub estimated_time: Option<String>,
    #[serde(default)]
    pub escalations: Vec<RaisedEscalation>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TeamPick {
    pub role: String,
    #[serde(default = "one")]
    pub priority: u32,
    #[serde(default)]
    pub reason: Option<String>,
}

fn one() -> u32 {
    1
}

/// A worker's output.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerOutput {
    pub summary: String,
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// Anything else the role wants kept.
    #[serde(default)]
    pub output: Option<serde_json::Value>,
    #[serde(default)]
    pub escalations: Vec<RaisedEscalation>,
}

/// A validator's output (the `result` of validation.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValidatorOutput {
    pub score: f64,
    pub pass: bool,
    #[serde(default)]
    pub criteria: Criteria,
    #[serde(default)]
    pub issues: Vec<Issue>,
    #[serde(default)]
    pub suggestions: Vec<String>,
    #[serde(default)]
    pub escalations: Vec<RaisedEscalation>,
}

/// A memory harvester's output (the body of memory-harvest.json).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HarvestOutput {
    #[serde(default)]
    pub experiences: Vec<Experience>,
    #[serde(default)]
    pub cross_pollination_candidates: Vec<CrossPollination>,
    #[serde(default)]
    pub escalations: Vec<RaisedEscalation>,
}

/// What a role's stdout may not claim, whatever its kind: another task (a top-level
/// `taskId` other than the run's), or an artifact path that leaves the task
/// directory (`..`, an absolute path; a URL is fine). Unparsable output passes here
/// and is reported by [`parse_output`].
pub fn check_scope(stdout: &[u8], task_id: &str) -> Result<(), String> {
    let v = match clawboard_core::json::parse_value(stdout) {
        Ok(v) => v,
        Err(clawboard_core::json::JsonError::Syntax(_)) => return Ok(()),
        Err(clawboard_core::json::JsonError::DuplicateKey { pointer, key, line, column }) => {
            let at = if pointer.is_empty() { "/" } else { &pointer };
            return Err(format!("stdout {at}: the key {key:?} appears twice (line {line}, column {column})"));
        }
        Err(wide @ clawboard_core::json::JsonError::BigInteger { .. }) => return Err(format!("stdout: {wide}")),
    };
    match v.get("taskId") {
        None => {}
        Some(serde_json::Value::String(t)) if t == task_id => {}
        Some(other) => {
            return Err(format!(
                "stdout /taskId: {other} is not this run's task {task_id:?}; a role answers for its own task only"
            ));
        }
    }
    let artifacts = v.get("artifacts").and_then(serde_json::Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for (i, a) in artifacts.iter().enumerate() {
        let Some(path) = a.get("path").and_then(serde_json::Value::as_str) else { continue };
        if path.starts_with("file:") {
            return Err(format!(
                "stdout /artifacts/{i}/path: {path:?}: a file: URL; an artifact is a path inside the task directory or a URL"
            ));
        }
        if path.contains("://") {
            continue;
        }
        // `./x`, `out/` and `.` are the task directory's own; only leaving it is refused.
        let inside = path.trim_start_matches("./").trim_end_matches('/');
        if inside.is_empty() || inside == "." {
            continue;
        }
        if let Err(e) = clawboard_core::acl::check_path(inside) {
            return Err(format!(
                "stdout /artifacts/{i}/path: {path:?}: {e}; an artifact is a path inside the task directory or a URL"
            ));
        }
    }
    Ok(())
}

/// Parses a role's stdout as `T`; the error names the field (`/team/0/role: …`).
pub fn parse_output<T: DeserializeOwned>(stdout: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(stdout).map_err(|e| format!("stdout is not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        // An output with nothing required (a blueprint step that writes nothing) may be empty.
        return serde_json::from_str::<T>("{}")
            .map_err(|_| "stdout is empty; a role must print one JSON document".to_owned());
    }
    let de = &mut serde_json::Deserializer::from_str(text);
    let value: T = serde_path_to_error::deserialize(de).map_err(|e| {
        let at = clawboard_core::kind::pointer_of(e.path());
        format!("stdout {}: {}", if at.is_empty() { "/" } else { &at }, e.inner())
    })?;
    // Nothing but whitespace may follow the document.
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<serde_json::Value>();
    stream.next();
    if stream.next().is_some() {
        return Err("stdout holds more than one JSON document".into());
    }
    Ok(value)
}

/// Checks memory cells' values are in 0–1 (the schema's rule for memory-harvest.json).
pub fn check_harvest(h: &HarvestOutput) -> Result<(), String> {
    let bad = |v: f64| !(0.0..=1.0).contains(&v);
    for (i, e) in h.experiences.iter().enumerate() {
        for (j, c) in e.cells.iter().enumerate() {
            let Cell { value, .. } = c;
            if bad(*value) {
                return Err(format!("stdout /experiences/{i}/cells/{j}/value: {value} is not within 0 and 1"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clawboard_core::formats::Level;

    #[test]
    fn names_the_field() {
        let e = parse_output::<PmOutput>(br#"{"team":[{"role":7}]}"#).unwrap_err();
        assert!(e.starts_with("stdout /team/0/role: invalid type"), "{e}");
        let e = parse_output::<WorkerOutput>(b"hello").unwrap_err();
        assert!(e.contains("expected value"), "{e}");
        let e = parse_output::<WorkerOutput>(br#"{"summary":"a"} {"summary":"b"}"#).unwrap_err();
        assert!(e.contains("trailing") || e.contains("more than one"), "{e}");
        assert!(parse_output::<WorkerOutput>(b"  ").unwrap_err().contains("empty"));
        let ok: WorkerOutput =
            parse_output(br#"{"summary":"done","escalations":[{"level":"high","issue":"x"}]}"#).unwrap();
        assert_eq!(ok.escalations[0].level, Level::High);
    }

    #[test]
    fn an_output_answers_for_its_own_task_only() {
        assert!(check_scope(br#"{"summary":"x"}"#, "t1").is_ok());
        assert!(check_scope(br#"{"summary":"x","taskId":"t1"}"#, "t1").is_ok());
        let e = check_scope(br#"{"summary":"x","taskId":"victim"}"#, "t1").unwrap_err();
        assert_eq!(e, "stdout /taskId: \"victim\" is not this run's task \"t1\"; a role answers for its own task only");
        assert!(check_scope(br#"{"taskId":7}"#, "t1").unwrap_err().starts_with("stdout /taskId: 7 is not"));
        let ok = br#"{"summary":"x","artifacts":[{"path":"out/report.md"},{"path":"https://example.org/a"},{"path":"./notes.md"},{"path":"out/"},{"path":"."}]}"#;
        assert!(check_scope(ok, "t1").is_ok());
        for (bad, why) in [
            ("../../etc/passwd", "climbs out with .."),
            ("/etc/passwd", "absolute"),
            ("a//b", "empty component"),
            ("file:///etc/passwd", "a file: URL"),
        ] {
            let out = format!(r#"{{"summary":"x","artifacts":[{{"path":"ok.md"}},{{"path":"{bad}"}}]}}"#);
            let e = check_scope(out.as_bytes(), "t1").unwrap_err();
            assert!(e.starts_with(&format!("stdout /artifacts/1/path: \"{bad}\": ")) && e.contains(why), "{e}");
        }
        // Not JSON: left for parse_output to name.
        assert!(check_scope(b"{nope", "t1").is_ok());
    }
}

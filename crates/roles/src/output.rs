//! What each kind of role prints on stdout: one JSON document, checked here with
//! an error that names the field. Any role may add `escalations`.

use clawboard_core::formats::{Artifact, Cell, Criteria, CrossPollination, Experience, Issue, Level};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// An escalation a role raises in its output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RaisedEscalation {
    pub level: Level,
    pub issue: String,
    #[serde(default)]
    pub suggested_action: Option<String>,
    #[serde(default)]
    pub requires_human_approval: bool,
}

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

/// Parses a role's stdout as `T`; the error names the field (`/team/0/role: …`).
pub fn parse_output<T: DeserializeOwned>(stdout: &[u8]) -> Result<T, String> {
    let text = std::str::from_utf8(stdout).map_err(|e| format!("stdout is not UTF-8: {e}"))?;
    if text.trim().is_empty() {
        return Err("stdout is empty; a role must print one JSON document".into());
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
}

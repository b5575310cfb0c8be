//! Conditions of adaptive blueprints: `PATH OP VALUE`, e.g.
//! `control.quality_scores.virality < $quality_threshold`.

use clawboard_board::BoardPath;
use serde_json::Value;

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Op {
    const ALL: [(&'static str, Op); 6] =
        [("<=", Op::Le), (">=", Op::Ge), ("==", Op::Eq), ("!=", Op::Ne), ("<", Op::Lt), (">", Op::Gt)];

    fn text(self) -> &'static str {
        Op::ALL.iter().find(|(_, o)| *o == self).map(|(t, _)| *t).unwrap_or("?")
    }
}

/// The right-hand side: a literal or one of `execution_config`'s values.
#[derive(Debug, Clone, PartialEq)]
pub enum Operand {
    Literal(Value),
    QualityThreshold,
    MaxRetries,
}

/// The values `$name` operands stand for.
#[derive(Debug, Clone, Copy)]
pub struct Vars {
    pub quality_threshold: f64,
    pub max_retries: u32,
}

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    pub path: BoardPath,
    pub op: Op,
    pub value: Operand,
    text: String,
}

impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl Condition {
    /// Parses `PATH OP VALUE`; the error is the reason.
    pub fn parse(text: &str) -> Result<Condition, String> {
        let t = text.trim();
        let Some((at, op_text, op)) = Op::ALL
            .iter()
            .filter_map(|(s, o)| t.find(s).map(|i| (i, *s, *o)))
            .min_by_key(|(i, s, _)| (*i, 2 - s.len()))
        else {
            return Err(format!("{text:?} has no comparison; write PATH OP VALUE with OP one of < <= > >= == !="));
        };
        let path_text = t[..at].trim();
        let value_text = t[at + op_text.len()..].trim();
        let path =
            BoardPath::parse(path_text).map_err(|e| format!("{path_text:?} is not a board path: {}", e.reason))?;
        if path.keys.is_empty() {
            return Err(format!("{path_text:?} names a whole zone; name a value in it"));
        }
        let value = match value_text {
            "$quality_threshold" => Operand::QualityThreshold,
            "$max_retries" => Operand::MaxRetries,
            v if v.starts_with('$') => {
                return Err(format!("{v:?} is not a known variable ($quality_threshold, $max_retries)"));
            }
            "" => return Err(format!("{text:?} has nothing after {op_text}")),
            v => Operand::Literal(
                serde_json::from_str::<Value>(v)
                    .ok()
                    .filter(|v| v.is_number() || v.is_string() || v.is_boolean())
                    .ok_or_else(|| format!("{v:?} is not a number, a quoted string, true or false"))?,
            ),
        };
        if matches!(op, Op::Lt | Op::Le | Op::Gt | Op::Ge) && matches!(&value, Operand::Literal(v) if !v.is_number()) {
            return Err(format!("{} compares with {value_text}, which is not a number", op.text()));
        }
        Ok(Condition { path, op, value, text: t.to_owned() })
    }

    /// True when the condition holds for `actual` (the value at the path, if any).
    /// An absent or non-numeric value makes `<`, `<=` and `!=` true, the others false.
    pub fn eval(&self, actual: Option<&Value>, vars: &Vars) -> bool {
        let rhs = match &self.value {
            Operand::Literal(v) => v.clone(),
            Operand::QualityThreshold => Value::from(vars.quality_threshold),
            Operand::MaxRetries => Value::from(vars.max_retries),
        };
        let absent = matches!(self.op, Op::Lt | Op::Le | Op::Ne);
        let Some(actual) = actual else { return absent };
        match (actual.as_f64(), rhs.as_f64()) {
            (Some(a), Some(b)) => match self.op {
                Op::Lt => a < b,
                Op::Le => a <= b,
                Op::Gt => a > b,
                Op::Ge => a >= b,
                Op::Eq => a == b,
                Op::Ne => a != b,
            },
            _ => match self.op {
                Op::Eq => *actual == rhs,
                Op::Ne => *actual != rhs,
                _ => absent,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    const VARS: Vars = Vars { quality_threshold: 75.0, max_retries: 3 };

    #[test]
    fn comparisons_with_literals_and_variables() {
        let c = Condition::parse("control.quality_scores.virality < $quality_threshold").unwrap();
        assert_eq!(c.path.to_string(), "control.quality_scores.virality");
        assert!(c.eval(Some(&json!(68)), &VARS));
        assert!(!c.eval(Some(&json!(82.5)), &VARS));
        assert!(c.eval(None, &VARS), "no score yet: below the threshold");
        let c = Condition::parse("control.iteration_count>=2").unwrap();
        assert_eq!(c.op, Op::Ge);
        assert!(c.eval(Some(&json!(2)), &VARS));
        assert!(!c.eval(None, &VARS));
        let c = Condition::parse("meta.platform == \"twitter\"").unwrap();
        assert!(c.eval(Some(&json!("twitter")), &VARS));
        assert!(!c.eval(Some(&json!("wechat")), &VARS));
        let c = Condition::parse("control.sensitive_filter.passed != true").unwrap();
        assert!(c.eval(Some(&json!(false)), &VARS));
        assert!(c.eval(None, &VARS));
        let c = Condition::parse("control.iteration_count <= $max_retries").unwrap();
        assert!(c.eval(Some(&json!(3)), &VARS));
    }

    #[test]
    fn bad_conditions_say_why() {
        for (text, why) in [
            ("control.x", "has no comparison"),
            ("contrl.x < 1", "not a board path"),
            ("control < 1", "whole zone"),
            ("control.x < $threshold", "not a known variable"),
            ("control.x < ", "has nothing after"),
            ("control.x < abc", "not a number, a quoted string"),
            ("control.x < \"a\"", "not a number"),
        ] {
            let e = Condition::parse(text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}

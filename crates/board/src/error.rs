use clawboard_core::acl::Decision;

/// Everything the board can refuse or fail at; each names the task (or the scope,
/// template or step), the path and the reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A bad path, a wrong type, an unknown zone, a value too large: nothing changed.
    #[error("task {task}: {path}: {reason}")]
    Bad { task: String, path: String, reason: String },

    /// The zone table does not let the caller do this: nothing changed.
    #[error("task {task}: {path}: refused: {} (rule: {})", decision.why.join("; "), decision.rule)]
    Refused { task: String, path: String, decision: Box<Decision> },

    #[error("scope {scope:?}: at position {pos}: {reason}")]
    Scope { scope: String, pos: usize, reason: String },

    #[error("{file}: template {template}: {field}: {reason}")]
    Template { file: String, template: String, field: String, reason: String },

    /// A slice that does not fit its budget even after every compression rung.
    #[error(
        "step {step}: the slice is {size} tokens, over its budget of {budget} tokens, after the compression rungs {}; give the step a larger max_tokens or a narrower scope",
        if rungs.is_empty() { "(none applicable)".to_owned() } else { rungs.join(", ") }
    )]
    OverBudget { step: String, budget: u64, size: u64, rungs: Vec<String> },

    /// A history record that cannot be read: the board is not guessed at.
    #[error("task {task}: {file}: the board's history cannot be read: {reason}")]
    History { task: String, file: String, reason: String },

    #[error(transparent)]
    Store(#[from] clawboard_core::Error),
}

impl Error {
    /// True when the caller gave something wrong or was refused (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        match self {
            Error::Store(e) => e.is_bad_input(),
            Error::History { .. } => false,
            _ => true,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

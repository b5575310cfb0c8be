//! What a run of the bridge did: [`Report`], printed by `clawboard entry github
//! sync` (as JSON with `--json`) and logged by the daemon's job.

use serde::Serialize;

/// An entry and the comment it was read from or written to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    pub id: String,
    pub issue: u64,
    pub comment: u64,
}

/// Something left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub issue: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    pub reason: String,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub repository: String,
    /// When the run started (RFC 3339, to the second).
    pub at: String,
    /// The issues looked at.
    pub issues: Vec<u64>,
    /// New local entries, from comments.
    pub imported: Vec<Item>,
    /// Local entries replaced by a newer comment.
    pub updated: Vec<Item>,
    /// Entries posted as new comments.
    pub posted: Vec<Item>,
    /// Comments edited to match their entry.
    pub edited: Vec<Item>,
    /// Comments found for entries that had not recorded them (a run cut short).
    pub recorded: Vec<Item>,
    pub skipped: Vec<Skipped>,
    pub requests: u64,
    /// Pages answered 304 Not Modified.
    pub not_modified: u64,
    pub rate_limited: u64,
}

impl Report {
    /// One line: what changed and what it cost.
    pub fn summary(&self) -> String {
        format!(
            "{} issue(s) of {}: {} imported, {} updated, {} posted, {} edited, {} recorded, {} skipped; {} request(s), {} not modified",
            self.issues.len(),
            self.repository,
            self.imported.len(),
            self.updated.len(),
            self.posted.len(),
            self.edited.len(),
            self.recorded.len(),
            self.skipped.len(),
            self.requests,
            self.not_modified
        )
    }

    pub(super) fn skip(&mut self, issue: Option<u64>, comment: Option<u64>, entry: Option<&str>, reason: String) {
        tracing::debug!(issue, comment, entry, "github: skipped: {reason}");
        self.skipped.push(Skipped { issue, comment, entry: entry.map(str::to_owned), reason });
    }
}

//! An in-memory GitHub for tests of the bridge and of the jobs that run it: issues
//! with comments and labels, request counting, and failures on demand. Shared by
//! clones, so a test keeps one handle to look at what the bridge did.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::client::{Api, Comment, Stats};
use crate::error::{Error, Result};

/// A comment by `login`, standing `association` in the repository.
fn by(id: u64, body: &str, login: &str, association: &str) -> Comment {
    Comment {
        id,
        body: Some(body.to_owned()),
        user: Some(crate::client::User { login: login.to_owned() }),
        author_association: Some(association.to_owned()),
    }
}

#[derive(Debug, Default)]
struct State {
    /// Issue number -> (labels, open, comments oldest first).
    issues: BTreeMap<u64, (Vec<String>, bool, Vec<Comment>)>,
    next_id: u64,
    stats: Stats,
    /// Requests that fail with 401 until cleared.
    refuse: bool,
    /// Writes made (method and comment id), in order.
    writes: Vec<(&'static str, u64)>,
}

/// A fake GitHub repository.
#[derive(Debug, Clone, Default)]
pub struct MemoryApi {
    state: Arc<Mutex<State>>,
}

impl MemoryApi {
    pub fn new() -> MemoryApi {
        let api = MemoryApi::default();
        api.lock().next_id = 4_300_000_001;
        api
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds issue `number` (open) with `labels`.
    pub fn issue(&self, number: u64, labels: &[&str]) {
        self.lock().issues.insert(number, (labels.iter().map(|l| (*l).to_owned()).collect(), true, Vec::new()));
    }

    /// Adds a comment to issue `number` as someone else would; returns its id.
    pub fn comment(&self, number: u64, body: &str) -> u64 {
        let mut s = self.lock();
        let id = s.next_id;
        s.next_id += 1;
        if let Some(i) = s.issues.get_mut(&number) {
            // Someone who can push to the repository.
            i.2.push(by(id, body, "someone", "COLLABORATOR"));
        }
        id
    }

    /// The comments of issue `number`.
    pub fn comments(&self, number: u64) -> Vec<Comment> {
        self.lock().issues.get(&number).map(|i| i.2.clone()).unwrap_or_default()
    }

    /// Replaces the body of comment `id` as someone else would.
    pub fn edit(&self, id: u64, body: &str) {
        for i in self.lock().issues.values_mut() {
            for c in &mut i.2 {
                if c.id == id {
                    c.body = Some(body.to_owned());
                }
            }
        }
    }

    /// Every request fails with 401 while `refuse` holds.
    pub fn refuse(&self, refuse: bool) {
        self.lock().refuse = refuse;
    }

    /// The writes made so far: ("POST" | "PATCH", comment id).
    pub fn writes(&self) -> Vec<(&'static str, u64)> {
        self.lock().writes.clone()
    }

    fn request(&self) -> Result<MutexGuard<'_, State>> {
        let mut s = self.lock();
        s.stats.requests += 1;
        if s.refuse {
            return Err(Error::Unauthorized { message: "Bad credentials".into() });
        }
        Ok(s)
    }
}

fn not_found(what: String) -> Error {
    Error::Status { method: "GET", url: what, status: 404, message: "Not Found".into() }
}

impl Api for MemoryApi {
    async fn list_comments(&mut self, issue: u64) -> Result<Vec<Comment>> {
        let s = self.request()?;
        s.issues.get(&issue).map(|i| i.2.clone()).ok_or_else(|| not_found(format!("issue {issue}")))
    }

    async fn list_labeled(&mut self, label: &str) -> Result<Vec<u64>> {
        let s = self.request()?;
        Ok(s.issues.iter().filter(|(_, i)| i.1 && i.0.iter().any(|l| l == label)).map(|(n, _)| *n).collect())
    }

    async fn create_comment(&mut self, issue: u64, body: &str) -> Result<Comment> {
        let mut s = self.request()?;
        let id = s.next_id;
        let i = s.issues.get_mut(&issue).ok_or_else(|| not_found(format!("issue {issue}")))?;
        // The token's user, the repository's owner.
        let c = by(id, body, "owner", "OWNER");
        i.2.push(c.clone());
        s.next_id += 1;
        s.writes.push(("POST", id));
        Ok(c)
    }

    async fn update_comment(&mut self, comment: u64, body: &str) -> Result<Comment> {
        let mut s = self.request()?;
        let c = s
            .issues
            .values_mut()
            .flat_map(|i| i.2.iter_mut())
            .find(|c| c.id == comment)
            .ok_or_else(|| not_found(format!("comment {comment}")))?;
        c.body = Some(body.to_owned());
        let c = c.clone();
        s.writes.push(("PATCH", comment));
        Ok(c)
    }

    fn stats(&self) -> Stats {
        self.lock().stats
    }
}

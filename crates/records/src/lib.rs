//! clawboard-records owns what the tree records about tasks, and what is read back
//! from those records: each role run's attempt record, escalations and the human
//! decisions on them, the GM's logs and PM figures, the evolution reports, and what
//! a reviewer sees. It writes the tree only through the `Store` it is handed and
//! never runs a role, never touches the network.
//!
//! # Where it sits
//! `core` ← `records` ← `roles` ← the binary. The lifecycle (roles) writes records
//! as a task runs: an attempt before and after each run, the escalations a role
//! raised, an arbitration when the validator and the team still disagree at the
//! iteration limit ([`gm::record_disagreement`]). The readers and aggregations
//! (review views, PM performance, reports) read the same records. Keeping both
//! here, below roles, leaves one direction: records never imports roles, so the
//! record formats a reader needs (`Attempt`, [`escalations::RaisedEscalation`]) are
//! defined here, and roles maps its own run status onto [`attempts::AttemptStatus`].
//!
//! # Layout
//! - [`attempts`]: `tasks/{id}/attempts/`, the record of every run with its raw output.
//! - [`escalations`]: `escalations/{id}.json`: raise, load, decide (logged in `gm/decisions.md`).
//! - [`gm`]: `gm/pm-performance.json`, recomputed from `tasks/`, and `gm/arbitrations.md`.
//! - [`review`]: the escalations, newest first, and each task's context for a reviewer.
//! - [`reports`]: the daily, weekly and monthly evolution reports (snapshot tests in
//!   `reports/tests.rs`).
//!
//! Every path comes from `clawboard_core::layout`.

pub mod attempts;
pub mod escalations;
pub mod gm;
pub mod reports;
pub mod review;

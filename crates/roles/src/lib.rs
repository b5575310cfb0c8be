//! clawboard-roles runs roles, and nothing else: role runners (a command, an HTTP
//! endpoint or an OpenAI-compatible LLM endpoint), the lifecycle engine that carries
//! a task from `pending` to `completed` or `failed`, intake of dropped files, and
//! claims. It never touches the network except to call a configured HTTP or LLM
//! role, and keeps all of a task's state in its directory so any step can be resumed.
//!
//! What the lifecycle records as it runs (attempts, escalations, the GM's
//! arbitrations) and everything read back from those records (review views, PM
//! performance, reports) is `clawboard-records`, below this crate: roles writes
//! records through it and records never imports roles. Every path of the tree comes
//! from `clawboard_core::layout`.
//!
//! # Layout
//! - [`config`]: `[lifecycle]` and `[roles.ID]` config.
//! - [`intake`]: inbox/task.json → validated, claimed task; rejections with reasons.
//! - [`claims`]: claim a task once; the set of active tasks to resume.
//! - [`engine`]: [`Engine::drive`], the lifecycle state machine; `engine/run.rs` drives
//!   one task through its steps, `engine/step.rs` runs one step with retries, backoff
//!   and fallback, `engine/products.rs` writes what the steps produce, and
//!   `engine/board.rs` keeps the task's board.
//! - [`runner`]: one run of a role; timeouts kill the process group; `runner/llm.rs`
//!   asks a chat-completions endpoint (docs/LLM.md).
//! - [`context`]: the JSON a role receives. [`output`]: what it must print.
//!   [`reply`]: that shape as a JSON Schema, which an `llm` role's model is asked to fit.
//! - [`status_page`]: the progress page, `status.md`.
//! - [`replay`]: a recorded task's attempts answering a replay's role calls, and
//!   what each step was handed then against now.
//! - [`sandbox`]: the Landlock sandbox of command roles (`[sandbox]`).

pub mod claims;
pub mod config;
pub mod context;
pub mod engine;
pub mod intake;
pub mod output;
pub mod replay;
pub mod reply;
pub mod runner;
pub mod sandbox;
pub mod status_page;
pub mod telemetry;
pub mod trial;
pub mod write_policy;

pub use config::{LifecycleConfig, LlmSection, RoleConfig, RolesConfig, Sandbox, SandboxConfig, SandboxMode};
pub use engine::step::clear_active_instances;
pub use engine::{Engine, EngineConfig, Outcome, Shutdown};

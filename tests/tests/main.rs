//! The end-to-end suite, one test binary: the real `clawboard` binary, real daemons
//! and role processes on temp trees, against the real servers `scripts/test` starts
//! (S3-compatible, git, GitHub simulator, local model, headless Chromium). One
//! module per area; run one with `cargo nextest run -p clawboard-tests -E
//! 'test(/^sync::/)'`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acl;
mod archive;
mod archive_nodes;
mod bad_input;
mod blueprint_crash;
mod blueprint_middleware;
mod blueprint_seed;
mod blueprints;
mod board;
mod browser;
mod cli;
mod crash;
mod crash_daemon;
mod daemon;
mod doctor;
mod entries;
mod github;
mod hostile;
mod lanes;
mod llm;
mod model;
mod multinode;
mod replay;
mod retention;
mod review;
mod review_notify;
mod role_try;
mod run_crash;
mod sandbox;
mod scale;
mod slow_writers;
mod sync;
mod sync_remote;
mod telemetry;

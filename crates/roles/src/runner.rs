//! Running one role once: a command (JSON context on stdin, JSON result on stdout),
//! an HTTP endpoint (context as the POST body, result as the response body), or an
//! OpenAI-compatible chat-completions endpoint (`runner/llm.rs`: the context as the user
//! message, the model's JSON reply as the result).
//! A timeout kills the command's whole process group; so does the daemon's kill
//! signal at shutdown, which marks the run interrupted.

use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::config::{HttpConfig, RoleConfig};
use crate::reply::ReplyShape;

mod llm;

pub use llm::{Listing, ModelProbe, count_model_tokens, probe_model};
mod placement;
mod program;

pub use placement::spawn_here;
pub use program::check_command;

pub(crate) use program::{forget_programs, own_exe, program, resolve_programs};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Exited 0 (HTTP 2xx); the output still has to pass its format check.
    Exited,
    /// Exited non-zero, or could not be started, or HTTP error.
    Failed,
    TimedOut,
    /// Killed because the daemon stopped (or died: see `attempts`).
    Interrupted,
}

impl From<RunStatus> for clawboard_records::attempts::AttemptStatus {
    fn from(s: RunStatus) -> Self {
        use clawboard_records::attempts::AttemptStatus;
        match s {
            RunStatus::Exited => AttemptStatus::Ok,
            RunStatus::Failed => AttemptStatus::Failed,
            RunStatus::TimedOut => AttemptStatus::TimedOut,
            RunStatus::Interrupted => AttemptStatus::Interrupted,
        }
    }
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub status: RunStatus,
    pub exit_code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Why it failed, in one line, when it did.
    pub error: Option<String>,
    pub elapsed: Duration,
    /// Tokens the run reports having spent (an `llm` role's `usage`), kept for
    /// the slice ledger also when the reply was refused.
    pub usage: Option<serde_json::Value>,
    /// Running the role again now is pointless: its server asked for a longer
    /// wait than the role allows (`llm.max_wait`). Its retries are skipped; the
    /// fallback, if any, runs.
    pub skip_retries: bool,
    /// An `llm` role's reply was cut off at its completion limit: a retry gets more room.
    pub cut_off: bool,
}

/// Who a run is for; passed as environment (command) or headers (HTTP).
#[derive(Debug, Clone)]
pub struct RunIdentity {
    pub root: String,
    pub task_id: String,
    pub role: String,
    pub instance_id: String,
    pub token: String,
    /// For a command role run in the Landlock sandbox: the paths its process
    /// may not touch (`Sandbox::for_role`). `None`: it runs unsandboxed.
    pub sandbox: Option<std::sync::Arc<Vec<std::path::PathBuf>>>,
    /// The run's span (`invoke_agent`), handed on as W3C `traceparent` (`TRACEPARENT`
    /// for a command, the header for HTTP and model requests) so the role's own spans
    /// join the task's trace. `None` with telemetry off.
    pub trace: Option<crate::telemetry::SpanContext>,
}

impl RunIdentity {
    fn env(&self) -> [(&'static str, &str); 5] {
        [
            ("CLAWBOARD_ROOT", &self.root),
            ("CLAWBOARD_TASK_ID", &self.task_id),
            ("CLAWBOARD_ROLE", &self.role),
            ("CLAWBOARD_INSTANCE_ID", &self.instance_id),
            ("CLAWBOARD_TOKEN", &self.token),
        ]
    }
}

/// Resolves once `rx` turns true; never, if its sender is gone.
pub async fn fired(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs `role` once with `context`. `kill` turning true interrupts it.
pub async fn run(role: &RoleConfig, context: &[u8], who: &RunIdentity, kill: &mut watch::Receiver<bool>) -> RunOutcome {
    run_shaped(role, context, &ReplyShape::default(), who, kill).await
}

/// [`run`] for a step whose reply has a known `shape`: an `llm` role's model is
/// asked for it (a command or HTTP role is not told).
pub async fn run_shaped(
    role: &RoleConfig,
    context: &[u8],
    shape: &ReplyShape,
    who: &RunIdentity,
    kill: &mut watch::Receiver<bool>,
) -> RunOutcome {
    let started = Instant::now();
    let mut out = match (&role.command, &role.http, &role.llm) {
        (Some(argv), _, _) => run_command(argv, role, context, who, kill).await,
        (None, Some(http), _) => run_http(http, role, context, who, kill).await,
        (None, None, Some(llm)) => llm::run(llm, role, context, shape, who, kill).await,
        (None, None, None) => failed("the role has no `command`, `http` or `llm`"),
    };
    out.elapsed = started.elapsed();
    out
}

/// What a run of `role` is handed for `context`, as an attempt keeps it (and a
/// replay compares it): for a model role, the chat request it would send (model,
/// messages, reply format; never a key); otherwise the context itself. The run's own
/// ids (`instanceId`, `attempt`), which differ on every run, are left out.
pub fn input_of(role: &RoleConfig, context: &serde_json::Value, shape: &ReplyShape) -> serde_json::Value {
    let mut ctx = context.clone();
    if let Some(o) = ctx.as_object_mut() {
        o.remove("instanceId");
        o.remove("attempt");
    }
    match (&role.command, &role.http, &role.llm) {
        (None, None, Some(llm)) => {
            let bytes = serde_json::to_vec(&ctx).unwrap_or_default();
            serde_json::json!({"request": llm::request_for(llm, &bytes, shape)})
        }
        _ => serde_json::json!({"context": ctx}),
    }
}

/// How a model run's error says its reply was cut off at the completion limit.
pub(crate) fn llm_cut_off() -> &'static str {
    llm::CUT_OFF
}

/// A run that ended as `status`, with nothing else to say yet.
fn ended(status: RunStatus) -> RunOutcome {
    RunOutcome {
        status,
        exit_code: None,
        stdout: Vec::new(),
        stderr: Vec::new(),
        error: None,
        elapsed: Duration::ZERO,
        usage: None,
        skip_retries: false,
        cut_off: false,
    }
}

fn failed(msg: impl Into<String>) -> RunOutcome {
    RunOutcome { error: Some(msg.into()), ..ended(RunStatus::Failed) }
}

/// Reads at most `limit` bytes; the flag says whether there was more.
async fn read_capped(mut r: impl AsyncRead + Unpin, limit: u64) -> (Vec<u8>, bool) {
    let mut buf = Vec::new();
    let mut take = (&mut r).take(limit.saturating_add(1));
    // A read error ends the stream; what was read so far is kept.
    let _ = take.read_to_end(&mut buf).await;
    let over = buf.len() as u64 > limit;
    buf.truncate(limit as usize);
    (buf, over)
}

fn kill_group(pid: Option<u32>) {
    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
        // ESRCH (already gone) is the common, harmless case.
        let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The variables of the daemon's environment every command role gets (and
/// every `LC_*`): what programs need to start and to find their files. Nothing
/// else of it: a daemon started with `AWS_SECRET_ACCESS_KEY`, `GITHUB_TOKEN` or
/// a model's key does not hand them to a role, which is often a model
/// following text it was given. A role names more in `pass_env`.
pub const INHERITED: [&str; 10] =
    ["PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TERM", "TMPDIR"];

/// Makes this process (the daemon, or `clawboard run`) non-dumpable: its
/// `/proc/PID/environ`, `mem` and the like are then closed to other processes
/// of its user, and it cannot be traced by them. A role running without the
/// sandbox is a process of that user: without this, `cat /proc/$PPID/environ`
/// would hand it the keys [`INHERITED`] keeps out of its own environment.
/// (It also turns off core dumps of the daemon.) Role processes are not
/// affected: `execve` makes them dumpable again.
pub fn close_own_proc_files() -> nix::Result<()> {
    nix::sys::prctl::set_dumpable(false)
}

/// `program` to run for `role`, with an environment of the [`INHERITED`]
/// variables and the role's `pass_env` alone (its `env` and its run's
/// `CLAWBOARD_*` are added by the caller).
fn command_for(program: impl AsRef<std::ffi::OsStr>, role: &RoleConfig) -> tokio::process::Command {
    command_with_env(program, &role.pass_env)
}

/// `program` with an environment of the daemon's [`INHERITED`] variables (and
/// every `LC_*`) and those `pass_env` names alone: how the daemon starts every
/// process it starts (a role, the notify hook).
pub fn command_with_env(program: impl AsRef<std::ffi::OsStr>, pass_env: &[String]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env_clear();
    for (name, value) in std::env::vars_os() {
        let passed = name
            .to_str()
            .is_some_and(|n| INHERITED.contains(&n) || n.starts_with("LC_") || pass_env.iter().any(|p| p == n));
        if passed {
            cmd.env(name, value);
        }
    }
    cmd
}

/// `Err` (why) unless `name` can be a variable's name: letters, digits and
/// `_`, not starting with a digit.
pub fn check_var_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic());
    if first_ok && chars.all(|c| c == '_' || c.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(format!("{name:?} is not a variable name (letters, digits and `_`, not starting with a digit)"))
    }
}

/// The process `argv` of `role` runs as: directly, or through our own binary
/// when sandboxed; its environment, its pipes, its own process group. `Err`:
/// why it cannot be started.
fn role_command(argv: &[String], role: &RoleConfig, who: &RunIdentity) -> Result<tokio::process::Command, String> {
    let mut cmd = match &who.sandbox {
        None => {
            let mut cmd = command_for(program(&argv[0], role), role);
            // argv[0] as configured, whatever file it resolved to.
            cmd.arg0(&argv[0]).args(&argv[1..]);
            cmd
        }
        // Through our own binary, which restricts itself and then executes the
        // program in its place (crate::sandbox): same pid, group and pipes.
        Some(denied) => {
            let Some(exe) = own_exe() else {
                return Err(
                    "the role runs sandboxed, but clawboard's own binary, which sets the sandbox up, cannot be found"
                        .to_owned(),
                );
            };
            let mut cmd = command_for(exe, role);
            cmd.arg0("clawboard-sandbox").arg(crate::sandbox::EXEC_COMMAND);
            for d in denied.iter() {
                cmd.arg("--deny").arg(d);
            }
            cmd.arg("--program").arg(program(&argv[0], role)).arg("--").args(argv);
            // Its temporary files somewhere it may make them (a role's own
            // TMPDIR, set in its `env` below, wins).
            if !role.env.contains_key("TMPDIR") {
                match crate::sandbox::private_tmp(denied) {
                    Ok(Some(tmp)) => {
                        cmd.env("TMPDIR", tmp);
                    }
                    Ok(None) => {}
                    Err(e) => return Err(format!("the sandbox's temporary directory: {e}")),
                }
            }
            cmd
        }
    };
    // The daemon's own binary, for roles that call `clawboard board …` (a role's env may say otherwise).
    if let Some(exe) = own_exe() {
        cmd.env("CLAWBOARD_EXE", exe);
    }
    cmd.envs(&role.env).envs(who.env());
    if let Some(t) = &who.trace {
        cmd.env("TRACEPARENT", t.traceparent());
    }
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0).kill_on_drop(true);
    if let Some(cwd) = &role.cwd {
        cmd.current_dir(cwd);
    }
    Ok(cmd)
}

async fn run_command(
    argv: &[String],
    role: &RoleConfig,
    context: &[u8],
    who: &RunIdentity,
    kill: &mut watch::Receiver<bool>,
) -> RunOutcome {
    let mut cmd = match role_command(argv, role, who) {
        Ok(cmd) => cmd,
        Err(why) => return failed(why),
    };
    let mut child = match placement::spawn_here(|| cmd.spawn(), tokio::process::Child::id) {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot start {:?}: {e}", argv[0])),
    };
    let pid = child.id();
    let (Some(mut stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        kill_group(pid);
        return failed("the role's pipes could not be opened");
    };
    // The context is fed and both outputs read in this task, beside the wait (no
    // task of their own: nothing to hand over between threads when the role exits).
    let feed = async move {
        // A role may exit without reading its context; a broken pipe is not our error.
        let _ = stdin.write_all(context).await;
        let _ = stdin.shutdown().await;
    };
    let limit = role.max_output_bytes;
    let mut out_reader = std::pin::pin!(read_capped(stdout, limit));
    let mut err_reader = std::pin::pin!(read_capped(stderr, limit));
    let (mut out_read, mut err_read) = (None, None);
    let mut deadline = std::pin::pin!(tokio::time::sleep(role.timeout));

    let mut status = RunStatus::Exited;
    let mut error = None;
    // The feed lives in this block: stdin is closed once the process has ended.
    let exit = {
        let mut feed = std::pin::pin!(feed);
        let mut fed = false;
        loop {
            tokio::select! {
                r = child.wait() => break r.ok(),
                () = &mut feed, if !fed => fed = true,
                r = &mut out_reader, if out_read.is_none() => out_read = Some(r),
                r = &mut err_reader, if err_read.is_none() => err_read = Some(r),
                () = &mut deadline => {
                    kill_group(pid);
                    status = RunStatus::TimedOut;
                    error = Some(format!("timed out after {:?}; the process group was killed", role.timeout));
                    break child.wait().await.ok();
                }
                () = fired(kill) => {
                    kill_group(pid);
                    status = RunStatus::Interrupted;
                    error = Some("interrupted: the daemon is stopping".to_owned());
                    break child.wait().await.ok();
                }
            }
        }
    };
    // Output left open by a grandchild must not hold us forever; but the reader of
    // a role that did exit gets ample time on a loaded machine, and a reader cut
    // off fails the run rather than passing it with an empty stdout.
    let grace = Duration::from_secs(10);
    let (stdout, out_over, out_open) = match out_read {
        Some((bytes, over)) => (bytes, over, false),
        None => match tokio::time::timeout(grace, &mut out_reader).await {
            Ok((bytes, over)) => (bytes, over, false),
            Err(_) => (Vec::new(), false, true),
        },
    };
    // Held stdout, likely held stderr too: no second long wait.
    let err_grace = if out_open { Duration::from_secs(1) } else { grace };
    let (stderr, err_over) = match err_read {
        Some(read) => read,
        None => tokio::time::timeout(err_grace, &mut err_reader).await.unwrap_or_default(),
    };
    let exit_code = exit.and_then(|e| e.code());
    if status == RunStatus::Exited {
        if out_open {
            status = RunStatus::Failed;
            error = Some(format!(
                "its stdout was still open {} s after it exited (a process it started holds it?); its output is lost",
                grace.as_secs()
            ));
        } else if out_over {
            status = RunStatus::Failed;
            error = Some(format!("printed more than {limit} bytes (max_output_bytes)"));
        } else if exit_code != Some(0) {
            status = RunStatus::Failed;
            let why = match exit_code {
                Some(c) => format!("exited with code {c}"),
                None => "was killed by a signal".to_owned(),
            };
            // Its stderr was read no further than the limit: a role still writing
            // there then fails on the closed pipe, which is the likelier story.
            error = Some(if err_over {
                format!(
                    "{why}, after it wrote more than {limit} bytes to stderr (max_output_bytes; the rest was not read)"
                )
            } else {
                why
            });
        }
    }
    RunOutcome { exit_code, stdout, stderr, error, ..ended(status) }
}

async fn run_http(
    http: &HttpConfig,
    role: &RoleConfig,
    context: &[u8],
    who: &RunIdentity,
    kill: &mut watch::Receiver<bool>,
) -> RunOutcome {
    let client = match reqwest::Client::builder().timeout(role.timeout).build() {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot build an HTTP client: {e}")),
    };
    let mut req = client
        .post(&http.url)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", who.token))
        .header("x-clawboard-task-id", &who.task_id)
        .header("x-clawboard-role", &who.role)
        .header("x-clawboard-instance-id", &who.instance_id)
        .body(context.to_vec());
    if let Some(t) = &who.trace {
        req = req.header("traceparent", t.traceparent());
    }
    for (k, v) in &http.headers {
        req = req.header(k, v);
    }
    let limit = role.max_output_bytes;
    let call = async {
        let resp = req.send().await.map_err(|e| (e.is_timeout(), format!("POST {}: {e}", http.url)))?;
        let code = resp.status();
        let mut body = Vec::new();
        let mut resp = resp;
        while let Some(chunk) =
            resp.chunk().await.map_err(|e| (e.is_timeout(), format!("reading the response: {e}")))?
        {
            body.extend_from_slice(&chunk);
            if body.len() as u64 > limit {
                return Err((false, format!("response is over {limit} bytes (max_output_bytes)")));
            }
        }
        Ok((code, body))
    };
    tokio::select! {
        r = call => match r {
            Ok((code, body)) if code.is_success() => RunOutcome {
                exit_code: Some(i32::from(code.as_u16())), stdout: body, ..ended(RunStatus::Exited)
            },
            Ok((code, body)) => RunOutcome {
                exit_code: Some(i32::from(code.as_u16())), stderr: body,
                ..failed(format!("POST {} answered {code}", http.url))
            },
            Err((true, msg)) => RunOutcome { status: RunStatus::TimedOut, ..failed(msg) },
            Err((false, msg)) => failed(msg),
        },
        _ = fired(kill) => RunOutcome { status: RunStatus::Interrupted, ..failed("interrupted: the daemon is stopping") },
    }
}

/// Kills the process groups of role processes a previous daemon on `root` left
/// running when it died. Returns how many.
pub fn kill_orphans(root: &str) -> usize {
    orphans_in(std::path::Path::new("/proc"), root).into_iter().fold(0, |killed, pid| {
        kill_group(Some(pid));
        if let Ok(i) = i32::try_from(pid) {
            let _ = nix::sys::signal::kill(Pid::from_raw(i), Signal::SIGKILL);
        }
        killed + 1
    })
}

/// The processes under `proc` (a `/proc`) that a role run on `root` started:
/// their environment holds `CLAWBOARD_ROOT=root` and a role instance's id
/// (`CLAWBOARD_INSTANCE_ID=inst-…`). `CLAWBOARD_ROOT` alone is no mark: it is
/// how a person points the CLI at a tree, and their shell has it too.
fn orphans_in(proc: &std::path::Path, root: &str) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir(proc) else { return Vec::new() };
    let root_var = format!("CLAWBOARD_ROOT={root}");
    let me = std::process::id();
    let mut found = Vec::new();
    for p in procs.filter_map(Result::ok) {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(environ) = std::fs::read(p.path().join("environ")) else { continue };
        let (mut in_root, mut of_role) = (false, false);
        for kv in environ.split(|b| *b == 0) {
            in_root |= kv == root_var.as_bytes();
            of_role |= kv.strip_prefix(b"CLAWBOARD_INSTANCE_ID=inst-").is_some_and(|id| !id.is_empty());
        }
        if in_root && of_role {
            found.push(pid);
        }
    }
    found
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod http_tests;

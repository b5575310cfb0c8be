mod blueprint;
mod lap;

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use clawboard_core::formats::{Decision, Escalation, Task, TaskStatus};
use clawboard_core::{RelPath, Store, layout};
use clawboard_records::{escalations, reports};

use crate::cli::{EXIT_FAILURE, EXIT_OK, GlobalArgs};
use crate::config::Settings;

/// The example roles (scripts/roles/), written into the demo tree so the demo
/// needs nothing but this binary and python3.
const ROLES: &[(&str, &str)] = &[
    ("common.py", include_str!("../../../../scripts/roles/common.py")),
    ("pm.py", include_str!("../../../../scripts/roles/pm.py")),
    ("worker.py", include_str!("../../../../scripts/roles/worker.py")),
    ("validator.py", include_str!("../../../../scripts/roles/validator.py")),
    ("harvester.py", include_str!("../../../../scripts/roles/harvester.py")),
    ("escalate.py", include_str!("../../../../scripts/roles/escalate.py")),
    ("doc_update.py", include_str!("../../../../scripts/roles/doc_update.py")),
    ("writing.py", include_str!("../../../../scripts/roles/writing.py")),
];

/// How long the demo waits for its tasks before it gives up.
const DEADLINE: Duration = Duration::from_secs(90);

/// See the whole lifecycle: a real daemon, three tasks, an escalation approved, a blueprint, a Doc Update lap
#[derive(Debug, Args)]
#[command(after_help = "Starts a real daemon on a fresh tree (a new temporary directory unless
--root is given) with the example roles of scripts/roles/ (Python 3, no network),
drops three tasks into inbox/ (one the validator fails once so the team iterates,
one that asks a human to approve and is approved by the demo, one invalid that is
rejected), one blueprint task (xiaohongshu_viral: three competing titles, a
sensitive word fixed, one quality round, each step handed only its slice) and
writes a Doc Update request for Aya (seed 004's lane: Aya proposes,
Sho reviews, Tsugu applies, Gen reports back to Human), streams their progress and
ends with where everything is.

The daemon serves the review page on 127.0.0.1 while the demo runs; the demo
prints its URL (with the token). With --review, the demo waits for you to approve
the escalation there.

Examples:
  clawboard demo
  clawboard demo --review
  clawboard demo --root /tmp/my-demo")]
pub struct DemoArgs {
    /// Leave the escalation to you: approve it on the review page (or with
    /// `clawboard escalations approve`) instead of the demo doing it
    #[arg(long)]
    pub review: bool,
}

fn write_setup(root: &Path) -> anyhow::Result<PathBuf> {
    let dir = root.join(".clawboard/demo");
    let roles = dir.join("roles");
    std::fs::create_dir_all(&roles).with_context(|| format!("creating {}", roles.display()))?;
    for (name, body) in ROLES {
        std::fs::write(roles.join(name), body).with_context(|| format!("writing {name}"))?;
    }
    let script = |s: &str| format!("[\"python3\", {:?}]", roles.join(s).display().to_string());
    let config = format!(
        r#"# Written by `clawboard demo`.
[daemon]
shutdown_grace = "5s"

# The review page, on a free port of 127.0.0.1 (the daemon writes it to .clawboard/web.addr).
[web]
listen = "127.0.0.1:0"

[lifecycle]
validator = "validator"
harvester = "harvester"

[lifecycle.pm_for_type]
coding = "coding-pm"
writing = "coding-pm"
research = "coding-pm"
quant = "coding-pm"

[roles.coding-pm]
command = {pm}
timeout = "20s"

[roles.analyst]
command = {worker}
timeout = "20s"

[roles.creator]
command = {worker}
timeout = "20s"

[roles.deployer]
command = {escalate}
timeout = "20s"

[roles.validator]
command = {validator}
timeout = "20s"

[roles.harvester]
command = {harvester}
timeout = "20s"

# The blueprint task's roles (seed 001): config/examples/blueprints.toml.
{writing}
{lanes}"#,
        lanes = lap::config(&script("doc_update.py")),
        writing = blueprint::config(&roles.join("writing.py").display().to_string()),
        pm = script("pm.py"),
        worker = script("worker.py"),
        escalate = script("escalate.py"),
        validator = script("validator.py"),
        harvester = script("harvester.py"),
    );
    let path = dir.join("clawboard.toml");
    std::fs::write(&path, config).context("writing the demo config")?;
    Ok(path)
}

/// Drops `body` into `inbox/{name}` the safe way: a temp name, then a rename.
fn drop_task(root: &Path, name: &str, body: &serde_json::Value) -> anyhow::Result<()> {
    let tmp = root.join(format!("inbox/.{name}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(body)?)?;
    std::fs::rename(&tmp, root.join(format!("inbox/{name}")))?;
    Ok(())
}

fn step_of(root: &Path, id: &str) -> String {
    let page = std::fs::read_to_string(root.join(layout::task_file(id, layout::STATUS_FILE))).unwrap_or_default();
    let step = page.lines().find_map(|l| l.strip_prefix("- step: ")).unwrap_or_default();
    if page.contains("## Waiting for a human") {
        format!("{step} (held: waiting for a human)")
    } else {
        step.to_owned()
    }
}

/// The review page's URL with the token, once the daemon listens.
fn web_url(root: &Path) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let addr = std::fs::read_to_string(root.join(crate::local::WEB_ADDR_FILE)).ok();
        let token = std::fs::read_to_string(root.join(crate::config::review::WEB_TOKEN_FILE)).ok();
        if let (Some(a), Some(t)) = (addr, token) {
            return Some(format!("http://{}/?token={}", a.trim(), t.trim()));
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // Only reached on an early error: do not leave a daemon behind.
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The tree the demo runs in: `--root`, or a fresh directory of its own (mode
/// 0700, never one someone made first: the demo runs the role scripts it
/// writes there).
fn demo_root(global: &GlobalArgs) -> anyhow::Result<PathBuf> {
    if let Some(r) = &global.root {
        return Ok(r.clone());
    }
    let dir = std::env::temp_dir().join(format!(
        "clawboard-demo-{}-{}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S"),
        clawboard_core::id::random_hex(4)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating the demo directory {}", dir.display()))?;
    Ok(dir)
}

fn require_python() -> anyhow::Result<()> {
    let has_python = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join("python3").is_file()));
    if !has_python {
        bail!(
            "the demo's example roles are Python programs and python3 is not on PATH; install it (e.g. `apt-get install python3`)"
        );
    }
    Ok(())
}

/// Starts `clawboard daemon` on the demo tree, its output in `log_path`, and
/// waits until it answers on its local socket (10 s at most).
fn start_daemon(root: &Path, config: &Path, log_path: &Path) -> anyhow::Result<Daemon> {
    let log = std::fs::File::create(log_path).context("creating the daemon log")?;
    outln!("starting `clawboard daemon` (log: {})", log_path.display())?;
    let exe = std::env::current_exe().context("finding the clawboard binary")?;
    let child = Command::new(exe)
        .arg("--root")
        .arg(root)
        .arg("--config")
        .arg(config)
        .arg("daemon")
        .env_remove("CLAWBOARD_CONFIG")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the daemon")?;
    let mut daemon = Daemon(child);
    let started = Instant::now();
    while crate::local::get_json(root, "/v1/health").is_none() {
        if let Some(status) = daemon.0.try_wait()? {
            let log = std::fs::read_to_string(log_path).unwrap_or_default();
            bail!("the daemon exited ({status}) before it was ready:\n{log}");
        }
        if started.elapsed() > Duration::from_secs(10) {
            bail!("the daemon did not become ready within 10 s; see {}", log_path.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    outln!("daemon ready after {:.1} s", started.elapsed().as_secs_f64())?;
    Ok(daemon)
}

/// The demo's tasks, by id (the invalid one by its file name in `inbox/`).
struct DemoTasks {
    iterate: String,
    escalate: String,
    invalid: String,
    viral: String,
}

impl DemoTasks {
    /// Drops the four tasks into `inbox/`: one the validator fails once, one
    /// that asks a human, one invalid, one blueprint task.
    fn drop_all(root: &Path) -> anyhow::Result<Self> {
        let suffix = clawboard_core::id::random_hex(2);
        let t = DemoTasks {
            iterate: format!("demo-iterate-{suffix}"),
            escalate: format!("demo-escalate-{suffix}"),
            invalid: format!("demo-invalid-{suffix}.json"),
            viral: format!("demo-blueprint-{suffix}"),
        };
        drop_task(
            root,
            &format!("{}.json", t.iterate),
            &serde_json::json!({
                "taskId": t.iterate, "type": "coding", "priority": "high",
                "description": "Add input validation to the signup form",
                "demo": {"failFirstValidation": true}
            }),
        )?;
        drop_task(
            root,
            &format!("{}.json", t.escalate),
            &serde_json::json!({
                "taskId": t.escalate, "type": "writing",
                "description": "Publish the release notes for v1.2",
                "demo": {"escalate": true}
            }),
        )?;
        drop_task(
            root,
            &t.invalid,
            &serde_json::json!({
                "type": "coding", "priority": "urgent", "description": "This one has a bad priority"
            }),
        )?;
        drop_task(root, &format!("{}.json", t.viral), &blueprint::task(&t.viral))?;
        outln!(
            "dropped 4 tasks into inbox/: {}.json, {}.json, {}, {}.json (blueprint xiaohongshu_viral)",
            t.iterate,
            t.escalate,
            t.invalid,
            t.viral
        )?;
        Ok(t)
    }

    fn ended(&self, store: &Store) -> bool {
        let done = |id: &str| {
            RelPath::new(&layout::task_file(id, layout::TASK_FILE))
                .and_then(|rel| store.read::<Task>(&rel))
                .is_ok_and(|t| matches!(t.status, TaskStatus::Completed | TaskStatus::Failed))
        };
        done(&self.iterate) && done(&self.escalate) && done(&self.viral)
    }
}

/// What the demo saw while its tasks ran.
#[derive(Default)]
struct Watched {
    /// Why the invalid task was rejected, once it was.
    rejected: Option<String>,
    /// The escalations approved (by the demo, or waited for under --review).
    approved: Vec<String>,
}

/// Where the demo's tree and its daemon are, for what follows its start.
struct Demo<'a> {
    store: &'a Store,
    root: &'a Path,
    tasks: &'a DemoTasks,
    page: Option<&'a str>,
    log_path: &'a Path,
}

impl Demo<'_> {
    /// Streams the tasks' progress until all of them ended, the invalid one
    /// was rejected and the lap is done (or the deadline passed, unless the
    /// escalation waits for a person).
    fn watch(&self, review: bool, t0: Instant) -> anyhow::Result<Watched> {
        let mut w = Watched::default();
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut entries_seen = BTreeMap::new();
        let mut steps_seen = BTreeMap::new();
        // A failed write (stdout closed) is kept and ends the demo below; its
        // daemon is stopped as the guard drops.
        let stdout_failed = std::cell::Cell::new(None);
        let say = |what: &str| {
            if let Err(e) = outln!("[{:5.1}s] {what}", t0.elapsed().as_secs_f64()) {
                stdout_failed.set(Some(e));
            }
        };
        loop {
            if let Some(e) = stdout_failed.take() {
                return Err(e.into());
            }
            blueprint::follow(self.store, &self.tasks.viral, &mut steps_seen, &say);
            self.report_states(&mut seen, &say)?;
            let lap_done = lap::follow(self.store, &mut entries_seen, &say);
            let invalid = &self.tasks.invalid;
            let error_file = self.root.join(format!("{}/{invalid}.error.txt", layout::REJECTED));
            if w.rejected.is_none()
                && let Ok(reason) = std::fs::read_to_string(&error_file)
            {
                say(&format!("{invalid} rejected: {}", reason.trim()));
                w.rejected = Some(reason);
            }
            self.decide_escalations(review, &mut w.approved, &say)?;
            if self.tasks.ended(self.store) && w.rejected.is_some() && lap_done {
                return Ok(w);
            }
            if t0.elapsed() > DEADLINE && !review {
                outln!(
                    "\nthe demo's tasks did not finish within {} s; see {}",
                    DEADLINE.as_secs(),
                    self.log_path.display()
                )?;
                return Ok(w);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Says each task's status and step when it changed.
    fn report_states(&self, seen: &mut BTreeMap<String, String>, say: &dyn Fn(&str)) -> anyhow::Result<()> {
        for id in [&self.tasks.iterate, &self.tasks.escalate, &self.tasks.viral] {
            let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE))?;
            let Ok(task) = self.store.read::<Task>(&rel) else { continue };
            let state = format!("{:<9} {}", task.status.as_str(), step_of(self.root, id));
            if seen.get(id.as_str()) != Some(&state) {
                say(&format!("{id:<22} {state}"));
                seen.insert(id.clone(), state);
            }
        }
        Ok(())
    }

    /// The escalating task's open escalations: approved by the demo, or (with
    /// --review) announced once and left to the person running it.
    fn decide_escalations(&self, review: bool, approved: &mut Vec<String>, say: &dyn Fn(&str)) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(self.root.join(layout::ESCALATIONS))?.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(esc_id) = name.strip_suffix(".json") else { continue };
            let Ok(e) = escalations::load(self.store, esc_id) else { continue };
            let Escalation { decision: None, requires_human_approval: true, .. } = e else { continue };
            if e.task_id.as_ref().map(|t| t.as_str()) != Some(self.tasks.escalate.as_str())
                || approved.iter().any(|a| a == esc_id)
            {
                continue;
            }
            if review {
                say(&format!("escalation {esc_id} from {}: \"{}\" — waiting for you to decide it:", e.from, e.issue));
                if let Some(url) = self.page {
                    outln!("         open {url}")?;
                }
                outln!("         or run: clawboard --root {} escalations approve {esc_id}", self.root.display())?;
            } else {
                say(&format!("escalation {esc_id} from {}: \"{}\" — the demo approves it", e.from, e.issue));
                escalations::decide(
                    self.store,
                    esc_id,
                    Decision::Approved,
                    "demo",
                    Some("approved by clawboard demo"),
                )?;
            }
            approved.push(esc_id.to_owned());
        }
        Ok(())
    }

    /// Where everything is: each task's files and runs, the escalations, the
    /// blueprint's and the lap's records, the memory archive and today's
    /// report. `false`: something the demo expected did not happen.
    fn summary(&self, watched: &Watched, s: &Settings) -> anyhow::Result<bool> {
        let (store, root) = (self.store, self.root);
        let mut ok = watched.rejected.is_some();
        outln!("where everything is ({}):", root.display())?;
        for id in [&self.tasks.iterate, &self.tasks.escalate] {
            let rel = RelPath::new(&layout::task_file(id, layout::TASK_FILE))?;
            let task = store.read::<Task>(&rel)?;
            ok &= task.status == TaskStatus::Completed;
            let runs = clawboard_records::attempts::load(store, id)?;
            outln!("  tasks/{id}/  {}, {} role runs", task.status, runs.len())?;
        }
        outln!(
            "    task.json team-composition.json status.md result.json validation.json memory-harvest.json attempts/"
        )?;
        for id in &watched.approved {
            let decision =
                escalations::load(store, id).ok().and_then(|e| e.decision).map_or("undecided", Decision::as_str);
            outln!("  escalations/{id}.json  {decision} (also in gm/decisions.md)")?;
        }
        ok &= blueprint::summary(store, root, &self.tasks.viral)?;
        outln!("  gm/pm-performance.json  the PM's tasks, pass rate, mean score and iterations")?;
        let invalid = &self.tasks.invalid;
        outln!("  inbox/rejected/{invalid}  with {invalid}.error.txt beside it")?;
        ok &= lap::summary(store, root)?;
        self.archive_and_report(s)?;
        Ok(ok)
    }

    /// The memory archive, as the daemon does it every 6 hours (harvest, then a
    /// commit to the local `memory` branch; no remote in the demo), and
    /// today's evolution report.
    fn archive_and_report(&self, s: &Settings) -> anyhow::Result<()> {
        let (store, root) = (self.store, self.root);
        let node = clawboard_sync::node_id(root, None).map_err(crate::cli::sync_error)?;
        let archive =
            clawboard_archive::Archive::new(store.clone(), clawboard_archive::ArchiveSettings::default(), node);
        let now = chrono::Utc::now();
        let harvest = archive.harvest(now, &clawboard_archive::HarvestSettings::default(), None)?;
        let run = archive.run(now)?;
        for w in &harvest.written {
            outln!("  {w}  the memory cells harvested")?;
        }
        outln!(
            "  roles/memory-queue.json  {} entr{} marked completed by the harvest",
            harvest.queue_completed,
            if harvest.queue_completed == 1 { "y" } else { "ies" }
        )?;
        if let Some(id) = &run.commit.commit {
            outln!(
                "  .clawboard/archive/memory.git  branch memory, commit {} ({} files); see it with\n      git --git-dir {}/.clawboard/archive/memory.git log --stat memory",
                &id[..12],
                run.commit.changed,
                root.display()
            )?;
        }
        let period = reports::Period::containing(reports::Kind::Daily, now.date_naive());
        let report = reports::write(store, period, now, s.retention.kept())?;
        outln!("  {report}  today's evolution report (`clawboard report daily|weekly|monthly`)")?;
        Ok(())
    }
}

pub fn run(a: DemoArgs, global: &GlobalArgs, s: &Settings) -> anyhow::Result<u8> {
    let root = demo_root(global)?;
    require_python()?;
    let (store, _) = Store::init(&root)?;
    let store = store.with_max_file_bytes(s.max_file_bytes);
    let root = store.root().to_owned();
    let config = write_setup(&root)?;
    let log_path = root.join(".clawboard/demo/daemon.log");
    outln!("clawboard demo — blackboard at {}\n", root.display())?;
    let mut daemon = start_daemon(&root, &config, &log_path)?;
    let page = web_url(&root);
    match &page {
        Some(url) => outln!("review page: {url}\n")?,
        None => outln!("the review page did not come up; see {}\n", log_path.display())?,
    }

    let tasks = DemoTasks::drop_all(&root)?;
    let request = lap::start(&store, 571)?;
    outln!(
        "wrote entry {request}: Human asks Aya to update projects/{}/{} (the Doc Update lane)\n",
        lap::PROJECT,
        lap::DOC
    )?;
    let demo = Demo { store: &store, root: &root, tasks: &tasks, page: page.as_deref(), log_path: &log_path };
    let t0 = Instant::now();
    let watched = demo.watch(a.review, t0)?;

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(daemon.0.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .context("stopping the daemon")?;
    let status = daemon.0.wait()?;
    outln!("\ndaemon stopped ({status}) after {:.1} s\n", t0.elapsed().as_secs_f64())?;

    let ok = demo.summary(&watched, s)?;
    outln!("\nlook around:  clawboard --root {} task list", root.display())?;
    outln!("              clawboard --root {} escalations list", root.display())?;
    outln!("              clawboard --root {} entry list --project {}", root.display(), lap::PROJECT)?;
    Ok(if ok && status.success() { EXIT_OK } else { EXIT_FAILURE })
}

//! The floor under a step of `scripts/bench/blueprint-steps.sh`: how long it
//! takes to start `sh -c true` and reap it, with nothing recorded, in several
//! ways, run in turn (one of each, then the next round) so that a busy machine
//! weighs on each alike:
//!
//! - `std status`: Rust's standard library, blocking, inherited stdio;
//! - `std piped`: blocking, piped stdin/stdout/stderr (the context written,
//!   both outputs read to their end), on the calling thread;
//! - `tokio, 4 workers`: tokio's process, piped, in its own process group, the
//!   wait, the feed and both reads in one task beside a timeout, on a runtime
//!   of 4 workers (the daemon's runner);
//! - `tokio, current thread`: the same on a current-thread runtime (`clawboard run`);
//! - `blocking thread, 4 workers`: `std piped` on tokio's blocking pool, awaited
//!   from a task of the 4-worker runtime;
//! - `tokio, 4 workers, this CPU`: `tokio, 4 workers` with the process started
//!   on the starting thread's CPU (`runner::spawn_here`, as the runner does).
//!
//!   cargo run --release -p clawboard-roles --example spawn_floor [N]
//!
//! Prints p50, p90 and p99 in ms over N runs of each (default 300). Python's
//! `subprocess.run(["sh", "-c", "true"])`, which LangGraph's nodes call in that
//! benchmark, is measured by `python3 scripts/bench/spawn-floor.py`. Run it
//! beside `nice -n 10 stress-ng --cpu 2` for the busy machine.

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn report(what: &str, ms: &mut [f64]) {
    ms.sort_by(f64::total_cmp);
    let at = |p: usize| ms[(ms.len() * p / 100).min(ms.len() - 1)];
    println!("{what:28} p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms ({} runs)", at(50), at(90), at(99), ms.len());
}

fn checked(status: std::process::ExitStatus) -> Result<()> {
    if status.success() { Ok(()) } else { Err(format!("sh exited {status}").into()) }
}

fn std_status() -> Result<()> {
    checked(std::process::Command::new("sh").args(["-c", "true"]).status()?)
}

fn std_piped() -> Result<()> {
    let mut child = std::process::Command::new("sh")
        .args(["-c", "true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()?;
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("no pipes".into());
    };
    // A role may exit without reading its context.
    let _ = stdin.write_all(b"{}");
    drop(stdin);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    stdout.read_to_end(&mut out)?;
    stderr.read_to_end(&mut err)?;
    checked(child.wait()?)
}

async fn tokio_piped(here: bool) -> Result<()> {
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", "true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match here {
        true => clawboard_roles::runner::spawn_here(|| cmd.spawn(), tokio::process::Child::id)?,
        false => cmd.spawn()?,
    };
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("no pipes".into());
    };
    let feed = async move {
        let _ = stdin.write_all(b"{}").await;
        let _ = stdin.shutdown().await;
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let reads = async { tokio::try_join!(stdout.read_to_end(&mut out), stderr.read_to_end(&mut err)) };
    let deadline = tokio::time::sleep(Duration::from_secs(30));
    let (status, (), reads) = tokio::select! {
        r = async { tokio::join!(child.wait(), feed, reads) } => r,
        () = deadline => return Err("timed out".into()),
    };
    reads?;
    checked(status?)
}

fn main() -> Result<()> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(300);
    let workers = tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build()?;
    let current = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let names = [
        "std status",
        "std piped",
        "tokio, 4 workers",
        "tokio, current thread",
        "blocking thread, 4 workers",
        "tokio, 4 workers, this CPU",
    ];
    let mut ms: Vec<Vec<f64>> = names.iter().map(|_| Vec::with_capacity(n)).collect();
    for _ in 0..n {
        for (i, times) in ms.iter_mut().enumerate() {
            let t = Instant::now();
            match i {
                0 => std_status()?,
                1 => std_piped()?,
                2 => workers.block_on(async { tokio::spawn(tokio_piped(false)).await })??,
                3 => current.block_on(tokio_piped(false))?,
                4 => workers.block_on(async { tokio::task::spawn_blocking(std_piped).await })??,
                _ => workers.block_on(async { tokio::spawn(tokio_piped(true)).await })??,
            }
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }
    for (name, times) in names.iter().zip(ms.iter_mut()) {
        report(name, times);
    }
    Ok(())
}

//! The floor under a step of `scripts/bench/blueprint-steps.sh`: how long it
//! takes to start `sh -c true` and reap it, with nothing recorded, from Rust's
//! standard library (blocking) and from tokio (as the engine's runner does: piped
//! stdin/stdout/stderr, its own process group, a timeout beside the wait).
//!
//!   cargo run --release -p clawboard-roles --example spawn_floor [N]
//!
//! Prints p50 and p90 in ms over N runs of each (default 300). Python's
//! `subprocess.run(["sh", "-c", "true"])`, which LangGraph's nodes call in that
//! benchmark, is measured by `python3 scripts/bench/spawn-floor.py`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn report(what: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    let at = |p: usize| ms[(ms.len() * p / 100).min(ms.len() - 1)];
    println!("{what}: p50 {:.3} ms, p90 {:.3} ms ({} runs)", at(50), at(90), ms.len());
}

async fn tokio_run() -> std::io::Result<()> {
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", "true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(std::io::Error::other("no pipes"));
    };
    let feed = tokio::spawn(async move {
        let _ = stdin.write_all(b"{}").await;
        let _ = stdin.shutdown().await;
    });
    let out = tokio::spawn(async move {
        let mut b = Vec::new();
        stdout.read_to_end(&mut b).await.map(|_| b)
    });
    let err = tokio::spawn(async move {
        let mut b = Vec::new();
        stderr.read_to_end(&mut b).await.map(|_| b)
    });
    let status = tokio::select! {
        s = child.wait() => s?,
        _ = tokio::time::sleep(Duration::from_secs(30)) => return Err(std::io::Error::other("timed out")),
    };
    let _ = feed.await;
    let _ = out.await;
    let _ = err.await;
    if status.success() { Ok(()) } else { Err(std::io::Error::other(format!("sh exited {status}"))) }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).map(|s| s.parse()).transpose()?.unwrap_or(300);
    let mut std_ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let status = std::process::Command::new("sh").args(["-c", "true"]).status()?;
        if !status.success() {
            return Err(format!("sh exited {status}").into());
        }
        std_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    report("std::process::Command::status", std_ms);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut tokio_ms = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        rt.block_on(async { tokio::spawn(tokio_run()).await })??;
        tokio_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    report("tokio::process, piped, as the runner", tokio_ms);
    Ok(())
}

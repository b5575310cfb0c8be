//! Where a role's process starts: on the CPU of the thread that starts it.
//!
//! The kernel puts a new process on the least loaded CPU it may use. On a busy
//! machine (a local model server, a build) that is often another CPU than the
//! starting thread's, one running a busy process that the new one may not
//! preempt until that CPU's next scheduler tick: 4 ms at 250 Hz, for a role
//! step whose whole run takes half a millisecond. Started with the thread's own
//! CPU as its only one, the new process runs there as soon as the thread waits
//! for its `exec` (a `vfork`), which it does at once. Its CPUs are then given
//! back, as the thread's are: the role runs wherever the kernel moves it next.
//!
//! Only when the other CPUs are all busy: on a machine with an idle CPU the new
//! process starts there at once, beside the thread, which goes on with the
//! step's bookkeeping; held on the thread's CPU it would share that one with
//! it. docs/BENCHMARKS.md, "Durable step overhead", has the figures.

use nix::sched::{CpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
use nix::unistd::Pid;

/// Runs `spawn` with the calling thread held on the CPU it runs on, so that the
/// process it starts starts there; then gives the process (its pid from
/// `pid_of`) and the thread back the CPUs the thread had. If the thread's CPUs
/// cannot be read or set, or another CPU it may use is idle, `spawn` runs as it
/// would without this.
pub fn spawn_here<T, E>(spawn: impl FnOnce() -> Result<T, E>, pid_of: impl Fn(&T) -> Option<u32>) -> Result<T, E> {
    let me = Pid::from_raw(0);
    let Some(allowed) = held_on_this_cpu(me) else { return spawn() };
    let spawned = spawn();
    if let Ok(child) = &spawned
        && let Some(pid) = pid_of(child).and_then(|p| i32::try_from(p).ok())
    {
        match sched_setaffinity(Pid::from_raw(pid), &allowed) {
            // Exited already: nothing to give back.
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => tracing::warn!(pid, "a role's process keeps the one CPU it started on: {e}"),
        }
    }
    if let Err(e) = sched_setaffinity(me, &allowed) {
        tracing::warn!("a runtime thread keeps the one CPU it started a role's process on: {e}");
    }
    spawned
}

/// Holds this thread on the CPU it runs on; the CPUs it had, or `None` (and
/// nothing changed) if that cannot be done, it has one CPU anyway, or one of
/// its other CPUs may be idle.
fn held_on_this_cpu(me: Pid) -> Option<CpuSet> {
    let allowed = sched_getaffinity(me).ok()?;
    let cpu = sched_getcpu().ok()?;
    let mut here = CpuSet::new();
    here.set(cpu).ok()?;
    let others = (0..CpuSet::count()).filter(|&c| c != cpu && allowed.is_set(c).unwrap_or(false)).count();
    if others == 0 {
        return None;
    }
    let busy = std::fs::read_to_string("/proc/loadavg").map_or(true, |l| others_busy(&l, others));
    (busy && sched_setaffinity(me, &here).is_ok()).then_some(allowed)
}

/// Whether the machine runs at least as many tasks besides the calling thread
/// as there are `others` CPUs, by `/proc/loadavg` (its fourth field: the tasks
/// running or ready to run right now, the caller among them). A line it cannot
/// read counts as busy.
fn others_busy(loadavg: &str, others: usize) -> bool {
    let running = loadavg.split_whitespace().nth(3).and_then(|f| f.split_once('/')).map(|(r, _)| r.parse::<usize>());
    match running {
        Some(Ok(n)) => n.saturating_sub(1) >= others,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The process starts on the thread's CPU and gets the thread's CPUs back;
    /// the thread gets its own back too.
    #[test]
    fn the_process_and_the_thread_get_their_cpus_back() {
        let me = Pid::from_raw(0);
        let before = sched_getaffinity(me).unwrap();
        let child =
            spawn_here(|| std::process::Command::new("sleep").arg("5").spawn(), |c: &std::process::Child| Some(c.id()))
                .unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let theirs = sched_getaffinity(pid).unwrap();
        let mut child = child;
        child.kill().unwrap();
        child.wait().unwrap();
        let after = sched_getaffinity(me).unwrap();
        for cpu in 0..CpuSet::count() {
            assert_eq!(after.is_set(cpu).unwrap(), before.is_set(cpu).unwrap(), "cpu {cpu} of the thread");
            assert_eq!(theirs.is_set(cpu).unwrap(), before.is_set(cpu).unwrap(), "cpu {cpu} of the process");
        }
    }

    #[test]
    fn the_other_cpus_are_busy_when_as_many_tasks_run_beside_the_caller() {
        assert!(!others_busy("0.30 1.76 2.53 1/77 8613", 1), "only the caller runs");
        assert!(others_busy("2.01 2.00 1.90 3/80 9000", 1), "two neighbours, one other CPU");
        assert!(others_busy("2.01 2.00 1.90 2/80 9000", 1));
        assert!(!others_busy("2.01 2.00 1.90 2/80 9000", 3), "one neighbour, three other CPUs");
        assert!(others_busy("", 1), "unreadable: busy");
        assert!(others_busy("0.1 0.1 0.1 x/80 1", 1), "unreadable: busy");
    }

    /// A spawn that fails is handed back as is, and the thread's CPUs are restored.
    #[test]
    fn a_failed_spawn_is_returned_and_the_thread_is_restored() {
        let me = Pid::from_raw(0);
        let before = sched_getaffinity(me).unwrap();
        let r = spawn_here(
            || std::process::Command::new("/nonexistent/program").spawn(),
            |c: &std::process::Child| Some(c.id()),
        );
        assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::NotFound);
        let after = sched_getaffinity(me).unwrap();
        assert!((0..CpuSet::count()).all(|c| after.is_set(c).unwrap() == before.is_set(c).unwrap()));
    }
}

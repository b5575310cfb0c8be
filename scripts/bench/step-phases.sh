#!/usr/bin/env bash
# Where a blueprint step's time goes, phase by phase, timed by the kernel: the
# flow of blueprint-steps.sh (a static_linear blueprint of 10 no-op steps, each
# `sh -c true`), run by `clawboard run` FLOWS times on one tree, under
# `perf record` of the scheduler's fork, exec and exit events. Each step is split
# at five points:
#
#   prep       the engine's "starting a run" debug line (written after the
#              step's records are synced) → the kernel forks the role process
#   fork-exec  the fork → the process has exec'd `sh` (the child's set-up in
#              posix_spawn and the exec itself; the engine waits meanwhile)
#   sh         exec → the process exits (`sh -c true` itself)
#   exit-ended the exit → the engine's "the run ended" line (the rest of the
#              exit, the engine woken, the pipes drained, the process reaped)
#   rest       "the run ended" → the next step's "starting a run" (the step's
#              end recorded, the next step prepared, the one sync of the log)
#
# and prints the p50 of each by the step's place in the flow, and over all.
#
#   scripts/bench/step-phases.sh                          # target/release/clawboard, 30 flows
#   CLAWBOARD_BIN=/tmp/clawboard-x FLOWS=60 scripts/bench/step-phases.sh
#   WRAP="taskset -c 0" scripts/bench/step-phases.sh      # the process and its roles on one CPU
#   NOLOG=1 scripts/bench/step-phases.sh                  # without the debug lines: exec-to-exec only
#
# Also printed, with or without the log: the interval between successive
# `sh` execs of one `clawboard run` (the kernel's view of a step, which needs
# no debug line), p50/p90/p99 over all steps; with NOLOG=1 it is all there is.
#
# Needs perf (Debian: apt-get install linux-perf) and the right to trace the
# whole machine (root, or kernel.perf_event_paranoid = -1). Builds nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLAWBOARD_BIN=${CLAWBOARD_BIN:-$PWD/target/release/clawboard}
FLOWS=${FLOWS:-30}
WRAP=${WRAP:-}
if [ -n "${NOLOG:-}" ]; then LOGENV=; else LOGENV=CLAWBOARD_LOG=clawboard_roles::engine::call=debug; fi
[ -x "$CLAWBOARD_BIN" ] || { echo "step-phases.sh: $CLAWBOARD_BIN is missing; build it first (cargo build --release -p clawboard)" >&2; exit 1; }
command -v perf >/dev/null || { echo "step-phases.sh: perf is missing (apt-get install linux-perf)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/step-phases.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/blueprints"
steps=$(python3 -c 'print(",".join(f"{{\"id\": \"s{i}\", \"worker\": \"noop\", \"scope\": [\"meta.topic\"]}}" for i in range(1, 10)) + ",{\"id\": \"s10\", \"worker\": \"last\", \"scope\": [\"meta.topic\"]}")')
echo "{\"blueprint_id\": \"bench_linear\", \"type\": \"static_linear\", \"description\": \"10 no-op steps\", \"steps\": [$steps]}" \
    > "$work/blueprints/bench_linear.json"
printf '[blueprints]\ndir = "%s/blueprints"\n\n[roles.noop]\ncommand = ["sh", "-c", "true"]\ntimeout = "30s"\nmax_retries = 0\n\n[roles.last]\ncommand = ["cat", "%s/last.json"]\n' \
    "$work" "$work" > "$work/bench.toml"
# The last step's reply (a blueprint that leaves its final content empty ends "partial").
echo '{"output": "done"}' > "$work/last.json"
echo '{"user_input": {"topic": "bench", "platform": "general"}}' > "$work/in.json"
cat > "$work/flows.sh" <<EOF
#!/bin/sh
for i in \$(seq 1 $FLOWS); do
    $LOGENV $WRAP "$CLAWBOARD_BIN" --config "$work/bench.toml" --root "$work/root" \
        run bench_linear --input "$work/in.json" >/dev/null 2>>"$work/run.log" || exit 1
done
EOF
chmod +x "$work/flows.sh"
# One flow first: the tree exists and the binary is in the page cache.
"$CLAWBOARD_BIN" --config "$work/bench.toml" --root "$work/root" run bench_linear --input "$work/in.json" >/dev/null 2>&1
# perf stamps events with CLOCK_MONOTONIC, the log with the wall clock.
offset=$(python3 -c 'import time; print(time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC))')
perf record -q -a -m 8192 -k mono -e sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit \
    -o "$work/perf.data" -- "$work/flows.sh"
perf script -i "$work/perf.data" -F comm,tid,time,event,trace > "$work/sched.txt" 2>/dev/null

echo "Machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ); $CLAWBOARD_BIN${WRAP:+ under $WRAP}${NOLOG:+, without the debug log}"
echo
python3 - "$work/run.log" "$work/sched.txt" "$offset" <<'PY'
import bisect
import re
import statistics
import sys
from datetime import datetime

log_path, sched_path, offset = sys.argv[1], sys.argv[2], float(sys.argv[3])
flows, flow = [], None
for line in open(log_path):
    if line.startswith("task "):
        flow = []
        flows.append(flow)
        continue
    m = re.match(r"(\S+Z) +DEBUG .*(starting a run|the run ended)", line)
    if m and flow is not None:
        flow.append((m.group(2), datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()))

forks, execs, exits, parent = {}, {}, {}, {}
for line in open(sched_path):
    m = re.match(r"\s*(.+?) +(\d+) +([\d.]+):\s+sched:(\w+): (.*)", line)
    if not m:
        continue
    comm, tid, t, event, rest = m.groups()
    t = float(t) + offset
    if event == "sched_process_fork" and comm.startswith("clawboard"):
        child = int(re.search(r"child_pid=(\d+)", rest).group(1))
        forks[child] = t
        parent[child] = int(tid)
    elif event == "sched_process_exec" and re.search(r"filename=\S*/sh pid=", rest):
        execs[int(tid)] = t
    elif event == "sched_process_exit" and comm == "sh":
        exits[int(tid)] = t
children = sorted((forks[c], c) for c in forks if c in execs and c in exits)
fork_times = [f for f, _ in children]

def at(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, len(v) * p // 100)]

# The kernel's view: successive `sh` execs of one `clawboard run` process.
by_run = {}
for _, child in children:
    by_run.setdefault(parent[child], []).append(execs[child])
exec_gaps = [b - a for t in by_run.values() for a, b in zip(sorted(t), sorted(t)[1:])]
if not exec_gaps:
    sys.exit("step-phases.sh: no role process was traced")
print(f"exec to exec ({len(by_run)} runs, {len(exec_gaps)} intervals): p50 {at(exec_gaps, 50) * 1000:.3f}, "
      f"p90 {at(exec_gaps, 90) * 1000:.3f}, p99 {at(exec_gaps, 99) * 1000:.3f} ms")
print()

phases = ["prep", "fork-exec", "sh", "exit-ended", "rest", "interval"]
by_place = {}
for flow in flows:
    starts = [t for e, t in flow if e == "starting a run"]
    ends = [t for e, t in flow if e == "the run ended"]
    for k in range(min(len(starts), len(ends))):
        i = bisect.bisect_left(fork_times, starts[k])
        if i == len(children) or children[i][0] > ends[k]:
            continue  # no role process seen inside this step
        fork, child = children[i]
        row = by_place.setdefault(k + 1, {p: [] for p in phases})
        row["prep"].append(fork - starts[k])
        row["fork-exec"].append(execs[child] - fork)
        row["sh"].append(exits[child] - execs[child])
        row["exit-ended"].append(ends[k] - exits[child])
        if k + 1 < len(starts):
            row["rest"].append(starts[k + 1] - ends[k])
            row["interval"].append(starts[k + 1] - starts[k])
flows = [f for f in flows if f]  # `clawboard run` prints the task's line twice
if not by_place:
    if flows:
        sys.exit("step-phases.sh: no step matched a role process in the trace")
    sys.exit(0)  # NOLOG: no debug lines to split the steps at

def p50(v):
    return f"{statistics.median(v) * 1000:.3f}" if v else ""

print(f"{len(flows)} flows; p50 ms of each phase by the step's place in the flow (interval: this step's start to the next's)")
print()
print("| step | " + " | ".join(phases) + " |")
print("| --- |" + " ---: |" * len(phases))
for k in sorted(by_place):
    print(f"| {k} | " + " | ".join(p50(by_place[k][p]) for p in phases) + " |")
print("| all | " + " | ".join(p50([x for r in by_place.values() for x in r[p]]) for p in phases) + " |")
PY

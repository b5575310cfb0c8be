#!/usr/bin/env bash
# blueprint-steps.sh's flow (a static_linear blueprint of 10 no-op steps, each
# `sh -c true`) run by the daemon instead of `clawboard run`: a daemon on a
# fresh tree with the embedded defaults (sync to a directory on, as shipped) and
# the same blueprint and role, TASKS `writing` tasks dropped into its inbox one
# at a time (each waits for the one before to complete). Per step, as
# blueprint-steps.sh reads it: one step's process spawned to the next's (the
# engine's "starting a run" debug lines), and split into the process (to "the
# run ended") and the rest.
#
#   scripts/bench/daemon-steps.sh                     # 20 tasks, 180 intervals
#   TASKS=50 CLAWBOARD_BIN=/tmp/clawboard-x scripts/bench/daemon-steps.sh
#   SYNC=false scripts/bench/daemon-steps.sh          # no push to the local bucket
#
# The tasks run back to back, so each runs beside the push of the one before
# (to the local bucket, as shipped): this is the daemon under a steady load.
# blueprint-steps.sh runs the daemon too, one task at a time with the daemon
# idle in between, against LangGraph in the same run (docs/BENCHMARKS.md,
# "Durable step overhead"). SYNC=false turns the push off.
# Builds nothing: CLAWBOARD_BIN (default target/release/clawboard) must exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLAWBOARD_BIN=${CLAWBOARD_BIN:-$PWD/target/release/clawboard}
TASKS=${TASKS:-20}
[ -x "$CLAWBOARD_BIN" ] || { echo "daemon-steps.sh: $CLAWBOARD_BIN is missing; build it first (cargo build --release -p clawboard)" >&2; exit 1; }

. scripts/bench/bench-daemon.sh
work=$(mktemp -d "${TMPDIR:-/tmp}/daemon-steps.XXXXXX")
DAEMON_PID=
cleanup() {
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/blueprints"
python3 - "$work/blueprints/bench_linear.json" <<'PY'
import json, sys
steps = [{"id": f"s{i}", "worker": "noop" if i < 10 else "last", "scope": ["meta.topic"]} for i in range(1, 11)]
json.dump({"blueprint_id": "bench_linear", "type": "static_linear",
           "description": "10 no-op steps in a row (scripts/bench/daemon-steps.sh)", "steps": steps}, open(sys.argv[1], "w"))
PY
printf '[blueprints]\ndir = "%s/blueprints"\n\n[roles.noop]\ncommand = ["sh", "-c", "true"]\ntimeout = "30s"\nmax_retries = 0\n\n[roles.last]\ncommand = ["cat", "%s/last.json"]\n\n[sync]\nenabled = %s\n' \
    "$work" "$work" "${SYNC:-true}" > "$work/bench.toml"
# The last step's reply (a blueprint that leaves its final content empty ends "partial").
echo '{"output": "done"}' > "$work/last.json"
start_daemon "$work/bench.toml" "$work/root" "$work/daemon.log"
for i in $(seq 1 "$TASKS"); do
    run_task "$work/root" "$i" "$work/daemon.log"
done

python3 - "$work/daemon.log" "$TASKS" "$CLAWBOARD_BIN" <<'PY'
import os, re, sys
from datetime import datetime

log, tasks, binary = sys.argv[1], int(sys.argv[2]), sys.argv[3]
events = {}
for line in open(log):
    m = re.match(r"(\S+Z) +DEBUG .*(starting a run|the run ended).*task=(\S+).*step=bp/s\d+", line)
    if m:
        t = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() * 1000
        events.setdefault(m.group(3), []).append((m.group(2), t))
if len(events) != tasks or any(len(v) != 20 for v in events.values()):
    sys.exit(f"daemon-steps.sh: expected {tasks} tasks of 10 steps in the log, found {[len(v) // 2 for v in events.values()]}")
intervals, process, rest = [], [], []
for ev in events.values():
    starts = [t for kind, t in ev if kind == "starting a run"]
    intervals += [b - a for a, b in zip(starts, starts[1:])]
    for (kind, a), (_, b) in zip(ev, ev[1:]):
        (process if kind == "starting a run" else rest).append(b - a)


def at(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]


load = " ".join(f"{x:.2f}" for x in os.getloadavg())
print(f"daemon, {tasks} tasks of 10 no-op steps, {binary}; load average {load}; "
      f"{datetime.now().astimezone().strftime('%Y-%m-%dT%H:%M%z')}")
print()
print("| per step | n | p50 ms | p90 ms | p99 ms |")
print("| --- | ---: | ---: | ---: | ---: |")
for name, v in (("interval (spawn to spawn)", intervals), ("process (spawned to reaped)", process), ("rest (end recorded, next prepared)", rest)):
    print(f"| {name} | {len(v)} | {at(v, .5):.2f} | {at(v, .9):.2f} | {at(v, .99):.2f} |")
PY

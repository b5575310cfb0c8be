#!/usr/bin/env bash
# Durable step overhead (issue 16): the same 10-step linear flow, every step the
# no-op process `sh -c true`, in clawboard (a static_linear blueprint, its
# attempt records, slices and board written as for any task; by `clawboard run`
# and by a running daemon) and in LangGraph (a StateGraph with a SqliteSaver
# checkpointer on a file), in the same run, alternating flow by flow: clawboard
# run, clawboard daemon, LangGraph durability="sync", LangGraph
# durability="async" (its default), clawboard run, ...
#
#   scripts/bench/blueprint-steps.sh                 # 30 flows of each
#   FLOWS=100 scripts/bench/blueprint-steps.sh
#   TMPDIR=/dev/shm scripts/bench/blueprint-steps.sh # both on tmpfs (fsync is free)
#   CLAWBOARD_BIN=/tmp/clawboard-x KEEP=/tmp/bs scripts/bench/blueprint-steps.sh
#   DAEMON_SYNC=false scripts/bench/blueprint-steps.sh  # the daemon without its push to a local bucket
#   DAEMON_WAIT=both scripts/bench/blueprint-steps.sh   # the harness's two waits for a daemon task, alternating
#   LOAD=cpu scripts/bench/blueprint-steps.sh        # on a busy machine (below)
#   TELEMETRY=http://127.0.0.1:6006 scripts/bench/blueprint-steps.sh  # also flows with [telemetry] to that OTLP endpoint
#   BASELINE_BIN=/tmp/clawboard-old scripts/bench/blueprint-steps.sh  # also flows of another build, in the same rounds
#
# LOAD=cpu: a CPU-bound neighbour on every core for the whole run, `stress-ng
# --cpu N` (N = nproc, LOAD_CPUS to change) at `nice 10` (LOAD_NICE), started
# before the first flow and stopped at the end. It is the same for every system:
# their flows alternate under it. (A busy machine is the normal case beside a
# local model server: its threads keep every core busy while it answers.)
# LOAD=model: that case itself: the local model server (scripts/llm-server,
# installed first) answering chat completions in a loop from LOAD_CPUS clients,
# none waiting for another (its threads: one per core, at nice 0, as shipped).
#
# Builds nothing but the Python venv (target/tools/bench-venv: langgraph and
# langgraph-checkpoint-sqlite from PyPI, pinned below). CLAWBOARD_BIN (default
# target/release/clawboard) must exist.
#
# clawboard: a blueprint dir with bench_linear.json (static_linear, s1..s10, each
# {"worker": "noop", "scope": ["meta.topic"]}, no output) and a config with
# [blueprints] dir and [roles.noop] command = ["sh", "-c", "true"], max_retries 0.
# Each flow is `clawboard --config C --root R run bench_linear --input in.json`,
# all flows on one root R (as LangGraph's flows share one SQLite file), with
# CLAWBOARD_LOG=clawboard_roles::engine::call=debug: the engine's "starting a
# run ... step=bp/sN" line (microsecond timestamps) is written right before it
# spawns the step's process, after the step's slice and attempt record are
# written and synced (its `sync_us` field: how long that one sync took), and
# "the run ended ... step=bp/sN" right after the process was reaped: the
# breakdown table splits each step into the process and the rest. (The attempt records' startedAt/endedAt have whole seconds only, so
# they cannot time a step of milliseconds; the script checks that each flow has
# 10 `ok` attempt records.)
# clawboard daemon: a daemon on its own root with the same config (the embedded
# defaults otherwise: sync to a local directory on, as shipped; DAEMON_SYNC=false
# turns it off, as LangGraph has nothing like it), started once;
# each round drops one `writing` task naming bench_linear into its inbox, waits
# for it to complete (DAEMON_WAIT=quiet, the default: one `sleep 0.2` started at
# the drop, then a poll; =poll: a `grep` and a `sleep` every 10 ms from the drop,
# two processes started beside the task's steps, which slowed its steps 8 and 9;
# =both: alternating, reported apart), and then for the daemon to go idle (its CPU time still for
# 100 ms: the push of the task's files to the local bucket done), so that no
# system's flow runs beside that push (scripts/bench/daemon-steps.sh runs tasks
# back to back, each beside the previous one's push). Its steps are read from
# its log the same way; its wall time is the drop to the "completed" line.
# LangGraph: scripts/bench/langgraph_steps.py serve, one warm process; a node's
# start is taken in the node right before it spawns `sh -c true`.
#
# Per step, both alike: the time from one step's process being spawned to the
# next step's, within a flow (9 intervals per flow). One interval holds a whole
# step (running the process, recording its end, preparing and recording the
# next step) and no process start-up. The flow's wall time / 10 is printed too
# (clawboard's includes the start-up of the `clawboard run` process;
# LangGraph's is graph.invoke in a warm process).
#
# TELEMETRY: each round also runs a `clawboard run` flow with `[telemetry]
# otlp_endpoint` set to it (system "clawboard, telemetry on"; scripts/phoenix
# start gives one), right after the flow without. BASELINE_BIN: each round also
# runs a flow of that binary (system "clawboard (baseline)"), on its own root.
#
# TMPDIR picks the file system both write to (default /tmp).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

CLAWBOARD_BIN=${CLAWBOARD_BIN:-$REPO/target/release/clawboard}
FLOWS=${FLOWS:-30}
VENV=$REPO/target/tools/bench-venv
LANGGRAPH_VERSION=1.2.24
LANGGRAPH_SQLITE_VERSION=3.1.2

if [ ! -x "$CLAWBOARD_BIN" ]; then
    echo "blueprint-steps.sh: $CLAWBOARD_BIN is missing; build it first (cargo build --release -p clawboard) or set CLAWBOARD_BIN" >&2
    exit 1
fi
installed=$("$VENV/bin/pip" show langgraph langgraph-checkpoint-sqlite 2>/dev/null || true)
if ! grep -qx "Version: $LANGGRAPH_VERSION" <<<"$installed" || ! grep -qx "Version: $LANGGRAPH_SQLITE_VERSION" <<<"$installed"; then
    echo "blueprint-steps.sh: installing langgraph $LANGGRAPH_VERSION into $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "langgraph==$LANGGRAPH_VERSION" "langgraph-checkpoint-sqlite==$LANGGRAPH_SQLITE_VERSION"
fi

if [ -n "${KEEP:-}" ]; then WORK=$KEEP; rm -rf "$WORK"; mkdir -p "$WORK"; else WORK=$(mktemp -d "${TMPDIR:-/tmp}/blueprint-steps.XXXXXX"); fi
. "$REPO/scripts/bench/bench-daemon.sh"
LG_PID=
DAEMON_PID=
LOAD_PIDS=()
stop_load() {
    # A group's leader and its members (stress-ng's workers outlive their parent's TERM).
    for pid in "${LOAD_PIDS[@]}"; do kill -- -"$pid" 2>/dev/null || kill "$pid" 2>/dev/null || true; done
    for pid in "${LOAD_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    LOAD_PIDS=()
    [ "${LOAD:-}" != model ] || scripts/llm-server stop >/dev/null 2>&1 || true
}
cleanup() {
    stop_load
    if [ -n "$LG_PID" ] && kill -0 "$LG_PID" 2>/dev/null; then kill "$LG_PID" 2>/dev/null || true; fi
    if [ -n "$DAEMON_PID" ] && kill -0 "$DAEMON_PID" 2>/dev/null; then kill "$DAEMON_PID"; wait "$DAEMON_PID" 2>/dev/null || true; fi
    [ -n "${KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/blueprints" "$WORK/results"
python3 - "$WORK/blueprints/bench_linear.json" <<'PY'
import json, sys
steps = [{"id": f"s{i}", "worker": "noop" if i < 10 else "last", "scope": ["meta.topic"]} for i in range(1, 11)]
json.dump({"blueprint_id": "bench_linear", "type": "static_linear",
           "description": "10 no-op steps in a row (scripts/bench/blueprint-steps.sh)",
           "steps": steps}, open(sys.argv[1], "w"), indent=1)
PY
# The last step's role prints a reply (`cat` of a file): a blueprint whose steps leave the final
# content empty ends "partial" (seed 001), and the steps measured are s1..s10's
# spawns, which the last step's output comes after.
cat > "$WORK/bench.toml" <<TOML
[blueprints]
dir = "$WORK/blueprints"

[roles.noop]
command = ["sh", "-c", "true"]
timeout = "30s"
max_retries = 0

[roles.last]
command = ["cat", "$WORK/last.json"]
timeout = "30s"
max_retries = 0
TOML
echo '{"output": "done"}' > "$WORK/last.json"
echo '{"user_input": {"topic": "bench", "platform": "general"}}' > "$WORK/in.json"

# One clawboard flow's record: the bp/ steps' spawn times from the debug log,
# checked against the task's attempt records (10, all ok).
record_of() { # root task round wall logfile [system]
    python3 - "$@" <<'PY'
import json, re, sys
from datetime import datetime
from pathlib import Path
root, task, rnd, wall, log = sys.argv[1:6]
system = sys.argv[6] if len(sys.argv) > 6 else "clawboard"
recs = [json.loads(p.read_text()) for p in (Path(root) / "tasks" / task / "attempts").glob("*.json")]
steps = [r for r in recs if str(r.get("step", "")).startswith("bp/")]
if len(steps) != 10 or any(r.get("status") != "ok" for r in steps):
    sys.exit(f"blueprint-steps.sh: task {task}: {len(steps)} step attempts, {[r.get('status') for r in steps]}")
starts, ends, syncs = [], [], []
for line in Path(log).read_text().splitlines():
    m = re.match(r"(\S+Z) +DEBUG .*starting a run .*step=bp/s(\d+) .*sync_us=(\d+)", line)
    if m:
        starts.append((int(m.group(2)), datetime.fromisoformat(m.group(1)).timestamp()))
        syncs.append(int(m.group(3)) / 1000)
    m = re.match(r"(\S+Z) +DEBUG .*the run ended .*step=bp/s(\d+)", line)
    if m:
        ends.append((int(m.group(2)), datetime.fromisoformat(m.group(1)).timestamp()))
if [n for n, _ in starts] != list(range(1, 11)) or [n for n, _ in ends] != list(range(1, 11)):
    sys.exit(f"blueprint-steps.sh: task {task}: the log shows steps {[n for n, _ in starts]} starting, {[n for n, _ in ends]} ending")
print(json.dumps({"system": system, "round": int(rnd), "starts": [t for _, t in starts],
                  "ends": [t for _, t in ends], "syncs_ms": syncs, "wall": float(wall)}))
PY
}

# The daemon's flows, from its log once all rounds are done: each task's steps
# (checked against its attempt records as above) and its drop time.
daemon_records() { # root log drops
    python3 - "$@" <<'PY'
import json, re, sys
from datetime import datetime
from pathlib import Path
root, log, drops = sys.argv[1:4]
steps, done = {}, {}
for line in Path(log).read_text().splitlines():
    m = re.match(r"(\S+Z) +(DEBUG|INFO) .*(starting a run|the run ended|completed)(.*)", line)
    if not m:
        continue
    t = datetime.fromisoformat(m.group(1)).timestamp()
    task = re.search(r"task=(\S+)", m.group(4))
    if m.group(3) == "completed":
        if task:
            done[task.group(1)] = t
        continue
    step = re.search(r"step=bp/s(\d+)", m.group(4))
    if task and step:
        sync = re.search(r"sync_us=(\d+)", m.group(4))
        steps.setdefault(task.group(1), []).append((m.group(3), int(step.group(1)), t, int(sync.group(1)) / 1000 if sync else None))
both = len({line.split()[3] for line in Path(drops).read_text().splitlines()}) > 1
for line in Path(drops).read_text().splitlines():
    rnd, task, dropped, wait = line.split()
    recs = [json.loads(p.read_text()) for p in (Path(root) / "tasks" / task / "attempts").glob("*.json")]
    ok = [r for r in recs if str(r.get("step", "")).startswith("bp/") and r.get("status") == "ok"]
    ev = steps.get(task, [])
    starts = [(n, t, s) for kind, n, t, s in ev if kind == "starting a run"]
    ends = [(n, t) for kind, n, t, _ in ev if kind == "the run ended"]
    if len(ok) != 10 or [n for n, _, _ in starts] != list(range(1, 11)) or [n for n, _ in ends] != list(range(1, 11)) or task not in done:
        sys.exit(f"blueprint-steps.sh: daemon task {task}: {len(ok)} ok step attempts, steps {[n for n, _, _ in starts]} started, {[n for n, _ in ends]} ended")
    print(json.dumps({"system": f"clawboard daemon ({wait})" if both else "clawboard daemon", "round": int(rnd), "starts": [t for _, t, _ in starts],
                      "ends": [t for _, t in ends], "syncs_ms": [s for _, _, s in starts],
                      "wall": done[task] - float(dropped)}))
PY
}

# Returns once the daemon's CPU time has not moved for 100 ms (at most 20 s).
daemon_idle() {
    local last= now
    for _ in $(seq 200); do
        now=$(awk '{print $14 + $15}' "/proc/$DAEMON_PID/stat")
        [ "$now" = "$last" ] && return 0
        last=$now
        sleep 0.1
    done
    echo "blueprint-steps.sh: the daemon did not go idle in 20 s" >&2
    return 1
}

cp "$WORK/bench.toml" "$WORK/daemon.toml"
printf '\n[sync]\nenabled = %s\n' "${DAEMON_SYNC:-true}" >> "$WORK/daemon.toml"
start_daemon "$WORK/daemon.toml" "$WORK/daemon-root" "$WORK/daemon.log"
daemon_idle

coproc LG { exec "$VENV/bin/python" "$REPO/scripts/bench/langgraph_steps.py" serve --db "$WORK/langgraph.sqlite"; }
LG_PID=$LG_PID
read -r ready <&"${LG[0]}"
[ "$ready" = ready ] || { echo "blueprint-steps.sh: the LangGraph helper did not start" >&2; exit 1; }

# The neighbour (LOAD), started once everything of the benchmark is up.
LOAD_CPUS=${LOAD_CPUS:-$(nproc)}
case "${LOAD:-}" in
    "") LOAD_SAID="none (a quiet machine)" ;;
    cpu)
        command -v stress-ng >/dev/null || { echo "blueprint-steps.sh: LOAD=cpu needs stress-ng (apt install stress-ng)" >&2; exit 1; }
        # In a session of its own: its workers are stopped with it, as a group.
        setsid nice -n "${LOAD_NICE:-10}" stress-ng --cpu "$LOAD_CPUS" --quiet --timeout 0 &
        LOAD_PIDS+=($!)
        LOAD_SAID="stress-ng --cpu $LOAD_CPUS at nice ${LOAD_NICE:-10}"
        ;;
    model)
        scripts/llm-server install >&2
        eval "$(scripts/llm-server start)"
        for _ in $(seq "$LOAD_CPUS"); do
            python3 - "$CLAWBOARD_LLM_LOCAL_BASE_URL" <<'PY' &
import json, sys, urllib.request
url = sys.argv[1].rstrip("/") + "/chat/completions"
body = json.dumps({"messages": [{"role": "user", "content": "Write a long story about a lighthouse."}],
                   "max_tokens": 256}).encode()
while True:
    req = urllib.request.Request(url, body, {"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=300).read()
PY
            LOAD_PIDS+=($!)
        done
        LOAD_SAID="the local model server (scripts/llm-server) answering $LOAD_CPUS clients in a loop"
        ;;
    *) echo "blueprint-steps.sh: LOAD is cpu or model" >&2; exit 2 ;;
esac
[ -z "${LOAD:-}" ] || sleep 2  # the neighbour at full speed before the first flow

if [ -n "${TELEMETRY:-}" ]; then
    cp "$WORK/bench.toml" "$WORK/telemetry.toml"
    printf '\n[telemetry]\notlp_endpoint = "%s"\n' "$TELEMETRY" >> "$WORK/telemetry.toml"
fi

# One `clawboard run` flow: bin config root round system results-file.
run_flow() {
    local bin=$1 config=$2 root=$3 r=$4 system=$5 out=$6 t0 t1 task
    t0=$(date +%s.%N)
    CLAWBOARD_LOG=clawboard_roles::engine::call=debug \
        "$bin" --config "$config" --root "$root" run bench_linear --input "$WORK/in.json" \
        >/dev/null 2>"$WORK/run.log" || { echo "blueprint-steps.sh: clawboard run failed:" >&2; cat "$WORK/run.log" >&2; exit 1; }
    t1=$(date +%s.%N)
    task=$(sed -n 's/^task \([^:]*\): blueprint.*/\1/p' "$WORK/run.log" | head -1)
    record_of "$root" "$task" "$r" "$(python3 -c "print($t1 - $t0)")" "$WORK/run.log" "$system" >> "$out"
}

echo "blueprint-steps.sh: $FLOWS flows of each, alternating; load: $LOAD_SAID; $CLAWBOARD_BIN; work dir $WORK" >&2
for r in $(seq 1 "$FLOWS"); do
    run_flow "$CLAWBOARD_BIN" "$WORK/bench.toml" "$WORK/root" "$r" clawboard "$WORK/results/clawboard.jsonl"
    if [ -n "${TELEMETRY:-}" ]; then
        run_flow "$CLAWBOARD_BIN" "$WORK/telemetry.toml" "$WORK/telemetry-root" "$r" "clawboard, telemetry on" "$WORK/results/clawboard-telemetry.jsonl"
    fi
    if [ -n "${BASELINE_BIN:-}" ]; then
        run_flow "$BASELINE_BIN" "$WORK/bench.toml" "$WORK/baseline-root" "$r" "clawboard (baseline)" "$WORK/results/clawboard-baseline.jsonl"
    fi
    case "${DAEMON_WAIT:-quiet}" in
        poll) wait=poll ;;
        quiet) wait=quiet ;;
        both) if [ $((r % 2)) -eq 1 ]; then wait=poll; else wait=quiet; fi ;;
        *) echo "blueprint-steps.sh: DAEMON_WAIT is poll, quiet or both" >&2; exit 2 ;;
    esac
    echo "$r bench-$r $(date +%s.%N) $wait" >> "$WORK/drops"
    if [ "$wait" = quiet ]; then quiet=0.2; else quiet=; fi
    run_task "$WORK/daemon-root" "$r" "$WORK/daemon.log" $quiet
    daemon_idle
    for mode in sync async; do
        echo "run $mode" >&"${LG[1]}"
        read -r line <&"${LG[0]}"
        python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r.update(system=sys.argv[2], round=int(sys.argv[3])); print(json.dumps(r))' \
            "$line" "langgraph ($mode)" "$r" >> "$WORK/results/langgraph-$mode.jsonl"
    done
    [ $((r % 10)) -ne 0 ] || echo "  $r flows" >&2
done
echo quit >&"${LG[1]}"
wait "$LG_PID" 2>/dev/null || true
LG_PID=
kill "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=
daemon_records "$WORK/daemon-root" "$WORK/daemon.log" "$WORK/drops" > "$WORK/results/clawboard-daemon.jsonl"

echo "Machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ); work dir on $(df --output=fstype "$WORK" | tail -1)"
echo "Load beside the flows: $LOAD_SAID"
stop_load
echo
"$VENV/bin/python" "$REPO/scripts/bench/langgraph_steps.py" stats --results "$WORK/results"

#!/usr/bin/env bash
# Replay (docs/REPLAY.md) against a live run, and against LangGraph's replay, in
# the same run. Appends one JSON line per measurement to docs/benchmarks/replay.jsonl
# (OUT to change), misses included.
#
#   scripts/bench/replay.sh                  # ROUNDS=3 on the model, LG_ROUNDS=5 against LangGraph
#   PART=linear scripts/bench/replay.sh      # only the LangGraph part (no model server needed)
#
# Part "model" (scripts/llm-server installed; it is started and stopped here):
# each round runs xiaohongshu_viral live with `clawboard run` (config/examples/
# llm.toml, input config/examples/blueprint-input.json), every request to the model
# server going through a counting proxy (replay_bench.py proxy); then replays the
# task REPLAYS times (default 5) through the same proxy. Recorded: the live run's
# wall time and requests; each replay's wall time, requests and exit status.
#
# Part "linear": the step benchmark's 10-step linear flow (blueprint-steps.sh),
# a sleep of SLEEP seconds (0.5) standing for the model in every step. clawboard:
# a static_linear blueprint whose role runs `sleep SLEEP` and prints; `clawboard
# run`, then `clawboard task replay` of that task. LangGraph 1.2.24 with a
# SqliteSaver checkpointer (target/tools/bench-venv, as blueprint-steps.sh):
# the flow, then graph.invoke from its first checkpoint (replay_bench.py
# langgraph), its LG_ROUNDS rounds in one warm process, then clawboard's rounds
# (a `clawboard run` and a `clawboard task replay` process each).
#
# CLAWBOARD_BIN (default target/release/clawboard) must exist.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
CLAWBOARD_BIN=${CLAWBOARD_BIN:-$REPO/target/release/clawboard}
ROUNDS=${ROUNDS:-3}
REPLAYS=${REPLAYS:-5}
LG_ROUNDS=${LG_ROUNDS:-5}
SLEEP=${SLEEP:-0.5}
PART=${PART:-all}
OUT=${OUT:-$REPO/docs/benchmarks/replay.jsonl}
VENV=$REPO/target/tools/bench-venv
COMMIT=$(git rev-parse --short HEAD)
[ -x "$CLAWBOARD_BIN" ] || { echo "replay.sh: $CLAWBOARD_BIN is missing (cargo build --release -p clawboard)" >&2; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/replay-bench.XXXXXX")
PROXY_PID=
cleanup() {
    [ -z "$PROXY_PID" ] || kill "$PROXY_PID" 2>/dev/null || true
    [ "$PART" = linear ] || scripts/llm-server stop >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

record() { # JSON object fields (key=value ...), appended with the run's context
    python3 - "$OUT" "$COMMIT" "$@" <<'PY'
import json, sys, datetime
out, commit, *pairs = sys.argv[1:]
r = {"benchmark": "replay", "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
     "commit": commit, "build": "release", "machine": "2-vCPU Debian 12 VM"}
for p in pairs:
    k, v = p.split("=", 1)
    try:
        r[k] = json.loads(v)
    except ValueError:
        r[k] = v
open(out, "a").write(json.dumps(r, ensure_ascii=False) + "\n")
print(json.dumps(r, ensure_ascii=False))
PY
}
now() { date +%s.%N; }
since() { python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" "$1" "$(now)"; }

model_part() {
    eval "$(scripts/llm-server start)"
    local upstream=${CLAWBOARD_LLM_LOCAL_BASE_URL%/v1}
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 scripts/bench/replay_bench.py proxy --port "$port" --to "$upstream" --count "$WORK/count" &
    PROXY_PID=$!
    sleep 1
    export CLAWBOARD_LLM_LOCAL_BASE_URL=http://127.0.0.1:$port/v1
    local cfg=$REPO/config/examples/llm.toml
    for round in $(seq 1 "$ROUNDS"); do
        local root=$WORK/model-$round before start id code
        before=$(cat "$WORK/count")
        start=$(now)
        code=0
        "$CLAWBOARD_BIN" --config "$cfg" --root "$root" run xiaohongshu_viral --input config/examples/blueprint-input.json \
            > "$WORK/out.json" 2> "$WORK/err.txt" || code=$?
        local wall requests
        wall=$(since "$start")
        requests=$(( $(cat "$WORK/count") - before ))
        id=$(awk 'NR==1 {print $2}' "$WORK/err.txt" | tr -d :)
        record part=model system=live round="$round" task="$id" wall_s="$wall" requests="$requests" exit="$code"
        for r in $(seq 1 "$REPLAYS"); do
            before=$(cat "$WORK/count")
            start=$(now)
            code=0
            "$CLAWBOARD_BIN" --config "$cfg" --root "$root" task replay "$id" --json > "$WORK/replay.json" 2>/dev/null || code=$?
            wall=$(since "$start")
            requests=$(( $(cat "$WORK/count") - before ))
            local same
            same=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(s["verdict"]=="same" for s in r["steps"]), len(r["steps"]))' "$WORK/replay.json")
            record part=model system=replay round="$round" replay="$r" task="$id" wall_s="$wall" requests="$requests" \
                exit="$code" steps_same="${same% *}" steps="${same#* }"
        done
    done
}

linear_part() {
    installed=$("$VENV/bin/pip" show langgraph langgraph-checkpoint-sqlite 2>/dev/null || true)
    if ! grep -qx "Version: 1.2.24" <<<"$installed" || ! grep -qx "Version: 3.1.2" <<<"$installed"; then
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q "langgraph==1.2.24" "langgraph-checkpoint-sqlite==3.1.2"
    fi
    mkdir -p "$WORK/bps"
    python3 - "$WORK/bps/bench_linear.json" <<'PY'
import json, sys
steps = [{"id": f"s{i}", "worker": "model", "scope": ["meta.topic"], "output": f"content.results.s{i}"} for i in range(1, 11)]
json.dump({"blueprint_id": "bench_linear", "type": "static_linear", "steps": steps}, open(sys.argv[1], "w"))
PY
    cat > "$WORK/linear.toml" <<TOML
[blueprints]
dir = "$WORK/bps"

[roles.model]
command = ["sh", "-c", "sleep $SLEEP; echo '{\"output\": \"done\"}'"]
timeout = "30s"
max_retries = 0
TOML
    echo '{"user_input": {"topic": "bench", "platform": "general"}}' > "$WORK/in.json"
    "$VENV/bin/python" scripts/bench/replay_bench.py langgraph --db "$WORK/lg.sqlite" --sleep "$SLEEP" --rounds "$LG_ROUNDS" \
        > "$WORK/lg.jsonl" &
    local lg=$!
    wait "$lg"
    for round in $(seq 1 "$LG_ROUNDS"); do
        local root=$WORK/linear-$round start wall id code=0
        start=$(now)
        "$CLAWBOARD_BIN" --config "$WORK/linear.toml" --root "$root" run bench_linear --input "$WORK/in.json" \
            > /dev/null 2> "$WORK/err.txt" || code=$?
        wall=$(since "$start")
        id=$(awk 'NR==1 {print $2}' "$WORK/err.txt" | tr -d :)
        record part=linear system=clawboard phase=run round="$round" wall_s="$wall" exit="$code" sleep_s="$SLEEP"
        start=$(now)
        code=0
        "$CLAWBOARD_BIN" --config "$WORK/linear.toml" --root "$root" task replay "$id" --json > "$WORK/replay.json" || code=$?
        wall=$(since "$start")
        local live
        live=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["live_steps"])' "$WORK/replay.json")
        record part=linear system=clawboard phase=replay round="$round" wall_s="$wall" exit="$code" roles_run="$live" sleep_s="$SLEEP"
        python3 - "$WORK/lg.jsonl" "$round" "$OUT" "$COMMIT" "$SLEEP" <<'PY'
import json, sys, datetime
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = lines[int(sys.argv[2]) - 1]
base = {"benchmark": "replay", "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": sys.argv[4], "build": "release", "machine": "2-vCPU Debian 12 VM", "part": "linear",
        "system": "langgraph 1.2.24", "round": int(sys.argv[2]), "sleep_s": float(sys.argv[5])}
with open(sys.argv[3], "a") as f:
    for phase, wall, nodes in (("run", r["run"], r["nodes_run"]), ("replay", r["replay"], r["nodes_replayed"])):
        rec = dict(base, phase=phase, wall_s=round(wall, 3), roles_run=nodes)
        f.write(json.dumps(rec) + "\n")
        print(json.dumps(rec))
PY
    done
}

case "$PART" in
    model) model_part ;;
    linear) linear_part ;;
    all) linear_part; model_part ;;
    *) echo "replay.sh: PART is model, linear or all" >&2; exit 2 ;;
esac

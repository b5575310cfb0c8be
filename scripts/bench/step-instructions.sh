#!/usr/bin/env bash
# The engine's own work per blueprint step, in instructions (callgrind counts
# them: the same binary and inputs give nearly the same count whatever else
# the machine does, unlike the milliseconds of blueprint-steps.sh, which
# move by ±30 % from one minute to the next on this shared machine).
#
# The flow is blueprint-steps.sh's: a static_linear blueprint of N no-op steps,
# each `sh -c true`, run by `clawboard run` on a tree that already holds one
# such run. Counted: every instruction of the clawboard process (all its
# threads; not the `sh` children), for a flow of A steps and one of B steps;
# per step = (I(B) - I(A)) / (B - A), which leaves out the start-up (the
# tokenizer's load alone is ~370 M instructions).
#
#   scripts/bench/step-instructions.sh                      # target/release/clawboard, A=2 B=10
#   A=10 B=64 scripts/bench/step-instructions.sh            # a board that grows: per-step costs that scale with it
#   scripts/bench/step-instructions.sh /tmp/clawboard-old /tmp/clawboard-new   # several binaries, one table
#
# Needs valgrind (apt-get install valgrind). Builds nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
A=${A:-2}
B=${B:-10}
[ "$B" -gt "$A" ] || { echo "step-instructions.sh: B ($B) must exceed A ($A)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "step-instructions.sh: valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
[ $# -gt 0 ] || set -- "$PWD/target/release/clawboard"

total() { # binary steps -> instructions of one measured flow
    local bin=$1 steps=$2 work
    work=$(mktemp -d "${TMPDIR:-/tmp}/step-instructions.XXXXXX")
    mkdir -p "$work/blueprints"
    python3 - "$work/blueprints/bench_linear.json" "$steps" <<'PY'
import json, sys
n = int(sys.argv[2])
steps = [{"id": f"s{i}", "worker": "noop" if i < n else "last", "scope": ["meta.topic"]} for i in range(1, n + 1)]
json.dump({"blueprint_id": "bench_linear", "type": "static_linear",
           "description": "no-op steps in a row (scripts/bench/step-instructions.sh)", "steps": steps},
          open(sys.argv[1], "w"))
PY
    printf '[blueprints]\ndir = "%s/blueprints"\n\n[roles.noop]\ncommand = ["sh", "-c", "true"]\ntimeout = "60s"\nmax_retries = 0\n\n[roles.last]\ncommand = ["cat", "%s/last.json"]\n' \
        "$work" "$work" > "$work/bench.toml"
    # The last step's reply (a blueprint that leaves its final content empty ends "partial").
    echo '{"output": "done"}' > "$work/last.json"
    echo '{"user_input": {"topic": "bench", "platform": "general"}}' > "$work/in.json"
    "$bin" --config "$work/bench.toml" --root "$work/root" run bench_linear --input "$work/in.json" >/dev/null 2>&1 ||
        { echo "step-instructions.sh: $bin: the warm-up run failed" >&2; rm -rf "$work"; return 1; }
    valgrind --tool=callgrind --callgrind-out-file="$work/callgrind.out" \
        "$bin" --config "$work/bench.toml" --root "$work/root" run bench_linear --input "$work/in.json" \
        >/dev/null 2>"$work/valgrind.log" ||
        { echo "step-instructions.sh: $bin under valgrind failed:" >&2; tail -5 "$work/valgrind.log" >&2; rm -rf "$work"; return 1; }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$work/valgrind.log" | head -1
    rm -rf "$work"
}

echo "Instructions per step of the clawboard process (callgrind), flows of $A and $B no-op steps; $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| binary | I($A) | I($B) | per step |"
echo "| --- | ---: | ---: | ---: |"
for bin in "$@"; do
    [ -x "$bin" ] || { echo "step-instructions.sh: $bin is missing; build it first (cargo build --release -p clawboard)" >&2; exit 1; }
    a=$(total "$bin" "$A")
    b=$(total "$bin" "$B")
    echo "| $bin | $a | $b | $(( (b - a) / (B - A) )) |"
done

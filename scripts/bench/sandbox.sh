#!/usr/bin/env bash
# What the role sandbox (docs/SANDBOX.md) adds to a role's start: the same no-op
# role process (`sh -c true`) started directly and through
# `clawboard __sandbox-exec` (the Landlock ruleset built and enforced, then the
# program executed in its place), alternating run by run, from one Python
# process that times spawn to reap.
#
#   scripts/bench/sandbox.sh              # 300 runs of each
#   RUNS=1000 scripts/bench/sandbox.sh
#   TMPDIR=/dev/shm scripts/bench/sandbox.sh  # the root where the way down has fewer entries beside it
#
# CLAWBOARD_BIN (default target/release/clawboard) must exist; it builds nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLAWBOARD_BIN=${CLAWBOARD_BIN:-$PWD/target/release/clawboard}
RUNS=${RUNS:-300}
if [ ! -x "$CLAWBOARD_BIN" ]; then
    echo "sandbox.sh: $CLAWBOARD_BIN is missing; build it first (cargo build --release -p clawboard) or set CLAWBOARD_BIN" >&2
    exit 1
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/sandbox-bench.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/blackboard/.clawboard"
echo "Machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%Y-%m-%dT%H:%MZ); $CLAWBOARD_BIN"
python3 - "$CLAWBOARD_BIN" "$WORK/blackboard" "$RUNS" <<'PY'
import statistics, subprocess, sys, time
exe, root, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
sh = subprocess.run(["sh", "-c", "command -v sh"], capture_output=True, text=True, check=True).stdout.strip()
ways = {
    "direct": [sh, "-c", "true"],
    "sandboxed": [exe, "__sandbox-exec", "--deny", root, "--program", sh, "--", "sh", "-c", "true"],
}
# The sandboxed run must really be refused the root: checked once, not timed.
probe = subprocess.run([exe, "__sandbox-exec", "--deny", root, "--program", sh, "--", "sh", "-c", f"ls {root}"],
                       capture_output=True, text=True)
if probe.returncode == 0 or "Permission denied" not in probe.stderr:
    sys.exit(f"sandbox.sh: the sandboxed probe could list the root: {probe.returncode} {probe.stderr!r}")
# What the ruleset grants: the entries of each ancestor of the root but the way down.
import os
anc, p = [], os.path.dirname(root)
while True:
    anc.append(p)
    if p == "/":
        break
    p = os.path.dirname(p)
beside = sum(len(os.listdir(a)) for a in anc) - len(anc)
print(f"The root {root}: {beside} entries granted beside the way down from / ({', '.join(f'{a}: {len(os.listdir(a))}' for a in anc)})")
times = {k: [] for k in ways}
for _ in range(10):  # warm-up, not kept
    for argv in ways.values():
        subprocess.run(argv, check=True)
for _ in range(runs):
    for k, argv in ways.items():
        t0 = time.perf_counter()
        subprocess.run(argv, check=True)
        times[k].append((time.perf_counter() - t0) * 1000)
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]
print()
print("| start | runs | p50 ms | p99 ms | mean ms |")
print("| --- | ---: | ---: | ---: | ---: |")
for k, xs in times.items():
    print(f"| {k} | {len(xs)} | {pct(xs, 50):.2f} | {pct(xs, 99):.2f} | {statistics.mean(xs):.2f} |")
d, s = times["direct"], times["sandboxed"]
print()
print(f"The sandbox adds {pct(s, 50) - pct(d, 50):.2f} ms at p50 ({pct(s, 50) / pct(d, 50):.2f}× the direct start), "
      f"{pct(s, 99) - pct(d, 99):.2f} ms at p99.")
PY

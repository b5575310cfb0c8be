#!/usr/bin/env bash
# Two clawboard builds' `sync full` of the same new files to the local bucket
# (the embedded default remote, `.clawboard/bucket`), alternating: for each
# round and each binary, a fresh tree with N files (50 directories under
# shared/, 180 bytes each), then the timed `clawboard sync full`. Prints each
# push's wall time, its CPU time (user + system) and its summary line.
#
#   scripts/bench/push-ab.sh OLD_BIN NEW_BIN              # N=3000, 3 rounds
#   N=10000 ROUNDS=5 scripts/bench/push-ab.sh OLD_BIN NEW_BIN
#
# On this machine's disk (ext4 without a journal) a create costs more the
# more files were deleted lately, and each round deletes the last one's tree:
# compare the two binaries within a round, and run both orders.
# Builds nothing.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: scripts/bench/push-ab.sh OLD_BIN NEW_BIN" >&2; exit 2; }
N=${N:-3000}
ROUNDS=${ROUNDS:-3}
for b in "$@"; do [ -x "$b" ] || { echo "push-ab.sh: $b is not an executable" >&2; exit 1; }; done
work=$(mktemp -d "${TMPDIR:-/tmp}/push-ab.XXXXXX")
trap 'rm -rf "$work"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    for bin in "$@"; do
        rm -rf "$work/root"
        "$bin" --root "$work/root" init >/dev/null
        python3 - "$work/root" "$N" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, "shared", f"d{i % 50:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.md"), "w") as f:
        f.write(f"file {i}\n" * 20)
PY
        sync
        python3 - "$bin" "$work/root" "$round" <<'PY'
import resource, subprocess, sys, time
binary, root, rnd = sys.argv[1:4]
before = resource.getrusage(resource.RUSAGE_CHILDREN)
t = time.perf_counter()
r = subprocess.run([binary, "--root", root, "sync", "full"], capture_output=True, text=True)
wall = time.perf_counter() - t
after = resource.getrusage(resource.RUSAGE_CHILDREN)
if r.returncode != 0:
    sys.exit(f"push-ab.sh: {binary} sync full failed:\n{r.stdout}{r.stderr}")
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"{binary} round {rnd}: {wall:.2f} s wall, {cpu:.2f} s CPU  {r.stdout.splitlines()[0] if r.stdout else ''}")
PY
    done
done

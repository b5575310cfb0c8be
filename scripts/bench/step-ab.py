#!/usr/bin/env python3
"""Two clawboard builds, step by step: blueprint-steps.sh's flow (a static_linear
blueprint of 10 no-op steps, each `sh -c true`) run by `clawboard run` with each
binary in turn, N flows each, alternating (A B, B A, A B, ...), all on one tree
per binary. No LangGraph: this compares builds, not systems.

    python3 scripts/bench/step-ab.py OLD_BIN NEW_BIN [N]     # N defaults to 60

Per binary it prints the intervals (one step's spawn to the next step's, from
the engine's `starting a run` debug lines, as blueprint-steps.sh reads them)
at p50/p90/p99 and their mean, the same at p50/p99 without each flow's first
interval, the step's one sync of the log (`sync_us`) at p50/p99/max with how
many took over 0.5 ms and its p90 by place, the flow's wall time (the whole
`clawboard run` process) at p50, and the p50 of each interval by its place in
the flow. Exits 1 if a flow
fails or does not log 10 steps.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime


def setup(work):
    os.makedirs(os.path.join(work, "blueprints"))
    steps = ",".join(f'{{"id": "s{i}", "worker": "{"noop" if i < 10 else "last"}", "scope": ["meta.topic"]}}' for i in range(1, 11))
    with open(os.path.join(work, "blueprints", "bench_linear.json"), "w") as f:
        f.write(f'{{"blueprint_id": "bench_linear", "type": "static_linear", "description": "10 no-op steps", "steps": [{steps}]}}')
    with open(os.path.join(work, "bench.toml"), "w") as f:
        f.write(f'[blueprints]\ndir = "{work}/blueprints"\n\n[roles.last]\ncommand = ["cat", "{work}/last.json"]\n\n[roles.noop]\ncommand = ["sh", "-c", "true"]\n'
                'timeout = "30s"\nmax_retries = 0\n')
    # The last step's reply (a blueprint that leaves its final content empty ends "partial").
    with open(f"{work}/last.json", "w") as f:
        f.write('{"output": "done"}\n')
    with open(os.path.join(work, "in.json"), "w") as f:
        f.write('{"user_input": {"topic": "bench", "platform": "general"}}\n')


def flow(binary, work, root):
    env = dict(os.environ, CLAWBOARD_LOG="clawboard_roles::engine::call=debug")
    t0 = time.monotonic()
    p = subprocess.run([binary, "--config", os.path.join(work, "bench.toml"), "--root", root,
                        "run", "bench_linear", "--input", os.path.join(work, "in.json")],
                       env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    if p.returncode != 0:
        sys.exit(f"step-ab.py: {binary} failed ({p.returncode}):\n{p.stderr}")
    starts, syncs = [], []
    for line in p.stderr.splitlines():
        m = re.match(r"(\S+Z) +DEBUG .*starting a run .*step=bp/s\d+ .*sync_us=(\d+)", line)
        if m:
            starts.append(datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() * 1000)
            syncs.append(int(m.group(2)) / 1000)
    if len(starts) != 10:
        sys.exit(f"step-ab.py: {binary}: {len(starts)} steps in the log, not 10:\n{p.stderr}")
    return [b - a for a, b in zip(starts, starts[1:])], syncs, wall


def at(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, len(v) * p // 100)]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = {"A": os.path.abspath(sys.argv[1]), "B": os.path.abspath(sys.argv[2])}
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    with tempfile.TemporaryDirectory(prefix="step-ab.", dir=os.environ.get("TMPDIR", "/tmp")) as work:
        setup(work)
        got = {k: {"iv": [], "pos": [[] for _ in range(9)], "sync": [], "sync_pos": [[] for _ in range(10)], "wall": []}
               for k in bins}
        for i in range(n):
            for k in ("A", "B") if i % 2 == 0 else ("B", "A"):
                ivs, syncs, wall = flow(bins[k], work, os.path.join(work, "root-" + k))
                g = got[k]
                g["iv"] += ivs
                g["sync"] += syncs
                g["wall"].append(wall * 1000)
                for j, v in enumerate(ivs):
                    g["pos"][j].append(v)
                for j, v in enumerate(syncs):
                    g["sync_pos"][j].append(v)
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
        print(f"{n} flows of each, alternating; {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}; load average {load}")
        for k, g in got.items():
            print(f"{k} {bins[k]}")
            print(f"  intervals ms: p50 {at(g['iv'], 50):.2f}, p90 {at(g['iv'], 90):.2f}, p99 {at(g['iv'], 99):.2f}, "
                  f"mean {statistics.mean(g['iv']):.2f}")
            later = [v for x in g["pos"][1:] for v in x]
            print(f"  intervals 2-9 ms (without the first): p50 {at(later, 50):.2f}, p99 {at(later, 99):.2f}")
            slow = sum(v > 0.5 for v in g["sync"])
            print(f"  sync ms: p50 {at(g['sync'], 50):.2f}, p99 {at(g['sync'], 99):.2f}, max {max(g['sync']):.2f}; "
                  f"{slow} of {len(g['sync'])} over 0.5 ms")
            print("  sync by place (before step k), p90 ms: " + " ".join(f"{at(x, 90):.2f}" for x in g["sync_pos"]))
            print(f"  wall ms (the whole process): p50 {at(g['wall'], 50):.0f}")
            print("  interval by place, p50 ms: " + " ".join(f"{statistics.median(x):.2f}" for x in g["pos"]))


if __name__ == "__main__":
    main()

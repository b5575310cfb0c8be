#!/usr/bin/env python3
"""`clawboard run` on a large tree: the wall time of the whole process, for two
builds alternating, on one tree of TASKS tasks of 30 small files each, copied
into the local bucket with a sidecar each (as the embedded sync leaves a tree).

    python3 scripts/bench/run-startup.py OLD_BIN NEW_BIN [TASKS] [RUNS]   # 1000, 20

The flow is blueprint-steps.sh's (10 no-op steps); each run adds its task to the
tree. Prints the p50, min and max per binary. Builds nothing.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = sys.argv[1:3]
    tasks = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    work = tempfile.mkdtemp(prefix="run-startup-")
    os.makedirs(f"{work}/blueprints")
    steps = ",".join(f'{{"id": "s{i}", "worker": "{"noop" if i < 10 else "last"}", "scope": ["meta.topic"]}}' for i in range(1, 11))
    with open(f"{work}/blueprints/bench_linear.json", "w") as f:
        f.write(f'{{"blueprint_id": "bench_linear", "type": "static_linear", "steps": [{steps}]}}')
    with open(f"{work}/bench.toml", "w") as f:
        f.write(f'[blueprints]\ndir = "{work}/blueprints"\n\n[roles.last]\ncommand = ["cat", "{work}/last.json"]\n\n[roles.noop]\ncommand = ["sh", "-c", "true"]\n'
                'timeout = "30s"\nmax_retries = 0\n')
    # The last step's reply (a blueprint that leaves its final content empty ends "partial").
    with open(f"{work}/last.json", "w") as f:
        f.write('{"output": "done"}\n')
    with open(f"{work}/in.json", "w") as f:
        f.write('{"user_input": {"topic": "bench", "platform": "general"}}')
    root = f"{work}/root"
    base = [bins[0], "--config", f"{work}/bench.toml", "--root", root]
    subprocess.run(base + ["init"], stdout=subprocess.DEVNULL, check=True)
    for prefix in ("", ".clawboard/bucket/", ".clawboard/bucket/.clawboard-meta/"):
        for i in range(tasks):
            d = f"{root}/{prefix}tasks/t{i:05d}/attempts"
            os.makedirs(d, exist_ok=True)
            for j in range(30):
                with open(f"{d}/{j:04d}.json", "w") as f:
                    f.write("{}")
    times = {b: [] for b in bins}
    for _ in range(runs):
        for b in bins:
            t0 = time.perf_counter()
            subprocess.run([b] + base[1:] + ["run", "bench_linear", "--input", f"{work}/in.json"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            times[b].append((time.perf_counter() - t0) * 1000)
    files = sum(len(f) for _, _, f in os.walk(root))
    print(f"{tasks} tasks, {files} files in the tree; {runs} runs of each, alternating; load average "
          + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    for b in bins:
        v = times[b]
        print(f"{b}: wall p50 {statistics.median(v):.1f} ms, min {min(v):.1f}, max {max(v):.1f}")
    subprocess.run(["rm", "-rf", work], check=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The floor under a LangGraph step of scripts/bench/blueprint-steps.sh: how long
Python takes to run `sh -c true` with subprocess.run (what each node calls),
nothing recorded. Prints p50 and p90 in ms over N runs (default 300).

    python3 scripts/bench/spawn-floor.py [N]

Rust's side: cargo run --release -p clawboard-roles --example spawn_floor [N]
"""
import subprocess
import sys
import time


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    ms = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(["sh", "-c", "true"], check=True)
        ms.append((time.perf_counter() - t) * 1000)
    ms.sort()
    at = lambda p: ms[min(len(ms) - 1, len(ms) * p // 100)]
    print(f"python subprocess.run: p50 {at(50):.3f} ms, p90 {at(90):.3f} ms ({n} runs)")


if __name__ == "__main__":
    main()

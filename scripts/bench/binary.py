#!/usr/bin/env python3
"""Two builds of the clawboard binary side by side: file size, the wall time of
`clawboard --version` (the whole process: exec, dynamic loading and relocation,
argument parsing, exit), and the spawn cost of a sandboxed role (`sh -c true`
through `clawboard __sandbox-exec`, spawn to reap). The binaries alternate run
by run, so both see the same machine.

    python3 scripts/bench/binary.py OLD_BIN NEW_BIN [RUNS]   # 300 runs of each

Prints one line per binary and measure (p50 and p90 in ms) and the ratio of the
p50s. Builds nothing.
"""
import os
import subprocess
import sys
import tempfile
import time


def pct(ms, p):
    ms = sorted(ms)
    return ms[min(len(ms) - 1, len(ms) * p // 100)]


def timed(argv):
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - t) * 1000


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    bins = sys.argv[1:3]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    sh = subprocess.run(["sh", "-c", "command -v sh"], capture_output=True, text=True, check=True).stdout.strip()
    deny = tempfile.mkdtemp(prefix="binary-bench-")
    measures = {
        "--version": lambda exe: [exe, "--version"],
        "sandboxed sh -c true": lambda exe: [exe, "__sandbox-exec", "--deny", deny, "--program", sh, "--", "sh", "-c", "true"],
    }
    load = open("/proc/loadavg").read().split()[:3]
    print(f"{os.cpu_count()} cores, load average {' '.join(load)}; {runs} runs of each, alternating")
    for exe in bins:
        print(f"{exe}: {os.path.getsize(exe) / 1e6:.1f} MB")
    for name, argv in measures.items():
        for exe in bins:  # warm the page cache, check it works
            timed(argv(exe))
        times = {exe: [] for exe in bins}
        for _ in range(runs):
            for exe in bins:
                times[exe].append(timed(argv(exe)))
        for exe in bins:
            print(f"{name:22} {exe}: p50 {pct(times[exe], 50):.3f} ms, p90 {pct(times[exe], 90):.3f} ms")
        old, new = (pct(times[b], 50) for b in bins)
        print(f"{name:22} new/old p50: {new / old:.2f}")
    direct = [timed([sh, "-c", "true"]) for _ in range(runs)]
    print(f"{'sh -c true, direct':22}: p50 {pct(direct, 50):.3f} ms, p90 {pct(direct, 90):.3f} ms")
    os.rmdir(deny)


if __name__ == "__main__":
    main()

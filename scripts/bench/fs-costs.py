#!/usr/bin/env python3
"""What one file-system operation costs on this machine, the floor under a
clawboard step's records (docs/BENCHMARKS.md, "Durable step overhead").

  python3 scripts/bench/fs-costs.py            # in $TMPDIR (default /tmp)
  TMPDIR=/dev/shm python3 scripts/bench/fs-costs.py

Each operation 100 times on 500-byte files in a fresh directory; p50 and p90 ms.
"""
import ctypes
import os
import statistics
import tempfile
import time

libc = ctypes.CDLL("libc.so.6", use_errno=True)
d = tempfile.mkdtemp(prefix="fs-costs.")
dfd = os.open(d, os.O_RDONLY)
seq = iter(range(10**9))


def timed(f, n=100):
    xs = []
    for _ in range(n):
        a = time.perf_counter()
        f()
        xs.append((time.perf_counter() - a) * 1000)
    xs.sort()
    return f"p50 {statistics.median(xs):.3f}  p90 {xs[int(n * 0.9)]:.3f}"


def new_file():
    with open(f"{d}/n{next(seq)}", "wb") as f:
        f.write(b"x" * 500)


def temp_and_rename_new():
    i = next(seq)
    with open(f"{d}/r{i}.tmp", "wb") as f:
        f.write(b"x" * 500)
    os.rename(f"{d}/r{i}.tmp", f"{d}/r{i}")


def replace_by_rename():
    i = next(seq)
    with open(f"{d}/p{i}.tmp", "wb") as f:
        f.write(b"x" * 500)
    os.rename(f"{d}/p{i}.tmp", f"{d}/replaced")


def durable_replace():
    """clawboard's atomic write: temp file, fsync, rename, fsync of the directory."""
    i = next(seq)
    with open(f"{d}/s{i}.tmp", "wb") as f:
        f.write(b"x" * 500)
        f.flush()
        os.fsync(f.fileno())
    os.rename(f"{d}/s{i}.tmp", f"{d}/synced")
    os.fsync(dfd)


def append():
    with open(f"{d}/log", "ab") as f:
        f.write(b"y" * 300)


def append_fdatasync():
    with open(f"{d}/log", "ab") as f:
        f.write(b"y" * 300)
        f.flush()
        os.fdatasync(f.fileno())


def syncfs():
    libc.syncfs(dfd)


for name, f in [("new file", new_file), ("temp file + rename to a new name", temp_and_rename_new),
                ("replace an existing file by rename", replace_by_rename),
                ("durable replace (2 fsyncs)", durable_replace), ("append", append),
                ("append + fdatasync", append_fdatasync), ("syncfs", syncfs)]:
    print(f"{name:36} {timed(f)}")

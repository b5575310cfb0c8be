#!/usr/bin/env python3
"""A log append made durable, three ways, alternating on one preallocated file
(8 MiB of written zeros, as `.clawboard/wal.log` is kept): a 2,100-byte buffered
`pwrite` then `fdatasync` (what clawboard does), the same bytes in whole 4 KiB
blocks with `O_DIRECT|O_DSYNC`, and with `O_DIRECT` then `fdatasync`.

    python3 scripts/bench/direct-write.py [DIR]     # DIR defaults to /tmp

Prints p50/p90/p99 ms of 400 of each. (docs/BENCHMARKS.md, "Durable step
overhead": direct writes were faster here and slower in the real flow.)
"""
import mmap
import os
import sys
import time

path = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "/tmp", "direct-write-bench.log")
SIZE = 8 << 20
with open(path, "wb") as f:
    f.write(b"\0" * SIZE)
    f.flush()
    os.fsync(f.fileno())
buffered = os.open(path, os.O_RDWR)
direct_dsync = os.open(path, os.O_RDWR | os.O_DIRECT | os.O_DSYNC)
direct = os.open(path, os.O_RDWR | os.O_DIRECT)
block = mmap.mmap(-1, 8192)  # page-aligned memory, as O_DIRECT asks
record = b"x" * 2100
times = {"buffered + fdatasync": [], "direct + O_DSYNC": [], "direct + fdatasync": []}
at = 0
for _ in range(400):
    for kind in times:
        at = (at + 2200) % (SIZE - 16384)
        t = time.perf_counter()
        if kind == "buffered + fdatasync":
            os.pwrite(buffered, record, at)
            os.fdatasync(buffered)
        else:
            start = at // 4096 * 4096
            block[0:len(record)] = record
            n = 8192 if at % 4096 + len(record) > 4096 else 4096
            fd = direct_dsync if kind == "direct + O_DSYNC" else direct
            os.pwritev(fd, [memoryview(block)[:n]], start)
            if kind == "direct + fdatasync":
                os.fdatasync(fd)
        times[kind].append((time.perf_counter() - t) * 1000)
        time.sleep(0.001)
os.unlink(path)
for kind, v in times.items():
    v.sort()
    print(f"{kind:22} p50 {v[len(v) // 2]:.3f}  p90 {v[int(len(v) * .9)]:.3f}  p99 {v[int(len(v) * .99)]:.3f} ms")

#!/usr/bin/env python3
"""A role that works on its task's board through the daemon, with its token.

It reads its context (a slice, when its config gives it a scope or template),
then tries every zone operation with `clawboard board ... --token` and reports
which the daemon allowed (exit 0) and which it refused (exit 2), so a test can
hold them against seed 000's zone table. With PROBE_WRITE_HOOK set it writes
title variants into content.hook, as a title worker would. Deterministic: no
network, no keys.
"""
import json
import os
import subprocess
import sys

from common import context, emit, role

ctx = context()
exe = os.environ.get("CLAWBOARD_EXE", "clawboard")
task = os.environ["CLAWBOARD_TASK_ID"]
me = role()


def board(*args):
    r = subprocess.run([exe, "board", *args], capture_output=True, text=True)
    if r.returncode not in (0, 2):
        sys.stderr.write(f"board {args}: exit {r.returncode}: {r.stderr}\n")
    return "ok" if r.returncode == 0 else ("refused" if r.returncode == 2 else f"error {r.returncode}")


key = "probe_" + me.replace("-", "_")
cells = {}
for zone in ("meta", "content", "control"):
    cells[f"{zone}.R"] = board("get", task, zone)
    cells[f"{zone}.W"] = board("set", task, f"{zone}.{key}", json.dumps(me))
cells["errors.A"] = board("append-error", task, "--step", key, "--type", "probe", "--message", "probe")
# Another task's board: never, whatever the component.
cells["other_task"] = board("get", task + "-other", "meta")

out = {"cells": cells, "sawTask": "task" in ctx, "slice": ctx.get("slice"), "sliceTokens": ctx.get("sliceTokens")}
if os.environ.get("PROBE_WRITE_HOOK"):
    topic = (ctx.get("slice") or {}).get("intent", "?")
    variants = [
        {"type": "numeric", "content": f"5 ways: {topic[:20]}", "score": 85},
        {"type": "question", "content": f"Why {topic[:20]}?", "score": 70},
    ]
    out["hookWrite"] = board("set", task, "content.hook.variants", json.dumps(variants))
emit({"summary": f"{me} probed the board", "output": out, "usage": {"prompt_tokens": 40, "completion_tokens": 7}})

#!/usr/bin/env python3
"""A worker (analyst or creator): summarizes what it did, and in a later
iteration says which validator issues it addressed.

Configured with a `scope` (config/examples/board.toml), it is handed only its slice
of the task's board instead of the task, and writes its notes into the board's
content zone through the daemon (`clawboard board set`, with its token)."""
import json
import os
import subprocess

from common import context, emit, role

ctx = context()
sliced = "slice" in ctx
desc = ctx["slice"].get("intent", "") if sliced else ctx["task"]["description"]
fixed = [i["description"] for i in (ctx.get("validation") or {}).get("issues", [])]
summary = f"{role()} handled: {desc[:60]}"
if fixed:
    summary += f" (iteration {ctx['iteration']}, addressed: {'; '.join(fixed)})"
if sliced:
    exe = os.environ.get("CLAWBOARD_EXE", "clawboard")
    key = "content.notes." + role().replace("-", "_")
    # Its stdout is not ours: this role's stdout is its JSON output.
    r = subprocess.run([exe, "board", "set", ctx["taskId"], key, json.dumps(summary)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"board set {key}: exit {r.returncode}: {r.stderr.strip()}")
emit({
    "summary": summary,
    "artifacts": [{"path": f"notes/{role()}.md", "description": f"{role()} notes"}],
    "output": {"iteration": ctx["iteration"], "sawPrevious": len(ctx.get("previous", []))},
})

#!/usr/bin/env python3
"""A worker (analyst or creator): summarizes what it did, and in a later
iteration says which validator issues it addressed."""
from common import context, emit, role

ctx = context()
desc = ctx["task"]["description"]
fixed = [i["description"] for i in (ctx.get("validation") or {}).get("issues", [])]
summary = f"{role()} handled: {desc[:60]}"
if fixed:
    summary += f" (iteration {ctx['iteration']}, addressed: {'; '.join(fixed)})"
emit({
    "summary": summary,
    "artifacts": [{"path": f"notes/{role()}.md", "description": f"{role()} notes"}],
    "output": {"iteration": ctx["iteration"], "sawPrevious": len(ctx.get("previous", []))},
})

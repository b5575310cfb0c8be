#!/usr/bin/env python3
"""PM: picks the team. Analyst first, then the creator; a task with
demo.escalate also gets the deployer, who asks a human before going on."""
from common import context, demo_flags, emit

ctx = context()
team = [
    {"role": "analyst", "priority": 1, "reason": "understand the task first"},
    {"role": "creator", "priority": 2, "reason": "produce the result"},
]
if demo_flags(ctx).get("escalate"):
    team.append({"role": "deployer", "priority": 3, "reason": "ship it, with a human's approval"})
emit({
    "team": team,
    "reasoning": "analysis before creation; validator checks the result",
    "workflow": f"{ctx['task']['type']}-task",
    "estimatedTime": "1m",
})

#!/usr/bin/env python3
"""Validator: passes a result with 8.5, except that a task with
demo.failFirstValidation fails its first iteration (so the team iterates)."""
from common import context, demo_flags, emit

ctx = context()
if demo_flags(ctx).get("failFirstValidation") and ctx["iteration"] == 1:
    emit({
        "score": 5.0,
        "pass": False,
        "criteria": {"correctness": 6.0, "completeness": 4.0, "quality": 5.5, "standards": 5.0},
        "issues": [{"severity": "major", "description": "edge cases are not covered", "location": "result.json"}],
        "suggestions": ["cover the empty input"],
    })
else:
    emit({
        "score": 8.5,
        "pass": True,
        "criteria": {"correctness": 9.0, "completeness": 8.5, "quality": 8.0, "standards": 8.5},
        "issues": [],
        "suggestions": [],
    })

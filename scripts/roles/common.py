"""Shared by the example roles: read the context, print the output.

A role receives one JSON document on stdin and prints one JSON document on stdout.
The environment names it: CLAWBOARD_TASK_ID, CLAWBOARD_ROLE, CLAWBOARD_INSTANCE_ID,
CLAWBOARD_TOKEN, CLAWBOARD_ROOT. These examples are deterministic: no network, no keys.
"""
import json
import os
import sys


def context():
    return json.load(sys.stdin)


def emit(doc):
    json.dump(doc, sys.stdout, ensure_ascii=False)
    sys.stdout.write("\n")


def role():
    return os.environ.get("CLAWBOARD_ROLE", "?")


def demo_flags(ctx):
    """Per-task switches the demo sets in task.json under "demo"."""
    return ctx.get("task", {}).get("demo", {}) or {}

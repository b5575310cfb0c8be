#!/usr/bin/env python3
"""Memory harvester: one cell per team member, and a cross-pollination candidate."""
from common import context, emit

ctx = context()
team = [m["role"] for m in ctx.get("team", [])]
emit({
    "experiences": [
        {"roleId": r, "cells": [{"type": "success", "content": f"{r}: {ctx['task']['type']} task pattern", "value": 0.7}]}
        for r in team
    ],
    "crossPollinationCandidates": [
        {"fromRole": "analyst", "toRole": "creator", "pattern": "state the edge cases before writing", "value": 0.8}
    ],
})

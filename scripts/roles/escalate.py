#!/usr/bin/env python3
"""Deployer: in the first iteration, asks a human to approve the deployment
(an escalation with requiresHumanApproval); the task waits for the decision."""
from common import context, emit

ctx = context()
out = {"summary": f"deployment of {ctx['task']['taskId']} prepared"}
if ctx["step"].startswith("iter-1/"):
    out["escalations"] = [{
        "level": "high",
        "issue": "ready to deploy to production",
        "suggestedAction": "approve to deploy, reject to stop",
        "requiresHumanApproval": True,
    }]
emit(out)

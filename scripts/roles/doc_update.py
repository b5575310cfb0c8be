#!/usr/bin/env python3
"""The Doc Update lane of seed 004 (Human -> Aya -> Sho -> Tsugu -> Gen -> Human),
one deterministic actor per call; the daemon says which in the context ("actor").

The daemon hands an entry addressed to the actor, the lane's rules for it and the
content of the entry's target docs; the actor prints what it did (see
docs/ENTRIES.md, "Lanes"):

  Aya   proposes the change: one line under the named section of each doc
        (doc_update_proposal_request -> doc_update_review_request to Sho)
  Sho   reviews it: every change names a target doc and adds a non-empty line,
        and the request does not ask to be rejected
        (-> doc_update_apply_request to Tsugu, or doc_update_error to Human)
  Tsugu applies it: writes the docs (only the entry's target docs, writes_docs)
        (-> doc_update_report_request to Gen)
  Gen   reports back (-> doc_update_report to Human, who closes it)

No network, no keys: the same entry always gives the same output."""
from common import context, emit

ctx = context()
actor = ctx["actor"]
entry = ctx["entry"]
payload = entry.get("payload") or {}
# What Human asked, without the prefixes the actors before added.
summary = payload.get("summary", "")
for prefix in ("proposal: ", "approved: ", "applied: "):
    summary = summary.removeprefix(prefix)
details = payload.get("details") or {}
docs = {d["path"]: d for d in ctx.get("targetDocs", [])}


def heading(text):
    """A heading's words: `## 差分（δ）` and `差分（δ）` name the same section."""
    return text.lstrip("#").strip()


def with_line(content, section, line):
    """`content` with `line` added at the end of `section` (or of the file)."""
    lines = (content or "").splitlines()
    at = next((i for i, l in enumerate(lines) if section and l.startswith("#") and heading(l) == heading(section)), None)
    if at is not None:
        at += 1
        while at < len(lines) and not lines[at].startswith("#"):
            at += 1
        while at > 0 and lines[at - 1].strip() == "":
            at -= 1
        lines.insert(at, line)
    else:
        if section:
            title = section if section.startswith("#") else f"## {section}"
            lines += ["", title] if lines else [title]
        lines.append(line)
    return "\n".join(lines) + "\n"


if actor == "Aya":
    changes = [{"path": p, "section": d.get("section"), "add": f"- {summary}"} for p, d in docs.items()]
    emit({
        "entries": [{
            "to": "Sho",
            "kind": "doc_update_review_request",
            "payload": {"summary": f"proposal: {summary}", "details": {"changes": changes, "reason": details.get("reason")},
                        "refs": {"request": entry["id"]}},
        }],
        "note": f"proposed {len(changes)} change(s) to Sho",
    })
elif actor == "Sho":
    changes = details.get("changes") or []
    problems = [c.get("path") for c in changes if c.get("path") not in docs or not (c.get("add") or "").strip()]
    if "reject" in summary.lower():
        problems.append("the request asks to be rejected")
    if problems or not changes:
        emit({
            "entries": [{
                "to": "Human",
                "kind": "doc_update_error",
                "payload": {"summary": f"review refused: {summary}", "details": {"problems": problems or ["no changes"]},
                            "refs": {"proposal": entry["id"]}},
            }],
            "note": "refused; reported to Human",
        })
    else:
        emit({
            "entries": [{
                "to": "Tsugu",
                "kind": "doc_update_apply_request",
                "payload": {"summary": f"approved: {summary}", "details": {"changes": changes},
                            "refs": {"proposal": entry["id"]}},
            }],
            "note": "approved",
        })
elif actor == "Tsugu":
    changes = details.get("changes") or []
    writes = [{"path": c["path"], "content": with_line(docs.get(c["path"], {}).get("content"), c.get("section"), c["add"])}
              for c in changes]
    emit({
        "docs": writes,
        "entries": [{
            "to": "Gen",
            "kind": "doc_update_report_request",
            "payload": {"summary": f"applied: {summary}", "details": {"files": [w["path"] for w in writes]},
                        "refs": {"apply": entry["id"]}},
        }],
        "note": f"applied to {len(writes)} file(s)",
    })
elif actor == "Gen":
    files = details.get("files") or []
    emit({
        "entries": [{
            "to": "Human",
            "kind": "doc_update_report",
            "payload": {"summary": f"Doc Update done: {summary}",
                        "details": {"files": files}, "refs": {"report": entry["id"]}},
        }],
        "note": "reported to Human",
    })
else:
    raise SystemExit(f"doc_update.py: no actor {actor!r} in the Doc Update lane")

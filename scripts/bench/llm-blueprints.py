#!/usr/bin/env python3
"""The blueprints on a real model (issue: a real model in the loop): every
component answered by the local model server (scripts/llm-server, llama.cpp
serving Gemma 3 270M) with config/examples/llm.toml, each input run as shipped
(each step handed its slice), with `--full-context` (each step handed the whole
board, no budget), and, with `--no-schema`, as shipped but with reply_format =
"json_object" (no schema-shaped replies).

  scripts/llm-server install && eval "$(scripts/llm-server start)"
  scripts/bench/llm-blueprints.py                          # 4 blueprints x 20 inputs, sliced and full
  INPUTS=5 BLUEPRINTS=xiaohongshu_viral scripts/bench/llm-blueprints.py --no-schema
  scripts/bench/llm-blueprints.py --keep /tmp/llmb         # keep every root
  FROM=6 INPUTS=5 RESULTS=runs.jsonl scripts/bench/llm-blueprints.py --jobs 2   # inputs 6-10, two at once
  scripts/bench/llm-blueprints.py --report runs.jsonl      # pool every run recorded there

Builds nothing: CLAWBOARD_BIN (default target/release/clawboard) must exist, and
CLAWBOARD_LLM_LOCAL_BASE_URL must point at the server (scripts/llm-server start
prints it). Inputs: scripts/bench/blueprint-inputs.json (the first INPUTS of
its 20, from the FROM-th, default 1); the platform blueprints run each input on
their own platform. Runs append to RESULTS, so the 20 inputs can be run in parts
and pooled with --report. With --jobs N, N runs go to the server at once (its 4
slots batch them): (a), (b) and (d) do not change, but each run's time then
includes waits behind the others' requests, so (c) is measured with --jobs 1.

What it reports, from each run's records (the slice ledger, the attempt records
and the output contract), never from the model's wording:
  (a) the provider-reported prompt tokens (usage.prompt_tokens, summed over every
      model step of a run) sliced against full-context: goal <= 20 %;
  (b) the output contract's status per run (success / partial / failed) and the
      valid-reply rate per step (attempts whose reply passed, of all attempts);
  (c) wall time per run and clawboard's own part of it: the run's wall time less
      the time some model request was in flight (the union of the model steps'
      attempt intervals, whose records keep milliseconds); goal <= 1 %;
  (d) per step, the o200k count of its slices against the model's own count
      (llama.cpp /tokenize, the ledger's model_tokens).
One JSON line per run goes to RESULTS (default results.jsonl in the kept
directory, or a temporary one) for later pooling.
"""
import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BLUEPRINTS = ["xiaohongshu_viral", "wechat_longform", "twitter_thread", "deep_analysis"]
PLATFORM = {"xiaohongshu_viral": "xiaohongshu", "wechat_longform": "wechat", "twitter_thread": "twitter"}
PROMPT_GOAL = 0.20
OWN_GOAL = 0.01


def ts(s):
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def union(intervals):
    """Total length of the union of (start, end) intervals."""
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def run_one(binary, config, blueprint, inp, workdir, full):
    root = workdir / "root"
    infile = workdir / "input.json"
    infile.write_text(json.dumps(inp, ensure_ascii=False))
    args = [binary, "--config", str(config), "--root", str(root), "run", blueprint, "--input", str(infile)]
    if full:
        args.append("--full-context")
    started, t0 = time.monotonic(), time.time()
    p = subprocess.run(args, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    m = re.search(r"task (\S+): blueprint", p.stderr)
    if not m:
        raise SystemExit(f"llm-blueprints: {blueprint}: no task id in the output (exit {p.returncode}):\n{p.stderr}")
    task = root / "tasks" / m.group(1)
    try:
        contract = json.loads(p.stdout)
    except json.JSONDecodeError:
        contract = {}
    ledger = [json.loads(f.read_text()) for f in sorted((task / "board" / "slices").glob("*.json"))]
    attempts = [json.loads(f.read_text()) for f in sorted((task / "attempts").glob("*.json"))]
    return (t0, wall), contract, ledger, attempts


def step_id(step):
    s = re.sub(r"^bp/(r\d+/)?", "", step)
    return re.sub(r"(-c\d+)?(-redo\d+)?$", "", s)


def summarize(clock, contract, ledger, attempts):
    t0, wall = clock
    sent = [e for e in ledger if e["step"].startswith("bp/") and e["outcome"] not in ("over_budget", "recut")]
    prompt = sum((e.get("usage") or {}).get("prompt_tokens", 0) for e in sent)
    completion = sum((e.get("usage") or {}).get("completion_tokens", 0) for e in sent)
    # The same steps in o200k: each slice against the whole board it was cut from (the
    # ledger's full_tokens), one run, one board: no run-to-run variance of the model's output.
    counted = [e for e in sent if e.get("full_tokens") is not None]
    slice_o200k, board_o200k = sum(e["tokens"] for e in counted), sum(e["full_tokens"] for e in counted)
    # Every role of the config is a model: the blueprint's steps, then the validator and harvester.
    ended = [a for a in attempts if a.get("endedAt")]
    intervals = [(ts(a["startedAt"]), ts(a["endedAt"])) for a in ended]
    in_flight = union(intervals)
    # clawboard's own time, split: before the first run (the process's start, config,
    # intake, the first slice), after the last (the contract), and between runs.
    first = min((a for a, _ in intervals), default=t0)
    last = max((b for _, b in intervals), default=t0 + wall)
    before, after = max(first - t0, 0.0), max(t0 + wall - last, 0.0)
    model_steps = [a for a in ended if a["step"].startswith("bp/")]
    per_step = defaultdict(lambda: {"attempts": 0, "ok": 0, "o200k": 0, "model": 0})
    for a in model_steps:
        s = per_step[step_id(a["step"])]
        s["attempts"] += 1
        s["ok"] += a["status"] == "ok"
    for e in sent:
        if e.get("model_tokens") is not None:
            s = per_step[step_id(e["step"])]
            s["o200k"] += e["tokens"]
            s["model"] += e["model_tokens"]
    status = (contract.get("execution_result") or {}).get("status", "none")
    # The steps a fallback answered, and why their own role did not: a success by fallbacks is no model's success.
    fallbacks = [f"{e['step_id']} by fallback {e['component']}: {e['fallback']}"
                 for e in (contract.get("execution_result") or {}).get("steps_executed", []) if e.get("fallback")]
    return {"wall_s": round(wall, 3), "in_flight_s": round(in_flight, 3), "before_s": round(before, 3),
            "after_s": round(after, 3), "status": status, "fallbacks": fallbacks,
            "prompt_tokens": prompt, "completion_tokens": completion,
            "slice_o200k": slice_o200k, "board_o200k": board_o200k, "steps": dict(per_step)}


def without_schemas(toml_text):
    """The config without its roles' own reply_schema tables (they go with json_schema only)."""
    out, skipping = [], False
    for line in toml_text.splitlines(keepends=True):
        if line.startswith("["):
            skipping = ".reply_schema" in line
        if not skipping:
            out.append(line)
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", default=str(REPO / "scripts/bench/blueprint-inputs.json"))
    ap.add_argument("--config", default=str(REPO / "config/examples/llm.toml"))
    ap.add_argument("--keep", help="keep the roots under this directory (default: a temporary one, removed)")
    ap.add_argument("--no-schema", action="store_true", help="also run as shipped with reply_format = json_object")
    ap.add_argument("--no-full", action="store_true", help="skip the full-context runs")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (default 1; see (c) above)")
    ap.add_argument("--report", metavar="RESULTS", help="run nothing: pool the runs recorded in RESULTS")
    a = ap.parse_args()
    if a.report:
        pool(Path(a.report))
        return

    binary = os.environ.get("CLAWBOARD_BIN", str(REPO / "target/release/clawboard"))
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise SystemExit(f"llm-blueprints: {binary} is missing; build it first (cargo build --release -p clawboard)")
    if not os.environ.get("CLAWBOARD_LLM_LOCAL_BASE_URL"):
        raise SystemExit("llm-blueprints: CLAWBOARD_LLM_LOCAL_BASE_URL is not set; eval \"$(scripts/llm-server start)\" first")
    # Which build ran (its start-up is most of clawboard's own time) and from which commit.
    build = next((p for p in ("release", "debug") if f"/target/{p}/" in os.path.realpath(binary)), "other")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip() or None
    blueprints = os.environ.get("BLUEPRINTS", " ".join(BLUEPRINTS)).split()
    first = int(os.environ.get("FROM", "1"))
    inputs = json.loads(Path(a.inputs).read_text())[first - 1 : first - 1 + int(os.environ.get("INPUTS", "20"))]

    tmp = None
    if a.keep:
        base = Path(a.keep)
        base.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="llm-blueprints.")
        base = Path(tmp.name)
    results = Path(os.environ.get("RESULTS", base / "results.jsonl"))
    shipped = Path(a.config).read_text()
    no_schema = base / "llm-json-object.toml"
    no_schema.write_text(without_schemas(shipped).replace('reply_format = "json_schema"', 'reply_format = "json_object"'))

    modes = [("sliced", a.config, False)]
    if not a.no_full:
        modes.append(("full", a.config, True))
    if a.no_schema:
        modes.append(("sliced-no-schema", no_schema, False))
    jobs = []
    for bp in blueprints:
        for i, inp in enumerate(inputs, first):
            inp = json.loads(json.dumps(inp))
            if bp in PLATFORM:
                inp["user_input"]["platform"] = PLATFORM[bp]
            inp["execution_config"] = {"max_retries": 2, "quality_threshold": 60}
            for mode, config, full in modes:
                jobs.append((bp, i, inp, mode, config, full))

    def one(job):
        bp, i, inp, mode, config, full = job
        wd = base / bp / f"{i:02}-{mode}"
        wd.mkdir(parents=True, exist_ok=True)
        r = summarize(*run_one(binary, config, bp, inp, wd, full))
        r.update({"blueprint": bp, "input": i, "mode": mode, "jobs": a.jobs, "build": build, "commit": commit,
                  "at": dt.datetime.now().isoformat(timespec="seconds")})
        print(f"{bp} input {i:2} {mode}: {r['status']}, {r['wall_s']:.1f} s "
              f"(model in flight {r['in_flight_s']:.1f} s), prompt {r['prompt_tokens']} tokens",
              file=sys.stderr)
        for line in r["fallbacks"]:
            print(f"    {line}", file=sys.stderr)
        return r

    runs = defaultdict(list)
    with results.open("a") as out, ThreadPoolExecutor(max_workers=max(a.jobs, 1)) as ex:
        for r in ex.map(one, jobs):
            out.write(json.dumps(r) + "\n")
            out.flush()
            runs[(r["blueprint"], r["mode"])].append(r)
    report(runs, blueprints, [m for m, _, _ in modes])


def pool(results):
    """Reports every run recorded in `results` (the last run of each blueprint, input and mode)."""
    latest = {}
    for line in results.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            latest[(r["blueprint"], r["mode"], r["input"])] = r
    runs = defaultdict(list)
    for (bp, mode, _), r in sorted(latest.items()):
        runs[(bp, mode)].append(r)
    blueprints = [b for b in BLUEPRINTS if any(k[0] == b for k in runs)]
    report(runs, blueprints, sorted({k[1] for k in runs}))


def report(runs, blueprints, modes):
    print("(a) provider-reported prompt tokens, sliced against full-context")
    print("| blueprint | runs | sliced | full-context | sliced ÷ full | max of one input | per model request, sliced ÷ full |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for bp in blueprints:
        s, f = runs.get((bp, "sliced"), []), runs.get((bp, "full"), [])
        if not s or not f:
            continue
        # Only the inputs run both ways are compared.
        full_of = {r["input"]: r for r in f}
        pairs = [(r, full_of[r["input"]]) for r in s if r["input"] in full_of]
        if not pairs:
            continue
        ss, ff = sum(x["prompt_tokens"] for x, _ in pairs), sum(y["prompt_tokens"] for _, y in pairs)
        worst = max((x["prompt_tokens"] / y["prompt_tokens"] for x, y in pairs if y["prompt_tokens"]), default=0)
        # The quality loop's rounds differ between two runs of one input; per request
        # (every attempt of a blueprint step) the two are compared step for step.
        requests = lambda rs: sum(st["attempts"] for r in rs for st in r["steps"].values())
        per = (ss / max(requests([x for x, _ in pairs]), 1)) / max(ff / max(requests([y for _, y in pairs]), 1), 1e-9)
        print(f"| {bp} | {len(pairs)} | {ss:,} | {ff:,} | {100 * ss / max(ff, 1):.1f} % | {100 * worst:.1f} % | {100 * per:.1f} % |")
    print("\n(b) contract status and valid replies per step")
    print("| blueprint | mode | success / partial / failed | step: valid replies of attempts | steps by fallback |")
    print("| --- | --- | --- | --- | --- |")
    for (bp, mode), rs in sorted(runs.items()):
        counts = [sum(r["status"] == k for r in rs) for k in ("success", "partial", "failed")]
        steps = defaultdict(lambda: [0, 0])
        for r in rs:
            for sid, st in r["steps"].items():
                steps[sid][0] += st["ok"]
                steps[sid][1] += st["attempts"]
        cells = ", ".join(f"{sid} {ok}/{n}" for sid, (ok, n) in sorted(steps.items()))
        by_fallback = defaultdict(int)
        for r in rs:
            for line in r.get("fallbacks", []):
                by_fallback[line.split(" by fallback ")[0]] += 1
        fb = ", ".join(f"{sid} {n}×" for sid, n in sorted(by_fallback.items())) or "none"
        print(f"| {bp} | {mode} | {' / '.join(map(str, counts))} | {cells} | {fb} |")
    print("\n(c) wall time per run and clawboard's own part (wall less model requests in flight; runs made one at a time)")
    print("| blueprint | mode | runs | wall s, mean | own s, mean | own ÷ wall | of it before the first run, s | between runs, s | after the last, s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (bp, mode), rs in sorted(runs.items()):
        rs = [r for r in rs if r.get("jobs", 1) == 1]
        if not rs:
            continue
        wall = sum(r["wall_s"] for r in rs)
        own = sum(r["wall_s"] - r["in_flight_s"] for r in rs)
        split = [r for r in rs if "before_s" in r]
        if split:
            b = sum(r["before_s"] for r in split) / len(split)
            e = sum(r["after_s"] for r in split) / len(split)
            m = sum(r["wall_s"] - r["in_flight_s"] - r["before_s"] - r["after_s"] for r in split) / len(split)
            parts = f"{b:.2f} | {m:.2f} | {e:.2f}"
        else:
            parts = "– | – | –"
        print(f"| {bp} | {mode} | {len(rs)} | {wall / len(rs):.1f} | {own / len(rs):.2f} | {100 * own / wall:.2f} % | {parts} |")
    print("\n(d) slices in o200k against the model's own count (sliced runs)")
    print("| blueprint | step | o200k | model | model ÷ o200k |")
    print("| --- | --- | ---: | ---: | ---: |")
    for bp in blueprints:
        steps = defaultdict(lambda: [0, 0])
        for r in runs.get((bp, "sliced"), []):
            for sid, st in r["steps"].items():
                steps[sid][0] += st["o200k"]
                steps[sid][1] += st["model"]
        for sid, (o, m) in sorted(steps.items()):
            if o:
                print(f"| {bp} | {sid} | {o:,} | {m:,} | {m / o:.2f} |")


if __name__ == "__main__":
    main()

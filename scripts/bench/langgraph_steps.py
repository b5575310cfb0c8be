#!/usr/bin/env python3
"""LangGraph's side of scripts/bench/blueprint-steps.sh, and the statistics of both.

  langgraph_steps.py serve --db FILE
      One warm LangGraph process: a StateGraph of 10 nodes s1 -> ... -> s10, each
      running `sh -c true` (subprocess.run, checked), compiled with a SqliteSaver
      checkpointer on FILE (langgraph-checkpoint-sqlite: WAL, sqlite3's default
      synchronous=FULL, so one fdatasync per commit). It reads one line per flow
      from stdin ("run sync" or "run async" runs a flow on a new thread_id with
      that durability, "quit" ends) and answers one JSON line per flow:
      {"starts": [10 times, s], "wall": graph.invoke's wall time, s, ...}.
      A node's start is taken in the node right before it spawns `sh -c true`
      (time.time(), the wall clock clawboard's log uses). Durability `sync`: each
      checkpoint is committed before the next node starts (what clawboard's
      records give); `async` (LangGraph's default): it is written while the next
      node runs. One warm-up flow of each mode runs first and is not reported.

  langgraph_steps.py stats --results DIR [DIR ...] [--json]
      Reads DIR/*.jsonl (one line per flow, {"system", "round", "starts", "wall"})
      and prints the markdown tables of blueprint-steps.sh. Several DIRs (each
      run's KEEP=X/results) are pooled: every flow of every run counts once. Systems named
      "clawboard" or "clawboard ..." are ours; the goal is checked for each of
      them against each of the others. With --json, one JSON object instead:
      per system its flows, intervals, p50, p99 and the process's p50 (ms).

Per step, for every system alike: the time from one step's process being
spawned to the next step's (9 intervals per 10-step flow). One interval holds a
whole step: running the process, recording its end durably, and preparing and
recording the next step up to its spawn; process start-up and the first step's
set-up are outside it. The whole flow's wall time / 10 is printed beside it.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

STEPS = 10


def linear_graph(node, db):
    """The benchmarks' flow: STEPS nodes s1 -> ... -> sN, each `node`, compiled
    with a SqliteSaver checkpointer on the file `db`; (graph, connection)."""
    import sqlite3
    from typing import TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    class State(TypedDict):
        done: int

    g = StateGraph(State)
    names = [f"s{i}" for i in range(1, STEPS + 1)]
    for n in names:
        g.add_node(n, node)
    g.add_edge(START, names[0])
    for a, b in zip(names, names[1:]):
        g.add_edge(a, b)
    g.add_edge(names[-1], END)
    conn = sqlite3.connect(db, check_same_thread=False)
    return g.compile(checkpointer=SqliteSaver(conn)), conn


def serve(db):
    starts, ends = [], []

    def node(state):
        starts.append(time.time())
        subprocess.run(["sh", "-c", "true"], check=True)
        ends.append(time.time())
        return {"done": state["done"] + 1}

    graph, conn = linear_graph(node, db)

    def flow(durability):
        starts.clear()
        ends.clear()
        cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
        t0 = time.perf_counter()
        out = graph.invoke({"done": 0}, cfg, durability=durability)
        wall = time.perf_counter() - t0
        if out["done"] != STEPS or len(starts) != STEPS or len(ends) != STEPS:
            raise SystemExit(f"langgraph_steps.py: a flow ran {len(ends)} nodes, not {STEPS}")
        # Every checkpoint of the flow is in the file (the flow's durable record).
        n = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (cfg["configurable"]["thread_id"],)).fetchone()[0]
        if n < STEPS:
            raise SystemExit(f"langgraph_steps.py: {n} checkpoints for a flow of {STEPS} steps")
        return {"starts": list(starts), "ends": list(ends), "wall": wall, "checkpoints": n}

    flow("sync")  # warm-up, not reported
    flow("async")
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd == ["quit"]:
            break
        if len(cmd) != 2 or cmd[0] != "run" or cmd[1] not in ("sync", "async", "exit"):
            raise SystemExit(f"langgraph_steps.py: unknown command {line.strip()!r}")
        print(json.dumps(flow(cmd[1])), flush=True)


def pct(xs, p):
    """The p-th percentile, nearest rank (no interpolation)."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def stats(results, as_json=False):
    flows = {}
    for f in sorted(f for d in results for f in Path(d).glob("*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                flows.setdefault(r["system"], []).append(r)
    if "clawboard" not in flows:
        raise SystemExit("langgraph_steps.py: no clawboard flows in " + " ".join(results))
    rows = {}
    for system, fs in flows.items():
        steps = [(b - a) * 1000 for r in fs for a, b in zip(r["starts"], r["starts"][1:])]
        walls = [r["wall"] * 1000 / STEPS for r in fs]
        rows[system] = {
            "flows": len(fs), "n": len(steps),
            "p50": pct(steps, 50), "p99": pct(steps, 99), "mean": statistics.fmean(steps), "max": max(steps),
            "wall_p50": pct(walls, 50), "wall_p99": pct(walls, 99),
        }
    if as_json:
        for system, fs in flows.items():
            proc = [(e - a) * 1000 for r in fs for a, e in zip(r["starts"], r["ends"])]
            rows[system]["process_p50"] = pct(proc, 50)
        print(json.dumps(rows, indent=1))
        return
    cb = rows["clawboard"]
    ours = ["clawboard"] + sorted(k for k in rows if k.startswith("clawboard "))
    print("Per step: the time from one step's process being spawned to the next step's, within a flow (ms).\n")
    print("| system | flows | intervals | p50 ms | p99 ms | mean ms | max ms | p50 vs clawboard | p99 vs clawboard |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    order = ours + sorted(k for k in rows if k not in ours)
    for s in order:
        r = rows[s]
        print(f"| {s} | {r['flows']} | {r['n']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['mean']:.2f} | {r['max']:.2f} "
              f"| {r['p50'] / cb['p50']:.2f}× | {r['p99'] / cb['p99']:.2f}× |")
    print("\nGoal: clawboard at least 2× faster per step, i.e. LangGraph's time ÷ clawboard's ≥ 2.")
    for c in ours:
        for s in order[len(ours):]:
            r, o = rows[s], rows[c]
            met = r["p50"] / o["p50"] >= 2 and r["p99"] / o["p99"] >= 2
            print(f"- {c} against {s}: p50 {r['p50'] / o['p50']:.2f}×, p99 {r['p99'] / o['p99']:.2f}×: "
                  f"{'met' if met else 'not met'}")
    print("\nWhere a step's time goes (p50 ms): the process (spawned to reaped, as the step sees it),"
          " and the rest (its end recorded, the next step prepared and recorded up to its spawn);"
          " for clawboard, the one sync of the log inside the rest.\n")
    print("| system | process p50 | rest p50 | of which the sync p50 |")
    print("| --- | ---: | ---: | ---: |")
    for s in order:
        fs = flows[s]
        proc = [(e - a) * 1000 for r in fs for a, e in zip(r["starts"], r["ends"])]
        rest = [(b - e) * 1000 for r in fs for e, b in zip(r["ends"], r["starts"][1:])]
        syncs = [x for r in fs for x in r.get("syncs_ms", [])[1:] if x is not None]
        sync = f"{pct(syncs, 50):.2f}" if syncs else "n/a"
        print(f"| {s} | {pct(proc, 50):.2f} | {pct(rest, 50):.2f} | {sync} |")
    print("\nPer step by its place in the flow (p50 ms of interval k: step k's spawn to step k+1's). Each"
          " clawboard flow is a fresh `clawboard run` process; the daemon's are tasks in one warm daemon;"
          " LangGraph's flows run in one warm process.\n")
    print("| system | " + " | ".join(str(k) for k in range(1, STEPS)) + " |")
    print("| --- |" + " ---: |" * (STEPS - 1))
    for s in order:
        fs = flows[s]
        at = [pct([(r["starts"][k + 1] - r["starts"][k]) * 1000 for r in fs if len(r["starts"]) > k + 1], 50)
              for k in range(STEPS - 1)]
        print(f"| {s} | " + " | ".join(f"{x:.2f}" for x in at) + " |")
    print("\nWhole flow's wall time / 10 (ms; clawboard: the `clawboard run` process, start-up included;"
          " clawboard daemon: the task's drop into the inbox to its \"completed\" log line;"
          " LangGraph: graph.invoke in a warm process).\n")
    print("| system | p50 ms | p99 ms | p50 vs clawboard |")
    print("| --- | ---: | ---: | ---: |")
    for s in order:
        r = rows[s]
        print(f"| {s} | {r['wall_p50']:.2f} | {r['wall_p99']:.2f} | {r['wall_p50'] / cb['wall_p50']:.2f}× |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--db", required=True)
    t = sub.add_parser("stats")
    t.add_argument("--results", required=True, nargs="+")
    t.add_argument("--json", action="store_true", help="the figures as JSON, not tables")
    a = ap.parse_args()
    if a.cmd == "serve":
        serve(a.db)
    else:
        stats(a.results, a.json)


if __name__ == "__main__":
    main()

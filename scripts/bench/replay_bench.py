#!/usr/bin/env python3
"""The pieces of scripts/bench/replay.sh that are easier in Python.

  replay_bench.py proxy --port P --to URL --count FILE
      A reverse proxy on 127.0.0.1:P in front of the model server at URL (its
      base, e.g. http://127.0.0.1:8080): every request is forwarded and counted;
      FILE holds the count so far (rewritten after each request).

  replay_bench.py langgraph --db FILE --sleep S --rounds N
      LangGraph's side: the step benchmark's 10-node linear StateGraph with a
      SqliteSaver checkpointer on FILE, each node sleeping S seconds where a model
      would answer. Each round runs one flow (durability "sync"), then replays it
      from its first checkpoint (graph.invoke(None, that checkpoint's config), as
      LangGraph's docs replay a thread) and prints one JSON line:
      {"run": s, "replay": s, "nodes_run": n, "nodes_replayed": n}.
"""
import argparse
import http.server
import json
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from langgraph_steps import STEPS, linear_graph


def proxy(port, to, count_file):
    count = {"n": 0}
    Path(count_file).write_text("0\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def forward(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length", "connection")}
            req = urllib.request.Request(to + self.path, data=body, headers=headers, method=self.command)
            try:
                with urllib.request.urlopen(req, timeout=600) as r:
                    status, data, rh = r.status, r.read(), r.headers
            except urllib.error.HTTPError as e:
                status, data, rh = e.code, e.read(), e.headers
            count["n"] += 1
            Path(count_file).write_text(f"{count['n']}\n")
            self.send_response(status)
            for k, v in rh.items():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = forward
        do_POST = forward

        def log_message(self, *args):
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


def langgraph(db, sleep, rounds):
    ran = {"n": 0}

    def node(state):
        ran["n"] += 1
        time.sleep(sleep)
        return {"done": state["done"] + 1}

    graph, _conn = linear_graph(node, db)
    for _ in range(rounds):
        cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
        ran["n"] = 0
        t0 = time.perf_counter()
        out = graph.invoke({"done": 0}, cfg, durability="sync")
        run = time.perf_counter() - t0
        nodes_run = ran["n"]
        if out["done"] != STEPS:
            raise SystemExit(f"replay_bench.py: the flow ran {out['done']} nodes")
        # The thread's first checkpoint whose next node is s1: replaying from it is the whole flow again.
        history = list(graph.get_state_history(cfg))
        first = next(s for s in reversed(history) if s.next == ("s1",))
        ran["n"] = 0
        t0 = time.perf_counter()
        again = graph.invoke(None, first.config, durability="sync")
        replay = time.perf_counter() - t0
        if again["done"] != STEPS:
            raise SystemExit(f"replay_bench.py: the replay ended at {again['done']}")
        print(json.dumps({"run": run, "replay": replay, "nodes_run": nodes_run, "nodes_replayed": ran["n"]}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--to", required=True)
    p.add_argument("--count", required=True)
    lg = sub.add_parser("langgraph")
    lg.add_argument("--db", required=True)
    lg.add_argument("--sleep", type=float, required=True)
    lg.add_argument("--rounds", type=int, required=True)
    a = ap.parse_args()
    if a.cmd == "proxy":
        proxy(a.port, a.to, a.count)
    else:
        langgraph(a.db, a.sleep, a.rounds)


if __name__ == "__main__":
    sys.exit(main())

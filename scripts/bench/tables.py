#!/usr/bin/env python3
"""The tables of docs/BENCHMARKS.md, made from the data in docs/benchmarks/*.jsonl.

    python3 scripts/bench/tables.py            # print every table
    python3 scripts/bench/tables.py NAME ...   # print these
    python3 scripts/bench/tables.py --check    # exit 1 if the page's tables differ from the data's
    python3 scripts/bench/tables.py --write    # rewrite the page's tables from the data

In the page each table sits between `<!-- tables:NAME begin -->` and
`<!-- tables:NAME end -->`. The data files are described in
docs/benchmarks/README.md. Python 3.11, standard library only.
"""
import difflib
import json
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "benchmarks"
PAGE = ROOT / "docs" / "BENCHMARKS.md"


# --- the data ---------------------------------------------------------------

def load():
    """{file stem: [record, ...]} for every docs/benchmarks/*.jsonl, in file order."""
    data = {}
    for path in sorted(DATA.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            data[path.stem] = [json.loads(line) for line in f if line.strip()]
    return data


def rows(data, benchmark, run, table=None):
    """The measured rows of one run's table (every table of the run without `table`)."""
    out = [r for recs in data.values() for r in recs
           if r.get("benchmark") == benchmark and r.get("run") == run and r.get("kind") == "row"
           and (table is None or r.get("table") == table)]
    if not out:
        raise SystemExit(f"tables.py: no rows for {benchmark} / {run} / {table}")
    return out


def one(rs, case):
    for r in rs:
        if r["case"] == case:
            return r
    raise SystemExit(f"tables.py: no row {case!r}")


# --- formatting -------------------------------------------------------------

def num(v, d=None):
    """A number as the page prints it: thousands separated, `d` decimals for floats."""
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if isinstance(v, int) and d is None:
        return f"{v:,}"
    return f"{v:,.{d if d is not None else 2}f}"


def x(v, d=None):
    """A ratio: two decimals under 10, one under 100, none above (unless `d` says)."""
    if v is None:
        return "–"
    if d is None:
        d = 2 if v < 10 else 1 if v < 100 else 0
    return f"{num(v, d)}×"


def g(v):
    """A measured value as it was recorded: no decimals added or cut."""
    return "–" if v is None else v if isinstance(v, str) else f"{v:,}" if isinstance(v, int) else f"{v:g}"



def pct(v, d=1):
    return "–" if v is None else f"{v:.{d}f} %"


def pair(a, b, d=2):
    return f"{num(a, d)} / {num(b, d)}"


def met(ok):
    return "met" if ok else "**missed**"


NUMERIC = re.compile(r"^(\*\*)?[-–\d.,]")


def md(header, body):
    """A markdown table; a column whose every cell starts with a figure is right-aligned."""
    right = [i > 0 and all(NUMERIC.match(str(row[i])) for row in body if str(row[i]))
             for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---:" if r else "---" for r in right) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def code(c):
    return f"`{c}`" if c else "–"


# --- the tables -------------------------------------------------------------

TABLES = {}


def table(name):
    def put(fn):
        TABLES[name] = fn
        return fn
    return put


@table("intake-builds")
def _(D):
    rs = rows(D, "intake", "2026-11-28 before and after 1729595")
    body = []
    for r in rs:
        f = r["figures"]
        build = (f"after (`{r['commit']}`)" if f["build"] == "after"
                 else f"before (`{r['baseline_commit']}` + backoff changes)")
        body.append([r["case"], build, f["single_drops"], num(f["single_drops_p50_ms"]),
                     num(f["single_drops_p99_ms"]), met(f["single_drops_p99_ms"] <= 25),
                     num(f["burst_of_2_000_claimed_s"]) + " s", f["lost"], num(f["peak_rss_mib"], 1) + " MiB"])
    return md(["run", "build", "drops", "p50 ms", "p99 ms", "goal p99 ≤ 25 ms", "burst of 2,000 claimed",
               "lost", "peak RSS"], body)


@table("intake-baselines")
def _(D):
    body = []
    new = rows(D, "intake", "2026-11-27 06:0x", "floor")
    c = one(new, "clawboard")["figures"]
    for r in new:
        f = r["figures"]
        body.append([f"{r['date']}, `{r['commit']}`", r["case"], num(f["drops"]), num(f["p50_ms"]),
                     num(f["p99_ms"]), x(f["p99_ms"] / c["p99_ms"]), met(f["p99_ms"] <= 25) if r is new[0] else ""])
    old = [r for r in rows(D, "intake", "2026-11-22, runs 1 and 2", "t1") if r["case"].endswith("run 1")]
    for r in old:
        f = r["figures"]
        body.append([f"{r['date']}, `{r['commit']}`", r["case"].removesuffix(", run 1"), num(f["drops"]),
                     num(f["p50_ms"]), num(f["p99_ms"]), x(f["p99_vs_clawboard"]),
                     met(f["p99_ms"] <= 25) if r is old[0] else ""])
    return md(["run", "tool", "drops", "p50 ms", "p99 ms", "p99 ÷ clawboard's", "goal p99 ≤ 25 ms"], body)


@table("sync-runs")
def _(D):
    body = []
    for e in D["engine-config-sync"]:
        f = e["figures"]
        a = f["a.ratio_rclone_over_clawboard"]
        b = min(f["b.checksum.ratio"], f["b.update_server_modtime.ratio"])
        body.append([f"{e['run']} ({e['start_utc'][:5]})", f"{e['side']} (`{e['build']}`)",
                     pair(f["a.best.clawboard_s"], f["a.best.rclone_s"]), x(a), met(a >= 1),
                     f"{x(f['b.checksum.ratio'], 1)} / {x(f['b.update_server_modtime.ratio'], 1)}", met(b >= 20),
                     f"{x(f['c.checksum.ratio'], 1)} / {x(f['c.update_server_modtime.ratio'], 1)}",
                     f"{g(f['d.moto.clawboard_nochange_s'])} / {g(f['d.moto.rclone_nochange_s'])}"])
    return md(["run (UTC)", "build", "initial push, 20,000 files: clawboard / rclone s", "rclone ÷ clawboard",
               "goal ≥ 1×", "100 changed, s3s-fs: `--checksum` / `--update`", "goal ≥ 20×",
               "100 changed, moto (2,000 files)", "unchanged tree, moto: clawboard / rclone s"], body)


@table("multinode-converge")
def _(D):
    rs = rows(D, "multinode", "run 5", "t1")
    body = []
    for r in rs:
        f = r["figures"]
        req = (f"{num(f['requests_clawboard'])} / {num(f['requests_rclone'])}" if "requests_clawboard" in f else "–")
        body.append([r["case"], f["round"], num(f["clawboard_s"]), num(f["rclone_zero_cron_wait_s"]),
                     x(f["rclone_per_clawboard"]), req])
    return md(["backend", "round", "clawboard s", "rclone, no cron wait, s", "rclone ÷ clawboard",
               "requests clawboard / rclone"], body)


@table("takeover")
def _(D):
    body = []
    moto = "moto (heartbeat 2 s, lease 8 s)"
    groups = [("s3s-fs", "S3s", False, "F: as E"), ("s3s-fs", "S3s", True, "F: as E"), (moto, "Moto", False, "F: as E"),
              ("s3s-fs, in `scripts/test`", "S3s", False, "H:"), (moto + ", in `scripts/test`", "Moto", False, "H:")]
    for label, backend, each, stage in groups:
        rs = [t for t in D["takeover"] if t.get("stage", "").startswith(stage)
              and t["backend"] == backend and bool(t.get("push_each_step")) == each and t["result"] == "pass"]
        tk = sum(t["takeovers"] for t in rs)
        re_run = sum(t["steps_rerun_by_taker"] for t in rs)
        ms = [t["task_ms_mean"] / 1000 for t in rs]
        same = [t["identical_after_ms"] / 1000 for t in rs]
        copies = sum(t["conflict_copies"] for t in rs)
        body.append([label, "on" if each else "off", len(rs), tk, re_run, num(re_run / tk, 2),
                     f"{min(ms):.1f}–{max(ms):.1f} s", f"{min(same):.1f}–{max(same):.1f} s", copies])
    return md(["bucket", "`sync.push_each_step`", "runs passed", "takeovers", "steps re-run by the taker",
               "per takeover", "a task's time (mean per run)", "trees identical after the last completion",
               "conflict copies"], body)


@table("archive-latest")
def _(D):
    rs = rows(D, "archive", "2026-11-28 before and after the secret source", "t1")
    body = []
    for r in rs:
        f = r["figures"]
        first = r["case"].startswith("first")
        goal = (met(f["after_git_cli_ms"] >= f["after_ms"]) + " (no slower than git)" if first
                else met(f["after_ms"] < 300) + " (< 300 ms)")
        git = lambda s: (f"{num(f[s + '_git_cli_ms'])}, {x(f[s + '_git_cli_ms'] / f[s + '_ms'])}"
                         if s + "_git_cli_ms" in f else "–")
        body.append([r["case"], num(f["before_ms"]), git("before"), num(f["after_ms"]), git("after"), goal])
    return md(["case (the archive step)", "before (`2cb6170`) ms", "git CLI ms, git ÷ clawboard",
               "after (`4e7ce9a`) ms", "git CLI ms, git ÷ clawboard", "goal (after)"], body)


@table("tokenizer-slices")
def _(D):
    new = rows(D, "tokenizer", "2026-11-26 04:08", "slices")
    old = rows(D, "tokenizer", "2026-11-24", "t2")
    body = []
    for r in (r for r in old if r["case"] == "100 KB"):
        f = r["figures"]
        n = next(m["figures"]["p99_us"] for m in new if m["case"] == r["case"] and m["figures"]["scope"] == f["scope"])
        body.append([f["scope"], num(f["budget"]), f["rungs"], num(f["p99_us"]), num(n), met(n < 1000)])
    return md(["scope (a 100 KB board)", "budget", "rungs", "p99 µs, 2026-11-24", "p99 µs, 2026-11-26 04:08",
               "goal < 1 ms"], body)


@table("context-totals")
def _(D):
    alls = [r for r in D["context-economy"] if r.get("kind") == "row" and r["case"] == "all"]
    alls.sort(key=lambda r: (r["date"], r["time"] or ""), reverse=True)
    body = []
    for r in alls:
        f = r["figures"]
        body.append([f"{r['date']} {r['time'] or ''}".strip(), code(r["commit"]), r["build"], f["runs_completed"],
                     num(f["slice_tokens"]), num(f["full_context_tokens"]), pct(f["slices_over_full_pct"]),
                     pct(f["max_of_one_run_pct"]), met(f["max_of_one_run_pct"] <= 20)])
    return md(["run", "commit", "build", "runs (completed)", "slice tokens", "full-context tokens", "slices ÷ full",
               "worst run", "goal ≤ 20 % per run"], body)


def _steps(f, two=("run_ratio", "daemon_ratio")):
    miss = [f"{w} {p}" for k, w in zip(two, ("`clawboard run`", "daemon")) for p in ("p50", "p99")
            if f.get(f"{k}_{p}") is not None and f[f"{k}_{p}"] < 2]
    return "met" if not miss else "**missed**: " + ", ".join(miss)


@table("steps")
def _(D):
    body = []
    for r in rows(D, "step-overhead", "2026-11-28 before and after 1729595", "t1"):
        f = r["figures"]
        build = (f"2026-11-28, after (`{r['commit']}`)" if r["case"] == "after"
                 else f"2026-11-28, before (`{r['baseline_commit']}` + backoff changes)")
        body.append([build] + _step_cells(f))
    for r in rows(D, "step-overhead", "runs 125-130", "t1"):
        if "pooled" in r["case"] or r["case"].startswith("all"):
            runs = r["case"].removesuffix(" pooled").replace("all twelve, ", "").replace(" (32,400 intervals each)", "")
            body.append([f"{r['date']}, runs {runs} pooled"]
                        + _step_cells(r["figures"]))
    return md(["run", "`clawboard run` p50 / p99 ms", "daemon p50 / p99 ms", "LangGraph sync p50 / p99 ms",
               "`clawboard run`: LangGraph ÷", "daemon: LangGraph ÷", "goal 2×"], body)


def _step_cells(f):
    ms = lambda k: pair(f[k + "_p50_ms"], f[k + "_p99_ms"]) if k + "_p50_ms" in f else "–"
    return [ms("clawboard_run"), ms("daemon"), ms("langgraph_sync"),
            f"{x(f['run_ratio_p50'])} / {x(f['run_ratio_p99'])}",
            f"{x(f['daemon_ratio_p50'])} / {x(f['daemon_ratio_p99'])}", _steps(f)]


def _busy_goal(f):
    """Issue 41's rule: LangGraph sync ÷ clawboard ≥ 2 at p50 and ≥ 1.5 at p99, both ours."""
    miss = [f"{w} {p}" for k, w in (("run_ratio", "`clawboard run`"), ("daemon_ratio", "daemon"))
            for p, least in (("p50", 2), ("p99", 1.5)) if f[f"{k}_{p}"] < least]
    return "met" if not miss else "**missed**: " + ", ".join(miss)


@table("steps-busy")
def _(D):
    body = []
    runs = (("2026-11-29 rule: 3 x 300 flows, quiet and busy, b4db428", "300 flows, `b4db428`: "),
            ("2026-11-29 claim from the lease, A/B", ""),
            ("2026-11-29 rule: 3 x 300 flows, quiet and busy, c5a5495", "300 flows, `c5a5495`: "),
            ("2026-11-29 rule: 3 x 300 flows, quiet and busy", "300 flows, `da3b7c8`: "),
            ("2026-11-29 placement only when busy, A/B", ""),
            ("2026-11-29 quiet and busy", "100 flows, `da3b7c8`: "),
            ("2026-11-29 placement A/B", ""))
    for run, label in runs:
        for r in rows(D, "step-overhead", run, "busy"):
            f = r["figures"]
            pooled = "pooled" in r["case"]
            name = f"**{label}{r['case']}**" if pooled else label + r["case"]
            body.append([name, f["intervals"], pair(f["clawboard_run_p50_ms"], f["clawboard_run_p99_ms"]),
                         pair(f["daemon_p50_ms"], f["daemon_p99_ms"]),
                         pair(f["langgraph_sync_p50_ms"], f["langgraph_sync_p99_ms"]),
                         f"{x(f['run_ratio_p50'])} / {x(f['run_ratio_p99'])}",
                         f"{x(f['daemon_ratio_p50'])} / {x(f['daemon_ratio_p99'])}",
                         _busy_goal(f) if pooled else ""])
    return md(["run", "intervals", "`clawboard run` p50 / p99 ms", "daemon p50 / p99 ms",
               "LangGraph sync p50 / p99 ms", "`clawboard run`: LangGraph ÷", "daemon: LangGraph ÷",
               "goal 2× p50, 1.5× p99"], body)


@table("intake-burst")
def _(D):
    body = []
    for run in ("2026-11-29 burst, three runs, 23b64c0", "2026-11-29 burst, three runs"):
        official = rows(D, "intake", run, "burst")
        body += [_burst_row(r) for r in official]
        median = statistics.median(r["figures"]["burst_of_2_000_claimed_s"] for r in official)
        body.append([f"**median of runs 1–{len(official)}**", "", "", "", num(median) + " s",
                     num(round(2000 / median)) + f" ({met(2000 / median >= 1000)})", "", ""])
    body += [_burst_row(r) for r in rows(D, "intake", "2026-11-29 batched intake A/B", "burst")]
    return md(["run", "single drops", "p50 / p99 ms", "inotifywait p50 / p99 ms", "burst of 2,000 claimed",
               "tasks/s (goal ≥ 1,000)", "lost", "peak RSS"], body)


def _burst_row(r):
    f = r["figures"]
    ino = pair(f["inotifywait_p50_ms"], f["inotifywait_p99_ms"]) if "inotifywait_p50_ms" in f else "–"
    return [r["case"], f["single_drops"], pair(f["single_drops_p50_ms"], f["single_drops_p99_ms"]), ino,
            num(f["burst_of_2_000_claimed_s"]) + " s", num(f["claimed_per_s"]), f["lost"],
            num(f["peak_rss_mib"], 1) + " MiB"]


@table("restart")
def _(D):
    rs = rows(D, "restart", "replay", "t1")
    return md(["replay", "records in the log", "API up after crash 1, 2, 3"],
              [[r["case"], r["figures"]["records_in_the_log"], r["figures"]["api_up_after_crash_1_2_3"]] for r in rs])


@table("sandbox")
def _(D):
    rs = rows(D, "sandbox", "run 1", "t1")
    body = [[r["case"], r["figures"]["entries_granted_beside_the_way_down"],
             pair(r["figures"]["direct_p50_ms"], r["figures"]["direct_p99_ms"]),
             pair(r["figures"]["sandboxed_p50_ms"], r["figures"]["sandboxed_p99_ms"]),
             pair(r["figures"]["added_p50_ms"], r["figures"]["added_p99_ms"])] for r in rs]
    return md(["root under", "entries granted beside the way down", "direct p50 / p99 ms",
               "sandboxed p50 / p99 ms", "added p50 / p99 ms"], body)


@table("release-binary")
def _(D):
    rs = rows(D, "release-binary", "2026-11-28", "t1")
    body = []
    for r in rs:
        f = r["figures"]
        ver = (pair(f["version_p50_ms"], f["version_p90_ms"]) + " ms" if "version_p50_ms" in f
               else f["version_p50_per_p90"])
        sb = (pair(f["sandboxed_sh_c_true_p50_ms"], f["sandboxed_sh_c_true_p90_ms"]) + " ms"
              if "sandboxed_sh_c_true_p50_ms" in f else (f.get("sandboxed_sh_c_true_p50_per_p90") or ""))
        body.append([r["case"], num(f["size_mb"], 1) + " MB", ver, sb])
    return md(["binary", "size", "`--version` p50 / p90", "sandboxed `sh -c true` p50 / p90"], body)


BLUEPRINTS = ("xiaohongshu_viral", "wechat_longform", "twitter_thread", "deep_analysis")


@table("llm")
def _(D):
    runs = D["llm-blueprints"]
    att = lambda r: sum(st["attempts"] for st in r["steps"].values())
    body = []
    tot = [0, 0]
    for bp in BLUEPRINTS:
        by = {}
        for r in runs:
            if r["blueprint"] == bp and r["mode"] in ("sliced", "full"):
                by.setdefault(r["input"], {})[r["mode"]] = r
        pairs = [v for v in by.values() if len(v) == 2]
        s = sum(p["sliced"]["prompt_tokens"] for p in pairs)
        f = sum(p["full"]["prompt_tokens"] for p in pairs)
        tot[0] += s
        tot[1] += f
        worst = max(p["sliced"]["prompt_tokens"] / p["full"]["prompt_tokens"] for p in pairs)
        per = (s / sum(att(p["sliced"]) for p in pairs)) / (f / sum(att(p["full"]) for p in pairs))
        sliced = [r for r in runs if r["blueprint"] == bp and r["mode"] == "sliced"]
        # (c) from runs made one at a time, by build (rows without one: the debug build);
        # the goal is judged on the release build, the one users run, once it has runs.
        alone = [r for r in sliced if r.get("jobs", 1) == 1]
        own = {}
        for build in ("debug", "release"):
            rs = [r for r in alone if r.get("build", "debug") == build]
            if rs:
                own[build] = 100 * sum(r["wall_s"] - r["in_flight_s"] for r in rs) / sum(r["wall_s"] for r in rs)
        judged = own.get("release", own.get("debug"))
        # The same run's slices against the boards they were cut from, in o200k (runs that record it).
        board = [r for r in sliced if r.get("board_o200k")]
        same = (f"{pct(100 * sum(r['slice_o200k'] for r in board) / sum(r['board_o200k'] for r in board))} ({len(board)})"
                if board else "–")
        body.append([bp, len(pairs), f"{num(s)} / {num(f)}", pct(100 * s / f), pct(100 * worst), pct(100 * per),
                     met(s / f <= 0.2), same, f"{num(statistics.mean(r['wall_s'] for r in alone), 1)} s" if alone else "–",
                     pct(own.get("debug"), 2), pct(own.get("release"), 2), met(judged <= 1)])
    body.append(["**all**", sum(b[1] for b in body), f"{num(tot[0])} / {num(tot[1])}", pct(100 * tot[0] / tot[1]),
                  "", "", met(tot[0] / tot[1] <= 0.2), "", "", "", "", ""])
    return md(["blueprint", "inputs", "prompt tokens, sliced / full", "sliced ÷ full", "worst input",
               "per model request", "goal ≤ 20 %", "same run: slices ÷ their boards, o200k (runs)",
               "sliced run, mean wall (one at a time)", "clawboard's own ÷ wall, debug build",
               "release build", "goal ≤ 1 %"], body)


def _scale_ms(cli, name):
    c = (cli or {}).get(name)
    return num(c["ms"], 0) if c else "–"


@table("scale")
def _(D):
    """Every run of scripts/bench/scale (docs/benchmarks/scale.jsonl), by size then run."""
    recs = sorted(D.get("scale", []), key=lambda r: (r["tasks"], r["date"], r["binary"] != "baseline"))
    body = []
    for r in recs:
        build = f"`{r['build']}`" + (" (baseline)" if r["binary"] == "baseline" else "")
        cd = r.get("cli_daemon")
        body.append([
            num(r["tasks"]), num(r["task_files"]), r["date"], build,
            num(r["start_ready_s"], 2), pct(r["idle_cpu_pct"], 2), r["idle_rescans"], num(r["idle_rss_mb"], 0),
            f"{num(r.get('drop_p50_ms'), 1)} / {num(r.get('drop_p99_ms'), 1)}", num(r["stop_s"], 2),
            " / ".join(_scale_ms(cd, n) for n in ("status", "task_list", "retention_plan")) if cd else "–",
            " / ".join(_scale_ms(r["cli"], n) for n in ("status", "task_list", "retention_plan")),
            num(r["state_mb"], 1),
        ])
    return md(["tasks", "files", "run", "build", "start → ready s", "idle CPU", "rescans idle", "RSS idle MB",
               "drop p50 / p99 ms", "SIGTERM → exit s", "status / list / retention ms, daemon running",
               "same, no daemon", "`.clawboard/` MB"], body)


# --- the page ---------------------------------------------------------------

MARK = re.compile(r"<!-- tables:([\w-]+) begin -->\n(.*?)<!-- tables:\1 end -->", re.S)


def render(names=None):
    data = load()
    return {n: TABLES[n](data) for n in (names or TABLES)}


def main(argv):
    if argv and argv[0] in ("--check", "--write"):
        page = PAGE.read_text(encoding="utf-8")
        made = render()
        found = set()
        bad = []

        def swap(m):
            name = m.group(1)
            found.add(name)
            if name not in made:
                bad.append(f"{name}: no such table in scripts/bench/tables.py")
                return m.group(0)
            want = made[name] + "\n"
            if m.group(2) != want:
                bad.append(name + ":\n" + "".join(difflib.unified_diff(
                    m.group(2).splitlines(True), want.splitlines(True), "page", "data")))
            return f"<!-- tables:{name} begin -->\n{want}<!-- tables:{name} end -->"

        new = MARK.sub(swap, page)
        missing = sorted(set(made) - found)
        if argv[0] == "--write":
            PAGE.write_text(new, encoding="utf-8")
            print(f"{PAGE.relative_to(ROOT)}: {len(found)} tables written"
                  + (f"; not in the page: {', '.join(missing)}" if missing else ""))
            return 1 if missing else 0
        for b in bad:
            print(b)
        if missing:
            print("not in the page:", ", ".join(missing))
        if bad or missing:
            print(f"{PAGE.relative_to(ROOT)}: tables differ from docs/benchmarks/ "
                  "(python3 scripts/bench/tables.py --write)")
            return 1
        print(f"{PAGE.relative_to(ROOT)}: {len(found)} tables match docs/benchmarks/")
        return 0
    unknown = [a for a in argv if a not in TABLES]
    if unknown:
        print("unknown table(s):", ", ".join(unknown), "; known:", ", ".join(TABLES), file=sys.stderr)
        return 2
    for name, text in render(argv).items():
        print(f"<!-- tables:{name} begin -->\n{text}\n<!-- tables:{name} end -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

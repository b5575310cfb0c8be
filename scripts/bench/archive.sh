#!/usr/bin/env bash
# Memory-archive benchmark (issue 6): clawboard's archive step (extract + commit +
# push) against the git CLI (`git add -A && git commit && git push`) on the same
# memory files, same machine, same git smart-HTTP server (scripts/git-server), one
# run. Results go in docs/benchmarks/.
#
# Each round clawboard runs two commands, each timed on its own:
#   1. `clawboard harvest --json`: the harvest (today's and yesterday's daily harvests
#      and their weeks), work the git CLI does not do;
#   2. `clawboard archive now --no-harvest --json`: the archive step alone, which is
#      what is compared with the git CLI and what the goals are checked on.
# (1)+(2) is what `archive now` (harvest, then archive) costs; it is reported too.
#
#   scripts/bench/archive.sh                      # 2,500 tasks = 10,000 memory files
#   TASKS=500 ROUNDS=3 scripts/bench/archive.sh   # quicker
#   FULL_ROUNDS=3 scripts/bench/archive.sh        # the first archive 3 times (fresh tree and repos each)
#   KEEP=1 scripts/bench/archive.sh               # keep the work directory (its path is printed)
#   HARVESTED_AT=now scripts/bench/archive.sh     # every task harvested today (see below)
#   CLAWBOARD_BIN=/tmp/clawboard-old scripts/bench/archive.sh   # measure that binary
#
# The cases: the first archive of every task's memory (4 roles a task, so 4 files a
# task under memory/roles/), then ROUNDS rounds in which 100 tasks each get one
# role's cells rewritten (100 memory files change). The git CLI side starts from
# the files exactly as clawboard extracted them (a clone of clawboard's branch) and
# commits, each round, the same files clawboard's commit changed (the role files,
# and the harvest files step 1 wrote, which are sources of the archive too); both
# sides' trees are checked to be identical.
#
# The tasks' harvestedAt is by default spread evenly over the 30 days before the
# run (what a tree under the seed's 30-day retention holds), so that the harvest
# step (today and yesterday) rebuilds two days' harvests of about 85 tasks each.
# HARVESTED_AT=now puts every task on today: harvest/daily/{today}.json then holds
# all their cells (about 6 MB at 2,500 tasks) and is rebuilt and archived on every
# run; HARVESTED_AT=2026-11-01T10:00:00Z (any day before yesterday) leaves the
# harvest step with nothing to write.
#
# Needs: a release build (cargo build --release -p clawboard), lighttpd and git
# (scripts/git-server install), GNU time for peak RSS (apt-get install time).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x "${CLAWBOARD_BIN:-target/release/clawboard}" ] || { echo "needs a release build: cargo build --release -p clawboard" >&2; exit 1; }
scripts/git-server install
if [ ! -x /usr/bin/time ] && [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q time >/dev/null || true
fi
[ -x /usr/bin/time ] || echo "no /usr/bin/time (apt-get install time): peak RSS not measured" >&2
exec python3 - "$@" <<'PY'
import json, os, platform, random, re, shutil, statistics, subprocess, sys, tempfile, time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path.cwd()
BIN = Path(os.environ.get("CLAWBOARD_BIN") or REPO / "target/release/clawboard")
TASKS = int(os.environ.get("TASKS", "2500"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
FULL_ROUNDS = int(os.environ.get("FULL_ROUNDS", "1"))
KEEP = os.environ.get("KEEP") == "1"
CHANGES = 100
ROLES = ["analyst-code", "worker-backend", "reviewer-security", "pm-coding"]
KINDS = ["success", "failure", "insight", "pattern"]
TYPES = ["coding", "writing", "research", "quant"]
WORDS = ("the a retry backoff schema parser migration endpoint token index query latency deadline "
         "reviewer flaky test lock timeout commit branch merge conflict rollback benchmark regression "
         "allocation batch stream checksum manifest quota cache config fixture contract caller "
         "handler budget estimate split smaller first before after when always never check "
         "pin version upstream docs example edge case input output error message log").split()
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
STARTED = datetime.now(timezone.utc)
HARVESTED_AT = os.environ.get("HARVESTED_AT", "spread")
if HARVESTED_AT == "now":
    HARVESTED_AT = STARTED.strftime("%Y-%m-%dT%H:%M:%SZ")

def harvested_at(i):
    """Task i's harvestedAt: HARVESTED_AT, or spread over the 30 days before STARTED."""
    if HARVESTED_AT != "spread":
        return HARVESTED_AT
    from datetime import timedelta
    t = STARTED - timedelta(seconds=30 * 86400 * (i - 1) / max(TASKS, 1))
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")
assert TASKS >= CHANGES, f"TASKS must be at least {CHANGES}"

work = Path(tempfile.mkdtemp(prefix="clawboard-bench-archive-"))
server_dir = work / "git-server"
# The git CLI side runs without the user's or the system's git config.
(work / "gitconfig").write_text("")
GIT_ENV = dict(os.environ, GIT_CONFIG_GLOBAL=str(work / "gitconfig"), GIT_CONFIG_NOSYSTEM="1",
               GIT_TERMINAL_PROMPT="0")

def run(argv, **kw):
    """Runs argv; on failure prints the command and its output, and stops the benchmark."""
    r = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAILED (exit {r.returncode}): {' '.join(map(str, argv))}\n"
                 f"--- stdout\n{r.stdout}--- stderr\n{r.stderr}")
    return r.stdout

def git(*args, cwd=None):
    return run(["git", *args], cwd=cwd, env=GIT_ENV)

def timed(argv, cwd=None, env=None):
    """Runs argv (under /usr/bin/time when there is one); returns (stdout, wall ms, peak RSS MiB or None)."""
    argv = [str(a) for a in argv]
    rss_file = work / "time.out"
    prefix = [TIME, "-f", "%M", "-o", str(rss_file)] if TIME else []
    t0 = time.perf_counter()
    r = subprocess.run(prefix + argv, cwd=cwd, env=env, capture_output=True, text=True)
    ms = (time.perf_counter() - t0) * 1000
    if r.returncode != 0:
        sys.exit(f"FAILED (exit {r.returncode}): {' '.join(argv)}\n--- stdout\n{r.stdout}--- stderr\n{r.stderr}")
    rss = int(rss_file.read_text().split()[-1]) / 1024 if TIME else None
    return r.stdout, ms, rss

# ---- the data ----

def sentence(rnd, size):
    words = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rnd.choice(WORDS))
    return " ".join(words).capitalize() + "."

def experience(rnd, role):
    """One role's cells of a task: 1 to 3 cells, 200 to 400 bytes of content in all."""
    n = rnd.randint(1, 3)
    size = rnd.randint(200, 400) // n
    cells = [{"type": rnd.choice(KINDS), "content": sentence(rnd, size), "value": round(rnd.uniform(0.1, 0.95), 2)}
             for _ in range(n)]
    return {"roleId": role, "cells": cells}

def task_id(i):
    return f"t-{i:05d}"

def write_harvest(root, tid, experiences):
    doc = {"taskId": tid, "harvestedAt": harvested_at(int(tid[2:])), "experiences": experiences,
           "crossPollinationCandidates": []}
    (root / "tasks" / tid / "memory-harvest.json").write_text(json.dumps(doc, indent=2) + "\n")

def make_tree(root):
    """A blackboard with TASKS finished tasks, each with a memory harvest of 4 roles. Returns the experiences by task."""
    run([BIN, "init", "--root", root])
    rnd = random.Random(6)
    harvests = {}
    for i in range(1, TASKS + 1):
        tid = task_id(i)
        d = root / "tasks" / tid
        d.mkdir(parents=True, exist_ok=True)
        (d / "task.json").write_text(json.dumps({
            "taskId": tid, "type": TYPES[i % len(TYPES)], "description": sentence(rnd, 150),
            "createdAt": harvested_at(i), "createdBy": "human", "priority": "normal", "status": "completed"}))
        harvests[tid] = [experience(rnd, role) for role in ROLES]
        write_harvest(root, tid, harvests[tid])
    return harvests

def change(root, harvests, round_):
    """Round `round_`'s 100 tasks (a different 100 each round) each get one role's cells rewritten."""
    rnd = random.Random(1000 + round_)
    step = TASKS // CHANGES
    for k in range(CHANGES):
        tid = task_id(1 + (round_ + k * step) % TASKS)
        role = (k + round_) % len(ROLES)
        harvests[tid][role] = experience(rnd, ROLES[role])
        write_harvest(root, tid, harvests[tid])

# ---- the two sides ----

def bare_repo(name):
    run(["git", "init", "-q", "--bare", "--initial-branch=main", Path(ENV["ROOT"]) / f"{name}.git"])
    return f"{ENV['URL']}/{name}.git"

def authed(url):
    return url.replace("://", f"://{ENV['USER']}:{ENV['TOKEN']}@", 1)

def config(name, remote):
    cfg = work / f"{name}.toml"
    cfg.write_text(f'[node]\nid = "bench"\n[archive]\nremote = "{remote}"\nusername = "{ENV["USER"]}"\n'
                   f'[sync]\nenabled = false\n')
    return cfg

def clawboard_harvest(root, cfg):
    """Step 1: `harvest --json`, timed (exit 0, no problems); returns (report, wall ms, peak RSS MiB)."""
    env = dict(os.environ, CLAWBOARD_GIT_TOKEN=ENV["TOKEN"])
    out, ms, rss = timed([BIN, "--root", root, "--config", cfg, "harvest", "--json"], env=env)
    report = json.loads(out)
    if report.get("problems"):
        sys.exit(f"FAILED: clawboard harvest reported problems:\n{out}")
    return report, ms, rss

def clawboard_archive(root, cfg):
    """Step 2: `archive now --no-harvest --json`, timed; returns (report, wall ms, peak RSS MiB)."""
    env = dict(os.environ, CLAWBOARD_GIT_TOKEN=ENV["TOKEN"])
    out, ms, rss = timed([BIN, "--root", root, "--config", cfg, "archive", "now", "--no-harvest", "--json"], env=env)
    report = json.loads(out)
    a = report.get("archive")
    if report.get("error") or not a or not a["commit"]["commit"] or not (a.get("push") or {}).get("pushed"):
        sys.exit(f"FAILED: clawboard archive now --no-harvest did not commit and push:\n{out}")
    h = report.get("harvest") or {}
    if h.get("written") or h.get("unchanged") or h.get("queueCompleted") or h.get("problems"):
        sys.exit(f"FAILED: clawboard archive now --no-harvest harvested:\n{out}")
    return report, ms, rss

def clawboard_round(root, cfg):
    """One clawboard round: step 1 then step 2. Returns a row: the split of the two reports, each step's
    wall ms (hv_ms, cb_ms) and peak RSS (hv_rss, cb_rss)."""
    hv, hv_ms, hv_rss = clawboard_harvest(root, cfg)
    report, cb_ms, cb_rss = clawboard_archive(root, cfg)
    return dict(hv_ms=hv_ms, hv_rss=hv_rss, cb_ms=cb_ms, cb_rss=cb_rss, **split(hv, report))

def git_commit_push(gitwork, message):
    """The git CLI's archive run, one timed command; returns (wall ms, peak RSS MiB)."""
    _, ms, rss = timed(["sh", "-c", f"git add -A && git commit -q -m '{message}' && git push -q origin memory"],
                       cwd=gitwork, env=GIT_ENV)
    return ms, rss

def tree(dir_):
    return git("rev-parse", "HEAD^{tree}", cwd=dir_).strip()

def split(harvest, report):
    """The harvest step's report and the archive step's, in figures."""
    a = report["archive"]
    return {"commit": a["commit"]["elapsedMs"], "push": a["push"]["elapsedMs"], "changed": a["commit"]["changed"],
            "read": a["commit"]["read"], "sources": a["commit"]["sources"],
            "harvestWritten": len(harvest["written"])}

def med(xs):
    return statistics.median(xs)

def fmt_ms(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"

ENV = {}
try:
    out = run(["scripts/git-server", "start", server_dir])
    ENV = dict(re.findall(r"^export CLAWBOARD_TEST_GIT_(\w+)=(.*)$", out, re.M))

    # ---- (a) the first archive: fresh tree, fresh repositories ----
    first = []   # per round: clawboard's two steps (ms, rss), split; git ms, rss
    for r in range(FULL_ROUNDS):
        if r > 0:
            for d in [root, cbclone, gitwork]:
                shutil.rmtree(d)
        root, cbclone, gitwork = work / f"tree-{r}", work / f"cb-clone-{r}", work / f"git-work-{r}"
        harvests = make_tree(root)
        cb_url = bare_repo(f"cb-{r}")
        cfg = config(f"cb-{r}", cb_url)
        s = clawboard_round(root, cfg)
        print(f"first round {r}: clawboard harvest {s['hv_ms']:.0f} ms ({s['harvestWritten']} files written); "
              f"archive now --no-harvest {s['cb_ms']:.0f} ms (commit {s['commit']} ms, push {s['push']} ms, "
              f"{s['changed']} files changed, {s['read']} of {s['sources']} sources read)", flush=True)
        # The git CLI side: the same files, in a new repository.
        git("clone", "-q", "-b", "memory", authed(cb_url), cbclone)
        shutil.copytree(cbclone, gitwork, ignore=lambda d, names: [".git"] if Path(d) == cbclone else [])
        git("init", "-q", "-b", "memory", cwd=gitwork)
        git("config", "user.name", "bench", cwd=gitwork)
        git("config", "user.email", "bench@localhost", cwd=gitwork)
        git("remote", "add", "origin", authed(bare_repo(f"git-{r}")), cwd=gitwork)
        git_ms, git_rss = git_commit_push(gitwork, "memory: first archive")
        git_files = int(git("ls-tree", "-r", "--name-only", "HEAD", cwd=gitwork).count("\n"))
        roles_files = sum(1 for _ in (cbclone / "memory/roles").rglob("*.json"))
        same = tree(gitwork) == tree(cbclone)
        print(f"first round {r}: git CLI {git_ms:.0f} ms ({git_files} files committed; clawboard changed "
              f"{s['changed']}, of them {roles_files} role files; same tree: {'yes' if same else 'NO'})", flush=True)
        assert roles_files == 4 * TASKS, f"{roles_files} role files, want {4 * TASKS}"
        assert git_files == s["changed"], f"git committed {git_files} files, clawboard changed {s['changed']}"
        assert same, "the git CLI's tree differs from clawboard's"
        first.append(dict(git_ms=git_ms, git_rss=git_rss, **s))

    sizes = {
        "role files": sum(f.stat().st_size for f in (cbclone / "memory/roles").rglob("*.json")),
        "harvest files": sum(f.stat().st_size for f in (cbclone / "memory").glob("harvest/*/*.json")),
    }

    # ---- (b) 100 files changed, ROUNDS times ----
    changed = []
    for r in range(ROUNDS):
        change(root, harvests, r)
        s = clawboard_round(root, cfg)
        # The files clawboard's commit changed, copied into the git CLI's work tree.
        git("fetch", "-q", "origin", "memory", cwd=cbclone)
        diff = [l.split("\t", 1) for l in git("diff", "--name-status", "--no-renames", "HEAD", "FETCH_HEAD",
                                               cwd=cbclone).splitlines()]
        git("reset", "-q", "--hard", "FETCH_HEAD", cwd=cbclone)
        for status, path in diff:
            if status == "D":
                (gitwork / path).unlink()
            else:
                (gitwork / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(cbclone / path, gitwork / path)
        git_ms, git_rss = git_commit_push(gitwork, f"memory: round {r}")
        git_changed = len(git("diff", "--name-only", "HEAD~1", "HEAD", cwd=gitwork).splitlines())
        role_changed = sum(1 for _, p in diff if p.startswith("memory/roles/"))  # the others: harvest files
        others = sorted(p for _, p in diff if not p.startswith("memory/roles/"))
        same = tree(gitwork) == tree(cbclone)
        print(f"changed round {r}: clawboard harvest {s['hv_ms']:.0f} ms ({s['harvestWritten']} files written); "
              f"archive now --no-harvest {s['cb_ms']:.0f} ms (commit {s['commit']} ms, push {s['push']} ms, "
              f"{s['read']} of {s['sources']} sources read, changed {s['changed']} = {role_changed} role files"
              f"{f' + {len(others)} other: ' + ', '.join(others) if others else ''}); "
              f"git CLI {git_ms:.0f} ms ({git_changed} files changed; same tree: {'yes' if same else 'NO'})",
              flush=True)
        assert role_changed == CHANGES, f"{role_changed} role files changed, want {CHANGES}"
        assert s["changed"] == len(diff) == git_changed, \
            f"clawboard changed {s['changed']}, its commit shows {len(diff)}, git CLI committed {git_changed}"
        assert same, "the git CLI's tree differs from clawboard's"
        changed.append(dict(git_ms=git_ms, git_rss=git_rss, role_changed=role_changed, **s))

    # ---- the report ----
    def col(rows, k):
        return [x[k] for x in rows]
    for x in first + changed:
        x["total_ms"] = x["hv_ms"] + x["cb_ms"]   # `archive now` with its harvest: step 1 + step 2
    f_cb, f_git = med(col(first, "cb_ms")), med(col(first, "git_ms"))
    c_cb, c_git = med(col(changed, "cb_ms")), med(col(changed, "git_ms"))
    c_cb_min, c_git_min = min(col(changed, "cb_ms")), min(col(changed, "git_ms"))
    first_label = f"first archive of {4 * TASKS:,} files" + (f" (median of {FULL_ROUNDS})" if FULL_ROUNDS > 1 else "")
    version = run([BIN, "--version"]).strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print()
    print(f"## Memory archive: clawboard vs git CLI ({TASKS:,} tasks, {4 * TASKS:,} memory files)")
    print()
    print("The archive step: clawboard `archive now --no-harvest` (extract + commit + push) against "
          "`git add -A && git commit && git push`:")
    print()
    print("| case | clawboard (ms) | git CLI (ms) | ratio (git/clawboard) |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| {first_label} | {fmt_ms(f_cb)} | {fmt_ms(f_git)} | {f_git / f_cb:.2f} |")
    print(f"| {CHANGES} files changed (median of {ROUNDS}) | {fmt_ms(c_cb)} | {fmt_ms(c_git)} | {c_git / c_cb:.2f} |")
    print(f"| {CHANGES} files changed (min of {ROUNDS}) | {fmt_ms(c_cb_min)} | {fmt_ms(c_git_min)} | "
          f"{c_git_min / c_cb_min:.2f} |")
    print()
    print("`archive now` with its harvest: clawboard's two steps, `harvest` then `archive now --no-harvest`, "
          "summed per round (the harvest is work the git CLI side does not do):")
    print()
    print("| case | harvest (ms) | archive step (ms) | archive now with its harvest (ms) | git CLI (ms) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, rows in [(first_label, first), (f"{CHANGES} files changed (median of {ROUNDS})", changed)]:
        print(f"| {label} | {fmt_ms(med(col(rows, 'hv_ms')))} | {fmt_ms(med(col(rows, 'cb_ms')))} | "
              f"{fmt_ms(med(col(rows, 'total_ms')))} | {fmt_ms(med(col(rows, 'git_ms')))} |")
    print()
    print("clawboard's archive step (`archive now --no-harvest`) wall clock against its own report "
          "(`archive.commit.elapsedMs`, `archive.push.elapsedMs`); the rest is process start and the status files. "
          "The harvest step is its own column (its wall clock):")
    print()
    print("| case | harvest (ms) | archive wall (ms) | commit (ms) | push (ms) | rest (ms) | files changed | "
          "harvest files written | peak RSS harvest / archive (MiB) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, rows in [(first_label, first), (f"{CHANGES} files changed (median of {ROUNDS})", changed)]:
        wall, com, push = med(col(rows, "cb_ms")), med(col(rows, "commit")), med(col(rows, "push"))
        rss = f"{max(col(rows, 'hv_rss')):.1f} / {max(col(rows, 'cb_rss')):.1f}" if TIME else "n/a"
        print(f"| {label} | {fmt_ms(med(col(rows, 'hv_ms')))} | {fmt_ms(wall)} | {com:.0f} | {push:.0f} | "
              f"{fmt_ms(wall - com - push)} | {med(col(rows, 'changed')):.0f} | "
              f"{med(col(rows, 'harvestWritten')):.0f} | {rss} |")
    print()
    print("Every round, per side (ms):")
    print()
    print("| round | clawboard harvest | clawboard archive step | commit | push | harvest + archive step | git CLI |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, rows in [("first", first), ("changed", changed)]:
        for i, x in enumerate(rows):
            print(f"| {name} {i} | {fmt_ms(x['hv_ms'])} | {fmt_ms(x['cb_ms'])} | {x['commit']} | {x['push']} | "
                  f"{fmt_ms(x['total_ms'])} | {fmt_ms(x['git_ms'])} |")
    print()
    if TIME:
        print(f"Peak RSS: clawboard archive step {max(col(first, 'cb_rss')):.1f} MiB (first), "
              f"{max(col(changed, 'cb_rss')):.1f} MiB (changed); clawboard harvest {max(col(first, 'hv_rss')):.1f} MiB "
              f"(first), {max(col(changed, 'hv_rss')):.1f} MiB (changed); git CLI (largest process of add/commit/push) "
              f"{max(col(first, 'git_rss')):.1f} MiB (first), {max(col(changed, 'git_rss')):.1f} MiB (changed).")
    print(f"Data: {4 * TASKS:,} role files, {sizes['role files'] / 1e6:.1f} MB; harvest files "
          f"{sizes['harvest files'] / 1e6:.1f} MB; harvestedAt {HARVESTED_AT}.")
    print(f"Changed files per round: clawboard {', '.join(str(x['changed']) for x in changed)} "
          f"({', '.join(str(x['role_changed']) for x in changed)} role files, the rest harvest files); "
          f"git CLI the same files (trees checked identical).")
    print()
    print(f"Machine: {cpu}, nproc {os.cpu_count()}, {platform.system()} {platform.release()}; "
          f"{run(['git', '--version']).strip()}; {version}; git server: lighttpd + git http-backend on 127.0.0.1.")
    print()
    print(f"{'PASS' if f_cb <= f_git else 'FAIL'}: first archive: clawboard archive step {fmt_ms(f_cb)} ms "
          f"<= git CLI {fmt_ms(f_git)} ms")
    print(f"{'PASS' if c_cb < 300 else 'FAIL'}: {CHANGES} files changed: clawboard archive step median "
          f"{fmt_ms(c_cb)} ms < 300 ms")
    print(f"(`archive now` with its harvest, median: first {fmt_ms(med(col(first, 'total_ms')))} ms, "
          f"{CHANGES} files changed {fmt_ms(med(col(changed, 'total_ms')))} ms.)")
finally:
    if server_dir.exists():
        subprocess.run(["scripts/git-server", "stop", str(server_dir)], capture_output=True)
    if KEEP:
        print(f"kept {work}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
PY

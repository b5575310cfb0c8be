#!/usr/bin/env bash
# Sync benchmark: clawboard push vs rclone (Debian's 1.60), same machine, same
# servers, one run. Results go in docs/benchmarks/.
#
#   scripts/bench/sync.sh                 # 100,000 files on s3s-fs, 10,000 on moto
#   FILES_S3S=20000 FILES_MOTO=2000 scripts/bench/sync.sh   # quicker
#   CLAWBOARD_BIN=/tmp/clawboard-old scripts/bench/sync.sh   # measure that binary, build nothing
#
# Needs: rclone (apt-get install rclone), /usr/bin/time (apt-get install time),
# the test servers (scripts/s3-servers install), a release build (built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v rclone >/dev/null || { echo "needs rclone: apt-get install rclone" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 1; }
scripts/s3-servers install
[ -n "${CLAWBOARD_BIN:-}" ] || cargo build --release -q -p clawboard
exec python3 - "$@" <<'PY'
import json, os, random, re, shutil, signal, socket, subprocess, sys, tempfile, time
from pathlib import Path

REPO = Path.cwd()
BIN = Path(os.environ.get("CLAWBOARD_BIN") or REPO / "target/release/clawboard")
TOOLS = REPO / "target/tools"
FILES_S3S = int(os.environ.get("FILES_S3S", "100000"))
FILES_MOTO = int(os.environ.get("FILES_MOTO", "10000"))
CHANGES = 100
FULL_ROUNDS = int(os.environ.get("FULL_ROUNDS", "2"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))
# rclone --checksum against s3s-fs at 100,000 files takes ~14 minutes (its listings carry
# no ETag, so rclone reads every object's hash another way); S3S_MODES=update_server_modtime skips it.
S3S_MODES = os.environ.get("S3S_MODES", "checksum,update_server_modtime").split(",")
KEY, SECRET = "bench", "bench-secret"
# Cloudflare R2 prices (per million requests): Class A (PUT, POST, LIST), Class B (GET, HEAD); DELETE free.
R2_A, R2_B = 4.50, 0.36
RUNS_PER_DAY = 24 * 60 // 5

work = Path(tempfile.mkdtemp(prefix="clawboard-bench-sync-"))
procs = []

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(port):
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"server on {port} did not start")

def start_server(kind):
    port = free_port()
    log = open(work / f"{kind}.log", "w")
    if kind == "moto":
        argv = [str(TOOLS / "venv/bin/moto_server"), "-H", "127.0.0.1", "-p", str(port)]
    else:
        data = work / "s3s-data"; data.mkdir()
        argv = [str(TOOLS / "bin/s3s-fs"), "--host", "127.0.0.1", "--port", str(port),
                "--access-key", KEY, "--secret-key", SECRET, str(data)]
    p = subprocess.Popen(argv, stdout=log, stderr=log)
    procs.append(p)
    wait_port(port)
    return f"http://127.0.0.1:{port}", work / f"{kind}.log"

def make_bucket(endpoint, name):
    env = rclone_env(endpoint)
    subprocess.run(["rclone", "mkdir", f"bench:{name}"], env=env, check=True)

def rclone_env(endpoint):
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update(RCLONE_CONFIG_BENCH_TYPE="s3", RCLONE_CONFIG_BENCH_PROVIDER="Other",
               RCLONE_CONFIG_BENCH_ENDPOINT=endpoint, RCLONE_CONFIG_BENCH_REGION="us-east-1",
               RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=KEY, RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=SECRET,
               RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE="true")
    return env

CPU = {}
FIRST_PULL = {}

def timed(argv, env=None):
    """Runs argv under /usr/bin/time; returns (wall seconds, peak RSS MiB); CPU seconds in CPU[argv[0]]."""
    out = work / "time.out"
    t0 = time.monotonic()
    r = subprocess.run(["/usr/bin/time", "-f", "%M %U %S", "-o", str(out)] + argv, env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(argv)}\n{r.stdout}\n{r.stderr}")
    rss, user, sys_ = out.read_text().split()[-3:]
    CPU["last"] = float(user) + float(sys_)
    return wall, int(rss) / 1024

def make_tree(root, files):
    """A blackboard: tasks of 8 files (the seed's task files plus two attempt records), harvest, reports."""
    subprocess.run([str(BIN), "init", "--root", str(root)], check=True, stdout=subprocess.DEVNULL)
    names = ["task.json", "team-composition.json", "status.md", "result.json", "validation.json",
             "memory-harvest.json", "attempts/0001-pm.json", "attempts/0002-worker.json"]
    rnd = random.Random(7)
    n = 0
    extra = files // 50
    t = 0
    while n < files - extra:
        d = root / "tasks" / f"task-20261122-{t:06d}-{t % 0xffffff:06x}"
        (d / "attempts").mkdir(parents=True)
        for name in names:
            if name == "task.json":
                # A finished task, as the daemon leaves it (intake ignores it).
                body = {"taskId": d.name, "type": "coding", "description": "x" * rnd.randint(100, 1000),
                        "createdAt": "2026-11-22T00:00:00Z", "createdBy": "human", "priority": "normal",
                        "status": "completed"}
            else:
                body = {"task": t, "file": name, "body": "x" * rnd.randint(200, 2000)}
            (d / name).write_text(json.dumps(body))
            n += 1
        t += 1
    for i in range(extra):
        kind = "daily" if i % 2 else "weekly"
        p = root / "harvest" / kind / f"{i:05d}.json"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps({"cells": ["c" * 500]}))
        n += 1
    return n

def change(root, k, round_):
    files = sorted((root / "tasks").glob("*/result.json"))
    step = max(1, len(files) // k)
    picked = files[::step][:k]
    for f in picked:
        with open(f, "a") as fh:
            fh.write(f"\n{round_}")
    time.sleep(1.1)  # let mtimes move past the second for rclone --update
    return len(picked)

def config(root, endpoint, bucket):
    creds = work / "creds.env"
    creds.write_text(f"AWS_ACCESS_KEY_ID={KEY}\nAWS_SECRET_ACCESS_KEY={SECRET}\n"); creds.chmod(0o600)
    cfg = work / f"{bucket}.toml"
    cfg.write_text(f'[sync]\nschedule = "0 0 0 1 1 *"\npush_on_task_end = false\n'
                   f'[sync.s3]\nendpoint = "{endpoint}"\nregion = "us-east-1"\nbucket = "{bucket}"\n'
                   f'path_style = true\ncredentials_file = "{creds}"\n')
    return cfg

def cb(cfg, root, *args):
    return [str(BIN), "--root", str(root), "--config", str(cfg), *args]

def pending(cfg, root):
    r = subprocess.run(cb(cfg, root, "sync", "status", "--json"), capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["pending"]["entries"]

def start_daemon(cfg, root):
    log = open(work / "daemon.log", "a")
    p = subprocess.Popen(cb(cfg, root, "daemon"), stdout=log, stderr=log)
    procs.append(p)
    for _ in range(600):
        r = subprocess.run([str(BIN), "--root", str(root), "status", "--json"], capture_output=True, text=True)
        if r.returncode == 0 and json.loads(r.stdout)["daemon"]:
            break
        time.sleep(0.1)
    # The daemon's first push and first pull (at start) must be done: the status file
    # is then its own, and the incremental rounds measure a daemon in its steady state.
    # The first pull after `sync full` lists the bucket and, where the listing has no
    # ETag (s3s-fs), HEADs every object; it is reported on its own.
    t0 = time.monotonic()
    for _ in range(36000):
        r = subprocess.run(cb(cfg, root, "sync", "status", "--json"), capture_output=True, text=True, check=True)
        st = json.loads(r.stdout)
        if st["thisProcess"]["pid"] == p.pid and st.get("lastPullAt"):
            FIRST_PULL.update(wall_s=round(time.monotonic() - t0, 1), requests=st["thisProcess"]["requests"],
                              report={k: st["lastPull"][k] for k in ("full", "applied", "deleted", "elapsedMs")})
            return p
        time.sleep(0.1)
    sys.exit("the daemon did not push and pull at start")

def wait_journaled(cfg, root, n):
    for _ in range(600):
        if pending(cfg, root) >= n:
            return
        time.sleep(0.05)
    sys.exit(f"the daemon did not journal the changes (pending {pending(cfg, root)}, want {n})")

def requests(log, since):
    """Requests in moto's access log after line `since`, by operation."""
    lines = log.read_text().splitlines()[since:]
    ops = {"LIST": 0, "HEAD": 0, "GET": 0, "PUT": 0, "POST": 0, "DELETE": 0}
    for l in lines:
        m = re.search(r'"(GET|HEAD|PUT|POST|DELETE) (\S+)', l)
        if not m:
            continue
        meth, url = m.groups()
        if meth == "GET" and ("list-type" in url or re.match(r"^/[^/]+/?(\?|$)", url)):
            ops["LIST"] += 1
        else:
            ops[meth] += 1
    return ops, len(log.read_text().splitlines())

def cost_per_day(ops):
    a = ops["PUT"] + ops["POST"] + ops["LIST"]
    b = ops["GET"] + ops["HEAD"]
    return RUNS_PER_DAY * (a * R2_A + b * R2_B) / 1e6

results = {}

def report(name, value):
    results[name] = value
    print(f"{name}: {value}", flush=True)

def rclone(endpoint, src, bucket, *flags):
    return timed(["rclone", "sync", str(src), f"bench:{bucket}", *flags], env=rclone_env(endpoint))

try:
    # ---- s3s-fs, FILES_S3S files ----
    endpoint, _ = start_server("s3s")
    root = work / "s3s-tree"
    n = make_tree(root, FILES_S3S)
    report("s3s.files", n)
    # (a) initial push into an empty bucket, alternating the tools, best of FULL_ROUNDS.
    cw, rw = [], []
    for r in range(FULL_ROUNDS):
        make_bucket(endpoint, f"bench-rclone-{r}")
        wall, rss = rclone(endpoint, root, f"bench-rclone-{r}", "--transfers", "16", "--exclude", ".clawboard/**")
        rw.append(wall); report(f"a.round{r}.rclone_s", round(wall, 2)); report(f"a.round{r}.rclone_cpu_s", round(CPU["last"], 2)); report("a.rclone_rss_mib", round(rss, 1))
        make_bucket(endpoint, f"bench-clawboard-{r}")
        cfg = config(root, endpoint, f"bench-clawboard-{r}")
        shutil.rmtree(root / ".clawboard/sync", ignore_errors=True)
        (root / ".clawboard/cursors/push").unlink(missing_ok=True)
        wall, rss = timed(cb(cfg, root, "sync", "full", "--no-progress"))
        cw.append(wall); report(f"a.round{r}.clawboard_s", round(wall, 2)); report(f"a.round{r}.clawboard_cpu_s", round(CPU["last"], 2)); report("a.clawboard_rss_mib", round(rss, 1))
    report("a.best.clawboard_s", round(min(cw), 2)); report("a.best.rclone_s", round(min(rw), 2))
    report("a.ratio_rclone_over_clawboard", round(min(rw) / min(cw), 2))

    d = start_daemon(cfg, root)
    report("b.s3s.daemon_first_pull", dict(FIRST_PULL))
    last = f"bench-rclone-{FULL_ROUNDS - 1}"
    for mode, flags in [("checksum", ["--checksum"]), ("update_server_modtime", ["--update", "--use-server-modtime"])]:
        if mode not in S3S_MODES:
            continue
        cw, rw = [], []
        for r in range(ROUNDS):
            wait_journaled(cfg, root, change(root, CHANGES, f"{mode}-{r}"))
            wall, rss = timed(cb(cfg, root, "sync", "push", "--no-progress"))
            cw.append(wall); report(f"b.{mode}.round{r}.clawboard_push_s", round(wall, 3)); report(f"b.{mode}.clawboard_rss_mib", round(rss, 1))
            wall, rss = rclone(endpoint, root, last, "--transfers", "16", "--exclude", ".clawboard/**", *flags)
            rw.append(wall); report(f"b.{mode}.round{r}.rclone_s", round(wall, 2)); report(f"b.{mode}.rclone_rss_mib", round(rss, 1))
        report(f"b.{mode}.best.clawboard_s", round(min(cw), 3)); report(f"b.{mode}.best.rclone_s", round(min(rw), 2))
        report(f"b.{mode}.ratio", round(min(rw) / min(cw), 1))
    wall, _ = timed(cb(cfg, root, "sync", "push", "--no-progress"))
    report("d.s3s.clawboard_nochange_s", round(wall, 3))
    st = json.loads(subprocess.run(cb(cfg, root, "sync", "status", "--json"), capture_output=True, text=True).stdout)
    report("d.s3s.clawboard_nochange_requests", sum(st["thisProcess"]["requests"].values()))
    d.send_signal(signal.SIGTERM); d.wait()

    # ---- moto, FILES_MOTO files: requests by operation ----
    endpoint, log = start_server("moto")
    root = work / "moto-tree"
    n = make_tree(root, FILES_MOTO)
    report("moto.files", n)
    make_bucket(endpoint, "bench-clawboard"); make_bucket(endpoint, "bench-rclone")
    cfg = config(root, endpoint, "bench-clawboard")
    _, mark = requests(log, 0)
    wall, _ = timed(cb(cfg, root, "sync", "full", "--no-progress"))
    ops, mark = requests(log, mark); report("c.moto.clawboard_full_s", round(wall, 2)); report("e.clawboard_full_requests", ops)
    wall, _ = rclone(endpoint, root, "bench-rclone", "--transfers", "16", "--fast-list", "--exclude", ".clawboard/**")
    ops, mark = requests(log, mark); report("c.moto.rclone_full_s", round(wall, 2)); report("e.rclone_full_requests", ops)
    d = start_daemon(cfg, root)
    report("c.moto.daemon_first_pull", dict(FIRST_PULL))
    _, mark = requests(log, 0)
    for mode, flags in [("checksum", ["--checksum"]), ("update_server_modtime", ["--update", "--use-server-modtime"])]:
        cw, rw = [], []
        for r in range(ROUNDS):
            wait_journaled(cfg, root, change(root, CHANGES, f"moto-{mode}-{r}"))
            _, mark = requests(log, 0)
            wall, rss = timed(cb(cfg, root, "sync", "push", "--no-progress"))
            ops, mark = requests(log, mark)
            cw.append(wall); report(f"c.{mode}.round{r}.clawboard_push_s", round(wall, 3)); report(f"e.{mode}.clawboard_requests", ops)
            report(f"e.{mode}.clawboard_r2_usd_per_day", round(cost_per_day(ops), 4))
            wall, rss = rclone(endpoint, root, "bench-rclone", "--transfers", "16", "--fast-list", "--exclude", ".clawboard/**", *flags)
            ops, mark = requests(log, mark)
            rw.append(wall); report(f"c.{mode}.round{r}.rclone_s", round(wall, 2)); report(f"e.{mode}.rclone_requests", ops)
            report(f"e.{mode}.rclone_r2_usd_per_day", round(cost_per_day(ops), 4))
        report(f"c.{mode}.best.clawboard_s", round(min(cw), 3)); report(f"c.{mode}.best.rclone_s", round(min(rw), 2))
        report(f"c.{mode}.ratio", round(min(rw) / min(cw), 1))
    # (d) no changes at all
    _, mark = requests(log, 0)
    wall, _ = timed(cb(cfg, root, "sync", "push", "--no-progress"))
    ops, mark = requests(log, mark); report("d.moto.clawboard_nochange_s", round(wall, 3)); report("d.moto.clawboard_nochange_requests", ops)
    wall, _ = rclone(endpoint, root, "bench-rclone", "--fast-list", "--update", "--use-server-modtime", "--exclude", ".clawboard/**")
    ops, mark = requests(log, mark); report("d.moto.rclone_nochange_s", round(wall, 2)); report("d.moto.rclone_nochange_requests", ops)
    report("d.moto.rclone_nochange_r2_usd_per_day", round(cost_per_day(ops), 4))
    # Both trees are identical to their buckets.
    r = subprocess.run(cb(cfg, root, "sync", "verify"), capture_output=True, text=True)
    report("verify_moto", r.stdout.strip().splitlines()[0] if r.stdout else r.stderr)
    d.send_signal(signal.SIGTERM); d.wait()
    print(json.dumps(results, indent=1))
finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    shutil.rmtree(work, ignore_errors=True)
PY

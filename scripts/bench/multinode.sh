#!/usr/bin/env bash
# Multi-node benchmark: three clawboard daemons on this machine sharing one bucket.
#
#   (1) convergence: with every daemon pushing and pulling every second, FILES new
#       files are written into node A's tree at once, then FILES existing ones are
#       changed; the time from the end of the writing until the three trees are
#       identical (sha256 of every file but .clawboard/, shared/node-status.json and
#       roles/active.json; polled every 100 ms). Local-directory backend and moto.
#   (2) idle cost: three idle daemons with the default schedule (*/5 * * * *) and the
#       default heartbeat (30s) on moto, over IDLE_SECS: requests per node per idle
#       minute by operation (moto's access log, totals / 3), and every listing's
#       prefix (each one must be under _nodes/ or _log/: no listing of the bucket).
#       The idle trees hold the FILES files of (1), so the tree size matches (3).
#   (3) baseline, same run: what the spec did before clawboard, rclone driven by cron.
#       Three plain directories A, B, C with the same starting files; for each round of
#       (1) the same writes go into A, then A runs `rclone copy A <bucket>` and B and C
#       `rclone sync <bucket> B|C` in parallel, at once (a cron schedule's best case:
#       zero wait); time from the end of the writing until B and C are identical to A.
#       rclone defaults (size + modtime) plus --transfers 16 (clawboard's concurrency).
#       Bucket: a second moto bucket, or a plain directory for the dir backend. The
#       rclone rounds run after the clawboard rounds of that backend, with its daemons
#       stopped (no load from them). Idle: the requests of one no-change
#       `rclone sync moto:<bucket> B`, i.e. per node per minute for a 1-minute cron.
#       Results are ratios rclone / clawboard.
#
#   scripts/bench/multinode.sh                       # 1,000 files, 120 s idle
#   FILES=200 IDLE_SECS=60 scripts/bench/multinode.sh  # quicker
#   BIN=target/release/clawboard scripts/bench/multinode.sh   # after cargo build --release -p clawboard
#
# Env: FILES (1000), IDLE_SECS (120), BIN (target/debug/clawboard), TIMEOUT (600 s per
# round), KEEP=1 keeps the scratch directory (trees, daemon and moto logs).
# Needs: a build of clawboard (this script does not build), moto
# (scripts/s3-servers install), rclone (apt-get install rclone; Debian's 1.60). It starts its own moto on a free port and leaves the
# shared test servers alone. Daemons and moto are stopped at the end, also on failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
CMD_ENV=""
for k in FILES IDLE_SECS BIN TIMEOUT KEEP; do [ -z "${!k:-}" ] || CMD_ENV+="$k=${!k} "; done
BIN="${BIN:-target/debug/clawboard}"
[ -x "$BIN" ] || { echo "no clawboard binary at $BIN: cargo build -p clawboard (or set BIN)" >&2; exit 1; }
[ -x target/tools/venv/bin/moto_server ] || { echo "needs moto: scripts/s3-servers install" >&2; exit 1; }
command -v rclone >/dev/null || { echo "needs rclone: apt-get install rclone" >&2; exit 1; }
PIDS="$(mktemp -t clawboard-bench-multinode-pids.XXXXXX)"
# The Python below stops what it started; this catches whatever a hard failure left.
cleanup() {
    local pid
    [ -f "$PIDS" ] || return 0
    while read -r pid; do
        [ -n "$pid" ] || continue
        if kill -0 "$pid" 2>/dev/null && grep -qa -e clawboard -e moto_server "/proc/$pid/cmdline" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
        fi
    done < "$PIDS"
    rm -f "$PIDS"
}
trap cleanup EXIT INT TERM
BIN="$BIN" PIDS="$PIDS" CMD_ENV="$CMD_ENV" python3 - "$@" <<'PY'
import hashlib, json, os, random, re, shutil, signal, socket, subprocess, sys, tempfile, time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit, parse_qs

REPO = Path.cwd()
BIN = (REPO / os.environ["BIN"]).resolve()
VENV = REPO / "target/tools/venv/bin"
FILES = int(os.environ.get("FILES", "1000"))
IDLE_SECS = int(os.environ.get("IDLE_SECS", "120"))
TIMEOUT = float(os.environ.get("TIMEOUT", "600"))
KEEP = os.environ.get("KEEP") == "1"
PIDS = Path(os.environ["PIDS"])
NODES = ["a", "b", "c"]
LOCAL_ONLY = {"shared/node-status.json", "roles/active.json"}
KEY, SECRET = "bench", "bench-secret"

work = Path(tempfile.mkdtemp(prefix="clawboard-bench-multinode-"))
procs = []          # (name, Popen), every process started here
rows = []           # convergence results
base_rows = []      # rclone-cron baseline results, same rounds
RCLONE = shutil.which("rclone")
RC_FLAGS = ["--transfers", "16"]   # rclone defaults otherwise (size + modtime)
logs = {}           # daemon name -> log path

def stop_on_signal(sig, _frame):
    raise SystemExit(f"stopped by signal {sig}")
signal.signal(signal.SIGTERM, stop_on_signal)

def say(*a):
    print(*a, flush=True)

def track(name, p):
    procs.append((name, p))
    with open(PIDS, "a") as f:
        f.write(f"{p.pid}\n")

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def wait_port(port):
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close(); return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"moto on port {port} did not start")

def start_moto():
    port = free_port()
    log = work / "moto.log"
    p = subprocess.Popen([str(VENV / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                         stdout=open(log, "w"), stderr=subprocess.STDOUT)
    track("moto", p)
    wait_port(port)
    return f"http://127.0.0.1:{port}", log

def make_bucket(endpoint, name):
    code = ("import boto3,sys; boto3.client('s3', endpoint_url=sys.argv[1], region_name='us-east-1', "
            "aws_access_key_id=sys.argv[3], aws_secret_access_key=sys.argv[4]).create_bucket(Bucket=sys.argv[2])")
    subprocess.run([str(VENV / "python"), "-c", code, endpoint, name, KEY, SECRET], check=True)

def credentials():
    f = work / "creds.env"
    f.write_text(f"AWS_ACCESS_KEY_ID={KEY}\nAWS_SECRET_ACCESS_KEY={SECRET}\n"); f.chmod(0o600)
    return f

def write_config(path, node, sync_lines, backend):
    text = f'[node]\nid = "bench-{node}"\n[sync]\n' + "".join(f"{l}\n" for l in sync_lines)
    if backend["kind"] == "dir":
        text += f'dir = "{backend["dir"]}"\n'
    else:
        text += (f'[sync.s3]\nendpoint = "{backend["endpoint"]}"\nbucket = "{backend["bucket"]}"\n'
                 f'path_style = true\nregion = "us-east-1"\ncredentials_file = "{backend["creds"]}"\n')
    path.write_text(text)

def cb(cfg, root, *args):
    return [str(BIN), "--root", str(root), "--config", str(cfg), *args]

class Cluster:
    """Three trees, three configs, three daemons on one backend."""
    def __init__(self, name, backend, sync_lines):
        self.name = name
        self.dir = work / name
        self.roots = {n: self.dir / n for n in NODES}
        self.cfgs = {n: self.dir / f"{n}.toml" for n in NODES}
        self.daemons = {}
        for n in NODES:
            subprocess.run([str(BIN), "init", "--root", str(self.roots[n])], check=True, stdout=subprocess.DEVNULL)
            write_config(self.cfgs[n], n, sync_lines, backend)

    def start(self):
        env = dict(os.environ, CLAWBOARD_LOG="info")
        for n in NODES:
            log = self.dir / f"daemon-{n}.log"
            logs[f"{self.name}/{n}"] = log
            p = subprocess.Popen(cb(self.cfgs[n], self.roots[n], "daemon"), stdout=open(log, "w"),
                                 stderr=subprocess.STDOUT, env=env)
            track(f"{self.name}/{n}", p)
            self.daemons[n] = p
        for n in NODES:
            for _ in range(600):
                if self.daemons[n].poll() is not None:
                    sys.exit(f"daemon {self.name}/{n} exited ({self.daemons[n].returncode}):\n{logs[f'{self.name}/{n}'].read_text()}")
                r = subprocess.run(cb(self.cfgs[n], self.roots[n], "status", "--json"), capture_output=True, text=True)
                if r.returncode == 0 and json.loads(r.stdout).get("daemon"):
                    break
                time.sleep(0.1)
            else:
                sys.exit(f"daemon {self.name}/{n} did not become ready")

    def stop(self):
        for n, p in self.daemons.items():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for n, p in self.daemons.items():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                say(f"  (daemon {self.name}/{n} ignored SIGTERM for 20 s; killed)")
                p.kill(); p.wait()
            if p.returncode not in (0, None):
                say(f"  (daemon {self.name}/{n} exited with {p.returncode})")
        self.daemons = {}

    def check_alive(self):
        for n, p in self.daemons.items():
            if p.poll() is not None:
                sys.exit(f"daemon {self.name}/{n} died ({p.returncode}); log tail:\n" +
                         "\n".join(logs[f"{self.name}/{n}"].read_text().splitlines()[-30:]))

_cache = {}  # path -> ((mtime_ns, size, ino), sha256)

def tree_hashes(root):
    out = {}
    for d, dirs, files in os.walk(root):
        if d == str(root):
            dirs[:] = [x for x in dirs if x != ".clawboard"]
        for f in files:
            p = os.path.join(d, f)
            rel = os.path.relpath(p, root)
            # Local-only files, and the store's atomic-write temp files (never synced).
            if rel in LOCAL_ONLY or ".clawboard-tmp." in f:
                continue
            try:
                st = os.stat(p)
                key = (st.st_mtime_ns, st.st_size, st.st_ino)
                c = _cache.get(p)
                if c is None or c[0] != key:
                    with open(p, "rb") as fh:
                        c = (key, hashlib.sha256(fh.read()).hexdigest())
                    _cache[p] = c
                out[rel] = c[1]
            except FileNotFoundError:
                continue
    return out

def wait_converged(cl, since, timeout):
    """Seconds from `since` until the three trees are identical; also when B and C each first matched A."""
    first = {}
    deadline = since + timeout
    while True:
        h = {n: tree_hashes(cl.roots[n]) for n in NODES}
        now = time.monotonic()
        for n in NODES[1:]:
            if n not in first and h[n] == h["a"]:
                first[n] = now - since
        if h["a"] == h["b"] == h["c"]:
            return now - since, first, h["a"]
        if now > deadline:
            diff = {n: len(set(h[n].items()) ^ set(h["a"].items())) for n in NODES[1:]}
            sys.exit(f"{cl.name}: not converged after {timeout:.0f} s (entries differing from A: {diff})")
        cl.check_alive()
        time.sleep(max(0.0, 0.1 - (time.monotonic() - now)))

def stays_converged(cl, secs=3.0):
    """The trees stay identical for `secs` (no late conflict copies or rewrites)."""
    end = time.monotonic() + secs
    while time.monotonic() < end:
        h = {n: tree_hashes(cl.roots[n]) for n in NODES}
        if not (h["a"] == h["b"] == h["c"]):
            for n in NODES[1:]:
                for path in sorted(set(h[n]) | set(h["a"])):
                    if h[n].get(path) != h["a"].get(path):
                        say(f"    differs after convergence: {n} {path}: A {str(h['a'].get(path))[:12]} {n.upper()} {str(h[n].get(path))[:12]}")
            return False
        time.sleep(0.2)
    return True

def moto_lines(log):
    return log.read_text(errors="replace").splitlines() if log else []

REQ = re.compile(r'"(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP')

def classify(lines, bucket):
    """moto access-log lines for `bucket`: operations, listings by prefix, keys by top-level prefix."""
    ops, prefixes, areas = Counter(), Counter(), Counter()
    for l in lines:
        m = REQ.search(l)
        if not m:
            continue
        meth, target = m.groups()
        u = urlsplit(target)
        parts = u.path.lstrip("/").split("/", 1)
        if parts[0] != bucket:
            continue
        key = parts[1] if len(parts) > 1 else ""
        if meth == "GET" and key == "":
            q = parse_qs(u.query)
            if "list-type" in q or not any(x in q for x in ("location", "versioning", "policy", "acl", "uploads")):
                ops["LIST"] += 1
                prefixes[q.get("prefix", [""])[0]] += 1
                continue
        ops[meth] += 1
        area = key.split("/", 1)[0] + "/" if key.startswith(("_nodes/", "_log/", "_claims/")) else "(tree)"
        areas[f"{meth} {area}"] += 1
    return ops, prefixes, areas

def write_new(root, n, seed):
    rnd = random.Random(seed)
    d = root / "gm/bench"
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        body = f"# bench file {i}\n\n" + "".join(rnd.choice("abcdefghij \n") for _ in range(rnd.randint(700, 1300)))
        (d / f"f{i}.md").write_text(body)

def modify(root, n, seed):
    rnd = random.Random(seed)
    for i in range(n):
        p = root / "gm/bench" / f"f{i}.md"
        p.write_text(p.read_text() + f"\nround {seed}: " + "".join(rnd.choice("klmnop") for _ in range(40)) + "\n")

def rclone_env(endpoint=None):
    """The remote `moto:` from environment variables (no config file), as scripts/bench/sync.sh."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    if endpoint:
        env.update(RCLONE_CONFIG_MOTO_TYPE="s3", RCLONE_CONFIG_MOTO_PROVIDER="Other",
                   RCLONE_CONFIG_MOTO_ENDPOINT=endpoint, RCLONE_CONFIG_MOTO_REGION="us-east-1",
                   RCLONE_CONFIG_MOTO_ACCESS_KEY_ID=KEY, RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY=SECRET,
                   RCLONE_CONFIG_MOTO_FORCE_PATH_STYLE="true")
    return env

class RcloneCron:
    """The baseline: plain directories A, B, C and one bucket (an rclone remote path)."""
    def __init__(self, name, start_root, remote, env):
        self.name, self.remote, self.env = name, remote, env
        self.dir = work / f"rclone-{name}"
        self.roots = {n: self.dir / n.upper() for n in NODES}
        self.log = self.dir / "rclone.log"
        def ignore(d, names):
            rel = os.path.relpath(d, start_root)
            return [x for x in names if (rel == "." and x == ".clawboard") or ".clawboard-tmp." in x
                    or os.path.normpath(os.path.join(rel, x)) in LOCAL_ONLY]
        for n in NODES:
            shutil.copytree(start_root, self.roots[n], ignore=ignore)
        self.dir.mkdir(exist_ok=True)

    def argv(self, *args):
        return [RCLONE, *args, *RC_FLAGS]

    def run(self, *args):
        with open(self.log, "a") as log:
            log.write(f"$ rclone {' '.join(map(str, args))}\n"); log.flush()
            r = subprocess.run(self.argv(*args), env=self.env, stdout=log, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            sys.exit(f"rclone {' '.join(map(str, args))} failed ({r.returncode}); see {self.log}:\n" +
                     "\n".join(self.log.read_text().splitlines()[-20:]))

    def cycle(self, since):
        """A: rclone copy A remote; then B and C: rclone sync remote B|C, in parallel.
        Seconds from `since` until the copy ended and until each sync ended."""
        self.run("copy", self.roots["a"], self.remote)
        copied = time.monotonic() - since
        log = open(self.log, "a")
        ps = {n: subprocess.Popen(self.argv("sync", self.remote, self.roots[n]), env=self.env,
                                  stdout=log, stderr=subprocess.STDOUT) for n in NODES[1:]}
        track(f"rclone-{self.name}-b", ps["b"]); track(f"rclone-{self.name}-c", ps["c"])
        done = {}
        while len(done) < len(ps):
            for n, p in ps.items():
                if n not in done and p.poll() is not None:
                    done[n] = time.monotonic() - since
                    if p.returncode != 0:
                        sys.exit(f"rclone sync into {n.upper()} failed ({p.returncode}); see {self.log}")
            time.sleep(0.01)
        log.close()
        return copied, done

    def identical(self):
        h = {n: tree_hashes(self.roots[n]) for n in NODES}
        return h["a"] == h["b"] == h["c"], h["a"]

def rclone_rounds(name, start_root, remote, env, moto_log=None, bucket=None):
    say(f"== baseline: rclone cron on {name} ({remote}), A copies, then B and C sync in parallel at once (zero cron wait) ==")
    rc = RcloneCron(name, start_root, remote, env)
    rc.cycle(time.monotonic())  # the starting files into the bucket and B, C (untimed)
    ok, h = rc.identical()
    if not ok:
        sys.exit(f"rclone {name}: B and C differ from A after the first (untimed) cycle")
    say(f"  starting trees identical ({len(h)} files)")
    for rnd, label, action in [(1, f"write {FILES} new files", write_new), (2, f"modify {FILES} files", modify)]:
        mark = len(moto_lines(moto_log))
        w0 = time.monotonic()
        action(rc.roots["a"], FILES, rnd)
        t0 = time.monotonic()
        copied, done = rc.cycle(t0)
        total = max(done.values())
        time.sleep(0.3)  # moto writes a request's log line after its response
        ok, h = rc.identical()
        ops, _, _ = classify(moto_lines(moto_log)[mark:], bucket) if moto_log else (None, None, None)
        row = dict(backend=name, round=label, write_s=t0 - w0, copy_s=copied, b_s=done["b"], c_s=done["c"],
                   converge_s=total, files=len(h), identical=ok,
                   requests=sum(ops.values()) if ops else None,
                   ops=", ".join(f"{k} {v}" for k, v in sorted(ops.items())) if ops else "")
        base_rows.append(row)
        say(f"  round {rnd} ({label}): written in {row['write_s']:.2f} s, copy A done {copied:.2f} s after, "
            f"B {done['b']:.2f} s, C {done['c']:.2f} s, {len(h)} files, identical {ok}"
            + (f", {row['requests']} requests" if ops else ""))
        if not ok:
            sys.exit(f"rclone {name}: B or C differs from A after round {rnd}")
    return rc

def rclone_idle(rc, moto_log, bucket):
    """Requests of one no-change `rclone sync moto:bucket B` (a cron pull), and of one no-change
    `rclone copy A moto:bucket` (a cron push) for reference; objects in the bucket."""
    out = {}
    for what, args in [("sync", ("sync", rc.remote, rc.roots["b"])), ("copy", ("copy", rc.roots["a"], rc.remote))]:
        before = tree_hashes(rc.roots["b"])
        time.sleep(0.5)
        mark = len(moto_lines(moto_log))
        t0 = time.monotonic()
        rc.run(*args)
        secs = time.monotonic() - t0
        time.sleep(0.5)
        lines = moto_lines(moto_log)[mark:]
        ops, prefixes, _ = classify(lines, bucket)
        if tree_hashes(rc.roots["b"]) != before:
            sys.exit("rclone idle: the no-change sync changed B")
        out[what] = dict(ops=ops, total=sum(ops.values()), lines=sum(1 for l in lines if REQ.search(l)), secs=secs,
                         listings=sum(prefixes.values()))
    r = subprocess.run([RCLONE, "size", "--json", rc.remote], env=rc.env, capture_output=True, text=True, check=True)
    out["objects"] = json.loads(r.stdout)["count"]
    return out

def bucket_objects(endpoint, bucket):
    r = subprocess.run([RCLONE, "size", "--json", f"moto:{bucket}"], env=rclone_env(endpoint),
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["count"]

def convergence(name, backend, moto_log=None, baseline=None):
    say(f"== convergence: {name} ==")
    cl = Cluster(name, backend, ['schedule = "* * * * * *"', 'heartbeat = "1s"', 'lease = "10s"'])
    try:
        cl.start()
        t, _, h = wait_converged(cl, time.monotonic(), 120)
        if not stays_converged(cl, 3):
            sys.exit(f"{name}: the freshly initialised trees do not stay identical")
        say(f"  daemons ready, trees identical ({len(h)} files)")
        if baseline:  # the rclone directories start from the same files
            start = work / f"start-{name}"
            shutil.copytree(cl.roots["a"], start, ignore=shutil.ignore_patterns(".clawboard", "*.clawboard-tmp.*"))
        for rnd, label, action in [(1, f"write {FILES} new files", write_new), (2, f"modify {FILES} files", modify)]:
            mark = len(moto_lines(moto_log))
            w0 = time.monotonic()
            action(cl.roots["a"], FILES, rnd)
            t0 = time.monotonic()
            secs, first, h = wait_converged(cl, t0, TIMEOUT)
            ops, _, _ = classify(moto_lines(moto_log)[mark:], backend.get("bucket")) if moto_log else (None, None, None)
            stable = stays_converged(cl, 3)
            row = dict(backend=name, round=label, write_s=t0 - w0, converge_s=secs,
                       b_s=first.get("b"), c_s=first.get("c"), files=len(h), stable=stable,
                       requests=sum(ops.values()) if ops else None,
                       ops=", ".join(f"{k} {v}" for k, v in sorted(ops.items())) if ops else "")
            rows.append(row)
            say(f"  round {rnd} ({label}): written in {row['write_s']:.2f} s, converged {secs:.2f} s after "
                f"(B {first.get('b', 0):.2f} s, C {first.get('c', 0):.2f} s), {len(h)} files, "
                f"stable {stable}" + (f", {row['requests']} requests" if ops else ""))
    finally:
        cl.stop()
    if baseline:
        return rclone_rounds(name, start, baseline["remote"], baseline["env"], moto_log, baseline.get("bucket"))

def idle(endpoint, moto_log):
    say(f"== idle cost: moto, default schedule, heartbeat 30s, {IDLE_SECS} s ==")
    bucket = "bench-idle"
    make_bucket(endpoint, bucket)
    backend = dict(kind="s3", endpoint=endpoint, bucket=bucket, creds=credentials())
    cl = Cluster("idle-moto", backend, ['heartbeat = "30s"'])
    # The same tree size as the baseline's: the FILES files, pushed by A and pulled by B
    # and C from the command line before the daemons start.
    write_new(cl.roots["a"], FILES, 1)
    subprocess.run(cb(cl.cfgs["a"], cl.roots["a"], "sync", "push"), check=True, stdout=subprocess.DEVNULL)
    for n in NODES[1:]:
        subprocess.run(cb(cl.cfgs[n], cl.roots[n], "sync", "pull"), check=True, stdout=subprocess.DEVNULL)
    try:
        cl.start()
        _, _, h = wait_converged(cl, time.monotonic(), TIMEOUT)
        say(f"  daemons ready, trees identical ({len(h)} files)")
        time.sleep(10)  # the start's push, pull and first heartbeats are done
        mark = len(moto_lines(moto_log))
        w0 = time.time()
        time.sleep(IDLE_SECS)
        w1 = time.time()
        cl.check_alive()
        ops, prefixes, areas = classify(moto_lines(moto_log)[mark:], bucket)
        # What one scheduled run (push, then pull, nothing new) costs a node: the same
        # calls from the command line on node A, again if a heartbeat fell inside.
        for _ in range(5):
            m = len(moto_lines(moto_log))
            for what in ("push", "pull"):
                subprocess.run(cb(cl.cfgs["a"], cl.roots["a"], "sync", what), check=True, stdout=subprocess.DEVNULL)
            run_ops, run_prefixes, run_areas = classify(moto_lines(moto_log)[m:], bucket)
            if run_areas.get("PUT _nodes/", 0) == 0:
                break
            time.sleep(2)
    finally:
        cl.stop()
    # Scheduled runs (*/5 * * * *) whose time fell inside the window.
    runs = sum(1 for m in range(int(w0 // 60) + 1, int(w1 // 60) + 1) if m % 5 == 0)
    return ops, prefixes, areas, runs, run_ops, run_prefixes, bucket_objects(endpoint, bucket), len(h)

def digest():
    """WARN/ERROR lines of every daemon log, by message (timestamps dropped)."""
    out = []
    for name, log in logs.items():
        c = Counter()
        for l in log.read_text(errors="replace").splitlines():
            m = re.match(r"\S+\s+(WARN|ERROR)\s+(.*)", l)
            if m:
                c[f"{m.group(1)} {re.sub(r'[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z', 'T', m.group(2))[:240]}"] += 1
        for msg, k in c.most_common():
            out.append(f"  {name}: {k}x {msg}")
    return out

status = 1
try:
    say(f"binary: {BIN}  files: {FILES}  idle: {IDLE_SECS} s  scratch: {work}")
    bucket_dir = work / "dir-bucket"
    bucket_dir.mkdir()  # a configured sync.dir must exist
    rc_dir_bucket = work / "rclone-dir-bucket"
    rc_dir_bucket.mkdir()
    convergence("dir", dict(kind="dir", dir=str(bucket_dir)), baseline=dict(remote=str(rc_dir_bucket), env=rclone_env()))
    endpoint, moto_log = start_moto()
    make_bucket(endpoint, "bench-converge")
    make_bucket(endpoint, "bench-rc")
    rc = convergence("moto", dict(kind="s3", endpoint=endpoint, bucket="bench-converge", creds=credentials()), moto_log,
                     baseline=dict(remote="moto:bench-rc", env=rclone_env(endpoint), bucket="bench-rc"))
    rc_idle = rclone_idle(rc, moto_log, "bench-rc")
    say(f"== baseline idle: one no-change `rclone sync moto:bench-rc B`: {rc_idle['sync']['total']} requests "
        f"({dict(rc_idle['sync']['ops'])}), {rc_idle['sync']['secs']:.2f} s; bucket {rc_idle['objects']} objects ==")
    ops, prefixes, areas, runs, run_ops, run_prefixes, idle_objects, idle_files = idle(endpoint, moto_log)

    per = lambda k: k / 3 / (IDLE_SECS / 60)
    say("")
    say("## Results")
    say("")
    say(f"Three daemons on one machine ({os.cpu_count()} CPUs), binary `{BIN.relative_to(REPO) if BIN.is_relative_to(REPO) else BIN}`.")
    say("")
    say(f"### Convergence ({FILES} files of ~1 KiB into node A; schedule every second, heartbeat 1s)")
    say("")
    say("| backend | round | writing (s) | B identical (s) | C identical (s) | all three identical (s) | files in tree | stays identical | requests until identical (all nodes) |")
    say("|---|---|---:|---:|---:|---:|---:|---|---|")
    for r in rows:
        reqs = f"{r['requests']} ({r['ops']})" if r["requests"] is not None else "-"
        say(f"| {r['backend']} | {r['round']} | {r['write_s']:.2f} | {r['b_s']:.2f} | {r['c_s']:.2f} | **{r['converge_s']:.2f}** | "
            f"{r['files']} | {'yes' if r['stable'] else 'NO'} | {reqs} |")
    say("")
    say(f"### Convergence against the baseline: rclone driven by cron (same {FILES} files, same writes, same run)")
    say("")
    say("Baseline: plain directories A, B, C; A runs `rclone copy A <bucket>`, then B and C run `rclone sync <bucket> B|C` "
        "in parallel **at once** (the best case of a cron schedule: zero wait for the next tick; a real 1-minute cron adds "
        "0-60 s, 30 s on average, per hop). rclone 1.60 defaults (size + modtime) plus `--transfers 16`. Bucket: a second "
        "moto bucket (moto), a plain directory (dir). The rclone rounds ran after the clawboard rounds with the daemons stopped.")
    say("")
    say("| backend | round | clawboard: all three identical (s) | rclone: copy A done (s) | rclone: B / C done (s) | rclone: B and C identical to A (s) | **ratio rclone / clawboard** | requests clawboard / rclone |")
    say("|---|---|---:|---:|---:|---:|---:|---|")
    for b in base_rows:
        r = next(x for x in rows if x["backend"] == b["backend"] and x["round"] == b["round"])
        reqs = f"{r['requests']} / {b['requests']} ({b['ops']})" if b["requests"] is not None else "-"
        say(f"| {b['backend']} | {b['round']} | {r['converge_s']:.2f} | {b['copy_s']:.2f} | {b['b_s']:.2f} / {b['c_s']:.2f} | "
            f"{b['converge_s']:.2f} | **{b['converge_s'] / r['converge_s']:.2f}** | {reqs} |")
    say("")
    say(f"### Idle cost (moto; schedule `*/5 * * * *`, heartbeat 30s; {IDLE_SECS} s window, {runs} scheduled run(s) inside it)")
    say("")
    # Steady state: the window without the scheduled runs inside it, plus one run every 5 minutes.
    est = lambda op: (ops.get(op, 0) - 3 * runs * run_ops.get(op, 0)) / 3 / (IDLE_SECS / 60) + run_ops.get(op, 0) / 5
    say("| operation | requests in window (3 nodes) | per node per idle minute (window) | one scheduled run, one node | per node per idle minute incl. one run / 5 min (estimate) |")
    say("|---|---:|---:|---:|---:|")
    for op in ["LIST", "GET", "HEAD", "PUT", "POST", "DELETE"]:
        say(f"| {op} | {ops.get(op, 0)} | {per(ops.get(op, 0)):.2f} | {run_ops.get(op, 0)} | {est(op):.2f} |")
    total = sum(ops.values())
    say(f"| **total** | {total} | **{per(total):.2f}** | {sum(run_ops.values())} | **{sum(est(op) for op in ['LIST', 'GET', 'HEAD', 'PUT', 'POST', 'DELETE']):.2f}** |")
    say("")
    say("(A scheduled run's cost is measured with `clawboard sync push` + `clawboard sync pull` on node A after the window.)")
    say("")
    say("| listing prefix | listings in window (3 nodes) | in one scheduled run (one node) |")
    say("|---|---:|---:|")
    for p in sorted(set(prefixes) | set(run_prefixes)):
        say(f"| `{p or '(none: whole bucket)'}` | {prefixes.get(p, 0)} | {run_prefixes.get(p, 0)} |")
    say("")
    say("| request by key area | in window |")
    say("|---|---:|")
    for a, k in sorted(areas.items()):
        say(f"| {a} | {k} |")
    bad = {p: k for p, k in (prefixes + run_prefixes).items() if not p.startswith(("_nodes/", "_log/"))}
    ALL = ["LIST", "GET", "HEAD", "PUT", "POST", "DELETE"]
    cb_window = sum(ops.get(op, 0) - 3 * runs * run_ops.get(op, 0) for op in ALL) / 3 / (IDLE_SECS / 60)  # heartbeats etc.
    cb_default = cb_window + sum(run_ops.values()) / 5
    cb_every_min = cb_window + sum(run_ops.values())
    rc_sync, rc_copy = rc_idle["sync"], rc_idle["copy"]
    say("")
    say("### Idle cost against the baseline (requests per node per idle minute, moto)")
    say("")
    say(f"Tree: {idle_files} files per node; objects in the bucket: clawboard {idle_objects} (`bench-idle`), rclone "
        f"{rc_idle['objects']} (`bench-rc`). rclone baseline: one no-change `rclone sync moto:bench-rc B --transfers 16` "
        f"sent {rc_sync['total']} requests ({', '.join(f'{k} {v}' for k, v in sorted(rc_sync['ops'].items()))}; "
        f"{rc_sync['lines']} request lines in moto's log; {rc_sync['secs']:.2f} s); a 1-minute cron runs it once a minute. "
        f"A no-change `rclone copy A moto:bench-rc` (the writing node's push) sent {rc_copy['total']} "
        f"({', '.join(f'{k} {v}' for k, v in sorted(rc_copy['ops'].items()))}).")
    say("")
    say("| node | propagation | requests per node per idle minute | **ratio rclone / clawboard** |")
    say("|---|---|---:|---:|")
    say(f"| rclone cron, `rclone sync` every minute (baseline) | <= 1 min + run | {rc_sync['total']:.2f} | 1.00 |")
    say(f"| rclone cron, `rclone copy` + `rclone sync` every minute | <= 1 min + run | {rc_sync['total'] + rc_copy['total']:.2f} | - |")
    say(f"| clawboard default (`*/5 * * * *`, heartbeat 30s), estimate incl. one run / 5 min | <= 5 min | {cb_default:.2f} | "
        f"**{rc_sync['total'] / cb_default:.2f}** |" if cb_default else "| clawboard default | - | 0 | - |")
    say(f"| clawboard, schedule every minute (estimate: heartbeats of the window + one run a minute) | <= 1 min | "
        f"{cb_every_min:.2f} | **{rc_sync['total'] / cb_every_min:.2f}** |" if cb_every_min else "| clawboard every minute | - | 0 | - |")
    say("")
    say("Whole-bucket (or other-prefix) listings while idle: " + ("none" if not bad else f"**{bad}**"))
    say("")
    say(f"Command: `{os.environ.get('CMD_ENV', '')}scripts/bench/multinode.sh`")
    status = 0 if not bad else 1
finally:
    for name, p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill(); p.wait()
    lines = digest()
    say("")
    say("Daemon log warnings and errors:" if lines else "Daemon logs: no warnings or errors.")
    for l in lines:
        say(l)
    if KEEP:
        say(f"kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
sys.exit(status)
PY

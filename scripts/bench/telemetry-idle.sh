#!/usr/bin/env bash
# An idle daemon with telemetry off and on (to TELEMETRY, an OTLP endpoint, e.g.
# the one `scripts/phoenix start` prints): the context switches of each of its
# threads over IDLE seconds (default 60) on an initialized, empty tree, after a
# settle of 5 s; the exporter's thread is `otlp-export`. One JSON object per
# daemon on stdout.
#
#   TELEMETRY=http://127.0.0.1:6006 scripts/bench/telemetry-idle.sh
#   CLAWBOARD_BIN=target/release/clawboard IDLE=120 TELEMETRY=… scripts/bench/telemetry-idle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
CLAWBOARD_BIN=${CLAWBOARD_BIN:-$PWD/target/release/clawboard}
IDLE=${IDLE:-60}
[ -n "${TELEMETRY:-}" ] || { echo "telemetry-idle.sh: set TELEMETRY to an OTLP endpoint" >&2; exit 2; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/telemetry-idle.XXXXXX")
trap 'kill "${PID:-}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# Context switches (voluntary + involuntary) by thread name, summed.
switches() {
    python3 - "$1" <<'PY'
import json, sys
from pathlib import Path
out = {}
for t in Path(f"/proc/{sys.argv[1]}/task").iterdir():
    try:
        fields = dict(l.split(":\t", 1) for l in (t / "status").read_text().splitlines() if ":\t" in l)
    except OSError:
        continue
    name = fields["Name"].strip()
    n = int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])
    out[name] = out.get(name, 0) + n
print(json.dumps(out))
PY
}

for mode in off on; do
    root="$WORK/$mode"
    "$CLAWBOARD_BIN" --root "$root" init > /dev/null
    : > "$WORK/$mode.toml"
    [ "$mode" = on ] && printf '[telemetry]\notlp_endpoint = "%s"\n' "$TELEMETRY" > "$WORK/$mode.toml"
    "$CLAWBOARD_BIN" --root "$root" --config "$WORK/$mode.toml" daemon > "$WORK/$mode.log" 2>&1 &
    PID=$!
    sleep 5
    before=$(switches "$PID")
    sleep "$IDLE"
    after=$(switches "$PID")
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
    python3 - "$mode" "$IDLE" "$before" "$after" <<'PY'
import json, sys
mode, idle, a, b = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
per = {k: b.get(k, 0) - a.get(k, 0) for k in sorted(set(a) | set(b))}
print(json.dumps({"telemetry": mode, "idle_s": idle, "switches_total": sum(per.values()),
                  "otlp_export_thread": per.get("otlp-export"), "by_thread": per}))
PY
done

# Sourced by blueprint-steps.sh and daemon-steps.sh: a daemon running the
# bench_linear blueprint, and its tasks. Needs CLAWBOARD_BIN.

# start_daemon CONFIG ROOT LOG: inits ROOT, starts a daemon on it logging the
# engine's step lines (debug) and info to LOG, sets DAEMON_PID, and returns once
# it is ready (10 s at most). DAEMON_LOG adds directives to the log filter, e.g.
# DAEMON_LOG=clawboard::daemon=debug.
start_daemon() {
    local config=$1 root=$2 log=$3
    "$CLAWBOARD_BIN" --config "$config" --root "$root" init >/dev/null
    CLAWBOARD_LOG=clawboard_roles::engine::call=debug,info${DAEMON_LOG:+,$DAEMON_LOG} \
        "$CLAWBOARD_BIN" --config "$config" --root "$root" daemon >"$log" 2>&1 &
    DAEMON_PID=$!
    for _ in $(seq 100); do
        grep -q "daemon ready" "$log" && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        sleep 0.1
    done
    echo "the daemon did not start:" >&2
    cat "$log" >&2
    return 1
}

# run_task ROOT N LOG [QUIET]: drops the `writing` task bench-N (blueprint
# bench_linear) into ROOT's inbox and returns once its task.json says completed
# (15 s at most). It polls every 10 ms, a `grep` and a `sleep` each time: two
# processes started beside the daemon's steps. With QUIET (seconds, e.g. 0.2)
# it first sleeps that long in one `sleep` started at the drop, so that no
# process of the harness starts while the task's steps run (they start ~20 ms
# after the drop and take ~15 ms), as the other systems' harnesses, which block
# on a pipe or a wait.
run_task() {
    local root=$1 n=$2 log=$3 quiet=${4:-}
    # Written beside the tree, not in it, then renamed in: the inbox sees a whole file.
    local tmp
    tmp="$(dirname "$root")/drop.tmp"
    printf '{"taskId":"bench-%s","type":"writing","description":"bench","blueprint_id":"bench_linear","user_input":{"topic":"bench","platform":"general"}}' \
        "$n" >"$tmp"
    mv "$tmp" "$root/inbox/bench-$n.json"
    [ -z "$quiet" ] || sleep "$quiet"
    for _ in $(seq 1500); do
        grep -q '"status": "completed"' "$root/tasks/bench-$n/task.json" 2>/dev/null && return 0
        sleep 0.01
    done
    echo "task bench-$n did not complete in 15 s" >&2
    tail -20 "$log" >&2
    return 1
}

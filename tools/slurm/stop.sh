#!/usr/bin/env bash
# Stop the Slurm cluster that tools/slurm/start.sh started: cancel its jobs, then stop its
# daemons by the pids it recorded, newest first (SIGTERM, then SIGKILL after 20 s).
#
#   tools/slurm/stop.sh [STATE_DIR]      # STATE_DIR defaults to /tmp/dlrm-multiepoch-slurm
#
# Safe to call twice, or after a start that failed halfway.
set -uo pipefail

STATE=${1:-${SLURM_STATE_DIR:-/tmp/dlrm-multiepoch-slurm}}
[ -s "$STATE/pids" ] || { echo "no Slurm started from $STATE"; exit 0; }
export SLURM_CONF=$STATE/slurm.conf

alive() { kill -0 "$1" 2>/dev/null; }

# Jobs first, while slurmd can still end their processes.
if jobs=$(timeout 10 squeue -h -o %A 2>/dev/null) && [ -n "$jobs" ]; then
    timeout 10 scancel $jobs 2>/dev/null
    for _ in $(seq 30); do
        [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
        sleep 1
    done
fi

tac "$STATE/pids" | while read -r name pid; do
    alive "$pid" || continue
    kill -TERM "$pid"
    for _ in $(seq 200); do alive "$pid" || break; sleep 0.1; done
    if alive "$pid"; then echo "$name (pid $pid) ignored SIGTERM; killing it"; kill -KILL "$pid"; fi
    echo "stopped $name (pid $pid)"
done
: > "$STATE/pids"

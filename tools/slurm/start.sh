#!/usr/bin/env bash
# Start a throwaway Slurm cluster with accounting on this machine (for `make test-cluster`).
#
#   tools/slurm/start.sh [STATE_DIR]           # as root; STATE_DIR defaults to /tmp/dlrm-multiepoch-slurm
#   export SLURM_CONF=STATE_DIR/slurm.conf     # then sbatch, sacct, torchx -s slurm use it
#   tools/slurm/stop.sh [STATE_DIR]            # stops every daemon this script started
#
# Debian's packages (slurm-wlm munge slurmdbd mariadb-server; installed here with apt-get
# when missing). No systemd: the daemons run in the foreground of background shells and
# their pids go to STATE_DIR/pids, which stop.sh reads. Started, in this order:
#   munged     (as user munge; skipped when a munged already answers on its socket)
#   mariadbd   (its own data folder under STATE_DIR, on 127.0.0.1:$DB_PORT only)
#   slurmdbd   (accounting: TorchX reads job states with `sacct`)
#   slurmctld  and two slurmd: nodes $(hostname -s) (partition `debug`) and localhost (`multi` = both)
# The config lives in STATE_DIR (from slurm.conf.in and slurmdbd.conf.in beside this
# script), never in /etc/slurm, so a real cluster's config on the machine is left alone.
set -euo pipefail

STATE=${1:-${SLURM_STATE_DIR:-/tmp/dlrm-multiepoch-slurm}}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
# Ports away from Slurm's and MariaDB's defaults, so a real installation can coexist.
CTLD_PORT=${SLURM_CTLD_PORT:-16817}
DBD_PORT=${SLURM_DBD_PORT:-16819}
SLURMD_PORT1=16818
SLURMD_PORT2=16820
DB_PORT=${SLURM_DB_PORT:-13306}

die() { echo "tools/slurm/start.sh: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (slurmd starts jobs as their user; munged and mariadbd drop to their own users)"

need=(munged munge unmunge mariadbd mariadb-install-db mariadb slurmdbd slurmctld slurmd sbatch sacct sacctmgr sinfo)
missing=()
for cmd in "${need[@]}"; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get >/dev/null || die "missing ${missing[*]}; install Debian's ${PACKAGES[*]} (or your distribution's equivalents)"
    echo "installing ${PACKAGES[*]} (missing: ${missing[*]})"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PACKAGES[@]}" >/dev/null
fi

if [ -s "$STATE/pids" ]; then
    while read -r name pid; do
        kill -0 "$pid" 2>/dev/null && die "$name (pid $pid) from an earlier start is still running: tools/slurm/stop.sh $STATE"
    done < "$STATE/pids"
fi
rm -rf "$STATE"
mkdir -p "$STATE/log" "$STATE/slurmctld"
chmod 755 "$STATE"
: > "$STATE/pids"

# Whatever fails below, stop what was already started.
trap '"$HERE/stop.sh" "$STATE" >/dev/null 2>&1 || true; echo "start failed; logs in $STATE/log" >&2' ERR

# Start "$@" in the background in a session of its own, so that a Ctrl-C meant for the
# tests (SIGINT to the terminal's process group) does not stop the daemons before
# stop.sh has cancelled their jobs; record its pid under NAME (setsid execs: same pid).
spawn() {
    local name=$1; shift
    setsid "$@" > "$STATE/log/$name.out" 2>&1 < /dev/null &
    echo "$name $!" >> "$STATE/pids"
}

# Poll CMD until it succeeds, for at most 30 s; else show NAME's log and fail.
wait_for() {
    local name=$1; shift
    for _ in $(seq 300); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    echo "$name did not come up; the end of its log:" >&2
    tail -n 20 "$STATE/log/$name"* >&2 || true
    return 1
}

fill() {  # the template $1 with this cluster's values
    sed -e "s|@STATE@|$STATE|g" -e "s|@HOST@|$(hostname -s)|g" -e "s|@CPUS@|$(nproc)|g" \
        -e "s|@MEM_MB@|$MEM_MB|g" -e "s|@CTLD_PORT@|$CTLD_PORT|g" -e "s|@DBD_PORT@|$DBD_PORT|g" \
        -e "s|@SLURMD_PORT1@|$SLURMD_PORT1|g" -e "s|@SLURMD_PORT2@|$SLURMD_PORT2|g" -e "s|@DB_PORT@|$DB_PORT|g" "$1"
}
# Each node offers half the machine's memory: two nodes never promise more than it has.
MEM_MB=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) / 2 ))
fill "$HERE/slurm.conf.in" > "$STATE/slurm.conf"
fill "$HERE/slurmdbd.conf.in" > "$STATE/slurmdbd.conf"
chmod 600 "$STATE/slurmdbd.conf"  # slurmdbd refuses a config others can read (it holds the DB password)
export SLURM_CONF=$STATE/slurm.conf  # slurmdbd finds slurmdbd.conf beside it

# munge: authentication between every Slurm daemon and command.
munge_ok() { munge -n < /dev/null | unmunge > /dev/null; }
if munge_ok 2>/dev/null; then
    echo "munged: already running, reused"
else
    [ -s /etc/munge/munge.key ] || { mungekey --create; chown munge:munge /etc/munge/munge.key; }
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
    spawn munged setpriv --reuid=munge --regid=munge --init-groups munged --foreground
    wait_for munged munge_ok
fi

# MariaDB for slurmdbd: a fresh data folder, TCP on localhost only, no /etc/mysql config.
install -d -o mysql -g mysql "$STATE/mysql"
mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/mysql" --auth-root-authentication-method=socket \
    --skip-test-db > "$STATE/log/mariadb-install.out" 2>&1
spawn mariadb mariadbd --no-defaults --user=mysql --datadir="$STATE/mysql" --socket="$STATE/mysql/mysqld.sock" \
    --port="$DB_PORT" --bind-address=127.0.0.1 --skip-name-resolve --pid-file="$STATE/mysql/mysqld.pid"
sql() { mariadb --no-defaults --socket="$STATE/mysql/mysqld.sock" -u root -e "$1"; }
wait_for mariadb sql "SELECT 1"
sql "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"

spawn slurmdbd slurmdbd -D
wait_for slurmdbd sacctmgr -i show cluster
sacctmgr -i add cluster dlrm > /dev/null

spawn slurmctld slurmctld -D -c -f "$SLURM_CONF"
wait_for slurmctld scontrol ping
spawn slurmd-1 slurmd -D -f "$SLURM_CONF" -N "$(hostname -s)"
spawn slurmd-2 slurmd -D -f "$SLURM_CONF" -N localhost
nodes_idle() { [ "$(sinfo -h -N -p multi -o %T | sort -u)" = idle ]; }
wait_for slurmd nodes_idle

trap - ERR
echo "Slurm is up ($(sinfo -h -o '%P %D %c' | tr '\n' ';' | sed 's/;$//' | sed 's/;/; /g') [partition nodes cpus])."
echo "export SLURM_CONF=$SLURM_CONF    # stop: tools/slurm/stop.sh $STATE"

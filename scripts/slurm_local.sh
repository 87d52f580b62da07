#!/usr/bin/env bash
# A one-node Slurm on localhost for the tests and CI: Debian's slurm-wlm and munge, with
# munged, slurmctld and slurmd running as root and their configuration, state, logs and
# pid files in one directory. Stopping kills exactly the pids recorded there. Given nodes
# (OSU_DL_BENCH_SLURM_NODES) and a command that runs a program on one
# (OSU_DL_BENCH_SLURM_NODE_EXEC), it runs one slurmd per node instead: scripts/cluster_local.sh
# starts its cluster's Slurm that way.
#
# usage: scripts/slurm_local.sh install|start|stop|status|env
#   install  apt-get install slurm-wlm, munge and libpmix-dev, unless already here
#   start    write slurm.conf and cgroup.conf, start the daemons (reusing running ones) and
#            wait until the node takes jobs
#   stop     kill the daemons by the pids in their pid files
#   status   the daemons' pids and the node as sinfo sees it (exit 1 if one is down)
#   env      the SLURM_CONF line for `eval "$(scripts/slurm_local.sh env)"`
# environment:
#   OSU_DL_BENCH_SLURM_DIR   state directory (default /tmp/osu-dl-bench-slurm)
#   OSU_DL_BENCH_SLURM_CPUS  CPUs the node announces (default 8)
#   OSU_DL_BENCH_SLURM_NODES      nodes as NAME=ADDRESS words (default localhost=127.0.0.1)
#   OSU_DL_BENCH_SLURM_NODE_EXEC  command prefix that runs a program on NODE, given NODE
#                                 first (default: none, every slurmd runs here)
#   OSU_DL_BENCH_SLURM_CTLD_ADDR  the address slurmctld listens at (default: localhost)
#   OSU_DL_BENCH_SLURM_CTLD_PORT  its port (default 6817)
set -euo pipefail

STATE=${OSU_DL_BENCH_SLURM_DIR:-/tmp/osu-dl-bench-slurm}
# More CPUs than the 2 real cores, so a 4- or 8-rank job fits: with config_overrides
# slurmd accepts the configured CPUs instead of draining the node for the mismatch.
CPUS=${OSU_DL_BENCH_SLURM_CPUS:-8}
CONF="$STATE/slurm.conf"
# Client commands (sbatch, srun, sinfo) read /etc/slurm/slurm.conf unless SLURM_CONF says
# otherwise; the link lets them work without it, and is made only where nothing else is.
SYSTEM_CONF=/etc/slurm/slurm.conf
START_TIMEOUT=${OSU_DL_BENCH_SLURM_START_TIMEOUT:-60}
read -r -a NODES <<<"${OSU_DL_BENCH_SLURM_NODES:-localhost=127.0.0.1}"
read -r -a NODE_EXEC <<<"${OSU_DL_BENCH_SLURM_NODE_EXEC:-}"
CTLD_ADDR=${OSU_DL_BENCH_SLURM_CTLD_ADDR:-}
CTLD_PORT=${OSU_DL_BENCH_SLURM_CTLD_PORT:-6817}

log() { echo "slurm_local: $*" >&2; }

die() {
    log "error: $*"
    exit 1
}

pid_file() { echo "$STATE/$1.pid"; }

# A daemon's key names its pid file: munged, slurmctld, slurmd-NODE (one per node).
daemon_keys() {
    local item
    echo munged
    echo slurmctld
    for item in "${NODES[@]}"; do echo "slurmd-${item%%=*}"; done
}

running_pid() {
    # The daemon's pid if its pid file names a live process of that name, else nothing:
    # after a crash the pid may since belong to an unrelated process, never to be killed.
    local file pid
    file=$(pid_file "$1")
    [[ -s $file ]] || return 1
    pid=$(<"$file")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "${1%%-*}" ]] || return 1
    echo "$pid"
}

# libpmix-dev: Slurm's mpi/pmix plugin opens the unversioned libpmix.so, which Open MPI 5's
# ranks need under srun (--mpi=pmix; the mpich wheel uses pmi2 and needs none).
PACKAGES=(slurm-wlm munge libpmix-dev)

cmd_install() {
    if command -v sbatch >/dev/null && command -v slurmctld >/dev/null &&
        command -v slurmd >/dev/null && command -v munged >/dev/null &&
        { ! command -v dpkg >/dev/null || dpkg -s libpmix-dev >/dev/null 2>&1; }; then
        log "slurm-wlm, munge and libpmix-dev are installed"
        return
    fi
    [[ $(id -u) == 0 ]] || die "installing ${PACKAGES[*]} needs root (apt-get)"
    command -v apt-get >/dev/null || die "no apt-get: install ${PACKAGES[*]} yourself"
    log "installing ${PACKAGES[*]} with apt-get"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${PACKAGES[@]}" >/dev/null
}

write_munge_key() {
    # A key of our own, readable only by root (munged refuses looser permissions).
    local key="$STATE/munge/munge.key"
    [[ -s $key ]] && return
    if [[ -r /etc/munge/munge.key ]]; then
        cp /etc/munge/munge.key "$key"
    else
        dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    fi
    chmod 0400 "$key"
}

node_lines() {
    # NodeName lines and the partition's node list.
    local item names=()
    for item in "${NODES[@]}"; do
        [[ $item =~ ^[A-Za-z0-9-]+=[0-9.]+$ ]] || die "node '$item': expected NAME=ADDRESS"
        echo "NodeName=${item%%=*} NodeAddr=${item#*=} CPUs=$CPUS State=UNKNOWN"
        names+=("${item%%=*}")
    done
    local IFS=,
    echo "PartitionName=debug Nodes=${names[*]} Default=YES MaxTime=INFINITE State=UP"
}

controller() {
    # slurmctld checks that it runs on the host SlurmctldHost names.
    if [[ -n $CTLD_ADDR ]]; then
        echo "$(hostname -s)($CTLD_ADDR)"
    else
        echo localhost
    fi
}

write_config() {
    mkdir -p "$STATE/munge" "$STATE/ctld" "$STATE/spool"
    for item in "${NODES[@]}"; do mkdir -p "$STATE/tmp/${item%%=*}"; done
    chmod 0700 "$STATE/munge"
    write_munge_key
    cat >"$CONF" <<EOF
# Written by scripts/slurm_local.sh: ${#NODES[@]} node(s), daemons as root.
ClusterName=osudlbench
SlurmctldHost=$(controller)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.socket
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
StateSaveLocation=$STATE/ctld
# %n: each node's slurmd its own (slurm.conf(5)).
SlurmdSpoolDir=$STATE/spool/%n
# The nodes of scripts/cluster_local.sh share one /tmp, where Slurm's PMIx plugin makes
# each step's directory by the same name on every node: each node its own (%n).
TmpFS=$STATE/tmp/%n
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$STATE/slurmd-%n.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd-%n.log
# No cgroups: containers and CI runners rarely let a daemon manage them.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
# Finished jobs stay visible to scontrol for 10 minutes (no accounting database here).
MinJobAge=600
$(node_lines)
EOF
    cat >"$STATE/cgroup.conf" <<EOF
# Written by scripts/slurm_local.sh: the plugins above use no cgroups.
CgroupPlugin=autodetect
IgnoreSystemd=yes
EOF
}

link_system_config() {
    if [[ -L $SYSTEM_CONF || ! -e $SYSTEM_CONF ]]; then
        mkdir -p "$(dirname "$SYSTEM_CONF")"
        ln -sfn "$CONF" "$SYSTEM_CONF"
    elif [[ $(readlink -f "$SYSTEM_CONF") != "$CONF" ]]; then
        log "$SYSTEM_CONF is another cluster's: export SLURM_CONF=$CONF to use this one"
    fi
}

start_daemon() {
    # start_daemon NAME COMMAND...: run it unless its pid file names a live process.
    local name=$1 pid
    shift
    if pid=$(running_pid "$name"); then
        log "$name already running (pid $pid)"
        return
    fi
    rm -f "$(pid_file "$name")"
    "$@" || die "$name did not start: see $STATE/$name.log"
    for _ in $(seq 50); do
        running_pid "$name" >/dev/null && return
        sleep 0.1
    done
    die "$name wrote no pid file $(pid_file "$name"): see $STATE/$name.log"
}

wait_for_nodes() {
    local deadline=$((SECONDS + START_TIMEOUT)) states=""
    while ((SECONDS < deadline)); do
        states=$(SLURM_CONF=$CONF sinfo -h -N -o %T 2>/dev/null | sort -u | paste -sd, -)
        # Every node takes jobs once none is in another state than these.
        if [[ -n $states ]] && ! grep -qvE '^(idle|mixed|allocated)' <<<"${states//,/$'\n'}"; then
            return
        fi
        sleep 0.5
    done
    die "nodes are '${states:-unknown}' after ${START_TIMEOUT}s, not idle: see $STATE/*.log"
}

all_running() {
    local key
    for key in $(daemon_keys); do
        running_pid "$key" >/dev/null || return 1
    done
}

cmd_start() {
    command -v slurmctld >/dev/null || die "slurmctld not found: run '$0 install' first"
    # Running daemons keep the configuration they read: rewrite it only for new ones.
    all_running || write_config
    export SLURM_CONF=$CONF
    start_daemon munged munged --socket="$STATE/munge/munge.socket" \
        --key-file="$STATE/munge/munge.key" --pid-file="$(pid_file munged)" \
        --log-file="$STATE/munged.log" --seed-file="$STATE/munge/munged.seed" --force
    # -c: a fresh controller forgets jobs of an earlier run instead of recovering them.
    start_daemon slurmctld slurmctld -c -f "$CONF"
    local item node
    for item in "${NODES[@]}"; do
        node=${item%%=*}
        # The host's name is not the node's, so name the node explicitly.
        mkdir -p "$STATE/spool/$node"
        start_daemon "slurmd-$node" "${NODE_EXEC[@]}" ${NODE_EXEC:+"$node"} \
            slurmd -N "$node" -f "$CONF"
    done
    [[ -n $CTLD_ADDR ]] || link_system_config
    wait_for_nodes
    log "ready: ${#NODES[@]} node(s) with $CPUS CPUs each, partition debug; state in $STATE"
}

cmd_stop() {
    # Every daemon with a pid file here, nodes' slurmds first, so a crashed start that
    # recorded fewer or other nodes is stopped all the same.
    local key pid file keys=()
    for file in "$STATE"/slurmd*.pid "$STATE/slurmctld.pid" "$STATE/munged.pid"; do
        [[ -e $file ]] && keys+=("$(basename "$file" .pid)")
    done
    for key in "${keys[@]}"; do
        pid=$(running_pid "$key") || continue
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
        log "stopped $key (pid $pid)"
    done
    if [[ -L $SYSTEM_CONF && $(readlink "$SYSTEM_CONF") == "$CONF" ]]; then
        rm -f "$SYSTEM_CONF"
    fi
}

cmd_status() {
    local name pid down=0
    for name in $(daemon_keys); do
        if pid=$(running_pid "$name"); then
            echo "$name running (pid $pid)"
        else
            echo "$name not running"
            down=1
        fi
    done
    SLURM_CONF=$CONF sinfo -N -o "%N %T %c" 2>/dev/null || echo "sinfo: no answer"
    return "$down"
}

case ${1:-} in
install) cmd_install ;;
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
env) echo "export SLURM_CONF=$CONF" ;;
*)
    echo "usage: $0 install|start|stop|status|env" >&2
    exit 2
    ;;
esac

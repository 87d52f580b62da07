#!/usr/bin/env bash
# A cluster on one machine: N nodes, each a network namespace with its own hostname and
# IPC namespace, joined by veth pairs on a Linux bridge, every node's link shaped by tbf;
# MPICH's hydra, Open MPI's prterun and Slurm (one slurmd per node) start ranks on them.
# Everything `up` creates is recorded in a state file before it is created, so `down`
# removes exactly that, by name, also after a crash half-way through.
#
# usage: scripts/cluster_local.sh COMMAND
#   up [--nodes N] [--rate RATE] [--slow NODE=RATE] [--dry-run]   N nodes node1..nodeN
#            (default 4), links at RATE (default 1gbit; tc's units: 250mbit, 10gbit), NODE's
#            at its own; --dry-run prints the config it would write and creates nothing
#   down [--dry-run]   remove what up recorded (and stop the cluster's Slurm daemons);
#            --dry-run lists what it would remove and what it leaves alone
#   status   nodes, addresses, link rates and daemons (exit 1 if something is missing)
#   env      `export` lines for sweep, bench, train and the tests (eval "$(... env)")
#   exec NODE CMD...   run CMD (no shell) on NODE
#   mpiexec ARGS...    the embedded MPICH's mpiexec across the nodes (hosts, agent and
#            transport set): scripts/cluster_local.sh mpiexec -n 4 -ppn 2 osu-dl-bench ...
#   agent HOST CMD...  the ssh stand-in hydra and prterun call (as ssh: CMD joined, run by sh)
# environment:
#   OSU_DL_BENCH_CLUSTER_DIR     state directory (default /tmp/osu-dl-bench-cluster); it
#                                must be the caller's own directory (created mode 0700),
#                                never a symbolic link: root runs and deletes what it names
#   OSU_DL_BENCH_CLUSTER_NAME    prefix of namespace and interface names (default osudl)
#   OSU_DL_BENCH_CLUSTER_SUBNET  first three octets of the /24 (default 10.213.7)
#   OSU_DL_BENCH_CLUSTER_SLURM   0: no Slurm on the nodes (default: where Slurm is installed)
#   VENV                         the venv whose python and mpiexec run (default REPO/.venv)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
STATE=${OSU_DL_BENCH_CLUSTER_DIR:-/tmp/osu-dl-bench-cluster}
PREFIX=${OSU_DL_BENCH_CLUSTER_NAME:-osudl}
SUBNET=${OSU_DL_BENCH_CLUSTER_SUBNET:-10.213.7}
VENV=${VENV:-$REPO/.venv}
RECORD="$STATE/created"
CONFIG="$STATE/config"
AGENT="$STATE/agent"
NODE_EXEC="$STATE/exec"
SLURM_STATE="$STATE/slurm"
SLURM_READY="$STATE/slurm.ready"
# A different port from scripts/slurm_local.sh's one-node controller, so both can run.
SLURMCTLD_PORT=${OSU_DL_BENCH_CLUSTER_SLURMCTLD_PORT:-6827}
MAX_NODES=64
# tbf's bucket must hold a whole 64 KiB segment offload with its headers: at 64kb tbf
# split each one and a 16 MiB exchange between two nodes at 1gbit ran at ~64 MB/s each
# way, at 80kb at 115-119 MB/s (measured here). The price: after a pause, up to 80 KB
# pass unshaped. The queue holds 20 ms of traffic before tbf drops (tc-tbf(8)).
TBF_BURST=80kb
TBF_LATENCY=20ms

log() { echo "cluster_local: $*" >&2; }

die() {
    log "error: $*"
    exit 1
}

usage() {
    sed -n '8,/^set -euo/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

check_names() {
    # Names become interface names (15 bytes at most) and paths: letters and digits only.
    [[ $PREFIX =~ ^[a-z][a-z0-9]{0,5}$ ]] ||
        die "OSU_DL_BENCH_CLUSTER_NAME=$PREFIX: expected 1-6 lower-case letters or digits"
    [[ $SUBNET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] ||
        die "OSU_DL_BENCH_CLUSTER_SUBNET=$SUBNET: expected three octets, e.g. 10.213.7"
    [[ $STATE =~ ^/[A-Za-z0-9._/-]+$ ]] ||
        die "OSU_DL_BENCH_CLUSTER_DIR=$(printf %q "$STATE"): expected an absolute path without spaces"
    check_state_dir
}

check_state_dir() {
    # The state names what root runs (the agent) and deletes (links, namespaces, mounts):
    # a directory another local user made first, e.g. under a world-writable /tmp, would
    # let them choose both. Only the caller's own directory, never through a link.
    [[ -e $STATE || -L $STATE ]] || return 0
    [[ ! -L $STATE ]] || die "state directory $STATE is a symbolic link: refusing to use it"
    [[ -d $STATE ]] || die "state directory $STATE exists and is not a directory"
    local owner mode
    owner=$(stat -c %u -- "$STATE") mode=$(stat -c %a -- "$STATE")
    [[ $owner == "$(id -u)" ]] ||
        die "state directory $STATE belongs to uid $owner, not to you (uid $(id -u)): refusing to trust it (remove it, or set OSU_DL_BENCH_CLUSTER_DIR)"
    (((8#$mode & 8#022) == 0)) ||
        die "state directory $STATE is writable by others (mode $mode): refusing to trust it"
}

make_state_dir() {
    # Mode 0700 from the start (umask), not chmod after: no moment where others may write.
    [[ -d $STATE ]] || (umask 077 && mkdir -p -- "$STATE")
    check_state_dir
}

require_root() {
    # One message for what the cluster cannot do without: the tests skip with it.
    [[ $(id -u) == 0 ]] || die "needs root (network namespaces, veth, tc): run as root"
    local tool
    for tool in ip tc nsenter unshare; do
        command -v "$tool" >/dev/null || die "needs $tool (iproute2, util-linux)"
    done
    # Root in a container without CAP_SYS_ADMIN, or a kernel without namespaces.
    unshare --net --uts --ipc true 2>/dev/null ||
        die "cannot create network, UTS and IPC namespaces here (unshare --net --uts --ipc failed)"
}

netns() { echo "$PREFIX-$1"; }
address() { echo "$SUBNET.${1#node}"; }
bridge() { echo "$PREFIX-br"; }
host_veth() { echo "$PREFIX-v${1#node}"; }
node_dir() { echo "$STATE/nodes/$1"; }
bridge_address() { echo "$SUBNET.254"; }

record() {
    # record KIND NAME: written before the thing is made, once.
    grep -qxF "$1 $2" "$RECORD" 2>/dev/null || echo "$1 $2" >>"$RECORD"
}

declare -A CONFIG_VALUES=()

read_config() {
    # The config is data, never code: KEY=VALUE lines with known keys and checked values.
    CONFIG_VALUES=()
    [[ -e $CONFIG ]] || return 0
    local line key value number=0
    while IFS= read -r line || [[ -n $line ]]; do
        number=$((number + 1))
        [[ $line =~ ^([a-z_0-9]+)=(.*)$ ]] ||
            die "$CONFIG line $number: expected KEY=VALUE, got $(printf %q "$line")"
        key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
        case $key in
        nodes) valid_count "$value" ;;
        rate | slow_node[1-9] | slow_node[1-9][0-9]) valid_rate "$value" ;;
        *) false ;;
        esac || die "$CONFIG line $number: $(printf %q "$line") is not a setting up writes (rerun '$0 down' and 'up')"
        CONFIG_VALUES[$key]=$value
    done <"$CONFIG"
}

config_value() { echo "${CONFIG_VALUES[$1]:-}"; }

valid_count() { [[ $1 =~ ^[1-9][0-9]{0,2}$ ]] && (($1 <= MAX_NODES)); }

node_names() {
    local count i
    count=$(config_value nodes)
    [[ $count =~ ^[0-9]+$ ]] || return 1
    for ((i = 1; i <= count; i++)); do echo "node$i"; done
}

is_up() { [[ -n $(config_value nodes) ]]; }

valid_node() {
    # valid_node NAME: one of this cluster's nodes (so no other string reaches a path).
    local count
    count=$(config_value nodes)
    [[ $1 =~ ^node([1-9][0-9]*)$ ]] && ((BASH_REMATCH[1] <= count))
}

rate_of() {
    # The rate NODE's link is shaped to: its --slow rate, else the cluster's.
    local slow
    slow=$(config_value "slow_$1")
    echo "${slow:-$(config_value rate)}"
}

valid_rate() { [[ $1 =~ ^[0-9]{1,9}(\.[0-9]{1,9})?([kmgt]?bit|[kmgt]?bps)$ ]]; }

check_rate() {
    valid_rate "$1" || die "rate $(printf %q "$1"): expected tc's form, e.g. 1gbit, 250mbit"
}

# --- up -----------------------------------------------------------------------------------

need_value() {
    # need_value OPTION ARGS...: one message naming OPTION when no value follows it.
    (($# >= 2)) && [[ $2 != --* ]] || die "up: $1 needs a value (e.g. $1 $(option_example "$1"))"
}

option_example() {
    case $1 in
    --nodes) echo 2 ;;
    --rate) echo 1gbit ;;
    *) echo node2=250mbit ;;
    esac
}

parse_up() {
    NODES=4 RATE=1gbit DRY_RUN=0
    SLOW=()
    local raw=()
    while (($#)); do
        case $1 in
        --nodes | --rate | --slow) need_value "$@" ;;&
        --nodes) NODES=$2 ;;
        --rate) RATE=$2 ;;
        --slow) raw+=("$2") ;;
        --dry-run) DRY_RUN=1 ;;
        *) die "up: unknown argument $(printf %q "$1") (expected --nodes N, --rate RATE, --slow NODE=RATE, --dry-run)" ;;
        esac
        [[ $1 == --dry-run ]] && shift || shift 2
    done
    valid_count "$NODES" || die "--nodes $(printf %q "$NODES"): expected 1..$MAX_NODES"
    check_rate "$RATE"
    local item number rate
    for item in "${raw[@]}"; do
        [[ $item =~ ^node([0-9]+)=(.+)$ ]] ||
            die "--slow $(printf %q "$item"): expected NODE=RATE, e.g. node2=250mbit"
        number=${BASH_REMATCH[1]} rate=${BASH_REMATCH[2]}
        # node02 is node2: the digits are decimal (bash reads 08 as a bad octal number).
        [[ $number =~ ^0*([1-9][0-9]{0,2})$ ]] && ((10#${BASH_REMATCH[1]} <= NODES)) ||
            die "--slow $(printf %q "$item"): no such node (the nodes are node1..node$NODES)"
        number=$((10#${BASH_REMATCH[1]}))
        check_rate "$rate"
        SLOW+=("node$number=$rate")
    done
}

config_lines() {
    # The settings of the parsed command line, as the config holds them.
    local item
    echo "nodes=$NODES"
    echo "rate=$RATE"
    for item in "${SLOW[@]}"; do echo "slow_${item%%=*}=${item#*=}"; done
}

write_config() {
    config_lines >"$CONFIG.new"
    mv "$CONFIG.new" "$CONFIG"
}

make_bridge() {
    local br
    br=$(bridge)
    record link "$br"
    ip link show "$br" >/dev/null 2>&1 || ip link add "$br" type bridge
    ip addr replace "$(bridge_address)/24" dev "$br"
    ip link set "$br" up
}

make_node() {
    # The node's network namespace, its veth pair on the bridge, and persistent UTS and IPC
    # namespaces (bind-mounted on files) that give it a hostname and System V IPC of its own.
    local node=$1 ns veth dir
    ns=$(netns "$node") veth=$(host_veth "$node") dir=$(node_dir "$node")
    record netns "$ns"
    ip netns list | grep -qE "^$ns( |$)" || ip netns add "$ns"
    record link "$veth"
    if ! ip link show "$veth" >/dev/null 2>&1; then
        ip link add "$veth" type veth peer name "$PREFIX-p${node#node}"
        ip link set "$PREFIX-p${node#node}" netns "$ns"
        ip -n "$ns" link set "$PREFIX-p${node#node}" name eth0
    fi
    ip link set "$veth" master "$(bridge)" up
    ip -n "$ns" addr replace "$(address "$node")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    mkdir -p "$dir"
    local kind
    for kind in uts ipc; do
        record mount "$dir/$kind"
        if ! mountpoint -q "$dir/$kind"; then
            touch "$dir/$kind"
            unshare "--$kind=$dir/$kind" true
        fi
    done
    nsenter "--uts=$dir/uts" hostname "$node"
}

shape_node() {
    # Both directions of the node's link: what it sends leaves through its eth0, what it
    # receives through the bridge's end of its pair.
    local node=$1 rate
    rate=$(rate_of "$node")
    tc -n "$(netns "$node")" qdisc replace dev eth0 root tbf rate "$rate" \
        burst "$TBF_BURST" latency "$TBF_LATENCY"
    tc qdisc replace dev "$(host_veth "$node")" root tbf rate "$rate" \
        burst "$TBF_BURST" latency "$TBF_LATENCY"
}

write_wrapper() {
    # write_wrapper FILE SUBCOMMAND: a program that runs this script's SUBCOMMAND.
    printf '#!/usr/bin/env bash\nexec bash %q %q "$@"\n' "$HERE/cluster_local.sh" "$2" >"$1.new"
    chmod 0755 "$1.new"
    mv "$1.new" "$1"
}

slurm_wanted() {
    [[ ${OSU_DL_BENCH_CLUSTER_SLURM:-1} != 0 ]] && command -v slurmd >/dev/null &&
        command -v slurmctld >/dev/null && command -v munged >/dev/null
}

slurm_local() {
    # scripts/slurm_local.sh, pointed at this cluster's nodes and state.
    local nodes=() node
    for node in $(node_names); do nodes+=("$node=$(address "$node")"); done
    OSU_DL_BENCH_SLURM_DIR=$SLURM_STATE \
        OSU_DL_BENCH_SLURM_NODES="${nodes[*]}" \
        OSU_DL_BENCH_SLURM_CTLD_ADDR=$(bridge_address) \
        OSU_DL_BENCH_SLURM_CTLD_PORT=$SLURMCTLD_PORT \
        OSU_DL_BENCH_SLURM_NODE_EXEC=$NODE_EXEC \
        OSU_DL_BENCH_SLURM_CPUS=${OSU_DL_BENCH_SLURM_CPUS:-4} \
        bash "$HERE/slurm_local.sh" "$@"
}

cmd_up() {
    parse_up "$@"
    check_names
    if ((DRY_RUN)); then
        config_lines
        return
    fi
    require_root
    read_config
    if is_up && [[ $(config_value nodes) != "$NODES" ]]; then
        die "a cluster of $(config_value nodes) nodes is up: run '$0 down' first"
    fi
    make_state_dir
    touch "$RECORD"
    write_config
    read_config
    make_bridge
    local node
    for node in $(node_names); do
        make_node "$node"
        shape_node "$node"
    done
    # hydra's -launcher-exec and prterun's plm_ssh_agent take one program; so does
    # slurm_local.sh's node command.
    write_wrapper "$AGENT" agent
    write_wrapper "$NODE_EXEC" exec
    if slurm_wanted; then
        record slurm "$SLURM_STATE"
        rm -f "$SLURM_READY"
        # Best effort, as in CI: the nodes serve hydra and prterun without it.
        if slurm_local start; then
            touch "$SLURM_READY"
        else
            log "Slurm did not start on the nodes (see $SLURM_STATE/*.log): no srun here"
            slurm_local stop || true
        fi
    else
        log "no Slurm on the nodes (not installed, or OSU_DL_BENCH_CLUSTER_SLURM=0)"
    fi
    log "up: $NODES nodes at $RATE${SLOW[*]:+ (${SLOW[*]})}; state in $STATE"
}

# --- down ---------------------------------------------------------------------------------

owned_record() {
    # owned_record KIND NAME: a name this cluster makes (its prefix, its state directory),
    # so a record another hand wrote cannot make down delete someone else's link.
    local node='node[1-9][0-9]{0,2}'
    case $1 in
    link) [[ $2 =~ ^$PREFIX-(br|v[1-9][0-9]{0,2})$ ]] ;;
    netns) [[ $2 =~ ^$PREFIX-$node$ ]] ;;
    mount) [[ ${2#"$STATE/nodes/"} != "$2" && ${2#"$STATE/nodes/"} =~ ^$node/(uts|ipc)$ ]] ;;
    slurm) [[ $2 == "$SLURM_STATE" ]] ;;
    *) false ;;
    esac
}

remove_recorded() {
    # remove_recorded KIND NAME: one recorded thing, if it is still there.
    case $1 in
    slurm) [[ -d $2 ]] && OSU_DL_BENCH_SLURM_DIR=$2 bash "$HERE/slurm_local.sh" stop ;;
    mount) mountpoint -q "$2" && umount "$2" ;;
    netns)
        ip netns list | grep -qE "^$2( |$)" || return 0
        # A node's processes end with it: a rank cut off from its job (a link set down)
        # spins on, and a deleted namespace's processes keep running without one.
        ip netns pids "$2" | xargs -r kill -9
        ip netns delete "$2"
        ;;
    link) ip link show "$2" >/dev/null 2>&1 && ip link delete "$2" ;;
    *) log "unknown record '$1 $2' left alone" ;;
    esac
    return 0
}

cmd_down() {
    local dry_run=0
    case ${1:-} in
    "") ;;
    --dry-run) dry_run=1 ;;
    *) die "down: unknown argument $(printf %q "$1") (expected --dry-run or nothing)" ;;
    esac
    check_names
    if [[ ! -e $RECORD ]]; then
        log "nothing recorded in $STATE: nothing to remove"
        return
    fi
    ((dry_run)) || require_root
    local lines=() i kind name
    mapfile -t lines <"$RECORD"
    # Newest first: daemons before namespaces, veths before their bridge.
    for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
        kind=${lines[i]%% *} name=${lines[i]#* }
        if ! owned_record "$kind" "$name"; then
            log "left alone: $(printf %q "${lines[i]}") (not a name this cluster makes)"
        elif ((dry_run)); then
            echo "would remove $kind $name"
        else
            remove_recorded "$kind" "$name"
        fi
    done
    if ((dry_run)); then return; fi
    rm -rf "$STATE/nodes" "$CONFIG" "$AGENT" "$NODE_EXEC" "$SLURM_READY" "$RECORD"
    log "down: removed what $STATE recorded"
}

# --- status, env, exec, agent, mpiexec ----------------------------------------------------

require_up() {
    check_names
    read_config
    is_up || die "no cluster is up (state $STATE): run '$0 up' first"
}

cmd_status() {
    require_up
    local node missing=0 ns
    echo "bridge $(bridge) $(bridge_address)/24"
    for node in $(node_names); do
        ns=$(netns "$node")
        if ip netns list | grep -qE "^$ns( |$)" && mountpoint -q "$(node_dir "$node")/uts"; then
            echo "$node $(address "$node") rate $(rate_of "$node") netns $ns"
        else
            echo "$node missing"
            missing=1
        fi
    done
    if [[ -e $SLURM_READY ]]; then
        slurm_local status || missing=1
    fi
    return "$missing"
}

cluster_variables() {
    # NAME=VALUE words of the environment a job on the cluster needs; env prints them
    # quoted, mpiexec exports them: neither evaluates them.
    CLUSTER_VARIABLES=(
        "OSU_DL_BENCH_HOSTS=$(node_names | paste -sd, -)"
        "OSU_DL_BENCH_LAUNCH_AGENT=$AGENT"
        "OSU_DL_BENCH_LAUNCH_ADDRESS=$(bridge_address)"
        # Where a stall report asks the nodes over the network (osu_dl_bench/jobs/links.py):
        # their names resolve inside the cluster's hydra only.
        "OSU_DL_BENCH_HOST_ADDRESSES=$(host_addresses)"
        "OSU_DL_BENCH_CLUSTER_RATE=$(config_value rate)"
        # MPICH: TCP through libfabric, so bytes between nodes cross the shaped links (UCX
        # would find the peer's shared memory: all nodes share /dev/shm).
        MPIR_CVAR_CH4_NETMOD=ofi
        FI_PROVIDER=tcp
        # MPI RMA without libfabric's: the shared-memory windows of shm and hierarchical
        # live until exit, and their registrations made MPI_Finalize fail (fabricclose:
        # resource busy).
        MPIR_CVAR_CH4_OFI_ENABLE_RMA=0
        UCX_TLS=tcp,self
        # Open MPI: TCP between nodes, shared memory within one; out-of-band over the bridge.
        OMPI_MCA_pml=ob1
        OMPI_MCA_btl=self,sm,tcp
        OMPI_MCA_btl_tcp_if_include=eth0
        "PRTE_MCA_oob_tcp_if_include=$SUBNET.0/24"
        # The nodes share this host's cores: no busy-polling shared-memory collectives.
        MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM=mpir
        MPIR_CVAR_BCAST_POSIX_INTRA_ALGORITHM=mpir
        MPIR_CVAR_REDUCE_POSIX_INTRA_ALGORITHM=mpir
        MPIR_CVAR_BARRIER_POSIX_INTRA_ALGORITHM=mpir
    )
    if [[ -e $SLURM_READY ]]; then
        # The file slurm_local.sh's `env` names (its state is $SLURM_STATE).
        CLUSTER_VARIABLES+=("SLURM_CONF=$SLURM_STATE/slurm.conf")
    fi
}

host_addresses() {
    local node words=()
    for node in $(node_names); do words+=("$node=$(address "$node")"); done
    (
        IFS=,
        echo "${words[*]}"
    )
}

cmd_env() {
    require_up
    cluster_variables
    local pair
    for pair in "${CLUSTER_VARIABLES[@]}"; do
        export_line "${pair%%=*}" "${pair#*=}"
    done
}

export_line() {
    # export_line NAME VALUE: plain where the value holds no character a shell acts on
    # (readers that split the line at '=' keep working), quoted by printf %q otherwise.
    if [[ $2 =~ ^[A-Za-z0-9_./,:=+@-]*$ ]]; then
        printf 'export %s=%s\n' "$1" "$2"
    else
        printf 'export %s=%q\n' "$1" "$2"
    fi
}

enter() {
    # enter NODE CMD...: CMD inside NODE's namespaces, in this directory and environment.
    local node=$1 dir
    shift
    valid_node "$node" || die "no node '$node' in this cluster ($(node_names | paste -sd' ' -))"
    dir=$(node_dir "$node")
    exec nsenter "--net=/run/netns/$(netns "$node")" "--uts=$dir/uts" "--ipc=$dir/ipc" -- "$@"
}

cmd_exec() {
    require_up
    (($# >= 2)) || die "exec: expected NODE CMD..."
    enter "$@"
}

cmd_agent() {
    # As ssh does: options before the host are skipped, the words after it are joined and
    # run by a shell on the node (prterun sends one shell command line).
    require_up
    while [[ ${1:-} == -* ]]; do
        case $1 in
        -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;;
        *) shift ;;
        esac
    done
    (($# >= 2)) || die "agent: expected HOST CMD..."
    local node=$1
    shift
    enter "$node" /bin/sh -c "$*"
}

cmd_mpiexec() {
    require_up
    cluster_variables
    local pair
    for pair in "${CLUSTER_VARIABLES[@]}"; do export "$pair"; done
    export PATH="$VENV/bin:$PATH"
    exec "$VENV/bin/python" -m osu_dl_bench.jobs.launch "$@"
}

case ${1:-} in
up) shift && cmd_up "$@" ;;
down) shift && cmd_down "$@" ;;
status) cmd_status ;;
env) cmd_env ;;
exec) shift && cmd_exec "$@" ;;
agent) shift && cmd_agent "$@" ;;
mpiexec) shift && cmd_mpiexec "$@" ;;
*) usage ;;
esac

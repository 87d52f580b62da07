# Shared by the scripts that write results/: source it, do not run it.
# load: the 1-, 5- and 15-minute load averages (whether the machine was quiet).
load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?"; }

with_command() {  # with_command FILE CMD...: FILE gets '# command: CMD' and CMD's output
    local file="$1"
    shift
    {
        echo "# command: $*"
        echo "# load before: $(load) on $(nproc) cores"
        "$@"
        echo "# load after: $(load)"
    } > "$file"
    echo "# wrote $file"
}

cluster() { bash scripts/cluster_local.sh "$@"; }

need_cluster() {  # need_cluster N: sets nodes to the up cluster's node count, or exits
    nodes=$(cluster env 2>/dev/null | sed -n 's/^export OSU_DL_BENCH_HOSTS=//p' | tr ',' '\n' | grep -c . || true)
    if ((nodes < $1)); then
        echo "bring a cluster of $1 nodes or more up first: bash scripts/cluster_local.sh up" >&2
        exit 1
    fi
}

use_cluster() {  # use_cluster N: the jobs that follow run over the up cluster's first N nodes
    need_cluster "$1"
    eval "$(cluster env)"
    OSU_DL_BENCH_HOSTS=$(seq -s, -f 'node%g' 1 "$1")
    export OSU_DL_BENCH_HOSTS  # mpiexec's ranks over these nodes, in blocks
}

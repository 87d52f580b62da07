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

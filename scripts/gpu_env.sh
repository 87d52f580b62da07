# Sourced by the GPU scripts (gpu_smoke.sh, gpu_run.sh) from the checkout's root: puts this
# checkout on PYTHONPATH (nothing installed) and, where the node lacks an MPI library or
# jsonschema, installs the carried wheels offline and puts them on every path that finds
# them; and gives both scripts run_step, which runs one step under a time limit.
# scripts/gpu_wheels.sh fetches the wheels into wheels/ where pip can download; here they are
# installed with pip --no-index --prefix into .gpu-deps/.
#
# Where pip --prefix puts files depends on the Python: a venv or upstream CPython uses
# DEPS/lib/python3.X/site-packages, DEPS/bin and DEPS/lib; Debian's and Ubuntu's system
# Python use DEPS/local/lib/python3.X/dist-packages, DEPS/local/bin and DEPS/local/lib (their
# sysconfig's posix_local scheme). So the folders are found by what lies in them: the
# packages (*.dist-info), mpiexec and libmpi.so.*; they go on PYTHONPATH, PATH,
# LD_LIBRARY_PATH and MPI4PY_LIBMPI (mpi4py's variable for where libmpi is: the node's
# Python lives in another prefix, where mpi4py would not look; mpi4py/_mpiabi.py). pip
# --target is no way out: it keeps the mpich wheel's bin/ but drops its lib/libmpi.so.*
# (pip moves only the package folder and the data folders outside lib/ into the target).
#
# Afterwards jsonschema, mpi4py's MPI (libmpi loaded) and mpiexec must be there: if one is
# not, the script says which and exits 1 (it is sourced: the calling script ends).
# Settings: PYTHON (default python3), WHEELS (default wheels), DEPS (default .gpu-deps),
# MPIEXEC (default mpiexec).
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-wheels}
DEPS=${DEPS:-.gpu-deps}
case $DEPS in /*) ;; *) DEPS=$PWD/$DEPS ;; esac
# What the carried wheels provide (typing-extensions only where the node lacks it).
CARRIED=(mpich jsonschema referencing jsonschema-specifications rpds-py attrs)

found_dir() { # found_dir FIND-ARGS...: the folder of the first match under $DEPS, or nothing
    local hit
    hit=$(find "$DEPS" "$@" -print -quit 2>/dev/null)
    [ -n "$hit" ] && dirname "$hit"
}
prepend() { # prepend VAR DIR: DIR first on the path list VAR, once
    case ":${!1:-}:" in
    *":$2:"*) ;;
    *) export "$1=$2${!1:+:${!1}}" ;;
    esac
}
use_deps() { # the install under $DEPS, if any, on every path that finds it
    local site bin lib
    site=$(found_dir -maxdepth 6 -name '*.dist-info')
    bin=$(found_dir -maxdepth 4 -name mpiexec)
    lib=$(found_dir -maxdepth 4 -name 'libmpi.so.*')
    [ -z "$site" ] || prepend PYTHONPATH "$site"
    [ -z "$bin" ] || prepend PATH "$bin"
    if [ -n "$lib" ]; then
        prepend LD_LIBRARY_PATH "$lib"
        export MPI4PY_LIBMPI="$lib"
    fi
}
missing_deps() { # what the GPU scripts need and cannot find, one name a line
    "$PYTHON" -c 'import jsonschema' >/dev/null 2>&1 || echo jsonschema
    "$PYTHON" -c 'from mpi4py import MPI' >/dev/null 2>&1 || echo "mpi4py's MPI library (libmpi)"
    command -v "${MPIEXEC:-mpiexec}" >/dev/null 2>&1 || echo "${MPIEXEC:-mpiexec}"
}
install_carried() { # pip install the carried wheels into $DEPS, offline
    local names=("${CARRIED[@]}")
    "$PYTHON" -c 'import typing_extensions' >/dev/null 2>&1 || names+=(typing-extensions)
    echo "gpu_env: installing the carried wheels from $WHEELS/ into $DEPS/ (offline)"
    "$PYTHON" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" \
        --prefix "$DEPS" "${names[@]}" || echo "gpu_env: pip install from $WHEELS/ failed" >&2
}

prepend PYTHONPATH "$PWD"
use_deps
missing=$(missing_deps)
if [ -n "$missing" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    install_carried
    use_deps
    missing=$(missing_deps)
fi
if [ -n "$missing" ]; then
    echo "gpu_env: missing after setup: $(paste -sd, - <<<"$missing" | sed 's/,/, /g')" \
        "(PYTHON=$PYTHON; wheels from $WHEELS/, installed into $DEPS/; scripts/gpu_wheels.sh" \
        "fetches the wheels where pip can download)" >&2
    exit 1
fi

# preflight_value FILE NAME: NAME's value in a report of scripts/gpu_preflight.py (its
# NAME=VALUE lines: gpus, the GPUs cupy sees, CUDA_VISIBLE_DEVICES honoured; share, whether
# ranks may share a GPU; aware; torch_ok; torch_cuda); empty where the report lacks it.
preflight_value() { sed -n "s/^$2=//p" "$1" | head -1; }

# gpu_ranks FILE: from the preflight report FILE, NP (NCCL: one rank per GPU) and MPI_NP
# (MPI algorithms: max(2, GPUs), two ranks sharing the GPU on a one-GPU node, unless the
# compute mode forbids sharing: then one per GPU, and MPI_CAPPED=1); a caller's own NP or
# MPI_NP is kept.
gpu_ranks() {
    local gpus share
    gpus=$(preflight_value "$1" gpus)
    share=$(preflight_value "$1" share)
    NP=${NP:-$gpus}
    MPI_NP=${MPI_NP:-$((gpus > 2 ? gpus : 2))}
    MPI_CAPPED=0
    if [ "$share" = no ] && [ "$MPI_NP" -gt "$gpus" ]; then
        MPI_NP=$gpus
        MPI_CAPPED=1
    fi
}

# A failed validation in a step's log: a 'Fail' cell of bench's table, or its error line.
VALIDATION_FAILED='(^|[[:space:]])Fail([[:space:]]|$)|DATA VALIDATION ERROR'

# run_step NAME LOG COMMAND...: run COMMAND under the caller's LIMIT (timeout SECONDS), its
# output in LOG after a '+ COMMAND' line. It passes if it exits 0 and LOG shows no failed
# validation. The caller's step_result NAME PASS|FAIL CODE LOG COMMAND... says what that
# means there (CODE: the exit code, 1 for a failed validation that exited 0, 124 for a
# step stopped at the limit); run_step returns CODE.
run_step() {
    local name=$1 log=$2 code
    shift 2
    echo "+ $*" >"$log"
    "${LIMIT[@]}" "$@" >>"$log" 2>&1
    code=$?
    if [ "$code" = 0 ] && grep -qE "$VALIDATION_FAILED" "$log"; then
        code=1
    fi
    if [ "$code" = 0 ]; then
        step_result "$name" PASS "$code" "$log" "$@"
    else
        step_result "$name" FAIL "$code" "$log" "$@"
    fi
    return "$code"
}

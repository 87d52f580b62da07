# Sourced by the GPU scripts (gpu_smoke.sh, gpu_run.sh) from the checkout's root: puts this
# checkout on PYTHONPATH (nothing installed) and, where the node lacks an MPI library or
# jsonschema, installs the carried wheels offline and puts them on every path that finds
# them; and gives both scripts run_step, which runs one step under a time limit. scripts/gpu_wheels.sh fetches the wheels into wheels/ where pip can download; here
# they are installed with pip --no-index into .gpu-deps/ and put on PYTHONPATH, PATH,
# LD_LIBRARY_PATH and MPI4PY_LIBMPI (mpi4py's variable for where libmpi is: the node's
# Python lives in another prefix, where mpi4py would not look).
# Settings: PYTHON (default python3), WHEELS (default wheels), DEPS (default .gpu-deps).
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-wheels}
DEPS=${DEPS:-.gpu-deps}
case $DEPS in /*) ;; *) DEPS=$PWD/$DEPS ;; esac
# What the carried wheels provide (typing-extensions only where the node lacks it).
CARRIED=(mpich jsonschema referencing jsonschema-specifications rpds-py attrs)

use_deps() { # the install under $DEPS, if any, on every path that finds it
    local site
    site=$(find "$DEPS" -type d -name site-packages -print -quit 2>/dev/null)
    [ -n "$site" ] || return 0
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export PATH="$DEPS/bin:$PATH"
    export LD_LIBRARY_PATH="$DEPS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export MPI4PY_LIBMPI="$DEPS/lib"
}
carried_present() { "$PYTHON" -c 'import jsonschema; from mpi4py import MPI' >/dev/null 2>&1; }

case ":${PYTHONPATH:-}:" in
*":$PWD:"*) ;;
*) export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" ;;
esac
case ":${PATH}:" in
*":$DEPS/bin:"*) ;;
*) use_deps ;;
esac
if ! carried_present && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    names=("${CARRIED[@]}")
    "$PYTHON" -c 'import typing_extensions' >/dev/null 2>&1 || names+=(typing-extensions)
    echo "gpu_env: installing the carried wheels from $WHEELS/ into $DEPS/ (offline)"
    "$PYTHON" -m pip install --quiet --no-index --no-deps --find-links "$WHEELS" \
        --prefix "$DEPS" "${names[@]}" || echo "gpu_env: pip install from $WHEELS/ failed" >&2
    use_deps
fi

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

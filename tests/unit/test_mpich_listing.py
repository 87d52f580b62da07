"""`list --library mpich`: MPICH's candidates in a job's shape, the layer each acts on and
where each runs other code than the default, the oversubscription setting's included."""

import os

import pytest

from osu_dl_bench.commands.listing import mpich_listing
from osu_dl_bench.errors import UsageError


def _row(text: str, candidate: str) -> str:
    return next(line for line in text.splitlines() if f"native:alg={candidate} " in line)


def test_on_one_node_p2_posix_and_compositions_run_other_code_mpir_does_not(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    text = mpich_listing("allreduce", 2, 1)
    assert _row(text, "posix_mpir").split()[2] == "posix"
    assert _row(text, "posix_mpir").endswith("8-16M")
    assert _row(text, "ch4_beta").endswith("8-16M")
    assert "nowhere: same path as the default" in _row(text, "mpir_ring")
    assert "nowhere: smp needs several nodes" in _row(text, "mpir_smp")
    assert "pinned" not in text.splitlines()[0]


def test_oversubscribed_the_posix_candidates_are_fixed_and_mpir_is_reached(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    text = mpich_listing("allreduce", 3, 1)
    assert "the POSIX layer is pinned to MPIR" in text.splitlines()[0]
    assert "oversubscription setting" in _row(text, "posix_mpir")
    assert _row(text, "mpir_ring").endswith("8-16M")


def test_a_posix_setting_from_the_environment_is_named_as_such(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setenv("MPIR_CVAR_ALLREDUCE_POSIX_INTRA_ALGORITHM", "mpir")
    text = mpich_listing("allreduce", 2, 2)
    assert "set in the environment: the POSIX layer is pinned" in text.splitlines()[0]


def test_on_two_nodes_mpir_decides_between_the_node_roots(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    text = mpich_listing("bcast", 4, 2)
    assert "mpir[node_roots]:binomial" in text
    assert _row(text, "mpir_scatter_ring_allgather").endswith("8-16M")


def test_the_sweep_names_each_unmeasured_library_candidate_on_its_own_line():
    from osu_dl_bench.jobs.progress import skipped_lines

    reason = "runs MPICH's default code at every size: ..."
    skipped = [
        {"collective": "allreduce", "algorithm": f"native:alg={alg}", "reason": reason}
        for alg in ("mpir_ring", "ch4_gamma")
    ]
    skipped.append({"collective": "allreduce", "algorithm": "ring:seg=64K", "reason": "x"})
    skipped.append({"collective": "allreduce", "algorithm": "ring:seg=1M", "reason": "x"})
    assert skipped_lines(2, skipped) == [
        f"# p=2 allreduce native:alg=mpir_ring: skipped: {reason}",
        f"# p=2 allreduce native:alg=ch4_gamma: skipped: {reason}",
        "# p=2 allreduce ring (2 variants): skipped: x",
    ]


def test_a_job_no_mpi_can_run_or_an_uneven_one_is_refused_in_one_line():
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands.list_cli import config_from_args

    def listed(*argv):
        return config_from_args(build_parser().parse_args(["list", "--library", "mpich", *argv]))

    assert (listed("--np", "4", "--nodes", "2").nprocs, listed("--np", "3").nodes) == (4, 1)
    for np, nodes in (("0", "1"), ("-3", "1"), ("3", "0"), ("2", "5"), ("3", "2"), ("abc", "1")):
        with pytest.raises(UsageError, match="--np|--nodes"):
            listed("--np", np, "--nodes", nodes)
    with pytest.raises(UsageError, match="--np"):
        listed("--np", str(2**31))  # MPI_Comm_size's int holds no more ranks

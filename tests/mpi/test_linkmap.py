"""bench linkmap under mpiexec on one host, nodes emulated with OSU_DL_BENCH_RANKS_PER_NODE
(the bytes cross shared memory, so nothing here is about speed: tests/mpi/test_cluster.py
shapes real links): every pair of nodes measured at odd and even node counts, the
record, and one message, never a hang, on bad input or a failing rank."""

from __future__ import annotations

import itertools
import json

import pytest
from mpirun import run_cli

# Short: 1 KiB windows, three cycles.
QUICK = ["bench", "linkmap", "-m", "1K", "--repetitions", "3"]


@pytest.mark.parametrize("nprocs,per_node", [(2, 1), (3, 1), (4, 1), (5, 1), (5, 2)])
def test_every_pair_of_nodes_is_measured_each_cycle_both_ways(tmp_path, nprocs, per_node):
    out = tmp_path / "map.json"
    env = {"OSU_DL_BENCH_RANKS_PER_NODE": str(per_node)}
    res = run_cli(nprocs, [*QUICK, "-o", str(out)], env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    nodes = -(-nprocs // per_node)
    record = json.loads(out.read_text())
    assert record["kind"] == "linkmap" and len(record["hosts"]) == nodes
    assert record["leaders"] == list(range(0, nprocs, per_node))
    ordered = {(link["source"], link["target"]) for link in record["links"]}
    hosts = record["hosts"]
    assert ordered == set(itertools.permutations(hosts, 2))
    assert {tuple(p["nodes"]) for p in record["pairs"]} == set(itertools.combinations(hosts, 2))
    for link in record["links"]:
        assert len(link["bandwidth_mbs"]["samples"]) == 3
        assert all(v > 0 for v in link["bandwidth_mbs"]["samples"])
    for pair in record["pairs"]:
        assert len(pair["latency_us"]["samples"]) == 3
    # Only rank 0 prints: one matrix of each, a row per node.
    assert res.stdout.count("# Bandwidth (MB/s") == 1 and res.stdout.count("# Latency (us") == 1
    rows = [line.split()[0] for line in res.stdout.splitlines() if line.split()[:1] == [hosts[0]]]
    assert len(rows) == 2
    assert "stand out" in res.stdout


@pytest.mark.parametrize(
    "nprocs,env,argv,message",
    [
        (2, {}, [], "MPI reports one node"),
        (1, {}, [], "MPI reports one node"),
        (3, {}, ["-m", "128M"], "sizes above 64M are refused"),
        (3, {}, ["--repetitions", "nan"], "expected a whole number from 1 to 10000"),
        (3, {}, ["-m", "1K:4K"], "expected one size"),
        (2, {"OSU_DL_BENCH_RANKS_PER_NODE": "x"}, [], "OSU_DL_BENCH_RANKS_PER_NODE='x'"),
    ],
)
def test_bad_input_gives_one_message_and_exit_2_everywhere(nprocs, env, argv, message):
    res = run_cli(nprocs, ["bench", "linkmap", *argv], env=env, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr
    assert res.stderr.count("osu-dl-bench: error:") == 1 and "Traceback" not in res.stderr


def test_a_failing_leader_aborts_the_job_instead_of_hanging():
    env = {"OSU_DL_BENCH_RANKS_PER_NODE": "1", "OSU_DL_BENCH_INJECT_FAULT": "raise"}
    res = run_cli(3, QUICK, env=env, timeout=60)
    assert res.returncode != 0
    assert "unhandled error, aborting the job" in res.stderr

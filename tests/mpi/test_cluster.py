"""Across the nodes of a cluster on this machine (scripts/cluster_local.sh: network
namespaces on a bridge, tbf-shaped links): bring-up and tear-down, MPICH's hydra at 2 and
4 nodes, Open MPI's prterun at 2, srun across every node, the hierarchical algorithms
validated at 2 nodes x 2 ranks, a table's node dimension read by the selector in a
training run, and the model's inter-node link fitted over two nodes. The nodes and ranks
per node in records come from MPI (Split_type shared), never from an emulation flag.

They skip, saying why, unless run as root with a cluster up
(`bash scripts/cluster_local.sh up`, as .ci/run does)."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from mpirun import REPO, mpi_env, run_with_timeout
from support.tuning import make_entry, make_table

from osu_dl_bench.jobs import launch

SCRIPT = REPO / "scripts" / "cluster_local.sh"
# A job across namespaces starts in ~1 s; its sizes cross a 1 Gbit/s link in milliseconds.
JOB_TIMEOUT = 180.0
pytestmark = pytest.mark.cluster  # `pytest -m cluster` (docs/testing.md)


def _private_cluster(tmp_path: Path, name: str, subnet: str) -> dict[str, str]:
    """The variables of a cluster of the test's own, beside the one the others use."""
    return {
        "OSU_DL_BENCH_CLUSTER_DIR": str(tmp_path / "state"),
        "OSU_DL_BENCH_CLUSTER_NAME": name,
        "OSU_DL_BENCH_CLUSTER_SUBNET": subnet,
        "OSU_DL_BENCH_CLUSTER_SLURM": "0",
    }


def _script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_with_timeout(["bash", str(SCRIPT), *args], 120, env={**os.environ, **(env or {})})


def _exports(text: str) -> dict[str, str]:
    """The variables of `cluster_local.sh env`'s export lines."""
    found = {}
    for line in text.splitlines():
        if line.startswith("export ") and "=" in line:
            name, value = line.removeprefix("export ").split("=", 1)
            found[name] = value
    return found


def _up_private(env: dict[str, str], *args: str) -> dict[str, str]:
    """Bring a private cluster up (``args``: its shape), skipping where this machine
    cannot create one; the variables its jobs run under (its launch agent finds the same
    cluster's state through them)."""
    up = _script("up", *args, env=env)
    if up.returncode != 0 and "cannot create" in up.stderr:
        pytest.skip(up.stderr.strip())
    assert up.returncode == 0, up.stderr
    return {**_exports(_script("env", env=env).stdout), **env}


@pytest.fixture(scope="module")
def cluster_env() -> dict[str, str]:
    """The environment `cluster_local.sh env` prints for the cluster that is up."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces): run as root with a cluster up")
    res = _script("env")
    if res.returncode != 0:
        lines = res.stderr.strip().splitlines() or [f"no answer from {SCRIPT} env"]
        pytest.skip(lines[-1].removeprefix("cluster_local: error: "))
    return _exports(res.stdout)


def _nodes(cluster_env: dict[str, str]) -> list[str]:
    return cluster_env[launch.HOSTS_VARIABLE].split(",")


def _on_nodes(
    cluster_env,
    count: int,
    nprocs: int,
    argv: list[str],
    mpi=None,
    launcher="mpiexec",
    python_args: list[str] | None = None,
    env: dict[str, str] | None = None,
):
    """Run ``python -m osu_dl_bench ARGV`` (or ``python PYTHON_ARGS``) as nprocs ranks
    over the cluster's first ``count`` nodes, through the job launcher."""
    nodes = _nodes(cluster_env)
    if len(nodes) < count:
        pytest.skip(f"the cluster has {len(nodes)} nodes, this test needs {count}")
    env = {**cluster_env, **(env or {}), launch.HOSTS_VARIABLE: ",".join(nodes[:count])}
    per_node = f"--ntasks-per-node={nprocs // count}"
    args = ["-N", str(count), per_node] if launcher == "srun" else []
    python = python_args or ["-m", "osu_dl_bench", *argv]
    with mock.patch.dict(os.environ, env):
        cmd = launch.mpi_command(nprocs, python, launcher, args, mpi)
        job_env = mpi_env({**env, **launch.library_environment(mpi)})
    res = run_with_timeout(cmd, JOB_TIMEOUT, job_env)
    assert res.returncode == 0, f"{' '.join(cmd)}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def _records(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def _validated_across(path: Path, nodes: int, ppn: int) -> list[dict]:
    """The records of a validated bench run, laid out as MPI saw it."""
    records = _records(path)
    assert records and {r["validation"] for r in records} == {"pass"}
    assert {(r["nodes"], r["ppn"]) for r in records} == {(nodes, ppn)}
    assert {r["hostnames"] for r in records} == {",".join(f"node{i + 1}" for i in range(nodes))}
    return records


def _bench(collective: str, out: Path, *extra: str) -> list[str]:
    return ["bench", collective, "-m", "8:1M", "-c", "-i", "5", "-x", "1", "-o", str(out), *extra]


# --- bring-up and tear-down ---------------------------------------------------------------


def test_up_twice_changes_nothing_and_down_removes_what_up_recorded(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth, tc)")
    # A cluster of its own beside the one the other tests use: its own names and subnet.
    env = _private_cluster(tmp_path, "odbtst", "10.213.9")
    up = ["up", "--nodes", "2", "--rate", "500mbit", "--slow", "node2=100mbit"]
    try:
        first = _script(*up, env=env)
        if first.returncode != 0 and "cannot create" in first.stderr:
            pytest.skip(first.stderr.strip())
        assert first.returncode == 0, first.stderr
        recorded = (tmp_path / "state" / "created").read_text()
        assert _script(*up, env=env).returncode == 0
        assert (tmp_path / "state" / "created").read_text() == recorded
        assert "odbtst-node1" in recorded and "odbtst-br" in recorded

        assert _script("exec", "node2", "hostname", env=env).stdout.strip() == "node2"
        shaped = run_with_timeout(["tc", "qdisc", "show", "dev", "odbtst-v2"], 30).stdout
        assert "rate 100Mbit" in shaped
        for bad in ("node3", "node1;true", "../node1"):
            res = _script("exec", bad, "true", env=env)
            assert res.returncode == 1 and "no node" in res.stderr, bad
        assert _script("up", "--nodes", "3", env=env).returncode == 1  # another shape: down first

        # A crash half-way through a tear-down: one namespace already gone.
        run_with_timeout(["ip", "netns", "delete", "odbtst-node1"], 30)
    finally:
        down = _script("down", env=env)
    assert down.returncode == 0, down.stderr
    assert "odbtst" not in run_with_timeout(["ip", "netns", "list"], 30).stdout
    assert "odbtst" not in run_with_timeout(["ip", "link", "show"], 30).stdout
    assert _script("status", env=env).returncode == 1


# --- jobs across nodes --------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [2, 4])
def test_mpich_ranks_on_separate_nodes_see_them_as_nodes(cluster_env, tmp_path, nodes):
    out = tmp_path / "bench.json"
    _on_nodes(cluster_env, nodes, nodes, _bench("allreduce", out))
    _validated_across(out, nodes, 1)


def test_open_mpi_ranks_on_two_nodes_through_its_ssh_agent(cluster_env, tmp_path):
    if not os.environ.get(launch.PREFIX_VARIABLES["openmpi"]):
        pytest.skip(f"{launch.PREFIX_VARIABLES['openmpi']} is not set (see .ci/run)")
    out = tmp_path / "bench.json"
    _on_nodes(cluster_env, 2, 4, _bench("allreduce", out), mpi="openmpi")
    records = _validated_across(out, 2, 2)
    assert {r["mpi_library"].split()[0] for r in records} == {"Open"}


def test_open_mpi_ranks_on_two_nodes_through_srun_and_pmix(cluster_env, tmp_path):
    if not os.environ.get(launch.PREFIX_VARIABLES["openmpi"]):
        pytest.skip(f"{launch.PREFIX_VARIABLES['openmpi']} is not set (see .ci/run)")
    if "SLURM_CONF" not in cluster_env:
        pytest.skip("the cluster runs no Slurm (slurm-wlm not installed when it came up)")
    out = tmp_path / "bench.json"
    _on_nodes(cluster_env, 2, 4, _bench("allreduce", out), mpi="openmpi", launcher="srun")
    records = _validated_across(out, 2, 2)
    assert {r["mpi_library"].split()[0] for r in records} == {"Open"}
    assert {r["slurm_nodes"] for r in records} == {"2"}


def test_srun_spans_every_node(cluster_env, tmp_path):
    if "SLURM_CONF" not in cluster_env:
        pytest.skip("the cluster runs no Slurm (slurm-wlm not installed when it came up)")
    nodes = len(_nodes(cluster_env))
    out = tmp_path / "bench.json"
    _on_nodes(cluster_env, nodes, nodes, _bench("bcast", out), launcher="srun")
    records = _validated_across(out, nodes, 1)
    assert {r["slurm_nodes"] for r in records} == {str(nodes)}


@pytest.mark.parametrize("collective", ["allreduce", "bcast"])
def test_hierarchical_algorithms_validate_across_two_nodes_of_two_ranks(
    cluster_env, tmp_path, collective
):
    out = tmp_path / "bench.json"
    argv = [*_bench(collective, out), "-a", "hierarchical,native", "-m", "8:4M"]
    argv += ["-k", "rotate"] if collective == "bcast" else []
    _on_nodes(cluster_env, 2, 4, argv)
    records = _validated_across(out, 2, 2)
    assert {r["algorithm"].split(":")[0] for r in records} == {"hierarchical", "native"}


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'osu-dl-bench[train]')",
)
def test_the_selector_takes_the_tables_row_for_this_node_shape_in_training(cluster_env, tmp_path):
    # One shape per row: the one-node row names a flat algorithm, the two-node row
    # hierarchical.
    entries = []
    for collective, flat in (("allreduce", "ring"), ("bcast", "binomial")):
        entries.append(make_entry(4, [(0, flat)], collective, nodes=1))
        entries.append(make_entry(4, [(0, "hierarchical")], collective, nodes=2, ppn=2))
    table = make_table(*entries).write(tmp_path / "cluster.json")
    res = _on_nodes(
        cluster_env, 2, 4, ["train", "--validate", "--epochs", "1", "--table", str(table)]
    )
    assert "p=4 (2 node(s) x 2 ppn)" in res.stdout
    assert "# start-up bcast: hierarchical" in res.stdout
    assert "# allreduce: hierarchical" in res.stdout
    assert "validation:" in res.stdout and ": PASS" in res.stdout


def test_model_fit_over_two_nodes_fits_the_inter_node_link(cluster_env, tmp_path):
    nodes = _nodes(cluster_env)[:2]
    env = mpi_env({**cluster_env, launch.HOSTS_VARIABLE: ",".join(nodes)})
    cmd = [sys.executable, "-m", "osu_dl_bench", "model", "fit", "--np", "2"]
    cmd += ["-m", "8:256K", "--rounds", "3", str(tmp_path / "fit")]
    res = run_with_timeout(cmd, JOB_TIMEOUT, env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "inter: measured; fitted across nodes node1,node2" in res.stdout
    assert "intra: NOT measured" in res.stdout
    assert f"shaped to {cluster_env['OSU_DL_BENCH_CLUSTER_RATE']}" in res.stdout


def test_mpich_takes_the_several_node_entries_of_an_export_across_two_nodes(cluster_env, tmp_path):
    # The mirror of test_exports' one-node case: at 2 nodes x 2 ranks MPICH must pass the
    # comm_size=node_comm_size entry (ring from 64 KiB) and take the 2-node one
    # (recursive doubling), as forcing recursive doubling does.
    from support.exports import FINGERPRINT_PY, export_files, fingerprint_of

    one = make_entry(4, [(0, "native"), (65536, "ring")])
    several = make_entry(4, [(0, "native"), (65536, "recursive_doubling")], nodes=2, ppn=2)
    files, _ = export_files(make_table(one, several), tmp_path, "mpich")
    driver = tmp_path / "fingerprint.py"
    driver.write_text(FINGERPRINT_PY)
    python = [str(driver), *map(str, (64, 65536, 8 << 20))]

    def fingerprint(**env: str):
        return fingerprint_of(_on_nodes(cluster_env, 2, 4, [], python_args=python, env=env))

    tuned = fingerprint(MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE=str(files["exp.mpich.mpir.json"]))
    doubling = fingerprint(MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM="recursive_doubling")
    ring = fingerprint(MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM="ring")
    assert ring[1] != doubling[1], "ring and recursive doubling cannot be told apart here"
    assert tuned[1:] == doubling[1:]


def test_linkmap_names_a_slow_nodes_links_both_ways_and_the_node(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth, tc)")
    # A cluster of its own, 3 nodes (odd: one sits out each step), node3 at 1/10 the rate.
    env = _private_cluster(tmp_path, "odblnk", "10.213.10")
    out = tmp_path / "map.json"
    try:
        # The launch agent is this script again: it must find the same cluster's state.
        private = _up_private(env, "--nodes", "3", "--rate", "500mbit", "--slow", "node3=50mbit")
        # 1 MiB windows: 0.17 s each at 50 Mbit/s; 6 cycles, the fewest for a 95% interval.
        argv = ["bench", "linkmap", "-m", "16K", "--repetitions", "6", "-o", str(out)]
        _on_nodes(private, 3, 3, argv)
    finally:
        down = _script("down", env=env)
    assert down.returncode == 0, down.stderr
    record = json.loads(out.read_text())
    assert record["hosts"] == ["node1", "node2", "node3"]  # MPI's own host names
    links = {f["name"] for f in record["findings"] if f["unit"] == "link"}
    nodes = {f["name"] for f in record["findings"] if f["unit"] == "node"}
    assert links == {"node1->node3", "node3->node1", "node2->node3", "node3->node2"}
    assert nodes == {"node3 sends", "node3 receives"}
    # tbf shapes both directions of node3's link: what it sends and what it receives.
    slow, fast = 50e6 / 8 / 1e6, 500e6 / 8 / 1e6
    matrix = record["bandwidth_mbs"]
    # The slow links run at tbf's rate; the fast ones may fall short of theirs when the
    # nodes' shared 2 cores are busy, but stay far above the slow ones.
    for source, target in itertools.permutations(range(3), 2):
        low = 0.75 * slow if 2 in (source, target) else 0.5 * fast
        high = 1.1 * (slow if 2 in (source, target) else fast)
        assert low < matrix[source][target] < high, (source, target, matrix)


def test_a_link_cut_mid_sweep_is_named_as_the_nodes_network_not_the_algorithm(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth, tc)")
    from osu_dl_bench.measurement import heartbeat

    # A cluster of its own: the cut link must not touch the one the other tests use.
    env = _private_cluster(tmp_path, "odbcut", "10.213.11")
    run = tmp_path / "run"
    node2 = ["ip", "-n", "odbcut-node2", "link", "set", "eth0"]
    try:
        private = _up_private(env, "--nodes", "2", "--rate", "1gbit")
        argv = [sys.executable, "-m", "osu_dl_bench", "sweep", "--np", "2"]
        argv += ["--collectives", "allreduce", "-a", "native,ring", "-m", "1M:16M"]
        argv += ["--budget", "1", "--launches", "1", "--stall-timeout", "8", "-o", str(run)]
        proc = subprocess.Popen(
            argv, env=mpi_env(private), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            beat = run / "heartbeats" / "p2-1-mpi" / heartbeat.file_name(1)
            deadline = time.monotonic() + JOB_TIMEOUT
            while heartbeat.read(beat, 1).phase != "round" and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.1)
            run_with_timeout([*node2, "down"], 30).check_returncode()
            out, err = proc.communicate(timeout=JOB_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    finally:
        run_with_timeout([*node2, "up"], 30)
        down = _script("down", env=env)
    assert down.returncode == 0, down.stderr
    # The rank cut off on node2 spins on in MPI unless down ends its node's processes.
    left = subprocess.run(["pgrep", "-f", str(run)], capture_output=True, text=True).stdout
    assert left == "", f"processes of the cut job outlived its cluster: {left}"
    assert proc.returncode == 1, (out, err)
    assert "node2 (10.213.11.2) does not answer" in err, err
    assert "a network fault between the job's nodes, not its algorithm" in err, err
    assert "hung algorithm" not in err, err


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="torch is not installed (pip install 'osu-dl-bench[train]')",
)
def test_the_gloo_group_and_ddp_gloo_start_across_two_nodes_of_two_ranks(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth, tc)")
    # A cluster of its own, whose node names resolve nowhere but on the node itself:
    # torch's own store and device addresses (the host name) cannot meet there.
    env = _private_cluster(tmp_path, "c40t", "10.213.42")
    out = tmp_path / "bench.json"
    trained = tmp_path / "train"
    try:
        private = _up_private(env, "--nodes", "2", "--rate", "1gbit")
        _on_nodes(private, 2, 4, [*_bench("allreduce", out, "-a", "gloo", "-m", "8:64K")])
        argv = [sys.executable, "-m", "osu_dl_bench", "train-bench", "--np", "4"]
        argv += ["--launches", "1", "--rounds", "1", "--steps", "1", "--warmup", "0"]
        argv += ["--only", "ddp-gloo,native", "--out", str(trained)]
        argv += ["--width", "4", "--image-size", "8", "--num-classes", "4", "-b", "8"]
        res = run_with_timeout(argv, JOB_TIMEOUT, mpi_env(private))
    finally:
        down = _script("down", env=env)
    assert down.returncode == 0, down.stderr
    records = _validated_across(out, 2, 2)
    assert {r["algorithm"] for r in records} == {"gloo"}
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    rows = json.loads(trained.with_suffix(".json").read_text())["rows"]
    assert {(r["config"], r["group"]) for r in rows} >= {("ddp-gloo", "gloo")}


def test_mpich_loads_the_three_file_export_across_two_nodes(tmp_path):
    # MPICH 5.0.2 across 2 nodes x 1 rank (COMM_WORLD a parent communicator of 1-rank
    # node_comms) takes the three files with MPIR_CVAR_COLLECTIVE_FALLBACK=error: no abort,
    # right results. A cluster of its own beside the one the other tests use.
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veth, tc)")
    from support.mpich_layers import MPICH_PROBE, corrected_two_nodes, layered_run

    from osu_dl_bench.runtime.mpich_trees import FILE_VARIABLES
    from osu_dl_bench.selection.exports import mpich
    from osu_dl_bench.selection.tune import build_table

    table, _ = build_table(layered_run(tmp_path / "run"), "lib")
    mpich.export(table, tmp_path / "lib")
    # And verify-export's corrected export of a table measured at 2 nodes x 1 rank, MPIR's
    # ring confirmed by the C client from 64K (support.mpich_layers.corrected_two_nodes).
    corrected_two_nodes(table, tmp_path / "fixed")

    def loaded(base: str) -> dict[str, str]:
        files = {layer: str(tmp_path / f"{base}.mpich.{layer}.json") for layer in FILE_VARIABLES}
        return {
            **{FILE_VARIABLES[layer]: path for layer, path in files.items()},
            "MPIR_CVAR_COLLECTIVE_FALLBACK": "error",
        }

    probe = tmp_path / "probe.py"
    probe.write_text(MPICH_PROBE)
    env = _private_cluster(tmp_path, "c36a", "10.213.36")
    try:
        up = _script("up", "--nodes", "2", env=env)
        if up.returncode != 0 and "cannot create" in up.stderr:
            pytest.skip(up.stderr.strip())
        assert up.returncode == 0, up.stderr
        private = {**_exports(_script("env", env=env).stdout), **env}
        res = [
            _on_nodes(private, 2, 2, [], python_args=[str(probe)], env=loaded(base))
            for base in ("lib", "fixed")
        ]
    finally:
        down = _script("down", env=env)
    assert down.returncode == 0, down.stderr
    for each in res:
        assert "PROBE p=2 nodes=2 wrong=0" in each.stdout, each.stdout[-3000:] + each.stderr[-3000:]

"""bench linkmap without MPI: the round-robin schedule, the matrices, which links and nodes
are named (on synthetic samples of shaped links), the record and the options."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest
from support.options import command_config

from osu_dl_bench.diagnosis.linkmap import (
    LinkMap,
    bandwidth_matrix,
    judge_links,
    latency_matrix,
    linkmap_header,
    linkmap_record,
    report_lines,
    write_linkmap,
)
from osu_dl_bench.diagnosis.outliers import Finding
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.bench_config import LINKMAP_MESSAGE_BYTES, LINKMAP_REPETITIONS
from osu_dl_bench.measurement.linkmap import (
    LinkSamples,
    LinkSettings,
    check_nodes,
    node_names,
    round_robin,
)

SETTINGS = LinkSettings(message_bytes=64 << 10, windows=1, warmup_windows=0, repetitions=10)


@pytest.mark.parametrize("nodes", range(2, 8))
def test_round_robin_meets_every_pair_once_and_no_node_twice_in_a_step(nodes):
    steps = round_robin(nodes)
    assert len(steps) == (nodes - 1 if nodes % 2 == 0 else nodes)
    met = [pair for step in steps for pair in step]
    assert sorted(met) == list(itertools.combinations(range(nodes), 2))
    for step in steps:
        busy = [node for pair in step for node in pair]
        assert len(busy) == len(set(busy))
        assert len(step) == nodes // 2  # every node busy, but one where the count is odd


def test_fewer_than_two_nodes_have_no_pairs_and_one_node_is_refused():
    assert round_robin(0) == [] and round_robin(1) == []
    with pytest.raises(UsageError, match="MPI reports one node \\(vm\\) for the job's 3 ranks"):
        check_nodes(("vm",), 3)
    check_nodes(("a", "b"), 2)


def test_one_emulated_node_is_refused_without_suggesting_the_emulation(monkeypatch):
    monkeypatch.setenv("OSU_DL_BENCH_RANKS_PER_NODE", "4")
    with pytest.raises(UsageError, match="--ranks-per-node 4 .* on one emulated node") as got:
        check_nodes(("vm:0",), 3)
    assert "emulate nodes" not in str(got.value)


def test_nodes_that_share_a_host_are_numbered():
    assert node_names(["node1", "node2"]) == ("node1", "node2")
    assert node_names(["vm", "vm", "other"]) == ("vm:0", "vm:1", "other:2")


def _samples(
    nodes: int,
    slow: int | None = None,
    slow_path: tuple[int, int] | None = None,
    sending_only: bool = False,
    seed: int = 0,
    spread: float = 0.03,
) -> LinkSamples:
    """Samples of a cluster whose links run at 120 MB/s, node ``slow``'s at 12 (both
    ways, or only what it sends), or one pair's path at 12; latency 20 us everywhere."""
    rng = np.random.default_rng(seed)
    reps = SETTINGS.repetitions

    def noisy(median: float) -> tuple[float, ...]:
        return tuple(median * (1 + spread * rng.standard_normal(reps)))

    bandwidth = {}
    for source, target in itertools.permutations(range(nodes), 2):
        shaped = slow == source or (slow == target and not sending_only)
        shaped |= slow_path is not None and {source, target} == set(slow_path)
        bandwidth[(source, target)] = noisy(12.0 if shaped else 120.0)
    latency = {pair: noisy(20.0) for pair in itertools.combinations(range(nodes), 2)}
    hosts = tuple(f"node{i + 1}" for i in range(nodes))
    return LinkSamples(hosts, tuple(range(nodes)), SETTINGS, latency, bandwidth)


def _named(linkmap: LinkMap, unit: str) -> set[str]:
    return {n.finding.name for n in linkmap.named(unit)}


def _touching(nodes: int, node: int) -> set[str]:
    others = [i for i in range(nodes) if i != node]
    return {f"node{node + 1}->node{i + 1}" for i in others} | {
        f"node{i + 1}->node{node + 1}" for i in others
    }


@pytest.mark.parametrize("nodes", range(3, 8))
def test_a_node_at_a_tenth_names_every_link_it_is_on_both_ways_and_the_node(nodes):
    slow = nodes - 1
    linkmap = judge_links(_samples(nodes, slow=slow))
    assert _named(linkmap, "link") == _touching(nodes, slow)
    host = f"node{nodes}"
    assert _named(linkmap, "node") == {f"{host} sends", f"{host} receives"}
    assert {n.metric for n in linkmap.findings} == {"bandwidth"}
    for named in linkmap.findings:
        assert named.finding.ratio_ci[1] < 0.2 and named.finding.share == 1.0


def test_a_node_slow_only_when_sending_is_named_for_what_it_sends():
    linkmap = judge_links(_samples(4, slow=1, sending_only=True))
    assert _named(linkmap, "link") == {"node2->node1", "node2->node3", "node2->node4"}
    assert _named(linkmap, "node") == {"node2 sends"}
    (node,) = linkmap.named("node")
    assert node.direction == "sends" and node.nodes == ("node2",)


def test_one_slow_path_names_the_link_both_ways_and_no_node():
    linkmap = judge_links(_samples(5, slow_path=(0, 2)))
    assert _named(linkmap, "link") == {"node1->node3", "node3->node1"}
    assert _named(linkmap, "node") == set()
    for named in linkmap.named("link"):
        assert named.among in {f"node{i}'s {way}" for i in (1, 3) for way in ("sends", "receives")}


@pytest.mark.parametrize("nodes", range(2, 8))
def test_a_uniform_cluster_names_nothing(nodes):
    for seed in range(5):
        linkmap = judge_links(_samples(nodes, seed=seed, spread=0.1))
        assert linkmap.findings == (), [n.finding.name for n in linkmap.findings]


def test_two_nodes_name_nothing_for_want_of_peers_and_say_so():
    linkmap = judge_links(_samples(2, slow=1))
    assert linkmap.findings == ()
    lines = report_lines(linkmap)
    assert any("two nodes" in line for line in lines)


def test_matrices_are_medians_latency_symmetric_bandwidth_by_direction():
    samples = _samples(3, slow=2, sending_only=True, spread=0.0)
    latency, bandwidth = latency_matrix(samples), bandwidth_matrix(samples)
    assert [latency[i][i] for i in range(3)] == [None] * 3
    assert latency[0][1] == latency[1][0] == pytest.approx(20.0)
    assert bandwidth[2][0] == pytest.approx(12.0) and bandwidth[0][2] == pytest.approx(120.0)
    lines = report_lines(judge_links(samples))
    header = next(i for i, line in enumerate(lines) if line.startswith("# Bandwidth"))
    assert lines[header + 1].split() == ["#", "node1", "node2", "node3"]
    assert lines[header + 4].split() == ["node3", "12.00", "12.00", "-"]


def test_the_report_says_what_stands_out_or_that_nothing_does():
    quiet = report_lines(judge_links(_samples(4)))
    assert "no link stands out" in quiet and "no node stands out" in quiet
    loud = report_lines(judge_links(_samples(4, slow=3)))
    links = [line for line in loud if line.startswith("bandwidth node") and "->" in line]
    assert len(links) == 6
    assert "peers (node" in links[0] and "ratio 0.10 (95% CI 0.0" in links[0]
    assert "10 of 10 samples below the peers' 5th percentile" in links[0]
    nodes = [line for line in loud if line.startswith("bandwidth node4 ")]
    assert len(nodes) == 2 and all("3 of its links named above" in line for line in nodes)


def test_the_header_says_the_schedule_and_warns_about_few_samples():
    samples = _samples(5)
    header = linkmap_header(samples, 10)
    assert "5 nodes, ranks 0 1 2 3 4 of 10" in header[0]
    assert "5 steps per cycle, up to 2 pairs at once; 10 cycles" in header[1]
    assert len(header) == 2
    few = replace(samples, settings=replace(SETTINGS, repetitions=3))
    assert "fewer than 6 samples" in linkmap_header(few, 10)[-1]


def test_the_record_is_strict_json_with_every_sample_and_finding():
    linkmap = judge_links(_samples(4, slow=3))
    record = json.loads(json.dumps(linkmap_record(linkmap, {"command": "x"}), allow_nan=False))
    assert record["kind"] == "linkmap" and record["format"] == 1
    assert record["hosts"] == ["node1", "node2", "node3", "node4"]
    assert record["settings"]["window"] == 64 and record["settings"]["repetitions"] == 10
    assert len(record["links"]) == 12 and len(record["pairs"]) == 6
    assert all(len(link["bandwidth_mbs"]["samples"]) == 10 for link in record["links"])
    assert record["bandwidth_mbs"][3][0] == pytest.approx(12.0, rel=0.1)
    kinds = {(f["unit"], f["metric"], f["direction"]) for f in record["findings"]}
    assert kinds == {
        ("link", "bandwidth", None),
        ("node", "bandwidth", "sends"),
        ("node", "bandwidth", "receives"),
    }
    node = next(f for f in record["findings"] if f["unit"] == "node")
    assert node["nodes"] == ["node4"] and node["among"] == "links between the other nodes"
    assert set(node) >= {"median", "peers", "ratio", "ratio_ci", "excess_ci", "share", "samples"}
    assert record["metadata"] == {"command": "x"}


def test_a_ratio_that_is_not_a_number_is_written_as_null(tmp_path):
    linkmap = judge_links(_samples(4, slow=3))
    named = linkmap.findings[0]
    broken = Finding(
        named.finding.name, 1.0, 0.0, math.nan, (math.nan, math.nan), 1.0, (0.5, 1.5), 1.0, 10
    )
    linkmap = replace(linkmap, findings=(replace(named, finding=broken),))
    path = tmp_path / "map.json"
    write_linkmap(str(path), linkmap_record(linkmap, {}))
    finding = json.loads(path.read_text())["findings"][0]
    assert finding["ratio"] is None and finding["ratio_ci"] == [None, None]
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="cannot write"):
        write_linkmap(str(tmp_path / "file" / "map.json"), linkmap_record(linkmap, {}))


def _config(*argv: str):
    return command_config("bench", *argv)


def test_linkmap_options_and_their_defaults():
    cfg = _config("linkmap")
    assert (cfg.min_size, cfg.max_size) == (LINKMAP_MESSAGE_BYTES, LINKMAP_MESSAGE_BYTES)
    assert (cfg.iterations, cfg.warmup, cfg.repetitions) == (1, 0, LINKMAP_REPETITIONS)
    cfg = _config("linkmap", "-m", "1M", "-i", "3", "-x", "1", "--repetitions", "7", "-o", "m.json")
    assert (cfg.max_size, cfg.iterations, cfg.warmup, cfg.repetitions) == (1 << 20, 3, 1, 7)
    assert cfg.output == "m.json"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["-m", "4K:8K"], "expected one size"),
        (["-m", "0"], "at least 1 byte"),
        (["-m", "65M"], "sizes above 64M are refused"),
        (["-m", "nan"], "bad size 'nan'"),
        (["-o", "m.csv"], "expected a .json file"),
        (["-c"], "-c has no meaning here"),
        (["-d", "cuda"], "-d has no meaning here"),
        (["-a", "ring"], "-a has no meaning here"),
        (["-T", "int8"], "-T has no meaning here"),
    ],
)
def test_linkmap_refuses_what_it_cannot_honour(argv, message):
    with pytest.raises(UsageError, match=message):
        _config("linkmap", *argv)


def test_repetitions_belong_to_linkmap_alone():
    with pytest.raises(UsageError, match="linkmap only, got bench bw"):
        _config("bw", "--repetitions", "3")
    assert _config("bw").repetitions is None


def test_latency_needs_twice_its_peers_to_be_named_bandwidth_a_quarter_less():
    # Where two ranks run moves a pair's latency by half on its own (9.5 or 14.5 us).
    samples = _samples(4, spread=0.02)
    for factor, named in ((1.5, set()), (3.0, {"node1-node2"})):
        latency = dict(samples.latency_us)
        latency[(0, 1)] = tuple(v * factor for v in latency[(0, 1)])
        linkmap = judge_links(replace(samples, latency_us=latency))
        assert {n.finding.name for n in linkmap.named("link")} == named, factor
    bandwidth = dict(samples.bandwidth_mbs)
    bandwidth[(0, 1)] = tuple(v / 1.5 for v in bandwidth[(0, 1)])
    linkmap = judge_links(replace(samples, bandwidth_mbs=bandwidth))
    assert {n.finding.name for n in linkmap.named("link")} == {"node1->node2"}


def test_triage_reads_the_record_linkmap_writes(tmp_path, capsys):
    from osu_dl_bench.commands.triage import TriageConfig, run_triage

    linkmap = judge_links(_samples(4, slow=3))
    path = tmp_path / "map.json"
    write_linkmap(str(path), linkmap_record(linkmap, {"command": "x"}))
    assert run_triage(TriageConfig(path, 0.5)) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[1:] == report_lines(linkmap)


def test_triage_refuses_a_damaged_linkmap_record_in_one_message(tmp_path):
    from osu_dl_bench.commands.triage import TriageConfig, run_triage

    good = linkmap_record(judge_links(_samples(3)), {})
    for damage in (
        {"hosts": "node1"},
        {"leaders": [0]},
        {"settings": {"repetitions": -1}},
        {"links": [{"source": "node1", "target": "elsewhere", "bandwidth_mbs": {}}]},
        {"pairs": [{"nodes": ["node1", "node2"], "latency_us": {"samples": ["x"]}}]},
    ):
        path = tmp_path / "map.json"
        path.write_text(json.dumps({**good, **damage}))
        with pytest.raises(UsageError, match="not a linkmap record as bench linkmap -o writes"):
            run_triage(TriageConfig(path, 0.5))

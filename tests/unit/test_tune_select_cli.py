"""tune's and select's options (commands.tune_cli): parsed once into frozen configs,
their pure checks made when the options are parsed, before MPI or any file is read."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from osu_dl_bench.cli import build_parser
from osu_dl_bench.commands import select_cli, tune_cli
from osu_dl_bench.commands.tune import SelectConfig, TuneConfig
from osu_dl_bench.errors import UsageError
from osu_dl_bench.selection.names import TABLE_DIR


def _tune(*argv: str) -> TuneConfig:
    return tune_cli.config_from_args(build_parser().parse_args(["tune", *argv]))


def _select(*argv: str) -> SelectConfig:
    return select_cli.config_from_args(build_parser().parse_args(["select", *argv]))


def test_tune_config_is_frozen_and_holds_the_parsed_options(tmp_path):
    cfg = _tune("runs/r1", "--export", "mpich, openmpi", "--risk", "0.1", "--for", "cnn")
    assert cfg.table_path == Path(TABLE_DIR) / "r1.json"
    assert cfg.exports == ("mpich", "openmpi")
    assert (cfg.risk, cfg.dtype, cfg.op, cfg.for_model) == (0.1, None, None, "cnn")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.risk = 0.5


def test_tune_output_names_the_table_file():
    assert _tune("run", "-o", "out/t.json").table_path == Path("out/t.json")


@pytest.mark.parametrize(
    "argv,words",
    [
        (["-o", "t.csv"], "-o t.csv: expected a file ending in .json"),
        (["--export", "intel"], "--export intel: unknown library intel"),
        (["--for", "bert"], "unknown model 'bert': expected one of"),
    ],
)
def test_tune_refuses_bad_options_when_they_are_parsed(argv, words):
    with pytest.raises(UsageError, match=words):
        _tune("run", *argv)


def test_select_config_is_frozen_and_holds_the_parsed_options():
    cfg = _select("--np", "4", "--size", "8,64K", "--nodes", "2", "--collective", "bcast")
    assert (cfg.nprocs, cfg.nodes, cfg.ppn) == (4, 2, None)
    assert cfg.sizes == (8, 64 << 10)
    assert (cfg.collective, cfg.device, cfg.dtype, cfg.op) == ("bcast", "cpu", "float32", "sum")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.sizes = (1,)


def test_select_force_is_read_only_and_none_leaves_it_to_the_environment():
    forced = _select("--np", "2", "--size", "8", "--force", "allreduce=ring:seg=64K,x=1").force
    assert dict(forced) == {"allreduce": "ring:seg=64K,x=1"}
    with pytest.raises(TypeError):
        forced["bcast"] = "chain"
    assert _select("--np", "2", "--size", "8").force is None
    assert dict(_select("--np", "2", "--size", "8", "--force", "").force) == {}


@pytest.mark.parametrize(
    "argv,words",
    [
        (["--size", ",,"], "--size ',,': expected at least one size"),
        (["--size", "8,lots"], "bad size 'lots'"),
        (["--size", "8", "--force", "ring"], "--force: bad item 'ring'"),
        (["--size", "8", "--collective", "alltoallw"], "--collective alltoallw: expected one"),
        (["--size", "8", "-d", "tpu"], "-d tpu: expected one of"),
        (["--size", "8", "--nodes", "3"], "--np 2 --nodes 3: 3 nodes cannot each run one"),
    ],
)
def test_select_refuses_bad_options_when_they_are_parsed(argv, words):
    with pytest.raises(UsageError, match=words):
        _select("--np", "2", *argv)

"""matplotlib is the optional ``plot`` extra (osu_dl_bench.plotting): without it, every
command that draws says, in one line, which extra to install, and exits 2."""

from __future__ import annotations

import sys

import pytest
from support.tuning import METADATA, model_points, write_run

from osu_dl_bench.cli import main

FIX = "pip install 'osu-dl-bench[plot]'"


@pytest.fixture
def no_matplotlib(monkeypatch):
    """Imports of matplotlib (and its submodules) fail, as where it is not installed."""
    for name in [m for m in sys.modules if m.split(".")[0] == "matplotlib"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("plot", ["plot", "{run}"]),
        ("model accuracy", ["model", "accuracy", "{run}", "--platform", "ib-hdr200"]),
    ],
)
def test_a_command_that_draws_without_matplotlib_names_the_plot_extra(
    tmp_path, capsys, no_matplotlib, command, argv
):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)), METADATA)
    assert main([arg.format(run=run) for arg in argv]) == 2
    captured = capsys.readouterr()
    said = captured.out + captured.err
    expected = f"osu-dl-bench: error: {command} needs matplotlib, which is not installed: {FIX}"
    assert said.strip() == expected, said
    assert not (run / "plots").exists()

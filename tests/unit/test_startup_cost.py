"""scripts/startup_cost.py: each run starts the tree it names (not the checkout it is run
from), and the ratio's interval is Student's t over the pairs' log ratios."""

from __future__ import annotations

import math

from mpirun import REPO
from support.scripts import load_script


def test_a_run_starts_the_package_of_the_tree_it_names(tmp_path, monkeypatch):
    tree = tmp_path / "tree"
    (tree / "osu_dl_bench").mkdir(parents=True)
    (tree / "osu_dl_bench" / "__init__.py").write_text("")
    (tree / "osu_dl_bench" / "__main__.py").write_text(
        "import pathlib, sys\npathlib.Path(sys.argv[1]).write_text(__file__)\n"
    )
    marker = tmp_path / "ran.txt"
    monkeypatch.chdir(REPO)  # where python -m would find the checkout's package first
    wall, cpu = load_script("startup_cost").one_run(tree, [str(marker)])
    assert marker.read_text() == str(tree / "osu_dl_bench" / "__main__.py")
    assert wall > 0 and cpu > 0


def test_the_ratio_is_paired_with_a_t_interval():
    old, new = [1.0, 2.0, 4.0], [0.5, 1.0, 2.0]  # exactly half in every pair
    assert load_script("startup_cost").ratio_text(old, new) == "0.50x (95% CI 0.50-0.50)"
    text = load_script("startup_cost").ratio_text([1.0, 1.0], [1.0, math.e])
    assert text.startswith("1.65x (95% CI ")  # exp(mean(0, 1)), t at 1 df: wide

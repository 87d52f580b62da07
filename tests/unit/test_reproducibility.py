"""scripts/reproducibility.py: shifts between two sweeps and one scored as the other's
prediction, on hand-made medians."""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproducibility.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("reproducibility", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(rows):
    return pd.DataFrame(
        [("allreduce", 2, size, alg, us, 0.1) for size, alg, us in rows],
        columns=["collective", "nprocs", "size_bytes", "algorithm", "median_us", "spread"],
    )


def test_a_common_shift_is_not_a_reordering(script):
    a = _run([(1 << 20, "native", 100.0), (1 << 20, "ring", 50.0), (1 << 20, "cma", 40.0)])
    # The machine got 2x slower for everyone, and cma alone 10% slower still.
    b = _run([(1 << 20, "native", 200.0), (1 << 20, "ring", 100.0), (1 << 20, "cma", 88.0)])
    both = script.compare(a, b).set_index("algorithm")
    assert both.loc["ring", "shift"] == pytest.approx(2.0)
    assert both.loc["ring", "relative"] == pytest.approx(1.0)
    assert both.loc["cma", "relative"] == pytest.approx(1.1)
    # a as the prediction of b: 1 - |100 - 200| / 200 = 0.5
    assert both.loc["native", "accuracy"] == pytest.approx(0.5)
    text = script.report(both.reset_index(), "A", "B")
    assert "33%" in text.splitlines()[2]  # one of three points moved > 5% relative to its point

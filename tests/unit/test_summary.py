"""The tuning table's readable summary: the speedup with its interval, ties counted, and
tables from before launches summarised as before."""

import dataclasses

import pytest
from support.tuning import decision, label, make_entry

from osu_dl_bench.selection.summary import entry_summary
from osu_dl_bench.selection.tune import hysteresis, point_record

pytestmark = pytest.mark.usefixtures("registered")


def _entry(points):
    return dataclasses.replace(make_entry(2, [(0, "native")]), points=tuple(points))


def _records(*points):
    """Table points from decisions (native's median 100 us, each candidate's 100 x ratio)."""
    return [point_record(point) for point in hysteresis(list(points))]


def test_the_speedup_has_its_interval_and_ties_are_counted():
    ring = label("allreduce", "ring")
    records = _records(
        # Within the 2% zone of native: a tie, native kept.
        decision(8, {"recursive_doubling": (0.985, 0.95, 1.02)}),
        decision(1 << 20, {ring: (0.5, 0.4, 0.625), "rabenseifner": (0.9, 0.85, 0.95)}),
    )
    lines = entry_summary(_entry(records))
    header = next(line for line in lines if "speedup (95% CI)" in line)
    assert header.split()[:5] == ["size", "chosen", "latency(us)", "native(us)", "speedup"]
    (big,) = [line for line in lines if line.lstrip().startswith("1M")]
    assert big.split()[1:5] == [ring, "50.00", "100.00", "2.00x"]
    assert "(1.60-2.50)" in big  # 1 / 0.625 .. 1 / 0.4
    (small,) = [line for line in lines if line.lstrip().startswith("8 ")]
    assert small.endswith("tie: recursive_doubling")
    assert "   1 of 2 sizes are ties (more than one eligible candidate within the indifference" in (
        "\n".join(lines)
    )


def test_a_table_from_before_launches_is_summarised_as_before():
    old = {"size_bytes": 8, "chosen": "native", "median_us": 2.0, "native_median_us": 2.0}
    old |= {"speedup": 1.0, "fastest": "ring", "fastest_median_us": 1.9}
    lines = entry_summary(_entry([old]))
    (line,) = [line for line in lines if line.lstrip().startswith("8 ")]
    assert line.split()[1:5] == ["native", "2.00", "2.00", "1.00x"]
    assert line.endswith("1.00x  ring 1.90 us: within noise")
    assert not any("ties" in line for line in lines)

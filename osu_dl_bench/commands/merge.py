"""``osu-dl-bench merge RUN_A RUN_B ... -o RUN``: several sweeps' run directories as one
(for example one sweep per process count, each between calibration jobs, read by ``tune``,
``plot`` or ``model accuracy`` together). No MPI.

The runs must share their MPI library, its version and their hosts (``--allow-mixed``
merges others, each run's recorded). How the rows and the metadata are merged:
measurement/merge.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from osu_dl_bench.measurement.merge import merge_runs
from osu_dl_bench.paths import check_writable_directory
from osu_dl_bench.runtime.metadata import command_line


@dataclass(frozen=True)
class MergeConfig:
    """The runs to merge, in order, the merged run directory and --allow-mixed's text."""

    runs: tuple[str, ...]
    output: str
    allow_mixed: str


def run_merge(cfg: MergeConfig) -> int:
    """Write the merged run directory and say what it holds."""
    check_writable_directory("-o", cfg.output)
    merged = merge_runs(list(cfg.runs), cfg.output, cfg.allow_mixed, command_line())
    print(f"# {merged.rows} results from {merged.runs} runs in {merged.results_path}")
    if merged.repeated:
        print(
            f"# {merged.repeated} rows measure a point again: readers take the last run's row "
            "(as after sweep --resume)"
        )
    return 0

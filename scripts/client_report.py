#!/usr/bin/env python3
"""verify-export's C client report again, from the latencies a run kept: per size the
file's and the null control's speedup with their verdicts, then (with the sweep's
candidates) the best measured choice per size and the captured share with its interval.

    python scripts/client_report.py VERIFY_RUN EXPORT SWEEP_RUN

VERIFY_RUN is the run directory verify-export measured in (EXPORT.verify, or --out), which
keeps the C client's latencies after each launch (c_client_latencies.json); EXPORT one of
the export's MPICH files; SWEEP_RUN the sweep it was tuned from (its candidates). A run
stopped before its end is read over the whole cycles of each collective's Williams
design only (every arm in every launch of them), so each arm keeps its balanced share of
positions. Exit 2, with one message, where a file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from osu_dl_bench.commands.verify_export import HEADER, best_lines, comparison_lines
from osu_dl_bench.errors import UsageError
from osu_dl_bench.measurement.schedule import williams_cycle
from osu_dl_bench.measurement.store import RunStore
from osu_dl_bench.selection.exports.readers import file_reader
from osu_dl_bench.selection.exports.verification import (
    CLIENT_FILE,
    best_choices,
    client_latencies,
    client_verdicts,
    measured_candidates,
)


def whole_cycles(latencies: dict) -> dict:
    """The latencies of each collective and p up to its last whole Williams cycle in which
    every (size, arm) it ran has a time in every launch (its arms: those in the latencies)."""
    kept = {}
    for group in sorted({key[:2] for key in latencies}):
        keys = [key for key in latencies if key[:2] == group]
        cycle = williams_cycle(len({key[3] for key in keys}))
        complete = 0
        while all(complete + 1 in latencies[key] for key in keys):
            complete += 1
        done = complete // cycle * cycle
        for key in keys:
            mine = {k: v for k, v in latencies[key].items() if k <= done}
            if mine:
                kept[key] = mine
    return kept


def _read(args: argparse.Namespace) -> tuple[dict, dict, object]:
    """(latencies, the sweep's candidates, the export's reader), or UsageError naming the
    file that cannot be read."""
    path = args.verify_run / CLIENT_FILE
    try:
        records = json.loads(path.read_text())
        if not isinstance(records, list) or not records:
            raise ValueError("expected a non-empty list of the C client's records")
        latencies = client_latencies(records)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: {exc!r}") from exc
    if not (args.sweep_run / "results.csv").is_file():
        raise UsageError(f"{args.sweep_run}: no results.csv: not a sweep's run directory")
    measured = measured_candidates(RunStore(args.sweep_run).read()[0])
    try:
        reader = file_reader(args.export, "mpich")
    except (OSError, ValueError) as exc:
        raise UsageError(f"{args.export}: {exc}") from exc
    return latencies, measured, reader


def main(argv: list[str] | None = None) -> int:
    """Print the C client's report from a verify run's kept latencies."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verify_run", type=Path, help="the run directory verify-export used")
    parser.add_argument("export", type=Path, help="one of the export's MPICH files")
    parser.add_argument("sweep_run", type=Path, help="the sweep the export was tuned from")
    args = parser.parse_args(argv)
    try:
        latencies, measured, reader = _read(args)
        latencies = whole_cycles(latencies)
        found = client_verdicts(latencies, reader)
        best = best_choices(latencies, measured) if measured else []
    except (UsageError, ValueError) as exc:
        print(f"client_report: {exc}", file=sys.stderr)
        return 2
    print("\n".join([HEADER, *comparison_lines("c", found)]))
    if best:
        print("\n".join(best_lines(best, found, latencies)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""verify-export's C client report again, from the latencies a run kept: per size the
file's and the null control's speedup with their verdicts, then (with the sweep's
candidates) the best measured choice per size and the captured share with its interval.

    python scripts/client_report.py VERIFY_RUN EXPORT SWEEP_RUN

VERIFY_RUN is the run directory verify-export measured in (EXPORT.verify, or --out), which
keeps the C client's latencies after each launch (c_client_latencies.json); EXPORT one of
the export's MPICH files; SWEEP_RUN the sweep it was tuned from. A run stopped before its
end is read over the whole cycles of each collective's Williams design only, so every
arm keeps its balanced share of positions.
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
    client_arms,
    client_latencies,
    client_verdicts,
    measured_candidates,
)


def whole_cycles(latencies: dict, measured: dict) -> dict:
    """The latencies of each collective and p's whole Williams cycles (its launches past
    the last whole cycle left out)."""
    kept = {}
    for (collective, nprocs, size, arm), per in latencies.items():
        arms = client_arms(measured.get((collective, nprocs), {}))
        cycle = williams_cycle(len(arms))
        done = max(per) // cycle * cycle
        mine = {k: v for k, v in per.items() if k <= done}
        if mine:
            kept[(collective, nprocs, size, arm)] = mine
    return kept


def main(argv: list[str] | None = None) -> int:
    """Print the C client's report from a verify run's kept latencies."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verify_run", type=Path, help="the run directory verify-export used")
    parser.add_argument("export", type=Path, help="one of the export's MPICH files")
    parser.add_argument("sweep_run", type=Path, help="the sweep the export was tuned from")
    args = parser.parse_args(argv)
    try:
        records = json.loads((args.verify_run / CLIENT_FILE).read_text())
        measured = measured_candidates(RunStore(args.sweep_run).read()[0])
        reader = file_reader(args.export, "mpich")
    except (OSError, ValueError, UsageError) as exc:
        print(f"client_report: {exc}", file=sys.stderr)
        return 2
    latencies = whole_cycles(client_latencies(records), measured)
    found = client_verdicts(latencies, reader)
    print("\n".join([HEADER, *comparison_lines("c", found)]))
    best = best_choices(latencies, measured) if measured else []
    if best:
        print("\n".join(best_lines(best, found, latencies)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run several ``osu-dl-bench`` command lines in one MPI job, one after the other, as
``python cli_cases.py CASES.json`` under mpiexec (CASES.json: a list of argument lists).

Each case runs the console script's entry point (``osu_dl_bench.cli.main``) with every
rank's stdout and stderr caught; rank 0 ends with one ``SUMMARY {json}`` line: per case its
exit code (the highest of the ranks') and every rank's output in rank order, as one job of
its own would have written it. A job per case costs a start-up of MPI and the imports
(seconds on a loaded host); the cases share one. Before each case the job says which on its
stderr, so a case that hangs or aborts the job is named by the launcher's timeout.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from osu_dl_bench.cli import main
from osu_dl_bench.runtime.launcher import launcher_rank
from osu_dl_bench.runtime.start import init_mpi


def run_case(argv: list[str]) -> tuple[int, str, str]:
    """One command line on this rank: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def run_cases(cases: list[list[str]]) -> list[dict]:
    """Every case on every rank; rank 0 returns their results, the others an empty list."""
    results = []
    for number, argv in enumerate(cases):
        if launcher_rank() == 0:
            print(f"case {number}: {' '.join(argv)}", file=sys.stderr, flush=True)
        code, out, err = run_case(argv)
        # MPI started in the first case, at the level its command asks for.
        comm = init_mpi().COMM_WORLD
        ranks = comm.gather((code, out, err), root=0)
        comm.Barrier()  # the next case starts together, as a job of its own would
        if ranks is not None:
            results.append(
                {
                    "argv": argv,
                    "code": max(rank[0] for rank in ranks),
                    "stdout": "".join(rank[1] for rank in ranks),
                    "stderr": "".join(rank[2] for rank in ranks),
                }
            )
    return results


if __name__ == "__main__":
    results = run_cases(json.loads(Path(sys.argv[1]).read_text()))
    if results:
        print("SUMMARY " + json.dumps({"cases": results}), flush=True)

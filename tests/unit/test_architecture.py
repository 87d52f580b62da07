"""The house's floors hold: import-linter's contracts (pyproject.toml) pass, they would
catch an upward import, and neither the algorithm library nor option parsing starts MPI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mpirun import REPO
from support.interpreter import run_python

LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
needs_linter = pytest.mark.skipif(
    LINT_IMPORTS is None, reason="import-linter is not installed (pip install -e '.[test]')"
)


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@needs_linter
def test_the_layer_contracts_hold():
    result = _lint(REPO)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "3 kept, 0 broken" in result.stdout


@needs_linter
@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("osu_dl_bench/selection/summary.py", "import osu_dl_bench.commands.plot", "floors"),
        ("osu_dl_bench/measurement/store.py", "import osu_dl_bench.jobs.sweep_config", "floors"),
        ("collectives/units.py", "import osu_dl_bench.errors", "collectives"),
        ("osu_dl_bench/stats/robust.py", "import osu_dl_bench.selection.paired", "floors"),
        ("osu_dl_bench/stats/robust.py", "import collectives.units", "stats"),
    ],
)
def test_an_upward_import_breaks_a_contract(tmp_path, module, line, contract):
    for name in ("osu_dl_bench", "collectives"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with open(tmp_path / module, "a") as f:
        f.write(f"\n{line}  # an import against the floors\n")
    result = _lint(tmp_path)
    assert result.returncode != 0
    broken = {
        "floors": "floors import downward only BROKEN",
        "collectives": "application BROKEN",
        "stats": "it imports no collective BROKEN",
    }
    assert broken[contract] in result.stdout, result.stdout[-3000:]


def test_the_catalog_and_option_parsing_start_no_mpi():
    code = (
        "import sys\n"
        "import collectives, collectives.errors, collectives.units\n"
        "import osu_dl_bench.cli, osu_dl_bench.measurement.bench_config\n"
        "import osu_dl_bench.jobs.sweep_config\n"
        "import osu_dl_bench.commands.bench_cli, osu_dl_bench.commands.sweep_cli\n"
        "import osu_dl_bench.commands.tune_cli, osu_dl_bench.train.config\n"
        "import osu_dl_bench.commands.train_cli\n"
        "osu_dl_bench.cli.build_parser().parse_args(['bench', 'allreduce'])\n"
        "print('mpi4py.MPI' in sys.modules)\n"
    )
    assert run_python(code, timeout=60).stdout.strip() == "False"


# What every rank of a job would otherwise import at start-up: about 0.6 s of CPU a rank
# on this machine (python -X importtime), paid by each process of each job.
HEAVY = ("pandas", "scipy", "jsonschema", "matplotlib", "torch", "statsmodels")


def _heavy_modules_after(code: str) -> list[str]:
    """The HEAVY packages loaded once ``code`` has run in a fresh interpreter (MPI never
    started: mpi4py's automatic initialisation is turned off)."""
    probe = (
        "import mpi4py\n"
        "mpi4py.rc.initialize = False\n"
        "import sys\n"
        f"{code}\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    return json.loads(run_python(probe, timeout=60).stdout.strip().replace("'", '"'))


def test_option_parsing_loads_no_pandas_scipy_or_jsonschema():
    # Every command's options are parsed, on every rank, before its work starts. scipy
    # also breaks where a test hides torch (sys.modules['torch'] = None): its array
    # checks look torch up.
    parse = "import osu_dl_bench.cli\nparser = osu_dl_bench.cli.build_parser()\n"
    for argv in (["triage", "RUN"], ["bench", "allreduce"], ["merge", "A", "B", "-o", "C"]):
        assert _heavy_modules_after(f"{parse}parser.parse_args({argv!r})") == [], argv


def test_a_bench_or_sweep_rank_and_the_selector_load_no_pandas_scipy_or_jsonschema():
    # bench's ranks, a sweep job's ranks and the trainer's selector on every rank: rank 0
    # loads pandas only to write the records or read the run's results, and a table's
    # check loads jsonschema.
    code = (
        "import osu_dl_bench.commands.bench, osu_dl_bench.selection.selector\n"
        "import osu_dl_bench.jobs.child, osu_dl_bench.jobs.worker"
    )
    assert _heavy_modules_after(code) == []

"""The house's floors hold: import-linter's contracts (pyproject.toml) pass, they would
catch an upward import, and neither the algorithm library nor option parsing starts MPI."""

from __future__ import annotations

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


def test_option_parsing_loads_no_scipy_stats():
    # scipy.stats takes seconds to import on a busy node, and every command's options are
    # parsed before its work starts; it also breaks where a test hides torch from the
    # interpreter (sys.modules['torch'] = None), as scipy's array checks look torch up.
    code = (
        "import sys\n"
        "import osu_dl_bench.cli\n"
        "osu_dl_bench.cli.build_parser().parse_args(['triage', 'RUN'])\n"
        "print(sorted(name for name in sys.modules if name.startswith('scipy.stats')))\n"
    )
    assert run_python(code, timeout=60).stdout.strip() == "[]"

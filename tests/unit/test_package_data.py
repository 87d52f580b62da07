"""Data files ship inside the package: MPICH's default selection tree and the sbatch
templates load from a built wheel, away from the source tree."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.interpreter import python_json

REPO = Path(__file__).resolve().parents[2]
DATA_FILES = (
    "osu_dl_bench/runtime/mpich_generic.json",
    "osu_dl_bench/jobs/sbatch/sweep.sbatch",
    "osu_dl_bench/jobs/sbatch/train.sbatch",
)
# Loads both kinds of data file the way the commands do, and says where they came from.
_LOAD = """
import json
from osu_dl_bench.jobs import slurm
from osu_dl_bench.selection.exports import mpich_default
tree = mpich_default.default_tree()
print(json.dumps({
    "modules": [mpich_default.__file__, slurm.__file__],
    "collectives": len(tree),
    "template": slurm.read_template().splitlines()[0],
}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built (offline, with this environment's setuptools) from a copy of the
    sources, so the build leaves nothing in the working tree."""
    pytest.importorskip("setuptools")
    work = tmp_path_factory.mktemp("wheel")
    source = work / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("collectives", "osu_dl_bench"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    done = subprocess.run(
        [*build, str(source), "-w", str(work)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (found,) = work.glob("osu_dl_bench-*.whl")
    return found


def test_the_wheel_carries_the_data_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(DATA_FILES) <= names


def test_an_installed_package_loads_its_data_files(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    loaded = python_json(
        _LOAD, cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    )
    assert all(Path(module).is_relative_to(site) for module in loaded["modules"])
    assert loaded["collectives"] > 30  # every collective of MPICH's tree
    assert loaded["template"] == "#!/bin/bash"


def test_scripts_sbatch_is_the_package_copy_not_a_second_one():
    for name in ("sweep.sbatch", "train.sbatch"):
        example = REPO / "scripts" / "sbatch" / name
        assert example.is_symlink()
        assert example.resolve() == REPO / "osu_dl_bench" / "jobs" / "sbatch" / name

"""scripts/gpu_smoke.sh as a bare GPU node runs it, here on the strict cupy stand-in with a
fake nvidia-smi: a Python that has numpy, mpi4py, torch and the rest but no MPI library,
no jsonschema and no install of this project, the carried dependencies in DEPS as the
script's offline install of the wheels leaves them, the checkout reached through
PYTHONPATH alone. Every step runs except the torch-on-CUDA ones (CPU torch here)."""

from __future__ import annotations

import os
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from mpirun import REPO, run_with_timeout
from support.strict import STRICT_CUPY

# What the carried wheels provide: not visible to the bare node's Python.
CARRIED = ("mpich", "jsonschema", "referencing", "rpds", "attr")
SITE = Path(sysconfig.get_paths()["purelib"])
PREFIX = Path(sys.prefix)
MPI_PROGRAMS = ("mpiexec", "mpiexec.hydra", "hydra_pmi_proxy", "hydra_nameserver", "mpirun")


def _link_all(entries, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        (folder / entry.name).symlink_to(entry)


def _bare_node(tmp: Path) -> Path:
    """A Python like the node's: a venv that sees this environment's packages, less the
    carried ones and this project's editable install; returns its python."""
    venv.create(tmp / "node", with_pip=False)
    kept = [
        e
        for e in SITE.iterdir()
        if not e.name.startswith(CARRIED + ("__editable__", "osu_dl_bench", "_osu"))
        and e.suffix != ".pth"
    ]
    _link_all(kept, tmp / "packages")
    node_site = next((tmp / "node").glob("lib/python*/site-packages"))
    (node_site / "node_packages.pth").write_text(f"{tmp / 'packages'}\n")
    return tmp / "node" / "bin" / "python"


def _carried_deps(tmp: Path) -> Path:
    """DEPS as gpu_smoke.sh's pip --prefix install of the wheels leaves it: the Python
    packages under lib/pythonX.Y/site-packages, libmpi in lib/, mpiexec in bin/."""
    deps = tmp / "deps"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    _link_all(
        [e for e in SITE.iterdir() if e.name.startswith(CARRIED)],
        deps / "lib" / version / "site-packages",
    )
    _link_all(
        [e for e in (PREFIX / "lib").iterdir() if e.name.startswith(("libmpi", "mpich"))],
        deps / "lib",
    )
    _link_all(
        [PREFIX / "bin" / name for name in MPI_PROGRAMS if (PREFIX / "bin" / name).exists()],
        deps / "bin",
    )
    return deps


def _smoke(tmp: Path, deps: Path) -> tuple[int, str]:
    fake = tmp / "fake-bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: Strict fake GPU (UUID: GPU-0)'\n")
    (fake / "nvidia-smi").chmod(0o755)
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",  # no mpiexec but the carried one
        "HOME": os.environ.get("HOME", str(tmp)),
        "PYTHON": str(_bare_node(tmp)),
        "PYTHONPATH": str(STRICT_CUPY),
        "STRICT_CUPY_DEVICES": "1",
        "WHEELS": str(tmp / "no-wheels"),
        "DEPS": str(deps),
        "OUT": str(tmp / "out"),
        "MAX": "4K",
        "SWEEP_MAX": "1K",
        "STEP_TIMEOUT": "300",
    }
    res = run_with_timeout(["bash", "scripts/gpu_smoke.sh"], 900, env, cwd=REPO)
    return res.returncode, res.stdout + res.stderr


@pytest.mark.skipif(
    not any((PREFIX / "lib").glob("libmpi.so*")), reason="no mpich wheel in this environment"
)
def test_the_smoke_check_runs_from_a_bare_checkout_with_carried_dependencies(tmp_path):
    code, output = _smoke(tmp_path, _carried_deps(tmp_path))
    assert code == 0, output[-6000:]
    summary = output[output.index("STEP ") :]
    steps = [line for line in summary.splitlines()[1:] if line and not line.startswith("gpu_")]
    statuses = {line[:30].strip(): line[31:37].strip() for line in steps}
    assert statuses.pop("race stress") == "N/A"  # MPI is not CUDA-aware: staged
    assert statuses.pop("train --device cuda -n 1") == "SKIP"
    assert statuses.pop("train --device cuda -n 2") == "SKIP"
    assert set(statuses.values()) == {"PASS"} and len(statuses) == 13, summary
    assert "nccl allreduce p=1" in statuses and "busbw is 0 at p=1" in summary


def test_the_smoke_check_names_what_is_missing_and_how_to_carry_it(tmp_path):
    code, output = _smoke(tmp_path, tmp_path / "no-deps")
    assert code == 1, output[-3000:]
    # scripts/gpu_env.sh stops it before any step, in one line naming each missing part.
    assert "gpu_env: missing after setup: jsonschema, mpi4py's MPI library (libmpi)" in output
    assert "scripts/gpu_wheels.sh" in output and "STEP " not in output

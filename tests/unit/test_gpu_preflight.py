"""scripts/gpu_smoke.sh where there is no GPU, and the rules of its preflight
(scripts/gpu_preflight.py). The run on a bare node (fake nvidia-smi, strict stand-in) is
in tests/mpi/test_gpu_smoke.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.scripts import load_script
from support.strict import STRICT_CUPY

REPO = Path(__file__).resolve().parents[2]


def _preflight():
    return load_script("gpu_preflight")


def _smoke(tmp_path: Path, listing: str, **env: str) -> subprocess.CompletedProcess:
    """gpu_smoke.sh with a fake nvidia-smi printing ``listing``."""
    (tmp_path / "nvidia-smi").write_text(f"#!/bin/sh\necho '{listing}'\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    # The interpreter's bin folder: where the mpich extra puts mpiexec, which gpu_env.sh
    # requires once a GPU is listed.
    path = f"{tmp_path}:{Path(sys.executable).parent}:/usr/bin:/bin"
    env = {"PATH": path, "OUT": str(tmp_path / "out"), **env}
    return subprocess.run(
        ["bash", "scripts/gpu_smoke.sh"], cwd=REPO, env=env, capture_output=True, text=True
    )


def test_without_a_gpu_the_smoke_check_exits_77_with_its_reason(tmp_path):
    done = _smoke(tmp_path, "No devices were found")
    assert done.returncode == 77
    assert "no NVIDIA GPU here (nvidia-smi -L lists none)" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing ran


def test_gpus_hidden_from_cuda_are_no_gpus_for_the_smoke_check(tmp_path):
    # nvidia-smi lists every GPU of the node; cupy counts those CUDA_VISIBLE_DEVICES leaves.
    done = _smoke(
        tmp_path,
        "GPU 0: Strict fake GPU (UUID: GPU-0)",
        PYTHON=sys.executable,
        PYTHONPATH=str(STRICT_CUPY),
        CUDA_VISIBLE_DEVICES="",
        DEPS=str(tmp_path / "no-deps"),
    )
    assert done.returncode == 77, done.stdout + done.stderr
    assert "cupy sees no GPU" in done.stderr


@pytest.mark.parametrize(
    "modes,mps,shared",
    [([0], False, True), ([3], False, False), ([3], True, True), ([0, 2], True, False)],
)
def test_ranks_share_a_gpu_unless_its_compute_mode_forbids_it(modes, mps, shared):
    assert (_preflight().sharing_reason(modes, mps) is None) == shared


@pytest.mark.parametrize(
    "version,ok", [("2.9.1+cu128", False), ("2.10.0", True), ("2.11.0+cu130", True), ("3.0", True)]
)
def test_the_preflight_wants_torch_2_10_or_later(version, ok):
    assert _preflight().torch_version_ok(version) == ok


def test_the_preflight_refuses_a_garbage_cuda_aware_override_in_one_line(cupy, capsys, monkeypatch):
    monkeypatch.setenv("OSU_DL_BENCH_CUDA_AWARE", "yes")
    assert _preflight().report() == 2
    out = capsys.readouterr().out
    assert out == (
        "ERROR OSU_DL_BENCH_CUDA_AWARE='yes': expected 1 (MPI reads device memory), 0 (stage "
        "through host buffers) or unset (ask the MPI library)\n"
    )


def test_the_preflight_says_how_cuda_awareness_was_found(cupy, capsys):
    assert _preflight().report() == 0
    out = capsys.readouterr().out
    assert "CUDA-aware MPI (as used): True, direct (OSU_DL_BENCH_CUDA_AWARE=1)" in out

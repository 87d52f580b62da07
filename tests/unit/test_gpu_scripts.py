"""The GPU run's helpers that need no GPU: the bandwidth table of scripts/gpu_bandwidth.py,
the plain PyTorch loop of scripts/plain_torch_loop.py on the CPU, the wait that puts a
step's last kernels inside its time, and the one step runner (scripts/gpu_env.sh) that
gpu_run.sh and gpu_smoke.sh share."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _record(collective, algorithm, backend, nprocs, size, avg_us):
    return {
        "collective": collective,
        "algorithm": algorithm,
        "backend": backend,
        "nprocs": nprocs,
        "size_bytes": size,
        "avg_us": avg_us,
        "algbw_gbs": size / avg_us / 1e3,
    }


def test_the_bandwidth_table_reads_old_records_whose_memcpy_bound_is_named_copy(tmp_path, capsys):
    nccl, mpi = tmp_path / "nccl.json", tmp_path / "mpi.json"
    size = 1 << 20
    nccl.write_text(
        json.dumps(
            [
                _record("allreduce", "nccl", "nccl", 1, size, 10.0),
                _record("allreduce", "copy", "bound", 1, size, 8.0),
                _record("allreduce", "staging", "bound", 1, size, 99.0),  # not MPI's p
            ]
        )
    )
    mpi.write_text(
        json.dumps(
            [
                _record("allreduce", "native", "mpi", 2, size, 400.0),
                _record("allreduce", "ring", "mpi", 2, size, 200.0),
                _record("allreduce", "copy", "bound", 2, size, 9.0),
                _record("allreduce", "staging", "bound", 2, size, 50.0),
            ]
        )
    )
    assert _script("gpu_bandwidth").main([str(nccl), str(mpi)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(str(size)))
    # nccl and the copy (the memcpy) of its own run (p=1), no copy kernel then; the fastest
    # MPI algorithm and the staging of its own run (p=2), 50 of its 200 us.
    assert row.split() == ["1048576", "104.86", "131.07", "-", "5.24", "(ring)", "50.0", "25%"]
    assert "nccl at p = 1" in out and "MPI algorithm at p = 2" in out


def test_the_bandwidth_table_puts_nccl_beside_the_memcpy_and_the_copy_kernel(tmp_path, capsys):
    path, size = tmp_path / "nccl.json", 1 << 20
    rows = [
        _record("allreduce", "nccl", "nccl", 1, size, 10.0),
        _record("allreduce", "memcpy", "bound", 1, size, 8.0),
        _record("allreduce", "copy-kernel", "bound", 1, size, 16.0),
    ]
    path.write_text(json.dumps(rows))
    assert _script("gpu_bandwidth").main([str(path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(str(size)))
    assert row.split()[:4] == ["1048576", "104.86", "131.07", "65.54"]
    assert "memcpy (cudaMemcpyAsync device to device" in out


def test_the_bandwidth_table_says_a_bcast_at_one_process_moves_nothing(tmp_path, capsys):
    path = tmp_path / "bcast.json"
    path.write_text(json.dumps([_record("bcast", "nccl", "nccl", 1, 1024, 5.0)]))
    assert _script("gpu_bandwidth").main([str(path)]) == 0
    assert "a bcast moves no bytes" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content,message",
    [(None, "cannot read the records"), ("[]", "no bench records"), ("[1, 2]", "no bench records")],
)
def test_the_bandwidth_table_refuses_what_is_not_records(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    assert _script("gpu_bandwidth").main([str(path)]) == 2
    assert message in capsys.readouterr().err


def test_the_bandwidth_table_refuses_records_of_several_dtypes(tmp_path, capsys):
    rows = [
        {**_record("allreduce", "nccl", "nccl", 1, 1024, 5.0), "dtype": dtype}
        for dtype in ("float32", "float16")
    ]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rows))
    assert _script("gpu_bandwidth").main([str(path)]) == 2
    assert "several dtypes (float16, float32)" in capsys.readouterr().err


def test_the_plain_loop_refuses_a_bad_option_in_one_line(capsys):
    pytest.importorskip("torch")
    with pytest.raises(SystemExit) as ended:
        _script("plain_torch_loop").main(["--steps", "0"])
    assert ended.value.code == 2
    assert "--steps" in capsys.readouterr().err


def test_the_plain_loop_trains_the_trainers_model_and_reports_img_s(capsys):
    pytest.importorskip("torch")
    argv = ["--model", "cnn", "--data", "synthetic", "--image-size", "8", "--steps", "12"]
    assert _script("plain_torch_loop").main([*argv, "-b", "8", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "# plain PyTorch loop: cnn, batch 8, 12 steps on cpu" in out
    # 12 steps: 2 warm-up, then two timing iterations of 5.
    assert "(2 iterations of 5 steps after 2 warm-up)" in out


def test_a_step_on_a_gpu_waits_for_its_kernels_before_the_clock_stops(monkeypatch):
    torch = pytest.importorskip("torch")
    from osu_dl_bench.train.device import device_idle

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
    device_idle(torch.device("cpu"))
    assert waited == []
    device_idle(torch.device("cuda", 0))
    assert waited == [torch.device("cuda", 0)]


STEPS = """
LIMIT=(timeout 2)
step_result() { echo "result $1 $2 $3 $4"; }
. scripts/gpu_env.sh
run_step ok "$T/ok.log" echo fine; echo "code $?"
run_step slow "$T/slow.log" sleep 30; echo "code $?"
run_step wrong "$T/wrong.log" echo "DATA VALIDATION ERROR: 1 wrong"; echo "code $?"
run_step exited "$T/exited.log" sh -c 'exit 3'; echo "code $?"
"""


def test_one_step_runner_times_out_and_judges_each_step_for_both_gpu_scripts(tmp_path):
    env = {
        "PATH": os.environ["PATH"],
        "PYTHON": sys.executable,
        "WHEELS": str(tmp_path / "no-wheels"),
        "DEPS": str(tmp_path / "deps"),
        "T": str(tmp_path),
    }
    res = subprocess.run(
        ["bash", "-c", STEPS], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"result ok PASS 0 {tmp_path}/ok.log",
        "code 0",
        f"result slow FAIL 124 {tmp_path}/slow.log",
        "code 124",
        f"result wrong FAIL 1 {tmp_path}/wrong.log",
        "code 1",
        f"result exited FAIL 3 {tmp_path}/exited.log",
        "code 3",
    ]
    assert (tmp_path / "ok.log").read_text() == "+ echo fine\nfine\n"
    for script in ("gpu_run.sh", "gpu_smoke.sh"):
        text = (REPO / "scripts" / script).read_text()
        assert subprocess.run(["bash", "-n", REPO / "scripts" / script]).returncode == 0
        # Each says what a result means; none runs a step its own way.
        assert "step_result() {" in text and '"${LIMIT[@]}" "$@"' not in text

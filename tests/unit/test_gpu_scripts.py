"""The GPU run's helpers that need no GPU: the bandwidth table of scripts/gpu_bandwidth.py,
the plain PyTorch loop of scripts/plain_torch_loop.py on the CPU, the wait that puts a
step's last kernels inside its time, the one step runner (scripts/gpu_env.sh) that
gpu_run.sh and gpu_smoke.sh share, and gpu_env.sh's install of the carried wheels on a
Debian-style system Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]


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
    assert load_script("gpu_bandwidth").main([str(nccl), str(mpi)]) == 0
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
    assert load_script("gpu_bandwidth").main([str(path)]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(str(size)))
    assert row.split()[:4] == ["1048576", "104.86", "131.07", "65.54"]
    assert "memcpy (cudaMemcpyAsync device to device" in out


def test_the_bandwidth_table_says_a_bcast_at_one_process_moves_nothing(tmp_path, capsys):
    path = tmp_path / "bcast.json"
    path.write_text(json.dumps([_record("bcast", "nccl", "nccl", 1, 1024, 5.0)]))
    assert load_script("gpu_bandwidth").main([str(path)]) == 0
    assert "a bcast moves no bytes" in capsys.readouterr().out


@pytest.mark.parametrize(
    "content,message",
    [(None, "cannot read the records"), ("[]", "no bench records"), ("[1, 2]", "no bench records")],
)
def test_the_bandwidth_table_refuses_what_is_not_records(tmp_path, capsys, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    assert load_script("gpu_bandwidth").main([str(path)]) == 2
    assert message in capsys.readouterr().err


def test_the_bandwidth_table_refuses_records_of_several_dtypes(tmp_path, capsys):
    rows = [
        {**_record("allreduce", "nccl", "nccl", 1, 1024, 5.0), "dtype": dtype}
        for dtype in ("float32", "float16")
    ]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(rows))
    assert load_script("gpu_bandwidth").main([str(path)]) == 2
    assert "several dtypes (float16, float32)" in capsys.readouterr().err


def test_the_plain_loop_refuses_a_bad_option_in_one_line(capsys):
    pytest.importorskip("torch")
    with pytest.raises(SystemExit) as ended:
        load_script("plain_torch_loop").main(["--steps", "0"])
    assert ended.value.code == 2
    assert "--steps" in capsys.readouterr().err


def test_the_plain_loop_trains_the_trainers_model_and_reports_img_s(capsys):
    pytest.importorskip("torch")
    argv = ["--model", "cnn", "--data", "synthetic", "--image-size", "8", "--steps", "12"]
    assert load_script("plain_torch_loop").main([*argv, "-b", "8", "--threads", "1"]) == 0
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
        # mpiexec beside this Python (the mpich wheel's): gpu_env.sh checks it is there.
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
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


# A node's python3 as Debian's system Python behaves: `-m pip install --prefix P` lays the
# carried wheels out under P/local (posix_local scheme: local/lib/python3.X/dist-packages,
# local/bin, local/lib) and, as pip --no-index does, installs nothing and fails when a
# requested wheel is not in --find-links; anything else runs the real Python without its
# own site-packages (-S), so only PYTHONPATH finds packages.
FAKE_DEBIAN_PYTHON = r"""#!/bin/bash
if [ "$1 $2 $3" != "-m pip install" ]; then exec "$REAL_PYTHON" -S "$@"; fi
shift 3
names=()
while [ $# -gt 0 ]; do
    case $1 in
    --prefix) prefix=$2; shift 2 ;;
    --find-links) links=$2; shift 2 ;;
    --*) shift ;;
    *) names+=("$1"); shift ;;
    esac
done
for name in "${names[@]}"; do
    ls "$links/${name//-/_}"-*.whl >/dev/null 2>&1 || {
        echo "ERROR: No matching distribution found for $name" >&2; exit 1; }
done
site=$prefix/local/lib/python3.12/dist-packages
mkdir -p "$site" "$prefix/local/bin" "$prefix/local/lib"
for name in "${names[@]}"; do
    mkdir -p "$site/${name//-/_}-1.0.dist-info"
    case $name in
    jsonschema) mkdir -p "$site/jsonschema"; : >"$site/jsonschema/__init__.py" ;;
    mpich) printf '#!/bin/sh\n' >"$prefix/local/bin/mpiexec"; chmod +x "$prefix/local/bin/mpiexec"
           : >"$prefix/local/lib/libmpi.so.12" ;;
    esac
done
"""
# The node's mpi4py without an MPI library: it loads one only from MPI4PY_LIBMPI (a folder,
# where it looks for libmpi.so.12 among others: mpi4py/_mpiabi.py).
FAKE_MPI4PY = """import os
if not os.path.isfile(os.path.join(os.environ.get("MPI4PY_LIBMPI", ""), "libmpi.so.12")):
    raise ImportError("cannot load MPI library")
"""
SOURCE_ENV = """. scripts/gpu_env.sh
echo "rc=$?"
echo "PYTHONPATH=$PYTHONPATH"
echo "MPI4PY_LIBMPI=$MPI4PY_LIBMPI"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "mpiexec=$(command -v mpiexec)"
"""
CARRIED_WHEELS = ["mpich", "jsonschema", "referencing", "jsonschema_specifications"]
CARRIED_WHEELS += ["rpds_py", "attrs", "typing_extensions"]


def _debian_node(tmp_path, wheels):
    """A node with the fake Debian python3, mpi4py without libmpi, and ``wheels``."""
    fake = tmp_path / "bin" / "python3"
    fake.parent.mkdir()
    fake.write_text(FAKE_DEBIAN_PYTHON)
    fake.chmod(0o755)
    node_site = tmp_path / "node-site"
    (node_site / "mpi4py").mkdir(parents=True)
    (node_site / "mpi4py" / "__init__.py").write_text("")
    (node_site / "mpi4py" / "MPI.py").write_text(FAKE_MPI4PY)
    (tmp_path / "wheels").mkdir()
    for name in wheels:
        (tmp_path / "wheels" / f"{name}-1.0-py3-none-any.whl").write_bytes(b"")
    return {
        "PATH": "/usr/bin:/bin",
        "PYTHON": str(fake),
        "REAL_PYTHON": sys.executable,
        "PYTHONPATH": str(node_site),
        "WHEELS": str(tmp_path / "wheels"),
        "DEPS": str(tmp_path / "deps"),
    }


def _source_env(env):
    return subprocess.run(
        ["bash", "-c", SOURCE_ENV], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_gpu_env_finds_the_wheels_where_a_debian_system_python_installs_them(tmp_path):
    res = _source_env(_debian_node(tmp_path, CARRIED_WHEELS))
    assert res.returncode == 0, res.stderr
    local = tmp_path / "deps" / "local"
    lines = dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)
    assert lines["rc"] == "0"
    assert lines["PYTHONPATH"].split(":")[0] == str(local / "lib/python3.12/dist-packages")
    assert str(REPO) in lines["PYTHONPATH"].split(":")
    assert lines["MPI4PY_LIBMPI"] == str(local / "lib")
    assert lines["LD_LIBRARY_PATH"].split(":")[0] == str(local / "lib")
    assert lines["mpiexec"] == str(local / "bin" / "mpiexec")


def test_gpu_env_sourced_again_adds_nothing_twice(tmp_path):
    env = _debian_node(tmp_path, CARRIED_WHEELS)
    script = SOURCE_ENV + SOURCE_ENV.replace(". scripts", "WHEELS=/nowhere . scripts")
    res = subprocess.run(
        ["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    paths = [line for line in res.stdout.splitlines() if line.startswith("PYTHONPATH=")]
    assert len(paths) == 2 and paths[0] == paths[1]
    assert res.stdout.count("installing the carried wheels") == 1


@pytest.mark.parametrize(
    "wheels,missing",
    [
        # No mpich wheel: pip --no-index installs nothing and fails.
        ([n for n in CARRIED_WHEELS if n != "mpich"], "jsonschema, mpi4py's MPI library"),
        ([], "jsonschema, mpi4py's MPI library (libmpi), mpiexec"),  # no wheels at all
    ],
)
def test_gpu_env_fails_loudly_naming_what_is_still_missing(tmp_path, wheels, missing):
    res = _source_env(_debian_node(tmp_path, wheels))
    assert res.returncode == 1
    assert "rc=" not in res.stdout  # the sourcing script ended there
    assert f"gpu_env: missing after setup: {missing}" in res.stderr
    assert "scripts/gpu_wheels.sh" in res.stderr


# gpu_run.sh on a node of N fake GPUs: nvidia-smi lists them, the Python answers the
# preflight (gpus=N, share as given) and passes every import check of gpu_env.sh, and the
# launcher only writes down how it was called.
FAKE_RUN_PYTHON = r"""#!/bin/bash
case $1 in
scripts/gpu_preflight.py) printf 'gpus=%s\naware=0\nshare=%s\ntorch_ok=1\ntorch_cuda=1\n' \
    "$FAKE_GPUS" "$FAKE_SHARE" ;;
esac
exit 0
"""
FAKE_LAUNCHER = """#!/bin/sh
printf '%s\\n' "$*" >>"$CALLS"
"""
FAKE_NVIDIA_SMI = """#!/bin/sh
[ "$1" = -L ] || exit 0
i=0
while [ "$i" -lt "$FAKE_GPUS" ]; do echo "GPU $i: Fake GPU (UUID: GPU-$i)"; i=$((i + 1)); done
"""


def _fake_program(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def _gpu_run_launches(tmp_path, gpus: int, share: str = "yes") -> list[str]:
    """The launcher's calls of gpu_run.sh's bandwidth and training parts on ``gpus`` GPUs:
    '-n P <what ran>' each."""
    fake = tmp_path / "bin"
    fake.mkdir()
    _fake_program(fake / "nvidia-smi", FAKE_NVIDIA_SMI)
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "PYTHON": str(_fake_program(fake / "python3", FAKE_RUN_PYTHON)),
        "MPIEXEC": str(_fake_program(fake / "launch", FAKE_LAUNCHER)),
        "FAKE_GPUS": str(gpus),
        "FAKE_SHARE": share,
        "CALLS": str(tmp_path / "calls"),
        "RUN_DIR": str(tmp_path / "run"),
        "PARTS": "bandwidth training",
        "ROUNDS": "1",
        "WHEELS": str(tmp_path / "no-wheels"),
        "DEPS": str(tmp_path / "deps"),
    }
    res = subprocess.run(
        ["bash", "scripts/gpu_run.sh"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    # '-n P PYTHON -m osu_dl_bench COMMAND ARG ARG ...' -> '-n P COMMAND ARG ARG'
    return [" ".join(c.split()[:2] + c.split()[5:8]) for c in calls]


@pytest.mark.parametrize(
    "gpus,share,nccl,mpi",
    [(8, "yes", 8, 8), (1, "yes", 1, 2), (1, "no", 1, 1), (3, "no", 3, 3)],
)
def test_gpu_run_puts_nccl_on_every_gpu_and_mpi_on_at_least_two_ranks(
    tmp_path, gpus, share, nccl, mpi
):
    launches = _gpu_run_launches(tmp_path, gpus, share)
    assert launches == [
        f"-n {nccl} bench allreduce -d",
        f"-n {nccl} bench bcast -d",
        f"-n {mpi} bench allreduce -d",
        f"-n {mpi} bench bcast -d",
        "-n 1 train --device cuda",  # against the plain one-process loop
        f"-n {mpi} train --device cuda",  # --validate
    ]
    summary = (tmp_path / "run" / "summary.txt").read_text()
    assert f"{gpus} GPU(s) seen by cupy: NCCL on {nccl} rank(s), MPI on {mpi}" in summary


@pytest.mark.parametrize("script", ["gpu_run.sh", "gpu_smoke.sh"])
def test_a_long_gpu_list_counts_as_gpus_in_both_scripts(tmp_path, script):
    # A GPU line, then more than a pipe holds (MIG devices of a large node, say): a check
    # that stops reading at the first GPU leaves nvidia-smi to die of SIGPIPE, which
    # pipefail took for "no GPU". Past that check, cupy here sees none: 77 with its reason.
    fake = tmp_path / "bin"
    fake.mkdir()
    _fake_program(
        fake / "nvidia-smi",
        "#!/bin/sh\necho 'GPU 0: Fake GPU (UUID: GPU-0)'\n"
        "seq 200000 | sed 's/^/  MIG 1g.10gb Device /'\n",
    )
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "PYTHON": str(_fake_program(fake / "python3", FAKE_RUN_PYTHON)),
        "MPIEXEC": str(_fake_program(fake / "launch", FAKE_LAUNCHER)),
        "FAKE_GPUS": "0",
        "FAKE_SHARE": "yes",
        "CALLS": str(tmp_path / "calls"),
        "RUN_DIR": str(tmp_path / "run"),
        "OUT": str(tmp_path / "out"),
        "WHEELS": str(tmp_path / "no-wheels"),
        "DEPS": str(tmp_path / "deps"),
    }
    res = subprocess.run(
        ["bash", f"scripts/{script}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 77, res.stderr
    assert "cupy sees no GPU" in res.stderr and "nvidia-smi -L lists none" not in res.stderr


def _launch_file(path, times_by_label, size=1 << 20, collective="allreduce", nprocs=1):
    records = []
    for label, times in times_by_label.items():
        backend = "nccl" if label == "nccl" else "bound"
        record = _record(collective, label, backend, nprocs, size, 1.0)
        records.append({**record, "iter_max_us": list(times)})
    path.write_text(json.dumps(records))
    return str(path)


def test_paired_ratios_hold_one_for_the_same_call_and_not_for_a_slower_one(tmp_path, capsys):
    rng = np.random.default_rng(7)
    files = []
    for launch in range(3):
        drift = 1 + 0.05 * launch  # the whole launch slower: pairing cancels it
        same = 100 * drift * rng.lognormal(0, 0.03, 50)
        files.append(
            _launch_file(
                tmp_path / f"l{launch}.json",
                {
                    "nccl": same * rng.lognormal(0, 0.03, 50),
                    "memcpy": same,
                    "copy-kernel": 2 * same,
                },
            )
        )
    bandwidth = load_script("gpu_bandwidth")
    assert bandwidth.main(["--paired", "nccl", "memcpy", *files]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[0] == "allreduce" and row[-1] == "yes"
    assert bandwidth.main(["--paired", "copy-kernel", "memcpy", *files]) == 0
    row = capsys.readouterr().out.splitlines()[-1].split()
    assert row[-1] == "no" and 1.9 < float(row[4]) < 2.1
    assert bandwidth.main(["--paired", "nccl", "bogus", *files]) == 2


def _times(value: float = 100.0, count: int = 20) -> list[float]:
    return [value * (1 + 0.01 * (i % 5)) for i in range(count)]


def _bad_launch(tmp_path, case: str) -> list[str]:
    """The files of one hostile --paired call: a good launch beside ``case``'s."""
    good = _launch_file(tmp_path / "g1.json", {"nccl": _times(), "memcpy": _times(90)})
    bad = tmp_path / f"{case}.json"
    nccl = _times()
    if case in ("nan", "inf", "neg", "zero", "allneg", "emptyiter"):
        nccl = {
            "nan": nccl[:3] + [float("nan")] + nccl[4:],
            "inf": nccl[:3] + [float("inf")] + nccl[4:],
            "neg": nccl[:3] + [-1.0] + nccl[4:],
            "zero": [0.0] * 20,
            "allneg": [-1.0] * 20,
            "emptyiter": [],
        }[case]
        # json.dumps writes NaN and Infinity, which pandas reads back as such.
        return [good, _launch_file(bad, {"nccl": nccl, "memcpy": _times(90)})]
    if case == "same":
        return [good, good]
    if case == "copy":
        bad.write_text(Path(good).read_text())
        return [good, str(bad)]
    if case == "twop":
        one = json.loads(Path(good).read_text())
        bad.write_text(json.dumps(one + [{**r, "nprocs": 2} for r in one]))
        return [str(bad), good]
    if case == "bcast":
        return [_launch_file(bad, {"nccl": nccl, "memcpy": _times(90)}, collective="bcast"), good]
    if case == "otherp":
        return [good, _launch_file(bad, {"nccl": nccl, "memcpy": _times(90)}, nprocs=2)]
    if case == "short":
        return [_launch_file(bad, {"nccl": nccl[:5], "memcpy": _times(90)[:5]}), good]
    if case == "unequal":
        return [good, _launch_file(bad, {"nccl": nccl[:5], "memcpy": _times(90)})]
    if case == "twice":
        one = json.loads(Path(good).read_text())
        bad.write_text(json.dumps(one + one[:1]))
        return [good, str(bad)]
    if case in ("empty", "emptyfirst"):
        bad.write_text("[]")
        return [str(bad)] if case == "empty" else [good, str(bad)]
    if case == "noiter":
        rows = json.loads(Path(good).read_text())
        bad.write_text(
            json.dumps([{k: v for k, v in r.items() if k != "iter_max_us"} for r in rows])
        )
        return [str(bad), good]
    if case == "directory":
        bad = tmp_path / "adir"
        bad.mkdir()
        return [good, str(bad)]
    raise AssertionError(case)


@pytest.mark.parametrize(
    "case,words",
    [
        ("emptyiter", "allreduce nccl at 1048576 B has no per-iteration times"),
        ("nan", "allreduce nccl at 1048576 B holds nan us"),
        ("inf", "allreduce nccl at 1048576 B holds inf us"),
        ("neg", "allreduce nccl at 1048576 B holds -1.0 us"),
        ("zero", "allreduce nccl at 1048576 B holds 0.0 us"),
        ("allneg", "allreduce nccl at 1048576 B holds -1.0 us"),
        ("same", "g1.json: the same records as {tmp}/g1.json: give each launch once"),
        ("copy", "copy.json: the same records as"),
        ("twop", "twop.json: records at several process counts (1, 2)"),
        ("otherp", "otherp.json: records at p = 2, {tmp}/g1.json's at p = 1"),
        ("bcast", "g1.json: does not time bcast memcpy at 1048576 B, which {tmp}/bcast.json"),
        ("short", "g1.json: allreduce memcpy at 1048576 B has 20 iterations, {tmp}/short.json's 5"),
        ("unequal", "allreduce at 1048576 B: nccl has 5 iterations, memcpy 20"),
        ("twice", "twice.json: allreduce nccl at 1048576 B recorded twice"),
        ("empty", "empty.json: no bench records"),
        ("emptyfirst", "emptyfirst.json: no bench records"),
        ("noiter", "noiter.json: no per-iteration times (iter_max_us)"),
        ("directory", "adir: not a regular file"),
    ],
)
def test_paired_ratios_refuse_what_is_not_launches_of_one_command(tmp_path, capsys, case, words):
    files = _bad_launch(tmp_path, case)
    assert load_script("gpu_bandwidth").main(["--paired", "nccl", "memcpy", *files]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("gpu_bandwidth: ") and err.count("\n") == 1, err
    assert words.format(tmp=tmp_path) in err, err


def test_the_bandwidth_table_refuses_a_directory_in_one_line(tmp_path, capsys):
    (tmp_path / "adir").mkdir()
    assert load_script("gpu_bandwidth").main([str(tmp_path / "adir")]) == 2
    err = capsys.readouterr().err
    assert "adir: not a regular file" in err and err.count("\n") == 1


def test_paired_ratios_read_the_iteration_times_of_csv_records(tmp_path, capsys):
    files = []
    for launch in range(2):
        path = tmp_path / f"l{launch}.csv"
        rows = [
            {
                **_record("allreduce", label, "bound", 1, 4096, 1.0),
                "iter_max_us": " ".join(f"{t:.3f}" for t in _times(value + launch)),
            }
            for label, value in (("nccl", 100.0), ("memcpy", 50.0))
        ]
        import pandas as pd

        pd.DataFrame(rows).to_csv(path, index=False)
        files.append(str(path))
    assert load_script("gpu_bandwidth").main(["--paired", "nccl", "memcpy", *files]) == 0
    out = capsys.readouterr().out
    assert "over 2 launch(es) at p = 1" in out
    row = out.splitlines()[-1].split()
    assert row[:2] == ["allreduce", "4096"] and 1.9 < float(row[4]) < 2.1


@pytest.mark.parametrize(
    "settings,words",
    [
        (
            {"PARTS": "copybound bogus"},
            "unknown part 'bogus' (bandwidth, training, smoke, copybound",
        ),
        ({"LAUNCHES": "x"}, "LAUNCHES=x: expected a whole number from 1 to 100"),
        ({"LAUNCHES": "0"}, "LAUNCHES=0: expected a whole number from 1 to 100"),
        ({"LAUNCHES": "99999999999999999999"}, "expected a whole number from 1 to 100"),
        ({"SMOKE_TIMEOUT": "1;rm"}, "SMOKE_TIMEOUT=1;rm: expected a whole number"),
        ({"SMOKE_TIMEOUT": "0"}, "SMOKE_TIMEOUT=0: expected a whole number from 1 to 86400"),
        ({"STEP_TIMEOUT": "abc"}, "STEP_TIMEOUT=abc: expected a whole number from 1 to 86400"),
    ],
)
def test_gpu_run_refuses_unknown_parts_and_settings_before_anything_runs(tmp_path, settings, words):
    env = {"PATH": "/usr/bin:/bin", "RUN_DIR": str(tmp_path / "run"), **settings}
    done = subprocess.run(
        ["bash", "scripts/gpu_run.sh"], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert not (tmp_path / "run").exists()


def test_host_device_copies_stop_each_clock_once_the_device_is_idle(cupy, monkeypatch):
    # A copy from pinned memory returns before it is done: without the device's wait, an
    # H200 showed host-to-device copies at 13,167 GB/s.
    from collectives import device
    from osu_dl_bench.measurement import kernel

    settles = []
    real = kernel.timed_round

    def recording(barrier, calls, order, bufs, *rest, **kwargs):
        settles.append(device.settle_for(bufs.send, bufs.recv))
        return real(barrier, calls, order, bufs, *rest, **kwargs)

    monkeypatch.setattr(kernel, "timed_round", recording)

    class OneRank:
        def Barrier(self):  # noqa: N802 - mpi4py's name
            return None

        def allgather(self, value):
            return [value]

    figures = load_script("gpu_host_device").measure_size(OneRank(), 4096)
    assert set(figures) == {"h2d pinned", "d2h pinned", "h2d pageable", "d2h pageable"}
    waits = {getattr(s, "__func__", None) for s in settles}
    assert settles and waits == {cupy.cuda.Device.synchronize}


def test_host_device_copies_refuse_a_range_without_a_byte(capsys):
    assert load_script("gpu_host_device").main(["-m", "0:0"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "-m 0:0: no size holds one element" in err


def _host_device(monkeypatch, argv):
    """gpu_host_device.main(argv) in this process (MPI's singleton), and the sizes it
    measured."""
    script = load_script("gpu_host_device")
    measured = []
    real = script.measure_size

    def measuring(comm, nbytes):
        measured.append(nbytes)
        return real(comm, nbytes)

    monkeypatch.setattr(script, "measure_size", measuring)
    return script.main(argv), measured


def _run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metadata.json").write_text("{}")
    return run


@pytest.mark.parametrize(
    "where,words",
    [
        ("nodir/x.json", "directory {tmp}/nodir does not exist"),
        (".", "is a directory: expected a file name"),
        ("report.json", "already exists; gpu_host_device never replaces a file"),
        ("run/metadata.json", "metadata.json belongs to the run directory"),
    ],
)
def test_host_device_copies_refuse_a_json_path_before_measuring(
    cupy, monkeypatch, tmp_path, capsys, where, words
):
    (tmp_path / "report.json").write_text("another command's report")
    _run_directory(tmp_path)
    path = tmp_path / where
    code, measured = _host_device(monkeypatch, ["-m", "1K:4K", "--json", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and measured == [] and out == ""
    assert err.startswith("gpu_host_device: --json ") and words.format(tmp=tmp_path) in err, err
    assert (tmp_path / "report.json").read_text() == "another command's report"
    assert (tmp_path / "run" / "metadata.json").read_text() == "{}"


def test_host_device_copies_refuse_a_size_the_gpu_cannot_hold_before_measuring(
    cupy, monkeypatch, capsys
):
    monkeypatch.setenv("STRICT_CUPY_DEVICE_MEMORY", str(1 << 20))
    code, measured = _host_device(monkeypatch, ["-m", "1M:4M"])
    out, err = capsys.readouterr()
    assert code == 2 and measured == [] and out == ""
    assert "-m 4M: a copy at p = 1 holds at least" in err and "of device memory" in err, err


def test_host_device_copies_count_the_pinned_and_the_pageable_host_buffer(
    cupy, monkeypatch, capsys
):
    from osu_dl_bench.measurement import memory

    # 4 MiB pinned and 4 MiB pageable: more than 6 MiB, though each alone fits.
    monkeypatch.setattr(memory, "available_bytes", lambda: 6 << 20)
    code, measured = _host_device(monkeypatch, ["-m", "1K:4M"])
    err = capsys.readouterr().err
    assert code == 2 and measured == []
    assert "(a pinned and a pageable host buffer of the size)" in err, err


def test_host_device_copies_keep_the_sizes_measured_before_one_that_fails(
    cupy, monkeypatch, tmp_path, capsys
):
    # cudaHostAlloc fails past the locked-memory limit: 1 KiB and 4 KiB fit, 16 KiB not.
    monkeypatch.setenv("STRICT_CUPY_PINNED_LIMIT", str(8 << 10))
    out_json = tmp_path / "copies.json"
    code, measured = _host_device(monkeypatch, ["-m", "1K:64K", "--json", str(out_json)])
    out, err = capsys.readouterr()
    assert code == 2 and measured == [1024, 4096, 16384]
    rows = [line.split()[0] for line in out.splitlines() if not line.startswith("#")]
    assert rows == ["1024", "4096"]
    assert sorted(json.loads(out_json.read_text()), key=int) == ["1024", "4096"]
    assert "-m: 16K: cannot allocate the copies' buffers" in err, err
    assert "cudaErrorMemoryAllocation" in err and err.count("\n") == 1

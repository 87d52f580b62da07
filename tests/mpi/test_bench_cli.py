"""The bench command end to end under mpiexec: OSU format, validation, exit codes, files."""

import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from mpirun import run_cli, run_cli_cases

from collectives import SPECS
from osu_dl_bench.measurement.records import RECORD_FIELDS

ROW = re.compile(r"^(\d+)\s+(\S.*)$")


def _rows(stdout: str) -> list[list[str]]:
    return [ln.split() for ln in stdout.splitlines() if ln and not ln.startswith("#")]


# Every collective but the two this file tests by name (from the specs: a new collective
# is tested without a line here).
OTHER_COLLECTIVES = [name for name in SPECS if name not in ("allreduce", "bcast")]
BUFFER_OPTIONS = (["-k", "rotate"], ["-l", "-k", "fixed:2"])
# Seconds the job of the shared runs of one process count is given.
SHARED_JOB_TIMEOUT = 240
POINT_TO_POINT = {"latency": "Latency (us)", "bw": "Bandwidth (MB/s)", "bibw": "Bandwidth (MB/s)"}


def _odd_ranks_case(benchmark: str, extra: list[str]) -> list[str]:
    return ["bench", benchmark, "-m", "4:4K", "-c", "-i", "10", "-x", "1", "-T", "int32", *extra]


def _shared_cases(files: Path) -> dict[str, tuple[int, list[str]]]:
    """Name -> (ranks, command line) of the bench runs that need no job of their own: the
    default thread level and environment, and no error met before MPI starts."""
    cases = {
        "full table": (3, ["bench", "allreduce", "-m", "8:64K", "-f", "-c", "-i", "20", "-x", "2"]),
        "tail": (2, ["bench", "allreduce", "-m", "1K", "-z", "-i", "50", "-x", "5"]),
        "two algorithms": (2, ["bench", "allreduce", "-m", "8:32", "-a", "native,ring", "-i", "5"]),
        "named twice": (2, ["bench", "allreduce", "-m", "8:32", "-a", "native,native", "-i", "5"]),
    }
    for name in POINT_TO_POINT:
        cases[name] = (2, ["bench", name, "-m", "0:64K", "-c", "-i", "20", "-x", "2"])
    for suffix in (".json", ".csv"):
        argv = ["bench", "allreduce", "-m", "4:64", "-c", "-i", "10", "-x", "1", "-a", "native"]
        cases[f"records{suffix}"] = (2, [*argv, "-o", str(files / f"records{suffix}")])
    argv = ["bench", "allreduce", "-m", "1K:64K", "-a", "native", "--bounds", "-c", "-f"]
    cases["bounds"] = (3, [*argv, "-i", "10", "-x", "1", "-o", str(files / "bounds.json")])
    argv = ["bench", "allgather", "-m", "64K:64K", "--bounds", "-i", "5", "-x", "1"]
    cases["allgather bounds"] = (3, [*argv, "-o", str(files / "allgather.json")])
    for name in OTHER_COLLECTIVES:
        for number, extra in enumerate(BUFFER_OPTIONS):
            cases[f"{name} {number}"] = (3, _odd_ranks_case(name, extra))
    return cases


class SharedJobs:
    """The shared bench runs (_shared_cases), those of one process count in one job
    (run_cli_cases), started by the first test that asks for one of them; ``files``: the
    folder their -o files are written to."""

    def __init__(self, tmp_path_factory, timeout: float) -> None:
        self._factory, self._timeout = tmp_path_factory, timeout
        self.files = tmp_path_factory.mktemp("shared_files")
        self._cases = _shared_cases(self.files)
        self._runs: dict[str, subprocess.CompletedProcess] = {}

    def run(self, name: str) -> subprocess.CompletedProcess:
        """The run of case ``name``, as run_cli would have given it."""
        if name not in self._runs:
            nprocs = self._cases[name][0]
            names = [other for other, (ranks, _) in self._cases.items() if ranks == nprocs]
            cases = [self._cases[other][1] for other in names]
            tmp = self._factory.mktemp(f"shared_p{nprocs}")
            self._runs.update(
                zip(names, run_cli_cases(nprocs, cases, self._timeout, tmp), strict=True)
            )
        return self._runs[name]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> SharedJobs:
    """The module's shared bench runs; a test starts at most one of their jobs."""
    return SharedJobs(tmp_path_factory, timeout=SHARED_JOB_TIMEOUT)


def test_allreduce_full_validated_table_has_osu_columns(shared):
    res = shared.run("full table")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("# OSU MPI Allreduce Latency Test")
    assert lines[1] == "# Datatype: MPI_FLOAT."
    header = next(ln for ln in lines if ln.startswith("# Size"))
    assert re.match(
        r"^# Size\s+Avg Latency\(us\)\s+Min Latency\(us\)\s+Max Latency\(us\)"
        r"\s+Iterations\s+algbw\(GB/s\)\s+busbw\(GB/s\)\s+Validation$",
        header,
    )
    rows = _rows(res.stdout)
    assert [int(r[0]) for r in rows] == [8 << k for k in range(14)]
    for row in rows:
        avg, lo, hi = map(float, row[1:4])
        assert 0 < lo <= avg <= hi
        assert row[4] == "20" and row[-1] == "Pass"
        float(row[5]), float(row[6])


def test_only_rank_zero_prints():
    res = run_cli(4, ["bench", "bcast", "-m", "4:8", "-i", "5", "-x", "1"])
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("# OSU MPI Broadcast Latency Test") == 1


def test_tail_percentiles_columns(shared):
    res = shared.run("tail")
    assert res.returncode == 0, res.stderr
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("# Size"))
    assert "P50 Tail Lat(us)" in header and "P99 Tail Lat(us)" in header
    for row in _rows(res.stdout):
        p50, p99 = float(row[2]), float(row[3])
        assert 0 < p50 <= p99


@pytest.mark.parametrize("benchmark", OTHER_COLLECTIVES)
def test_other_collectives_validate_on_odd_ranks(benchmark, shared):
    for number in range(len(BUFFER_OPTIONS)):
        res = shared.run(f"{benchmark} {number}")
        assert res.returncode == 0, res.stderr
        rows = _rows(res.stdout)
        assert rows and all(r[-1] == "Pass" for r in rows)


@pytest.mark.parametrize("benchmark,heading", list(POINT_TO_POINT.items()))
def test_point_to_point(benchmark, heading, shared):
    res = shared.run(benchmark)
    assert res.returncode == 0, res.stderr
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("# Size"))
    assert heading in header
    rows = _rows(res.stdout)
    assert rows and all(r[-1] == "Pass" and float(r[1]) >= 0 for r in rows)


def test_corrupted_result_fails_validation_and_keeps_records(tmp_path):
    out = tmp_path / "r.json"
    res = run_cli(
        2,
        ["bench", "allreduce", "-m", "8:1K", "-c", "-i", "5", "-x", "1", "-o", str(out)],
        env={"OSU_DL_BENCH_INJECT_FAULT": "corrupt"},
    )
    assert res.returncode == 1
    assert "DATA VALIDATION ERROR" in res.stdout and "on message size 8" in res.stdout
    assert _rows(res.stdout)[0][-1] == "Fail"
    saved = json.loads(out.read_text())
    assert len(saved) == 1 and saved[0]["validation"] == "fail" and saved[0]["wrong_elements"] == 1


@pytest.mark.parametrize(
    "nprocs,argv,message",
    [
        (3, ["bench", "allreduce", "-m", "16M:8"], "minimum size 16777216 is larger than maximum"),
        (3, ["bench", "allreduce", "-T", "float128"], "unknown datatype 'float128'"),
        (2, ["bench", "allreduce", "--op", "band"], "op 'band' is not valid for float32"),
        (3, ["bench", "bcast", "-k", "fixed:3"], "root must be below the number of processes (3)"),
        (2, ["bench", "allreduce", "-d", "cuda"], "-d cuda needs cupy and a CUDA GPU"),
        (2, ["bench", "allreduce", "-a", "nosuch"], "unknown algorithm 'nosuch'"),
        (2, ["bench", "allreduce", "-o", "out.txt"], "expected a file ending in"),
        (3, ["bench", "latency"], "latency needs exactly 2 processes, got 3"),
        (2, ["bench", "gather", "-l", "-k", "rotate"], "-l with -k rotate is not supported"),
        (2, ["bench", "nosuch"], "invalid choice: 'nosuch'"),
        (2, ["bench", "allreduce", "-i", "-3"], "expected a whole number from 1 to 10000000"),
        (2, ["bench", "allreduce", "-i", "100000000000"], "from 1 to 10000000"),
        (2, ["bench", "allreduce", "-x", "10000001"], "from 0 to 10000000, got '10000001'"),
        (2, ["bench", "allreduce", "-m", "0:0"], "-m 0:0: no size holds one element"),
        (2, ["bench", "allreduce", "-m", "1:1024G"], "are refused (every rank allocates buffers"),
        (2, ["bench", "allreduce", "-a", "ring:seg=abc"], "ring: seg expects a size such as 256K"),
        (2, ["bench", "allreduce", "-a", "ring:seg=1"], "seg expects 0 (whole blocks) or a size"),
        (2, ["bench", "allreduce", "-m", "1:2"], "-m 1:2: no size holds one element of 4 B"),
        (2, ["bench", "latency", "--bounds"], "--bounds: times copies of a collective's message"),
        (3, ["bench", "barrier", "--bounds"], "bench barrier has none"),
    ],
)
def test_bad_input_gives_one_message_and_exit_2_everywhere(nprocs, argv, message):
    res = run_cli(nprocs, argv, timeout=60)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert message in res.stderr
    assert res.stderr.count("osu-dl-bench: error:") == 1
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_record_files_carry_the_schema(shared, suffix):
    res, out = shared.run(f"records{suffix}"), shared.files / f"records{suffix}"
    assert res.returncode == 0, res.stderr
    frame = pd.read_json(out) if suffix == ".json" else pd.read_csv(out)
    required = [
        "collective",
        "algorithm",
        "backend",
        "dtype",
        "op",
        "size_bytes",
        "count",
        "nprocs",
        "nodes",
        "ppn",
        "avg_us",
        "min_us",
        "max_us",
        "p50_us",
        "p99_us",
        "iterations",
        "algbw_gbs",
        "busbw_gbs",
        "validation",
        "mpi_library",
        "mpi4py_version",
        "thread_level",
        "hostnames",
        "package_version",
        "timestamp",
    ]
    assert set(required) <= set(frame.columns) and set(RECORD_FIELDS) <= set(frame.columns)
    assert list(frame["size_bytes"]) == [4, 8, 16, 32, 64]
    assert list(frame["count"]) == [1, 2, 4, 8, 16]
    assert set(frame["validation"]) == {"pass"} and set(frame["nprocs"]) == {2}
    assert set(frame["thread_level"]) == {"single"}
    assert frame["mpi_library"].iloc[0].startswith(("MPICH", "Open MPI"))
    assert (frame["busbw_gbs"] == frame["algbw_gbs"]).all()  # 2(p-1)/p = 1 at p = 2


def test_thread_level_option_is_honoured(tmp_path):
    out = tmp_path / "r.json"
    res = run_cli(
        2,
        ["bench", "allreduce", "-m", "8", "-i", "5", "--thread-level", "multiple", "-o", str(out)],
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())[0]["thread_level"] == "multiple"


def test_several_algorithms_print_consecutive_tables(shared):
    res = shared.run("two algorithms")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("# Size") == 2


def test_bounds_print_an_unchecked_copy_table_and_keep_its_records(shared):
    res, out = shared.run("bounds"), shared.files / "bounds.json"
    assert res.returncode == 0, res.stderr
    tables = res.stdout.split("# OSU MPI Allreduce Latency Test")[1:]
    assert [t.splitlines()[2].split()[2] for t in tables] == ["native", "copy"]
    assert "# Bound: numpy's copy of the message" in tables[1]
    copy_rows = [ln.split() for ln in tables[1].splitlines() if ROW.match(ln)]
    assert [int(r[0]) for r in copy_rows] == [1024 << k for k in range(7)]
    assert all(len(r) == 7 and float(r[1]) > 0 for r in copy_rows)  # no Validation value
    records = pd.DataFrame(json.loads(out.read_text()))
    bound = records[records.backend == "bound"]
    assert list(bound.algorithm.unique()) == ["copy"] and bound.validation.isna().all()
    assert (bound.busbw_gbs == bound.algbw_gbs).all()  # a copy moves its bytes once
    assert (records[records.backend == "mpi"].validation == "pass").all()


def test_a_bound_counts_the_bytes_it_copies_not_the_collectives(shared):
    # allgather's algbw counts p blocks; the copy moves one.
    out = shared.files / "allgather.json"
    assert shared.run("allgather bounds").returncode == 0
    records = pd.DataFrame(json.loads(out.read_text()))
    copy = records[records.algorithm == "copy"].iloc[0]
    native = records[records.algorithm == "native"].iloc[0]
    assert copy.algbw_gbs == pytest.approx(65536 / copy.avg_us / 1e3)
    assert native.algbw_gbs == pytest.approx(3 * 65536 / native.avg_us / 1e3)


def test_an_algorithm_named_twice_is_measured_once(shared):
    res = shared.run("named twice")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("# Size") == 1


def test_unhandled_error_aborts_instead_of_hanging():
    res = run_cli(
        2,
        ["bench", "allreduce", "-m", "8", "-i", "5"],
        env={"OSU_DL_BENCH_INJECT_FAULT": "raise"},
        timeout=60,
    )
    assert res.returncode != 0
    assert "unhandled error, aborting the job" in res.stderr


@pytest.mark.parametrize("where", ["directory", "proc"])
def test_an_unwritable_output_is_refused_before_measuring(tmp_path, where):
    out = tmp_path / "out.csv"
    if where == "directory":
        out.mkdir()
    else:
        out = "/proc/osu-dl-bench-out.csv"
    res = run_cli(2, ["bench", "allreduce", "-m", "8:64", "-i", "2", "-x", "0", "-o", str(out)])
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert f"-o {out}: " in res.stderr and "Traceback" not in res.stderr
    assert _rows(res.stdout) == []  # nothing was measured
    assert [p.name for p in tmp_path.iterdir()] == (["out.csv"] if where == "directory" else [])

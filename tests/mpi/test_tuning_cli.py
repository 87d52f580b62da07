"""The tune and select commands, and bench -a tuned under mpiexec (real processes)."""

import re

import pytest
from mpirun import run_cli, run_cli_cases
from support.tuning import NEEDED, label, model_points, point, write_run

from collectives import algorithms
from osu_dl_bench.selection import build_table

# These tests run the real command, which sees only the algorithms really registered.
_MISSING = [
    f"{collective} {name}"
    for collective, names in NEEDED.items()
    for name in names
    if name not in {a.name for a in algorithms(collective)}
]
pytestmark = pytest.mark.skipif(bool(_MISSING), reason=f"not registered yet: {_MISSING}")


def _table(tmp_path):
    """p=2 allreduce: native below 1 KiB, recursive_doubling to 64 KiB, ring above (the
    others slower than native beyond the spread: no tie set reaches across sizes)."""
    pts = []
    for size, winner in ((8, None), (1024, "recursive_doubling"), (65536, "ring")):
        pts.append(point("allreduce", "native", size, 100.0, 4.0, nprocs=2))
        for name in ("recursive_doubling", "ring"):
            median = 50.0 if name == winner else 110.0
            pts.append(point("allreduce", name, size, median, 4.0, nprocs=2))
    table, _ = build_table(write_run(tmp_path / "run", pts), "t2")
    return table.write(tmp_path / "t2.json")


def test_tune_writes_table_summary_and_exports_and_prints_the_summary(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2, 4)))
    out = tmp_path / "tuning_tables" / "ref.json"
    res = run_cli(1, ["tune", str(run), "-o", str(out), "--export", "openmpi,mpich"], timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("# Tuning table ref (schema 1)")
    assert "## allreduce on cpu, p=4 (1 node x 4 ppn)" in res.stdout
    row = re.compile(r"^\s+\d+[KM]?\s+\S+\s+[\d.]+\s+[\d.]+\s+[\d.]+x", re.M)
    assert len(row.findall(res.stdout)) == 4 * 12  # 2 collectives x 2 p x 12 sizes
    names = ["ref.json", "ref.summary.txt", "ref.openmpi.rules", "ref.openmpi.json"]
    for name in [*names, "ref.mpich.ch4.json", "ref.mpich.posix.json", "ref.mpich.mpir.json"]:
        assert (out.parent / name).stat().st_size > 0, name
        assert f"# wrote {out.parent / name}" in res.stdout
    assert (out.parent / "ref.summary.txt").read_text() in res.stdout


@pytest.mark.parametrize(
    "extra,message",
    [
        (["-o", "t.txt"], "expected a file ending in .json"),
        (["--export", "openmpi,lam"], "unknown library lam"),
    ],
)
def test_tune_rejects_bad_options(tmp_path, extra, message):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,), sizes=[8, 64]))
    res = run_cli(1, ["tune", str(run), *extra], timeout=60)
    assert res.returncode == 2 and message in res.stderr


def test_select_explains_per_size_nearest_and_forced(tmp_path):
    table = _table(tmp_path)
    given = ["--table", str(table)]
    forcing = ["--force", "allreduce=rabenseifner", "--collective", "allreduce"]
    cases = [
        ["select", "--np", "2", "--size", "8,2K,1M", *given],
        ["select", "--np", "3", "--size", "1M", *given],
        ["select", "--np", "2", "--size", "8", *given, *forcing],
        ["select", "--np", "4", "--size", "1M"],
    ]
    res, near, forced, bare = run_cli_cases(1, cases, timeout=120, tmp=tmp_path)
    assert res.returncode == 0, res.stderr
    picks = re.findall(r"=> (\S+) \((\w+)\)", res.stdout)
    ring = label("allreduce", "ring")
    assert picks == [("native", "mpi"), ("recursive_doubling", "mpi"), (ring, "mpi")]
    assert f"source: table {table}" in res.stdout
    assert "how: nearest" in near.stdout and f"=> {ring}" in near.stdout
    assert "how: forced: forced by --force" in forced.stdout
    assert "=> rabenseifner (mpi)" in forced.stdout
    assert "how: native: no table" in bare.stdout and "=> native (mpi)" in bare.stdout


def test_select_with_a_bad_table_names_file_and_field(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(_table(tmp_path).read_text().replace('"ring', '"rung'))
    res = run_cli(1, ["select", "--np", "2", "--size", "1M", "--table", str(bad)], timeout=60)
    assert res.returncode == 2
    assert f"tuning table {bad}: entries[0].ranges[2].choice.algorithm: unknown algorithm" in (
        res.stderr
    )
    assert "Traceback" not in res.stderr


def test_bench_tuned_runs_interleaved_and_validates(tmp_path):
    table = _table(tmp_path)
    res = run_cli(
        2,
        ["bench", "allreduce", "-m", "8:256K", "-a", "native,ring,tuned", "--table", str(table)]
        + ["-c", "-i", "5", "-x", "1"],
        timeout=180,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("# Size") == 3
    assert re.search(r"^#.*tuned", res.stdout, re.M), res.stdout
    rows = [ln.split() for ln in res.stdout.splitlines() if ln and not ln.startswith("#")]
    assert len(rows) == 3 * 16 and all(r[-1] == "Pass" for r in rows)


def test_bench_tuned_with_a_bad_table_fails_on_every_rank_with_one_message(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 9, "entries": []}')
    res = run_cli(2, ["bench", "allreduce", "-a", "tuned", "--table", str(bad)], timeout=60)
    assert res.returncode == 2
    assert res.stderr.count(f"tuning table {bad}: schema_version: expected 1, got 9") == 1

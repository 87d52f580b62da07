"""Output paths: one check (osu_dl_bench.paths) used by every writer turns each way a path
cannot be written (a name too long, a symlink loop, a file where a directory belongs, a
read-only file system) into one message naming the option, the path and the reason."""

from __future__ import annotations

import errno
import os
import tempfile

import pytest
from support.tuning import METADATA, model_points, write_run

from osu_dl_bench import paths
from osu_dl_bench.cli import main
from osu_dl_bench.errors import UsageError

TOO_LONG = "e" * 300


@pytest.fixture
def loop(tmp_path):
    """A directory name that is a symlink loop (a -> b -> a)."""
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    return tmp_path / "a"


def test_a_name_too_long_is_refused(tmp_path):
    with pytest.raises(UsageError, match="-o .*: File name too long"):
        paths.check_writable_file("-o", str(tmp_path / f"{TOO_LONG}.csv"))


def test_a_name_whose_temporary_file_would_be_too_long_is_refused(tmp_path):
    name = "t" * 250  # fits NAME_MAX (255); write_atomic's '.NAME.tmpPID' does not
    with pytest.raises(UsageError, match="File name too long"):
        paths.check_writable_file("-o", str(tmp_path / name))


def test_a_symlink_loop_is_refused_for_files_and_directories(loop):
    for check in (paths.check_writable_file, paths.check_writable_directory):
        with pytest.raises(UsageError, match="Too many levels of symbolic links"):
            check("-o", str(loop / "x"))


def test_a_file_where_a_directory_belongs_is_named(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(UsageError, match=r"-o .*f/x/y: .*f is not a directory"):
        paths.check_writable_directory("-o", str(tmp_path / "f" / "x" / "y"))
    with pytest.raises(UsageError, match=r"-o .*f/x.json: .*f is not a directory"):
        paths.check_writable_file("-o", str(tmp_path / "f" / "x.json"), make_parents=True)


def test_directories_to_be_made_are_accepted_and_not_made(tmp_path):
    paths.check_writable_directory("-o", str(tmp_path / "new" / "run"))
    paths.check_writable_file("-o", str(tmp_path / "new" / "t.json"), make_parents=True)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_file_system_is_named(tmp_path, monkeypatch):
    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    with pytest.raises(UsageError, match="cannot create files in .*: Read-only file system"):
        paths.check_writable_directory("-o", str(tmp_path / "plots"))


def test_write_atomic_writes_under_the_name_the_check_measures(tmp_path):
    seen = []
    paths.write_atomic(
        tmp_path / "out.txt", lambda tmp: (seen.append(tmp.name), tmp.write_text("x"))
    )
    assert seen == [paths.temp_name(tmp_path / "out.txt")]


def _commands(run, other, bad):
    """Every command that writes a file or directory named by an option, at ``bad``."""
    return [
        ["tune", run, "-o", f"{bad}.json"],
        ["plot", run, "-o", bad],
        ["merge", run, other, "-o", bad],
        ["compare", run, other, "--out", bad],
        ["model", "accuracy", run, "--csv", bad],
        ["model", "predict", "--np", "4", "--platform", "x", "-o", f"{bad}.json"],
        ["sweep", "--np", "2", "-o", bad],
        ["train-bench", "--out", bad],
        ["train", "--json", bad],
    ]


@pytest.mark.parametrize("kind", ["too long", "symlink loop"])
def test_every_writer_refuses_a_path_it_cannot_write_with_one_message(tmp_path, loop, capsys, kind):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)), METADATA)
    other = write_run(tmp_path / "other", model_points(nprocs_list=(2,), seed=3), METADATA)
    bad = str(tmp_path / TOO_LONG) if kind == "too long" else str(loop / "x")
    reason = "File name too long" if kind == "too long" else "Too many levels of symbolic links"
    for argv in _commands(str(run), str(other), bad):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert reason in err and "Traceback" not in err, (argv, err)


def test_write_atomic_writes_through_a_symlink_and_keeps_it(tmp_path):
    (tmp_path / "real.csv").write_text("old")
    (tmp_path / "link.csv").symlink_to(tmp_path / "real.csv")
    paths.write_text_atomic(tmp_path / "link.csv", "new")
    assert (tmp_path / "link.csv").is_symlink() and (tmp_path / "real.csv").read_text() == "new"


def _run_files_commands(run, other):
    """Every command that writes a file named by an option, aimed at ``run``'s own files
    (directly, and through a symlink beside it)."""
    link = run.parent / "out.json"
    link.symlink_to(run / "results.csv")
    run, other = str(run), str(other)
    return [
        ["compare", run, other, "--out", f"{run}/results.csv"],
        ["tune", run, "-o", f"{run}/metadata.json"],
        ["tune", run, "-o", f"{run}/focus.json"],
        ["tune", run, "-o", f"{run}/calibration.json"],
        ["model", "accuracy", run, "--csv", f"{run}/calibration.csv"],
        ["compare", run, other, "--out", f"{run}/results.parquet"],
        ["tune", run, "-o", str(link)],
        ["model", "accuracy", run, "--csv", f"{run}/results.csv"],
        ["model", "predict", "--np", "4", "--platform", "x", "-o", f"{run}/metadata.json"],
        ["train", "--json", f"{run}/heartbeats/p2-1-mpi/rank-0"],
        ["bench", "allreduce", "-o", f"{run}/results.csv"],
    ]


def test_no_writer_replaces_a_run_directory_s_own_files(tmp_path, capsys):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)), METADATA)
    other = write_run(tmp_path / "other", model_points(nprocs_list=(2,), seed=3), METADATA)
    (run / "focus.json").write_text('{"launches": {}}')
    (run / "calibration.json").write_text('{"jobs": []}')
    (run / "calibration.csv").write_text("kind,size_bytes\n")
    (run / "heartbeats" / "p2-1-mpi").mkdir(parents=True)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    for argv in _run_files_commands(run, other):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"belongs to the run directory {run}" in err and "Traceback" not in err, (argv, err)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_write_atomic_leaves_a_run_directory_s_files_to_its_store(tmp_path):
    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)), METADATA)
    with pytest.raises(UsageError, match="metadata.json belongs to the run directory"):
        paths.write_text_atomic(run / "metadata.json", "{}")
    paths.write_text_atomic(run / "metadata.json", "{}", run_store=True)
    paths.write_text_atomic(tmp_path / "metadata.json", "{}")  # no run directory there


def test_bench_never_replaces_an_existing_file(tmp_path):
    from osu_dl_bench.measurement.records import check_output_path

    (tmp_path / "old.csv").write_text("measured")
    with pytest.raises(UsageError, match="old.csv: already exists"):
        check_output_path(str(tmp_path / "old.csv"))
    check_output_path(str(tmp_path / "new.csv"))


@pytest.mark.parametrize(
    "option, export, taken",
    [
        ("--export", "nccl", "t.nccl_tuner.conf"),
        ("--export", "mpich", "t.mpich.mpir.json"),
        ("--export", "mpich", "t.mpich.ch4.json"),
        ("--export", "mpich", "t.mpich.notes.txt"),
        ("--export", "openmpi", "t.openmpi.json"),
        ("-o", "openmpi", "t.summary.txt"),
    ],
)
def test_tune_checks_every_file_it_writes_before_writing_any(tmp_path, option, export, taken):
    from osu_dl_bench.cli import build_parser
    from osu_dl_bench.commands import tune_cli
    from osu_dl_bench.commands.tune import run_tune

    run = write_run(tmp_path / "run", model_points(nprocs_list=(2,)), METADATA)
    (tmp_path / taken).mkdir()  # a directory where the file goes
    argv = ["tune", str(run), "-o", str(tmp_path / "t.json"), "--export", export]
    cfg = tune_cli.config_from_args(build_parser().parse_args(argv))
    with pytest.raises(UsageError, match=f"^{option} {tmp_path / taken}: is a directory"):
        run_tune(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["run", taken])

"""Slurm: SLURM_* topology parsing, the sbatch scripts and the pending-forever guard without
Slurm; then, through a real Slurm (scripts/slurm_local.sh start), a submitted sweep at
p = 2 and 4 and a 2-rank training validation, each job with a hard timeout."""

from __future__ import annotations

import argparse
import os
import sys

import pytest
from support.sweep import sweep_config

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs import runinfo, slurm
from osu_dl_bench.jobs.sweep_config import check_script_values
from osu_dl_bench.runtime.launcher import local_rank_count
from osu_dl_bench.runtime.slurm_env import parse_tasks_per_node, slurm_job

_LAUNCHER_VARS = (
    "MPI_LOCALNRANKS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NODEID",
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"MPI_LOCALNRANKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2"}, 4),
        # A step's own layout wins over the job's; uneven layouts by this node's index.
        ({"SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NTASKS_PER_NODE": "8"}, 2),
        ({"SLURM_STEP_TASKS_PER_NODE": "3,2(x2)", "SLURM_NODEID": "2"}, 2),
        ({"SLURM_STEP_TASKS_PER_NODE": "3,2(x2)", "SLURM_NODEID": "0"}, 3),
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "1"}, 2),
    ],
)
def test_local_rank_count_reads_this_nodes_share(monkeypatch, env, expected):
    for var in _LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    assert local_rank_count() == expected


def test_tasks_per_node_expands_slurms_compressed_form():
    assert parse_tasks_per_node("4") == (4,)
    assert parse_tasks_per_node("2(x3),1") == (2, 2, 2, 1)
    assert parse_tasks_per_node("") == ()
    for bad in ("x", "2(x)", "2(xa),1", "-1"):
        with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE"):
            parse_tasks_per_node(bad)


def test_slurm_job_reads_id_nodes_and_tasks_per_node():
    assert slurm_job({}) is None
    env = {
        "SLURM_JOB_ID": "42",
        "SLURM_STEP_ID": "3",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NTASKS": "7",
        "SLURM_TASKS_PER_NODE": "3,2(x2)",
    }
    job = slurm_job(env)
    assert (job.job_id, job.step_id, job.nodes, job.ntasks) == ("42", "3", 3, 7)
    assert job.tasks_per_node == (3, 2, 2) and job.ntasks_per_node == 3
    # Older names, and counts derived from the layout when the totals are missing.
    job = slurm_job({"SLURM_JOBID": "9", "SLURM_NNODES": "2", "SLURM_NPROCS": "8"})
    assert (job.job_id, job.nodes, job.ntasks, job.ntasks_per_node) == ("9", 2, 8, 0)
    job = slurm_job({"SLURM_JOB_ID": "9", "SLURM_TASKS_PER_NODE": "4(x2)"})
    assert (job.nodes, job.ntasks, job.ntasks_per_node) == (2, 8, 4)
    assert slurm_job({"SLURM_JOB_ID": "9", "SLURM_TASKS_PER_NODE": "?"}).tasks_per_node == ()


def test_run_metadata_records_the_slurm_job(monkeypatch):
    for name in [v for v in os.environ if v.startswith("SLURM_")]:
        monkeypatch.delenv(name)
    assert runinfo.slurm_fields() == {}
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "4(x2)")
    fields = runinfo.slurm_fields()
    assert fields["slurm_job_id"] == "77" and fields["slurm_nodes"] == "2"
    assert fields["slurm_ntasks"] == 8 and fields["slurm_ntasks_per_node"] == 4


def test_render_replaces_directives_and_variables_and_names_what_is_missing():
    template = "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --partition=debug\nNP=${NP:-2,4}\nX=1\n"
    text = slurm.render_script(template, {"nodes": "3", "partition": None}, {"NP": "2 4"})
    assert text == "#!/bin/bash\n#SBATCH --nodes=3\n##SBATCH --partition\nNP='2 4'\nX=1\n"
    with pytest.raises(UsageError, match="no line for 'time'"):
        slurm.render_script(template, {"time": "10"}, {})
    with pytest.raises(UsageError, match="no line for 'OUT'"):
        slurm.render_script(template, {}, {"OUT": "x"})


def test_default_partition_is_left_to_the_cluster():
    cfg = sweep_config("--submit", "--np", "4", "-o", "run")
    text = slurm.sweep_script(
        cfg, slurm.batch_request(cfg.nprocs, cfg.batch), slurm.read_template()
    )
    assert "\n##SBATCH --partition\n" in text and "--partition=" not in text
    assert "\n#SBATCH --nodes=1\n#SBATCH --ntasks-per-node=4\n#SBATCH --time=01:00:00\n" in text


SINFO = "debug*|n1|8\ndebug*|n2|8\nbig|n3|64\n"


def test_sinfo_lines_parse_with_the_default_partition_marked():
    nodes = slurm.parse_sinfo_nodes(SINFO)
    assert [(n.partition, n.name, n.cpus, n.default_partition) for n in nodes] == [
        ("debug", "n1", 8, True),
        ("debug", "n2", 8, True),
        ("big", "n3", 64, False),
    ]
    with pytest.raises(UsageError, match="PARTITION\\|NODE\\|CPUS"):
        slurm.parse_sinfo_nodes("debug n1 8")


@pytest.mark.parametrize(
    "nodes,per_node,partition,message",
    [
        (1, 8, None, None),
        (2, 8, "debug", None),
        (1, 64, "big", None),
        (1, 9, None, "partition debug has 0 such node"),
        (3, 8, None, "partition debug has 2 such node"),
        (2, 64, "big", "partition big has 1 such node"),
        (1, 1, "gpu", "no such partition"),
    ],
)
def test_requests_beyond_the_partition_are_refused(nodes, per_node, partition, message):
    request = slurm.BatchRequest(nodes, per_node, "10", partition)
    if message is None:
        slurm.check_fits(request, slurm.parse_sinfo_nodes(SINFO))
        return
    with pytest.raises(UsageError, match=message) as error:
        slurm.check_fits(request, slurm.parse_sinfo_nodes(SINFO))
    assert "pending forever" in str(error.value) or partition == "gpu"


def test_too_few_tasks_for_the_largest_count_are_refused():
    with pytest.raises(UsageError, match="give only 4 tasks; expected at least 6"):
        cfg = sweep_config(
            "--submit", "--np", "6", "--ntasks-per-node", "2", "--nodes", "2", "-o", "r"
        )
        slurm.batch_request(cfg.nprocs, cfg.batch)


def test_a_nul_byte_is_refused_too():
    # No command line can carry one (argv strings end at NUL); a caller of the parser can.
    with pytest.raises(UsageError, match=r"--sbatch-args 'x\\x00y': control character"):
        sweep_config("--submit", "--np", "2", "-o", "run", "--sbatch-args", "x\x00y")


def test_the_provenance_comment_stays_one_line(monkeypatch):
    hostile = ["sweep", "--submit", "-a", "native\ntouch /tmp/x", "-o", "r\r\x1b[2J\u2028y"]
    monkeypatch.setattr(sys, "argv", ["osu-dl-bench", *hostile])
    cfg = sweep_config("--submit", "--np", "2", "-o", "run")
    template = slurm.read_template()
    text = slurm.sweep_script(cfg, slurm.batch_request(cfg.nprocs, cfg.batch), template)
    assert len(text.splitlines()) == len(template.splitlines()) + 1
    note = text.splitlines()[1]
    assert note.startswith("# Written by `osu-dl-bench sweep --submit -a ")
    assert "native\\ntouch /tmp/x" in note and "r\\r\\x1b[2J\\u2028y" in note


@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\u200b", "\ufeff"])
def test_bidi_and_format_characters_are_refused_in_a_batch_script(char):
    args = argparse.Namespace(partition=f"gpu{char}x")
    with pytest.raises(UsageError, match="--partition") as info:
        check_script_values(vars(args))
    assert char not in str(info.value)

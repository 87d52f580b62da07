"""support.options.command_config, the one way tests get a command's config from its
options: parsed as `osu-dl-bench NAME ARGS` parses them."""

from __future__ import annotations

from support.options import command_config

from osu_dl_bench.jobs.sweep_config import SweepConfig


def test_a_commands_config_comes_from_the_clis_own_parser():
    cfg = command_config("sweep", "--np", "2", "-o", "run", "--launcher-args", "--mpi=pmix")
    # A value that looks like an option passes as the CLI passes it (cli.verbatim_values).
    assert isinstance(cfg, SweepConfig) and cfg.launching.launcher_args == ("--mpi=pmix",)
    assert cfg.nprocs == (2,)

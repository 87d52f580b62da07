"""The standalone calibration job that ``model fit`` launches, one per process count:

    mpiexec -n P python -m osu_dl_bench.commands.calibration_job RUN_DIR [-m 8:64M]
        [--rounds 10] [--append]

What it measures and writes is measurement.calibration's (run_calibration_job).
"""

from __future__ import annotations

from osu_dl_bench.commands.model_cli import (
    calibration_job_config_from_args,
    calibration_job_parser,
)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the calibration job (p >= 2 ranks on one node)."""
    from osu_dl_bench.jobs.entry import run_in_job
    from osu_dl_bench.measurement.calibration import run_calibration_job

    cfg = calibration_job_config_from_args(calibration_job_parser().parse_args(argv))
    return run_in_job(
        lambda comm: run_calibration_job(
            comm, cfg.run_dir, cfg.message_size, cfg.rounds, cfg.append
        )
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""Options of the verify-export subcommand, parsed into a VerifyExportConfig (declared
apart from the code that runs it, as every command's options are, so parsing them loads
no MPI)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from collectives import mpit
from osu_dl_bench.commands.arguments import seconds_up_to, whole_number, whole_number_up_to
from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.c_client import DEFAULT_TIMEOUT
from osu_dl_bench.jobs.sweep_config import MAX_BUDGET, MAX_LAUNCHES
from osu_dl_bench.measurement.schedule import williams_cycle

if TYPE_CHECKING:  # the work module loads the sweep's machinery and mpi4py; parsing must not
    from osu_dl_bench.commands.verify_export import VerifyExportConfig

# The subcommand's line in 'osu-dl-bench --help'.
HELP = (
    "the MPI library with an exported selection file against without it: speedup per "
    "size and proof that the file took effect"
)

DEFAULT_NPROCS = "2,4"
DEFAULT_SIZES = "8:16M"
# Many short launches, alternating with and without the file: a comparison across launches
# is as wide as the machine's launch-to-launch swings, so it needs launches, not rounds.
DEFAULT_LAUNCHES = 6
DEFAULT_BUDGET = 1.0
# The C client's launches of each arm (file, default, null control: the three arms of
# selection.exports.verification.ARMS) come in whole cycles of their Williams design
# (measurement.schedule.rotation, 6 launches): only over whole cycles does each arm run in
# each position and after each other arm equally often. 12 is two cycles.
CLIENT_CYCLE = williams_cycle(3)
DEFAULT_CLIENT_LAUNCHES = 12
MAX_CLIENT_LAUNCHES = 996
# A day: a longer wait is a hang, whatever the machine.
MAX_CLIENT_TIMEOUT = 86400.0


def whole_cycles(text: str) -> int:
    """An argparse type: the C client's launches, whole cycles of its arms' Williams design
    (a multiple of CLIENT_CYCLE), so that no arm is favoured by its place in the order."""
    value = whole_number(CLIENT_CYCLE, MAX_CLIENT_LAUNCHES)(text)
    if value % CLIENT_CYCLE:
        raise argparse.ArgumentTypeError(
            f"expected a multiple of {CLIENT_CYCLE} (whole cycles of the three arms' balanced "
            f"order), got {text!r}"
        )
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the verify-export options."""
    parser.add_argument(
        "file",
        metavar="FILE",
        help="an exported selection file: MPICH's NAME (its NAME.mpich.{ch4,posix,mpir}.json, "
        "or any one of them; an older NAME.mpich.json) or NAME.openmpi.rules "
        "(Open MPI's classic dynamic rules)",
    )
    parser.add_argument(
        "--np", default=DEFAULT_NPROCS, metavar="LIST", help=f"process counts ({DEFAULT_NPROCS})"
    )
    parser.add_argument(
        "-m",
        "--message-size",
        default=DEFAULT_SIZES,
        metavar="[MIN:]MAX",
        help=f"sizes in bytes, doubling (default {DEFAULT_SIZES})",
    )
    parser.add_argument(
        "--collectives",
        default="allreduce,bcast",
        help="collectives the file covers (default allreduce,bcast)",
    )
    parser.add_argument(
        "--launches",
        # The sweep's own bounds: checked here, a bad value is one line, not the usage of
        # the sweep that verify-export builds from these options.
        type=whole_number_up_to(MAX_LAUNCHES),
        default=DEFAULT_LAUNCHES,
        metavar="K",
        help=f"launches with and without the file, interleaved (default {DEFAULT_LAUNCHES})",
    )
    parser.add_argument(
        "--budget",
        type=seconds_up_to(MAX_BUDGET),
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help=f"timed seconds per point over all launches (default {DEFAULT_BUDGET:g})",
    )
    parser.add_argument(
        "--mpi",
        choices=("mpich", "openmpi"),
        default=None,
        help="the MPI library the jobs run, as sweep --mpi (default: the one mpi4py finds)",
    )
    parser.add_argument(
        "--client",
        choices=("c", "none"),
        default="c",
        help="also prove the file from C: an OSU-style client built with the library's mpicc "
        "(c, default; or OMB's binaries with --omb), or only from Python (none)",
    )
    parser.add_argument(
        "--omb",
        default=None,
        metavar="DIR",
        help="a directory with OSU Micro-Benchmarks' osu_allreduce and osu_bcast: the C "
        "client is OMB's own",
    )
    parser.add_argument(
        "--client-launches",
        type=whole_cycles,
        default=DEFAULT_CLIENT_LAUNCHES,
        metavar="K",
        help=f"C client launches of each arm (with the file, without it, and the null "
        f"control: the default loaded through a selection file), in a balanced alternating "
        f"order: a multiple of {CLIENT_CYCLE} (default {DEFAULT_CLIENT_LAUNCHES})",
    )
    parser.add_argument(
        "--client-timeout",
        type=seconds_up_to(MAX_CLIENT_TIMEOUT),
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a C client launch (every size of one collective) that runs longer "
        f"(default {DEFAULT_TIMEOUT:g})",
    )
    parser.add_argument(
        "--best-of-candidates",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the C client also runs each MPICH candidate the sweep measured (MPICH's generic "
        "trees with its one change, as the sweep loaded them), at the sizes it measured it, "
        "and reports the best choice per size and the share of its speedup the file "
        "captures (default: on for MPICH where the sweep is found: --sweep, else the run "
        "directory in the provenance of the table BASE.json beside the export)",
    )
    parser.add_argument(
        "--sweep",
        default=None,
        metavar="DIR",
        help="the sweep the export was tuned from, whose candidates --best-of-candidates runs "
        "(default: the table's provenance)",
    )
    parser.add_argument(
        "--write-corrected",
        default=None,
        metavar="BASE",
        help="write the MPICH export again as BASE.mpich.{ch4,posix,mpir}.json (and its table "
        "BASE.json): the file's departures the C client confirms beyond the null control, the "
        "C client's confirmed best choice (--best-of-candidates) where the file has none, "
        "MPICH's default at every other size; the notes give the C client's evidence per "
        "size; exit 0 then, since the export written departs only where confirmed",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue RUN_DIR where a run was stopped (its measured points are kept)",
    )
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="RUN_DIR",
        help="run directory of the measurements (default: FILE's name + '.verify' beside it)",
    )


def config_from_args(args: argparse.Namespace) -> VerifyExportConfig:
    """The VerifyExportConfig of parsed arguments; a FILE that is not there is refused here."""
    from osu_dl_bench.commands.verify_export import VerifyExportConfig

    # MPICH's export is three files: its base name or any one of them names all three.
    file = mpit.mpich_export_mpir_file(args.file)
    if not Path(file).is_file():
        raise UsageError(f"{args.file}: no such file (expected an exported selection file)")
    mpit.mpich_export_siblings(file)  # all three files of an MPICH export, or none
    return VerifyExportConfig(
        file=file,
        nprocs=args.np,
        message_size=args.message_size,
        collectives=args.collectives,
        launches=args.launches,
        budget=args.budget,
        mpi=args.mpi,
        client=args.client,
        omb=args.omb,
        client_launches=args.client_launches,
        output=args.output,
        client_timeout=args.client_timeout,
        resume=args.resume,
        best_of_candidates=args.best_of_candidates,
        sweep=args.sweep,
        write_corrected=args.write_corrected,
    )


def start(cfg: VerifyExportConfig) -> int:
    """Run the subcommand on its parsed options (MPI starts here where it needs it)."""
    from osu_dl_bench.commands.verify_export import run_verify_export

    return run_verify_export(cfg)  # no MPI here: it launches the jobs, as sweep does

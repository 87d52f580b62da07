"""Slurm batch jobs of a sweep (``sweep --submit``): the batch script, filled in from the
package's ``sbatch/sweep.sbatch`` (the file scripts/sbatch/sweep.sbatch links to in a clone)
so that the template stays the one source; the check that keeps a job from pending
forever; and sbatch itself. No MPI here.

A job that asks a node for more tasks than it has CPUs is not rejected by Slurm: it pends
forever with reason PartitionConfig. So the request is compared with what ``sinfo``
reports before anything is submitted.
"""

from __future__ import annotations

import math
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from osu_dl_bench.errors import UsageError
from osu_dl_bench.jobs.sweep_config import CONTROL_CHARACTERS, BatchOptions, SweepConfig
from osu_dl_bench.runtime.metadata import command_line

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # Python 3.11+; annotations only

# Package data, so that an installed package (not only a clone) has them.
TEMPLATE_DIR = files(__package__) / "sbatch"
SWEEP_TEMPLATE = TEMPLATE_DIR / "sweep.sbatch"
SCRIPT_NAME = "sweep.sbatch"
# The log of the batch job, next to its results (%j: the job id).
LOG_NAME = "slurm-%j.out"
# sinfo and sbatch answer within a second from a live controller; a dead one makes them
# retry for minutes, which must end in a message, not a hang.
SLURM_COMMAND_TIMEOUT = 60.0

_DIRECTIVE = re.compile(r"#SBATCH --([a-z-]+)=(.*)")
_VARIABLE = re.compile(r"([A-Z_]+)=\$\{\1:?-.*")


@dataclass(frozen=True)
class BatchRequest:
    """What a batch job asks Slurm for: its #SBATCH lines."""

    nodes: int
    ntasks_per_node: int
    time_limit: str
    partition: str | None  # None: the cluster's default partition

    @property
    def ntasks(self) -> int:
        """Tasks in the whole allocation."""
        return self.nodes * self.ntasks_per_node


@dataclass(frozen=True)
class SlurmNode:
    """One node of one partition as sinfo lists it."""

    partition: str
    name: str
    cpus: int
    default_partition: bool


def batch_request(nprocs: tuple[int, ...], batch: BatchOptions) -> BatchRequest:
    """The allocation a submitted sweep needs: enough tasks for its largest --np."""
    nodes = batch.nodes or 1
    largest = max(nprocs)
    per_node = batch.ntasks_per_node or math.ceil(largest / nodes)
    if nodes * per_node < largest:
        raise UsageError(
            f"--np {largest}: --nodes {nodes} x --ntasks-per-node {per_node} give only "
            f"{nodes * per_node} tasks; expected at least {largest}"
        )
    return BatchRequest(nodes, per_node, batch.time_limit, batch.partition)


def render_script(
    template: str, directives: Mapping[str, str | None], variables: Mapping[str, str]
) -> str:
    """The template with the named '#SBATCH --NAME=...' lines and 'VAR=${VAR:-...}' lines
    replaced. A None directive is disabled as '##SBATCH' (sbatch skips it); variables are
    set outright, so the job does not depend on the submitter's environment."""
    lines, found = [], set()
    for line in template.splitlines():
        directive = _DIRECTIVE.fullmatch(line)
        variable = _VARIABLE.match(line)
        if directive and directive[1] in directives:
            name, value = directive[1], directives[directive[1]]
            found.add(name)
            line = f"#SBATCH --{name}={value}" if value is not None else f"##SBATCH --{name}"
        elif variable and variable[1] in variables:
            found.add(variable[1])
            line = f"{variable[1]}={shlex.quote(variables[variable[1]])}"
        lines.append(line)
    missing = [n for n in [*directives, *variables] if n not in found]
    if missing:
        raise UsageError(
            f"the sbatch template has no line for {missing[0]!r} to fill in: expected "
            f"'#SBATCH --{missing[0]}=...' or '{missing[0]}=${{{missing[0]}:-...}}'"
        )
    return "\n".join(lines) + "\n"


def _plain(option: str, value: str) -> str:
    """A value for an #SBATCH line, which Slurm splits at whitespace."""
    if re.search(r"[\s\"']", value):
        raise UsageError(
            f"{option} {value!r}: a batch job's {option} cannot contain spaces or quotes"
        )
    return value


def current_venv() -> str:
    """The virtual environment of this Python ('' if none): the job activates it."""
    return sys.prefix if sys.prefix != sys.base_prefix else ""


def sweep_script(cfg: SweepConfig, request: BatchRequest, template: str) -> str:
    """The batch script that runs this sweep with srun inside its allocation."""
    run_dir = str(Path(cfg.output).resolve())
    directives = {
        "nodes": str(request.nodes),
        "ntasks-per-node": str(request.ntasks_per_node),
        "time": request.time_limit,
        "partition": _plain("--partition", request.partition) if request.partition else None,
        "output": _plain("-o", f"{run_dir}/{LOG_NAME}"),
    }
    variables = {
        "VENV": current_venv(),
        "NP": ",".join(map(str, cfg.nprocs)),
        "OUT": run_dir,
        "SWEEP_ARGS": shlex.join(cfg.batch_argv()),
    }
    script = render_script(template, directives, variables)
    shebang, _, body = script.partition("\n")
    note = f"# Written by `{one_line(command_line())}` from {SWEEP_TEMPLATE.name}."
    return f"{shebang}\n{note}\n{body}"


def one_line(text: str) -> str:
    """Text with its control characters written as escapes (\\n, \\x1b), so that it stays
    inside one comment line of a script whatever the command line held."""
    return CONTROL_CHARACTERS.sub(lambda found: repr(found[0])[1:-1], text)


def read_template(path: Traversable = SWEEP_TEMPLATE) -> str:
    """The sbatch template's text (package data of osu_dl_bench.jobs)."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(
            f"--submit: cannot read the sbatch template {path} ({exc.strerror}): "
            "reinstall osu-dl-bench, whose package carries it"
        ) from None


def parse_sinfo_nodes(text: str) -> list[SlurmNode]:
    """Lines of ``sinfo -h -N -o '%P|%N|%c'`` (the default partition ends in '*')."""
    nodes = []
    for line in filter(None, (ln.strip() for ln in text.splitlines())):
        fields = line.split("|")
        if len(fields) != 3 or not fields[2].rstrip("+").isdigit():
            raise UsageError(f"sinfo: expected 'PARTITION|NODE|CPUS' lines, got {line!r}")
        partition, name, cpus = fields
        nodes.append(
            SlurmNode(partition.rstrip("*"), name, int(cpus.rstrip("+")), partition.endswith("*"))
        )
    return nodes


def _run_slurm_command(argv: list[str]) -> subprocess.CompletedProcess:
    """Run a Slurm client command; a missing program or a silent controller is a UsageError."""
    program = shutil.which(argv[0])
    if program is None:
        raise UsageError(
            f"--submit needs Slurm's {argv[0]}, which is not on PATH (is Slurm installed here?)"
        )
    try:
        proc = subprocess.run(
            [program, *argv[1:]], capture_output=True, text=True, timeout=SLURM_COMMAND_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"{shlex.join(argv)} did not answer within {SLURM_COMMAND_TIMEOUT:g} s: is the "
            "Slurm controller running?"
        ) from None
    if proc.returncode != 0:
        raise UsageError(
            f"{shlex.join(argv)} failed (exit {proc.returncode}): {proc.stderr.strip()}"
        )
    return proc


def require_commands() -> None:
    """sbatch, sinfo and scontrol must be on PATH before anything is planned or written."""
    missing = [c for c in ("sbatch", "sinfo", "scontrol") if shutil.which(c) is None]
    if missing:
        raise UsageError(
            f"--submit needs Slurm's {', '.join(missing)}, not found on PATH (is Slurm "
            "installed here? --dry-run writes the script without it)"
        )


def query_nodes() -> list[SlurmNode]:
    """Every node of every partition, with its CPUs, from sinfo."""
    return parse_sinfo_nodes(_run_slurm_command(["sinfo", "-h", "-N", "-o", "%P|%N|%c"]).stdout)


def check_fits(request: BatchRequest, nodes: list[SlurmNode]) -> None:
    """Refuse a request no partition node can hold: Slurm would keep it pending forever."""
    partition = request.partition or next((n.partition for n in nodes if n.default_partition), "")
    if not partition:
        raise UsageError(
            "--submit: the cluster has no default partition: name one with --partition"
        )
    members = [n for n in nodes if n.partition == partition]
    if not members:
        known = ", ".join(sorted({n.partition for n in nodes})) or "none"
        raise UsageError(f"--partition {partition}: no such partition (sinfo lists {known})")
    fitting = [n for n in members if n.cpus >= request.ntasks_per_node]
    if len(fitting) < request.nodes:
        most = max(n.cpus for n in members)
        raise UsageError(
            f"the batch job asks for {request.nodes} node(s) with {request.ntasks_per_node} "
            f"tasks each, but partition {partition} has {len(fitting)} such node(s) "
            f"({len(members)} nodes, at most {most} CPUs each): Slurm would leave it pending "
            "forever; lower --np or --ntasks-per-node, or raise --nodes"
        )


def submit_held(script: Path, sbatch_args: tuple[str, ...]) -> str:
    """sbatch the script on hold (it starts only once released); returns the job id."""
    proc = _run_slurm_command(["sbatch", "--parsable", "--hold", *sbatch_args, str(script)])
    job_id = proc.stdout.strip().split(";")[0]  # 'ID' or 'ID;CLUSTER'
    if not job_id.isdigit():
        raise UsageError(f"sbatch --parsable: expected a job id, got {proc.stdout.strip()!r}")
    return job_id


def release(job_id: str) -> None:
    """Let a held job start."""
    _run_slurm_command(["scontrol", "release", job_id])

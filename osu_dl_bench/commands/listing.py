"""The text of ``osu-dl-bench list``: every algorithm, its constraints and parameters."""

from __future__ import annotations

import os
from dataclasses import replace

from collectives import SPECS, all_algorithms, mpich_layers, mpit, registered
from collectives.buffers import cuda_unavailable_reason
from collectives.errors import UsageError
from collectives.registry import UNAVAILABLE_BACKENDS, format_params
from collectives.units import format_size
from osu_dl_bench.runtime.launcher import posix_pinned
from osu_dl_bench.runtime.mpich_trees import generic_trees


def algorithm_listing(collective: str | None = None) -> str:
    """A table of registered algorithms, then the backends that are not available here and
    the buffer kinds (-d) this machine offers."""
    lines = [f"{'collective':<16}{'algorithm':<24}{'backend':<9}{'parameters':<22}requires"]
    for algo in all_algorithms():
        if collective and algo.collective != collective:
            continue
        params = format_params(algo.defaults) or "-"
        needs = "; ".join(r.reason.removeprefix("needs ") for r in algo.requires) or "-"
        lines.append(f"{algo.collective:<16}{algo.name:<24}{algo.backend:<9}{params:<22}{needs}")
    if collective and collective not in SPECS:
        lines.append(f"(no collective named {collective!r})")
    lines += library_lines(collective)
    for backend, reason in sorted(UNAVAILABLE_BACKENDS.items()):
        lines.append(f"backend {backend}: not available here: {reason}")
    lines.append("buffer kinds (-d): " + "; ".join(_buffer_kinds()))
    return "\n".join(lines)


def _buffer_kinds() -> list[str]:
    reasons = {
        "cpu": None,
        "cpu-registered": registered.unavailable_reason(),
        "cuda": cuda_unavailable_reason(),
    }
    return [kind if why is None else f"{kind} (not here: {why})" for kind, why in reasons.items()]


def library_lines(collective: str | None = None) -> list[str]:
    """The running MPI library's own algorithms of each collective that has them, as its
    MPI_T control variables enumerate them: the values of native:alg=NAME (none unless
    MPI runs already, as `list` starts it)."""
    lines: list[str] = []
    if not mpit.mpi_loaded():
        return lines  # the catalog alone is data: reading it must not start MPI
    try:
        library = mpit.running_library()
        for name in mpit.COLLECTIVES:
            if collective and name != collective:
                continue
            if library == "mpich":  # files, not MPI_T variables: its own listing
                lines.append(
                    f"native:alg=NAME of {name}: MPICH's candidates layer by layer: "
                    f"osu-dl-bench list {name} --library mpich --np P [--nodes N]"
                )
                continue
            found = mpit.library_algorithms(name)
            if not found:
                continue
            by_variable: dict[str, list[str]] = {}
            for algo in found:
                by_variable.setdefault(algo.variable, []).append(algo.alg)
            lines.append(f"native:alg=NAME of {name}: the {library} algorithms read through MPI_T")
            for var, names in by_variable.items():
                now = mpit.current_choice(var)
                lines.append(f"  {var} (now {now}): {', '.join(names)}")
    except UsageError as exc:
        lines.append(f"library algorithms: not readable here: {exc}")
    return lines


def mpich_listing(collective: str | None, nprocs: int, nodes: int) -> str:
    """MPICH's layered candidates (collectives.mpich_layers) of each collective in a job of
    ``nprocs`` ranks on ``nodes`` nodes: the layer each acts on, and where it runs the
    default's code (not measured there), the oversubscription setting's included."""
    trees = generic_trees()
    ppn = max(1, nprocs // nodes)
    pinned = posix_pinned(ppn)
    sizes = mpich_layers.log2_sizes(8, 16 << 20)
    lines = [
        f"MPICH {trees.version} ({trees.source}): candidates for p={nprocs} on {nodes} "
        f"node(s), {ppn} rank(s) per node"
        + (f"; {_pinned_by(ppn)}: {OVERSUBSCRIBED_TEXT}" if pinned else ""),
        f"{'collective':<11}{'candidate':<54}{'layer':<7}{'what':<56}where it runs other code",
    ]
    for name in mpich_layers.COLLECTIVES:
        if collective and name != collective:
            continue
        call = mpich_layers.Call(name, nprocs, nodes, sizes[0], oversubscribed=pinned)
        default = mpich_layers.path_text(replace(call, nbytes=64 << 10), trees.trees)
        lines.append(f"{name:<11}{'native (the default)':<54}{'-':<7}{default}")
        for cand in mpich_layers.candidates(name):
            same = mpich_layers.candidate_sizes(cand, call, sizes, trees.trees)
            label = f"native:alg={cand.alg}"
            lines.append(
                f"{name:<11}{label:<54}{cand.layer:<7}{cand.describe():<56}{_where(sizes, same)}"
            )
    lines.append(
        "sizes 8 B-16 MiB; a candidate is MPICH's generic trees with its one change, loaded "
        "from files (MPIR_CVAR_*_SELECTION_TUNING_JSON_FILE, MPIR_CVAR_COLLECTIVE_FALLBACK=error)"
    )
    return "\n".join(lines)


def _pinned_by(ppn: int) -> str:
    """What pins the POSIX layer: the suite's launcher (ranks > cores) or the environment
    (a user's setting, or scripts/cluster_local.sh env's on a shared host)."""
    return "ranks > cores" if ppn > (os.cpu_count() or 1) else "set in the environment"


OVERSUBSCRIBED_TEXT = (
    "the POSIX layer is pinned to MPIR (MPIR_CVAR_<COLL>_POSIX_INTRA_ALGORITHM=mpir)"
)


def _where(sizes: list[int], same: dict[int, str]) -> str:
    """'8-16M' where a candidate runs other code (its sizes, listed where not one run of
    them), else 'nowhere: REASON'."""
    other = [s for s in sizes if s not in same]
    if not other:
        return f"nowhere: {next(iter(same.values()))}"
    first = sizes.index(other[0])
    if sizes[first : first + len(other)] == other:
        return f"{format_size(other[0])}-{format_size(other[-1])}"
    return ", ".join(format_size(s) for s in other)

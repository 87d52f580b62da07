"""The text of ``osu-dl-bench list``: every algorithm, its constraints and parameters."""

from __future__ import annotations

from collectives import SPECS, all_algorithms, mpit, registered
from collectives.buffers import cuda_unavailable_reason
from collectives.errors import UsageError
from collectives.registry import UNAVAILABLE_BACKENDS, format_params


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

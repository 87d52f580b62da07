"""matplotlib, the optional ``plot`` extra: its pyplot on the Agg backend for every command
that draws (``plot``, ``model accuracy``), or one usage error naming the extra to install."""

from __future__ import annotations

import importlib.util

from osu_dl_bench.errors import UsageError

PLOT_EXTRA = "pip install 'osu-dl-bench[plot]'"


def require_matplotlib(command: str) -> None:
    """UsageError naming the plot extra if matplotlib is not installed (looked up, not
    imported: a command checks before its work, and draws at the end)."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(f"{command} needs matplotlib, which is not installed: {PLOT_EXTRA}")


def pyplot(command: str):
    """matplotlib's pyplot on the Agg backend (no display needed), or the UsageError of
    require_matplotlib."""
    require_matplotlib(command)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

"""The performance model as the runtime selector's ``model`` hook: for a call outside the
measured table (or with no table) pick the variant with the lowest predicted time."""

from __future__ import annotations

from functools import lru_cache

from collectives.buffers import is_host
from collectives.shape import JobShape
from osu_dl_bench.model.costs import predict_seconds
from osu_dl_bench.model.platform import Platform
from osu_dl_bench.model.predict import eligible_variants
from osu_dl_bench.selection.selector import Query
from osu_dl_bench.selection.table import Choice


class PlatformModel:
    """``model(query) -> Choice | None``: the fastest predicted eligible variant."""

    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.source = f"{platform.name} ({platform.path})"
        self._best = lru_cache(maxsize=4096)(self._fastest)

    def _fastest(self, collective: str, layout: JobShape, nbytes: int):
        if layout.nodes > 1 and not self.platform.inter.measured and not self.platform.assumed:
            return None  # the inter-node link is unknown: leave it to the table
        timed = [
            (seconds, variant)
            for variant in eligible_variants(collective, layout)
            if (seconds := predict_seconds(self.platform, collective, variant, layout, nbytes))
            is not None
        ]
        return Choice.of(min(timed, key=lambda t: t[0])[1]) if timed else None

    def __call__(self, query: Query) -> Choice | None:
        if not is_host(query.device):
            return None  # the model describes host buffers only
        return self._best(query.collective, query.shape, query.nbytes)


def platform_model(platform: Platform) -> PlatformModel:
    """The selector hook for ``platform``."""
    return PlatformModel(platform)

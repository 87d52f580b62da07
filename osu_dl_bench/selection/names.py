"""Names the selection layer shares with option parsing; importing this starts no MPI."""

# The decision rule's defaults have one home, osu_dl_bench.stats.decision (which loads no
# scipy, so option parsing can read them); re-exported for the callers that import them here.
from osu_dl_bench.stats.decision import INDIFFERENCE, RISK, SLOWER_MARGIN  # noqa: F401

FORCE_ENV = "OSU_DL_BENCH_FORCE_ALGORITHM"
LIBRARIES = ("openmpi", "mpich")
TABLE_DIR = "tuning_tables"

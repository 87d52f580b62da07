"""Names the selection layer shares with option parsing; importing this starts no MPI."""

FORCE_ENV = "OSU_DL_BENCH_FORCE_ALGORITHM"
LIBRARIES = ("openmpi", "mpich")
TABLE_DIR = "tuning_tables"
# The decision rule's defaults (selection.rule.DecisionRule): the risk of a choice more
# than SLOWER_MARGIN slower than native, and the indifference zone. Chosen on simulated
# sweeps with this machine's curves and launch variances, never on the sweeps the tables
# are judged on.
RISK = 0.2
INDIFFERENCE = 0.02
SLOWER_MARGIN = 1.05

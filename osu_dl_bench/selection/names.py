"""Names the selection layer shares with option parsing; importing this starts no MPI."""

FORCE_ENV = "OSU_DL_BENCH_FORCE_ALGORITHM"
LIBRARIES = ("openmpi", "mpich")
TABLE_DIR = "tuning_tables"

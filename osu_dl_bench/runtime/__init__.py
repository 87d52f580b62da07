"""The job around the benchmarks, below every floor that measures: what the launcher
announced before MPI started (``launcher``, ``slurm_env``), MPI start-up at a thread level
(``start``), what every rank must agree on (``agreement``), where the ranks live
(``topology``), what a result records of its run (``metadata``), the entry-point guard that
turns errors into one message and a shared exit code (``guard``), and text made safe to
print (``text``).

mpi4py initialises MPI when ``mpi4py.MPI`` is first imported, so no module here imports it
at import time: ``start.init_mpi`` must run first (the CLI imports the rest lazily).
"""

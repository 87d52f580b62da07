"""Measurement: the one timing kernel (kernel.py: OSU mode for bench, time-budget mode for
the sweep), validation of every candidate's output, records and run directories. Imports
only the collectives and the suite's base modules (runtime, errors, paths, jsonfile)."""

# Here, not in merge.py (pandas), so merge's option parsing reads them without pandas.
# What makes two runs' times comparable: the same MPI library, version and machines.
IDENTITY = ("mpi_library", "mpi_version", "hosts")
# The words that name the IDENTITY fields runs may differ in (merge's --allow-mixed).
MIXABLE = {"library": "mpi_library", "version": "mpi_version", "hosts": "hosts"}

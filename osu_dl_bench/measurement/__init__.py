"""Measurement: the one timing kernel (kernel.py: OSU mode for bench, time-budget mode for
the sweep), validation of every candidate's output, records and run directories. Imports
only the collectives and the suite's base modules (runtime, errors, paths, jsonfile)."""

"""Measurement: the timing kernels (OSU mode and time-budget mode), validation of every
candidate's output, records and run directories. Imports only the collectives and the
suite's base modules (runtime, errors, paths, jsonfile)."""

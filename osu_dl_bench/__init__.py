"""osu-dl-bench: measure, tune and apply MPI collectives for deep-learning training."""

__version__ = "0.1.0"

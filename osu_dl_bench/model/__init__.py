"""The performance model (the "oracle"): alpha-beta-gamma parameters fitted to
measurements, predictions of every registered algorithm's time, predicted tuning tables,
and training step time at scale. Uses collectives and tuning's table schema; nothing below
it imports it.

Modules: platform (the parameter file), fit (robust least squares), calibrate (the MPI job,
one per process count, that measures message and reduction costs with every rank of the
node active: a contention state), costs (algorithm times from a platform), mpich_native
(what MPICH's native selection runs), predict (predicted tables), accuracy (prediction
against a sweep), training (data-parallel step time and the strategies of Kahira et al.),
commands and options (the ``model`` subcommand).
"""

"""The performance model (the "oracle"): alpha-beta-gamma parameters fitted to
measurements, predictions of every registered algorithm's time, predicted tuning tables,
and training step time at scale. Uses collectives and tuning's table schema; nothing below
it imports it.

Modules: platform (the parameter file), fit (robust least squares), platform_fit
(calibration rows to contention states; the calibration kernels and their standalone job
are measurement.calibration's, which a sweep also runs in each of its launches),
costs (algorithm times from a platform), mpich_native (what MPICH's native selection
runs), corrections (per-variant factors on the formulas, fitted to a sweep), measured (a
sweep's rows and points as the model sees them), state (predictions scaled to a point's
machine state), predict (predicted tables), accuracy (prediction against a sweep, beside
the sweep's own ceiling), training (data-parallel step time and the strategies of Kahira
et al.), commands and options (the ``model`` subcommand).
"""

"""Reference data-parallel trainer (``osu-dl-bench train``, the ``train`` extra): rank 0's
state broadcast at start, gradients averaged in buckets overlapped with backward, every
call through a collective policy (a fixed registry algorithm or the tuned selector).

Uses the collectives and tuning packages; neither imports this one. Importing this
package loads neither torch nor MPI: the modules that need them are imported by the
command after its options are parsed (``options`` is torch- and MPI-free).

Modules: options (config), ddp_defaults (DDP's bucket sizes), policy (which algorithm
per call), comm_thread (the one thread that calls MPI), buckets and reducer (gradient
buckets, hooks, overlap), comm_hooks (averaging, fp16 compression), trainer (a replica's
step), data and models, traffic (a model's buckets, without torch's weights), checkpoint,
validate, records and report, run (the command).
"""

"""Jobs: start an MPI job (mpiexec, srun, sbatch), follow it with a stall timeout, stop
it; the sweep's plan and the worker that runs inside each job."""

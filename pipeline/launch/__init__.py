"""Launch: turn a sweep into submitit jobs (local processes or Slurm), record them in the ledger."""

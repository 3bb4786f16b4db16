"""Launch: plan a sweep (validate everything first), run it on a backend (local processes, this very
process, or Slurm), record every submission in the dataset's ledger."""

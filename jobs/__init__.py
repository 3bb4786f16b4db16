"""The scripts around the packages: the device run (``jobs/gpu_run/``, ``python -m jobs.gpu_run``) and
its records' tables (``gpu_records.py``), the local Slurm cluster, the dataset checkers. They import the
pipeline and the kernels, never the tests (``tests/test_layering.py``)."""

"""Full scale before any GPU: every execution's GPU path at the report's shapes, on fake tensors.

``python -m pipeline.estimate`` (``moe-bench estimate``) runs an execution's code path as its hot rank
would on a GPU of a cluster preset, with no memory allocated and no arithmetic done, and reports the
peak allocated memory and what holds it, the device ops and host synchronizations of a timed
iteration, and whether it fits (docs/ARCHITECTURE.md, "pipeline/estimate"). What the command line
uses (``table``, ``pool``, ``jobs``, ``presets``, ``report``) imports no torch: estimates run in worker
processes that set up fake CUDA before torch (``worker``, ``run``). Publishing imports none of this: it
reads the kept table through :mod:`pipeline.data.estimates`, and ``pipeline.aggregate --estimate`` runs
``python -m pipeline.estimate --dataset`` as a command of its own.
"""

"""Shard schema: one parquet file per execution attempt, one row per rank x phase x window
(``<dataset>/shards/execution=<id>/attempt-<n>.parquet``, see :mod:`pipeline.data.dataset`).

The file's key-value metadata ``execution`` holds one JSON object:

- ``schema_version`` (int), ``execution_id``, ``workload_id``, ``attempt`` (int), ``job_id``;
- ``config``: the resolved Hydra config of the execution;
- ``shape`` (:class:`pipeline.matrix.scale.Shape`): ``nominal_tokens`` (the scale's T per GPU, used by
  the report's formulas), ``layer_tokens`` (T'_l fed to each launched rank, per timed layer; T when
  all EP ranks run), ``tracked_rows`` (rows rank 0 receives per timed layer), ``d_model``, ``d_ff``
  (width run; the ``d_ff`` column is the matrix's nominal width), ``num_experts`` (nominal E),
  ``layer_experts`` (E of the launched layer), ``top_k``, ``num_shared``, ``ep`` (nominal), ``ranks``
  (launched), ``layer_loads`` (tracked-GPU load factor per timed layer: one for inference/training,
  ten for packing), ``dtype``, ``warmup``, ``windows``, ``iterations``;
- ``timing``: ``clock`` (what timed the windows), ``cuda_graphs`` (bool) and why not, where not;
- ``provenance``: ``git_sha``, ``hosts`` (list), ``job_ids`` (list), ``launcher`` (the backend:
  ``local`` or ``slurm``), ``cluster`` (the cluster preset), ``versions`` (torch, cuda, driver, nccl,
  cutlass_dsl, python; null where absent). Shards written before schema 1's launcher fix hold the two
  values the other way round; nothing reads them but people;
- ``started_at``, ``ended_at`` (ISO-8601 UTC);
- ``memory``: ``peak_allocated_bytes`` (CUDA; null on CPU), ``peak_rss_bytes`` (max over ranks);
- ``nvlink``: ``tx_bytes_per_s``, ``rx_bytes_per_s`` (averaged over GPUs; null where unsupported),
  ``sample_seconds``, ``reason`` (why null, else null);
- ``saved_state``: one object per timed layer (the tracked GPU's, :class:`pipeline.moe.SavedState`):
  ``layer``, ``load_factor``, ``factor`` (``budget_rows`` / T x K), ``budget_rows`` (saved-activation
  rows allocated for this layer; Dist-MoE: its share of the pooled slot), ``routed_rows``,
  ``retained_rows``, ``recomputed_rows``, ``recomputes`` (bool: some rows recomputed in backward),
  ``capacity_flag`` (Dist-MoE's flag, bool; null for MoK, which has none);
- ``policy``: the stack's allocation policy (``describe()`` of :mod:`pipeline.moe.policy`): layers,
  requested and effective factor, per-layer budget rows, pooled or not, activation rows in all,
  scratch factor and rows, host scratch bytes, what overflow means.

Version 1 recorded Dist-MoE's ``budget_rows`` as the pooled slot of all layers beside a per-layer
``factor``, and one ``overflow`` flag that meant "recomputed" for MoK and "capacity flag" for
Dist-MoE; it had no ``policy``. The reader reads both and gives version 1 the fields of version 2
(per-layer budget, ``recomputes``, ``capacity_flag``; ``policy`` null).
- ``sanity`` (:mod:`pipeline.bench.sanity`, the correctness gate run before timing): ``passed`` (bool;
  always true in a written shard, since a failing execution writes none), ``max_error`` and
  ``tolerance`` (normwise relative, worst over ranks and tensors), ``errors`` (tensor name -> worst
  error over ranks: ``y``, and ``dx``, ``dw1``, ``dw2`` for kinds with a backward), ``tokens`` (slice
  size per rank), ``seconds`` (slowest rank's gate time). Absent in shards written before the gate;
  readers accept both.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
METADATA_KEY = b"execution"

SCHEMA = pa.schema(
    [
        pa.field("execution_id", pa.string(), nullable=False),
        pa.field("workload_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("profile", pa.string(), nullable=False),
        pa.field("precision", pa.string(), nullable=False),
        pa.field("implementation", pa.string(), nullable=False),
        pa.field("pipeline", pa.string(), nullable=False),
        pa.field("ep", pa.int32(), nullable=False),
        pa.field("ranks", pa.int32(), nullable=False),
        pa.field("d_ff", pa.int32(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("window", pa.int32(), nullable=False),
        pa.field("iterations", pa.int32(), nullable=False),
        pa.field("phase", pa.string(), nullable=False),
        pa.field("window_ms", pa.float64(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("device", pa.string(), nullable=False),
    ]
)

"""Where an execution's ranks sat, as its published row says it: the ``communication`` text names the
nodes and NVLink domains an EP group spans (H200: EP8 on one node, EP32 and EP64 over 4 and 8 nodes,
each its own NVLink domain; GB300 NVL72: EP64 over 16 trays in one domain), from the topology the
shard measured or, in a shard written before the topology was recorded, from the preset's placement;
a one-rank row says nothing crossed. The speed of light takes the measured placement where there is
one: EP32 measured at 4 ranks a node spans 8 H200 nodes, so more of its rows take InfiniBand than the
preset's 8 a node would send, and the bound grows by exactly that share."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import cost
from pipeline.base.gpu_presets import gpu_preset
from pipeline.cost.speed_of_light import inter_node_share
from pipeline.data.reader import Shard, read_shard
from pipeline.data.schema import METADATA_KEY
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.report import communication
from pipeline.report.executions import execution_row, layer_shape
from pipeline.tools.synthetic_shards import shard_table, write_table

EP8 = EXECUTION_BY_ID["inference-ep8-f1536-bf16-mok-native"]
EP32 = EXECUTION_BY_ID["training-ep32-f3072-bf16-mok-native"]
EP64 = EXECUTION_BY_ID["training-ep64-f1536-bf16-mok-native"]
DEVICE = {"h200": "NVIDIA H200", "gb300": "NVIDIA GB300"}


def shard(tmp_path: Path, execution, preset: str, *, per_node: int | None = None, ranks: int | None = None):
    """A full-scale shard of ``execution`` on ``preset``'s GPU, its ranks ``per_node`` a node (default:
    the preset's, as Slurm places the job's tasks)."""
    placed = per_node or gpu_preset(preset).ranks_per_node
    table = shard_table(
        execution, 1, np.random.default_rng(7), ranks=ranks, device=DEVICE[preset], per_node=placed
    )
    return read_shard(write_table(tmp_path / f"{preset}-{placed}", table))


def as_version_6(shard: Shard) -> Shard:
    """The same shard as metadata version 6 wrote it: no topology, no count of the gate's rows."""
    table = pq.read_table(shard.path)
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta |= {"schema_version": 6, "sanity": {k: v for k, v in meta["sanity"].items() if "rows" not in k}}
    del meta["topology"]
    root = shard.path.parents[2]
    path = root.with_name(f"{root.name}-v6") / shard.path.relative_to(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)
    return read_shard(path)


@pytest.mark.parametrize(
    ("preset", "execution", "said"),
    [
        ("h200", EP8, "nccl all-to-all, EP8 on one node, one NVLink domain"),
        ("h200", EP32, "nccl all-to-all, EP32 over 4 nodes x 8 GPUs, 4 NVLink domains: inter-node links"),
        ("h200", EP64, "nccl all-to-all, EP64 over 8 nodes x 8 GPUs, 8 NVLink domains: inter-node links"),
        ("gb300", EP64, "nccl all-to-all, EP64 over 16 nodes x 4 GPUs, one NVLink domain"),
    ],
)
def test_communication_names_the_nodes_and_nvlink_domains_an_ep_group_spans(
    tmp_path: Path, preset: str, execution, said: str
):
    measured = shard(tmp_path, execution, preset)
    assert (
        measured.meta.topology is not None
        and measured.meta.topology.nodes == gpu_preset(preset).span(execution.workload.ep).nodes
    )
    assert execution_row(measured)["communication"] == said
    unmeasured = as_version_6(measured)  # placed as the preset places that many ranks
    assert unmeasured.meta.topology is None and unmeasured.meta.schema_version == 6
    assert execution_row(unmeasured)["communication"] == said


def test_one_rank_communicates_nothing_and_a_measured_placement_is_said_as_measured(tmp_path: Path):
    alone = shard(tmp_path, EP32, "h200", ranks=1)
    assert execution_row(alone)["communication"] == communication.NONE == "none: 1 rank"
    four = shard(tmp_path, EP32, "h200", per_node=4)  # a site that runs 4 tasks on each 8-GPU node
    assert execution_row(four)["communication"] == (
        "nccl all-to-all, EP32 over 8 nodes x 4 GPUs, 8 NVLink domains: inter-node links"
    )
    uneven = shard(tmp_path, EP8, "h200", per_node=6)
    assert execution_row(uneven)["communication"] == (
        "nccl all-to-all, EP8 over 2 nodes of 6, 2 GPUs, 2 NVLink domains: inter-node links"
    )


def test_the_speed_of_light_takes_the_measured_placement_else_the_preset_s(tmp_path: Path):
    """EP32 on H200: measured at 4 ranks a node, 28 of a rank's 31 peers sit on other nodes; placed as
    the preset places it (8 a node), 24 do. The all-to-all takes the inter-node link's time for those
    rows, so the bound is the preset's plus the extra rows at InfiniBand's rate, from the cost model's
    parts computed here by hand."""
    h200 = gpu_preset("h200")
    four = shard(tmp_path, EP32, "h200", per_node=4)
    eight = shard(tmp_path, EP32, "h200")
    assert communication.placement(four).ranks_per_node == 4
    assert communication.placement(eight).ranks_per_node == 8
    assert communication.placement(as_version_6(four)).ranks_per_node is None  # the preset's stands
    layer = layer_shape("training", "bf16", four.meta.shape)
    assert inter_node_share(h200.span(32, 4)) == 28 / 31 and inter_node_share(h200.span(32)) == 24 / 31
    # training: dispatch and combine, and two BF16 all-to-alls of the same rows in the backward
    s = four.meta.shape
    remote_bytes = s.nominal_tokens * s.top_k * 31 / 32 * 4 * (2 * s.d_model)
    by_hand = {
        per: 1e3 * remote_bytes * share / (h200.link("inter_node_gb_s") * 1e9)
        for per, share in ((4, 28 / 31), (8, 24 / 31))
    }
    parts = {per: cost.speed_of_light(layer, "h200", ranks_per_node=per) for per in (4, 8)}
    assert parts[4].all_to_all_ms == pytest.approx(by_hand[4], rel=1e-12)
    assert parts[8].all_to_all_ms == pytest.approx(by_hand[8], rel=1e-12)
    assert parts[4].roofline_ms == parts[8].roofline_ms  # the placement moves rows, not work
    published = {
        "measured 4": float(execution_row(four)["speedOfLightMS"]),
        "measured 8": float(execution_row(eight)["speedOfLightMS"]),
        "preset": float(execution_row(as_version_6(four))["speedOfLightMS"]),
    }
    assert published["measured 4"] == pytest.approx(parts[4].total_ms, rel=1e-12)
    assert published["measured 8"] == published["preset"] == pytest.approx(parts[8].total_ms, rel=1e-12)
    assert published["measured 4"] > published["preset"]


def test_a_phase_s_bytes_across_ranks_take_the_inter_node_link_for_the_share_that_leaves_the_domain(
    tmp_path: Path,
):
    """The dispatch phase's %SOL of EP32 measured at 4 ranks a node on H200: of its bytes across ranks
    28/31 take InfiniBand and 3/31 NVLink, at once; the slower (and the phase's HBM bytes) sets its
    time at the peaks, computed here from the phase's work and the preset's figures."""
    h200 = gpu_preset("h200")
    table = shard_table(EP32, 1, np.random.default_rng(3), device=DEVICE["h200"], per_node=4, account=True)
    four = read_shard(write_table(tmp_path, table))
    row = execution_row(four)
    (published,) = [r for r in four.meta.account.ranks if r.profiled_ms == row["profiledMS"]]  # the slowest
    layer = layer_shape("training", "bf16", four.meta.shape)
    work = cost.phase_work(layer, four.meta.shape.layer_tokens, published.routed_rows, "bf16")["dispatch"]
    assert work.link_bytes > 0
    at_peaks_s = max(
        work.bytes / (h200.peak("hbm_tb_s") * 1e12),
        work.link_bytes * 3 / 31 / (h200.peak("nvlink_gb_s") * 1e9),
        work.link_bytes * 28 / 31 / (h200.link("inter_node_gb_s") * 1e9),
    )
    assert float(row["phaseDispatchSOLPct"]) == pytest.approx(
        100 * 1e3 * at_peaks_s / published.phases["dispatch"], rel=1e-9
    )

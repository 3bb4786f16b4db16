"""The estimate's groups: per preset and resource shape (nodes x GPUs per node, from the EP size and
the preset's GPUs per node), the NVLink domains it spans, the executions one job would run and the
group's peak, its largest execution's."""

from __future__ import annotations

from pipeline.base.gpu_presets import gpu_preset
from pipeline.tools.estimate.report import groups


def result(execution_id: str, ep: int, peak: float, cluster: str = "h200") -> dict:
    return {"execution_id": execution_id, "ep": ep, "peak_gib": peak, "cluster": cluster}


def test_each_shape_is_a_group_whose_peak_is_its_largest_execution():
    assert gpu_preset("h200").ranks_per_node == 8 and gpu_preset("gb300").ranks_per_node == 4
    lines = groups(
        [
            result("a-ep8", 8, 10.0),
            result("b-ep8", 8, 33.2),
            result("c-ep32", 32, 20.8),
            result("d-ep32", 32, 5.0),
            result("e-ep8", 8, 12.0, "gb300"),
        ]
    )
    assert lines[2:] == [
        "  gb300 EP8, 2 nodes x 4 GPUs, one NVLink domain of 72 GPUs: 1 executions, peak 12.00 GiB (e-ep8)",
        "  h200 EP8, 1 node x 8 GPUs, one NVLink domain of 8 GPUs: 2 executions, peak 33.20 GiB (b-ep8)",
        "  h200 EP32, 4 nodes x 8 GPUs, 4 NVLink domains of 8 GPUs, 50 GB/s per GPU between them: 2 "
        "executions, peak 20.80 GiB (c-ep32)",
    ]


def test_ep32_and_ep64_span_nodes_on_h200_and_one_nvlink_domain_on_gb300():
    lines = groups([result("t-ep64", 64, 9.0), result("u-ep64", 64, 8.0, "gb300"), result("v-ep32", 32, 1.0)])
    assert lines[2:] == [
        "  gb300 EP64, 16 nodes x 4 GPUs, one NVLink domain of 72 GPUs: 1 executions, peak 8.00 GiB (u-ep64)",
        "  h200 EP32, 4 nodes x 8 GPUs, 4 NVLink domains of 8 GPUs, 50 GB/s per GPU between them: 1 "
        "executions, peak 1.00 GiB (v-ep32)",
        "  h200 EP64, 8 nodes x 8 GPUs, 8 NVLink domains of 8 GPUs, 50 GB/s per GPU between them: 1 "
        "executions, peak 9.00 GiB (t-ep64)",
    ]

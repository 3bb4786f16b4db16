"""The estimate's groups: per preset and resource shape (nodes x GPUs per node, from the EP size and
the preset's GPUs per node), the executions one job would run and the group's peak, its largest
execution's."""

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
        "  gb300 2 node(s) x 4: 1 executions, peak 12.00 GiB (e-ep8)",
        "  h200 1 node(s) x 8: 2 executions, peak 33.20 GiB (b-ep8)",
        "  h200 4 node(s) x 8: 2 executions, peak 20.80 GiB (c-ep32)",
    ]

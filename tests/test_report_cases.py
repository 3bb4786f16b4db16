"""What a suite that publishes cases publishes per execution (pipeline/report/cases.py): on a device
of a preset, its %SOL against the speed of light of the shape that ran; on a CPU, none."""

from __future__ import annotations

import pytest

from pipeline.base.gpu_presets import gpu_preset
from pipeline.cost import LayerShape, roofline
from pipeline.data.reader import read_shard
from pipeline.matrix.suite import load
from pipeline.report.cases import case_rows
from pipeline.report.executions import execution_row
from pipeline.tools.synthetic_shards import shard_table, write_table

SUITE = load("seed-003")


@pytest.mark.parametrize(("device", "preset"), [("NVIDIA H200", "h200"), ("cpu", None)])
def test_a_case_is_its_speed_of_light_over_its_time_where_its_device_has_peaks(tmp_path, rng, device, preset):
    shards = {}
    for execution in (SUITE.executions[-1], SUITE.executions[0]):  # T = 16,384 and 1,024
        table = shard_table(execution, 1, rng, scale="full", device=device)
        shards[execution.execution_id] = read_shard(write_table(tmp_path, table), SUITE)
    rows = [execution_row(shard) for shard in shards.values()]
    cases = case_rows(rows, shards, SUITE)
    assert [c["tokens"] for c in cases] == [1024, 16384]  # the suite's order
    for case in cases:
        w = SUITE.execution(str(case["execution_id"])).workload
        shape = LayerShape("inference", w.tokens, 8192, 2048, 256, 8, 1, "bf16", (1.0,), 0)
        full = roofline(shape, gpu_preset("gb300"))  # the dataset's preset: none, so the report's
        assert (case["fullScalePreset"], case["fullScaleSolMS"]) == ("gb300", pytest.approx(full.ms))
        assert case["caseMaxError"] is None  # the synthetic gate checked no case
        if preset is None:
            assert case["solPct"] is None and case["solMS"] is None
            continue
        sol = roofline(shape, preset).ms
        assert case["solMS"] == pytest.approx(sol)
        assert case["solPct"] == pytest.approx(100 * sol / float(case["iterationMS"]))

"""The GPU presets' one source, ``conf/cluster/<name>.yaml``: the real files load with the datasheet
figures and a source for each, a bad file is refused in one line naming the value and what is allowed,
and adding a preset is adding one YAML file (the model, the estimate, the kept table's preset choice
and the published %SOL columns all see it). Its links place an EP group's ranks on nodes and NVLink
domains, and the rows that leave a domain take the inter-node link in the prediction."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pipeline import cost
from pipeline.base import gpu_presets as presets
from pipeline.data import estimates
from pipeline.data.reader import read_shard
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.report.executions import execution_row
from pipeline.tools.estimate.presets import Preset
from pipeline.tools.synthetic_shards import shard_table, write_table

CLUSTERS = Path(__file__).resolve().parents[1] / "conf" / "cluster"


def test_the_presets_are_the_datasheets_figures_each_with_its_source():
    got = presets.gpu_presets()
    assert sorted(got) == ["gb300", "h200"]  # local-slurm has no GPU
    h200 = {k: p.value for k, p in got["h200"].peaks.items()}
    assert h200 == {"bf16_tflops": 989.5, "fp8_tflops": 1979.0, "hbm_tb_s": 4.8, "nvlink_gb_s": 450.0}
    gb300 = {k: p.value for k, p in got["gb300"].peaks.items()}
    assert gb300 == {"bf16_tflops": 2500.0, "fp8_tflops": 5000.0, "hbm_tb_s": 8.0, "nvlink_gb_s": 900.0}
    assert all("H200 datasheet" in p.source for p in got["h200"].peaks.values())
    derived = [p.source for k, p in got["gb300"].peaks.items() if k != "nvlink_gb_s"]
    assert all("GB300 NVL72 datasheet" in source and "Unsure" in source for source in derived)
    assert (got["h200"].arch, got["h200"].memory_gb, got["gb300"].arch, got["gb300"].memory_gb) == (
        "sm_90a", 141.0, "sm_100a", 288.0,
    )  # fmt: skip
    links = {name: {k: p.value for k, p in got[name].links.items()} for name in ("h200", "gb300")}
    assert links == {
        "h200": {"gpus_per_node": 8, "nvlink_domain": 8, "inter_node_gb_s": 50},
        "gb300": {"gpus_per_node": 4, "nvlink_domain": 72, "inter_node_gb_s": 100},
    }
    assert "400 Gb/s InfiniBand" in got["h200"].links["inter_node_gb_s"].source
    assert "one NVLink domain" in got["gb300"].links["nvlink_domain"].source
    assert all(got[n].ranks_per_node == links[n]["gpus_per_node"] for n in links)  # one rank per GPU


@pytest.mark.parametrize(
    ("preset", "ep", "placed"),
    [
        ("h200", 8, (1, 8, 1, 8)),
        ("h200", 16, (2, 8, 2, 8)),
        ("h200", 32, (4, 8, 4, 8)),
        ("h200", 64, (8, 8, 8, 8)),
        ("gb300", 8, (2, 4, 1, 8)),
        ("gb300", 64, (16, 4, 1, 64)),
    ],
)
def test_an_ep_group_spans_nodes_and_nvlink_domains(preset: str, ep: int, placed: tuple[int, ...]):
    """(nodes, ranks per node, NVLink domains, ranks in one domain): EP32 and EP64 leave the H200's
    one-node domain for 4 and 8 nodes; a GB300 NVL72 holds EP64 in one domain."""
    span = presets.gpu_preset(preset).span(ep)
    assert (span.nodes, span.ranks_per_node, span.domains, span.domain_ranks) == placed


def test_a_domain_inside_a_node_and_fewer_ranks_per_node_are_placed_in_order():
    """Four ranks per node on an 8-GPU node of NVLink pairs: EP16 sits on 4 nodes in 8 pairs."""
    preset = presets.gpu_preset("h200")
    pairs = replace(preset, links={**preset.links, "nvlink_domain": presets.Peak(2, "pairs")})
    span = pairs.span(16, ranks_per_node=4)
    assert (span.nodes, span.ranks_per_node, span.domains, span.domain_ranks) == (4, 4, 8, 2)
    assert span.describe() == "4 nodes x 4 GPUs, 8 NVLink domains of 2 GPUs, 50 GB/s per GPU between them"
    assert preset.span(1).describe() == "1 node x 1 GPUs, one NVLink domain of 8 GPUs"


@pytest.mark.parametrize(
    ("device", "preset"),
    [
        ("NVIDIA H200", "h200"),
        ("nvidia h200", "h200"),
        ("NVIDIA GB300", "gb300"),
        ("NVIDIA H200 NVL", None),  # another variant: other clocks and links
        ("NVIDIA H200-PCIe", None),
        ("NVIDIA H100 80GB HBM3", None),
        ("cpu", None),
    ],
)
def test_a_recorded_device_name_maps_to_its_preset(device: str, preset: str | None):
    assert presets.preset_for_device(device) == preset == cost.hardware_for_device(device)


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "cluster"
    shutil.copytree(CLUSTERS, folder)
    return folder


def _edit(folder: Path, name: str, change: dict[str, Any]) -> None:
    """Set dotted keys of ``folder/name.yaml`` (a value of None deletes the key)."""
    path = folder / f"{name}.yaml"
    node = yaml.safe_load(path.read_text())
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        target = node
        for key in parents:
            target = target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value
    path.write_text(yaml.safe_dump(node))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpus": True}, "cluster=h200: gpus=True; allowed: false (no GPU) or the GPU's mapping of model, "
                         "device_words, other_variants, peaks, links"),
        ({"gpus.clock": 2}, "cluster=h200: unknown key(s) gpus.clock; allowed: model, device_words, "
                            "other_variants, peaks, links"),
        ({"arch": "sm_80"}, "cluster=h200: arch='sm_80'; allowed: sm_90a, sm_100a"),
        ({"gpu_memory_gb": None}, "cluster=h200: gpu_memory_gb=None; allowed: a positive number of GB"),
        ({"gpus.model": ""}, "cluster=h200: gpus.model=''; allowed: the GPU's name, a non-empty text"),
        ({"gpus.device_words": []}, "cluster=h200: gpus.device_words=[]; allowed: a non-empty list of single "
                                    "words of the device name"),
        ({"gpus.other_variants": ["H200 NVL"]}, "cluster=h200: gpus.other_variants=['H200 NVL']; allowed: a "
                                                "list of single words of the device name"),
        ({"gpus.peaks.hbm_tb_s": None}, "cluster=h200: gpus.peaks has ['bf16_tflops', 'fp8_tflops', "
                                        "'nvlink_gb_s']; allowed: exactly bf16_tflops, fp8_tflops, hbm_tb_s, "
                                        "nvlink_gb_s, each a mapping of value and source"),
        ({"gpus.peaks.fp8_tflops": 1979}, "cluster=h200: gpus.peaks.fp8_tflops=1979; allowed: a mapping of "
                                          "value and source"),
        ({"gpus.peaks.nvlink_gb_s.value": -450}, "cluster=h200: gpus.peaks.nvlink_gb_s.value=-450; allowed: "
                                                 "a positive GB/s per direction"),
        ({"gpus.peaks.bf16_tflops.value": "989"}, "cluster=h200: gpus.peaks.bf16_tflops.value='989'; "
                                                  "allowed: a positive TFLOP/s"),
        ({"gpus.peaks.hbm_tb_s.source": " "}, "cluster=h200: gpus.peaks.hbm_tb_s.source=' '; allowed: a "
                                              "non-empty text naming where the figure comes from"),
        ({"name": "h2000"}, "h200.yaml: name='h2000'; allowed: 'h200' (its file's name)"),
        ({"gpus.links.inter_node_gb_s": None},
         "cluster=h200: gpus.links has ['gpus_per_node', 'nvlink_domain']; allowed: exactly gpus_per_node, "
         "nvlink_domain, inter_node_gb_s, each a mapping of value and source"),
        ({"gpus.links.gpus_per_node.value": 8.5},
         "cluster=h200: gpus.links.gpus_per_node.value=8.5; allowed: a positive whole number of GPUs"),
        ({"gpus.links.nvlink_domain.value": 12},
         "cluster=h200: gpus.links.nvlink_domain.value=12; allowed: a multiple or a divisor of gpus_per_node "
         "(8): whole nodes in a domain, or whole domains in a node"),
        ({"ranks_per_node": 16},
         "cluster=h200: ranks_per_node=16; allowed: at most gpus.links.gpus_per_node (8), one rank per GPU"),
        ({"gpus.links.inter_node_gb_s.source": ""},
         "cluster=h200: gpus.links.inter_node_gb_s.source=''; allowed: a non-empty text naming where the "
         "figure comes from"),
    ],
)  # fmt: skip
def test_a_bad_preset_is_refused_in_one_line_naming_the_value(tmp_path: Path, change: dict, message: str):
    folder = _copy(tmp_path)
    _edit(folder, "h200", change)
    with pytest.raises(ValueError) as refused:
        presets.gpu_presets(folder)
    assert str(refused.value) == message


def test_two_presets_may_share_a_gpu_but_not_claim_its_name_for_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    node = yaml.safe_load((CLUSTERS / "h200.yaml").read_text())
    same, other = _copy(tmp_path / "same"), _copy(tmp_path / "other")
    for folder in (same, other):
        (folder / "h200-b.yaml").write_text(yaml.safe_dump({**node, "name": "h200-b", "partition": "b"}))
    monkeypatch.setattr(presets, "CLUSTERS", same)
    assert sorted(presets.gpu_presets()) == ["gb300", "h200", "h200-b"]
    assert presets.preset_for_device("NVIDIA H200") == "h200"  # of presets of one GPU, the first by name
    _edit(other, "h200-b", {"gpus.peaks.hbm_tb_s.value": 5.0})
    with pytest.raises(ValueError) as refused:
        presets.gpu_presets(other)
    assert str(refused.value) == (
        "cluster=h200-b: gpus.device_words has 'H200', which cluster=h200 claims for another GPU; allowed: "
        "words no preset of another GPU has"
    )


B200 = {
    "name": "b200",
    "ranks_per_node": 8,
    "gpu_memory_gb": 180,
    "arch": "sm_100a",
    "gpus": {
        "model": "NVIDIA B200",
        "device_words": ["B200"],
        "other_variants": [],
        "peaks": {
            "bf16_tflops": {"value": 2250, "source": "a datasheet"},
            "fp8_tflops": {"value": 4500, "source": "a datasheet"},
            "hbm_tb_s": {"value": 7.7, "source": "a datasheet"},
            "nvlink_gb_s": {"value": 900, "source": "a datasheet"},
        },
        "links": {
            "gpus_per_node": {"value": 8, "source": "a datasheet"},
            "nvlink_domain": {"value": 8, "source": "a datasheet"},
            "inter_node_gb_s": {"value": 50, "source": "a datasheet"},
        },
    },
    "partition": None,
}


def test_adding_a_preset_is_one_yaml_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Every reader of a preset sees a new file: the model's rates and device map, its speed of light, the
    estimate's preset, the kept table's choice of preset and the published %SOL columns."""
    folder = _copy(tmp_path)
    (folder / "b200.yaml").write_text(yaml.safe_dump(B200))
    monkeypatch.setattr(presets, "CLUSTERS", folder)
    assert cost.HARDWARE["b200"].peak("fp8_tflops") == 4500 and sorted(cost.HARDWARE) == [
        "b200",
        "gb300",
        "h200",
    ]
    assert cost.hardware_for_device("NVIDIA B200") == "b200"
    layer = cost.LayerShape("inference", 2048, 7168, 3072, 384, 6, 8, "bf16", [1.0])
    assert cost.speed_of_light_ms(layer, "b200") < cost.speed_of_light_ms(layer, "h200")
    assert Preset.named("b200") == Preset("b200", 180.0, "sm_100a")
    assert estimates.preset_of("b200") == "b200" and estimates.preset_of("local-slurm") == "gb300"
    execution = EXECUTION_BY_ID["inference-ep8-f1536-bf16-mok-native"]
    shard = read_shard(
        write_table(tmp_path / "d", shard_table(execution, 1, np.random.default_rng(7), device="NVIDIA B200"))
    )
    row = execution_row(shard)
    assert row["usefulSOLPct"] == pytest.approx(100 * row["usefulTFLOPsPerGPU"] / 2250, rel=1e-12)
    assert row["hbmModelSOLPct"] == pytest.approx(100 * row["hbmModelTBs"] / 7.7, rel=1e-12)

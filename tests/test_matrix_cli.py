"""``python -m pipeline.list``: one line per selected execution, then the counts."""

import subprocess
import sys

import pytest

from pipeline.compose.matrix_cli import main
from pipeline.matrix import EXECUTIONS, VARIANTS


def run_cli(capsys, *arguments):
    code = main(list(arguments))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_whole_matrix(capsys):
    code, lines, _ = run_cli(capsys)
    assert code == 0
    assert lines[-1] == "110 executions, 44 workloads, 66 pairs"
    ids = [line.split()[0] for line in lines[:-1]]
    assert len(ids) == len(set(ids)) == 110
    assert set(ids) == {e.execution_id for e in EXECUTIONS}


def test_overrides_select_a_subset(capsys):
    code, lines, _ = run_cli(
        capsys, "workload=inference-ep8-f1536,packing-ep32-f3072-profile-a", "variant=glob(*)", "scale=ci"
    )
    assert code == 0
    assert lines[-1] == "10 executions, 4 workloads, 6 pairs"
    first = lines[0].split()
    # id first, then the overrides that reproduce the execution
    assert first[0] == "inference-ep8-f1536-bf16-dist-moe-bf16"
    assert first[1:] == ["workload=inference-ep8-f1536", "variant=dist-moe-bf16", "scale=ci"]


def test_a_variant_subset_counts_pairs_only_with_their_mok_partner(capsys):
    code, lines, _ = run_cli(capsys, "workload=training-ep32-f3072", "variant=dist-moe-bf16,mok-mxfp8")
    assert code == 0
    assert lines[-1] == "2 executions, 2 workloads, 0 pairs"


@pytest.mark.parametrize(
    ("argument", "allowed"),
    [
        ("workload=inference-ep4-f1536", "inference-ep8-f1536"),
        ("variant=mok-fp4", VARIANTS[0].name),
        ("scale=huge", "ci"),
    ],
)
def test_unknown_names_list_the_allowed_ones(capsys, argument, allowed):
    code, lines, err = run_cli(capsys, argument)
    assert code == 2 and lines == []
    assert argument.split("=")[1] in err and allowed in err


def test_scale_that_cannot_hold_the_ep_degree(capsys):
    code, _, err = run_cli(capsys, "workload=training-ep64-f3072", "scale=ci", "scale.num_experts=96")
    assert code == 2
    assert "cannot hold EP64" in err and "num_experts 96" in err


PACKING = "packing-ep64-f3072-profile-b"


def test_runs_as_a_module():
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.list", f"workload={PACKING}", "variant=mok-bf16"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "packing-ep64-f3072-profile-b-bf16-mok-native workload=packing-ep64-f3072-profile-b variant=mok-bf16",
        "1 executions, 1 workloads, 0 pairs",
    ]


@pytest.mark.parametrize("sweep", ["seed=0,1", "scale.tokens=16,32"])
def test_a_sweep_outside_the_matrix_is_refused_as_the_launcher_refuses_it(capsys, sweep):
    code, lines, err = run_cli(capsys, "workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci", sweep)
    key, values = sweep.split("=")
    first, second = values.split(",")
    assert (code, lines) == (2, [])
    assert err.startswith(f"error: {key}={first} and {key}={second} both select inference-ep8-f1536-bf16-")
    assert "sweep it into one dataset_dir per setting" in err and err.count("\n") == 1


def test_one_dataset_per_setting_is_allowed(capsys, tmp_path):
    folders = f"dataset_dir={tmp_path / 'seed0'},{tmp_path / 'seed1'}"
    code, lines, _ = run_cli(capsys, "workload=inference-ep8-f1536", "variant=mok-bf16", folders)
    assert code == 0 and lines[-1].startswith("2 executions")


def test_a_gpu_preset_names_the_nodes_and_nvlink_domains_each_ep_size_spans(capsys):
    """On h200 EP32 and EP64 leave the one-node NVLink domain for 4 and 8 nodes; a GB300 NVL72 holds
    EP64 in one domain. Each span once per EP size, before the count."""
    workloads = "workload=inference-ep8-f1536,training-ep32-f3072,training-ep64-f3072"
    code, lines, _ = run_cli(capsys, workloads, "variant=mok-bf16,dist-moe-bf16", "cluster=h200")
    assert code == 0 and lines[-1] == "6 executions, 3 workloads, 3 pairs"
    between = "NVLink domains of 8 GPUs, 50 GB/s per GPU between them"
    assert lines[6:-1] == [
        "h200: EP8 on 8 ranks spans 1 node x 8 GPUs, one NVLink domain of 8 GPUs",
        f"h200: EP32 on 32 ranks spans 4 nodes x 8 GPUs, 4 {between}",
        f"h200: EP64 on 64 ranks spans 8 nodes x 8 GPUs, 8 {between}",
    ]
    code, lines, _ = run_cli(capsys, workloads, "variant=mok-bf16", "cluster=gb300")
    assert code == 0 and lines[3:-1] == [
        "gb300: EP8 on 8 ranks spans 2 nodes x 4 GPUs, one NVLink domain of 72 GPUs",
        "gb300: EP32 on 32 ranks spans 8 nodes x 4 GPUs, one NVLink domain of 72 GPUs",
        "gb300: EP64 on 64 ranks spans 16 nodes x 4 GPUs, one NVLink domain of 72 GPUs",
    ]
    code, lines, _ = run_cli(
        capsys, "workload=training-ep64-f3072", "variant=mok-bf16", "cluster=h200", "max_ranks=8"
    )
    assert lines[1] == "h200: EP64 on 8 ranks spans 1 node x 8 GPUs, one NVLink domain of 8 GPUs"

"""The matrix is configuration: every workload and variant of the report's suite composes to its
execution, and the default sweep is the whole matrix of the default suite, the report's."""

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pipeline.compose import CONFIG_DIR, CONFIG_NAME, register
from pipeline.matrix import REFERENCE, REPORT, VARIANTS, WORKLOADS, execution_of


def test_every_name_composes_to_its_execution():
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for workload, variant in zip(WORKLOADS, (VARIANTS * 5)[: len(WORKLOADS)], strict=True):
            cfg = compose(CONFIG_NAME, overrides=[f"workload={workload.name}", f"variant={variant.name}"])
            job = OmegaConf.to_container(cfg, resolve=True)
            assert (job["workload"], job["variant"]) == (workload.name, variant.name)
            execution = execution_of(job)
            assert (execution.workload, execution.variant) == (workload, variant)
            assert execution.execution_id.startswith(f"{workload.name}-{variant.precision}-")


def test_the_report_suite_is_the_default_and_its_shape_the_full_scale():
    config = yaml.safe_load((CONFIG_DIR / "config.yaml").read_text())
    assert {"suite": "report"} in config["defaults"]
    full = yaml.safe_load((CONFIG_DIR / "scale" / "full.yaml").read_text())
    assert {k: full[k] for k in REFERENCE} == REFERENCE  # the scales' keys are written for this shape
    assert all(w.shape == REFERENCE for w in REPORT.workloads)


def test_default_sweep_is_whole_matrix():
    config = yaml.safe_load((CONFIG_DIR / "config.yaml").read_text())
    assert config["hydra"]["sweeper"]["params"] == {"workload": "glob(*)", "variant": "glob(*)"}


def test_scales_and_cluster_presets_exist():
    assert {p.stem for p in (CONFIG_DIR / "scale").glob("*.yaml")} >= {"full", "cpu", "ci"}
    assert {p.stem for p in (CONFIG_DIR / "cluster").glob("*.yaml")} >= {"h200", "gb300", "local-slurm"}

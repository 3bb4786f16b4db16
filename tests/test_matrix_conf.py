"""Hydra's config groups are the matrix: every workload and variant composes to its table entry, and
the default sweep is the whole matrix."""

from dataclasses import asdict

import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from pipeline.compose import CONFIG_DIR, CONFIG_NAME, register
from pipeline.matrix import VARIANTS, WORKLOADS, execution_of


def test_every_option_composes_to_its_matrix_entry():
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        for workload, variant in zip(WORKLOADS, (VARIANTS * 5)[: len(WORKLOADS)], strict=True):
            cfg = compose(CONFIG_NAME, overrides=[f"workload={workload.name}", f"variant={variant.name}"])
            job = OmegaConf.to_container(cfg, resolve=True)
            assert (job["workload"], job["variant"]) == (asdict(workload), asdict(variant))
            assert execution_of(job).execution_id.startswith(f"{workload.name}-{variant.precision}-")


def test_default_sweep_is_whole_matrix():
    config = yaml.safe_load((CONFIG_DIR / "config.yaml").read_text())
    assert config["hydra"]["sweeper"]["params"] == {"workload": "glob(*)", "variant": "glob(*)"}


def test_scales_and_cluster_presets_exist():
    assert {p.stem for p in (CONFIG_DIR / "scale").glob("*.yaml")} >= {"full", "cpu", "ci"}
    assert {p.stem for p in (CONFIG_DIR / "cluster").glob("*.yaml")} >= {"h200", "gb300", "local-slurm"}

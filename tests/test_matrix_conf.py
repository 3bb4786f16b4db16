"""conf/ mirrors pipeline.matrix: same names, same fields, and the default sweep is the whole matrix."""

from dataclasses import asdict

import pytest
import yaml

from pipeline.matrix import VARIANTS, WORKLOADS
from pipeline.matrix.select import CONFIG_DIR


@pytest.mark.parametrize(("group", "items"), [("workload", WORKLOADS), ("variant", VARIANTS)])
def test_config_group_equals_matrix(group, items):
    files = {p.stem: yaml.safe_load(p.read_text()) for p in (CONFIG_DIR / group).glob("*.yaml")}
    assert files == {item.name: asdict(item) for item in items}


def test_default_sweep_is_whole_matrix():
    config = yaml.safe_load((CONFIG_DIR / "config.yaml").read_text())
    assert config["hydra"]["sweeper"]["params"] == {"workload": "glob(*)", "variant": "glob(*)"}


def test_scales_and_launcher_presets_exist():
    assert {p.stem for p in (CONFIG_DIR / "scale").glob("*.yaml")} >= {"full", "cpu", "ci"}
    assert (CONFIG_DIR / "hydra" / "launcher" / "local.yaml").is_file()

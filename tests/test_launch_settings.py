"""The launcher settings: typed Hydra configs, cluster presets as defaults the command line overrides,
unknown keys and wrong launcher / preset combinations refused in one line before anything is submitted,
and the sbatch script holding what was asked."""

from dataclasses import dataclass, replace

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from pipeline.compose import CONFIG_DIR, CONFIG_NAME, register
from pipeline.compose.launcher import cluster_of, launcher_settings, presets
from pipeline.launch.settings import (
    LAUNCHERS,
    LaunchSettings,
    allowed_keys,
    effective,
    launcher_conf,
    option,
    resubmission,
)
from pipeline.launch.slurm import _executor
from tests.slurm_support import python_module

SWEEP = ["--multirun", "workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci"]


def settings(*overrides: str) -> LaunchSettings:
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=True)
        return launcher_settings(cfg.hydra.launcher, cluster_of(cfg))


def test_launcher_keys_need_no_plus_and_override_the_preset():
    got = settings(
        "hydra/launcher=slurm",
        "cluster=h200",
        "hydra.launcher.account=proj",
        "hydra.launcher.qos=high",
        "hydra.launcher.cpus_per_task=3",
        "hydra.launcher.setup=['module load cuda','export A=1']",
    )
    assert (got.account, got.qos, got.cpus_per_task) == ("proj", "high", 3)
    assert got.setup == ("module load cuda", "export A=1")
    # the preset's values where the launcher left None; submitit-side defaults where neither says
    assert (got.cluster, got.tasks_per_node, got.gpus) == ("h200", 8, True)
    assert (got.timeout_min, got.signal_delay_s, got.max_timeouts, got.name) == (60, 90, 3, "moe-bench")
    assert settings("hydra/launcher=slurm", "cluster=h200").cpus_per_task == 12
    assert LaunchSettings.from_json(got.to_json()) == got


def test_local_launcher_is_the_default():
    got = settings()
    assert (got.backend, got.cluster, got.tasks_per_node) == ("local", "local", None)


@pytest.mark.parametrize(
    "launcher, cluster, message",
    [
        ({"backend": "slurm"}, None, "hydra/launcher=slurm needs a cluster preset: cluster=a|b"),
        ({"backend": "local"}, {"name": "a"}, "cluster=a is a Slurm preset: add hydra/launcher=slurm"),
        ({"_target_": "x.BasicLauncher"}, None, "launcher BasicLauncher is not allowed; allowed:"),
        ({"backend": "slurm", "acount": "x"}, {"name": "a"}, "unknown launcher key(s) acount for"),
        ({"backend": "slurm"}, {"name": "a", "qoss": "x"}, "cluster preset 'a': unknown key(s) qoss;"),
    ],
)
def test_bad_settings_are_refused_in_one_line(launcher, cluster, message):
    with pytest.raises(ValueError) as err:
        effective(launcher, cluster, ["a", "b"])
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"timeout_min": "abc"}, "launcher setting timeout_min must be a finite number, got 'abc'"),
        ({"exclude": 3}, "launcher setting exclude must be a string, got 3"),
        ({"partition_x": "a"}, "unknown launcher key(s) partition_x for the slurm launcher; allowed: "),
        ({"backend": "local"}, "unknown launcher key(s) backend for the slurm launcher"),
    ],
)
def test_changed_settings_are_checked(changes, message):
    base = settings("hydra/launcher=slurm", "cluster=h200")
    assert base.changed({"timeout_min": 5, "exclude": "n1"}).timeout_min == 5
    with pytest.raises(ValueError) as err:
        base.changed(changes)
    assert str(err.value).startswith(message)


def test_unknown_key_lists_the_allowed_ones():
    with pytest.raises(
        ValueError, match="allowed: backend, timeout_min, tasks_per_node, group, group_minutes"
    ):
        effective({"backend": "slurm", "acount": "x"}, {"name": "a"}, ["a"])
    assert presets() == ["gb300", "h200", "local-slurm"]


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["hydra/launcher=slurm", "+hydra.launcher.acount=x", "cluster=local-slurm"], "acount"),
        (["hydra/launcher=slurm"], "cluster=gb300|h200|local-slurm"),
        (["cluster=h200"], "cluster=h200 is a Slurm preset"),
        (["hydra/launcher=basic"], "allowed: hydra/launcher=local|slurm"),
        (
            ["hydra.launcher.group=shapes"],
            "launcher setting group 'shapes' is not allowed; allowed: shape, none",
        ),
        (["seed=0,1"], "seed=0 and seed=1 both select inference-ep8-f1536-bf16-mok-native in"),
    ],
)
def test_the_command_line_refuses_with_exit_2_and_submits_nothing(tmp_path, overrides, message):
    done = python_module("pipeline.run", *SWEEP, f"dataset_dir={tmp_path}", *overrides, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("pipeline.run: ")]
    assert message in line
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ledger").exists() and not (tmp_path / "logs").exists()


def test_sbatch_script_holds_every_option(tmp_path):
    launcher = settings(
        "hydra/launcher=slurm",
        "cluster=local-slurm",
        "hydra.launcher.exclude=n2",
        "hydra.launcher.account=proj",
        "hydra.launcher.qos=high",
        "hydra.launcher.constraint=h200",
        "hydra.launcher.gres=gpu:8",
        "hydra.launcher.mem_gb=64",
        "hydra.launcher.exclusive=true",
        "hydra.launcher.comment=from-cli",
        "hydra.launcher.name=bench",
        "hydra.launcher.timeout_min=7",
        "hydra.launcher.array_parallelism=1",
        "hydra.launcher.setup=['export A=1']",
        "hydra.launcher.srun_args=['--cpu-bind=none']",
        "+hydra.launcher.additional_parameters.mail-type=END",
    )
    script = _executor(launcher, tmp_path, 2, 1)._make_submission_file_text("true", "uid")
    for line in (
        "#SBATCH --exclude=n2",
        "#SBATCH --account=proj",
        "#SBATCH --qos=high",
        "#SBATCH --constraint=h200",
        "#SBATCH --gres=gpu:8",
        "#SBATCH --mem=64GB",
        "#SBATCH --exclusive",
        "#SBATCH --comment=from-cli",
        "#SBATCH --job-name=bench",
        "#SBATCH --time=7",
        "#SBATCH --mail-type=END",
        "#SBATCH --no-requeue",
        "#SBATCH --partition=bench",
        "#SBATCH --nodes=2",
        "export A=1",
    ):
        assert line in script.splitlines(), line
    assert "--cpu-bind=none" in script
    assert set(allowed_keys("slurm")) >= {"account", "qos", "exclude", "setup", "srun_args", "comment"}


def test_a_choice_outside_its_literal_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^group 'shapes' is not allowed; allowed: shape, none$"):
        LaunchSettings(backend="local", cluster="local", gpus=None, group="shapes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^backend 'slurmm' is not allowed; allowed: local \(hydra/launch"):
        effective({"backend": "slurmm"}, None, [])
    recorded = settings().to_json() | {"group": "all"}
    with pytest.raises(
        ValueError, match="^recorded launcher setting group 'all' is not allowed; allowed: shape"
    ):
        resubmission(recorded, settings())


@dataclass(frozen=True)
class WithMail(LaunchSettings):
    """One more launcher key, declared here alone: both launchers take it, Slurm passes it to submitit
    as ``mail_user`` (sbatch's ``--mail-user``), and it reaches the script as text (a site key)."""

    mail_user: str | None = option(submitit=True, site=True)


@pytest.fixture
def mail_confs():
    """Hydra's launcher configs made from :class:`WithMail` in the ConfigStore; the project's own
    again afterwards."""
    register()
    for name in LAUNCHERS:
        node = launcher_conf(name, WithMail)
        ConfigStore.instance().store(group="hydra/launcher", name=name, node=node, provider="moe_bench")
    yield
    register()


def test_an_option_declared_once_reaches_both_launchers_and_the_sbatch_script(mail_confs, tmp_path):
    def launched(*overrides: str) -> LaunchSettings:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            cfg = compose(CONFIG_NAME, overrides=list(overrides), return_hydra_config=True)
        launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
        cluster = cluster_of(cfg)
        preset = None if cluster is None else OmegaConf.to_container(cluster, resolve=True)
        return effective(launcher, preset, presets(), WithMail)

    mail = "hydra.launcher.mail_user=ops@example.org"
    local = launched(mail)  # the local launcher's typed config takes it without a +
    assert isinstance(local, WithMail) and (local.backend, local.mail_user) == ("local", "ops@example.org")
    on_slurm = launched("hydra/launcher=slurm", "cluster=local-slurm", mail)
    assert (on_slurm.backend, on_slurm.mail_user) == ("slurm", "ops@example.org")
    assert {"mail_user"} <= set(allowed_keys("local", WithMail)) & set(allowed_keys("slurm", WithMail))
    assert WithMail.from_json(on_slurm.to_json()) == on_slurm  # the ledger's JSON reads back
    # a site key: a resubmission takes it from today's configuration, not the recorded one
    today = replace(on_slurm, mail_user="today@example.org")
    assert resubmission(on_slurm.to_json(), today).mail_user == "today@example.org"
    script = _executor(on_slurm, tmp_path, 1, 1)._make_submission_file_text("true", "uid")
    assert "#SBATCH --mail-user=ops@example.org" in script.splitlines()
    # the project's own declaration has no such key
    assert "mail_user" not in allowed_keys("slurm")
    with pytest.raises(ValueError, match="unknown launcher key.s. mail_user for hydra/launcher=slurm"):
        effective({"backend": "slurm", "mail_user": "x"}, {"name": "local-slurm"}, [])

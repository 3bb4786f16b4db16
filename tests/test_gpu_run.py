"""``jobs/gpu-run.sh``: its answers to bad input and to a machine without a GPU, and the dry run of every
stage end to end on this CPU, with a planted failing stage and a planted hanging one (whose grandchild
must die with it): the other stages still run and everything lands in results.jsonl and summary.md."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch

from cutlass_kernels import registry

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "jobs" / "gpu-run.sh"
STAGES = ("env", "smoke", "correctness", "timing", "tests", "pipeline")


def gpu_run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def packed_wheels(folder: Path) -> Path:
    """A ``.whl/`` of the packing tools' layout: an xz tar of a site folder and one pure-Python wheel."""
    folder.mkdir()
    with tarfile.open(folder / "cutlass-dsl.tar.xz", "w:xz") as tar:
        data = b"VERSION = 'probe'\n"
        info = tarfile.TarInfo("nvidia_cutlass_dsl/dsl_packages/gpu_run_probe/__init__.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (folder / "py").mkdir()
    dist = "gpu_run_probe_wheel-1.0.dist-info"
    with zipfile.ZipFile(folder / "py" / "gpu_run_probe_wheel-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("gpu_run_probe_wheel/__init__.py", "")
        whl.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: gpu-run-probe-wheel\nVersion: 1.0\n")
        whl.writestr(
            f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        whl.writestr(f"{dist}/RECORD", "")
    return folder


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "smoke,nosuch"], "gpu-run: unknown stage 'nosuch' in --only; allowed: env, smoke,"),
        (["--plant", "crash:env"], "gpu-run: --plant 'crash:env': want fail:STAGE or hang:STAGE"),
        (["--limit", "timing=soon"], "gpu-run: --limit 'timing=soon': want STAGE=SECONDS"),
    ],
)
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, args, message):
    done = gpu_run(str(tmp_path / "out"), "--dry-run", *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith(message), done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("nvidia-smi") is not None, reason="has a GPU")
def test_a_plain_run_without_a_gpu_exits_2_in_one_line(tmp_path):
    done = gpu_run(str(tmp_path / "out"))
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "gpu-run: no GPU here (nvidia-smi not found); on a CPU machine use --dry-run"
    )


@pytest.mark.slow
def test_dry_run_of_every_stage_with_a_failing_and_a_hanging_one(tmp_path):
    out, whl = tmp_path / "out", packed_wheels(tmp_path / "whl")
    plants = ["--plant", "fail:smoke", "--plant", "hang:correctness", "--limit", "planted-hang=3"]
    plants += ["--limit", "smoke=120", "--limit", "correctness=120"]  # two shared cores, not sixteen
    done = gpu_run(str(out), "--dry-run", "--whl", str(whl), *plants)
    assert done.returncode == 1, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "log.txt",
        "mok-comparison.csv",
        "results.jsonl",
        "summary.md",
    ]

    found = records(out)
    stage = {r["stage"]: r for r in found if r.get("name") == "stage"}
    order = ["env", "smoke", "planted-fail", "correctness", "planted-hang", "timing", "tests", "pipeline"]
    assert list(stage) == order
    for name in STAGES:
        assert stage[name]["status"] == "pass", stage[name]
    assert (stage["planted-fail"]["status"], stage["planted-fail"]["rc"]) == ("fail", 3)
    assert (stage["planted-hang"]["status"], stage["planted-hang"]["rc"]) == ("timeout", None)

    # what the planted stages recorded before failing / hanging is kept; the hang's grandchild is dead
    (hang,) = [r for r in found if r["stage"] == "planted-hang" and r.get("name") == "started"]
    assert [r for r in found if r["stage"] == "planted-fail" and r.get("name") == "started"]
    for pid in (hang["pid"], hang["child_pid"]):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    by = {name: [r for r in found if r["stage"] == name and r.get("name") != "stage"] for name in STAGES}
    unpack = {r["name"]: r for r in by["env"] if r["name"] in ("unpack cutlass-dsl", "install py wheels")}
    assert unpack["unpack cutlass-dsl"]["status"] == unpack["install py wheels"]["status"] == "pass"
    assert unpack["install py wheels"]["wheels"] == ["gpu_run_probe_wheel-1.0-py3-none-any.whl"]
    kernels = {s.name for s in registry.all_specs("sm_90a") if s.variant == "default"}  # the dry run's
    assert {r["name"] for r in by["smoke"] if r["status"] == "pass"} == kernels
    checked = {(r["op"], r["out_dtype"]) for r in by["correctness"] if r["status"] == "pass"}
    assert {(op, d) for op in ("fprop", "dgrad", "wgrad", "mx") for d in ("bfloat16", "float32")} <= checked
    assert not [r for r in found if r.get("status") == "fail" and r["stage"] in STAGES]
    assert {r["op"] for r in by["timing"] if r["status"] == "pass"} == {"fprop", "dgrad", "wgrad", "mx"}
    assert any(r["status"] == "skip" and "CUDA" in r["detail"] for r in by["tests"])
    executions = [r for r in by["pipeline"] if r.get("sanityPassed") == "true"]
    assert len(executions) == 4
    assert len((out / "mok-comparison.csv").read_text().splitlines()) == 5

    summary = (out / "summary.md").read_text()
    for name in order:
        assert f"| {name} |" in summary
    assert "| planted-hang | timeout |" in summary and "planted-fail stage: planted fail" in summary
    assert "## Timing" in summary and "## Pipeline executions" in summary

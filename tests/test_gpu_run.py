"""``jobs/gpu-run.sh``: its answers to bad input and to a machine without a GPU, and its dry run end to
end on this CPU with planted faults: a failing and a hanging stage (whose grandchild must die with it),
a kernel that hangs in smoke, one that hangs only in correctness, one wrong only in the MX op, a 0 x Inf
in wgrad and a hanging default kernel. No later stage runs a bad kernel, the tests and pipeline stages
run on the torch backend where a default kernel failed, the run ends within its 360 s, and every other
result lands in results.jsonl and summary.md."""

from __future__ import annotations

import datetime
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

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "jobs" / "gpu-run.sh"


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
        (
            ["--plant", "hang:smoke:fprop"],
            "gpu-run: planted fault 'hang:smoke:fprop': want KIND:STAGE:OP/OUT_DTYPE",
        ),
        (["--variants", "Tail-64"], "gpu-run: --variants 'Tail-64': want all, or variant names"),
        (["--limit", "timing=soon"], "gpu-run: --limit 'timing=soon': want NAME=SECONDS"),
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


# the dry run's children import torch (about 5 s of CPU each): limits with room for two shared cores
CHILD_LIMITS = [
    "--limit",
    "smoke-kernel=40",
    "--limit",
    "correctness-kernel=60",
    "--limit",
    "timing-kernel=60",
]
# planted kernel faults: one hangs in smoke, one only in correctness (after its other dtype passed),
# the MX op alone is wrong (on sm90, the dry run's arch, it runs the fprop kernel, which is right)
FAULTS = [
    "hang:smoke:fprop/float32/default",
    "hang:correctness:dgrad/float32/default",
    "wrong:*:mx/bfloat16/default",
]
HANGING_DEFAULT = "hang:smoke:wgrad/bfloat16/default"


def plants(*faults: str) -> list[str]:
    return [arg for fault in faults for arg in ("--plant", fault)]


def verdicts(found: list[dict], stage: str) -> dict[str, str]:
    return {r["key"]: r["status"] for r in found if r["stage"] == stage and r.get("verdict") is True}


def ran(found: list[dict], stage: str, k: str) -> list[dict]:
    """Records of ``stage`` that ran key ``k`` (not its skip verdict)."""
    return [r for r in found if r["stage"] == stage and r.get("key") == k and r["status"] != "skip"]


def run_seconds(found: list[dict]) -> float:
    (start,) = [r["started"] for r in found if r["stage"] == "run" and r.get("started")]
    (end,) = [r["ended"] for r in found if r["stage"] == "run" and r.get("ended")]
    return (datetime.datetime.fromisoformat(end) - datetime.datetime.fromisoformat(start)).total_seconds()


def assert_faulty_kernels_left_out(found: list[dict]) -> None:
    """What every planted fault must leave in the records: the bad kernel stopped where it failed and
    never run again, every other kernel checked and timed."""
    smoke, correctness, timing = (verdicts(found, s) for s in ("smoke", "correctness", "timing"))
    # hangs in smoke: killed at its limit, never checked or timed; nor the MX op its kernel serves
    assert smoke["fprop/float32/default"] == "fail" and "timed out" in next(
        r["error"] for r in found if r["stage"] == "smoke" and r.get("key") == "fprop/float32/default"
    )
    for k in ("fprop/float32/default", "mx/float32/default"):
        assert correctness[k] == "skip" and not ran(found, "correctness", k)
    # hangs only in correctness: its BF16 output, checked in full before the hang, keeps its pass
    assert smoke["dgrad/float32/default"] == "pass" and correctness["dgrad/float32/default"] == "fail"
    assert correctness["dgrad/bfloat16/default"] == "pass" and timing["dgrad/bfloat16/default"] == "pass"
    # wrong only in the MX op: not timed; the fprop kernel it runs on is timed
    assert correctness["mx/bfloat16/default"] == "fail" and timing["mx/bfloat16/default"] == "skip"
    assert not ran(found, "timing", "mx/bfloat16/default")
    assert correctness["fprop/bfloat16/default"] == timing["fprop/bfloat16/default"] == "pass"
    assert {r["shape"] for r in ran(found, "timing", "fprop/bfloat16/default") if r.get("shape")} == {
        "tiny-up",
        "tiny-down",
    }
    assert run_seconds(found) < 360


@pytest.mark.slow
def test_dry_run_with_planted_faults_and_a_hanging_default(tmp_path):
    """Every stage, with a failing and a hanging planted stage (whose grandchild must die with it) and
    the kernel faults, one of them in a default BF16 kernel: the gate sends tests and pipeline to the
    torch backend, and every other result is kept."""
    out, whl = tmp_path / "out", packed_wheels(tmp_path / "whl")
    args = [
        "--plant",
        "fail:smoke",
        "--plant",
        "hang:correctness",
        "--limit",
        "planted-hang=3",
        *CHILD_LIMITS,
    ]
    done = gpu_run(str(out), "--dry-run", "--whl", str(whl), *args, *plants(*FAULTS, HANGING_DEFAULT))
    assert done.returncode == 1, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "log.txt",
        "mok-comparison.csv",
        "results.jsonl",
        "summary.md",
    ]

    found = records(out)
    stage = {(r["stage"], r.get("variant")): r for r in found if r.get("name") == "stage"}
    order = ["env", "smoke", "planted-fail", "correctness", "planted-hang", "timing", "tests", "pipeline"]
    assert [s for s, _ in stage] == order
    assert stage[("env", None)]["status"] == "pass"
    assert (stage[("planted-fail", None)]["status"], stage[("planted-fail", None)]["rc"]) == ("fail", 3)
    assert (stage[("planted-hang", None)]["status"], stage[("planted-hang", None)]["rc"]) == ("timeout", None)
    # what the planted stages recorded before failing / hanging is kept; the hang's grandchild is dead
    (hang,) = [r for r in found if r["stage"] == "planted-hang" and r.get("name") == "started"]
    assert [r for r in found if r["stage"] == "planted-fail" and r.get("name") == "started"]
    for pid in (hang["pid"], hang["child_pid"]):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    unpack = {
        r["name"]: r
        for r in found
        if r["stage"] == "env" and r.get("name") in ("unpack cutlass-dsl", "install py wheels")
    }
    assert unpack["unpack cutlass-dsl"]["status"] == unpack["install py wheels"]["status"] == "pass"
    assert unpack["install py wheels"]["wheels"] == ["gpu_run_probe_wheel-1.0-py3-none-any.whl"]

    assert_faulty_kernels_left_out(found)
    # the hanging default: no later stage runs it, and tests and pipeline run on the torch backend
    assert verdicts(found, "smoke")["wgrad/bfloat16/default"] == "fail"
    assert verdicts(found, "correctness")["wgrad/bfloat16/default"] == "skip"
    assert verdicts(found, "timing")["wgrad/bfloat16/default"] == "skip"
    assert verdicts(found, "correctness")["wgrad/float32/default"] == "pass"  # its other kernel checked
    (gate,) = {r["reason"]: r for r in found if r["stage"] == "gate"}.values()
    assert gate["backend"] == "torch" and gate["reason"].startswith(
        "wgrad/bfloat16/default did not pass smoke"
    )
    for name in ("tests", "pipeline"):
        assert stage[(name, None)]["status"] == "pass", stage[(name, None)]
        assert "on the torch backend" in stage[(name, None)]["note"]
    executions = [r for r in found if r["stage"] == "pipeline" and r.get("sanityPassed") == "true"]
    assert len(executions) == 1
    assert len((out / "mok-comparison.csv").read_text().splitlines()) == 2

    summary = (out / "summary.md").read_text()
    for name in order:
        assert f"| {name} |" in summary
    assert "| planted-hang |  | timeout |" in summary and "planted-fail stage: planted fail" in summary
    assert "Tests and pipeline ran on: torch (wgrad/bfloat16/default did not pass smoke" in summary
    assert "- smoke grouped_fprop_bfloat16-float32_128x256_sm_90a fprop/float32/default: timed out" in summary
    assert "## Timing" in summary and "## Pipeline executions" in summary


@pytest.mark.slow
def test_dry_run_of_the_kernel_stages_keeps_the_gate_open_and_catches_zero_times_inf(tmp_path):
    """Kernel faults outside the default BF16 kernels leave the gate open: the MX op wrong, and a
    planted 0 x Inf in wgrad with FP32 out (the sm90 in-place kernel's, before its fix), which the
    correctness inputs' NaN / Inf tails catch in every case. (The hangs are the test above's.)"""
    out = tmp_path / "out"
    faults = ["wrong:*:mx/bfloat16/default", "zero-times-inf:correctness:wgrad/float32/default"]
    done = gpu_run(
        str(out), "--dry-run", "--only", "smoke,correctness,timing", *CHILD_LIMITS, *plants(*faults)
    )
    assert done.returncode == 1, done.stderr[-3000:]
    found = records(out)
    assert [r["stage"] for r in found if r.get("name") == "stage"] == [
        "plan",
        "smoke",
        "correctness",
        "timing",
    ]
    correctness, timing = verdicts(found, "correctness"), verdicts(found, "timing")
    assert correctness["mx/bfloat16/default"] == "fail" and timing["mx/bfloat16/default"] == "skip"
    caught = [
        r
        for r in found
        if r["stage"] == "correctness" and r.get("key") == "wgrad/float32/default" and r.get("case")
    ]
    assert len(caught) == 2 and all(r["status"] == "fail" and r["max_rel_err"] == "inf" for r in caught)
    assert correctness["wgrad/float32/default"] == "fail"
    assert correctness["wgrad/bfloat16/default"] == timing["wgrad/bfloat16/default"] == "pass"
    assert correctness["fprop/bfloat16/default"] == timing["fprop/bfloat16/default"] == "pass"
    (gate,) = [r for r in found if r["stage"] == "gate"]
    assert (gate["status"], gate["backend"], gate.get("reason")) == ("pass", "cute kernels", None)
    assert "Tests and pipeline ran on: cute kernels" in (out / "summary.md").read_text()
    assert run_seconds(found) < 360


def test_what_a_run_had_no_time_for_becomes_its_rerun(tmp_path):
    from jobs.gpu_run import RUN_SPENT, SPENT, Run, _rerun_args, write_summary

    run = Run(tmp_path, tmp_path, True, 0.0, io.StringIO(), "7", {})
    other = Run(tmp_path, tmp_path, True, 0.0, io.StringIO(), "6", {})
    run.record("run", status="info", argv=["OUT"], started="2026-12-01T00:00:00+00:00")
    other.record("smoke", name="stage", variant="cta2", status="skip", reason=SPENT)  # an earlier run's
    run.record("smoke", name="stage", variant="default", status="pass")
    run.record(
        "timing",
        name="verdict",
        verdict=True,
        key="mx/bfloat16/default",
        variant="default",
        status="skip",
        reason=SPENT,
    )
    run.record("correctness", name="stage", variant="tail64", status="skip", reason=SPENT)
    run.record("pipeline", name="stage", status="skip", reason=RUN_SPENT)
    run.record("timing", name="stage", variant="cta2", status="skip")  # all refused: nothing to rerun
    args = _rerun_args(run)
    assert args == ["--total", "220", "--only", "correctness,timing,pipeline", "--variants", "default,tail64"]
    run.record("run", name="rerun", status="info", args=args)
    write_summary(tmp_path)
    assert (
        (tmp_path / "summary.md")
        .read_text()
        .endswith(f"To finish: `jobs/gpu-run.sh OUT_DIR {' '.join(args)}`\n")
    )
    assert _rerun_args(Run(tmp_path, tmp_path, True, 0.0, io.StringIO(), "8", {})) == []

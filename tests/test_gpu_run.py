"""``jobs/gpu-run.sh``: its answers to bad input and to a machine without a GPU, and dry runs end to end
on this CPU. The plain one runs in the device's conditions: a Python without hydra, omegaconf, antlr4
and submitit (they come from the packed wheels, as there), the device's limits, the wrapper command; it
passes every step, each step's end on stdout and the summary last. The planted one has every fault at
once: a failing and a hanging planted stage (whose grandchild must die with it), a kernel that hangs
in smoke, one that hangs only in correctness, one wrong only in the MX op, a 0 x Inf in wgrad's tail
rows, a wrong SwiGLU backward kernel, a hanging default kernel, a timing child that hangs and a tests
stage that stalls: no later stage runs a bad kernel, every later step still has its reserved time,
the tests and pipeline stages run on the torch backend, and every other result lands in results.jsonl
and summary.md. A run stopped from outside keeps every finished step's records and prints its
summary."""

from __future__ import annotations

import datetime
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path

import pytest
import torch

from jobs.gpu_run import pack
from jobs.gpu_run.plan import MAX_SCALE, PACKING, RUN_SPENT, SPENT, TOTAL_S

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
        (["--dataset", str(SCRIPT)], f"gpu-run: --dataset {SCRIPT}: a file; want a dataset folder"),
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
# (times the run's scale, the host's load: a smoke child took 6.5 s at scale 1 and 9-11 s at scale 3.64
# in CI), short enough that the planted hangs, which wait out a limit each, keep the run's tail short
CHILD_LIMITS = [
    "--limit",
    "smoke-kernel=15",
    "--limit",
    "correctness-kernel=15",
    "--limit",
    "timing-kernel=15",
]
# planted kernel faults: one hangs in smoke, one only in correctness (after its other dtype passed),
# the MX op alone is wrong (on sm90, the dry run's arch, it runs the fprop kernel, which is right), a
# 0 x Inf in wgrad with FP32 out (the sm90 in-place kernel's, before its fix), the SwiGLU backward
# kernel wrong, a default BF16 kernel that hangs in smoke, and a timing child that hangs
FAULTS = [
    "hang:smoke:fprop/float32/default",
    "hang:correctness:dgrad/float32/default",
    "wrong:*:mx/bfloat16/default",
    "zero-times-inf:correctness:wgrad/float32/default",
    "wrong:correctness:swiglu/bfloat16/default",
    "hang:smoke:wgrad/bfloat16/default",
    "hang:timing:dgrad/bfloat16/default",
]
# the plain dry run's steps: the gate's checks, the new elementwise kernels' (the dry run's plan has no
# other variant), the defaults' timing, the matched pair and its account, the rehearsals, the packing
# execution, the tests, the SwiGLU backward's timing
ORDER = [
    "env",
    "smoke default",
    "correctness default",
    "correctness swiglu",
    "correctness mxquant",
    "correctness swiglufwd",
    "timing mxquant",
    "timing swiglufwd",
    "timing default",
    "pipeline",
    "account",
    "loopback",
    "ranks",
    "packing",
    "tests",
    "timing swiglu",
]
# the planted run's: the stages its faults are about (the rehearsals and the packing execution run
# through the same gate as tests and pipeline; the plain run checks them), the default kernels and
# the SwiGLU backward's
PLANTED_STAGES = "env,smoke,correctness,timing,pipeline,account,tests"
PLANTED_ORDER = [
    "env",
    "smoke default",
    "correctness default",
    "correctness swiglu",
    "timing default",
    "pipeline",
    "account",
    "tests",
    "timing swiglu",
]


def plants(*faults: str) -> list[str]:
    return [arg for fault in faults for arg in ("--plant", fault)]


def verdicts(found: list[dict], stage: str) -> dict[str, str]:
    return {r["key"]: r["status"] for r in found if r["stage"] == stage and r.get("verdict") is True}


def ran(found: list[dict], stage: str, k: str) -> list[dict]:
    """Records of ``stage`` that ran key ``k`` (not its skip verdict)."""
    return [r for r in found if r["stage"] == stage and r.get("key") == k and r["status"] != "skip"]


def started(found: list[dict]) -> dict:
    (start,) = [r for r in found if r["stage"] == "run" and r.get("started")]
    return start


def assert_within_its_total(found: list[dict]) -> None:
    """The run ended within its total (times the dry run's factor for a loaded host, 1 when idle)."""
    start = started(found)
    (end,) = [r["ended"] for r in found if r["stage"] == "run" and r.get("ended")]
    took = datetime.datetime.fromisoformat(end) - datetime.datetime.fromisoformat(start["started"])
    # the record's scale has two decimals: the total it gives is off by up to TOTAL_S x 0.005
    assert 1 <= start["scale"] <= MAX_SCALE
    assert abs(start["total_s"] - TOTAL_S * start["scale"]) < 2 + TOTAL_S * 0.005
    assert took.total_seconds() < TOTAL_S * start["scale"]


def assert_each_step_had_its_reserve(found: list[dict]) -> None:
    """Every step the plan granted a reserve started with at least that many seconds left (times the
    run's scale), whatever the steps before it took; the reserves fit the window."""
    scale = started(found)["scale"]
    (plan,) = [r for r in found if r["stage"] == "run" and r.get("name") == "plan"]
    reserve = dict(zip(plan["steps"], plan["reserve_s"], strict=True))
    assert sum(plan["reserve_s"]) <= TOTAL_S - 20
    for label, record in step_records(found).items():
        if reserve.get(label):
            assert record["left_s"] >= reserve[label] * scale - 1, (label, record)


# the dry run's own limit stretches with the host's load (jobs.gpu_run.plan.contention), so may this one
DRY_RUN_TIMEOUT = 1.5 * TOTAL_S * MAX_SCALE


def step_records(found: list[dict]) -> dict[str, dict]:
    """Each step's stage record by its label (``stage`` or ``stage variant``), in the run's order."""
    return {
        " ".join(filter(None, (r["stage"], r.get("variant")))): r for r in found if r.get("name") == "stage"
    }


def children(out: Path, command: str) -> list[str]:
    """The command lines of the children the run started for ``command`` (from log.txt)."""
    return [line for line in (out / "log.txt").read_text().splitlines() if f" {command} " in line]


@pytest.fixture(scope="module")
def device_like(tmp_path_factory) -> tuple[dict[str, str], Path]:
    """The device's conditions on this CPU: ``python3`` on PATH is a venv that sees this one's packages
    but hydra, omegaconf, antlr4 and submitit, and ``.whl/`` packs those four as wheels (zipped from
    the installed packages) beside a DSL archive: the environment of the run, and the wheels folder."""
    root = tmp_path_factory.mktemp("device")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    site = Path(sysconfig.get_paths()["purelib"])
    shadow = root / "site"
    shadow.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(DEVICE_LACKS) and entry.suffix != ".pth":
            (shadow / entry.name).symlink_to(entry)
    venv_site = Path(
        subprocess.check_output(
            [
                str(root / "venv" / "bin" / "python3"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            text=True,
        ).strip()
    )
    # the DSL: the image has none, and the packed archive is cp312; this host's own stands in for it
    (venv_site / "device.pth").write_text(f"{shadow}\n{site / 'nvidia_cutlass_dsl' / 'dsl_packages'}\n")
    whl = packed_wheels(root / "whl")
    pack_extras(whl)
    for package in ("hydra", "omegaconf", "antlr4", "submitit"):
        with zipfile.ZipFile(whl / "py" / f"{package}_packed-1.0-py3-none-any.whl", "w") as z:
            for path in sorted((site / package).rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    z.write(path, path.relative_to(site).as_posix())
    env = {**os.environ, "PATH": f"{root / 'venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    lacks = subprocess.run(
        [
            "python3",
            "-c",
            "import importlib.util as u; print([m for m in ('hydra', 'submitit') if u.find_spec(m)])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert lacks.stdout.strip() == "[]", lacks  # the venv really lacks them
    return env, whl


DEVICE_LACKS = ("hydra", "omegaconf", "antlr4", "submitit")


@pytest.fixture(scope="module")
def plain_run(device_like, tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """The plain dry run in the device's conditions, its pipeline's dataset kept (``--dataset``): its
    result, its OUT_DIR and that dataset, which the planted run resumes (what is done there is not
    run again)."""
    env, whl = device_like
    root = tmp_path_factory.mktemp("plain")
    out, dataset = root / "out", root / "dataset"
    done = subprocess.run(
        ["bash", str(SCRIPT), str(out), "--dry-run", "--whl", str(whl), "--dataset", str(dataset)],
        capture_output=True,
        text=True,
        timeout=DRY_RUN_TIMEOUT,
        cwd=ROOT,
        env=env,
    )
    return done, out, dataset


# one kernel exported into a kernel cache (one compile, where the pack exports the arch's fifty): what
# the dry run verifies and loads
ONE_KERNEL = """
import sys
from pathlib import Path
from cutlass_kernels import kernel_cache, mx_quant_kernel as q
compiled = q.compile_kernel("values", "exact", "sm_90a", None, kernel_cache.HOST_TARGET)
kernel_cache.build("sm_90a", Path(sys.argv[1]), {q.kernel_name("values", "exact", "sm_90a"): compiled})
"""


def pack_extras(whl: Path) -> None:
    """What ``python -m jobs.gpu_run.pack`` adds beside the wheels, by its own functions: the record of
    this tree, the packing execution's estimate, and a kernel cache (of one kernel)."""
    cache = whl.parent / "kernel-cache"
    env = {**os.environ, "CUTE_DSL_ARCH": pack.ARCH}
    subprocess.run([sys.executable, "-c", ONE_KERNEL, str(cache)], check=True, env=env, timeout=600)
    pack.pack_cache(cache, whl / pack.KERNEL_CACHE)
    (whl / pack.ESTIMATES).write_text(json.dumps(pack.estimates()))
    (whl / pack.PROVENANCE).write_text(json.dumps(pack.provenance()))


@pytest.mark.slow
def test_dry_run_with_planted_faults_leaves_each_bad_kernel_out_of_every_later_stage(
    tmp_path, device_like, plain_run
):
    """The stages the faults are about (:data:`PLANTED_STAGES`), with a failing and a hanging planted
    stage (whose grandchild must die with it), a stalling tests stage and every kernel fault of FAULTS
    at once, in one run: each bad kernel stops where it failed and never runs again, every other kernel
    is checked and timed, every later step keeps its reserved time, the tests and pipeline stages run
    on the torch backend (a default kernel hung), and every other result is kept, within the run's
    total. What travels is the plain run's (:func:`device_like`'s, built once), and its pipeline
    resumes the plain run's dataset: the pair is done there, so it is aggregated, not run again."""
    out, whl, dataset = tmp_path / "out", device_like[1], tmp_path / "dataset"
    shutil.copytree(plain_run[2], dataset, symlinks=True)
    args = [
        "--dataset",
        str(dataset),
        "--only",
        PLANTED_STAGES,
        "--variants",
        "default,swiglu",
        "--plant",
        "fail:smoke",
        "--plant",
        "hang:correctness",
        "--plant",
        "stall:tests",
        "--limit",
        "planted-hang=3",
        "--limit",
        "tests=8",
        *CHILD_LIMITS,
    ]
    done = gpu_run(str(out), "--dry-run", "--whl", str(whl), *args, *plants(*FAULTS), timeout=DRY_RUN_TIMEOUT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == [
        "dataset.tar.gz",
        "log.txt",
        "mok-comparison.csv",
        "results.jsonl",
        "summary.md",
    ]

    found = records(out)
    stage = step_records(found)
    order = [*PLANTED_ORDER]
    order.insert(order.index("smoke default") + 1, "planted-fail")
    order.insert(order.index("correctness default") + 1, "planted-hang")
    assert list(stage) == order
    assert stage["env"]["status"] == "pass"
    assert (stage["planted-fail"]["status"], stage["planted-fail"]["rc"]) == ("fail", 3)
    assert (stage["planted-hang"]["status"], stage["planted-hang"]["rc"]) == ("timeout", None)
    # what the planted stages recorded before failing / hanging is kept; the hang's grandchild is dead
    (hang,) = [r for r in found if r["stage"] == "planted-hang" and r.get("name") == "started"]
    assert [r for r in found if r["stage"] == "planted-fail" and r.get("name") == "started"]
    for pid in (hang["pid"], hang["child_pid"]):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    unpack = [r for r in found if r["stage"] == "env" and r.get("name") in ("unpack cutlass-dsl", "py wheel")]
    assert {r["status"] for r in unpack} == {"pass"} and len(unpack) == 6
    probe = next(r for r in unpack if r.get("wheel") == "gpu_run_probe_wheel-1.0-py3-none-any.whl")
    assert probe["on_pythonpath"]

    smoke, correctness, timing = (verdicts(found, s) for s in ("smoke", "correctness", "timing"))
    # hangs in smoke: killed at its limit, never checked or timed; nor the MX op its kernel serves
    assert smoke["fprop/float32/default"] == "fail" and "timed out" in next(
        r["error"] for r in found if r["stage"] == "smoke" and r.get("key") == "fprop/float32/default"
    )
    for k in ("fprop/float32/default", "mx/float32/default"):
        assert correctness[k] == "skip" and not ran(found, "correctness", k)
    # hangs only in correctness: its BF16 output, checked in full before the hang, keeps its pass
    assert smoke["dgrad/float32/default"] == "pass" and correctness["dgrad/float32/default"] == "fail"
    assert correctness["dgrad/bfloat16/default"] == "pass"
    # ... and its BF16 timing child hangs: killed at its limit, a failed timing verdict
    assert timing["dgrad/bfloat16/default"] == "fail"
    # wrong only in the MX op: not timed; the fprop kernel it runs on is timed, on every shape
    assert correctness["mx/bfloat16/default"] == "fail" and timing["mx/bfloat16/default"] == "skip"
    assert not ran(found, "timing", "mx/bfloat16/default")
    assert correctness["fprop/bfloat16/default"] == timing["fprop/bfloat16/default"] == "pass"
    assert {r["shape"] for r in ran(found, "timing", "fprop/bfloat16/default") if r.get("shape")} == {
        "tiny-up",
        "tiny-down",
    }
    # the planted 0 x Inf in wgrad's tail rows: infinitely wrong in every case where a group's whole
    # 64-row chunks reach past offs[-1] into the NaN / Inf rows; a random routing where none does is
    # right, as that kernel was
    cases = [r for r in ran(found, "correctness", "wgrad/float32/default") if r.get("case")]
    assert [r["case"] for r in cases] == ["edges N/K tails", "random routing"]
    for r in cases:
        sizes, rows = r["sizes"], sum(r["sizes"])
        reach = any(s and sum(sizes[:g]) + -(-s // 64) * 64 > rows for g, s in enumerate(sizes))
        assert (r["status"] == "fail" and r["max_rel_err"] == "inf") if reach else r["status"] == "pass", r
    assert cases[0]["status"] == "fail" and correctness["wgrad/float32/default"] == "fail"
    # the hanging default: no later stage runs it
    assert smoke["wgrad/bfloat16/default"] == "fail"
    assert correctness["wgrad/bfloat16/default"] == timing["wgrad/bfloat16/default"] == "skip"
    assert not ran(found, "correctness", "wgrad/bfloat16/default")
    # the SwiGLU kernel wrong: its cases fail, and its timing child never starts
    swiglu = "swiglu/bfloat16/default"
    assert correctness[swiglu] == "fail" and timing[swiglu] == "skip"
    assert len(children(out, "swiglu-correctness")) == 1 and not children(out, "swiglu-timing")
    # the gate, decided before timing: shut by the hanging default, the first of the gate's kernels
    # it names (so the faults in fprop's and dgrad's FP32 kernels and in the MX op left their BF16
    # defaults passing)
    gates = [r for r in found if r["stage"] == "gate"]  # one for each stage that runs layers
    assert len(gates) == 2 and len({g["reason"] for g in gates}) == 1
    gate = gates[0]
    assert gate["backend"] == "torch"
    assert gate["reason"].startswith("wgrad/bfloat16/default failed smoke: timed out")
    # the stalled tests stage: killed at its limit; every step after it, and after the hanging timing
    # child, still had its reserved time, and the pipeline ran
    assert (stage["tests"]["status"], stage["tests"]["rc"]) == ("timeout", None)
    assert "planted stall" in stage["tests"]["note"] and "on the torch backend" in stage["tests"]["note"]
    assert stage["pipeline"]["status"] == "pass" and "on the torch backend" in stage["pipeline"]["note"]
    assert_each_step_had_its_reserve(found)
    executions = [r for r in found if r["stage"] == "pipeline" and r.get("sanityPassed") == "true"]
    assert len(executions) == 2  # the pair, resumed: done in the plain run's dataset, published again
    assert "0 of 2 executions run, 2 done before" in stage["pipeline"]["note"]
    assert len((out / "mok-comparison.csv").read_text().splitlines()) == 4  # and its packing execution
    assert_within_its_total(found)
    assert not [r for r in found if r.get("reason") in (SPENT, RUN_SPENT)]  # nothing cut for time

    summary = (out / "summary.md").read_text()
    for name in order:
        stage_name, _, variant = name.partition(" ")
        assert f"| {stage_name} | {variant} |" in summary
    assert "| planted-hang |  | timeout |" in summary and "planted-fail stage: planted fail" in summary
    assert "The stages that run layers ran on: torch (wgrad/bfloat16/default failed smoke" in summary
    assert "- smoke grouped_fprop_bfloat16-float32_128x256_sm_90a fprop/float32/default: timed out" in summary
    assert "- correctness verdict swiglu/bfloat16/default: 4 of 5 case(s) failed" in summary
    assert "## Timing" in summary and "## Pipeline executions" in summary
    assert done.stdout.rstrip().endswith(summary.rstrip())  # the summary is the last thing on stdout


@pytest.mark.slow
def test_the_plain_dry_run_passes_every_step_in_the_devices_conditions(device_like, plain_run):
    """``jobs/gpu-run.sh OUT --dry-run`` where hydra, omegaconf, antlr4 and submitit come from the
    packed wheels, as on the device: every step passes in its order, within the device's limits, each
    step's end on stdout and the summary last; the kernel cache verified and named to every child, the
    record of the code checked against the tree and named by every shard, the matched pair published
    with its speedup, the packing execution beside its estimate, what the grouped jobs cost."""
    whl = device_like[1]
    done, out, _ = plain_run
    assert done.returncode == 0, (out / "summary.md").read_text()[-3000:]
    found = records(out)
    stage = step_records(found)
    assert list(stage) == ORDER
    assert {r["status"] for r in stage.values()} == {"pass"}
    wheels = {r["packages"][0]: r["on_pythonpath"] for r in found if r.get("name") == "py wheel"}
    assert wheels == {
        "antlr4": True,
        "hydra": True,
        "omegaconf": True,
        "submitit": True,
        "gpu_run_probe_wheel": True,
    }
    # every python -m child forked from the fork server: the env child, the cache's verify, the six
    # smoke, seven correctness and seven timing children, the loopback and the ranks rehearsals
    (forks,) = [r for r in found if r["stage"] == "run" and r.get("name") == "fork server"]
    assert (forks["preloaded"], forks["forked"]) == (["torch"], 24)
    every = {s: verdicts(found, s) for s in ("smoke", "correctness", "timing")}
    assert set(every["smoke"].values()) == set(every["correctness"].values()) == {"pass"}
    # smoke: the six default kernels; correctness: their nine keys and the three elementwise kernels
    assert len(every["smoke"]) == 6 and len(every["correctness"]) == 11 and len(every["timing"]) == 7
    assert {"mxquant/bfloat16/default", "swiglufwd/bfloat16/default"} <= set(every["timing"])
    # the MX op was timed with the quantization kernel, which had passed its correctness
    assert [r["quantizer"] for r in found if r.get("verdict") and r["key"] == "mx/bfloat16/default"
            and r["stage"] == "timing"] == ["kernel"]  # fmt: skip
    gates = [r for r in found if r["stage"] == "gate"]  # one for each stage that runs layers
    assert [(r["status"], r["backend"], r.get("reason")) for r in gates] == [
        ("pass", "cute kernels", None)
    ] * 5
    # what travelled: the kernel cache unpacked, verified (its kernel loads) and named to the children;
    # the record of the code the same as this tree, its commit on every published row
    env_records = {r["name"]: r for r in found if r["stage"] == "env"}
    assert env_records["unpack kernel cache"]["status"] == "pass"
    assert env_records["kernel cache"]["status"] == "pass" and env_records["kernel cache"]["kernels"] == 1
    code = env_records["provenance"]
    assert code["status"] == "pass" and code["tree"] == pack.provenance()["tree"]
    assert (
        code["git_sha"].startswith(code["commit"]) and (code["git_sha"] == code["commit"]) != code["differs"]
    )
    assert (
        "on the CuTe kernels" in stage["tests"]["note"] and "on the CuTe kernels" in stage["pipeline"]["note"]
    )
    assert_within_its_total(found)
    assert_each_step_had_its_reserve(found)
    pair = ["inference-ep8-f1536-bf16-mok-native", "inference-ep8-f1536-bf16-dist-moe-bf16"]
    phases = [r for r in found if r["stage"] == "pipeline" and r.get("name") == "phases"]
    assert sorted(r["execution"] for r in phases) == sorted(pair)
    assert all(r["windows"] > 0 and r["account"] > 0 and r["compiles"] == 0 for r in phases)  # its time
    rows = [r for r in found if r["stage"] in ("pipeline", "packing") and r.get("iterationMS")]
    assert [r["name"] for r in rows] == [*sorted(pair), *PACKING.execution_ids()]
    assert {r["git_sha"] for r in rows} == {code["git_sha"]}  # the record's commit, not .git's say
    # the matched pair: MoK's iteration over Dist-MoE's, published with its interval
    (published,) = [r for r in found if r["stage"] == "pipeline" and r.get("name") == "pair"]
    assert (published["mok_execution_id"], published["dist_execution_id"]) == tuple(pair)
    ratio = published["mokIterationMS"] / published["distIterationMS"]
    assert published["speedup"] == pytest.approx(ratio, rel=1e-5)  # six digits published
    assert published["speedupLow"] <= published["speedup"] <= published["speedupHigh"]
    # what each grouped job cost: its wall time over its rank-0 windows, no compile
    costs = {r["stage"]: r for r in found if r.get("name") == "cost"}
    assert costs["pipeline"]["executions"] == 2 and costs["packing"]["executions"] == 1
    assert costs["pipeline"]["windows_s"] == pytest.approx(sum(r["windows"] for r in phases), abs=0.01)
    assert all(c["over_windows"] > 1 and c["compiles"] == 0 for c in costs.values())
    # the packing execution's peak beside its estimate, read from the pack (the h200 preset's)
    (peak,) = [r for r in found if r["stage"] == "packing" and r.get("name") == "peak"]
    estimate = json.loads((whl / pack.ESTIMATES).read_text())[PACKING.execution_ids()[0]]
    assert (peak["estimated_peak_gib"], peak["estimate_preset"]) == (estimate["timed_peak_gib"], "h200")
    # the account step: each single-GPU execution's phase account, adding up, its profile kept
    accounted = [r for r in found if r["stage"] == "account" and r.get("profiled_ms") is not None]
    assert sorted(r["name"] for r in accounted) == sorted(pair) and {r["status"] for r in accounted} == {
        "pass"
    }
    for r in accounted:
        parts = sum(v or 0 for v in r["phases"].values()) + r["unclaimed_ms"]
        assert parts == pytest.approx(r["profiled_ms"], rel=1e-4)
        assert r["phases"]["dispatch"] is None and r["phases"]["fprop"] > 0  # one rank: no communication
        assert r["traces"] == [f"traces/{r['name']}/attempt-1/rank-0.json.gz"]
    # the multi-rank rehearsals: one rank's gloo loopback calls the exchange's all-to-alls (eagerly:
    # no CUDA graph on a CPU) and computes what one rank alone does; two CPU ranks route rows across
    # ranks through two executions' gates
    loopback = [r for r in found if r["stage"] == "loopback" and "replay_error" in r]
    assert [r["name"] for r in loopback] == ["mok bf16 native", "dist-moe mxfp8 fp8-dispatch"]
    for r in loopback:
        assert r["status"] == "pass" and r["collective"] == "gloo" and r["graphs"] is False, r
        assert r["collectives_eager"]["alltoall_base_"] >= 4 and r["loopback_error"] == 0.0, r
    ranks = [r for r in found if r["stage"] == "ranks" and "slice_rows" in r]
    assert [r["name"] for r in ranks] == [
        "inference-ep8-f3072-bf16-mok-native",
        "inference-ep8-f1536-bf16-dist-moe-bf16",
    ]
    for r in ranks:
        assert r["status"] == "pass" and r["ranks"] == 2 and r["devices"] == ["cpu"], r
        assert 0 < r["crossed_rows"] < r["slice_rows"] and r["max_error"] <= r["tolerance"], r
    for label in ORDER:
        assert f"] {label}: pass in " in done.stdout, label
    summary = (out / "summary.md").read_text()
    assert "The stages that run layers ran on: cute kernels" in summary and "To finish" not in summary
    assert "## Loopback" in summary and "## Ranks sharing one GPU" in summary and "Did not fit" not in summary
    assert (
        f"Code: prepared from commit {code['commit'][:12]}" in summary
        and "Kernel cache: 1 kernels" in summary
    )
    for title in (
        "Matched pairs",
        "Elementwise kernels",
        "The packing execution's peak",
        "What a dataset cost",
    ):
        assert f"## {title}" in summary, title
    assert "## Where each execution's iteration went (phase account, ms)" in summary
    assert done.stdout.rstrip().endswith(summary.rstrip())
    assert_the_documents_tables_read_them(found, published)


def assert_the_documents_tables_read_them(found: list[dict], published: dict) -> None:
    """The tables a run's document regenerates from its records (``jobs/gpu_records.py``) read what
    these steps wrote: the pair, both loopback cases, both shared-device executions, the packing
    peak beside its estimate, each grouped job's cost, the elementwise kernels' forms."""
    from jobs.gpu_records import costs, elementwise, loopback, packing, pairs, ranks

    def rows(text: str) -> list[list[str]]:
        return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()[2:]]

    (pair,) = rows(pairs(found))
    assert pair[:3] == [
        published["workload_id"],
        published["mok_execution_id"],
        published["dist_execution_id"],
    ]
    assert pair[-1].startswith(f"{published['speedup']:.3f} [{published['speedupLow']:.3f}, ")
    assert [r[0] for r in rows(loopback(found))] == ["mok bf16 native", "dist-moe mxfp8 fp8-dispatch"]
    assert [r[-1] for r in rows(ranks(found))] == ["pass", "pass"]
    assert [r[0] for r in rows(packing(found))] == PACKING.execution_ids()
    assert [r[0] for r in rows(costs(found))] == ["pipeline", "packing"]
    assert {(r[0], r[2]) for r in rows(elementwise(found))} >= {
        ("mx_quantize", "codes"),
        ("swiglu_forward", "values"),
    }


@pytest.mark.slow
def test_a_run_stopped_from_outside_keeps_what_it_did_and_prints_its_summary(tmp_path, device_like):
    """SIGTERM to the run (what the device tool sends at its call's limit) once the defaults' smoke
    has ended: every process of the run is killed, the finished steps' records and the summary stay
    in OUT_DIR, and stdout has each finished step's line, the reason and the summary."""
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            str(SCRIPT),
            str(out),
            "--dry-run",
            "--only",
            "env,smoke,correctness,timing",
            "--whl",
            str(device_like[1]),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "results.jsonl").exists() and "smoke default" in step_records(records(out)):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, stdout
    found = records(out)
    assert list(step_records(found))[:2] == ["env", "smoke default"]
    (end,) = [r for r in found if r["stage"] == "run" and r.get("ended")]
    assert (end["status"], end["reason"]) == ("fail", "stopped by SIGTERM")
    run_id = started(found)["run"]
    assert not _alive(run_id), "the run's processes outlived it"
    summary = (out / "summary.md").read_text()
    assert "The run ended early: stopped by SIGTERM" in summary and "| smoke | default | pass |" in summary
    assert "] env: pass in" in stdout and "] smoke default: pass in" in stdout
    assert "gpu-run: stopped by SIGTERM" in stdout and stdout.rstrip().endswith(summary.rstrip())


def _alive(run_id: str, grace_s: float = 10.0) -> list[Path]:
    """The processes of run ``run_id`` still alive once ``grace_s`` has passed: a process killed
    with SIGKILL keeps its /proc entry until the kernel has torn it down, which a busy host delays."""
    deadline = time.monotonic() + grace_s
    while True:
        left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _runs(p, run_id)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _runs(proc: Path, run_id: str) -> bool:
    """Whether process ``proc`` belongs to run ``run_id`` (its environment names it)."""
    try:
        return f'"{run_id}"]'.encode() in (proc / "environ").read_bytes()
    except OSError:
        return False


def test_what_a_run_had_no_time_for_becomes_its_rerun(tmp_path):
    from jobs.gpu_run.main import rerun_args
    from jobs.gpu_run.run import Run
    from jobs.gpu_run.summary import write_summary

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
    args = rerun_args(run)
    assert args == ["--total", "220", "--only", "correctness,timing,pipeline", "--variants", "default,tail64"]
    run.record("run", name="rerun", status="info", args=args)
    write_summary(tmp_path)
    assert (
        (tmp_path / "summary.md")
        .read_text()
        .endswith(f"To finish: `jobs/gpu-run.sh OUT_DIR {' '.join(args)}`\n")
    )
    assert rerun_args(Run(tmp_path, tmp_path, True, 0.0, io.StringIO(), "8", {})) == []

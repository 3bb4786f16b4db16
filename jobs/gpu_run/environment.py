"""The device run's environment: the packed wheels unpacked into its scratch folder (and put on the
children's path where the machine lacks them), the environment every child gets, the env step (the
GPU, the driver, the stack's versions and the plan of kernels), and whether a GPU is there at all."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from cutlass_kernels import gating
from cutlass_kernels.isolation import run_isolated
from cutlass_kernels.plants import PLANT_ENV
from cutlass_kernels.results import read
from jobs.gpu_run.plan import ROOT, SMI_S, UNPACK_S
from jobs.gpu_run.run import Run


def no_gpu() -> str | None:
    """Why this machine has no usable GPU, or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "nvidia-smi not found"
    done = run_isolated([smi, "-L"], SMI_S)
    if done.rc != 0 or "GPU" not in done.output:
        return f"nvidia-smi -L: {done.output.strip()[:200] or 'no GPU listed'}"
    return None


def environment(run: Run) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (PLANT_ENV, gating.BACKEND_ENV)}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        "CUTE_DSL_CACHE_DIR": str(run.work / "cute-cache"),  # compiled once, reused by every stage
        "MPLBACKEND": "Agg",
    }
    if run.plants:
        env[PLANT_ENV] = ",".join(run.plants)
    return env


def unpack(run: Run, whl: Path) -> None:
    """Unpack the CuTe DSL archive and install the pure-Python wheels into the work folder (timed);
    put each on PYTHONPATH only where its packages are not importable already."""
    site = run.work / "site"
    archive, wheels = whl / "cutlass-dsl.tar.xz", sorted((whl / "py").glob("*.whl"))
    paths = []
    if archive.exists():
        site.mkdir(parents=True, exist_ok=True)
        done = run_isolated(["tar", "xJf", str(archive), "-C", str(site)], UNPACK_S * run.scale)
        needed = importlib.util.find_spec("cutlass") is None
        run.record(
            "env",
            name="unpack cutlass-dsl",
            status="pass" if done.rc == 0 else "fail",
            seconds=round(done.seconds, 2),
            bytes=archive.stat().st_size,
            on_pythonpath=needed,
            error=done.why(UNPACK_S * run.scale) if done.rc else None,
        )
        if needed:
            paths += [str(site), str(site / "nvidia_cutlass_dsl" / "dsl_packages")]
    else:
        run.record("env", name="unpack cutlass-dsl", status="skip", reason=f"{archive} absent")
    for wheel in wheels:  # pure-Python wheels: each its own folder, on the path only where needed
        began = time.monotonic()
        target = run.work / "py" / wheel.name.split("-")[0]
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target)
            tops = sorted({n.split("/")[0].removesuffix(".py") for n in z.namelist()} - {""})
            tops = [t for t in tops if t.isidentifier()]  # not NAME-VERSION.data
        missing = [t for t in tops if importlib.util.find_spec(t) is None]
        run.record(
            "env",
            name="py wheel",
            status="pass",
            wheel=wheel.name,
            packages=tops,
            on_pythonpath=bool(missing),
            seconds=round(time.monotonic() - began, 2),
        )
        if missing:
            paths.append(str(target))
    if not wheels:
        run.record("env", name="py wheel", status="skip", reason=f"no {whl / 'py'}/*.whl")
    if paths:
        run.env["PYTHONPATH"] = os.pathsep.join([*paths, run.env["PYTHONPATH"]])


def env_step(run: Run, limit: float, plan: list[dict[str, Any]]) -> tuple[int | None, str]:
    if not run.dry_run and (smi := shutil.which("nvidia-smi")):
        query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
        done = run_isolated([smi, f"--query-gpu={query}", "--format=csv"], min(SMI_S, limit / 2))
        run.record("env", name="nvidia-smi", status="info", output=done.output.strip())
    return plan_child(run, limit, plan, "env")


def plan_child(
    run: Run, limit: float, plan: list[dict[str, Any]], command: str = "plan"
) -> tuple[int | None, str]:
    """The env (or plan) child, which appends the plan: every kernel and op x variant of the arch."""
    mark = len(read(run.results))
    done = run.child(run.kernels_cli(command), limit)
    plan += [r for r in read(run.results)[mark:] if r.get("name") in ("kernel", "op variant", "chosen")]
    if plan:
        run.arch = plan[0]["arch"]
    return done.rc, f"{sum(r['name'] == 'kernel' for r in plan)} kernels planned"

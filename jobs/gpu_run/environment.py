"""The device run's environment: what travels unpacked into its scratch folder (the DSL and the wheels,
put on the children's path where the machine lacks them; the kernel cache, named to every child; the
record of the code, checked against the tree, whose commit every shard names), the environment every
child gets, the env step (the GPU, the driver, the stack's versions, the plan of kernels, the kernel
cache verified), and whether a GPU is there at all."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from cutlass_kernels import gating
from cutlass_kernels.isolation import run_isolated
from cutlass_kernels.kernel_cache import CACHE_ENV, read_manifest
from cutlass_kernels.plants import PLANT_ENV
from cutlass_kernels.results import read
from jobs.gpu_run.pack import DSL_ARCHIVE, KERNEL_CACHE, PROVENANCE, checked
from jobs.gpu_run.plan import ROOT, SMI_S, UNPACK_S
from jobs.gpu_run.run import Run
from pipeline.data.meta import GIT_SHA_ENV


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
    """Every child's environment: this one's, less what the run alone sets (the planted faults, the
    gate's backend, the kernel cache, the commit), with the checkout first on the path."""
    ours = (PLANT_ENV, gating.BACKEND_ENV, CACHE_ENV, GIT_SHA_ENV)  # set by the run alone, or not at all
    env = {k: v for k, v in os.environ.items() if k not in ours}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
        "CUTE_DSL_CACHE_DIR": str(run.work / "cute-cache"),  # compiled once, reused by every stage
        "MPLBACKEND": "Agg",
    }
    if run.plants:
        env[PLANT_ENV] = ",".join(run.plants)
    if run.dry_run:  # on a shared CPU host a pool's threads wait on each other far longer than they work
        env["OMP_NUM_THREADS"] = "1"
    return env


def unpack(run: Run, whl: Path) -> None:
    """Unpack the CuTe DSL archive and install the pure-Python wheels into the work folder (timed),
    each on PYTHONPATH only where its packages are not importable already; unpack the kernel cache and
    name it to every child; check the record of the code (:func:`provenance`)."""
    site = run.work / "site"
    archive, wheels = whl / DSL_ARCHIVE, sorted((whl / "py").glob("*.whl"))
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
    _kernel_cache(run, whl / KERNEL_CACHE)
    provenance(run, whl / PROVENANCE)


def _kernel_cache(run: Run, archive: Path) -> None:
    """The packed kernel cache unpacked, and named to every child (:data:`CACHE_ENV`): what it holds is
    loaded, never compiled. Absent on a GPU, a failure (every process compiles again)."""
    if not archive.is_file():
        why = f"{archive} absent (jobs/pack-gpu.sh packs it): every process compiles its kernels"
        run.record("env", name="unpack kernel cache", status="skip" if run.dry_run else "fail", reason=why)
        return
    done = run_isolated(["tar", "xJf", str(archive), "-C", str(run.work)], UNPACK_S * run.scale)
    folder = run.work / "kernel-cache"
    unpacked = done.rc == 0 and folder.is_dir()
    run.record(
        "env",
        name="unpack kernel cache",
        status="pass" if unpacked else "fail",
        seconds=round(done.seconds, 2),
        bytes=archive.stat().st_size,
        error=None if unpacked else done.why(UNPACK_S * run.scale) or f"no {folder.name}/ in {archive}",
    )
    if unpacked:
        run.env[CACHE_ENV] = str(folder)


def provenance(run: Run, path: Path) -> None:
    """The packed record of the code checked against this tree (:func:`jobs.gpu_run.pack.checked`), and
    the commit it names given to every child (:data:`GIT_SHA_ENV`: the shards' ``git_sha``, whatever
    this copy's ``.git`` says). Absent, a failure: the shards then name this checkout's HEAD."""
    if not path.is_file():
        why = f"{path} absent (jobs/pack-gpu.sh writes it): the shards name this checkout's HEAD"
        run.record("env", name="provenance", status="fail", error=why)
        return
    record = json.loads(path.read_text())
    sha, problems = checked(record, ROOT)
    run.env[GIT_SHA_ENV] = sha
    run.record(
        "env",
        name="provenance",
        status="fail" if problems else "pass",
        commit=record["commit"],
        differs=record["differs"],
        tree=record["tree"],
        files=record["files"],
        git_sha=sha,
        error="; ".join(problems) or None,
    )


def env_step(run: Run, limit: float, plan: list[dict[str, Any]]) -> tuple[int | None, str]:
    """The GPU and its driver (nvidia-smi), the env child (versions and the plan), the kernel cache
    verified (its files and every load); failed where any of these, or what travelled (the unpacking,
    the record of the code), failed."""
    end = time.monotonic() + limit
    if not run.dry_run and (smi := shutil.which("nvidia-smi")):
        query = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu"
        done = run_isolated([smi, f"--query-gpu={query}", "--format=csv"], min(SMI_S, limit / 2))
        run.record("env", name="nvidia-smi", status="info", output=done.output.strip())
    rc, note = plan_child(run, end - time.monotonic(), plan, "env")
    if folder := run.env.get(CACHE_ENV):
        left = end - time.monotonic()
        verify = run.child(run.python("-m", "cutlass_kernels", "cache", "verify", folder), left)
        lines = verify.output.strip().splitlines() or [verify.why(left)]
        run.record(
            "env",
            name="kernel cache",
            status="pass" if verify.rc == 0 else "fail",
            folder=folder,
            kernels=len(read_manifest(Path(folder))),
            output=lines[-1] if verify.rc == 0 else "\n".join(lines[-20:]),
        )
        note += f"; kernel cache: {lines[-1]}" if verify.rc == 0 else "; the kernel cache failed its verify"
    failed = [
        r["name"]
        for r in read(run.results)
        if r.get("run") == run.run_id and r["stage"] == "env" and r.get("status") == "fail"
    ]
    if failed:
        note += f"; failed: {', '.join(dict.fromkeys(failed))}"
    return (1 if failed and rc == 0 else rc), note


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

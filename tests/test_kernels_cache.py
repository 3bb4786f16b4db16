"""The kernel cache (:mod:`cutlass_kernels.kernel_cache`): the session's compiles exported per arch
(no GPU), every entry verified and loaded, the host code built for any x86-64, the exported object
holding the very cubin compiled, its key, and in a fresh process kernels loaded instead of compiled,
a miss compiled and said, and a loaded kernel's call reaching the CUDA runtime."""

from __future__ import annotations

import importlib.util
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from cutlass_kernels import kernel_cache

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)
ARCHES = ("sm_90a", "sm_100a")
CARRY_BYTES = 4 * 2**20  # what one arch's cache may add to the device call's 64 MiB


def _cache(compiled_kernels, arch: str) -> Path:
    return compiled_kernels(arch).parent / "cache"


def packed_bytes(cache: Path) -> int:
    """The cache as the pack script would carry it: a tar, xz-compressed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(cache, arcname=".")
    return len(lzma.compress(buf.getvalue(), preset=9))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
def test_the_cache_holds_every_compiled_kernel_of_the_arch_and_each_entry_loads(arch: str, compiled_kernels):
    out, cache = compiled_kernels(arch), _cache(compiled_kernels, arch)
    manifest = kernel_cache.read_manifest(cache)
    assert sorted(e["kernel"] for e in manifest.values()) == sorted(p.stem for p in out.glob("*.ptx"))
    assert {(e["dsl"], e["arch"], e["sources"]) for e in manifest.values()} == {
        (kernel_cache.dsl_version(), arch, kernel_cache.sources_digest())
    }
    assert kernel_cache.verify(cache) == []
    # each object file carries the very cubin the compile wrote, and nothing else is in the folder
    for stem, entry in manifest.items():
        assert (out / f"{entry['kernel']}.cubin").read_bytes() in (cache / f"{stem}.o").read_bytes(), stem
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [kernel_cache.MANIFEST, *(f"{s}.o" for s in manifest)]
    )
    size = sum(e["bytes"] for e in manifest.values())
    assert size < CARRY_BYTES and packed_bytes(cache) < size // 4, size


@pytest.mark.slow
def test_the_host_code_runs_on_any_x86_64(compiled_kernels):
    # LLVM would target the building CPU by default: AVX-512 (zmm) and AVX (ymm) registers are out
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("objdump is not installed")
    for stem in sorted(kernel_cache.read_manifest(cache := _cache(compiled_kernels, "sm_90a"))):
        text = subprocess.run(
            [objdump, "-d", str(cache / f"{stem}.o")], capture_output=True, text=True
        ).stdout
        assert "%zmm" not in text and "%ymm" not in text, stem


def test_the_key_names_dsl_arch_kernel_and_sources():
    key = kernel_cache.Key("4.8.1", "sm_90a", "grouped_fprop_bfloat16-bfloat16_128x256_sm_90a", "ab" * 32)
    others = [
        kernel_cache.Key("4.9.0", key.arch, key.kernel, key.sources),
        kernel_cache.Key(key.dsl, "sm_100a", key.kernel, key.sources),
        kernel_cache.Key(key.dsl, key.arch, key.kernel + "_x", key.sources),
        kernel_cache.Key(key.dsl, key.arch, key.kernel, "cd" * 32),
    ]
    assert len({k.stem for k in [key, *others]}) == 5
    assert key.stem.startswith(key.kernel + "-") and key.symbol.isidentifier()
    assert kernel_cache.Key.current(key.kernel, key.arch).sources == kernel_cache.sources_digest()


@pytest.mark.slow
def test_verify_names_what_is_wrong_with_a_folder(compiled_kernels, tmp_path: Path):
    cache = tmp_path / "cache"
    shutil.copytree(_cache(compiled_kernels, "sm_90a"), cache)
    manifest = json.loads((cache / kernel_cache.MANIFEST).read_text())
    first, second, third = (e["stem"] for e in manifest["kernels"][:3])
    (cache / f"{first}.o").unlink()
    with (cache / f"{second}.o").open("ab") as f:
        f.write(b"\0")
    manifest["kernels"][2]["sources"] = "0" * 64
    (cache / kernel_cache.MANIFEST).write_text(json.dumps(manifest))
    shutil.copy(cache / f"{manifest['kernels'][3]['stem']}.o", cache / "stray.o")
    problems = kernel_cache.verify(cache)
    assert problems == [
        f"{first}.o: missing or differs from the manifest",
        f"{second}.o: missing or differs from the manifest",
        f"{third}.o: built by DSL {kernel_cache.dsl_version()} from other sources than these",
        "stray.o: not in the manifest",
    ]
    assert kernel_cache.verify(tmp_path) == [
        f"{tmp_path / kernel_cache.MANIFEST} is missing or names no kernel"
    ]


_LOADS = """
import json, sys
import torch
from cutlass_kernels import compiles, kernel_cache, mx_quant_kernel, registry, swiglu_kernel
from cutlass_kernels import swiglu_forward_kernel

specs = [registry.spec_for("sm_90a", op, torch.bfloat16, torch.bfloat16, v)
         for op, v in (("fprop", "default"), ("wgrad", "ragged_tile"), ("dgrad", "tma_tail64"))]
functions = [registry.compiled(s) for s in specs]
functions += [swiglu_kernel.compile_kernel(), mx_quant_kernel.compile_kernel("values", "exact")]
functions += [swiglu_forward_kernel.compile_kernel("codes", "exact")]
report = {"compiles": compiles.spent()[1], "loads": compiles.loads()[1]}
# a loaded kernel takes the compiled one's arguments: on a machine without a GPU its call gets as far
# as the CUDA runtime, which finds no driver
if not torch.cuda.is_available():
    from cutlass_kernels.cute_base import OFFS_ALIGN, to_cute
    import cutlass
    from cuda.bindings import driver
    dy, x = torch.randn(64, 128).bfloat16(), torch.randn(64, 256).bfloat16()
    out = torch.empty(2 * 128, 256, dtype=torch.bfloat16)
    offs = torch.tensor([30, 64], dtype=torch.int32)
    try:
        functions[1](to_cute(dy.T), to_cute(x.T), to_cute(out), to_cute(offs, OFFS_ALIGN),
                     cutlass.Int32(1), driver.CUstream(0))
    except Exception as e:
        report["call"] = f"{type(e).__name__}: {e}"
print(json.dumps(report))
"""


def _run_loads(cache: Path) -> tuple[dict, str]:
    env = {**os.environ, "CUTE_DSL_ARCH": "sm_90a", kernel_cache.CACHE_ENV: str(cache)}
    done = subprocess.run(
        [sys.executable, "-c", _LOADS], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.mark.slow
def test_a_process_loads_its_kernels_from_the_cache_and_compiles_only_a_miss_saying_so(
    compiled_kernels, tmp_path: Path
):
    cache = _cache(compiled_kernels, "sm_90a")
    report, stderr = _run_loads(cache)
    assert (report["compiles"], report["loads"]) == (0, 6)
    assert "compiling" not in stderr
    if "call" in report:  # no GPU here: the loaded kernel's arguments were taken, the driver was not found
        assert (
            report["call"].startswith("DSLCudaRuntimeError")
            and "cudaErrorInsufficientDriver" in report["call"]
        )
    # the same cache less one entry: that kernel compiles, and says why
    partial = tmp_path / "partial"
    shutil.copytree(cache, partial)
    manifest = json.loads((partial / kernel_cache.MANIFEST).read_text())
    missing = "grouped_wgrad_bfloat16-bfloat16_128x256_ragged_tile_sm_90a"
    manifest["kernels"] = [e for e in manifest["kernels"] if e["kernel"] != missing]
    (partial / kernel_cache.MANIFEST).write_text(json.dumps(manifest))
    report, stderr = _run_loads(partial)
    assert (report["compiles"], report["loads"]) == (1, 5)
    assert f"cutlass_kernels: compiling {missing}: not in the cache {partial}" in stderr

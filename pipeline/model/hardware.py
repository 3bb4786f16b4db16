"""Per-GPU rate presets for predictions, and the map from a recorded device name to a preset."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hardware:
    """Peak rates of one GPU: dense tensor-core TFLOP/s, HBM TB/s, NVLink GB/s per direction."""

    name: str
    bf16_tflops: float
    fp8_tflops: float
    hbm_tb_s: float
    nvlink_gb_s: float

    def tensor_tflops(self, precision: str) -> float:
        """GEMM rate for operands in ``precision`` (MXFP8 runs at the FP8 rate)."""
        return self.fp8_tflops if precision == "mxfp8" else self.bf16_tflops


# Public datasheet figures, dense (the datasheets quote 2:4-sparse tensor rates; these are half).
# H200 SXM (NVIDIA H200 datasheet): BF16 1,979 / FP8 3,958 TFLOP/s sparse, HBM3e 4.8 TB/s,
#   NVLink 900 GB/s total = 450 GB/s per direction.
# GB300 (NVIDIA GB300 NVL72 datasheet, rack figures / 72 GPUs): BF16 5 / FP8 10 PFLOP/s sparse,
#   HBM3e 576 TB/s / 72 = 8 TB/s, NVLink 5 1.8 TB/s total = 900 GB/s per direction.
HARDWARE: dict[str, Hardware] = {
    "h200": Hardware(
        "NVIDIA H200 SXM", bf16_tflops=989.5, fp8_tflops=1979.0, hbm_tb_s=4.8, nvlink_gb_s=450.0
    ),
    "gb300": Hardware("NVIDIA GB300", bf16_tflops=2500.0, fp8_tflops=5000.0, hbm_tb_s=8.0, nvlink_gb_s=900.0),
}

# Device-name tokens (as torch.cuda.get_device_name reports them) that identify a preset. Variants
# with other clocks or links (e.g. "H200 NVL", a PCIe card) are deliberately not matched.
_TOKENS = {"H200": "h200", "GB300": "gb300"}
_OTHER_VARIANTS = {"NVL", "PCIE"}


def hardware_for_device(device_name: str) -> str | None:
    """Preset key for a recorded device name ("NVIDIA H200" -> "h200"); None for CPUs or unknown GPUs."""
    tokens = set(device_name.upper().replace("-", " ").split())
    if tokens & _OTHER_VARIANTS:
        return None
    keys = {key for token, key in _TOKENS.items() if token in tokens}
    return keys.pop() if len(keys) == 1 else None


def preset(key: str) -> Hardware:
    """Look a preset up by key; a clear error lists the allowed keys."""
    try:
        return HARDWARE[key]
    except KeyError:
        raise ValueError(f"unknown hardware {key!r}; allowed: {', '.join(HARDWARE)}") from None

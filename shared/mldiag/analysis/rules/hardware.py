"""The accelerators' published limits: peak dense FLOP/s per dtype, HBM bandwidth and capacity, per chip.

Each row cites the vendor's datasheet or product page it comes from. Figures are
dense (without structured sparsity) and per chip (per GPU, per TPU chip);
memory capacities are HBM sizes, which vendors quote in binary gigabytes.

:func:`chip_for` finds the row for the device type a profile names ("TPU v5
lite", "NVIDIA A100-SXM4-80GB", "AMD GPU (gfx942)"). A name that fits no row,
or an architecture that several rows share and the memory capacity does not
tell apart, gives no chip: no verdict is better than one against the wrong
peaks. CPUs have no row: their peaks depend on the model, cores and clocks,
which a profile does not record.

:func:`peak_dtype` says which of a chip's peaks a matmul of a given dtype and
precision runs against: on a TPU an f32 matmul at default precision is a
single bf16 pass, on NVIDIA Ampere and later it runs as TF32.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GIB = 1 << 30
TERA = 1e12
GIGA = 1e9
# An architecture name (gfx942) stands for a chip when the device's memory capacity is this share of the chip's or
# more: what an allocator reports is a little below the HBM size, and a smaller sibling's is far below it.
CAPACITY_MATCH = 0.7


@dataclass(frozen=True)
class Chip:
    """One accelerator's published limits."""

    name: str
    vendor: str
    peak_flops: dict[str, float]  # dtype ("bf16", "f16", "tf32", "f32", "f64", "fp8", "int8") -> dense FLOP/s
    hbm_bytes_per_s: float
    memory_bytes: int
    source: str  # the vendor's page or datasheet the figures come from
    names: re.Pattern[str]  # device type strings that name this chip
    architecture: str = ""  # an architecture name that profiles give instead of the product (AMD's gfx942)
    fast_f32: str = ""  # the peak an f32 matmul at default precision runs against, where not "f32"
    # The side of a TPU's matrix unit (its systolic array): a matmul narrower than this in any of its rows,
    # contracted size or columns leaves part of it idle: 128 x 128 through v5p, 256 x 256 from Trillium
    # (https://cloud.google.com/tpu/docs/system-architecture-tpu-vm, and the v6e page). 0 where the chip has none.
    matrix_unit: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte at which a bf16 (or, lacking one, f16) program turns from memory- to compute-bound."""
        peak = self.peak_flops.get("bf16") or self.peak_flops.get("f16") or max(self.peak_flops.values())
        return peak / self.hbm_bytes_per_s


def _names(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


_TPU_V4 = "https://cloud.google.com/tpu/docs/v4"
_TPU_V5E = "https://cloud.google.com/tpu/docs/v5e"
_TPU_V5P = "https://cloud.google.com/tpu/docs/v5p"
_TPU_V6E = "https://cloud.google.com/tpu/docs/v6e"
_V100 = "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100 = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
         "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_H100 = "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM column)"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM column)"
_B200 = "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200, per GPU)"
_MI250X = "https://www.amd.com/en/products/accelerators/instinct/mi200/mi250x.html"
_MI300X = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
_MI325X = "https://www.amd.com/en/products/accelerators/instinct/mi300/mi325x.html"
_MI350X = "https://www.amd.com/en/products/accelerators/instinct/mi350/mi350x.html"
_MI355X = "https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html"

_A100_FLOPS = {"bf16": 312 * TERA, "f16": 312 * TERA, "tf32": 156 * TERA, "f32": 19.5 * TERA, "f64": 19.5 * TERA,
               "int8": 624 * TERA}
_HOPPER_FLOPS = {"bf16": 989 * TERA, "f16": 989 * TERA, "tf32": 494 * TERA, "f32": 67 * TERA, "f64": 67 * TERA,
                 "fp8": 1979 * TERA, "int8": 1979 * TERA}
_MI300_FLOPS = {"bf16": 1307.4 * TERA, "f16": 1307.4 * TERA, "tf32": 653.7 * TERA, "f32": 163.4 * TERA,
                "f64": 163.4 * TERA, "fp8": 2614.9 * TERA, "int8": 2614.9 * TERA}

CHIPS: tuple[Chip, ...] = (
    Chip("TPU v4", "Google", {"bf16": 275 * TERA, "int8": 275 * TERA}, 1200 * GIGA, 32 * GIB, _TPU_V4,
         _names(r"\bTPU\s*v4\b(?!\s*(lite|i\b))"), fast_f32="bf16", matrix_unit=128),
    Chip("TPU v5e", "Google", {"bf16": 197 * TERA, "int8": 394 * TERA}, 819 * GIGA, 16 * GIB, _TPU_V5E,
         _names(r"\bTPU\s*v5\s*(lite|e)\b"), fast_f32="bf16", matrix_unit=128),
    Chip("TPU v5p", "Google", {"bf16": 459 * TERA, "int8": 918 * TERA}, 2765 * GIGA, 95 * GIB, _TPU_V5P,
         _names(r"\bTPU\s*v5p?\b(?!\s*(lite|e\b))"), fast_f32="bf16", matrix_unit=128),
    Chip("TPU v6e (Trillium)", "Google", {"bf16": 918 * TERA, "int8": 1836 * TERA}, 1640 * GIGA, 32 * GIB, _TPU_V6E,
         _names(r"\bTPU\s*v6\s*(lite|e)\b|trillium"), fast_f32="bf16", matrix_unit=256),
    Chip("NVIDIA V100 SXM2", "NVIDIA", {"f16": 125 * TERA, "f32": 15.7 * TERA, "f64": 7.8 * TERA}, 900 * GIGA,
         32 * GIB, _V100, _names(r"V100.*SXM")),
    Chip("NVIDIA V100 PCIe", "NVIDIA", {"f16": 112 * TERA, "f32": 14 * TERA, "f64": 7 * TERA}, 900 * GIGA,
         32 * GIB, _V100, _names(r"V100.*PCIE")),
    Chip("NVIDIA A100 40GB", "NVIDIA", _A100_FLOPS, 1555 * GIGA, 40 * GIB, _A100, _names(r"A100.*\b40\s*GB"),
         fast_f32="tf32"),
    Chip("NVIDIA A100 80GB SXM", "NVIDIA", _A100_FLOPS, 2039 * GIGA, 80 * GIB, _A100,
         _names(r"A100.*SXM.*\b80\s*GB"), fast_f32="tf32"),
    Chip("NVIDIA A100 80GB PCIe", "NVIDIA", _A100_FLOPS, 1935 * GIGA, 80 * GIB, _A100,
         _names(r"A100.*\b80\s*GB.*PCIE|A100.*PCIE.*\b80\s*GB"), fast_f32="tf32"),
    # "NVIDIA H100 80GB HBM3" is the SXM part; the PCIe and NVL parts say so in their names.
    Chip("NVIDIA H100 SXM", "NVIDIA", _HOPPER_FLOPS, 3350 * GIGA, 80 * GIB, _H100,
         _names(r"H100(?!.*(PCIE|NVL)).*(SXM|HBM3)"), fast_f32="tf32"),
    Chip("NVIDIA H200 SXM", "NVIDIA", _HOPPER_FLOPS, 4800 * GIGA, 141 * GIB, _H200,
         _names(r"\bH200\b(?!.*NVL)"), fast_f32="tf32"),
    Chip("NVIDIA B200", "NVIDIA", {"bf16": 2250 * TERA, "f16": 2250 * TERA, "tf32": 1100 * TERA, "f32": 80 * TERA,
                                   "f64": 40 * TERA, "fp8": 4500 * TERA, "int8": 4500 * TERA},
         8000 * GIGA, 180 * GIB, _B200, _names(r"\bB200\b"), fast_f32="tf32"),
    Chip("AMD Instinct MI250X", "AMD", {"bf16": 383 * TERA, "f16": 383 * TERA, "f32": 95.7 * TERA,
                                        "f64": 95.7 * TERA, "int8": 383 * TERA},
         3276.8 * GIGA, 128 * GIB, _MI250X, _names(r"MI250X")),
    Chip("AMD Instinct MI300X", "AMD", _MI300_FLOPS, 5300 * GIGA, 192 * GIB, _MI300X, _names(r"MI300X"),
         architecture="gfx942"),
    Chip("AMD Instinct MI325X", "AMD", _MI300_FLOPS, 6000 * GIGA, 256 * GIB, _MI325X, _names(r"MI325X"),
         architecture="gfx942"),
    Chip("AMD Instinct MI350X", "AMD", {"bf16": 2307 * TERA, "f16": 2307 * TERA, "f32": 144.2 * TERA,
                                        "f64": 72.1 * TERA, "fp8": 4614 * TERA, "int8": 4614 * TERA},
         8000 * GIGA, 288 * GIB, _MI350X, _names(r"MI350X"), architecture="gfx950"),
    Chip("AMD Instinct MI355X", "AMD", {"bf16": 2516.6 * TERA, "f16": 2516.6 * TERA, "f32": 157.3 * TERA,
                                        "f64": 78.6 * TERA, "fp8": 5033.2 * TERA, "int8": 5033.2 * TERA},
         8000 * GIGA, 288 * GIB, _MI355X, _names(r"MI355X"), architecture="gfx950"),
)

_ARCHITECTURE = re.compile(r"\bgfx\d+\w*", re.IGNORECASE)


def chip_for(device_type: str, memory_capacity_bytes: int | None = None) -> Chip | None:
    """The chip ``device_type`` names, or None when it names none, or several the capacity cannot tell apart."""
    named = [chip for chip in CHIPS if chip.names.search(device_type)]
    if len(named) == 1:
        return named[0]
    if named:
        return None
    architecture = _ARCHITECTURE.search(device_type)
    if architecture is None or not memory_capacity_bytes:
        return None
    fitting = [chip for chip in CHIPS if chip.architecture == architecture.group(0).lower()
               and CAPACITY_MATCH * chip.memory_bytes <= memory_capacity_bytes <= chip.memory_bytes]
    return fitting[0] if len(fitting) == 1 else None


# HLO element types, by the peak a matmul of them runs against.
_HLO_DTYPES = {"bf16": "bf16", "f16": "f16", "f32": "f32", "f64": "f64", "s8": "int8", "u8": "int8",
               "f8e4m3fn": "fp8", "f8e5m2": "fp8", "f8e4m3fnuz": "fp8", "f8e5m2fnuz": "fp8"}


def peak_dtype(chip: Chip, hlo_dtype: str, precision: str = "") -> str | None:
    """The key of ``chip``'s peak that a matmul on ``hlo_dtype`` operands at ``precision`` runs against.

    An f32 matmul at HIGHEST precision runs against the chip's f32 peak, or, where it publishes none (a TPU), against
    the fast path's, which its several passes cannot reach. None where the chip publishes no peak for the dtype (an
    f64 matmul on a TPU, which emulates f64).
    """
    dtype = _HLO_DTYPES.get(hlo_dtype)
    if dtype == "f32" and chip.fast_f32 and (precision != "highest" or "f32" not in chip.peak_flops):
        dtype = chip.fast_f32
    return dtype if dtype in chip.peak_flops else None

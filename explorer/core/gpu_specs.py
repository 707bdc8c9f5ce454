"""A cited table of NVIDIA GPUs' peak figures (dense FLOP/s per dtype, bandwidth) and the matching that finds a row.

Every FLOP/s figure is DENSE: datasheets print the 2:4-sparsity figure first, which is twice what a dense matmul can
reach, so those are halved here. float32 is the non-tensor-core FP32 rate, because torch leaves TF32 off for matmul
by default. bfloat16/float16 are tensor-core rates with FP32 accumulate (what torch's matmuls use); on GeForce cards
that is half the FP16-accumulate figure the box quotes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.core.units import GIB

TERA = 1e12
GIGA = 1e9
# How every row's memory is read: the datasheet's "GB" as SI gigabytes, as the same sheets print bandwidth in GB/s.
# One stated figure per GPU, never more than a user can fill: a driver reports a little more usable memory than this on
# the cards it was checked on (an L40S with ECC on: 45 GiB = 48.3 x 10^9 bytes, against 48 x 10^9).
MEMORY_UNIT = "datasheet GB read as 10^9 bytes"

A100_DATASHEET = (
    "NVIDIA A100 Tensor Core GPU datasheet, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
H100_DATASHEET = "NVIDIA H100 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h100/"
H200_DATASHEET = "NVIDIA H200 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/h200/"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's vendor peak figures."""

    name: str  # our label for the row, e.g. "H100 SXM"
    pattern: str  # regex searched in the normalised device name (upper case, '-' and '_' turned into spaces)
    memory_gb: int  # the datasheet's figure in GB; `memory_bytes` reads it as 10^9 bytes each (MEMORY_UNIT)
    fp32_flops: float  # non-tensor-core FP32, FLOP/s
    bf16_flops: float | None  # dense tensor-core BF16 with FP32 accumulate, FLOP/s; None: no bf16 tensor cores
    fp16_flops: float  # dense tensor-core FP16 with FP32 accumulate, FLOP/s
    bandwidth_bytes_per_s: float
    source: str  # the vendor document the figures come from

    @property
    def memory_bytes(self) -> int:
        """The datasheet's memory in bytes: its GB as 10^9 bytes (MEMORY_UNIT), cited by `source`."""
        return int(self.memory_gb * GIGA)

    @property
    def memory_text(self) -> str:
        """'48 GB (48 x 10^9 bytes, datasheet)': the figure with its unit, for a table or a caption."""
        return f"{self.memory_gb} GB ({self.memory_gb} x 10^9 bytes, datasheet)"

    def peak_flops(self, dtype: str) -> float | None:
        """The peak FLOP/s for a run's dtype, or None where the table has no figure for it."""
        return {"float32": self.fp32_flops, "bfloat16": self.bf16_flops, "float16": self.fp16_flops}.get(dtype)


GPU_SPECS: tuple[GpuSpec, ...] = (
    # A100: 19.5 FP32, 312 BF16/FP16 dense (624 with sparsity). The SXM rows also take an A100 whose name says neither
    # SXM nor PCIe; the name's "40GB"/"80GB" or the reported memory picks between the two sizes.
    GpuSpec(
        name="A100 40GB SXM",
        pattern=r"\bA100\b(?!.*\bPCIE\b)",  # e.g. NVIDIA A100-SXM4-40GB
        memory_gb=40,
        fp32_flops=19.5 * TERA,
        bf16_flops=312 * TERA,
        fp16_flops=312 * TERA,
        bandwidth_bytes_per_s=1555 * GIGA,
        source=A100_DATASHEET,
    ),
    GpuSpec(
        name="A100 80GB SXM",
        pattern=r"\bA100\b(?!.*\bPCIE\b)",
        memory_gb=80,
        fp32_flops=19.5 * TERA,
        bf16_flops=312 * TERA,
        fp16_flops=312 * TERA,
        bandwidth_bytes_per_s=2039 * GIGA,
        source=A100_DATASHEET,
    ),
    GpuSpec(
        name="A100 40GB PCIe",
        pattern=r"\bA100\b.*\bPCIE\b",  # e.g. NVIDIA A100-PCIE-40GB
        memory_gb=40,
        fp32_flops=19.5 * TERA,
        bf16_flops=312 * TERA,
        fp16_flops=312 * TERA,
        bandwidth_bytes_per_s=1555 * GIGA,
        source=A100_DATASHEET,
    ),
    GpuSpec(
        name="A100 80GB PCIe",
        pattern=r"\bA100\b.*\bPCIE\b",  # e.g. NVIDIA A100 80GB PCIe
        memory_gb=80,
        fp32_flops=19.5 * TERA,
        bf16_flops=312 * TERA,
        fp16_flops=312 * TERA,
        bandwidth_bytes_per_s=1935 * GIGA,
        source=A100_DATASHEET,
    ),
    GpuSpec(
        name="H100 SXM",
        pattern=r"\bH100\b(?!.*\b(PCIE|NVL)\b)",  # SXM5 reports itself as NVIDIA H100 80GB HBM3
        memory_gb=80,
        fp32_flops=67 * TERA,
        bf16_flops=989.4 * TERA,  # 1,979 with sparsity
        fp16_flops=989.4 * TERA,
        bandwidth_bytes_per_s=3350 * GIGA,
        source=H100_DATASHEET,
    ),
    GpuSpec(
        name="H100 PCIe",
        pattern=r"\bH100\b.*\bPCIE\b",
        memory_gb=80,
        fp32_flops=51 * TERA,
        bf16_flops=756 * TERA,  # 1,513 with sparsity
        fp16_flops=756 * TERA,
        bandwidth_bytes_per_s=2000 * GIGA,
        source=H100_DATASHEET,
    ),
    GpuSpec(
        name="H100 NVL",
        pattern=r"\bH100\b.*\bNVL\b",  # one board of the NVLink pair
        memory_gb=94,
        fp32_flops=60 * TERA,
        bf16_flops=835.5 * TERA,  # 1,671 with sparsity
        fp16_flops=835.5 * TERA,
        bandwidth_bytes_per_s=3900 * GIGA,
        source=H100_DATASHEET,
    ),
    # H200 SXM: the H100 SXM's compute with HBM3e. The H200 NVL (lower clocks) is left out on purpose, so it falls back
    # to a measured FLOP/s rather than borrow the SXM figure; GH200 does not match either.
    GpuSpec(
        name="H200 SXM",
        pattern=r"\bH200\b(?!.*\bNVL\b)",
        memory_gb=141,
        fp32_flops=67 * TERA,
        bf16_flops=989.4 * TERA,  # 1,979 with sparsity
        fp16_flops=989.4 * TERA,
        bandwidth_bytes_per_s=4800 * GIGA,
        source=H200_DATASHEET,
    ),
    GpuSpec(
        name="L4",
        pattern=r"\bL4\b",
        memory_gb=24,
        fp32_flops=30.3 * TERA,
        bf16_flops=121 * TERA,  # 242 with sparsity
        fp16_flops=121 * TERA,
        bandwidth_bytes_per_s=300 * GIGA,
        source="NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/",
    ),
    GpuSpec(
        name="L40S",
        pattern=r"\bL40S\b",  # not the L40, which has half the tensor rate
        memory_gb=48,
        fp32_flops=91.6 * TERA,
        bf16_flops=362.05 * TERA,  # 733 with sparsity
        fp16_flops=362.05 * TERA,
        bandwidth_bytes_per_s=864 * GIGA,
        source="NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/",
    ),
    GpuSpec(
        name="T4",
        pattern=r"\bT4\b",  # reports itself as Tesla T4
        memory_gb=16,
        fp32_flops=8.1 * TERA,
        bf16_flops=None,  # Turing has no bf16 tensor cores
        fp16_flops=65 * TERA,
        bandwidth_bytes_per_s=320 * GIGA,
        source=(
            "NVIDIA T4 Tensor Core GPU datasheet, "
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
        ),
    ),
    # A10G: AWS's variant of the A10 (G5 instances), with no public NVIDIA datasheet: 80 SMs at 1.71 GHz give 35 FP32
    # and, with tensor cores at the GeForce rate, 70 BF16/FP16; the same 600 GB/s as the A10.
    GpuSpec(
        name="A10G",
        pattern=r"\bA10G\b",
        memory_gb=24,
        fp32_flops=35 * TERA,
        bf16_flops=70 * TERA,
        fp16_flops=70 * TERA,
        bandwidth_bytes_per_s=600 * GIGA,
        source=(
            "AWS EC2 G5 (https://aws.amazon.com/ec2/instance-types/g5/); "
            "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/"
        ),
    ),
    GpuSpec(
        name="A10",
        pattern=r"\bA10\b",  # A100 and A10G do not match: no word boundary
        memory_gb=24,
        fp32_flops=31.2 * TERA,
        bf16_flops=125 * TERA,  # 250 with sparsity
        fp16_flops=125 * TERA,
        bandwidth_bytes_per_s=600 * GIGA,
        source="NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
    ),
    # GeForce: tensor cores run FP32-accumulate matmuls at half the FP16-accumulate rate the box quotes.
    GpuSpec(
        name="RTX 4090",
        pattern=r"\bRTX 4090\b(?! D\b)(?!.*\bLAPTOP\b)",  # not the China-only 4090 D nor the laptop part
        memory_gb=24,
        fp32_flops=82.6 * TERA,
        bf16_flops=165.2 * TERA,  # 330.4 with FP16 accumulate
        fp16_flops=165.2 * TERA,
        bandwidth_bytes_per_s=1008 * GIGA,
        source=(
            "NVIDIA Ada Lovelace GPU Architecture whitepaper, appendix (GeForce RTX 4090), "
            "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
        ),
    ),
    GpuSpec(
        name="RTX 3090",
        pattern=r"\bRTX 3090\b(?! TI\b)(?!.*\bLAPTOP\b)",  # not the 3090 Ti
        memory_gb=24,
        fp32_flops=35.6 * TERA,
        bf16_flops=71 * TERA,  # 142 with FP16 accumulate
        fp16_flops=71 * TERA,
        bandwidth_bytes_per_s=936 * GIGA,
        source=(
            "NVIDIA Ampere GA102 GPU Architecture whitepaper, appendix A (GeForce RTX 3090), "
            "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
        ),
    ),
)


def normalise_gpu_name(device_name: str) -> str:
    """'NVIDIA A100-SXM4-40GB' -> 'NVIDIA A100 SXM4 40GB': one spelling for the patterns to search."""
    return " ".join(re.sub(r"[-_]", " ", device_name).upper().split())


def match_gpu_spec(device_name: str, memory_bytes: int | None) -> GpuSpec | None:
    """The table row for a device name as NVML or torch reports it, or None when no row (or no single row) fits.

    A name like "NVIDIA A100-SXM4-40GB" says its memory; where it does not, the reported memory picks the row
    with the nearest marketed size (drivers report a little less than the box says).
    """
    name = normalise_gpu_name(device_name)
    candidates = [spec for spec in GPU_SPECS if re.search(spec.pattern, name)]
    named_gb = re.search(r"\b(\d+)\s*GB\b", name)
    if named_gb and len(candidates) > 1:
        candidates = [spec for spec in candidates if spec.memory_gb == int(named_gb.group(1))] or candidates
    if len(candidates) > 1 and memory_bytes is not None:
        return min(candidates, key=lambda spec: abs(spec.memory_gb - memory_bytes / GIB))
    return candidates[0] if len(candidates) == 1 else None


@dataclass(frozen=True)
class DatasheetFigures:
    """A GPU's datasheet figures as a `DeviceProfile` keeps them beside its measured ones (its field names)."""

    datasheet_flops: float | None  # the spec row's dense FLOP/s for the dtype; None where none applies
    datasheet_bandwidth_bytes_per_s: float | None  # NVML's for this board, else the spec row's
    datasheet_bandwidth_source: str | None  # "nvml" or "spec"
    datasheet_source: str  # where they come from, for a table's source column


def datasheet_figures(spec: GpuSpec | None, flops: float | None, nvml_bytes_per_s: float | None) -> DatasheetFigures:
    """The bus's peak from NVML for this very board, else the table's; `flops` the table's figure for the dtype."""
    if nvml_bytes_per_s is not None:
        bandwidth, source = nvml_bytes_per_s, "nvml"
    else:
        bandwidth, source = (spec.bandwidth_bytes_per_s, "spec") if spec is not None else (None, None)
    words = [f"spec: {spec.name} ({spec.source})"] if spec is not None else []
    words += ["bandwidth from NVML (this board's clocks and bus)"] if source == "nvml" else []
    return DatasheetFigures(flops, bandwidth, source, "; ".join(words))

"""A cited table of how the GPUs of `explorer.core.gpu_specs` talk to each other (NVLink where they have it, PCIe
otherwise): what a tensor-parallel all-reduce moves its activations over.

Figures are per GPU, both directions together, as the datasheets print them ("NVLink: 900GB/s"); a ring all-reduce
sends and receives at the same time, so it runs at half of that each way. An NVLink fabric joins a limited number of
GPUs (an HGX board's NVSwitch: 8; a PCIe card's bridge: 2); more GPUs than that talk over PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.gpu_specs import A100_DATASHEET, GIGA, H100_DATASHEET, H200_DATASHEET

L4_DATASHEET = "NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/"
L40S_DATASHEET = "NVIDIA L40S GPU datasheet, https://www.nvidia.com/en-us/data-center/l40s/"
T4_DATASHEET = (
    "NVIDIA T4 Tensor Core GPU datasheet, "
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf"
)
A10_DATASHEET = "NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/"
ADA_WHITEPAPER = (
    "NVIDIA Ada Lovelace GPU Architecture whitepaper (GeForce RTX 4090: no NVLink), "
    "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
)
GA102_WHITEPAPER = (
    "NVIDIA Ampere GA102 GPU Architecture whitepaper (RTX 3090 NVLink bridge: 112.5 GB/s total), "
    "https://www.nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-v2.pdf"
)
PCIE_GEN3, PCIE_GEN4, PCIE_GEN5 = 32 * GIGA, 64 * GIGA, 128 * GIGA  # x16, both directions


@dataclass(frozen=True)
class Link:
    """The link a tensor-parallel group's all-reduces run over."""

    name: str  # "NVLink" or "PCIe Gen4 x16"
    bytes_per_s: float  # per GPU, both directions together (the datasheet's figure)
    source: str

    @property
    def one_way_bytes_per_s(self) -> float:
        """What a ring all-reduce sends at while it receives as much: half the two-way figure."""
        return self.bytes_per_s / 2


@dataclass(frozen=True)
class Interconnect:
    """One GPU model's links, as its datasheet gives them."""

    gpu: str  # the GpuSpec name of explorer.core.gpu_specs
    nvlink_bytes_per_s: float | None  # per GPU, both directions; None: no NVLink
    nvlink_gpus: int  # how many GPUs one NVLink fabric joins (8 on an HGX board, 2 with a bridge)
    pcie_name: str
    pcie_bytes_per_s: float  # x16, both directions
    source: str

    def link_for(self, gpus: int) -> Link:
        """NVLink while the group fits its fabric, PCIe beyond it."""
        if self.nvlink_bytes_per_s is not None and gpus <= self.nvlink_gpus:
            return Link("NVLink", self.nvlink_bytes_per_s, self.source)
        return Link(self.pcie_name, self.pcie_bytes_per_s, self.source)


def _row(gpu: str, nvlink_gb: float | None, nvlink_gpus: int, pcie: tuple[str, float], source: str) -> Interconnect:
    return Interconnect(gpu, None if nvlink_gb is None else nvlink_gb * GIGA, nvlink_gpus, pcie[0], pcie[1], source)


GEN3, GEN4, GEN5 = ("PCIe Gen3 x16", PCIE_GEN3), ("PCIe Gen4 x16", PCIE_GEN4), ("PCIe Gen5 x16", PCIE_GEN5)
INTERCONNECTS: dict[str, Interconnect] = {
    row.gpu: row
    for row in (
        # A100 SXM: 600 GB/s NVLink (third generation), 8 GPUs on an HGX A100 board's NVSwitch; PCIe cards: a bridge
        # joins two ("NVIDIA NVLink Bridge for 2 GPUs: 600GB/s").
        _row("A100 40GB SXM", 600, 8, GEN4, A100_DATASHEET),
        _row("A100 80GB SXM", 600, 8, GEN4, A100_DATASHEET),
        _row("A100 40GB PCIe", 600, 2, GEN4, A100_DATASHEET),
        _row("A100 80GB PCIe", 600, 2, GEN4, A100_DATASHEET),
        # H100 SXM: 900 GB/s NVLink (fourth generation), 8 GPUs on HGX H100; PCIe and NVL: 600 GB/s bridges for pairs.
        _row("H100 SXM", 900, 8, GEN5, H100_DATASHEET),
        _row("H100 PCIe", 600, 2, GEN5, H100_DATASHEET),
        _row("H100 NVL", 600, 2, GEN5, H100_DATASHEET),
        _row("H200 SXM", 900, 8, GEN5, H200_DATASHEET),
        _row("L4", None, 1, GEN4, L4_DATASHEET),
        _row("L40S", None, 1, GEN4, L40S_DATASHEET),
        _row("T4", None, 1, GEN3, T4_DATASHEET),
        _row("A10G", None, 1, GEN4, A10_DATASHEET + " (the A10's PCIe Gen4; AWS publishes no A10G datasheet)"),
        _row("A10", None, 1, GEN4, A10_DATASHEET),
        _row("RTX 4090", None, 1, GEN4, ADA_WHITEPAPER),
        _row("RTX 3090", 112.5, 2, GEN4, GA102_WHITEPAPER),
    )
}

"""The links a disaggregated deployment moves each request's KV cache over, from the prefill GPUs to the decode GPUs,
each with its cited line rate, one way (a transfer runs one way)."""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import BadInput
from explorer.core.gpu_specs import GIGA, GpuSpec
from explorer.scale.interconnect import INTERCONNECTS, PCIE_GEN5

CONNECTX7 = (
    "NVIDIA ConnectX-7 adapter user manual (single-port NDR 400 Gb/s / NDR200 200 Gb/s InfiniBand and Ethernet; "
    "dual-port 100GbE; 50/25GbE), https://docs.nvidia.com/networking/display/ConnectX7VPI/Introduction"
)
PCIE_SIG = (
    "PCI-SIG, PCI Express 5.0 specification: 32 GT/s a lane, up to 128 GB/s over x16 both directions together, "
    "https://pcisig.com/specifications"
)
IEEE_100G = "IEEE 802.3ba-2010 (40 and 100 Gb/s Ethernet), https://standards.ieee.org/ieee/802.3ba/4280/"
IEEE_25G = "IEEE 802.3by-2016 (25 Gb/s Ethernet), https://standards.ieee.org/ieee/802.3by/5900/"
RAILS = (
    "one NIC a GPU, as NVIDIA DGX H100's compute fabric (8 single-port ConnectX-7 for 8 GPUs), "
    "https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html"
)
BITS = 8


@dataclass(frozen=True)
class SplitLink:
    """One link between a prefill instance and a decode instance: its line rate one way, a floor on the transfer's
    time (protocol overhead, latency and congestion are not counted)."""

    name: str
    one_way_bytes_per_s: float
    source: str
    # Each GPU of a tensor-parallel instance has a link of its own (NVLink, its PCIe x16, an RDMA NIC per GPU), so its
    # ranks send their KV heads at once; False: the instance's GPUs share one (a server's Ethernet NIC: an assumption).
    per_gpu: bool = True

    @property
    def links_words(self) -> str:
        return "one a GPU: each rank sends its own KV heads at once" if self.per_gpu else "one an instance, shared"


def _gbit(gbit_per_s: float) -> float:
    return gbit_per_s * GIGA / BITS


LINK_NAMES = ("NVLink", "PCIe Gen5", "400G RDMA", "200G RDMA", "100 GbE", "25 GbE")
NETWORK_LINKS = {
    "PCIe Gen5": SplitLink("PCIe Gen5 x16", PCIE_GEN5 / 2, PCIE_SIG + "; one way: half of 128 GB/s"),
    "400G RDMA": SplitLink("400 Gb/s RDMA (InfiniBand NDR / RoCE)", _gbit(400), CONNECTX7 + "; " + RAILS),
    "200G RDMA": SplitLink("200 Gb/s RDMA (NDR200 / RoCE)", _gbit(200), CONNECTX7 + "; " + RAILS),
    "100 GbE": SplitLink("100 Gb/s Ethernet", _gbit(100), IEEE_100G + "; " + CONNECTX7, per_gpu=False),
    "25 GbE": SplitLink("25 Gb/s Ethernet", _gbit(25), IEEE_25G + "; " + CONNECTX7, per_gpu=False),
}


def split_link(name: str, gpu: GpuSpec) -> SplitLink:
    """The link by name; NVLink is the GPU's own (its datasheet's figure, both directions, halved: one way)."""
    if name == "NVLink":
        row = INTERCONNECTS.get(gpu.name)
        if row is None or row.nvlink_bytes_per_s is None:
            raise BadInput(f"The {gpu.name} has no NVLink: pick one of {', '.join(LINK_NAMES[1:])}.")
        return SplitLink(f"NVLink ({gpu.name})", row.nvlink_bytes_per_s / 2, row.source + "; one way: half of it")
    if name not in NETWORK_LINKS:
        raise BadInput(f"Unknown link '{name}': use one of {', '.join(LINK_NAMES)}.")
    return NETWORK_LINKS[name]

"""How close a pass comes to this device's floor: a decode pass's bytes read over its measured time as a share of the
device's measured read bandwidth, a prefill's FLOPs over its time as a share of the measured matmul peak; the same
over a whole run; the published shares of real systems a speaker can set them beside; and the two peaks, measured and
datasheet, named.

Decode is bound by reading every weight (and the KV cache) once per token, so the share of the read bandwidth a pass
achieves is how close it came to that floor. The bytes and FLOPs are the roofline model's (modelled), the times
measured, the device figures measured by its microbenchmarks: each sentence says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from explorer.core.device_profile import DeviceProfile, Source
from explorer.core.gpu_specs import GPU_SPECS, GpuSpec
from explorer.core.trace import PassRecord, Phase, Trace
from explorer.core.units import human_bandwidth, human_bytes, human_flops, human_flops_per_s, percent, short_time


def _spec(name: str) -> GpuSpec:
    return next(spec for spec in GPU_SPECS if spec.name == name)


@dataclass(frozen=True)
class PassShare:
    """One pass (or a run's decode passes together) against the device's measured figure for its bound: bytes read
    against the read bandwidth for decode, FLOPs against the matmul peak for a prefill."""

    label: str  # "decode pass 7", "prefill (pass 0)", "the run's 28 decode passes"
    phase: Phase
    work: float  # modelled: bytes read (weights + KV reads) for decode, FLOPs for a prefill
    wall_s: float  # measured
    peak_per_s: float  # the device's figure it is a share of: B/s for decode, FLOP/s for a prefill
    peak_source: Source  # "measured" unless the device never measured it (an older trace)
    datasheet_per_s: float | None = None  # the datasheet's figure for the same, on a GPU the spec table knows

    @property
    def achieved_per_s(self) -> float:
        return self.work / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def share(self) -> float:
        """Achieved / the device's figure, not capped: over 1 means the figure was taken too low."""
        return self.achieved_per_s / self.peak_per_s

    @property
    def datasheet_share(self) -> float | None:
        return self.achieved_per_s / self.datasheet_per_s if self.datasheet_per_s else None

    @property
    def peak_name(self) -> str:
        """What the share is of, with its source: "this device's measured read bandwidth"."""
        what = "read bandwidth" if self.phase == "decode" else "matmul peak"
        return f"this device's {self.peak_source} {what}"

    def rate_text(self, per_s: float) -> str:
        return human_bandwidth(per_s) if self.phase == "decode" else human_flops_per_s(per_s)

    def brief(self) -> str:
        """'35.4 GB/s read, 62 % of the measured read bandwidth': short, for a line that already gives the time."""
        what = "read bandwidth" if self.phase == "decode" else "matmul peak"
        did = "read" if self.phase == "decode" else "computed"
        return f"{self.rate_text(self.achieved_per_s)} {did}, {percent(self.share)} of the {self.peak_source} {what}"

    def sentence(self) -> str:
        """'decode pass 7 read 538.1 MB in 15.2 ms: 35.4 GB/s, 62 % of this device's measured read bandwidth
        (57.1 GB/s)': bytes and FLOPs modelled, time measured."""
        did = f"read {human_bytes(self.work)}" if self.phase == "decode" else f"computed {human_flops(self.work)}"
        text = (
            f"{self.label} {did} (modelled) in {short_time(self.wall_s)} (measured): "
            f"{self.rate_text(self.achieved_per_s)}, {percent(self.share)} of {self.peak_name} "
            f"({self.rate_text(self.peak_per_s)})"
        )
        if self.datasheet_share is not None and self.datasheet_per_s is not None:
            text += f"; {percent(self.datasheet_share)} of the datasheet's {self.rate_text(self.datasheet_per_s)}"
        return text + "."


def pass_share(p: PassRecord, device: DeviceProfile) -> PassShare:
    """Pass `p` against the measured figure for its phase: a decode's bytes read, a prefill's FLOPs."""
    if p.is_prefill:
        peak, source = device.measured_compute_peak
        return PassShare(
            f"prefill (pass {p.index})", "prefill", p.cost.flops, p.wall_s, peak, source, device.datasheet_flops
        )
    peak, source = device.measured_read_peak
    return PassShare(
        f"decode pass {p.index}",
        "decode",
        p.cost.bytes_read,
        p.wall_s,
        peak,
        source,
        device.datasheet_bandwidth_bytes_per_s,
    )


def run_decode_share(trace: Trace) -> PassShare | None:
    """Every decode pass of every repeat together: all their bytes read over all their measured time (a time-weighted
    share, so a slow pass counts for its time), None without a decode pass."""
    decodes: Sequence[PassRecord] = trace.all_decodes
    if not decodes:
        return None
    peak, source = trace.device.measured_read_peak
    return PassShare(
        f"the run's {len(decodes):,} decode passes",
        "decode",
        sum(p.cost.bytes_read for p in decodes),
        sum(p.wall_s for p in decodes),
        peak,
        source,
        trace.device.datasheet_bandwidth_bytes_per_s,
    )


# --- what real systems publish ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PublishedShare:
    """A real system's decode at batch 1 as a share of its GPU's datasheet bandwidth, as its authors published it."""

    system: str
    setting: str  # the model, dtype, batch and GPU it was measured on
    share: float  # of the datasheet bandwidth (reported)
    how: str  # how the share is read off the publication
    source: str  # where it is published

    @property
    def label(self) -> str:
        return f"{self.system}: {percent(self.share)}"


GPT_FAST_BANDWIDTH_BYTES_PER_S = 1410.76e9  # reported: Llama-3.1-8B, Base (bf16), one A100-80GB, batch 1, 93.89 tok/s
GPT_FAST_GPU = _spec("A100 80GB SXM")  # 8xA100-80GB (SXM: a hybrid cube mesh, 330 W power limit)
PUBLISHED_SHARES: tuple[PublishedShare, ...] = (
    PublishedShare(
        "gpt-fast",
        "Llama-3.1-8B, bf16, batch 1, one A100-80GB (power-limited to 330 W)",
        GPT_FAST_BANDWIDTH_BYTES_PER_S / GPT_FAST_GPU.bandwidth_bytes_per_s,
        f"its reported {human_bandwidth(GPT_FAST_BANDWIDTH_BYTES_PER_S)} (93.89 tok/s) / the {GPT_FAST_GPU.name} "
        f"datasheet's {human_bandwidth(GPT_FAST_GPU.bandwidth_bytes_per_s)}",
        "https://github.com/pytorch-labs/gpt-fast#benchmarks",
    ),
    PublishedShare(
        "Hazy Research megakernel",
        "Llama-3.2-1B, bf16, batch 1, one H100 (vLLM and SGLang measured at 50 % or less)",
        0.78,
        "as published: 78 % of the H100's memory bandwidth",
        "https://hazyresearch.stanford.edu/blog/2025-05-27-no-bubbles",
    ),
)
REFERENCES_NOTE = (
    "The published shares are of each GPU's datasheet bandwidth; this run's are of its device's measured read "
    "bandwidth (a CPU has no datasheet), which no kernel exceeds by much: a share of the measured figure is the higher "
    "of the two."
)


# --- the two peaks, named ---------------------------------------------------------------------------------------------
def peaks_sentence(device: DeviceProfile) -> str:
    """Which peaks the roofline divides by, and on a GPU with a datasheet how far the measured ones are below it."""
    flops, flops_source = device.peak_flops, device.peak_flops_source
    read, read_source = device.effective_read_bandwidth_bytes_per_s, device.read_bandwidth_source
    text = (
        f"The roofline here divides by the {flops_source} matmul peak, {human_flops_per_s(flops)}, and the "
        f"{read_source or device.bandwidth_source} read bandwidth, {human_bandwidth(read)}."
    )
    below = []
    if device.datasheet_flops and device.measured_flops:
        below.append(
            f"the measured matmul peak ({human_flops_per_s(device.measured_flops)}) is "
            f"{percent(1 - device.measured_flops / device.datasheet_flops)} below the datasheet's "
            f"{human_flops_per_s(device.datasheet_flops)}"
        )
    if device.datasheet_bandwidth_bytes_per_s and device.measured_read_bandwidth_bytes_per_s:
        sheet = device.datasheet_bandwidth_bytes_per_s
        below.append(
            f"the measured read bandwidth ({human_bandwidth(device.measured_read_bandwidth_bytes_per_s)}) is "
            f"{percent(1 - device.measured_read_bandwidth_bytes_per_s / sheet)} below the "
            f"{device.datasheet_bandwidth_source or 'datasheet'} figure {human_bandwidth(sheet)}"
        )
    if below:
        return f"{text} On this GPU {' and '.join(below)}, so the same pass is a smaller share of the datasheet's."
    if device.kind == "cpu":
        return text + " A CPU has no datasheet here: its peaks are what its microbenchmarks achieved."
    return text


def peak_words(device: DeviceProfile) -> str:
    """'at the measured peaks' (or which peak each figure is), after a ratio to the roofline's floor."""
    read_source = device.read_bandwidth_source or device.bandwidth_source
    if device.peak_flops_source == read_source:
        return f"at the {read_source} peaks"
    return f"at the {device.peak_flops_source} matmul peak and the {read_source} read bandwidth"

"""At scale's "measure this here": a shipped config's what-if beside the same config measured on this device (its
shape model's run, random weights), the what-if recomputed for that run's own request so the two answer one question."""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from explorer.core.trace import Trace
from explorer.core.units import human_bytes, ms
from explorer.scale.calibrated import calibrate, efficiency_of
from explorer.scale.config import SHAPE_PREFIX, shipped_key
from explorer.scale.whatif import WhatIf, what_if

HERE_PROMPT = "The history of the printing press begins in"  # raw text: no chat template, the tokens are noise anyway
HERE_NEW_TOKENS = 8  # enough decode passes for a median, few enough for seconds on a CPU


def shape_name(result: WhatIf) -> str | None:
    """The shape model that measures the what-if's config here (`shape:KEY`); None for a folder or hub id, which
    has no shipped config to build."""
    key = shipped_key(result.scenario.arch.name)
    return None if key is None else f"{SHAPE_PREFIX}{key}"


@dataclass(frozen=True)
class HereRow:
    """One figure three ways: the what-if on its GPU, measured here, and this device's own modelled floor."""

    figure: str
    what_if: str  # modelled (or counted from config.json), on the what-if's GPU in its dtypes
    measured_here: str  # measured on this device: the run's passes, or counted from the built tensors
    floor_here: str  # modelled from this device's figures for the same pass; "" where there is no floor
    calibrated: str = ""  # the what-if x this run's measured / floor here (`explorer.scale.calibrated`); "" for counts


@dataclass(frozen=True)
class HereComparison:
    """The measured run and the what-if for its own request: batch 1, its prompt, the context of its median decode."""

    trace: Trace
    what_if: WhatIf
    rows: tuple[HereRow, ...]
    decode_factor: float  # measured decode step over its floor here (the median of each)

    @property
    def sentence(self) -> str:
        s, t = self.what_if.scenario, self.trace
        return (
            f"Here ({t.device.name}, {t.model.dtype}) a decode step of this shape took {self.decode_factor:.1f}x its "
            f"own floor; the what-if's floor for the same step on the {s.gpu.name} ({s.dtype}) is "
            f"{ms(self.what_if.decode.floor_s)}"
        )


def compare_here(result: WhatIf, trace: Trace) -> HereComparison:
    """The what-if for the run's request beside what the run measured; `trace` is a shape model's run."""
    decodes = [p for passes in trace.repeats for p in passes if not p.is_prefill]
    prefills = [passes[0] for passes in trace.repeats]
    context = int(median(p.cache_len_after for p in decodes)) if decodes else trace.prompt_len
    same = what_if(replace(result.scenario, batch=1, context=context, prompt_tokens=trace.prompt_len))
    s, m = same.scenario, trace.model
    held = trace.passes[-1]
    calibrated = calibrate(same, efficiency_of(trace))
    decode_wall = median(p.wall_s for p in decodes) if decodes else None
    decode_floor = median(p.cost.roofline_time_s for p in decodes) if decodes else None
    rows = (
        HereRow("parameters", f"{same.params:,} (config.json)", f"{m.params:,} (the built tensors)", ""),
        HereRow(
            "weights",
            f"{human_bytes(same.weight_bytes)} ({s.weights_storage})",
            f"{human_bytes(m.weight_bytes)} ({m.dtype})",
            "",
        ),
        HereRow(
            "KV cache per position",
            f"{human_bytes(same.kv_bytes_per_token)} ({s.kv_storage})",
            f"{human_bytes(held.kv_cache_bytes / held.cache_len_after)} ({m.dtype}, the cache's tensors)",
            "",
        ),
        HereRow(
            f"prefill of {trace.prompt_len} tokens",
            ms(same.prefill.floor_s),
            ms(median(p.wall_s for p in prefills)),
            ms(median(p.cost.roofline_time_s for p in prefills)),
            ms(calibrated.prefill_s),
        ),
        HereRow(
            f"decode step at context {context:,}, batch 1",
            ms(same.decode.floor_s),
            ms(decode_wall),
            ms(decode_floor),
            ms(calibrated.decode_step_s),
        ),
    )
    factor = decode_wall / decode_floor if decode_wall and decode_floor else float("nan")
    return HereComparison(trace=trace, what_if=same, rows=rows, decode_factor=factor)

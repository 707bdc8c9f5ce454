"""A/B benchmark in one process: HF `generate()` eager and on its static cache against the explorer's instrumented
loop, plus roofline limits.

Every side runs the same model, dtype, device, greedy decoding, KV cache on, the same fixed prompt and the same number
of new tokens (EOS ignored). The sides: HF `generate()` (a DynamicCache, eager); HF `generate(cache_implementation=
"static")`, which transformers compiles with CUDA graphs on CUDA (the first call per cache length compiles, for tens of
seconds: it is warmed up at the very length timed) and runs uncompiled on a CPU; the explorer on the request's decode
path (graph on CUDA by default). Prefill is the first forward's time alone, on every side by `explorer.core.timing`
(HF: its `Stopwatch` in forward hooks, removed after that forward so a compiled decode sees none; the explorer:
`timed`, the same clocks); ITL the gaps between consecutive generated tokens, host clock stamps once each token reached
the host (HF: a streamer). The order rotates each repeat to spread drift.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from explorer.checks.bench_config import BenchConfig as BenchConfig  # re-exported: its old home
from explorer.checks.greedy_reference import generate_tokens
from explorer.core.engine import CheckedRequest, Request, check_request, generate
from explorer.core.lab_progress import part_of, silent
from explorer.core.loaded_model import LoadedModel
from explorer.core.measure import prepare_device
from explorer.core.roofline import pass_flops
from explorer.core.timing import Stopwatch
from explorer.core.trace import DeviceProfile, JsonRecord, ModelInfo

# Public-domain text (the opening of "Pride and Prejudice"), repeated to reach the requested prompt length.
PROMPT_TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a "
    "wife. However little known the feelings or views of such a man may be on his first entering a neighbourhood, "
    "this truth is so well fixed in the minds of the surrounding families, that he is considered the rightful "
    "property of some one or other of their daughters. "
)


@dataclass(frozen=True)
class SideTiming:
    """One side's measurements for one repeat."""

    prefill_s: float
    itl_s: tuple[float, ...]
    token_ids: tuple[int, ...]


def median_prefill_s(side: tuple[SideTiming, ...]) -> float:
    return statistics.median(s.prefill_s for s in side)


def median_itl_s(side: tuple[SideTiming, ...]) -> float:
    """The median of every repeat's gaps pooled."""
    return statistics.median(gap for s in side for gap in s.itl_s)


@dataclass(frozen=True)
class BenchResult(JsonRecord):
    config: BenchConfig
    model: ModelInfo
    device: DeviceProfile
    hf: tuple[SideTiming, ...]  # HF generate(), one entry per repeat
    explorer: tuple[SideTiming, ...]  # the explorer's loop, one entry per repeat
    prefill_flops: int
    hf_static: tuple[SideTiming, ...] = ()  # HF generate(cache_implementation="static"), one entry per repeat
    decode_path: str = "eager"  # the explorer side's decode path
    hf_static_compiled: bool = False  # transformers compiled its static path (CUDA); uncompiled on a CPU

    @property
    def hf_prefill_s(self) -> float:
        return median_prefill_s(self.hf)

    @property
    def explorer_prefill_s(self) -> float:
        return median_prefill_s(self.explorer)

    @property
    def hf_itl_s(self) -> float:
        return median_itl_s(self.hf)

    @property
    def explorer_itl_s(self) -> float:
        return median_itl_s(self.explorer)

    @property
    def hf_static_prefill_s(self) -> float:
        return median_prefill_s(self.hf_static)

    @property
    def hf_static_itl_s(self) -> float:
        return median_itl_s(self.hf_static)

    @property
    def decode_limit_s(self) -> float:
        """Roofline floor of a decode pass: every weight byte read once at the device's read-only bandwidth."""
        return self.model.weight_bytes / self.device.effective_read_bandwidth_bytes_per_s

    @property
    def prefill_limit_s(self) -> float:
        """Roofline floor of the prefill pass if compute-bound: its FLOPs at the device's peak."""
        return self.prefill_flops / self.device.peak_flops

    @property
    def decode_bandwidth_share(self) -> float:
        """The explorer's decode as a share of the device's measured read bandwidth: the weights read per ITL (the
        floor's bytes; the KV read at this prompt is small beside them) over what the read-only stream achieved."""
        return self.model.weight_bytes / self.explorer_itl_s / self.device.measured_read_peak[0]

    @property
    def prefill_compute_share(self) -> float:
        """The explorer's prefill FLOP/s as a share of the device's measured matmul peak."""
        return self.prefill_flops / self.explorer_prefill_s / self.device.measured_compute_peak[0]

    @property
    def same_tokens(self) -> bool:
        return all(s.token_ids == self.hf[0].token_ids for s in self.hf + self.explorer + self.hf_static)

    def summary(self) -> dict[str, float | bool]:
        """The medians, their ratios and the limits by name, as the JSON file has them."""
        return {
            "hf_prefill_s": self.hf_prefill_s,
            "explorer_prefill_s": self.explorer_prefill_s,
            "prefill_ratio_explorer_over_hf": self.explorer_prefill_s / self.hf_prefill_s,
            "hf_itl_s": self.hf_itl_s,
            "explorer_itl_s": self.explorer_itl_s,
            "itl_ratio_explorer_over_hf": self.explorer_itl_s / self.hf_itl_s,
            "hf_static_prefill_s": self.hf_static_prefill_s,
            "hf_static_itl_s": self.hf_static_itl_s,
            "itl_ratio_explorer_over_hf_static": self.explorer_itl_s / self.hf_static_itl_s,
            "decode_limit_s": self.decode_limit_s,
            "prefill_limit_s": self.prefill_limit_s,
            "decode_bandwidth_share": self.decode_bandwidth_share,
            "prefill_compute_share": self.prefill_compute_share,
            "same_tokens": self.same_tokens,
        }

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


def fixed_prompt_ids(lm: LoadedModel, config: BenchConfig) -> list[int]:
    """The fixed prompt, `config.prompt_tokens` long; the config was checked against the context (`run_bench`)."""
    one = lm.tokenizer(PROMPT_TEXT, add_special_tokens=False)["input_ids"]
    return (one * (config.prompt_tokens // len(one) + 1))[: config.prompt_tokens]


class _TokenClock:
    """A generate() streamer that only timestamps each put(): the prompt first, then one call per new token."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.tokens: list[int] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())
        self.tokens.extend(int(t) for t in value.reshape(-1).tolist())

    def end(self) -> None:
        pass


def time_hf_generate(lm: LoadedModel, ids: list[int], new_tokens: int, cache: str | None = None) -> SideTiming:
    """HF generate() timed: its first forward (the prefill) by hooks that then remove themselves, its tokens by a
    streamer. `cache`: generate()'s `cache_implementation` (None: its default DynamicCache)."""
    forward_s: list[float] = []
    watch = Stopwatch(lm.torch_device)  # the explorer's passes are timed by the same clocks (`timing.timed`)

    def before(_module: torch.nn.Module, _args: object) -> None:
        watch.start()

    def after(_module: torch.nn.Module, _args: object, _output: object) -> None:
        forward_s.append(watch.stop())
        for handle in handles:  # only the prefill is timed here: a compiled decode must see no Python hooks
            handle.remove()

    clock = _TokenClock()
    handles = [lm.model.register_forward_pre_hook(before), lm.model.register_forward_hook(after)]
    try:
        token_ids = generate_tokens(lm, ids, new_tokens, streamer=clock, cache=cache)
    finally:
        for handle in handles:
            handle.remove()
    token_times = clock.times[1:]  # the first put() is the prompt
    return SideTiming(
        prefill_s=forward_s[0],
        itl_s=tuple(b - a for a, b in zip(token_times, token_times[1:])),
        token_ids=token_ids,
    )


def time_explorer(lm: LoadedModel, checked: CheckedRequest, device: DeviceProfile) -> SideTiming:
    trace = generate(lm, checked, device, warmed_up=True)
    return SideTiming(prefill_s=trace.prefill.wall_s, itl_s=trace.itl_s, token_ids=trace.generated_token_ids)


SIDES = ("hf", "hf_static", "explorer")


def run_bench(
    lm: LoadedModel, config: BenchConfig, on_progress: Callable[[float, str], None] | None = None
) -> BenchResult:
    """Check once, take the device figures and warm up once at the request's shapes (`prepare_device`), warm HF's two
    paths at the very shapes timed (the static one compiles there on CUDA), then the repeats, order rotating."""
    config.validate(lm.info.max_context)
    ids = fixed_prompt_ids(lm, config)
    request = Request(prompt="", max_new_tokens=config.new_tokens, stop_at_eos=False, decode_path=config.decode_path)
    checked = check_request(lm, request, ids)
    report = on_progress or silent
    device = prepare_device(lm, None, checked, progress=part_of(report, 0.0, 0.05))
    on_gpu = lm.torch_device.type == "cuda"  # transformers compiles its static path on CUDA, not on a CPU
    report(0.05, "warming up HF generate() (untimed)…")
    time_hf_generate(lm, ids, config.new_tokens)  # one untimed run at the timed shapes, not recorded
    report(
        0.07,
        "warming up HF generate(static cache): "
        + ("torch.compile with CUDA graphs, tens of seconds the first time…" if on_gpu else "uncompiled on a CPU…"),
    )
    time_hf_generate(lm, ids, config.new_tokens, "static")  # compiles once per cache length: this very length
    compiled = hasattr(lm.model, "_compiled_call")  # where transformers keeps the torch.compile'd forward
    sides: dict[str, list[SideTiming]] = {name: [] for name in SIDES}
    runners = {
        "hf": lambda: time_hf_generate(lm, ids, config.new_tokens),
        "hf_static": lambda: time_hf_generate(lm, ids, config.new_tokens, "static"),
        "explorer": lambda: time_explorer(lm, checked, device),
    }
    for r in range(config.repeats):
        order = SIDES[r % 3 :] + SIDES[: r % 3]
        for name in order:
            sides[name].append(runners[name]())
        done = (r + 1) / config.repeats
        report(0.1 + 0.9 * done, f"repeat {r + 1}/{config.repeats} done ({' then '.join(order)})")
    return BenchResult(
        config=config,
        model=lm.info,
        device=device,
        hf=tuple(sides["hf"]),
        explorer=tuple(sides["explorer"]),
        prefill_flops=pass_flops(lm.info, len(ids), len(ids)),
        hf_static=tuple(sides["hf_static"]),
        decode_path=checked.request.decode_path or "eager",
        hf_static_compiled=compiled,
    )

"""The data model every other part reads: a `Trace` of one request, made of one `PassRecord` per forward pass.

Frozen dataclasses, serialisable to JSON (with a `schema` version) and to CSV (one row per pass). Derived facts
(percentiles, overhead, arithmetic intensity) are properties, computed from the stored measurements. The model's and
the device's figures a trace carries live in `explorer.core.model_info` and `explorer.core.device_profile`, each
pass's modelled `Cost` in `explorer.core.roofline`, the statistics in `explorer.core.stats`; as parts of a Trace their
names are importable from here too.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from explorer.core.device_profile import DeviceProfile
from explorer.core.model_info import ExpertsInfo, ModelInfo
from explorer.core.roofline import CacheLayout, CacheOptions, Cost, pass_cost
from explorer.core.stats import ItlPercentiles, Spread, percentile

SCHEMA_VERSION = 2  # 2: repeats, token times on passes, the modelled cost nested

Phase = Literal["prefill", "decode"]
# How decode passes ran: transformers' growing DynamicCache, eagerly ("eager"); a StaticCache that reserves every
# position up front, eagerly ("static"); the same static cache with the decode step replayed as a captured CUDA graph
# ("graph", `explorer.core.graph_decode`).
DecodePath = Literal["eager", "static", "graph"]
DECODE_PATHS: tuple[DecodePath, ...] = ("eager", "static", "graph")


@dataclass(frozen=True)
class TopToken:
    token_id: int
    text: str
    prob: float  # softmax of the raw logits (temperature 1)


@dataclass(frozen=True)
class PassRecord:
    """One forward pass: what went in, what the cache held, how long it took, and the model's prediction for it."""

    index: int
    phase: Phase
    tokens_in: int  # query tokens computed by this pass: the prompt length for prefill, 1 for decode
    cache_len_before: int
    cache_len_after: int
    kv_cache_bytes: int  # measured: summed over the real cache tensors after the pass
    kv_layer_bytes: tuple[int, ...]  # measured: the same, layer by layer
    start_s: float  # measured: when the forward began, seconds after the request started
    wall_s: float  # measured: the forward alone
    token_s: float  # measured: when this pass's token was sampled, seconds after the request started
    cost: Cost  # modelled, with the cache layout it was counted for
    token_id: int  # the token sampled from this pass's last-position logits
    token_text: str
    top_tokens: tuple[TopToken, ...]
    input_token_ids: tuple[int, ...]  # the tokens this pass computed (all prompt tokens, or the one new token)
    batch_token_ids: tuple[int, ...] = ()  # the token each sequence of the batch sampled; (token_id,) at batch 1
    # measured from the routers' own outputs, per MoE layer in order: the distinct experts chosen for the pass's
    # tokens (every sequence of the batch), and their ids; () for a dense model
    experts_touched: tuple[int, ...] = ()
    experts_chosen: tuple[tuple[int, ...], ...] = ()
    # measured on a shared server: the CPU seconds other work used while this pass was timed (the server's other
    # threads, other processes: explorer.core.beside); None where nobody measured it (the CLI, older traces)
    beside_cpu_s: float | None = None

    @property
    def batch(self) -> int:
        return max(1, len(self.batch_token_ids))

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"

    @property
    def overhead_s(self) -> float:
        """Measured time the roofline model does not explain (dispatch, Python, kernel launches, small matrices)."""
        return max(0.0, self.wall_s - self.cost.roofline_time_s)

    @property
    def beats_model(self) -> bool:
        """Faster than the model's floor by more than 10 %: the device figures were too low for this pass."""
        return self.cost.roofline_time_s > PLAUSIBLE_SLACK * self.wall_s

    def recosted(self, model: ModelInfo, device: DeviceProfile) -> PassRecord:
        """The same measurements with the cost modelled afresh at `device`'s figures, for the cache layout and the
        experts it was counted with."""
        cost = pass_cost(
            model,
            device,
            self.tokens_in,
            self.cache_len_before,
            self.batch,
            self.experts_touched or None,
            cache_layout=self.cost.cache_layout,
            cache_capacity=self.cost.cache_capacity,
        )
        return replace(self, cost=cost)

    @property
    def disturbed(self) -> bool:
        """Other work used the CPU for over DISTURBED_SHARE of this pass's time while it was timed: its time may be
        high, and a page that shows it says so."""
        return self.beside_cpu_s is not None and self.beside_cpu_s > DISTURBED_SHARE * self.wall_s

    @property
    def achieved_flops_per_s(self) -> float:
        return self.cost.flops / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def achieved_bandwidth_bytes_per_s(self) -> float:
        return self.cost.bytes_moved / self.wall_s if self.wall_s > 0 else 0.0


PLAUSIBLE_SLACK = 1.1  # a measured pass may beat the modelled floor by this factor before the figures are re-taken
# Other work's CPU beside a timed pass, as a share of the pass's time, past which the pass is marked disturbed: a fifth
# of one core taken from the cores a pass runs on slows it by about a tenth on a 2-core machine.
DISTURBED_SHARE = 0.2


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 means greedy
    top_k: int | None = None
    seed: int | None = None

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0


class JsonRecord:
    """A result written as JSON for readers and tools: `to_dict()` is its content, `to_json()` the text."""

    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)


def ttft_of(passes: tuple[PassRecord, ...]) -> float:
    """Request start (before tokenizing) to the first token: the prefill's token time."""
    return passes[0].token_s


def itl_of(passes: tuple[PassRecord, ...]) -> tuple[float, ...]:
    """Gaps between consecutive tokens' times: one fewer than the tokens."""
    return tuple(b.token_s - a.token_s for a, b in zip(passes, passes[1:]))


def decode_rate_of(passes: tuple[PassRecord, ...]) -> float | None:
    gaps = itl_of(passes)
    return len(gaps) / sum(gaps) if gaps and sum(gaps) > 0 else None


@dataclass(frozen=True)
class RepeatFigures:
    """The request's headline figures read off one repeat's passes (all measured); shown with their spread."""

    ttft_s: float  # request start (before tokenizing) to the first token
    itl_p50_s: float | None  # None without a decode pass
    itl_p90_s: float | None
    itl_p99_s: float | None
    e2e_s: float  # request start to the last token
    decode_tokens_per_s: float | None  # decode tokens / sum of ITLs

    @classmethod
    def of(cls, passes: tuple[PassRecord, ...]) -> RepeatFigures:
        itl_s = itl_of(passes)
        return cls(
            ttft_s=ttft_of(passes),
            itl_p50_s=percentile(itl_s, 50),
            itl_p90_s=percentile(itl_s, 90),
            itl_p99_s=percentile(itl_s, 99),
            e2e_s=passes[-1].token_s,
            decode_tokens_per_s=decode_rate_of(passes),
        )


@dataclass(frozen=True)
class RepeatSpreads:
    """Each of the `RepeatFigures` over every repeat: median, min and max; None where no repeat has the figure."""

    ttft_s: Spread | None
    itl_p50_s: Spread | None
    itl_p90_s: Spread | None
    itl_p99_s: Spread | None
    e2e_s: Spread | None
    decode_tokens_per_s: Spread | None

    @classmethod
    def of(cls, repeats: Sequence[RepeatFigures]) -> RepeatSpreads:
        def spread(name: str) -> Spread | None:
            return Spread.of([v for figures in repeats if (v := getattr(figures, name)) is not None])

        return cls(**{f.name: spread(f.name) for f in fields(RepeatFigures)})


@dataclass(frozen=True)
class Trace(ItlPercentiles, JsonRecord):
    """One request, run once or repeated: tokenize, one prefill pass, then one decode pass per further token."""

    model: ModelInfo
    device: DeviceProfile
    prompt_text: str
    prompt_token_ids: tuple[int, ...]
    prompt_tokens_text: tuple[str, ...]  # one display string per prompt token
    chat_template_used: bool
    generated_text: str
    repeats: tuple[tuple[PassRecord, ...], ...]  # every repeat's passes, in the order they ran
    shown_repeat: int  # the repeat pages show pass by pass: the one with the median E2E
    warmup_ran: bool
    stop_reason: str  # "eos" | "max_new_tokens"
    max_new_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    created_at: str = ""  # ISO time of the run
    schema: int = SCHEMA_VERSION
    decode_path: DecodePath = "eager"  # which cache and decode step ran (older traces: eager)
    kv_cache_capacity: int | None = None  # positions a static cache reserved per layer; None: it grew with the run
    kv_cache_allocated_bytes: int | None = None  # measured: the static cache's tensors, reserved whole up front

    # --- the shown repeat ------------------------------------------------------------------------------------
    @property
    def passes(self) -> tuple[PassRecord, ...]:
        return self.repeats[self.shown_repeat]

    @property
    def prefill(self) -> PassRecord:
        return self.passes[0]

    @property
    def decodes(self) -> tuple[PassRecord, ...]:
        return self.passes[1:]

    @property
    def generated_token_ids(self) -> tuple[int, ...]:
        return tuple(p.token_id for p in self.passes)

    @property
    def new_tokens(self) -> int:
        return len(self.passes)

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def ttft_s(self) -> float:
        return ttft_of(self.passes)

    @property
    def itl_s(self) -> tuple[float, ...]:
        return itl_of(self.passes)

    @property
    def e2e_s(self) -> float:
        return self.passes[-1].token_s

    @property
    def decode_tokens_per_s(self) -> float | None:
        return decode_rate_of(self.passes)

    @property
    def final_kv_cache_bytes(self) -> int:
        """What the cache holds after the last pass (measured): the positions written, not what was reserved."""
        return self.passes[-1].kv_cache_bytes

    @property
    def allocated_kv_cache_bytes(self) -> int:
        """What the cache's tensors take (measured): a static cache reserves its capacity before the prefill; a
        growing cache takes what it holds."""
        return self.kv_cache_allocated_bytes if self.kv_cache_allocated_bytes is not None else self.final_kv_cache_bytes

    # --- across repeats --------------------------------------------------------------------------------------
    @property
    def repeat_count(self) -> int:
        return len(self.repeats)

    @property
    def spreads(self) -> RepeatSpreads:
        """Every headline figure taken per repeat, then its median, min and max (what the pages and the CLI show)."""
        return RepeatSpreads.of([RepeatFigures.of(passes) for passes in self.repeats])

    @property
    def all_itl_s(self) -> tuple[float, ...]:
        """Every repeat's gaps together: the ITL distribution over all repeats."""
        return tuple(gap for passes in self.repeats for gap in itl_of(passes))

    @property
    def all_decodes(self) -> tuple[PassRecord, ...]:
        """Every repeat's decode passes together."""
        return tuple(p for passes in self.repeats for p in passes[1:])

    @property
    def decode_median_s(self) -> float | None:
        """The decode median: the median measured time of every decode pass of every repeat (the mean of the two
        middle ones for an even count), None without a decode pass. The one definition every page that says "a
        decode pass took" reads (Cost, Latency, At scale, the Tour), so two pages never show two medians of one run."""
        return percentile([p.wall_s for p in self.all_decodes], 50)

    def pass_wall_spread(self, index: int) -> Spread:
        """Pass `index`'s measured time over the repeats that reached it."""
        spread = Spread.of([passes[index].wall_s for passes in self.repeats if index < len(passes)])
        assert spread is not None
        return spread

    def with_beside_cpu(self, beside_cpu_s: Sequence[float]) -> Trace:
        """The same run with what ran beside each pass (`PassRecord.beside_cpu_s`), given for every pass of every
        repeat in the order they ran; unchanged if the count does not match."""
        flat = [p for passes in self.repeats for p in passes]
        if len(flat) != len(beside_cpu_s):
            return self
        values = iter(beside_cpu_s)
        return replace(
            self, repeats=tuple(tuple(replace(p, beside_cpu_s=next(values)) for p in passes) for passes in self.repeats)
        )

    @property
    def disturbed_passes(self) -> tuple[PassRecord, ...]:
        """The shown repeat's passes timed while other work ran beside them (`PassRecord.disturbed`)."""
        return tuple(p for p in self.passes if p.disturbed)

    @property
    def cache_layout(self) -> CacheLayout:
        """The KV cache layout its passes were costed with."""
        return self.prefill.cost.cache_layout

    @property
    def cache_options(self) -> CacheOptions:
        """That layout as `pass_cost`'s keywords, to model other passes on the same cache."""
        return {"cache_layout": self.cache_layout, "cache_capacity": self.prefill.cost.cache_capacity}

    def recosted(self, device: DeviceProfile | None = None) -> Trace:
        """The same measurements with every pass's cost modelled afresh by today's conventions, at `device`'s figures
        (the trace's own by default): after the figures are re-taken, and for a trace written under an older
        convention (a recording, a JSON file), which is converted as it is read."""
        device = self.device if device is None else device
        repeats = tuple(tuple(p.recosted(self.model, device) for p in passes) for passes in self.repeats)
        return replace(self, device=device, repeats=repeats)

    @property
    def same_tokens_every_repeat(self) -> bool:
        return all(tuple(p.token_id for p in passes) == self.generated_token_ids for passes in self.repeats)

    # --- serialisation ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = {  # derived, for readers of the file; ignored on load
            "prompt_tokens": self.prompt_len,
            "new_tokens": self.new_tokens,
            "repeats": self.repeat_count,
            "shown_repeat": self.shown_repeat,
            **asdict(RepeatFigures.of(self.passes)),
            **{f"{name}_spread": spread for name, spread in asdict(self.spreads).items()},
            "final_kv_cache_bytes": self.final_kv_cache_bytes,
            "kv_cache_allocated_bytes": self.allocated_kv_cache_bytes,
            "decode_path": self.decode_path,
            "warmup_ran": self.warmup_ran,
        }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"trace schema {data.get('schema')!r} is not the supported {SCHEMA_VERSION}")
        known = {f.name for f in fields(cls)}
        rest = {k: v for k, v in data.items() if k in known}
        return cls(  # the modelled costs follow today's conventions: recosted from the measurements
            **{
                **rest,
                "model": model_from_dict(data["model"]),
                "device": DeviceProfile(**_tuples(data["device"], *DEVICE_SAMPLES)),
                "sampling": Sampling(**data["sampling"]),
                "prompt_token_ids": tuple(data["prompt_token_ids"]),
                "prompt_tokens_text": tuple(data["prompt_tokens_text"]),
                "repeats": tuple(tuple(pass_from_dict(p) for p in passes) for passes in data["repeats"]),
            }
        ).recosted()

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))

    def passes_csv(self) -> str:
        return passes_to_csv(self.passes)


DEVICE_SAMPLES = ("flops_samples", "bandwidth_samples", "read_bandwidth_samples")  # lists in JSON, tuples here


def _tuples(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: tuple(v) if k in keys and v is not None else v for k, v in data.items()}


def model_from_dict(m: dict[str, Any]) -> ModelInfo:
    experts = m.get("experts")
    return ModelInfo(
        **{
            **m,
            "layer_windows": tuple(m.get("layer_windows", ())),
            "experts": ExpertsInfo(**experts) if experts is not None else None,
        }
    )


def pass_from_dict(p: dict[str, Any]) -> PassRecord:
    return PassRecord(
        **{
            **p,
            "cost": Cost(**p["cost"]),
            "top_tokens": tuple(TopToken(**t) for t in p["top_tokens"]),
            "input_token_ids": tuple(p["input_token_ids"]),
            "kv_layer_bytes": tuple(p["kv_layer_bytes"]),
            "batch_token_ids": tuple(p.get("batch_token_ids", ())),
            "experts_touched": tuple(p.get("experts_touched", ())),
            "experts_chosen": tuple(tuple(ids) for ids in p.get("experts_chosen", ())),
        }
    )


PASS_CSV_DERIVED = ("overhead_s",)
COST_CSV_DERIVED = ("t_memory_s", "roofline_time_s", "arithmetic_intensity", "bound")


def passes_to_csv(passes: tuple[PassRecord, ...]) -> str:
    """One row per pass: every measured field, the modelled cost's fields flattened, and the derived columns."""
    pass_columns = [f.name for f in fields(PassRecord) if f.name != "cost"] + list(PASS_CSV_DERIVED)
    cost_columns = [f.name for f in fields(Cost)] + list(COST_CSV_DERIVED)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(pass_columns + cost_columns)
    for p in passes:
        row: list[Any] = []
        for name in pass_columns:
            value = getattr(p, name)
            if name == "top_tokens":
                value = json.dumps([asdict(t) for t in value], ensure_ascii=False)
            elif name in ("input_token_ids", "kv_layer_bytes", "batch_token_ids", "experts_touched"):
                value = " ".join(map(str, value))
            elif name == "experts_chosen":
                value = json.dumps(value)
            row.append(value)
        row += [getattr(p.cost, name) for name in cost_columns]
        writer.writerow(row)
    return out.getvalue()

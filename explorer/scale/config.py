"""A decoder's architecture read from its config.json alone: the configs shipped in the repo (offline), a local
folder, or a hub id (network); hosted servers offer only the shipped ones."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from explorer.core.errors import BadInput
from explorer.core.model_info import LayerWindows
from explorer.core.paths import MAX_CONFIG_BYTES, hub_reachable, read_small_file

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
INDEX_FILE = CONFIG_DIR / "index.json"
DEFAULT_MODEL = "llama-3.1-8b"
ALIASES = {"embedded": "smollm2-135m"}  # the explorer's own model, by the name the sidebar uses
SHAPE_PREFIX = "shape:"  # `--model shape:NAME`: a shipped config with random weights (explorer.models.shape_model)
# Decoders with a gated (SwiGLU/GeGLU) MLP or mixture of experts and RMSNorm: what `params.count_params` counts
# exactly (tests check each against transformers' own meta-device build).
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
MOE_TYPES = ("mixtral", "qwen3_moe", "gpt_oss")  # every (sparse) layer routes each token to k of n experts
SUPPORTED_TYPES = DENSE_TYPES + MOE_TYPES
QKV_BIAS_TYPES = ("qwen2",)  # Qwen2 always puts a bias on q, k and v (not on o); config.json does not say so
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "gemma3_text")  # q and k normalised per head: an RMSNorm of head_dim per layer
SINK_TYPES = ("gpt_oss",)  # one learned attention-sink logit per query head and layer
EXPERT_BIAS_TYPES = ("gpt_oss",)  # biases on the router and on every expert's projections
FOUR_NORM_TYPES = ("gemma3_text",)  # norms before and after both attention and the MLP: 4 per layer, not 2
SLIDING_WHEN_SET = ("mistral", "mixtral")  # `sliding_window` alone makes every layer sliding (Qwen: use_sliding_window)
MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# What transformers (5.23) builds when config.json leaves a key out; it differs by model type (tests check each).
KV_HEADS_DEFAULT = {"mistral": 8, "qwen2": 32, "qwen3": 32, "gemma3_text": 4, "mixtral": 8, "qwen3_moe": 4}
HEADS_DEFAULT = {"gemma3_text": 8}
HEAD_DIM_DEFAULT = {"qwen3": 128, "gemma3_text": 256, "qwen3_moe": 128, "gpt_oss": 64}  # the others: hidden / heads
VOCAB_DEFAULT = {"gemma3_text": 262_208}
MAX_CONTEXT_DEFAULT = {
    "llama": 2048,
    "mistral": 131_072,
    "qwen2": 32_768,
    "qwen3": 32_768,
    "gemma3_text": 131_072,
    "mixtral": 131_072,
    "qwen3_moe": 32_768,
    "gpt_oss": 131_072,
}
TIED_DEFAULT = {"gemma3_text": True}  # the others untied unless config.json says so
WINDOW_DEFAULT = {"gemma3_text": 4096, "gpt_oss": 128}
GEMMA3_PATTERN_DEFAULT = 6  # Gemma 3: five sliding layers, then one full, when config.json gives no layer_types
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class Architecture(LayerWindows):
    """The shapes that fix a dense decoder's parameter count, weight bytes and KV bytes, read from config.json."""

    name: str  # what was asked for: a shipped name, a folder or a hub id
    display_name: str
    model_type: str  # config.json's model_type, e.g. "llama"
    hidden_size: int
    intermediate_size: int  # the MLP's inner width (gate and up project to it, down back)
    layers: int
    heads: int  # query heads
    kv_heads: int  # key/value heads (< heads: grouped-query attention)
    head_dim: int
    vocab_size: int
    tied_embeddings: bool  # the LM head reuses the input table
    max_context: int  # max_position_embeddings
    stored_dtype: str  # the dtype the published weights are stored in (torch_dtype)
    qkv_bias: bool  # biases on the q, k and v projections
    o_bias: bool  # a bias on the output projection
    mlp_bias: bool
    qk_norm: bool  # a per-head RMSNorm on q and k
    source: str  # where the config came from: its public URL, a folder, or a hub id
    norms_per_layer: int = 2  # RMSNorms of hidden size in each layer
    attention_sinks: bool = False  # one learned sink logit per query head (gpt-oss)
    # Per layer: 0 for full attention, else the sliding window (in positions) that layer attends over.
    layer_windows: tuple[int, ...] = ()
    # Mixture of experts (0 experts: dense). A sparse layer's MLP is `n_experts` gated MLPs of width
    # `expert_intermediate_size`, of which the router picks `experts_per_token` for each token.
    n_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate_size: int = 0
    moe_layers: int = 0  # layers with experts; the others keep the dense MLP of `intermediate_size`
    expert_biases: bool = False  # biases on the router and on every expert's projections (gpt-oss)
    experts_shipped_as: str = ""  # how the published weights store the experts where not as `stored_dtype`:
    # "mxfp4" where config.json's quantization_config says so (gpt-oss); "" otherwise

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def sv_head_dim(self) -> int:
        """Values per head that P @ V multiplies by: head_dim in every architecture the what-if reads."""
        return self.head_dim


@dataclass(frozen=True)
class ShippedConfig:
    """One row of configs/index.json: a config.json kept in the repo and where it was published."""

    key: str
    file: str
    display_name: str
    hub_id: str
    source: str  # the public URL of the config.json
    published_params: int  # the total the hub shows for the weights; the tests check the count against it
    published_active_params: int | None = None  # a mixture of experts: the parameters one token uses, as published
    published_rel_tol: float = 0.0  # 0: the exact total; else how rounded the publisher's own figure is
    published_as: str = ""  # the publisher's words, where the figure is rounded
    published_source: str = ""  # where they said it
    published_truncated: bool = False  # the publisher cuts its figures to the digits shown rather than rounding them
    # (Qwen's card: 3,353,032,704 active is "3.3B", not 3.4B)
    # The publisher's active count leaves the input embedding table out (a token reads one row of it): gpt-oss's card
    # gives 3.61 B active for 20b, the exact 4,187,440,704 less its 579,133,440-parameter table.
    published_active_without_embeddings: bool = False

    def published_step(self, figure: int) -> int:
        """The place a rounded published figure stops at: 10^8 for "3.3B" (3,300,000,000), 1 for an exact one."""
        if not self.published_rel_tol:
            return 1
        step = 1
        while figure % (step * 10) == 0:
            step *= 10
        return step

    def rounding_text(self) -> str:
        """How the published figures relate to the exact counts, in words."""
        if not self.published_rel_tol:
            return "exact: the hub's count of the stored weights"
        step = self.published_step(self.published_params)
        how = "truncated (not rounded)" if self.published_truncated else "rounded"
        return f"{how} to {step / 1e9:g} B"

    def note(self, exact: int, published: int | None) -> str:
        """`published 3.3 B, truncated (not rounded) to 0.1 B: exact 3.353 B`; "" where nothing was published or the
        published figure is the exact count."""
        if published is None or not self.published_rel_tol:
            return ""
        return f"published {published / 1e9:g} B, {self.rounding_text()}: exact {exact / 1e9:.3f} B"

    def active_note(self, active: int, embeddings: int) -> str:
        """`note` for the active parameters; where the publisher leaves the input embedding table out of them, the
        exact count on that footing too (else a 16 % gap would look like a wrong count)."""
        note = self.note(active, self.published_active_params)
        if not note or not self.published_active_without_embeddings:
            return note
        return (
            f"{note} with the input embedding table, {(active - embeddings) / 1e9:.3f} B without it, as the publisher "
            "counts (a token reads one row of that table)"
        )

    def published_dict(self) -> dict[str, Any]:
        """The publisher's figures as published, for a what-if's JSON beside the exact counts (never in place of)."""
        return {
            "params": self.published_params,
            "active_params": self.published_active_params,
            "as": self.published_as or f"{self.published_params:,}",
            "rounding": self.rounding_text(),
            "active_params_counts_embeddings": None
            if self.published_active_params is None
            else not self.published_active_without_embeddings,
            "source": self.published_source or self.source,
        }


@cache
def shipped() -> Mapping[str, ShippedConfig]:
    """The shipped configs by key, in the index's order (read once, read-only: every session shares them)."""
    models = json.loads(INDEX_FILE.read_text(encoding="utf-8"))["models"]
    return MappingProxyType({key: ShippedConfig(key=key, **row) for key, row in models.items()})


def shipped_key(name: str) -> str | None:
    """The shipped config a name means (its key, an alias such as 'embedded', or its hub id), else None."""
    wanted = name.strip().lower()
    wanted = ALIASES.get(wanted, wanted)
    if wanted in shipped():
        return wanted
    return next((row.key for row in shipped().values() if row.hub_id.lower() == wanted), None)


def shape_key(name: str) -> str | None:
    """The shipped config a model name `shape:NAME` builds (NAME a key, an alias or a hub id of `shipped()`); None for
    any other model name. An unknown NAME is refused in one line naming the shipped ones."""
    text = name.strip()
    if not text.lower().startswith(SHAPE_PREFIX):
        return None
    key = shipped_key(text[len(SHAPE_PREFIX) :])
    if key is None:
        raise BadInput(f"'{text}' names no shipped config: use {SHAPE_PREFIX}NAME, NAME one of {', '.join(shipped())}.")
    return key


def shipped_config_json(key: str) -> dict[str, Any]:
    """A shipped config.json as published (a multimodal wrapper's text part: what decodes)."""
    data = json.loads((CONFIG_DIR / shipped()[key].file).read_text(encoding="utf-8"))
    text = data.get("text_config")
    return text if data.get("model_type") not in SUPPORTED_TYPES and isinstance(text, dict) else data


def load_architecture(name: str, hosted: bool = False) -> Architecture:
    """A shipped config by name; locally also a folder holding config.json (or the file itself) or a hub id.

    Hosted, anything else is refused by name alone, so a visitor's text never reaches the filesystem or the network.
    """
    key = shipped_key(name)
    if key is not None:
        row = shipped()[key]
        data = json.loads((CONFIG_DIR / row.file).read_text(encoding="utf-8"))
        return parse_config(data, key, row.display_name, row.source)
    if hosted:
        raise BadInput(f"This server's what-if offers only the shipped models: {', '.join(shipped())}.")
    name = name.strip()
    path = Path(os.path.expanduser(name))
    file = path / "config.json" if path.is_dir() else path
    if file.name == "config.json" and file.is_file():
        return parse_config(read_json(file, name), name, file.parent.name or name, str(file))
    if looks_like_path(name) or path.exists() or not HUB_ID.match(name):
        raise BadInput(
            f"'{name}' is neither a shipped model ({', '.join(shipped())}) nor a folder holding a config.json, "
            "nor a hub id."
        )
    return parse_config(fetch_hub_config(name), name, name, f"https://huggingface.co/{name}/blob/main/config.json")


def looks_like_path(name: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else that names a place on disk is a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def read_json(file: Path, name: str) -> dict[str, Any]:
    try:
        data = json.loads(read_small_file(file, MAX_CONFIG_BYTES, f"the config.json of '{name}'"))  # bounded, regular
    except (OSError, ValueError, RecursionError) as exc:
        raise BadInput(f"The config.json of '{name}' could not be read as JSON ({type(exc).__name__}).") from exc
    if not isinstance(data, dict):
        raise BadInput(f"The config.json of '{name}' is not a JSON object.")
    return data


def fetch_hub_config(repo_id: str) -> dict[str, Any]:
    """config.json alone from the hub cache, else from the hub; without network, one line that says what to do."""
    from huggingface_hub import hf_hub_download

    try:
        return read_json(Path(hf_hub_download(repo_id, "config.json", local_files_only=True)), repo_id)
    except Exception:  # not cached (the library raises several kinds): ask the hub, if it can be reached
        pass

    if not hub_reachable():
        raise BadInput(
            f"Model '{repo_id}' is not cached and the hub is unreachable: pick a shipped model, pass a folder with a "
            "config.json, or connect to a network."
        )
    try:
        return read_json(Path(hf_hub_download(repo_id, "config.json")), repo_id)
    except Exception as exc:  # not found, gated, or the network failed half-way
        raise BadInput(
            f"Could not fetch config.json of '{repo_id}' from the hub ({type(exc).__name__}): check the id "
            "(gated models need `hf auth login`)."
        ) from exc


def _whole(data: dict[str, Any], key: str, name: str, default: int | None = None) -> int:
    value = data.get(key)
    value = default if value is None else value  # a key written as null means the default too
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadInput(f"The config.json of '{name}' has no positive whole '{key}': not a decoder config it can count.")
    return value


def layer_windows(data: dict[str, Any], model_type: str, layers: int, name: str) -> tuple[int, ...]:
    """Each layer's sliding window (0: full attention), from `layer_types` where config.json lists them, else by the
    model type's own rule (Gemma 3: every sixth layer full; Mistral: every layer sliding when a window is set)."""
    window = data.get("sliding_window")
    window = WINDOW_DEFAULT.get(model_type) if window is None else window
    types = data.get("layer_types")
    if isinstance(types, list):
        if len(types) != layers or any(t not in ("full_attention", "sliding_attention") for t in types):
            raise BadInput(
                f"The config.json of '{name}' has layer_types the what-if cannot read: {layers} layers of "
                "'full_attention' or 'sliding_attention' expected."
            )
        sliding = [t == "sliding_attention" for t in types]
    elif model_type == "gemma3_text":
        pattern = _whole(data, "sliding_window_pattern", name, GEMMA3_PATTERN_DEFAULT)
        sliding = [(i + 1) % pattern != 0 for i in range(layers)]
    elif model_type in SLIDING_WHEN_SET or data.get("use_sliding_window"):
        sliding = [window is not None] * layers
    else:
        return ()
    if not any(sliding):
        return ()
    if not isinstance(window, int) or isinstance(window, bool) or window < 1:
        raise BadInput(f"The config.json of '{name}' has sliding layers but no positive whole 'sliding_window'.")
    return tuple(window if s else 0 for s in sliding)


def moe_fields(data: dict[str, Any], model_type: str, layers: int, name: str) -> dict[str, Any]:
    """The mixture-of-experts fields of `Architecture` (empty for a dense model type)."""
    if model_type not in MOE_TYPES:
        if any(data.get(key) for key in MOE_KEYS):
            raise BadInput(
                f"'{name}' is a '{model_type}' model with a mixture of experts: the what-if counts those of the types "
                f"{', '.join(MOE_TYPES)} only."
            )
        return {}
    experts_key = "num_experts" if model_type == "qwen3_moe" else "num_local_experts"
    width_key = "moe_intermediate_size" if model_type == "qwen3_moe" else "intermediate_size"
    dense_only = data.get("mlp_only_layers") or []
    step = _whole(data, "decoder_sparse_step", name, 1) if model_type == "qwen3_moe" else 1
    if not isinstance(dense_only, list):
        raise BadInput(f"The config.json of '{name}' has an 'mlp_only_layers' that is not a list.")
    n_experts = _whole(data, experts_key, name)
    k = _whole(data, "num_experts_per_tok", name)
    if k > n_experts:
        raise BadInput(f"'{name}' routes each token to {k} of {n_experts} experts: more than there are.")
    return {
        "n_experts": n_experts,
        "experts_per_token": k,
        "expert_intermediate_size": _whole(data, width_key, name),
        "moe_layers": sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0),
        "expert_biases": model_type in EXPERT_BIAS_TYPES,
        "experts_shipped_as": experts_shipped_as(data),
    }


def parse_config(data: dict[str, Any], name: str, display_name: str, source: str) -> Architecture:
    """The architecture of a decoder config; anything the counts would get wrong is refused in one line."""
    if data.get("model_type") not in SUPPORTED_TYPES and isinstance(data.get("text_config"), dict):
        data = data["text_config"]  # a multimodal wrapper: its language model is what decodes
    model_type = str(data.get("model_type", ""))
    if model_type not in SUPPORTED_TYPES:
        raise BadInput(
            f"'{name}' is a '{model_type or 'unknown'}' model: the what-if counts {', '.join(SUPPORTED_TYPES)} "
            "decoders exactly, and no others."
        )
    hidden = _whole(data, "hidden_size", name)
    heads = _whole(data, "num_attention_heads", name, HEADS_DEFAULT.get(model_type))
    kv_heads = _whole(data, "num_key_value_heads", name, KV_HEADS_DEFAULT.get(model_type, heads))
    if heads % kv_heads:
        raise BadInput(f"'{name}': {heads} query heads cannot share {kv_heads} KV heads evenly.")
    head_dim = _whole(data, "head_dim", name, HEAD_DIM_DEFAULT.get(model_type, hidden // heads))
    attention_bias = bool(data.get("attention_bias", False))
    layers = _whole(data, "num_hidden_layers", name)
    tied = data.get("tie_word_embeddings")
    return Architecture(
        name=name,
        display_name=display_name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=_whole(data, "intermediate_size", name),
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=_whole(data, "vocab_size", name, VOCAB_DEFAULT.get(model_type)),
        tied_embeddings=TIED_DEFAULT.get(model_type, False) if tied is None else bool(tied),
        max_context=_whole(data, "max_position_embeddings", name, MAX_CONTEXT_DEFAULT[model_type]),
        stored_dtype=str(data.get("torch_dtype") or data.get("dtype") or "float32"),
        qkv_bias=attention_bias or model_type in QKV_BIAS_TYPES,
        o_bias=attention_bias,
        mlp_bias=bool(data.get("mlp_bias", False)),
        qk_norm=model_type in QK_NORM_TYPES,
        source=source,
        norms_per_layer=4 if model_type in FOUR_NORM_TYPES else 2,
        attention_sinks=model_type in SINK_TYPES,
        layer_windows=layer_windows(data, model_type, layers, name),
        **moe_fields(data, model_type, layers, name),
    )


def experts_shipped_as(data: dict[str, Any]) -> str:
    """ "mxfp4" where config.json's quantization_config stores the experts in MXFP4 (gpt-oss: every weight but
    attention, the router, the embedding and the LM head, which its `modules_to_not_convert` name); else ""."""
    quantization = data.get("quantization_config")
    method = quantization.get("quant_method") if isinstance(quantization, dict) else None
    return "mxfp4" if method == "mxfp4" else ""

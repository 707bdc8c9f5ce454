"""Loading a causal LM (the embedded SmolLM2 GGUF, a hub id, a local folder or a shipped config's shape with random
weights) and describing it as a ModelInfo."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from explorer.core.errors import BadInput, out_of_memory_as_run_failed
from explorer.core.loaded_model import (
    DTYPES,
    LoadedModel,
    attention_kernel,
    expert_linear_params,
    experts_info,
    latent_attention,
    layer_windows,
)
from explorer.core.model_info import DEVICES
from explorer.core.paths import EMBEDDED, EMBEDDED_GGUF, embedded_folder, embedded_gguf_folder, hub_reachable
from explorer.core.trace import ModelInfo
from explorer.models import shape_model
from explorer.models.model_config import check_model_config
from explorer.scale.config import shape_key

EMBEDDED_DISPLAY_NAME = "SmolLM2-135M-Instruct (embedded GGUF Q4_1, dequantized)"


Progress = Callable[[float, str], None]  # (fraction done 0..1, what is happening)


def resolve_device(device: str) -> torch.device:
    if device not in DEVICES:
        raise BadInput(f"Unknown device '{device}': use one of {', '.join(DEVICES)}.")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("CUDA requested but no GPU is available: use --device cpu or auto.")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype not in DTYPES:
        raise BadInput(f"Unknown dtype '{dtype}': use one of {', '.join(DTYPES)}.")
    if dtype == "float16" and device.type != "cuda":
        raise BadInput("float16 runs only on CUDA here (CPU float16 matmuls are emulated and slow): use bfloat16.")
    return DTYPES[dtype]


def ensure_embedded_converted(on_progress: Progress | None = None) -> Path:
    """Dequantize the GGUF once into a safetensors folder; later loads read that folder (a second or two)."""
    target = embedded_folder()
    if (target / "config.json").exists() and (target / "model.safetensors").exists():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    folder = embedded_gguf_folder()
    if on_progress:
        on_progress(0.05, "First run: reading the embedded GGUF tokenizer…")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)
    if on_progress:
        on_progress(0.25, "First run: dequantizing the GGUF weights to float32 (~15 s, once)…")
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=EMBEDDED_GGUF, quantization_config=GgufConfig(dequantize=True)
    )
    if on_progress:
        # No path: the app shows this line to visitors, who must never learn the server's folders.
        on_progress(0.75, "First run: saving a safetensors copy in the cache folder (once)…")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Write beside the target and rename, so a concurrent or interrupted conversion never leaves half a folder.
    staging = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            staging.rename(target)
        except OSError:  # another process finished first
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _looks_like_path(name: str) -> bool:
    """Hub ids are `name` or `org/name`; anything else that names a place on disk is a folder."""
    return name.startswith((".", "/", "~")) or name.count("/") > 1 or "\\" in name


def check_hub_model_available(name: str) -> None:
    """A hub id must be in the local cache or the hub must answer; otherwise say so at once."""
    from transformers import AutoConfig

    try:
        AutoConfig.from_pretrained(name, local_files_only=True, trust_remote_code=False)
        return
    except (OSError, ValueError):
        pass
    if not hub_reachable():
        raise BadInput(
            f"Model '{name}' not found locally and the hub is unreachable: pass a local folder or connect to a network."
        )


SDPA_REFUSED = "scaled_dot_product_attention"  # in transformers' ValueError for an architecture without SDPA support


def from_pretrained_fastest_attention(source: str | Path, dtype: torch.dtype) -> nn.Module:
    """The model on PyTorch's fused attention (SDPA) where its architecture supports it, else on the eager kernel
    (Gemma 2 and gpt-oss refuse SDPA in transformers 5). Safetensors only, never remote code. Which one ran is read
    back from the model (`model_shape.attention_kernel`) into the run's header and JSON."""
    from transformers import AutoModelForCausalLM

    return fastest_attention(
        lambda attention: AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, use_safetensors=True, trust_remote_code=False, attn_implementation=attention
        )
    )


def fastest_attention(load: Callable[[str], nn.Module]) -> nn.Module:
    """`load(attention)` on "sdpa", or on "eager" where transformers refuses SDPA for the architecture."""
    try:
        return load("sdpa")
    except ValueError as exc:
        if SDPA_REFUSED not in str(exc):
            raise
        return load("eager")


def saved_architecture(source: str | Path) -> str | None:
    """The architecture a local save_pretrained folder's config.json names, None for a hub id or an unreadable file."""
    import json

    config = Path(source) / "config.json"
    if not isinstance(source, Path) or not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    names = data.get("architectures")
    name = names[0] if isinstance(names, list) and names and isinstance(names[0], str) else data.get("model_type")
    return name[:80] if isinstance(name, str) else None


def _load_error(name: str, exc: Exception, source: str | Path | None = None) -> BadInput:
    """Translate transformers/hub failures into one line that names the model and what to do."""
    text = str(exc)
    kind = type(exc).__name__
    if "safetensors" in text.lower() or "model.safetensors" in text:
        return BadInput(
            f"Model '{name}' has no safetensors weights: only safetensors are loaded (pickle files can run code)."
        )
    if kind in ("RepositoryNotFoundError", "GatedRepoError") or "is not a valid model identifier" in text:
        return BadInput(f"Model '{name}' not found on the Hugging Face hub (or gated): check the id or pass a folder.")
    if kind in ("LocalEntryNotFoundError", "OfflineModeIsEnabled") or "connect" in text.lower() or "offline" in text:
        return BadInput(
            f"Model '{name}' not found locally and the hub is unreachable: pass a local folder or connect to a network."
        )
    if "Unrecognized" in text or "does not recognize" in text or kind == "KeyError":
        return BadInput(f"Model '{name}' is not a supported causal LM architecture (transformers said: {kind}).")
    architecture = saved_architecture(source) if source is not None else None
    if architecture is not None and (Path(source) / "config.json").is_file():
        # A real save_pretrained folder that transformers cannot run: name the architecture, never blame the folder.
        import transformers

        return BadInput(
            f"Model '{name}' ({architecture}) could not be run by transformers {transformers.__version__} ({kind}): "
            "try another dtype or device, or a transformers release that supports this architecture."
        )
    # Not the library's text: it can quote file contents or paths, and cut at a length it ends mid-sentence.
    return BadInput(
        f"Model '{name}' could not be loaded ({kind}): pass a folder made by save_pretrained (config.json, tokenizer "
        "files, safetensors weights) or a hub id."
    )


def no_model_folder(name: str) -> BadInput:
    """One answer for a missing folder and for a folder that holds no model (`/etc`), so that the answer never tells
    what exists on the machine."""
    return BadInput(
        f"Model folder '{name}' does not exist or holds no model (no config.json): pass a folder made by "
        "save_pretrained, or a hub id."
    )


def is_model_folder(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))


def count_weights(model: nn.Module) -> tuple[int, int, int, int, int, bool]:
    """(params, weight_bytes, matmul_params, lm_head_params, input_embedding_params, tied) from the loaded tensors."""
    params = 0
    weight_bytes = 0
    for p in model.parameters():  # parameters() yields a tied tensor once
        params += p.numel()
        weight_bytes += p.numel() * p.element_size()
    output = model.get_output_embeddings()
    inputs = model.get_input_embeddings()
    tied = output is not None and output.weight.data_ptr() == inputs.weight.data_ptr()
    from transformers.pytorch_utils import Conv1D  # GPT-2 style projections

    matmul_params = sum(
        m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear | Conv1D) and m is not output
    ) - expert_linear_params(model)
    lm_head_params = output.weight.numel() if output is not None else 0
    return params, weight_bytes, matmul_params, lm_head_params, inputs.weight.numel(), tied


def describe(model: nn.Module, name: str, display_name: str, device: torch.device) -> ModelInfo:
    config = model.config.get_text_config()
    heads = config.num_attention_heads
    hidden = config.hidden_size
    params, weight_bytes, matmul_params, lm_head_params, embed_params, tied = count_weights(model)
    dtype = next(model.parameters()).dtype
    max_context = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 2048
    experts = experts_info(model)
    mla = latent_attention(model)
    expand_params = mla.expand_params if mla else 0
    expert_params_not_used = (
        0
        if experts is None
        else (experts.n_experts - experts.experts_per_token) * (experts.moe_layers * experts.expert_params)
    )
    return ModelInfo(
        name=name,
        display_name=display_name,
        architecture=type(model).__name__,
        params=params,
        layers=config.num_hidden_layers,
        heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads,
        # MLA: QKᵀ's width per head (its config's head_dim is only the rotary part)
        head_dim=mla.qk_head_dim if mla else getattr(config, "head_dim", None) or hidden // heads,
        hidden_size=hidden,
        vocab_size=config.vocab_size,
        dtype=str(dtype).removeprefix("torch."),
        bytes_per_element=torch.empty((), dtype=dtype).element_size(),
        weight_bytes=weight_bytes,
        matmul_params=matmul_params - config.num_hidden_layers * expand_params,  # kv_b_proj runs on the cache
        lm_head_params=lm_head_params,
        input_embedding_params=embed_params,
        tied_embeddings=tied,
        max_context=int(max_context),
        device=device.type,
        attn_implementation=attention_kernel(model),
        layer_windows=layer_windows(model),
        experts=experts,
        active_params_per_token=params - expert_params_not_used,
        kv_cache_key_width=mla.cache_key_width if mla else 0,
        kv_cache_value_width=mla.cache_value_width if mla else 0,
        v_head_dim=mla.v_head_dim if mla else 0,
        kv_expand_params=expand_params,
    )


def eos_ids(model: nn.Module, tokenizer: object) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None), tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def load_model(
    name: str = EMBEDDED, device: str = "auto", dtype: str = "float32", on_progress: Progress | None = None
) -> LoadedModel:
    """Load a model for instrumented runs. Safetensors only, never remote code."""
    from transformers import AutoTokenizer

    started = time.perf_counter()
    name = (name or "").strip() or EMBEDDED
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    key = shape_key(name)
    if key is not None:  # random weights in a shipped config's shape: nothing read from disk or the hub
        return load_shape(key, name, torch_device, torch_dtype, on_progress)
    if name == EMBEDDED:
        source, display_name = ensure_embedded_converted(on_progress), EMBEDDED_DISPLAY_NAME
    else:
        expanded = os.path.expanduser(name)
        if is_model_folder(expanded):
            check_model_config(expanded)  # before transformers reads it: bounded, each size in range (model_config.py)
            source, display_name = Path(expanded), os.path.basename(os.path.normpath(expanded))
        elif _looks_like_path(name) or os.path.exists(expanded):
            raise no_model_folder(name)
        else:
            check_hub_model_available(name)
            source, display_name = name, name
    if on_progress:
        on_progress(0.85, f"Loading {display_name} ({dtype}) onto {torch_device.type}…")
    try:
        with out_of_memory_as_run_failed(
            f"loading '{name}' onto {torch_device.type} (try bfloat16 or a smaller model)"
        ):
            tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
            model = from_pretrained_fastest_attention(source, torch_dtype)
            model.to(torch_device)
    except (OSError, ValueError, KeyError) as exc:
        raise _load_error(name, exc, source) from exc
    model.eval()
    info = describe(model, name, display_name, torch_device)
    load_s = time.perf_counter() - started
    if on_progress:
        on_progress(1.0, f"Loaded {display_name}: {info.params / 1e6:.0f} M parameters in {load_s:.1f} s.")
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        info=info,
        torch_device=torch_device,
        eos_token_ids=eos_ids(model, tokenizer),
        load_s=load_s,
    )


def load_shape(
    key: str, name: str, torch_device: torch.device, torch_dtype: torch.dtype, on_progress: Progress | None
) -> LoadedModel:
    """`shape:NAME` (explorer.models.shape_model): refused in one line before any allocation when its weights and a
    margin exceed the device's free memory; else built on the device with seeded random weights and the embedded
    tokenizer. Its EOS is never honoured: a random model's end-of-text is noise, so a shape run always makes its max
    new tokens."""
    started = time.perf_counter()
    shape_model.check_fits(shape_model.memory_fit(key, torch_dtype, torch_device), name, torch_dtype)
    if on_progress:
        on_progress(0.1, f"Reading the embedded tokenizer for {name}…")
    tokenizer, tokenizer_note = shape_model.embedded_tokenizer()
    display_name = shape_model.display_name(key, tokenizer_note)
    if on_progress:
        on_progress(0.4, f"Building {display_name} ({str(torch_dtype).removeprefix('torch.')}) on {torch_device.type}…")
    with out_of_memory_as_run_failed(f"building '{name}' on {torch_device.type} (try bfloat16 or a smaller shape)"):
        model = fastest_attention(lambda attention: shape_model.build_model(key, torch_device, torch_dtype, attention))
    model.eval()
    info = replace(describe(model, name, display_name, torch_device), random_weights=True)
    load_s = time.perf_counter() - started
    if on_progress:
        on_progress(1.0, f"Built {display_name}: {info.params / 1e6:.0f} M parameters in {load_s:.1f} s.")
    return LoadedModel(
        model=model,
        tokenizer=shape_model.ShapeTokenizer(tokenizer, info.vocab_size),
        info=info,
        torch_device=torch_device,
        eos_token_ids=frozenset(),
        load_s=load_s,
    )

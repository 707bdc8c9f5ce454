"""Loading: the embedded model's cache, local folders (the hub code path), and one-line errors for bad models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from explorer.core.errors import BadInput
from explorer.core.paths import EMBEDDED_CACHE_NAME, cache_dir
from explorer.models.loading import load_model, resolve_device, resolve_dtype


def test_cache_dir_respects_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("EXPLORER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "prefill-decode-explorer"
    monkeypatch.setenv("EXPLORER_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


def test_embedded_model_is_cached_as_safetensors(real_lm: object) -> None:
    folder = cache_dir() / EMBEDDED_CACHE_NAME
    assert (folder / "model.safetensors").exists() and (folder / "config.json").exists()
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 30


def test_dtype_and_device_rules() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    with pytest.raises(BadInput, match="float16 runs only on CUDA"):
        resolve_dtype("float16", cpu)
    with pytest.raises(BadInput, match="Unknown dtype"):
        resolve_dtype("float8", cpu)
    with pytest.raises(BadInput, match="Unknown device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        assert resolve_device("auto") == cpu
        with pytest.raises(BadInput, match="no GPU"):
            resolve_device("cuda")


def test_local_folder_loads_in_bfloat16(tiny_llama_dir: Path) -> None:
    lm = load_model(str(tiny_llama_dir), device="cpu", dtype="bfloat16")
    assert lm.info.dtype == "bfloat16" and lm.info.bytes_per_element == 2
    assert lm.info.weight_bytes == lm.info.params * 2
    assert lm.has_chat_template


def test_missing_folder_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="does not exist") as err:
        load_model(str(tmp_path / "nope"), device="cpu")
    assert "\n" not in str(err.value)


def test_unreachable_hub_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(BadInput, match="not found locally and the hub is unreachable"):
        load_model("nosuch-org/nosuch-model", device="cpu")


def test_pickle_only_folder_is_refused(tiny_llama_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "pickled"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tiny_llama_dir / name).read_bytes())
    (folder / "pytorch_model.bin").write_bytes(b"not loaded: pickles are never read")
    with pytest.raises(BadInput, match="no safetensors weights"):
        load_model(str(folder), device="cpu")


def test_unsupported_architecture_is_refused(tiny_llama_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "vision"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 32}))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((tiny_llama_dir / name).read_bytes())
    with pytest.raises(BadInput, match="not a supported causal LM"):
        load_model(str(folder), device="cpu")

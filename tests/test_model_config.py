"""A local model's config.json checked before transformers reads it (`explorer.models.model_config`); the CLI's and the
app's refusals of whole folders are in tests/test_cli_inputs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.core.errors import BadInput
from explorer.models.model_config import MAX_DEPTH, check_config, check_model_config

GOOD = {"vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "head_dim": None}


def folder_with(tmp_path: Path, text: str) -> str:
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    return str(tmp_path)


def test_a_good_config_and_names_that_are_no_folder_pass(tmp_path: Path) -> None:
    check_config(GOOD, "m")  # an optional size may be null: transformers derives it
    check_model_config(folder_with(tmp_path, json.dumps(GOOD)))
    check_model_config("embedded")
    check_model_config("someone/a-hub-id")  # known only once downloaded


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"vocab_size": 10**12}, "vocab_size: must be a whole number from 1 to 16,777,216, not 1000000000000"),
        ({"hidden_size": 64.0}, "hidden_size: must be a whole number"),  # a float is not a size
        ({"num_hidden_layers": True}, "num_hidden_layers: must be a whole number"),  # nor a boolean
        ({"text_config": {"num_attention_heads": 0}}, "text_config.num_attention_heads: must be a whole number"),
    ],
)
def test_a_size_out_of_range_is_one_line_naming_its_field(change: dict[str, object], words: str) -> None:
    with pytest.raises(BadInput, match=words.replace(".", r"\.")) as refused:
        check_config(GOOD | change, "m")
    assert str(refused.value).startswith("Model 'm': config.json: ") and "\n" not in str(refused.value)


def test_a_file_that_is_no_config_is_refused_before_transformers(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="must be a JSON object, not list"):
        check_model_config(folder_with(tmp_path, "[]"))
    with pytest.raises(BadInput, match="is not JSON"):
        check_model_config(folder_with(tmp_path, "{"))
    with pytest.raises(BadInput, match=f"nests deeper than {MAX_DEPTH} levels"):
        check_model_config(folder_with(tmp_path, json.dumps(GOOD | {"x": [[[[[[[[[1]]]]]]]]]})))

"""The tiny model builder: a standard Hugging Face checkpoint, deterministic, built offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dressage.model import BUILTIN_TINY, build_tiny_model, resolve_model_source


def test_build_is_deterministic_per_seed(tmp_path: Path) -> None:
    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    c = build_tiny_model(tmp_path / "c", seed=4)
    weights = [(p / "model.safetensors").read_bytes() for p in (a, b, c)]
    assert weights[0] == weights[1]
    assert weights[0] != weights[2]
    config = json.loads((a / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["vocab_size"] < 128


def test_transformers_loads_model_tokenizer_and_chat_template(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    path = build_tiny_model(tmp_path / "m")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    text = "What is 12*3?\nAnswer: 36."
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tokenizer.decode(ids) == text
    assert tokenizer.unk_token_id not in ids
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+1="}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert rendered == "<|system|>be brief<|end|>\n<|user|>1+1=<|end|>\n<|assistant|>"
    assert tokenizer.eos_token == "<|end|>"
    assert {tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id} == {0, 1, 2}
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.vocab_size == len(tokenizer)


def test_resolve_builtin_builds_once_and_paths_pass_through(tmp_path: Path) -> None:
    first = resolve_model_source(BUILTIN_TINY, tmp_path)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = resolve_model_source(BUILTIN_TINY, tmp_path)
    assert again == first
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    assert resolve_model_source("builtin:tiny@7", tmp_path) != first
    assert resolve_model_source("/some/ckpt", tmp_path) == Path("/some/ckpt")
    with pytest.raises(ValueError, match="unknown builtin"):
        resolve_model_source("builtin:huge", tmp_path)

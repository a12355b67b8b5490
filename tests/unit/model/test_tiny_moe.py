"""`builtin:tiny-moe`: a Qwen3-MoE checkpoint built offline that transformers and the embedded
engine load alike, with a router that spreads tokens over its experts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dressage.engine.embedded.model import full_logits, load_weights, new_routes
from dressage.model import BUILTIN_TINY_MOE, build_tiny_moe_model, resolve_model_source
from dressage.model.tokenizer import build_tokenizer_files

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_moe_model(tmp_path_factory.mktemp("tiny-moe"))


def test_the_same_seed_builds_the_same_bytes(checkpoint: Path, tmp_path: Path) -> None:
    again = build_tiny_moe_model(tmp_path / "again")
    other = build_tiny_moe_model(tmp_path / "other", seed=1)
    weights = (checkpoint / "model.safetensors").read_bytes()
    assert (again / "model.safetensors").read_bytes() == weights
    assert (other / "model.safetensors").read_bytes() != weights


def test_transformers_loads_it_as_qwen3_moe_and_agrees_with_the_engine(checkpoint: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert model.config.num_experts == 8
    assert model.config.num_experts_per_tok == 2
    tokens = list(range(5, 45))
    with torch.no_grad():
        reference = model(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(
        full_logits(load_weights(checkpoint), tokens), reference, atol=1e-4, rtol=0
    )


def test_routing_uses_every_expert(checkpoint: Path) -> None:
    weights = load_weights(checkpoint)
    tokens = list(range(5, 85))
    routes = new_routes(weights.shape, len(tokens))
    full_logits(weights, tokens, routes)
    for layer in range(weights.shape.num_layers):
        counts = torch.bincount(routes[:, layer].flatten().long(), minlength=8)
        assert counts.min() > 0, f"layer {layer}: {counts.tolist()}"
        assert counts.max() < 0.5 * counts.sum(), f"layer {layer}: {counts.tolist()}"


def test_it_shares_the_tiny_models_tokenizer(checkpoint: Path, tmp_path: Path) -> None:
    build_tokenizer_files(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (checkpoint / name).read_bytes() == (tmp_path / name).read_bytes()


def test_builtin_source_builds_once_into_the_cache(tmp_path: Path) -> None:
    first = resolve_model_source(BUILTIN_TINY_MOE, tmp_path)
    assert first.name.startswith("tiny-moe-seed0-")
    assert resolve_model_source(BUILTIN_TINY_MOE, tmp_path) == first
    assert resolve_model_source(f"{BUILTIN_TINY_MOE}@2", tmp_path).name.startswith(
        "tiny-moe-seed2-"
    )
    with pytest.raises(ValueError, match="known: builtin:tiny, builtin:tiny-moe"):
        resolve_model_source("builtin:huge", tmp_path)

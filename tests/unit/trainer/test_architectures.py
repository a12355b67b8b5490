"""The trainer trains every family the embedded engine serves, and what it publishes is what
the engine then computes: one GRPO step on tiny random transformers models of the Qwen3 and
MoE families, then the published tensors (checkpoint names) loaded into the engine's decoder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from dressage_testkit.trainer import synthetic_batch

from dressage.engine.embedded.model import (
    ModelShape,
    full_logits,
    load_weights,
    parameter_shapes,
    replace_weights,
)
from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy

transformers = pytest.importorskip("transformers")
torch.set_num_threads(1)

COMMON: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
}
MOE: dict[str, Any] = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}
CONFIGS = {
    "qwen3": lambda: transformers.Qwen3Config(**COMMON, head_dim=16, tie_word_embeddings=True),
    "qwen3-moe": lambda: transformers.Qwen3MoeConfig(**COMMON, **MOE, head_dim=16),
    "qwen2-moe": lambda: transformers.Qwen2MoeConfig(
        **COMMON, **MOE, shared_expert_intermediate_size=24, mlp_only_layers=[1]
    ),
}


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_a_trained_step_publishes_what_the_engine_serves(family: str, tmp_path: Path) -> None:
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(CONFIGS[family]()).save_pretrained(tmp_path)
    trainer = GRPOTrainer(
        load_policy(tmp_path, torch.device("cpu")), TrainerConfig(learning_rate=1e-2)
    )
    before = load_weights(tmp_path)
    figures = trainer.train_step(synthetic_batch(1))
    assert figures["grad_norm"] > 0
    published = dict(trainer.iter_publishable())
    expected = parameter_shapes(ModelShape.from_checkpoint(tmp_path))
    if trainer.module.config.tie_word_embeddings:
        expected.pop("lm_head.weight")
        published.pop("lm_head.weight", None)
    assert {name: tuple(t.shape) for name, t in published.items()} == expected
    served = replace_weights(before, published)
    tokens = [3, 17, 42, 5, 61, 8, 29]
    with torch.no_grad():
        trained = trainer.module(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(full_logits(served, tokens), trained, atol=1e-4, rtol=0)
    assert not torch.allclose(full_logits(before, tokens), trained, atol=1e-3)

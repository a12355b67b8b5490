"""Each architecture the embedded engine serves matches `transformers`' own forward.

Tiny random configs of every family (`dressage.engine.embedded.model.shape`), written by
`save_pretrained` and read back by `load_weights`: float32 logits agree within 1e-4, and for
the MoE families every token is routed to the same top-k experts in every sparse layer (read
from transformers' router, `Qwen3MoeTopKRouter` / `Qwen2MoeTopKRouter`, whose third output is
the chosen experts).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from dressage.engine.embedded.model import (
    Decoder,
    KVCache,
    ModelShape,
    full_logits,
    load_weights,
    new_routes,
    parameter_shapes,
)

transformers = pytest.importorskip("transformers")

torch.set_num_threads(1)

TOKENS = [3, 17, 42, 5, 61, 8, 29, 33, 2, 50, 11, 47, 9, 21]
COMMON: dict[str, Any] = {
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
}


def _qwen3(**extra: Any) -> Any:
    return transformers.Qwen3Config(**COMMON, head_dim=16, rope_theta=5000.0, **extra)


def _qwen3_moe(**extra: Any) -> Any:
    fields = {
        "head_dim": 16,
        "num_experts": 6,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 24,
        **extra,
    }
    return transformers.Qwen3MoeConfig(**COMMON, **fields)


def _qwen2_moe(**extra: Any) -> Any:
    fields = {
        "num_experts": 5,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 40,
        **extra,
    }
    return transformers.Qwen2MoeConfig(**COMMON, **fields)


CONFIGS: dict[str, Callable[[], Any]] = {
    "llama": lambda: transformers.LlamaConfig(**COMMON),
    "llama-attention-bias": lambda: transformers.LlamaConfig(**COMMON, attention_bias=True),
    "mistral": lambda: transformers.MistralConfig(**COMMON, head_dim=16, sliding_window=None),
    "qwen2": lambda: transformers.Qwen2Config(**COMMON),
    "qwen3": _qwen3,
    "qwen3-tied": lambda: _qwen3(tie_word_embeddings=True),
    "qwen3-attention-bias": lambda: _qwen3(attention_bias=True),
    "qwen3-moe": _qwen3_moe,
    "qwen3-moe-normalised-top3": lambda: _qwen3_moe(norm_topk_prob=True, num_experts_per_tok=3),
    "qwen3-moe-sparse-step-2": lambda: _qwen3_moe(decoder_sparse_step=2),
    "qwen3-moe-mlp-only-layer": lambda: _qwen3_moe(mlp_only_layers=[1]),
    "qwen2-moe-shared-expert": _qwen2_moe,
    "qwen2-moe-normalised": lambda: _qwen2_moe(norm_topk_prob=True, qkv_bias=False),
}


def _random_model(config: Any) -> Any:
    """A model with spread-out random weights (the default init makes near-uniform routers,
    whose top-k could then differ by rounding alone)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager"
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn_like(param))
            elif param.dim() == 1:
                param.copy_(0.1 * torch.randn_like(param))
            else:
                param.copy_(torch.randn_like(param) * param.shape[-1] ** -0.5)
    return model.eval()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    config = CONFIGS[request.param]()
    model = _random_model(config)
    path = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(path)
    return model, path


def _reference_experts(model: Any, tokens: list[int]) -> tuple[torch.Tensor, dict[int, Any]]:
    """transformers' logits and, per sparse layer, the experts its router chose `[T, k]`."""
    chosen: dict[int, torch.Tensor] = {}
    hooks = []
    for index, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is None or not hasattr(gate, "top_k"):
            continue

        def keep(_module: Any, _inputs: Any, output: Any, index: int = index) -> None:
            chosen[index] = output[2].detach().clone()

        hooks.append(gate.register_forward_hook(keep))
    try:
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0]
    finally:
        for hook in hooks:
            hook.remove()
    return logits, chosen


def test_logits_and_routed_experts_match_transformers(checkpoint: Any) -> None:
    model, path = checkpoint
    reference, chosen = _reference_experts(model, TOKENS)
    weights = load_weights(path)
    shape = weights.shape
    routes = new_routes(shape, len(TOKENS)) if shape.moe is not None else None
    ours = full_logits(weights, TOKENS, routes)
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)
    if shape.moe is None:
        assert not chosen
        return
    assert routes is not None
    assert sorted(chosen) == list(shape.moe.sparse_layers)
    for index, experts in chosen.items():
        ours_sets = [sorted(row) for row in routes[:, index].tolist()]
        assert ours_sets == [sorted(row) for row in experts.tolist()], f"layer {index}"


def test_checkpoint_tensors_are_exactly_the_parameters_the_engine_expects(checkpoint: Any) -> None:
    from safetensors.torch import load_file

    model, path = checkpoint
    saved = {name: tuple(t.shape) for name, t in load_file(str(path / "model.safetensors")).items()}
    expected = parameter_shapes(ModelShape.from_checkpoint(path))
    if model.config.tie_word_embeddings:
        expected.pop("lm_head.weight")
    assert saved == expected


def test_incremental_decode_matches_the_full_forward(checkpoint: Any) -> None:
    _, path = checkpoint
    weights = load_weights(path)
    shape = weights.shape
    moe = shape.moe is not None
    full_routes = new_routes(shape, len(TOKENS)) if moe else None
    reference = full_logits(weights, TOKENS, full_routes)
    decoder = Decoder(shape, 32)
    cache = KVCache(shape, 3, 32)
    # Slot 2 holds the first 4 tokens, slot 0 the first 6: one batch of different lengths.
    first = new_routes(shape, 4) if moe else None
    decoder.prefill(weights, cache, 2, TOKENS[:4], first)
    decoder.prefill(weights, cache, 0, TOKENS[:6])
    for step in range(6):
        a, b = 4 + step, 6 + step
        step_routes = new_routes(shape, 2) if moe else None
        logits = decoder.decode(weights, cache, [2, 0], [TOKENS[a], TOKENS[b]], [a, b], step_routes)
        torch.testing.assert_close(logits[0], reference[a], atol=1e-4, rtol=0)
        torch.testing.assert_close(logits[1], reference[b], atol=1e-4, rtol=0)
        if full_routes is not None and step_routes is not None:
            assert torch.equal(step_routes[0], full_routes[a])
            assert torch.equal(step_routes[1], full_routes[b])
    if full_routes is not None and first is not None:
        assert torch.equal(first, full_routes[:4])


def test_dense_layers_of_an_moe_model_record_no_experts(tmp_path: Path) -> None:
    model = _random_model(_qwen3_moe(mlp_only_layers=[0], decoder_sparse_step=1))
    model.save_pretrained(tmp_path)
    weights = load_weights(tmp_path)
    routes = new_routes(weights.shape, len(TOKENS))
    full_logits(weights, TOKENS, routes)
    assert weights.shape.moe is not None
    assert weights.shape.moe.sparse_layers == (1, 2)
    assert not routes[:, 0].any()


def test_a_dense_model_has_no_experts_to_record(tmp_path: Path) -> None:
    _random_model(_qwen3()).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="Qwen3ForCausalLM has no MoE layers"):
        new_routes(ModelShape.from_checkpoint(tmp_path), 4)


def test_sliding_window_caps_the_context_and_unsupported_configs_are_named() -> None:
    base = {"architectures": ["MistralForCausalLM"], **COMMON}
    assert ModelShape.from_config({**base, "sliding_window": 64}).max_position_embeddings == 64
    assert ModelShape.from_config({**base, "sliding_window": None}).max_position_embeddings == 128
    qwen = {**base, "architectures": ["Qwen3ForCausalLM"], "sliding_window": 16}
    assert ModelShape.from_config(qwen).max_position_embeddings == 128
    assert (
        ModelShape.from_config({**qwen, "use_sliding_window": True}).max_position_embeddings == 16
    )
    with pytest.raises(ValueError, match="hidden_act='gelu'"):
        ModelShape.from_config({**base, "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="mlp_bias=True"):
        ModelShape.from_config({**base, "architectures": ["LlamaForCausalLM"], "mlp_bias": True})
    moe = {**base, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4}
    with pytest.raises(ValueError, match="num_experts_per_tok=5"):
        ModelShape.from_config({**moe, "num_experts_per_tok": 5, "moe_intermediate_size": 8})


def test_hub_and_transformers_names_for_the_expert_count_agree() -> None:
    moe = {
        "architectures": ["Qwen3MoeForCausalLM"],
        **COMMON,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 8,
    }
    hub = ModelShape.from_config({**moe, "num_experts": 4})
    written = ModelShape.from_config({**moe, "num_local_experts": 4})
    assert hub == written
    assert hub.moe is not None
    assert hub.moe.num_experts == 4

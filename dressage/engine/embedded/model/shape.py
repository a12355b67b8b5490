"""A checkpoint's architecture as the embedded engine's decoder needs it, read from `config.json`.

Every architecture served is a pre-norm decoder of one family (RMSNorm, rotary attention with
grouped-query heads, a SwiGLU feed-forward): the families differ in a few switches, each read
from the config the way `transformers` reads it (`models/<family>/configuration_*.py` and
`modeling_*.py`, transformers 5.x):

| architecture | attention | feed-forward |
| --- | --- | --- |
| `LlamaForCausalLM` | q/k/v/o biases when `attention_bias` | dense |
| `MistralForCausalLM` | no biases, `sliding_window` | dense |
| `Qwen2ForCausalLM` | q/k/v biases | dense |
| `Qwen3ForCausalLM` | q/k RMSNorm per head, biases when `attention_bias` | dense |
| `Qwen2MoeForCausalLM` | q/k/v biases when `qkv_bias` (default on) | MoE, gated shared expert |
| `Qwen3MoeForCausalLM` | q/k RMSNorm per head, biases when `attention_bias` | MoE |

MoE layers (`MoeShape`): a softmax router picks `num_experts_per_tok` of `num_experts` experts
per token (their probabilities renormalised to sum to 1 when `norm_topk_prob`); layer `i` is
sparse when `num_experts > 0`, `(i + 1) % decoder_sparse_step == 0` and `i` is not in
`mlp_only_layers`, else dense with `intermediate_size`. Qwen2-MoE adds a shared expert
(`shared_expert_intermediate_size`) scaled by `sigmoid(shared_expert_gate(x))`; Qwen3-MoE has
none.

A sliding attention window is served exactly by capping the context at the window: within it,
sliding and full attention are the same. Configs the decoder cannot serve exactly (another
RoPE type, MLP biases, another activation) are refused with the field named.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


@dataclasses.dataclass(frozen=True)
class MoeShape:
    """The sparse feed-forward of an MoE checkpoint."""

    num_experts: int
    top_k: int
    """Experts per token (`num_experts_per_tok`)."""
    moe_intermediate_size: int
    """Each expert's feed-forward width."""
    norm_topk_prob: bool
    """Renormalise the chosen experts' probabilities to sum to 1."""
    sparse_layers: tuple[int, ...]
    """Indices of the layers whose feed-forward is the MoE block (the others are dense)."""
    shared_expert_intermediate_size: int | None = None
    """Width of the always-on shared expert (Qwen2-MoE); None: no shared expert."""


@dataclasses.dataclass(frozen=True)
class ModelShape:
    """Everything about a checkpoint's architecture the decoder needs."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    """The longest sequence served (capped at the sliding window, when one is in effect)."""
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    eos_token_ids: tuple[int, ...]
    bos_token_id: int | None
    qk_norm: bool = False
    """RMSNorm over each head's query and key before the rotary embedding (Qwen3)."""
    moe: MoeShape | None = None
    """The sparse feed-forward; None for a dense model."""

    @property
    def attention_bias(self) -> bool:
        """Whether the q/k/v projections have biases."""
        return self.qkv_bias

    def is_sparse(self, layer: int) -> bool:
        """Whether layer `layer`'s feed-forward is the MoE block."""
        return self.moe is not None and layer in self.moe.sparse_layers

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ModelShape:
        archs = config.get("architectures") or []
        arch = next((a for a in archs if a in ARCHITECTURES), None)
        if arch is None:
            raise ValueError(
                f"config.json architectures {archs} not supported; "
                f"supported: {list(SUPPORTED_ARCHITECTURES)}"
            )
        return ARCHITECTURES[arch](arch, config)

    @classmethod
    def from_checkpoint(cls, checkpoint: Path) -> ModelShape:
        path = Path(checkpoint) / "config.json"
        try:
            config = json.loads(path.read_text())
        except FileNotFoundError:
            raise ValueError(f"{path} does not exist") from None
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        return cls.from_config(config)

    def same_architecture(self, other: ModelShape) -> bool:
        """Whether weights of `other` can replace ours (eos/bos labels may differ)."""
        skip = {"eos_token_ids", "bos_token_id", "max_position_embeddings"}
        return all(
            getattr(self, f.name) == getattr(other, f.name)
            for f in dataclasses.fields(self)
            if f.name not in skip
        )


def _rope_theta(config: dict[str, Any]) -> float:
    rope = config.get("rope_scaling") or config.get("rope_parameters") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
        raise ValueError(f"config.json rope type {rope_type!r} not supported (default only)")
    return float(config.get("rope_theta", rope.get("rope_theta", 10000.0)))


def _check(config: dict[str, Any], field: str, allowed: object, default: object) -> None:
    value = config.get(field, default)
    if value != allowed:
        raise ValueError(
            f"config.json {field}={value!r} is not supported by the embedded engine "
            f"(only {allowed!r})"
        )


def _sliding_window(config: dict[str, Any], *, always: bool) -> int | None:
    """The attention window in effect: Mistral's `sliding_window` always applies; the Qwen
    families apply it only with `use_sliding_window` (transformers' `__post_init__`), and
    then only to the layers `layer_types` marks `sliding_attention` when it is given."""
    window = config.get("sliding_window")
    if window is None or not (always or config.get("use_sliding_window", False)):
        return None
    layer_types = config.get("layer_types")
    if layer_types is not None and "sliding_attention" not in layer_types:
        return None
    return int(window)


def _eos(config: dict[str, Any]) -> tuple[int, ...]:
    eos = config.get("eos_token_id")
    return tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))


def _dense(arch: str, config: dict[str, Any], **switches: Any) -> ModelShape:
    """The fields every family shares, with the family's `switches` on top."""
    _check(config, "hidden_act", "silu", "silu")
    _check(config, "mlp_bias", False, False)
    heads = int(config["num_attention_heads"])
    hidden = int(config["hidden_size"])
    max_len = int(config.get("max_position_embeddings", 2048))
    window = switches.pop("sliding_window", None)
    if window is not None:
        max_len = min(max_len, window)
    fields: dict[str, Any] = {
        "architecture": arch,
        "vocab_size": int(config["vocab_size"]),
        "hidden_size": hidden,
        "intermediate_size": int(config["intermediate_size"]),
        "num_layers": int(config["num_hidden_layers"]),
        "num_heads": heads,
        "num_kv_heads": int(config.get("num_key_value_heads") or heads),
        "head_dim": int(config.get("head_dim") or hidden // heads),
        "rms_norm_eps": float(config.get("rms_norm_eps", 1e-6)),
        "rope_theta": _rope_theta(config),
        "max_position_embeddings": max_len,
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", False)),
        "qkv_bias": False,
        "o_bias": False,
        "eos_token_ids": _eos(config),
        "bos_token_id": config.get("bos_token_id"),
    }
    return ModelShape(**(fields | switches))


def _moe(config: dict[str, Any], *, shared: bool) -> MoeShape | None:
    # transformers 5 writes `num_local_experts` (Qwen3MoeConfig.attribute_map), the Hub's
    # checkpoints `num_experts`.
    experts = int(config.get("num_experts", config.get("num_local_experts", 0)) or 0)
    layers = int(config["num_hidden_layers"])
    if experts <= 0:
        return None
    step = int(config.get("decoder_sparse_step", 1))
    dense_only = set(config.get("mlp_only_layers") or [])
    sparse = tuple(i for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    top_k = int(config["num_experts_per_tok"])
    if not 1 <= top_k <= experts:
        raise ValueError(
            f"config.json num_experts_per_tok={top_k} must be in [1, num_experts={experts}]"
        )
    return MoeShape(
        num_experts=experts,
        top_k=top_k,
        moe_intermediate_size=int(config["moe_intermediate_size"]),
        norm_topk_prob=bool(config.get("norm_topk_prob", False)),
        sparse_layers=sparse,
        shared_expert_intermediate_size=(
            int(config["shared_expert_intermediate_size"]) if shared else None
        ),
    )


def _llama(arch: str, config: dict[str, Any]) -> ModelShape:
    bias = bool(config.get("attention_bias", False))
    return _dense(arch, config, qkv_bias=bias, o_bias=bias)


def _mistral(arch: str, config: dict[str, Any]) -> ModelShape:
    return _dense(arch, config, sliding_window=_sliding_window(config, always=True))


def _qwen2(arch: str, config: dict[str, Any]) -> ModelShape:
    return _dense(arch, config, qkv_bias=True, sliding_window=_sliding_window(config, always=False))


def _qwen3(arch: str, config: dict[str, Any]) -> ModelShape:
    bias = bool(config.get("attention_bias", False))
    return _dense(
        arch,
        config,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
        sliding_window=_sliding_window(config, always=False),
    )


def _qwen2_moe(arch: str, config: dict[str, Any]) -> ModelShape:
    return _dense(
        arch,
        config,
        qkv_bias=bool(config.get("qkv_bias", True)),
        moe=_moe(config, shared=True),
        sliding_window=_sliding_window(config, always=False),
    )


def _qwen3_moe(arch: str, config: dict[str, Any]) -> ModelShape:
    bias = bool(config.get("attention_bias", False))
    return _dense(
        arch,
        config,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
        moe=_moe(config, shared=False),
        sliding_window=_sliding_window(config, always=False),
    )


ARCHITECTURES: dict[str, Callable[[str, dict[str, Any]], ModelShape]] = {
    "LlamaForCausalLM": _llama,
    "MistralForCausalLM": _mistral,
    "Qwen2ForCausalLM": _qwen2,
    "Qwen3ForCausalLM": _qwen3,
    "Qwen2MoeForCausalLM": _qwen2_moe,
    "Qwen3MoeForCausalLM": _qwen3_moe,
}
"""`config.json` architecture name -> how its shape is read."""
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)

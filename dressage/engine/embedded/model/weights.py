"""A checkpoint's weights by their Hugging Face names: what a checkpoint holds, loading, swaps.

Tensors are read from `model.safetensors` (or a sharded index) under the names `transformers`'
`save_pretrained` writes, so a checkpoint the trainer writes loads here unchanged. MoE experts
are stored one by one (`mlp.experts.{e}.gate_proj.weight`, `up_proj`, `down_proj`), the layout of
the Hub's checkpoints, which transformers 5 also writes back although it trains them fused
(`mlp.experts.gate_up_proj`); the router is `mlp.gate.weight`, Qwen2-MoE's shared expert
`mlp.shared_expert.{gate,up,down}_proj.weight` and its gate `mlp.shared_expert_gate.weight`.

`ModelWeights` is immutable: a weight swap builds a new one (`replace_weights`) and the
scheduler replaces one reference, so every token is computed entirely with one set.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import safe_open

from dressage.engine.embedded.model.shape import ModelShape

LayerWeights = Mapping[str, torch.Tensor]
"""One decoder layer's tensors by name after `model.layers.N.` (never mutated)."""


@dataclasses.dataclass(frozen=True)
class ModelWeights:
    """An immutable set of weights; swapping versions is replacing one reference."""

    shape: ModelShape
    embed: torch.Tensor
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor
    lm_head: torch.Tensor


LORA_A, LORA_B = ".lora_A", ".lora_B"
"""Suffixes of a LoRA adapter's matrices in an adapter's weight set, after the module's name:
`self_attn.q_proj.lora_A` (`[r, in]`) and `.lora_B` (`[out, r]`, already scaled by
`alpha / r`), beside the base's `self_attn.q_proj.weight` (see
`dressage.engine.embedded.model.lora`)."""


def project(x: torch.Tensor, layer: LayerWeights, module: str) -> torch.Tensor:
    """The linear layer `module` of `layer` (`self_attn.q_proj`) applied to `x`, with its bias
    when it has one, plus its LoRA adapter's update when the weight set carries one: PEFT's
    `base(x) + B(A(x)) * scaling`, in that order."""
    out = F.linear(x, layer[module + ".weight"], layer.get(module + ".bias"))
    a = layer.get(module + LORA_A)
    if a is not None:
        out = out + F.linear(F.linear(x, a), layer[module + LORA_B])
    return out


def _mlp_shapes(h: int, inter: int, prefix: str) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}gate_proj.weight": (inter, h),
        f"{prefix}up_proj.weight": (inter, h),
        f"{prefix}down_proj.weight": (h, inter),
    }


def layer_shapes(shape: ModelShape, layer: int) -> dict[str, tuple[int, ...]]:
    """Every tensor of decoder layer `layer` (names after `model.layers.N.`) with its shape."""
    h, qd = shape.hidden_size, shape.num_heads * shape.head_dim
    kvd = shape.num_kv_heads * shape.head_dim
    out: dict[str, tuple[int, ...]] = {
        "input_layernorm.weight": (h,),
        "self_attn.q_proj.weight": (qd, h),
        "self_attn.k_proj.weight": (kvd, h),
        "self_attn.v_proj.weight": (kvd, h),
        "self_attn.o_proj.weight": (h, qd),
        "post_attention_layernorm.weight": (h,),
    }
    if shape.qkv_bias:
        out |= {
            "self_attn.q_proj.bias": (qd,),
            "self_attn.k_proj.bias": (kvd,),
            "self_attn.v_proj.bias": (kvd,),
        }
    if shape.o_bias:
        out["self_attn.o_proj.bias"] = (h,)
    if shape.qk_norm:
        out |= {
            "self_attn.q_norm.weight": (shape.head_dim,),
            "self_attn.k_norm.weight": (shape.head_dim,),
        }
    moe = shape.moe
    if moe is None or not shape.is_sparse(layer):
        return out | _mlp_shapes(h, shape.intermediate_size, "mlp.")
    out["mlp.gate.weight"] = (moe.num_experts, h)
    for e in range(moe.num_experts):
        out |= _mlp_shapes(h, moe.moe_intermediate_size, f"mlp.experts.{e}.")
    if moe.shared_expert_intermediate_size is not None:
        out |= _mlp_shapes(h, moe.shared_expert_intermediate_size, "mlp.shared_expert.")
        out["mlp.shared_expert_gate.weight"] = (1, h)
    return out


def parameter_shapes(shape: ModelShape) -> dict[str, tuple[int, ...]]:
    """Every parameter a checkpoint of `shape` has, by Hugging Face name, with its shape.

    `lm_head.weight` is listed for tied embeddings too: a sender may include it (a
    `state_dict` does), and it then replaces the output projection.
    """
    h = shape.hidden_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (shape.vocab_size, h)}
    for i in range(shape.num_layers):
        out |= {f"model.layers.{i}.{name}": dims for name, dims in layer_shapes(shape, i).items()}
    out["model.norm.weight"] = (h,)
    out["lm_head.weight"] = (shape.vocab_size, h)
    return out


def _read_tensors(checkpoint: Path, device: torch.device) -> dict[str, torch.Tensor]:
    single = checkpoint / "model.safetensors"
    index = checkpoint / "model.safetensors.index.json"
    if single.exists():
        files = [single]
    elif index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = [checkpoint / name for name in sorted(set(weight_map.values()))]
    else:
        raise ValueError(f"{checkpoint} has neither model.safetensors nor its index")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                tensors[name] = handle.get_tensor(name).to(device=device, dtype=torch.float32)
    return tensors


def load_weights(
    checkpoint: Path, shape: ModelShape | None = None, device: torch.device | str = "cpu"
) -> ModelWeights:
    """Read and check a checkpoint's weights, placed on `device`; errors name the missing or
    misshapen tensor."""
    checkpoint = Path(checkpoint)
    shape = shape or ModelShape.from_checkpoint(checkpoint)
    tensors = _read_tensors(checkpoint, torch.device(device))

    def take(name: str, expected: tuple[int, ...]) -> torch.Tensor:
        tensor = tensors.get(name)
        if tensor is None:
            raise ValueError(f"{checkpoint}: tensor {name} is missing")
        if tuple(tensor.shape) != expected:
            raise ValueError(
                f"{checkpoint}: tensor {name} has shape {tuple(tensor.shape)}, expected {expected}"
            )
        return tensor.contiguous()

    h = shape.hidden_size
    layers = tuple(
        {
            name: take(f"model.layers.{i}.{name}", dims)
            for name, dims in layer_shapes(shape, i).items()
        }
        for i in range(shape.num_layers)
    )
    embed = take("model.embed_tokens.weight", (shape.vocab_size, h))
    if "lm_head.weight" in tensors or not shape.tie_word_embeddings:
        lm_head = take("lm_head.weight", (shape.vocab_size, h))
    else:
        lm_head = embed
    return ModelWeights(
        shape=shape,
        embed=embed,
        layers=layers,
        norm=take("model.norm.weight", (h,)),
        lm_head=lm_head,
    )


def replace_weights(weights: ModelWeights, updates: Mapping[str, torch.Tensor]) -> ModelWeights:
    """A new `ModelWeights` with the tensors of `updates` (Hugging Face names, shapes already
    checked against `parameter_shapes`) in place of the current ones; `weights` is unchanged.

    With tied embeddings, a new `model.embed_tokens.weight` is the output projection too
    unless `updates` also has `lm_head.weight`.
    """
    per_layer: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in updates.items():
        if name.startswith("model.layers."):
            index, _, rest = name.removeprefix("model.layers.").partition(".")
            per_layer.setdefault(int(index), {})[rest] = tensor
    layers = tuple(
        {**layer, **per_layer[i]} if i in per_layer else layer
        for i, layer in enumerate(weights.layers)
    )
    embed = updates.get("model.embed_tokens.weight", weights.embed)
    tied_now = weights.lm_head is weights.embed
    lm_head = updates.get("lm_head.weight", embed if tied_now else weights.lm_head)
    return ModelWeights(
        shape=weights.shape,
        embed=embed,
        layers=layers,
        norm=updates.get("model.norm.weight", weights.norm),
        lm_head=lm_head,
    )

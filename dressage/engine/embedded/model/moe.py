"""The MoE feed-forward as pure tensor functions: the top-k router and the experts.

Both follow `transformers`' Qwen2-MoE / Qwen3-MoE (`Qwen3MoeTopKRouter`, `Qwen3MoeExperts`,
`Qwen2MoeSparseMoeBlock`, transformers 5.x) operation for operation, so float32 outputs agree to
rounding and the chosen experts are the same: softmax over the router logits in float32, top-k
of the probabilities, optional renormalisation (`norm_topk_prob`), then each token's experts'
outputs weighted by those probabilities and summed in ascending expert order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from dressage.engine.embedded.model.shape import MoeShape
from dressage.engine.embedded.model.weights import LayerWeights, project


def route(
    hidden: torch.Tensor, gate: torch.Tensor, top_k: int, norm_topk_prob: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """`hidden` `[N, H]`, router weight `gate` `[E, H]` -> the chosen experts `[N, k]` (in
    descending probability) and their routing weights `[N, k]`."""
    logits = F.linear(hidden, gate)
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return experts, weights.to(logits.dtype)


def swiglu(x: torch.Tensor, layer: LayerWeights, prefix: str) -> torch.Tensor:
    """The SwiGLU feed-forward whose weights are `{prefix}{gate,up,down}_proj.weight`."""
    gate = project(x, layer, prefix + "gate_proj")
    up = project(x, layer, prefix + "up_proj")
    return project(F.silu(gate) * up, layer, prefix + "down_proj")


def experts_forward(
    hidden: torch.Tensor, layer: LayerWeights, experts: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """The routed experts' weighted sum `[N, H]` for `hidden` `[N, H]` routed to `experts`
    `[N, k]` with `weights` `[N, k]`."""
    out = torch.zeros_like(hidden)
    for expert in torch.unique(experts).tolist():
        token, slot = torch.where(experts == expert)
        y = swiglu(hidden[token], layer, f"mlp.experts.{expert}.")
        out.index_add_(0, token, y * weights[token, slot, None])
    return out


def moe_forward(
    hidden: torch.Tensor, layer: LayerWeights, moe: MoeShape
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sparse feed-forward: `hidden` `[..., H]` -> (its output `[..., H]`, the chosen
    experts `[N, k]` of the `N` flattened tokens)."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    experts, weights = route(flat, layer["mlp.gate.weight"], moe.top_k, moe.norm_topk_prob)
    out = experts_forward(flat, layer, experts, weights)
    if moe.shared_expert_intermediate_size is not None:
        shared = swiglu(flat, layer, "mlp.shared_expert.")
        out = out + torch.sigmoid(F.linear(flat, layer["mlp.shared_expert_gate.weight"])) * shared
    return out.reshape(hidden.shape), experts

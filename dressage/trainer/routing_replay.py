"""MoE routing replay (R3) in the trainer's forward, and routing agreement.

The rollout records which experts each token was routed to (`Sample.routed_experts`, from
SGLang's `return_routed_experts`). Training recomputes the router with the current weights, in
another numeric setting (batch shapes, kernels, bf16): a token whose router scores are close
can pick other experts than it did in the rollout, and its train logprob then differs from the
rollout's for a reason no staleness control sees. Replay removes that difference: each MoE
layer's router still computes its probabilities, but the experts of every token the rollout
routed are the rollout's; their weights are the router's probabilities of those experts
(renormalised when the config says `norm_topk_prob`), so the router keeps its gradient, as in
the R3 method (arXiv 2510.11370) and slime's and Megatron's router replay.

Which tokens are replayed: every token of the sample the rollout ran through the model, the
prompt included (SGLang's routes cover prompt and output from token 0); tokens it never ran
(the last token of a sample, tokens appended after the last turn, padding) use the trainer's
own router: their routing has no rollout counterpart, and only the last token before a
trained one matters for a logprob, which the rollout always ran.

Routing agreement is measured either way (`routing_replay: record` or `replay`): over every
(token, sparse layer) pair the rollout routed, the share whose top-k *set* the trainer's own
router picks too. With replay on it says how much replay changed; off, how much the two
disagree.

The hooks sit on transformers' router modules (`Qwen3MoeTopKRouter`, `Qwen2MoeTopKRouter`:
softmax over the experts, top-k, optional renormalisation, in transformers 5.x
`modeling_qwen3_moe.py` / `modeling_qwen2_moe.py`), found through the model's
`_can_record_outputs["router_logits"]`; a model whose router works otherwise is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

REPLAYABLE_ROUTERS = frozenset({"Qwen3MoeTopKRouter", "Qwen2MoeTopKRouter"})
"""Router classes whose outputs replay rebuilds: `(logits, top-k weights, top-k experts)`,
weights the softmax probabilities of the experts, renormalised when `norm_topk_prob`."""
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class RouteShape:
    """How a sample's routing rows split: `num_layers` layers of `top_k` experts."""

    num_layers: int
    top_k: int
    num_experts: int

    @property
    def width(self) -> int:
        return self.num_layers * self.top_k


def moe_routers(model: torch.nn.Module) -> dict[int, torch.nn.Module]:
    """The router of every sparse layer of a transformers MoE model, by layer index (empty for
    a dense model); ValueError for a router replay cannot rebuild."""
    recorders = getattr(model, "_can_record_outputs", None) or {}
    recorder = recorders.get("router_logits")
    target = getattr(recorder, "target_class", None)
    if target is None:
        return {}
    routers: dict[int, torch.nn.Module] = {}
    for name, module in model.named_modules():
        if not isinstance(module, target):
            continue
        if type(module).__name__ not in REPLAYABLE_ROUTERS:
            raise ValueError(
                f"routing replay rebuilds the softmax top-k routers of Qwen2-MoE and Qwen3-MoE "
                f"({', '.join(sorted(REPLAYABLE_ROUTERS))}); {type(model).__name__} routes "
                f"with {type(module).__name__}"
            )
        match = _LAYER.search(name)
        if match is None:
            raise ValueError(f"router {name} is not inside a numbered decoder layer")
        routers[int(match.group(1))] = module
    return routers


def route_shape(model: torch.nn.Module) -> RouteShape | None:
    """The routing row layout of `model` (None for a dense model)."""
    routers = moe_routers(model)
    if not routers:
        return None
    config: Any = getattr(model, "config", None)
    router: Any = next(iter(routers.values()))
    return RouteShape(
        num_layers=int(config.num_hidden_layers),
        top_k=int(router.top_k),
        num_experts=int(router.num_experts),
    )


class RoutingReplay:
    """Hooks on every router of `model`: while `routes` is active, they measure agreement with
    the rollout's routes and, with `replay`, route the rollout's tokens as the rollout did.

    Outside `routes` (or with no routes given) the model routes as usual. The statistics of a
    pass are kept per layer and replaced when a layer runs again, so the recomputation of an
    activation-checkpointed backward pass does not count twice.
    """

    def __init__(self, model: torch.nn.Module, *, replay: bool) -> None:
        routers = moe_routers(model)
        shape = route_shape(model)
        if shape is None:
            raise ValueError(
                f"routing replay needs an MoE model; {type(model).__name__} has no router "
                "(set spec.rollout.routingReplay to off)"
            )
        self.shape = shape
        self.replay = replay
        self._routes: torch.Tensor | None = None
        self._stats: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._handles = [
            module.register_forward_hook(self._hook_for(layer)) for layer, module in routers.items()
        ]

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    @contextmanager
    def routes(self, routes: torch.Tensor | None) -> Iterator[None]:
        """Use `routes` `[B, L, num_layers, top_k]` (expert ids, -1 where the rollout did not
        route the token) for the forward and backward passes inside the block."""
        self._routes = routes
        self._stats = {}
        try:
            yield
        finally:
            self._routes = None

    def agreement(self) -> tuple[float, float]:
        """(token-layer pairs whose own top-k set equals the rollout's, pairs the rollout
        routed) of the last `routes` block."""
        agree = sum(float(a) for a, _ in self._stats.values())
        total = sum(float(t) for _, t in self._stats.values())
        return agree, total

    def _hook_for(self, layer: int) -> Any:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> Any:
            return self._route(layer, module, output)

        return hook

    def _route(self, layer: int, module: torch.nn.Module, output: Any) -> Any:
        routes = self._routes
        if routes is None:
            return None
        logits, _scores, own = output
        rollout = routes[:, :, layer].reshape(-1, routes.shape[-1]).to(own.device)
        if rollout.shape != own.shape:
            raise ValueError(
                f"layer {layer}: {tuple(rollout.shape)} rollout routes for router output "
                f"{tuple(own.shape)}"
            )
        routed = (rollout >= 0).all(dim=-1)
        if bool((rollout >= self.shape.num_experts).any()):
            raise ValueError(
                f"layer {layer}: a rollout route names an expert >= {self.shape.num_experts}; "
                "the routes are not this model's"
            )
        with torch.no_grad():
            same = (own.sort(dim=-1).values == rollout.sort(dim=-1).values).all(dim=-1)
            self._stats[layer] = ((same & routed).sum(), routed.sum())
        if not self.replay:
            return None
        chosen = torch.where(routed.unsqueeze(-1), rollout, own)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        weights = probs.gather(1, chosen)
        if getattr(module, "norm_topk_prob", False):
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return logits, weights.to(logits.dtype), chosen

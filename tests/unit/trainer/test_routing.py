"""Routing replay in the trainer's forward (transformers' Qwen3-MoE with the hooks of
`dressage.trainer.routing_replay`), routing agreement, and MoE weights published under the
checkpoint's names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from dressage_testkit.trainer import (
    small_model,
    small_moe_model,
    synthetic_batch,
    with_random_routes,
)

from dressage.data.expert_routing import RoutedExperts
from dressage.data.groups import TrainBatch
from dressage.data.samples import Sample
from dressage.engine.embedded.model import (
    ModelShape,
    full_logits,
    load_weights,
    new_routes,
    parameter_shapes,
)
from dressage.trainer.batch import ScoredSample, to_tensors
from dressage.trainer.grpo import (
    LOGPROB_ABS_DIFF,
    ROUTED_TOKEN_FRACTION,
    ROUTING_AGREEMENT,
    GRPOTrainer,
    TrainerConfig,
    load_policy,
)
from dressage.trainer.routing_replay import RouteShape, RoutingReplay, moe_routers, route_shape

torch.set_num_threads(1)
SHAPE = RouteShape(num_layers=2, top_k=2, num_experts=4)


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_moe_model(tmp_path_factory.mktemp("moe"))


def _policy(path: Path) -> Any:
    return load_policy(path, torch.device("cpu"))


def _experts_inputs(model: Any) -> tuple[dict[int, torch.Tensor], list[Any]]:
    """The experts and weights each sparse layer's experts module receives, by layer."""
    seen: dict[int, Any] = {}
    hooks = []
    for index, layer in enumerate(model.model.layers):
        experts = getattr(layer.mlp, "experts", None)
        if experts is None:
            continue

        def keep(_m: Any, args: Any, index: int = index) -> None:
            seen[index] = (args[1].detach().clone(), args[2].detach().clone())

        hooks.append(experts.register_forward_pre_hook(keep))
    return seen, hooks


def test_the_routers_of_an_moe_model_and_none_of_a_dense_one(moe: Path, tmp_path: Path) -> None:
    model = _policy(moe)
    assert sorted(moe_routers(model)) == [0, 1]
    assert route_shape(model) == SHAPE
    dense = _policy(small_model(tmp_path))
    assert moe_routers(dense) == {}
    with pytest.raises(ValueError, match="routing replay needs an MoE model; LlamaForCausalLM"):
        RoutingReplay(dense, replay=True)


def test_replay_routes_the_rollouts_tokens_to_the_rollouts_experts(moe: Path) -> None:
    model = _policy(moe)
    replay = RoutingReplay(model, replay=True)
    outputs: dict[int, Any] = {}
    for layer, router in moe_routers(model).items():
        # Registered after replay's hook, so it sees what the experts will get.
        router.register_forward_hook(
            lambda _m, _a, out, layer=layer: outputs.__setitem__(layer, out)
        )
    tokens = torch.tensor([[5, 9, 17, 23, 31, 8]])
    # The rollout routed the first 4 tokens (to experts unlike the model's own choice).
    routes = torch.full((1, 6, 2, 2), -1, dtype=torch.long)
    routes[0, :4] = torch.tensor([[3, 0], [1, 2], [2, 3], [0, 1]]).unsqueeze(1)
    with torch.no_grad():
        own = model(tokens).logits
    own_experts = {layer: out[2].clone() for layer, out in outputs.items()}
    with replay.routes(routes), torch.no_grad():
        replayed = model(tokens).logits
    for layer, (logits, weights, experts) in outputs.items():
        assert torch.equal(experts[:4], routes[0, :4, layer])
        assert torch.equal(experts[4:], own_experts[layer][4:])  # not routed: its own choice
        # The weights are the router's probabilities of those experts, renormalised
        # (norm_topk_prob), so the router's output still carries its gradient.
        probs = torch.softmax(logits, dim=-1).gather(1, experts)
        torch.testing.assert_close(weights, probs / probs.sum(dim=-1, keepdim=True))
    assert not torch.allclose(own[0, :4], replayed[0, :4])
    agree, total = replay.agreement()
    assert total == 2 * 4
    assert agree < total


def test_replaying_the_models_own_routing_changes_nothing_and_agrees_fully(moe: Path) -> None:
    model = _policy(moe)
    tokens = [5, 9, 17, 23, 31, 8, 40, 41]
    weights = load_weights(moe)
    routes = new_routes(weights.shape, len(tokens))
    reference = full_logits(weights, tokens, routes)
    replay = RoutingReplay(model, replay=True)
    with replay.routes(routes.long().unsqueeze(0)), torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=0)
    assert replay.agreement() == (2.0 * len(tokens), 2.0 * len(tokens))


def test_the_router_keeps_its_gradient_under_replay(moe: Path) -> None:
    model = _policy(moe)
    replay = RoutingReplay(model, replay=True)
    routes = torch.tensor([[[[0, 1], [2, 3]]] * 5])
    with replay.routes(routes):
        model(torch.tensor([[5, 9, 17, 23, 31]])).logits.sum().backward()
    for layer in moe_routers(model).values():
        assert layer.weight.grad is not None
        assert layer.weight.grad.abs().sum() > 0


def _sample(tokens: list[int], routes: RoutedExperts | None) -> ScoredSample:
    sample = Sample.build(
        prompt_tokens=tokens[:3],
        response_tokens=tokens[3:],
        response_versions=["v1"] * (len(tokens) - 3),
        rollout_log_probs=[-1.0] * (len(tokens) - 3),
        parent_traj_id="t-1",
        routed_experts=routes,
    )
    return ScoredSample(sample, 1.0)


def test_batch_routes_are_padded_with_not_routed_and_checked_against_the_model() -> None:
    data = torch.arange(3 * 4, dtype=torch.int32).numpy().astype("<i4").tobytes()
    routed = _sample([5, 6, 7, 8], RoutedExperts(data, 3, 4))
    tensors = to_tensors([routed, _sample([5, 6, 7, 8, 9, 10], None)], 0, SHAPE)
    assert tensors.routed_experts is not None
    assert tensors.routed_experts.shape == (2, 6, 2, 2)
    assert tensors.routed_experts[0, :3].flatten().tolist() == list(range(12))
    assert (tensors.routed_experts[0, 3:] == -1).all()
    assert (tensors.routed_experts[1] == -1).all()
    assert to_tensors([routed], 0).routed_experts is None
    wrong = _sample([5, 6, 7, 8], RoutedExperts(data, 2, 6))
    with pytest.raises(ValueError, match=r"'t-1' \(segment 0\): routed_experts rows hold 6"):
        to_tensors([wrong], 0, SHAPE)


def _batch(step: int) -> TrainBatch:
    return with_random_routes(
        synthetic_batch(step), num_layers=2, top_k=2, num_experts=4, seed=step
    )


def test_a_step_reports_routing_agreement_and_replay_changes_the_train_logprobs(
    moe: Path,
) -> None:
    figures = {}
    for mode in ("record", "replay"):
        torch.manual_seed(0)
        trainer = GRPOTrainer(_policy(moe), TrainerConfig(learning_rate=1e-3, routing_replay=mode))
        figures[mode] = trainer.train_step(_batch(1))
    record, replay = figures["record"], figures["replay"]
    # Random routes rarely match the router's own top-2 of 4 experts (1 in 6 by chance).
    assert 0.0 < record[ROUTING_AGREEMENT] < 0.5
    assert record[ROUTING_AGREEMENT] == pytest.approx(replay[ROUTING_AGREEMENT])
    assert record[ROUTED_TOKEN_FRACTION] == replay[ROUTED_TOKEN_FRACTION]
    assert 0.5 < record[ROUTED_TOKEN_FRACTION] < 1.0  # every sample's last token is unrouted
    assert record[LOGPROB_ABS_DIFF] != replay[LOGPROB_ABS_DIFF]
    off = GRPOTrainer(_policy(moe), TrainerConfig(learning_rate=1e-3)).train_step(_batch(1))
    assert ROUTING_AGREEMENT not in off
    assert off[LOGPROB_ABS_DIFF] == pytest.approx(record[LOGPROB_ABS_DIFF])


def test_samples_without_routes_are_routed_by_the_trainer(moe: Path) -> None:
    batch = synthetic_batch(2)
    trainer = GRPOTrainer(_policy(moe), TrainerConfig(routing_replay="replay"))
    figures = trainer.train_step(batch)
    assert figures[ROUTED_TOKEN_FRACTION] == 0.0
    assert ROUTING_AGREEMENT not in figures


def test_moe_weights_are_published_under_the_checkpoints_names(moe: Path) -> None:
    trainer = GRPOTrainer(_policy(moe), TrainerConfig(learning_rate=1e-2, routing_replay="replay"))
    trainer.train_step(_batch(3))
    published = dict(trainer.iter_publishable())
    expected = parameter_shapes(ModelShape.from_checkpoint(moe))
    assert {name: tuple(t.shape) for name, t in published.items()} == expected
    # The engine, given those tensors, computes what the trained model computes.
    from dressage.engine.embedded.model import replace_weights

    served = replace_weights(load_weights(moe), published)
    tokens = [5, 9, 17, 23, 31, 8]
    with torch.no_grad():
        reference = trainer.module(torch.tensor([tokens])).logits[0]
    torch.testing.assert_close(full_logits(served, tokens), reference, atol=1e-4, rtol=0)
    assert not torch.allclose(full_logits(load_weights(moe), tokens), reference, atol=1e-3)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match=r"rollout\.routingReplay must be one of"):
        TrainerConfig(routing_replay="always")

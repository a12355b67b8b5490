"""MoE training sharded with FSDP2: two gloo ranks launched by torchrun train the small
Qwen3-MoE with routing replay, micro-batches and activation checkpointing exactly as one
process does, and a gang publishes its trained experts to a real engine under the
checkpoint's per-expert names.

As in test_trainer_fsdp.py, each rank writes its results and a `done-rank<R>` marker before
the process group is torn down, and the tests judge on those files.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from dressage_testkit.trainer import small_moe_model, training_batch

from dressage.engine.embedded.model import ModelShape, parameter_shapes
from dressage.trainer.grpo import (
    ROUTED_TOKEN_FRACTION,
    ROUTING_AGREEMENT,
    GRPOTrainer,
    TrainerConfig,
    load_policy,
)
from tests.integration.test_trainer_fsdp import LR, STEPS, _launch

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_moe_model(tmp_path_factory.mktemp("moe"))


def test_two_fsdp_ranks_replaying_routes_match_one_process(moe: Path, tmp_path: Path) -> None:
    out = _launch(
        moe,
        tmp_path / "replay",
        *("--steps", str(STEPS), "--micro-tokens", "16", "--chunk-tokens", "5"),
        *("--activation-checkpointing", "--routing-replay", "replay"),
    )
    rank0, rank1 = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between ranks"
    torch.set_num_threads(1)
    single = GRPOTrainer(
        load_policy(moe, torch.device("cpu")),
        TrainerConfig(learning_rate=LR, precision="fp32", routing_replay="replay"),
    )
    history = [single.train_step(training_batch(s, single.module)) for s in range(1, STEPS + 1)]
    initial = load_policy(moe, torch.device("cpu")).state_dict()
    experts = "model.layers.0.mlp.experts.gate_up_proj"
    assert not torch.equal(rank0[experts], initial[experts]), "the experts did not train"
    for name, tensor in single.module.state_dict().items():
        # AdamW divides by the root of the squared gradients: an entry whose gradient is near
        # zero moves by a visible fraction of lr for a difference in summation order alone.
        torch.testing.assert_close(rank0[name], tensor, rtol=1e-3, atol=1e-4, msg=name)
    sharded = json.loads((out / "metrics.json").read_text())
    for ours, theirs in zip(sharded, history, strict=True):
        for key in ("loss", "train_rollout_logprob_abs_diff", ROUTING_AGREEMENT):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
        assert ours[ROUTED_TOKEN_FRACTION] == theirs[ROUTED_TOKEN_FRACTION]


def test_a_gang_publishes_its_trained_experts_to_a_real_engine(moe: Path, tmp_path: Path) -> None:
    from dressage_testkit.engine import start_engine, weight_version_of
    from transformers import AutoModelForCausalLM

    from tests.integration.test_weight_sync import engine_logprobs, model_logprobs

    with start_engine(model=str(moe), weight_version="v0") as engine:
        out = _launch(
            moe,
            tmp_path / "gang",
            *("--steps", "2", "--engine-url", engine.base_url, "--routing-replay", "replay"),
            worker="dressage_testkit.orchestrator",
        )
        version = weight_version_of(engine.base_url)
        output, served = asyncio.run(engine_logprobs(engine.base_url))
    assert version == "v-gang"
    trained = AutoModelForCausalLM.from_pretrained(moe).eval()
    trained.load_state_dict(torch.load(out / "rank0.pt"))
    torch.testing.assert_close(served, model_logprobs(trained, output), atol=1e-5, rtol=0)
    # Every rank was handed each checkpoint tensor once: the fused experts, one per expert.
    expected = len(parameter_shapes(ModelShape.from_checkpoint(moe)))
    handed = [json.loads((out / f"published-rank{r}.json").read_text())["tensors"] for r in (0, 1)]
    assert handed == [expected] * 2
    initial = AutoModelForCausalLM.from_pretrained(moe).eval()
    assert (
        max(abs(a - b) for a, b in zip(model_logprobs(initial, output), served, strict=True)) > 1e-3
    )

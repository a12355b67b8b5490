"""LoRA training under the FSDP2 trainer: two gloo ranks, each decoder layer sharded with its
frozen base weights and trainable PEFT adapter together, train the adapter exactly as one
process does; the base never moves; a run resumed from its sharded checkpoint continues as an
uninterrupted one; every version after v0 is written as a PEFT adapter directory.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from dressage_testkit.trainer import job_spec, small_model, synthetic_batch

from dressage.trainer.checkpoint import RunDir
from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy
from dressage.trainer.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, load_adapter, wrap_lora
from dressage.trainer.session import TrainerSession
from tests.integration.test_trainer_fsdp import LR, STEPS, _launch

pytestmark = pytest.mark.integration
RANK = 4


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_model(tmp_path_factory.mktemp("model"))


def _single(model: Path) -> GRPOTrainer:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    policy = wrap_lora(load_policy(model, torch.device("cpu")), job_spec(RANK).model.lora)
    trainer = GRPOTrainer(policy, TrainerConfig(learning_rate=LR, precision="fp32"))
    for step in range(1, STEPS + 1):
        trainer.train_step(synthetic_batch(step))
    return trainer


def test_two_fsdp_ranks_train_the_adapter_like_one_process_and_resume_exactly(
    model: Path, tmp_path: Path
) -> None:
    out = _launch(
        model,
        tmp_path / "lora",
        *("--steps", str(STEPS), "--lora-rank", str(RANK), "--resume"),
    )
    rank0, rank1 = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    base = load_policy(model, torch.device("cpu")).state_dict()
    single = _single(model).module.state_dict()
    assert rank0.keys() == rank1.keys() == single.keys()
    adapters = [n for n in rank0 if ".lora_" in n]
    assert adapters, "no adapter parameters"
    for name, tensor in rank0.items():
        assert torch.equal(tensor, rank1[name]), f"{name} differs between ranks"
        torch.testing.assert_close(tensor, single[name], rtol=1e-4, atol=1e-5)
        if ".lora_" not in name:
            # PEFT's names: base_model.model.<hf name> with `.base_layer` before a wrapped weight.
            hf = name.removeprefix("base_model.model.").replace(".base_layer", "")
            assert torch.equal(tensor, base[hf]), f"{name}: the frozen base moved"
    trained_b = [rank0[n] for n in adapters if "lora_B" in n]
    assert any(bool(b.abs().sum() > 0) for b in trained_b), "the adapter did not train"
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(metrics) == STEPS
    assert all(m["grad_norm"] > 0 for m in metrics)
    for rank in (0, 1):
        straight = torch.load(out / f"straight-rank{rank}.pt")
        resumed = torch.load(out / f"resumed-rank{rank}.pt")
        for name, tensor in straight.items():
            assert torch.equal(resumed[name], tensor), f"rank {rank}: {name} differs on resume"
    version_dir = RunDir(out / "straight").weights_dir(f"v{STEPS}")
    assert sorted(p.name for p in version_dir.iterdir()) == [ADAPTER_CONFIG, ADAPTER_WEIGHTS]


def test_a_session_publishes_each_version_as_a_peft_adapter_that_peft_loads(
    model: Path, tmp_path: Path
) -> None:
    """The adapter of v1 is a valid PEFT directory: `PeftModel.from_pretrained` on the base
    gives the session's trained policy, logit for logit."""
    torch.set_num_threads(1)
    spec = job_spec(RANK, learning_rate=LR, precision="fp32")
    session = TrainerSession.open(spec, model_dir=model, run_dir=RunDir(tmp_path / "run"))
    assert session.weights_dir == model  # v0 is the base model itself
    session.trainer.train_step(synthetic_batch(1))
    version, path = session.commit_step({"next": 1})
    assert version == "v1"
    assert session.weights_dir == path
    assert json.loads((path / ADAPTER_CONFIG).read_text())["r"] == RANK
    loaded = load_adapter(load_policy(model, torch.device("cpu")), path).eval()
    trained = session.trainer.module.eval()
    ids = torch.tensor([[3, 10, 11, 12, 13, 14]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, trained(ids).logits, rtol=0, atol=1e-6)

"""Sharded training with FSDP2: two gloo ranks launched by torchrun match one process training
on the whole batch, with micro-batched gradient accumulation, in float32 and in bfloat16, and
a run resumed from its sharded checkpoint continues exactly as an uninterrupted one.

Each rank writes its results to files and a `done-rank<R>` marker before the process group
is torn down; the tests judge on those files, not on the launcher's exit status, because gloo
occasionally aborts inside `destroy_process_group` after all work is done.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from dressage_testkit.trainer import small_model, synthetic_batch

from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy
from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
LR = 1e-2


def _launch(model: Path, out: Path, *extra: str, worker: str = "dressage_testkit.trainer") -> Path:
    # The checkout's own testkit, not whichever the environment installed.
    path = os.pathsep.join((str(ROOT), str(ROOT / "testkit")))
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", worker, "--model", str(model), "--out", str(out), *extra,
    ]  # fmt: skip
    done = run_command(cmd, env=env, timeout=300)
    finished = all((out / f"done-rank{r}").is_file() for r in (0, 1))
    assert finished, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(scope="module")
def fp32_run(model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A 16-token budget cuts every rank's shard into several micro-batches (unequal counts),
    # logprobs come 5 tokens at a time and every decoder layer is recomputed in the backward.
    out = tmp_path_factory.mktemp("fp32")
    return _launch(
        model,
        out,
        *("--steps", str(STEPS), "--micro-tokens", "16", "--chunk-tokens", "5"),
        *("--activation-checkpointing", "--resume"),
    )


def _single(model: Path, steps: int, precision: str = "fp32") -> tuple[GRPOTrainer, list]:
    torch.set_num_threads(1)
    config = TrainerConfig(learning_rate=LR, precision=precision)
    trainer = GRPOTrainer(load_policy(model, torch.device("cpu")), config)
    history = [trainer.train_step(synthetic_batch(step)) for step in range(1, steps + 1)]
    return trainer, history


def test_two_fsdp_ranks_with_micro_batches_and_checkpointing_match_one_process(
    model: Path, fp32_run: Path
) -> None:
    rank0, rank1 = torch.load(fp32_run / "rank0.pt"), torch.load(fp32_run / "rank1.pt")
    initial = load_policy(model, torch.device("cpu")).state_dict()
    assert rank0.keys() == rank1.keys() == initial.keys()
    for name in rank0:
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between ranks"
    assert any(not torch.equal(rank0[n], initial[n]) for n in rank0), "training changed nothing"

    single, history = _single(model, STEPS)
    # Float32 throughout: only the order of the sums differs (per-rank shards, micro-batches,
    # reduce-scatter), a few float32 ulps on updates of size ~lr per step.
    for name, tensor in single.module.state_dict().items():
        torch.testing.assert_close(rank0[name], tensor, rtol=1e-4, atol=1e-5)
    sharded = json.loads((fp32_run / "metrics.json").read_text())
    for ours, theirs in zip(sharded, history, strict=True):
        for key in ("reward", "loss", "train_rollout_logprob_abs_diff", "clip_fraction", "entropy"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
        assert ours["grad_norm"] == pytest.approx(theirs["grad_norm"], rel=1e-4)


def test_a_run_resumed_from_its_sharded_checkpoint_continues_identically(fp32_run: Path) -> None:
    for rank in (0, 1):
        straight = torch.load(fp32_run / f"straight-rank{rank}.pt")
        resumed = torch.load(fp32_run / f"resumed-rank{rank}.pt")
        for name, tensor in straight.items():
            assert torch.equal(resumed[name], tensor), f"rank {rank}: {name} differs"
    # The sessions train like the bare trainer (same batches; default micro-batching).
    bare = torch.load(fp32_run / "rank0.pt")
    for name, tensor in torch.load(fp32_run / "straight-rank0.pt").items():
        torch.testing.assert_close(bare[name], tensor, rtol=1e-4, atol=1e-5)


def test_bf16_fsdp_ranks_stay_within_bfloat16_rounding_of_float32_training(
    model: Path, tmp_path: Path
) -> None:
    out = _launch(model, tmp_path / "bf16", "--steps", "1", "--precision", "bf16")
    rank0, rank1 = torch.load(out / "rank0.pt"), torch.load(out / "rank1.pt")
    for name in rank0:
        assert rank0[name].dtype == torch.float32, f"{name}: master weights stay float32"
        assert torch.equal(rank0[name], rank1[name]), f"{name} differs between ranks"
    initial = load_policy(model, torch.device("cpu")).state_dict()
    reference, history = _single(model, 1)
    ref = reference.module.state_dict()
    ours = torch.cat([(rank0[n] - initial[n]).flatten() for n in ref])
    theirs = torch.cat([(ref[n] - initial[n]).flatten() for n in ref])
    # AdamW's first step moves every weight by about +-lr (the sign of its gradient), so the
    # bfloat16 run agrees with float32 except where a gradient is so close to zero that
    # bfloat16 rounding (2^-8 relative) flips its sign; those entries differ by up to 2 lr.
    differs = (ours - theirs).abs() > 1e-4
    assert differs.float().mean() < 0.02
    assert torch.nn.functional.cosine_similarity(ours, theirs, dim=0) > 0.98
    metrics = json.loads((out / "metrics.json").read_text())[0]
    # Logits in bfloat16 carry ~0.4% relative error per rounding through a few layers.
    assert metrics["loss"] == pytest.approx(history[0]["loss"], rel=0.05)
    assert metrics["entropy"] == pytest.approx(history[0]["entropy"], rel=0.02)
    assert metrics["grad_norm"] == pytest.approx(history[0]["grad_norm"], rel=0.05)


def test_a_gang_publishes_its_sharded_weights_to_a_real_engine(model: Path, tmp_path: Path) -> None:
    """Both ranks gather every parameter while rank 0 broadcasts each bucket to the engine:
    the engine then serves exactly the gang's trained weights under the new version."""
    from dressage_testkit.engine import start_engine, weight_version_of
    from transformers import LlamaForCausalLM

    from tests.integration.test_weight_sync import engine_logprobs, model_logprobs

    with start_engine(model=str(model), weight_version="v0") as engine:
        out = _launch(
            model,
            tmp_path / "gang",
            *("--steps", "2", "--engine-url", engine.base_url),
            worker="dressage_testkit.orchestrator",
        )
        version = {"weight_version": weight_version_of(engine.base_url)}
        output, served = asyncio.run(engine_logprobs(engine.base_url))

    assert version["weight_version"] == "v-gang"
    trained = LlamaForCausalLM.from_pretrained(model).eval()
    weights = torch.load(out / "rank0.pt")
    trained.load_state_dict(weights)
    torch.testing.assert_close(served, model_logprobs(trained, output), atol=1e-5, rtol=0)
    # Every rank took part in every gather, one parameter at a time.
    handed = [json.loads((out / f"published-rank{r}.json").read_text())["tensors"] for r in (0, 1)]
    assert handed == [len(weights)] * 2
    initial = LlamaForCausalLM.from_pretrained(model).eval()
    # The trained weights are not the engine's initial ones (the comparison above can fail).
    assert (
        max(abs(a - b) for a, b in zip(model_logprobs(initial, output), served, strict=True)) > 1e-3
    )


def test_a_gang_resumed_with_older_optimizer_state_loads_each_ranks_shards_of_both(
    model: Path, tmp_path: Path
) -> None:
    """Checkpoints carry the optimizer state every second step: resuming the checkpoint of
    step 3 gives every rank its step-3 weight shards and its step-2 optimizer shards."""
    out = _launch(model, tmp_path / "stale", "--steps", "1", "--stale-optimizer")
    for rank in (0, 1):
        result = json.loads((out / f"stale-rank{rank}.json").read_text())
        assert result == {
            "step": 3,
            "optimizer_step": 2,
            "weights": True,
            "optimizer": True,
            "warned": True,
        }, rank

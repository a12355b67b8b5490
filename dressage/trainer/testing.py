"""Helpers for tests and benchmarks of the trainer: a very small Llama checkpoint and
reproducible synthetic batches (no engine needed)."""

from __future__ import annotations

import random
from pathlib import Path

from dressage.data.groups import Group, TrainBatch
from dressage.data.samples import Sample
from dressage.model.tiny import TinyModelConfig, build_tiny_model

SMALL = TinyModelConfig(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    max_position_embeddings=64,
)


def small_model(out_dir: Path, seed: int = 0) -> Path:
    """A one-layer Llama checkpoint with the project's tokenizer (builds in well under 1 s)."""
    return build_tiny_model(out_dir, seed=seed, config=SMALL)


def synthetic_batch(
    step: int, *, groups: int = 3, group_size: int = 3, vocab: int = 60
) -> TrainBatch:
    """A reproducible batch with random tokens, rewards and off-policy rollout logprobs."""
    rng = random.Random(f"batch:{step}")
    out = []
    for g in range(groups):
        prompt = [rng.randrange(8, vocab) for _ in range(rng.randint(2, 5))]
        samples = []
        for i in range(group_size):
            response = [rng.randrange(8, vocab) for _ in range(rng.randint(1, 4))]
            samples.append(
                Sample.build(
                    prompt_tokens=prompt,
                    response_tokens=response,
                    response_versions=[f"v{step}"] * len(response),
                    rollout_log_probs=[-rng.uniform(2.0, 6.0) for _ in response],
                    reward=float(rng.random() < 0.5),
                    group_id=f"g{step}-{g}",
                    parent_traj_id=f"g{step}-{g}-{i}",
                )
            )
        out.append(Group(f"g{step}-{g}", tuple(samples)))
    return TrainBatch(groups=tuple(out))


def ddp_worker(argv: list[str] | None = None) -> int:
    """A trainer rank for the data-parallel test: train on synthetic batches, save weights.

    Run under torchrun: `torchrun --nproc_per_node 2 -m dressage.trainer.testing --model DIR
    --out DIR --steps N`. Rank 0 draws each batch and broadcasts it, as the training loop does;
    every rank writes its parameters to `OUT/rank<R>.pt` and rank 0 its metrics to
    `OUT/metrics.json`.
    """
    import argparse
    import json

    import torch

    from dressage.trainer.distributed import (
        broadcast_object,
        current_env,
        init_distributed,
        shutdown_distributed,
    )
    from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    env = current_env()
    device = torch.device("cpu")
    init_distributed(env, device)
    try:
        trainer = GRPOTrainer(
            load_policy(args.model, device), TrainerConfig(learning_rate=args.lr), env, device
        )
        history = []
        for step in range(1, args.steps + 1):
            batch = broadcast_object(synthetic_batch(step) if env.is_main else None, env)
            history.append(trainer.train_step(batch))
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save(trainer.module.state_dict(), args.out / f"rank{env.rank}.pt")
        if env.is_main:
            (args.out / "metrics.json").write_text(json.dumps(history))
    finally:
        shutdown_distributed()
    return 0


if __name__ == "__main__":
    from dressage.trainer.distributed import exit_process

    raise SystemExit(exit_process(ddp_worker()))

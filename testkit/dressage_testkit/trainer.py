"""Helpers for tests and benchmarks of the trainer: very small Llama and Qwen3-MoE checkpoints
and reproducible synthetic batches, optionally with rollout routes (no engine needed)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dressage.data.expert_routing import RoutedExperts
from dressage.data.groups import Group, TrainBatch
from dressage.data.samples import Sample
from dressage.model.tiny import TinyModelConfig, build_tiny_model
from dressage.model.tiny_moe import TinyMoeConfig, build_tiny_moe_model

SMALL = TinyModelConfig(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    max_position_embeddings=64,
)


SMALL_MOE = TinyMoeConfig(
    hidden_size=32,
    intermediate_size=64,
    moe_intermediate_size=16,
    num_experts=4,
    num_experts_per_tok=2,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    max_position_embeddings=64,
)


def small_model(out_dir: Path, seed: int = 0) -> Path:
    """A one-layer Llama checkpoint with the project's tokenizer (builds in well under 1 s)."""
    return build_tiny_model(out_dir, seed=seed, config=SMALL)


def small_moe_model(out_dir: Path, seed: int = 0) -> Path:
    """A two-layer Qwen3-MoE checkpoint (4 experts, top-2) with the project's tokenizer."""
    return build_tiny_moe_model(out_dir, seed=seed, config=SMALL_MOE)


def with_random_routes(
    batch: TrainBatch, *, num_layers: int, top_k: int, num_experts: int, seed: int
) -> TrainBatch:
    """`batch` with reproducible random rollout routes on every sample (distinct experts per
    token and layer, every token but the last routed), as a rollout would record them."""
    import struct

    rng = random.Random(f"routes:{seed}")
    groups = []
    for group in batch.groups:
        samples = []
        for sample in group.samples:
            rows = len(sample.tokens) - 1
            ids = [
                e for _ in range(rows * num_layers) for e in rng.sample(range(num_experts), top_k)
            ]
            data = struct.pack(f"<{len(ids)}i", *ids)
            routes = RoutedExperts(data, rows, num_layers * top_k)
            samples.append(replace(sample, routed_experts=routes))
        groups.append(Group(group.group_id, tuple(samples)))
    return replace(batch, groups=tuple(groups))


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


def training_batch(step: int, model: Any) -> TrainBatch:
    """`synthetic_batch(step)`, with random rollout routes when `model` is an MoE model."""
    from dressage.trainer.routing_replay import route_shape

    batch = synthetic_batch(step)
    shape = route_shape(model)
    if shape is None:
        return batch
    return with_random_routes(
        batch,
        num_layers=shape.num_layers,
        top_k=shape.top_k,
        num_experts=shape.num_experts,
        seed=step,
    )


def job_spec(lora_rank: int = 0, **training: object) -> Any:
    """A CPU job spec for trainer tests (`training` sets `spec.training` fields; `lora_rank`
    above 0 trains a LoRA adapter of that rank on the attention projections)."""
    from dressage.api.job import AsyncRLJobSpec, ModelSpec, TrainerSpec, TrainingSpec
    from dressage.api.lora import LoraSpec

    lora = LoraSpec(rank=lora_rank, alpha=2.0 * lora_rank) if lora_rank else None
    return AsyncRLJobSpec(
        model=ModelSpec(source="unused", lora=lora),
        trainer=TrainerSpec(gpus_per_node=0),
        training=TrainingSpec(**training),  # type: ignore[arg-type]
    )


def gathered_weights(trainer: Any) -> dict[str, Any]:
    """Every parameter of `trainer`'s policy in full on this rank (collective when sharded)."""
    out = {}
    for name, tensor in trainer.module.state_dict().items():
        full = getattr(tensor, "full_tensor", None)
        out[name] = (full() if callable(full) else tensor).detach().cpu().clone()
    return out


def gathered_state(trainer: Any) -> dict[str, Any]:
    """The policy's full float32 weights and the optimizer's full state (each AdamW moment
    whole, by parameter name; none before the first step) on this rank: comparable between
    gangs of any world size (collective when sharded)."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    def full(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: full(v) for k, v in value.items()}
        if isinstance(value, list):
            return [full(v) for v in value]
        gather = getattr(value, "full_tensor", None)
        if callable(gather):
            value = gather()
        return value.detach().cpu().clone() if hasattr(value, "detach") else value

    if not trainer.optimizer.state:
        # `get_state_dict` would give a fresh optimizer a state (a zero step).
        return {"model": full(get_model_state_dict(trainer.model)), "optimizer": None}
    model, optimizer = get_state_dict(trainer.model, trainer.optimizer)
    return {"model": full(model), "optimizer": full(optimizer)}


def ddp_worker(
    argv: list[str] | None = None,
    *,
    publish: Callable[[Any, Any, str, Path], None] | None = None,
) -> int:
    """A trainer rank for the data-parallel tests: train on synthetic batches, save weights.

    Run under torchrun: `torchrun --nproc_per_node 2 -m dressage_testkit.trainer --model DIR
    --out DIR --steps N [--precision P] [--micro-tokens T] [--chunk-tokens C]
    [--activation-checkpointing] [--resume] [--engine-url URL] [--routing-replay MODE]`. Rank 0
    draws each batch (`training_batch`: with random rollout routes for an MoE model) and
    broadcasts it, as the training loop does; every rank writes its full parameters
    to `OUT/rank<R>.pt` and rank 0 its metrics to `OUT/metrics.json`. With `--resume` each
    rank also trains through a `TrainerSession` that is reopened from its sharded checkpoint
    after `N - 1` steps (`OUT/resumed-rank<R>.pt`) and one that is not
    (`OUT/straight-rank<R>.pt`), both with the job defaults for logprob chunking and
    activation checkpointing. With `--engine-url` the trained weights are then handed to
    `publish(trainer, env, engine_url, out)` (the orchestration layer's
    `dressage_testkit.orchestrator` worker publishes them over a weight-update group; the
    trainer layer knows no publisher). With
    `--stale-optimizer` a session checkpointing the optimizer state every second step trains
    3 steps and is reopened: `OUT/stale-rank<R>.json` says whether this rank's weights are
    step 3's and its optimizer shards step 2's. Each `--reshard-run DIR UNTIL` opens a
    session on run directory `DIR` (resuming whatever checkpoint it holds, of any world
    size), trains it to step `UNTIL` and has rank 0 write `gathered_state` as opened and as
    trained to `OUT/<name of DIR>-open.pt` and `-end.pt`. Each rank writes
    `OUT/done-rank<R>` last, before the process
    group is torn down, so a test judges on complete files.
    """
    import argparse
    import json

    import torch

    from dressage.trainer.checkpoint import RunDir
    from dressage.trainer.distributed import (
        broadcast_object,
        current_env,
        init_distributed,
        shutdown_distributed,
    )
    from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy
    from dressage.trainer.lora import wrap_lora
    from dressage.trainer.session import TrainerSession

    parser = argparse.ArgumentParser()
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--micro-tokens", type=int, default=8192)
    parser.add_argument("--chunk-tokens", type=int, default=1024)
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--engine-url", default=None)
    parser.add_argument("--stale-optimizer", action="store_true")
    parser.add_argument("--reshard-run", nargs=2, action="append", default=[])
    parser.add_argument("--routing-replay", default="off", choices=("off", "record", "replay"))
    parser.add_argument("--lora-rank", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    env = current_env()
    device = torch.device("cpu")
    init_distributed(env, device)
    try:
        config = TrainerConfig(
            learning_rate=args.lr,
            precision=args.precision,
            max_tokens_per_micro_batch=args.micro_tokens,
            logprob_chunk_tokens=args.chunk_tokens,
            activation_checkpointing=args.activation_checkpointing,
            routing_replay=args.routing_replay,
        )
        policy = load_policy(args.model, device)
        if args.lora_rank:
            torch.manual_seed(0)  # the same adapter init on every rank and in the reference
            policy = wrap_lora(policy, job_spec(args.lora_rank).model.lora)
        trainer = GRPOTrainer(policy, config, env, device)
        history = []
        for step in range(1, args.steps + 1):
            batch = broadcast_object(
                training_batch(step, trainer.module) if env.is_main else None, env
            )
            history.append(trainer.train_step(batch))
        args.out.mkdir(parents=True, exist_ok=True)
        torch.save(gathered_weights(trainer), args.out / f"rank{env.rank}.pt")
        if env.is_main:
            (args.out / "metrics.json").write_text(json.dumps(history))
        if args.engine_url:
            if publish is None:
                raise SystemExit("--engine-url needs the dressage_testkit.orchestrator worker")
            publish(trainer, env, args.engine_url, args.out)
        if args.stale_optimizer:
            _resume_with_stale_optimizer(args.model, args.out, env, args.lr)
        for run, until in args.reshard_run:
            reshard_run(args.model, Path(run), int(until), env, args.out, args.lr)
        if args.resume:
            spec = job_spec(
                args.lora_rank,
                learning_rate=args.lr,
                precision=args.precision,
                max_tokens_per_micro_batch=args.micro_tokens,
                checkpoint_in_background=True,
            )

            def session(run: str) -> TrainerSession:
                return TrainerSession.open(
                    spec, model_dir=args.model, run_dir=RunDir(args.out / run), env=env
                )

            def train(s: TrainerSession, until: int) -> None:
                while s.state.step < until:
                    step = s.state.step + 1
                    s.trainer.train_step(synthetic_batch(step))
                    s.commit_step({"next": step})
                s.wait_for_checkpoint()

            straight = session("straight")
            train(straight, args.steps)
            torch.save(gathered_weights(straight.trainer), args.out / f"straight-rank{env.rank}.pt")
            first = session("interrupted")
            train(first, args.steps - 1)
            del first
            resumed = session("interrupted")
            if not resumed.resumed or resumed.state.step != args.steps - 1:
                raise RuntimeError(f"resumed at step {resumed.state.step}, not {args.steps - 1}")
            train(resumed, args.steps)
            torch.save(gathered_weights(resumed.trainer), args.out / f"resumed-rank{env.rank}.pt")
        (args.out / f"done-rank{env.rank}").write_text("")
    finally:
        shutdown_distributed()
    return 0


def reshard_run(model: Path, run: Path, until: int, env: Any, out: Path, lr: float) -> Any:
    """See `ddp_worker --reshard-run`; returns the trained session."""
    import torch

    from dressage.trainer.checkpoint import RunDir
    from dressage.trainer.session import TrainerSession

    spec = job_spec(learning_rate=lr, optimizer_checkpoint_every=2)
    session = TrainerSession.open(spec, model_dir=model, run_dir=RunDir(run), env=env)
    opened = gathered_state(session.trainer) | {"step": session.state.step}
    while session.state.step < until:
        session.trainer.train_step(synthetic_batch(session.state.step + 1))
        session.commit_step({"next": session.state.step})
    session.wait_for_checkpoint()
    trained = gathered_state(session.trainer) | {"step": session.state.step}
    if env.is_main:
        torch.save(opened, out / f"{run.name}-open.pt")
        torch.save(trained, out / f"{run.name}-end.pt")
    return session


def _resume_with_stale_optimizer(model: Path, out: Path, env: Any, lr: float) -> None:
    """See `ddp_worker --stale-optimizer`."""
    import json
    import warnings

    import torch

    from dressage.trainer.checkpoint import RunDir
    from dressage.trainer.session import TrainerSession
    from dressage.trainer.shards import local_shards

    spec = job_spec(learning_rate=lr, optimizer_checkpoint_every=2)

    def session() -> TrainerSession:
        return TrainerSession.open(spec, model_dir=model, run_dir=RunDir(out / "stale"), env=env)

    def train(s: TrainerSession, until: int) -> None:
        while s.state.step < until:
            s.trainer.train_step(synthetic_batch(s.state.step + 1))
            s.commit_step({})
        s.wait_for_checkpoint()

    first = session()
    train(first, 2)
    optimizer_at_2 = local_shards(first.trainer)["optimizer"]
    train(first, 3)
    weights_at_3 = local_shards(first.trainer, optimizer=False)["model"]
    del first
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = session()
    shards = local_shards(resumed.trainer)

    def same(a: Any, b: Any) -> bool:
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and torch.equal(a, b)
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, list | tuple):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
        return bool(a == b)

    result = {
        "step": resumed.state.step,
        "optimizer_step": resumed.optimizer_step,
        "weights": same(shards["model"], weights_at_3),
        "optimizer": same(shards["optimizer"], optimizer_at_2),
        "warned": any("optimizer state of step 2" in str(w.message) for w in caught),
    }
    train(resumed, 4)
    (out / f"stale-rank{env.rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    from dressage.trainer.distributed import exit_process

    raise SystemExit(exit_process(ddp_worker()))

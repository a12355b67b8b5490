"""Trainer memory per rank: replicated data parallelism against FSDP2 sharding.

Trains a random-initialised ~100M-parameter Llama (transformers `LlamaConfig`, built in memory
by `_llama.py`, nothing downloaded) for a few GRPO steps on CPU and measures each rank's peak
resident memory while training, for 1 and 2 ranks (gloo), in two designs:

- `replicated`: every rank holds the whole float32 model, its gradients and AdamW state, DDP
  all-reduces the gradients, and one forward over the rank's whole shard materialises the
  full-vocabulary float32 log-softmax (the design FSDP2 replaces);
- `fsdp2`: `dressage.trainer.grpo.GRPOTrainer` (sharded over the ranks when there are two,
  token-budget micro-batches, chunked logprobs);
- `fsdp2-lora`: the same trainer on the model wrapped with a rank-16 LoRA adapter on every
  projection (`dressage.trainer.lora.wrap_lora`, what `spec.model.lora` does): the base frozen,
  so gradients and AdamW state exist for the adapter only.

Memory is the process's peak RSS (`VmHWM`, reset through `/proc/self/clear_refs` once the
model is built) minus its RSS before the model existed; glibc is told to return every large
allocation to the system (`MALLOC_MMAP_THRESHOLD_`), so RSS follows live tensors. Bytes per
parameter = that peak / parameters. Prints a table and writes
`benchmarks/results/trainer_memory.json`.

    python benchmarks/trainer_memory.py [--steps 2] [--samples 8] [--length 64]
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python benchmarks/trainer_memory.py`
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _llama import parameter_count, random_llama, synthetic_batch  # noqa: E402
from _runs import load_average, write_result  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "trainer_memory.json"
MODEL = {
    "vocab_size": 8192,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 14,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "max_position_embeddings": 512,
    "tie_word_embeddings": False,
}
"""~101M parameters: 14 decoder layers of 6.3M (what one FSDP2 unit gathers at a time; a real
LLM has 28-64 layers) and 12% of the parameters in the embedding and LM head (Qwen3-8B: 15%)."""


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
"""The LoRA design's target modules: every projection (`examples/local-lora.yaml`'s)."""


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _replicated_step(model, optimizer, batch, env) -> None:  # type: ignore[no-untyped-def]
    import torch

    from dressage.trainer.batch import score_batch, shard, to_tensors, trained_token_count
    from dressage.trainer.loss import LossInputs, grpo_loss, token_logprobs_and_entropy

    scored = score_batch(batch)
    tensors = to_tensors(shard(scored, env.rank, env.world_size), 0)
    optimizer.zero_grad(set_to_none=True)
    logits = model(input_ids=tensors.input_ids, attention_mask=tensors.attention_mask).logits
    logprobs, _ = token_logprobs_and_entropy(logits[:, :-1], tensors.targets)
    out = grpo_loss(
        LossInputs(
            logprobs=logprobs,
            rollout_logprobs=tensors.rollout_logprobs,
            advantages=tensors.advantages,
            loss_mask=tensors.loss_mask,
            loss_denominator=float(trained_token_count(scored)),
        )
    )
    (out.loss * env.world_size).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def worker(args: argparse.Namespace) -> None:
    """One rank: build, train `args.steps` steps, write this rank's figures to `args.out`."""
    import torch

    from dressage.trainer.distributed import current_env, init_distributed, shutdown_distributed
    from dressage.trainer.grpo import GRPOTrainer, TrainerConfig

    torch.set_num_threads(1)
    env = current_env()
    device = torch.device("cpu")
    init_distributed(env, device)
    try:
        # The libraries the measured code uses are imported before the baseline is read: their
        # code and tables (transformers' alone is about 190 MiB) are not the training's memory.
        import transformers.models.llama.modeling_llama  # noqa: F401

        if args.mode == "fsdp2-lora":
            import peft  # noqa: F401
        gc.collect()
        before = _status_kb("VmRSS")
        model = random_llama(MODEL)
        params = parameter_count(model)
        batch = synthetic_batch(max(1, args.samples // 4), 4, args.length, MODEL["vocab_size"])
        if args.mode in ("fsdp2", "fsdp2-lora"):
            if args.mode == "fsdp2-lora":
                from dressage.api.lora import LoraSpec
                from dressage.trainer.lora import wrap_lora

                model = wrap_lora(model, LoraSpec(rank=16, alpha=32, target_modules=LORA_TARGETS))
            trainer = GRPOTrainer(model, TrainerConfig(precision=args.precision), env, device)

            def step() -> None:
                trainer.train_step(batch)
        else:
            from torch.nn.parallel import DistributedDataParallel

            wrapped = DistributedDataParallel(model) if env.distributed else model
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

            def step() -> None:
                _replicated_step(wrapped, optimizer, batch, env)

        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
        started = time.monotonic()
        for _ in range(args.steps):
            step()
        seconds = (time.monotonic() - started) / args.steps
        gc.collect()
        peak = _status_kb("VmHWM") - before
        held = _status_kb("VmRSS") - before
        result = {
            "rank": env.rank,
            "parameters": params,
            "peak_bytes": peak * 1024,
            "held_after_step_bytes": held * 1024,
            "seconds_per_step": seconds,
        }
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"rank{env.rank}.json").write_text(json.dumps(result))
    finally:
        shutdown_distributed()


def run_config(mode: str, world: int, args: argparse.Namespace, out: Path) -> list[dict]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        OMP_NUM_THREADS="1",
        MALLOC_MMAP_THRESHOLD_="65536",
    )
    common = [
        str(Path(__file__).resolve()), "--worker", "--mode", mode, "--out", str(out),
        "--steps", str(args.steps), "--samples", str(args.samples), "--length", str(args.length),
        "--precision", args.precision,
    ]  # fmt: skip
    if world == 1:
        cmd = [sys.executable, *common]
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd = [*launcher, "--nproc_per_node", str(world), *common]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    # Ranks write their figures before the process group is torn down; judge on the files.
    files = [out / f"rank{r}.json" for r in range(world)]
    if not all(f.is_file() for f in files):
        raise RuntimeError(f"{mode} x{world} failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return [json.loads(f.read_text()) for f in files]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--mode", default="fsdp2")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    import tempfile

    started = time.monotonic()
    load_before = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("replicated", "fsdp2", "fsdp2-lora"):
            for world in (1, 2):
                ranks = run_config(mode, world, args, Path(tmp) / f"{mode}-{world}")
                peak = max(r["peak_bytes"] for r in ranks)
                params = ranks[0]["parameters"]
                rows.append(
                    {
                        "design": mode,
                        "ranks": world,
                        "parameters": params,
                        "peak_bytes_per_rank": peak,
                        "bytes_per_parameter": peak / params,
                        "held_bytes_per_parameter": max(r["held_after_step_bytes"] for r in ranks)
                        / params,
                        "seconds_per_step": max(r["seconds_per_step"] for r in ranks),
                    }
                )
                print(
                    f"{mode:>10} x{world}: peak {peak / 2**20:8.1f} MiB/rank "
                    f"= {peak / params:5.2f} B/param, {rows[-1]['seconds_per_step']:.1f} s/step",
                    flush=True,
                )
    single = rows[0]["peak_bytes_per_rank"]
    sharded = rows[3]["peak_bytes_per_rank"]
    ratio = sharded / single
    print(f"2 FSDP2 ranks hold {ratio:.2f}x the single-rank replicated peak each (target <= 0.6)")
    by = {(r["design"], r["ranks"]): r["peak_bytes_per_rank"] for r in rows}
    lora_ratio = {
        str(world): by[("fsdp2-lora", world)] / by[("fsdp2", world)] for world in (1, 2)
    }
    print(f"a LoRA adapter's trainer holds {lora_ratio['1']:.2f}x (1 rank) and "
          f"{lora_ratio['2']:.2f}x (2 ranks) the full-weight peak per rank")
    result = {
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "load_average": {"before": load_before, "after": load_average()},
        "model": MODEL,
        "batch": {"samples": args.samples, "length": args.length, "steps": args.steps},
        "precision": args.precision,
        "device": "cpu (gloo)",
        "rows": rows,
        "fsdp2_2_ranks_over_single_rank": ratio,
        "lora_over_full_weights_by_ranks": lora_ratio,
        "target_ratio": 0.6,
        "wall_seconds": time.monotonic() - started,
    }
    write_result(RESULTS, result)
    print(f"in {result['wall_seconds']:.0f} s")


if __name__ == "__main__":
    main()

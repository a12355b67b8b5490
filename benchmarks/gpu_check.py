"""The GPU check: does the project train and serve on an accelerator? One figure line per part.

Parts (`--parts`, default all, in this order):

- `trainer`: `GRPOTrainer` takes optimizer steps on the device with the real GRPO loss on the
  project's tiny model (`dressage.model.build_tiny_model`, built offline); the loss and the
  gradient norm must be finite and the weights must move.
- `engine`: the embedded engine (`dressage engine serve --device D`) serves concurrent
  `/generate` requests from the device, reloads its weights from disk under a new version
  label and reports the device it computes on.
- `run`: a short `dressage run --device D` (trainer and embedded engine both on the device)
  completes its steps.
- `fsdp`: one-device FSDP2 (`fully_shard` over a process group of one, bf16 compute with
  float32 reduction and master weights through `MixedPrecisionPolicy`) trains a
  random-initialised Llama-shaped model of ~0.5 B parameters (built from a `LlamaConfig`,
  nothing downloaded).

Each part prints step time, tokens/s and peak device memory (torch's
`max_memory_allocated` after `reset_peak_memory_stats`; `n/a` on CPU), then one verdict line;
the exit status is 0 only when every part passed. `--device cpu --small` runs the same code
on CPU with small shapes in seconds, which is what the test suite does
(tests/integration/test_gpu_check.py); `scripts/gpu-check.sh` runs it on a GPU.

    python benchmarks/gpu_check.py --device cuda [--parts trainer,engine,run,fsdp] [--json F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python benchmarks/gpu_check.py`
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _llama import parameter_count, random_llama, synthetic_batch  # noqa: E402
from _runs import write_result  # noqa: E402

PARTS = ("trainer", "engine", "run", "fsdp")

HALF_B_LLAMA: dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
"""~0.51 B parameters: 28 decoder layers of 15.7 M plus a 32 k-token embedding and LM head."""
SMALL_LLAMA: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


@dataclass
class PartResult:
    """What one part measured; `ok` False carries the reason in `detail`."""

    part: str
    ok: bool = False
    step_seconds: float | None = None
    tokens_per_second: float | None = None
    peak_memory_bytes: int | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        def num(value: float | None, fmt: str) -> str:
            return "n/a" if value is None else format(value, fmt)

        peak = (
            "n/a" if self.peak_memory_bytes is None else f"{self.peak_memory_bytes / 2**30:.2f} GiB"
        )
        return (
            f"{self.part:<8} {'ok  ' if self.ok else 'FAIL'}  "
            f"step {num(self.step_seconds, '.4f')} s  "
            f"tokens/s {num(self.tokens_per_second, ',.0f')}  "
            f"peak memory {peak}  {self.detail}"
        )


@dataclass(frozen=True)
class CheckOptions:
    device: str
    small: bool
    workdir: Path

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


# --- device memory


def reset_peak(device: str) -> None:
    """Start a new peak-memory window on a CUDA device (nothing on CPU), after freeing what an
    earlier part left, so each part's peak is its own."""
    if device.startswith("cuda"):
        import gc

        import torch

        gc.collect()
        torch.cuda.synchronize(torch.device(device))
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(torch.device(device))


def peak_bytes(device: str) -> int | None:
    """Peak bytes torch allocated on a CUDA device in this window; None on CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    torch.cuda.synchronize(torch.device(device))
    return int(torch.cuda.max_memory_allocated(torch.device(device)))


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(torch.device(device))


# --- training data


def _train(
    trainer: Any, batch: Any, steps: int, device: str
) -> tuple[float, list[dict[str, float]]]:
    """One warm-up step, then `steps` timed ones; mean seconds per timed step and metrics."""
    metrics = [trainer.train_step(batch)]
    synchronize(device)
    started = time.perf_counter()
    for _ in range(steps):
        metrics.append(trainer.train_step(batch))
    synchronize(device)
    return (time.perf_counter() - started) / steps, metrics


def _check_metrics(metrics: list[dict[str, float]]) -> str | None:
    for i, m in enumerate(metrics):
        for key in ("loss", "grad_norm"):
            if not math.isfinite(m[key]):
                return f"step {i}: {key} is {m[key]}"
    if all(m["grad_norm"] == 0 for m in metrics):
        return "every gradient norm is 0: the loss does not reach the weights"
    return None


def _moved(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return any(not before[k].equal(after[k]) for k in before)


# --- parts


def check_trainer(opts: CheckOptions) -> PartResult:
    import torch

    from dressage.model import build_tiny_model
    from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy

    result = PartResult("trainer")
    model_dir = build_tiny_model(opts.workdir / "tiny")
    device = torch.device(opts.device)
    reset_peak(opts.device)
    model: Any = load_policy(model_dir, device)
    trainer = GRPOTrainer(model, TrainerConfig(learning_rate=1e-3), device=device)
    vocab = int(model.config.vocab_size)
    groups, size, length = (2, 4, 32) if opts.small else (8, 8, 256)
    batch = synthetic_batch(groups, size, length, vocab)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    tokens = groups * size * length
    seconds, metrics = _train(trainer, batch, 2 if opts.small else 5, opts.device)
    result.peak_memory_bytes = peak_bytes(opts.device)
    result.step_seconds = seconds
    result.tokens_per_second = tokens / seconds
    param_device = next(model.parameters()).device
    problem = _check_metrics(metrics)
    if problem is None and param_device.type != device.type:
        problem = f"the policy's parameters are on {param_device}, not {device}"
    if problem is None and not _moved(before, model.state_dict()):
        problem = "the optimizer steps left every weight unchanged"
    result.ok = problem is None
    result.detail = problem or (
        f"{len(metrics)} GRPO steps, {trainer.compute_dtype} compute, "
        f"loss {metrics[-1]['loss']:.4f}, grad_norm {metrics[-1]['grad_norm']:.3f}"
    )
    return result


async def _generate_all(url: str, prompts: list[list[int]], max_new: int) -> list[dict[str, Any]]:
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=120.0) as client:

        async def one(ids: list[int]) -> dict[str, Any]:
            reply = await client.post(
                "/generate",
                json={
                    "input_ids": ids,
                    "sampling_params": {
                        "max_new_tokens": max_new,
                        "temperature": 1.0,
                        "ignore_eos": True,
                    },
                    "return_logprob": True,
                },
            )
            reply.raise_for_status()
            body: dict[str, Any] = reply.json()
            return body

        return await asyncio.gather(*(one(p) for p in prompts))


def check_engine(opts: CheckOptions) -> PartResult:
    import httpx
    from dressage_testkit.processes import run_until_ready

    from dressage.model import build_tiny_model

    result = PartResult("engine")
    model_dir = build_tiny_model(opts.workdir / "tiny")
    requests, max_new = (4, 8) if opts.small else (64, 128)
    cmd = [
        sys.executable, "-m", "dressage", "engine", "serve", "--model", str(model_dir),
        "--port", "0", "--device", opts.device, "--max-batch-size", str(requests),
        "--weight-version", "0",
    ]  # fmt: skip
    rng = random.Random(1)
    prompts = [[rng.randrange(8, 40) for _ in range(16)] for _ in range(requests)]
    with run_until_ready("engine", cmd, "engine ready on ", startup_timeout_s=120) as engine:
        asyncio.run(_generate_all(engine.url, prompts[:1], 2))  # warm-up
        started = time.perf_counter()
        outputs = asyncio.run(_generate_all(engine.url, prompts, max_new))
        seconds = time.perf_counter() - started
        reload = httpx.post(
            f"{engine.url}/update_weights_from_disk",
            json={"model_path": str(model_dir), "weight_version": "1"},
            timeout=120.0,
        )
        after = asyncio.run(_generate_all(engine.url, prompts[:1], 2))
        # The engine plays the newest tested SGLang release, whose server info is /server_info
        # (/get_server_info is a deprecated alias there, logging a warning per call).
        info = httpx.get(f"{engine.url}/server_info", timeout=30.0).json()
    tokens = sum(int(o["meta_info"]["completion_tokens"]) for o in outputs)
    result.step_seconds = seconds / max_new
    result.tokens_per_second = tokens / seconds
    result.peak_memory_bytes = info.get("peak_memory_bytes")
    problem = None
    if tokens != requests * max_new:
        problem = f"{tokens} tokens generated, expected {requests * max_new}"
    elif not reload.is_success or not reload.json().get("success"):
        problem = f"/update_weights_from_disk answered {reload.status_code}: {reload.text}"
    elif after[0]["meta_info"].get("weight_version") != "1":
        problem = (
            f"after the reload the engine serves {after[0]['meta_info'].get('weight_version')}"
        )
    elif info.get("device") != opts.device:
        problem = f"the engine reports device {info.get('device')!r}, not {opts.device!r}"
    result.ok = problem is None
    result.detail = problem or (
        f"{requests} concurrent requests x {max_new} tokens, reload to version 1 ok"
    )
    return result


RUN_JOB = """\
apiVersion: dressage.io/v1alpha1
kind: AsyncRLJob
metadata:
  name: gpu-check
spec:
  model:
    source: builtin:tiny
    dtype: float32
  task:
    name: arithmetic
    params:
      maxOperand: 9
  trainer:
    gpusPerNode: {gpus}
  inference:
    replicas: 1
  rollout:
    mode: fully_async
    groupSize: {group_size}
    batchSize: {batch_size}
    maxNewTokens: 4
  training:
    steps: {steps}
    learningRate: 0.0003
  local:
    metricsPort: 0
    cacheDir: {cache}
"""


def check_run(opts: CheckOptions) -> PartResult:
    result = PartResult("run")
    steps, group_size, batch_size = (2, 4, 8) if opts.small else (5, 8, 32)
    job = opts.workdir / "gpu-check-job.yaml"
    job.write_text(
        RUN_JOB.format(
            gpus=1 if opts.cuda else 0,
            group_size=group_size,
            batch_size=batch_size,
            steps=steps,
            cache=json.dumps(str(opts.workdir / "cache")),
        )
    )
    runs = opts.workdir / "runs"
    cmd = [
        sys.executable, "-m", "dressage", "run", str(job), "--workdir", str(runs), "--fresh",
        "--device", opts.device,
    ]  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    started = time.perf_counter()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=150 if opts.small else 300
    )
    wall = time.perf_counter() - started
    history = runs / "gpu-check" / "history.jsonl"
    records = (
        [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        if history.is_file()
        else []
    )
    if records:
        train = [float(r["train_seconds"]) for r in records]
        result.step_seconds = sum(train) / len(train)
        trained = sum(float(r.get("trained_tokens", 0.0)) for r in records)
        result.tokens_per_second = trained / sum(train) if sum(train) > 0 else None
    peak = re.search(r"trainer peak GPU memory: ([0-9.]+) GiB", proc.stdout)
    if peak:
        result.peak_memory_bytes = int(float(peak.group(1)) * 2**30)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        result.detail = f"dressage run exited {proc.returncode}:\n{tail}"
    elif len(records) != steps:
        result.detail = f"{len(records)} of {steps} steps in {history}"
    else:
        result.ok = True
        result.detail = f"{steps} steps in {wall:.1f} s wall (trainer step time shown)"
    return result


def check_fsdp(opts: CheckOptions) -> PartResult:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import HashStore

    from dressage.trainer.grpo import GRPOTrainer, TrainerConfig

    result = PartResult("fsdp")
    device = torch.device(opts.device)
    if opts.cuda:
        torch.cuda.set_device(device.index or 0)  # set_device refuses a device without index
    shape = SMALL_LLAMA if opts.small else HALF_B_LLAMA
    groups, size, length = (1, 4, 32) if opts.small else (4, 4, 1024)
    owns_group = not dist.is_initialized()
    if owns_group:
        # A process group of one rank: FSDP2 runs its real sharded path (DTensor parameters,
        # reduce-scatter of float32 gradients) on this single device.
        dist.init_process_group(
            "nccl" if opts.cuda else "gloo",
            store=HashStore(),
            rank=0,
            world_size=1,
        )
    try:
        reset_peak(opts.device)
        model = random_llama(shape, device=device)
        params = parameter_count(model)
        config = TrainerConfig(
            learning_rate=1e-5, precision="bf16", max_tokens_per_micro_batch=8192
        )
        trainer = GRPOTrainer(model, config, device=device, shard=True)
        kinds = {type(p).__name__ for p in model.parameters()}
        batch = synthetic_batch(groups, size, length, int(shape["vocab_size"]))
        tokens = groups * size * length
        seconds, metrics = _train(trainer, batch, 2 if opts.small else 3, opts.device)
        result.peak_memory_bytes = peak_bytes(opts.device)
    finally:
        if owns_group:
            dist.destroy_process_group()
    result.step_seconds = seconds
    result.tokens_per_second = tokens / seconds
    result.extra = {"parameters": params, "tokens_per_step": tokens}
    problem = _check_metrics(metrics)
    if problem is None and kinds != {"DTensor"}:
        problem = f"parameters are {sorted(kinds)} after fully_shard, expected DTensor"
    result.ok = problem is None
    result.detail = problem or (
        f"{params / 1e6:.0f} M parameters, {tokens} tokens/step, FSDP2 bf16 "
        f"(fp32 reduce), loss {metrics[-1]['loss']:.4f}"
    )
    return result


CHECKS: dict[str, Callable[[CheckOptions], PartResult]] = {
    "trainer": check_trainer,
    "engine": check_engine,
    "run": check_run,
    "fsdp": check_fsdp,
}


def run_checks(
    parts: list[str], opts: CheckOptions, out: Callable[[str], None]
) -> list[PartResult]:
    """Run the parts in order; a part that raises is a failed part, the others still run."""
    results = []
    for name in parts:
        started = time.perf_counter()
        try:
            result = CHECKS[name](opts)
        except Exception as exc:
            result = PartResult(name, detail=f"{type(exc).__name__}: {exc}")
            out(traceback.format_exc())
        result.extra["part_seconds"] = round(time.perf_counter() - started, 2)
        out(result.line())
        results.append(result)
    return results


def verdict(results: list[PartResult], device: str) -> str:
    failed = [r.part for r in results if not r.ok]
    if failed:
        return f"gpu-check: FAIL on {device}: {', '.join(failed)} failed"
    return f"gpu-check: PASS on {device}: {', '.join(r.part for r in results)} all ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--small", action="store_true", help="small shapes (seconds on CPU)")
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch dir (default: temp)")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        parser.error(f"--parts: unknown {unknown}; choose from {','.join(PARTS)}")

    from dressage.engine.embedded.cli import device_problem

    problem = device_problem(args.device)
    if problem is not None:
        print(f"gpu-check: FAIL: --device: {problem}", flush=True)
        return 2
    import torch

    if args.device.startswith("cuda"):
        index = torch.device(args.device).index or 0
        print(f"device: {torch.cuda.get_device_name(index)}, torch {torch.__version__}, "
              f"CUDA {torch.version.cuda}", flush=True)  # fmt: skip
    else:
        print(f"device: cpu, torch {torch.__version__}", flush=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from dressage.trainer.grpo import quiet_transformers

    quiet_transformers()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        opts = CheckOptions(device=args.device, small=args.small, workdir=workdir)
        results = run_checks(parts, opts, lambda line: print(line, flush=True))
    line = verdict(results, args.device)
    if args.json is not None:
        write_result(
            args.json,
            {
                "device": args.device,
                "small": args.small,
                "verdict": line,
                "parts": [asdict(r) for r in results],
            },
        )
    print(line, flush=True)  # the verdict is the last line
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

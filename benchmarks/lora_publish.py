"""LoRA against full weights: bytes and seconds per publish over disk, on the same model.

For each model size of `weight_sync.py` (random-initialised Llama shapes of about 10M, 100M and
300M parameters, bfloat16 on disk as a GPU trainer serves them), one embedded engine process on
loopback plays SGLang 0.5.23 with `--enable-lora --max-lora-rank R`, and each round publishes:

- full weights (`weightSync: disk`, what a full-weight job does every step): write
  `model.safetensors` and fsync it, then pause (`in_place`) -> `POST /update_weights_from_disk`
  (and `/flush_cache`) -> continue;
- a LoRA adapter of rank R (`--rank`, 16) on every projection of every layer (`q_proj` ...
  `down_proj`, what `examples/local-lora.yaml` trains), what a LoRA job does every step
  (`dressage.weights.lora.LoraPublisher`): write `adapter_config.json` and
  `adapter_model.safetensors` and fsync them, then pause -> `POST /load_lora_adapter {lora_name,
  lora_path}` -> continue; the adapter two versions back is unloaded after it (not timed: the
  publisher does it in the background).

Bytes are the files written per publish (what storage and every engine read). Each LoRA publish
is checked: a greedy `/generate` naming the new adapter answers. The embedded engine keeps an
adapter's A and B beside the shared base weights and applies them in the forward pass, as SGLang
does (its LoRA memory pool), so loading one is reading its files; the full-weight seconds include
the engine reading and converting the whole checkpoint. Medians over the rounds. Prints a table
and writes `benchmarks/results/lora_publish.json` (`lora_publish_quick.json` with `--quick`: the
10M model, 2 rounds).

    python benchmarks/lora_publish.py [--sizes 10M,100M,300M] [--rank 16] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python benchmarks/lora_publish.py`
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _runs import write_result  # noqa: E402
from dressage_testkit.engine import start_engine  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from weight_sync import PROMPT, SIZES, random_weights, write_checkpoint, write_config  # noqa: E402

from dressage.engine import EngineClient, GenerateRequest, SamplingParams  # noqa: E402
from dressage.engine.embedded.model import ModelShape, parameter_shapes  # noqa: E402
from dressage.engine.lora import load_lora_adapter, unload_lora_adapter  # noqa: E402

RELEASE = "0.5.23"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def random_adapter(shape: ModelShape, rank: int, seed: int) -> dict[str, torch.Tensor]:
    """A PEFT adapter's tensors for every projection of `shape`, in bfloat16."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, (rows, cols) in (
        (n, d) for n, d in parameter_shapes(shape).items() if n.split(".")[-2] in TARGETS
    ):
        module = "base_model.model." + name.removesuffix(".weight")
        a = 0.01 * torch.randn((rank, cols), generator=generator)
        b = 0.01 * torch.randn((rows, rank), generator=generator)
        out[f"{module}.lora_A.weight"] = a.to(torch.bfloat16)
        out[f"{module}.lora_B.weight"] = b.to(torch.bfloat16)
    return out


def write_adapter(state: dict[str, torch.Tensor], rank: int, out: Path) -> tuple[int, float]:
    """Write a PEFT adapter directory and fsync it; (bytes, seconds)."""
    start = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": 2 * rank,
        "lora_dropout": 0.0,
        "target_modules": list(TARGETS),
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
    }
    (out / "adapter_config.json").write_text(json.dumps(config))
    save_file(state, str(out / "adapter_model.safetensors"), metadata={"format": "pt"})
    files = ("adapter_config.json", "adapter_model.safetensors")
    for name in files:
        with open(out / name, "rb+") as handle:
            os.fsync(handle.fileno())
    size = sum((out / n).stat().st_size for n in files)
    return size, time.perf_counter() - start


async def generates_with(client: EngineClient, adapter: str) -> None:
    params = SamplingParams(max_new_tokens=2, temperature=0.0, ignore_eos=True)
    response = await client.generate(
        GenerateRequest(input_ids=PROMPT, sampling_params=params, lora_path=adapter)
    )
    assert len(response.output_ids) == 2


async def measure(
    base_url: str,
    checkpoint: Path,
    shape: ModelShape,
    weights: dict[str, torch.Tensor],
    rank: int,
    repeats: int,
    work: Path,
) -> dict[str, Any]:
    full_write: list[float] = []
    full_load: list[float] = []
    lora_write: list[float] = []
    lora_load: list[float] = []
    full_bytes = lora_bytes = 0
    async with EngineClient(base_url) as client:
        for r in range(repeats):
            wrote, synced = write_checkpoint(weights, checkpoint / "model.safetensors")
            full_write.append(wrote + synced)
            full_bytes = (checkpoint / "model.safetensors").stat().st_size
            start = time.perf_counter()
            await client.pause_generation("in_place")
            await client.update_weights_from_disk(str(checkpoint), "v0", timeout_s=600)
            await client.continue_generation()
            full_load.append(time.perf_counter() - start)

            adapter = random_adapter(shape, rank, seed=r)
            name = f"v{r + 1}"
            lora_bytes, seconds = write_adapter(adapter, rank, work / name)
            lora_write.append(seconds)
            start = time.perf_counter()
            await client.pause_generation("in_place")
            await load_lora_adapter(client, name, str(work / name), timeout_s=600)
            await client.continue_generation()
            lora_load.append(time.perf_counter() - start)
            await generates_with(client, name)
            if r >= 2:
                await unload_lora_adapter(client, f"v{r - 1}")
    med = statistics.median
    full_total = med(full_write) + med(full_load)
    lora_total = med(lora_write) + med(lora_load)
    return {
        "full_bytes": full_bytes,
        "lora_bytes": lora_bytes,
        "bytes_ratio": round(full_bytes / lora_bytes, 1),
        "full_write_s": round(med(full_write), 4),
        "full_pause_to_continue_s": round(med(full_load), 4),
        "full_total_s": round(full_total, 4),
        "lora_write_s": round(med(lora_write), 4),
        "lora_pause_to_continue_s": round(med(lora_load), 4),
        "lora_total_s": round(lora_total, 4),
        "seconds_ratio": round(full_total / lora_total, 1),
        "runs": {
            "full_write_s": full_write,
            "full_pause_to_continue_s": full_load,
            "lora_write_s": lora_write,
            "lora_pause_to_continue_s": lora_load,
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES))
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="rounds (medians over them)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    parser.add_argument("--quick", action="store_true", help="smoke test: 10M, 2 rounds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.repeats = "10M", 2
    if args.out is None:
        name = "lora_publish_quick.json" if args.quick else "lora_publish.json"
        args.out = ROOT / "benchmarks" / "results" / name
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    rows = []
    work = Path(tempfile.mkdtemp(prefix="dressage-lora-"))
    try:
        for size in args.sizes.split(","):
            checkpoint = work / size
            shape = write_config(checkpoint, size)
            weights = random_weights(shape, 1)
            params = sum(t.numel() for t in weights.values())
            save_file(weights, str(checkpoint / "model.safetensors"))
            lora_args = ["--enable-lora", "--max-lora-rank", str(args.rank)]
            with start_engine(
                model=str(checkpoint),
                max_batch_size=1,
                threads=args.threads,
                sglang_release=RELEASE,
                extra_args=["--context-length", "64", *lora_args],
                startup_timeout_s=600,
            ) as engine:
                figures = asyncio.run(
                    measure(
                        engine.base_url, checkpoint, shape, weights, args.rank, args.repeats,
                        work / f"{size}-adapters",
                    )
                )  # fmt: skip
            rows.append({"size": size, "parameters": params, "rank": args.rank, **figures})
            del weights
            print(
                f"{size:>5} {params / 1e6:7.1f}M params: full {figures['full_bytes'] / 2**20:.1f} "
                f"MiB in {figures['full_total_s']:.3f}s, LoRA r{args.rank} "
                f"{figures['lora_bytes'] / 2**20:.2f} MiB in {figures['lora_total_s']:.3f}s: "
                f"{figures['bytes_ratio']:.0f}x fewer bytes, {figures['seconds_ratio']:.1f}x "
                "less time",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "lora_publish",
        "setup": {
            "engine": "embedded CPU engine, one process on loopback, float32 serving weights",
            "weights": "random Llama (transformers LlamaConfig), bfloat16 on disk",
            "adapter": f"rank {args.rank} on {', '.join(TARGETS)} of every layer, bfloat16",
            "sglang_release": RELEASE,
            "disk": "files written and fsynced, then read by the engine (page cache warm)",
            "repeats": args.repeats,
            "engine_threads": args.threads,
            "statistic": "median",
            "load_before": load_before,
        },
        "rows": rows,
    }
    result["setup"]["load_after"] = os.getloadavg()[0]
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

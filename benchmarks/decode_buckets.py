"""The embedded engine's decode step with rows of very different lengths: attending in length
buckets (`dressage.engine.embedded.model.length_buckets`) against one padded batch, where every row
gathers and attends over the longest row's context.

Batches are snapshots of a long-tail rollout: each row is a response of the long-tail task's
length distribution (`dressage.tasks.long_tail`, the defaults of `examples/local-long-tail.yaml`)
caught at a uniformly random point of its generation, after a 10-token prompt. For each batch
size the decoder runs `--steps` decode steps on the tiny model, one torch thread, and the
figure is the CPU time per step (process time, so other work on the machine counts little); a
paced engine keeps its pace only while a step's compute stays under its interval (20 ms in the
long-tail job).

    python benchmarks/decode_buckets.py [--batches 16,64,128] [--steps 30] [--quick]

Writes `benchmarks/results/decode_buckets.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import ROOT, load_average, write_result

from dressage.engine.embedded.model import Decoder, KVCache, ModelShape, load_weights
from dressage.engine.embedded.model import decoder as engine_decoder
from dressage.model import BUILTIN_TINY, default_cache_dir, resolve_model_source
from dressage.tasks.long_tail import LongTailTask

PROMPT = 10


def snapshot(rng: random.Random, task: LongTailTask, rows: int) -> list[int]:
    """Positions of `rows` responses caught at a random point of their generation."""
    positions = []
    for i in range(rows):
        length = task.response_tokens(rng.randrange(10**6), i % 8)
        positions.append(PROMPT + rng.randrange(length))
    return positions


def step_ms(decoder: Decoder, weights: Any, positions: list[int], steps: int) -> float:
    cache = KVCache(weights.shape, len(positions), max(positions) + steps + 2)
    slots = list(range(len(positions)))
    times = []
    for step in range(steps):
        now = [p + step for p in positions]
        started = time.process_time()
        decoder.decode(weights, cache, slots, [5] * len(slots), now)
        times.append(time.process_time() - started)
    return 1000 * statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", default="16,64,128")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--snapshots", type=int, default=5, help="batches drawn per size")
    parser.add_argument("--quick", action="store_true", help="5 steps, 2 snapshots")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/decode_buckets.json")
    args = parser.parse_args()
    steps, snapshots = (5, 2) if args.quick else (args.steps, args.snapshots)
    torch.set_num_threads(1)
    model_dir = resolve_model_source(BUILTIN_TINY, default_cache_dir())
    shape = ModelShape.from_config(json.loads((model_dir / "config.json").read_text()))
    weights = load_weights(model_dir, shape, "cpu")
    task = LongTailTask()
    rng = random.Random(0)
    bucketed = engine_decoder.length_buckets
    rows: list[dict[str, Any]] = []
    load = load_average()
    for batch in (int(b) for b in args.batches.split(",")):
        figures: dict[str, list[float]] = {"buckets": [], "padded": []}
        for _ in range(snapshots):
            positions = snapshot(rng, task, batch)
            decoder = Decoder(shape, max(positions) + steps + 2)
            for name, split in (("buckets", bucketed), ("padded", _one_bucket)):
                engine_decoder.length_buckets = split  # the decoder looks it up per step
                try:
                    figures[name].append(step_ms(decoder, weights, positions, steps))
                finally:
                    engine_decoder.length_buckets = bucketed
        row = {
            "batch": batch,
            "buckets_ms_per_step": round(statistics.median(figures["buckets"]), 3),
            "padded_ms_per_step": round(statistics.median(figures["padded"]), 3),
        }
        row["padded_over_buckets"] = round(
            row["padded_ms_per_step"] / row["buckets_ms_per_step"], 2
        )
        rows.append(row)
        print(
            f"batch {batch:>4}: {row['buckets_ms_per_step']:6.2f} ms/step in buckets, "
            f"{row['padded_ms_per_step']:6.2f} ms padded ({row['padded_over_buckets']:.2f}x)"
        )
    write_result(
        args.out,
        {
            "benchmark": "decode_buckets",
            "steps": steps,
            "snapshots": snapshots,
            "machine": {"cpus": os.cpu_count()},
            "load_average": [load, load_average()],
            "results": rows,
        },
    )
    return 0


def _one_bucket(positions: list[int]) -> list[list[int]]:
    """Every row in one padded batch (the decoder before length buckets)."""
    return [list(range(len(positions)))]


if __name__ == "__main__":
    raise SystemExit(main())

"""Embedded engine throughput: continuous batching against one request at a time.

Starts two real engine processes on loopback, one after the other so they do not share the CPU:
`--max-batch-size 32` (continuous batching) and `--max-batch-size 1` (each request waits for the
previous one to finish: the one-at-a-time baseline). Against each, sends 1, 8 and 32 concurrent
greedy requests of `--new-tokens` output tokens and measures generated tokens per second of wall
time (median over `--repeats` rounds). Prints both side by side with their ratio and writes
`benchmarks/results/engine_throughput.json`.

    python benchmarks/engine_throughput.py [--new-tokens 64] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable as `python benchmarks/engine_throughput.py`
    sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import write_result  # noqa: E402
from dressage_testkit.engine import start_engine  # noqa: E402

from dressage.engine import EngineClient, GenerateRequest, SamplingParams  # noqa: E402

CONCURRENCY = (1, 8, 32)


def prompt(i: int) -> list[int]:
    return [5, *(10 + (i * 7 + j) % 90 for j in range(4 + i % 6)), 2, 6]


async def one_round(client: EngineClient, concurrency: int, new_tokens: int) -> float:
    """Tokens per second for `concurrency` simultaneous requests."""
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    reqs = [
        GenerateRequest(input_ids=prompt(i), sampling_params=params) for i in range(concurrency)
    ]
    start = time.perf_counter()
    outs = await asyncio.gather(*(client.generate(r) for r in reqs))
    elapsed = time.perf_counter() - start
    return sum(len(o.output_ids) for o in outs) / elapsed


async def measure(base_url: str, new_tokens: int, repeats: int) -> dict[int, float]:
    async with EngineClient(base_url) as client:
        await one_round(client, 2, 8)  # warm-up: first forward passes, connection pool
        results = {}
        for concurrency in CONCURRENCY:
            rates = [await one_round(client, concurrency, new_tokens) for _ in range(repeats)]
            results[concurrency] = statistics.median(rates)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the engine")
    parser.add_argument("--model", default="builtin:tiny")
    parser.add_argument("--cache-dir", type=Path, default=None)
    default_out = ROOT / "benchmarks" / "results" / "engine_throughput.json"
    parser.add_argument("--out", type=Path, default=default_out)
    args = parser.parse_args()

    cache_dir = args.cache_dir or Path(tempfile.mkdtemp(prefix="dressage-bench-"))
    modes = {"batched": 32, "one_at_a_time": 1}
    figures: dict[str, dict[int, float]] = {}
    for mode, max_batch in modes.items():
        with start_engine(
            model=args.model, cache_dir=cache_dir, max_batch_size=max_batch, threads=args.threads
        ) as engine:
            figures[mode] = asyncio.run(measure(engine.base_url, args.new_tokens, args.repeats))

    print(
        f"embedded engine, {args.new_tokens} new tokens per request, greedy, "
        f"{args.threads} torch thread(s), median of {args.repeats}"
    )
    print(f"{'concurrent':>10}  {'batched tok/s':>14}  {'one-at-a-time tok/s':>20}  {'ratio':>6}")
    rows = []
    for concurrency in CONCURRENCY:
        batched = figures["batched"][concurrency]
        single = figures["one_at_a_time"][concurrency]
        ratio = batched / single
        rows.append(
            {
                "concurrency": concurrency,
                "batched_tokens_per_s": round(batched, 1),
                "one_at_a_time_tokens_per_s": round(single, 1),
                "ratio": round(ratio, 2),
            }
        )
        print(f"{concurrency:>10}  {batched:>14.1f}  {single:>20.1f}  {ratio:>5.2f}x")

    result = {
        "benchmark": "engine_throughput",
        "model": args.model,
        "new_tokens": args.new_tokens,
        "repeats": args.repeats,
        "threads": args.threads,
        "rows": rows,
    }
    write_result(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Proxy overhead: the same /generate load sent directly to an engine and through the proxy.

Starts one embedded engine (tiny model, CPU) and one proxy in front of it, then for each
concurrency level (default 1, 16 and 128 requests in flight) sends the same requests directly
and through the proxy, alternating rounds, and prints side by side: throughput (requests/s)
and its ratio proxy/direct, p50/p99 latency and the latency the proxy adds. Each proxied
request is its own session (a trajectory), so the proxy does its full per-request work:
session bookkeeping, prefix check, version recording. Figures are written to
`benchmarks/results/proxy_overhead.json`.

    python benchmarks/proxy_overhead.py [--levels 1,16,128] [--requests 256] [--rounds 2]

The load generator (aiohttp, one process), the proxy and the engine share the machine's
cores, so absolute figures are noisy on a shared machine; the ratios of one run are what
matter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dressage.engine.testing import start_engine
from dressage.proxy.testing import start_proxy

RESULTS = Path(__file__).resolve().parent / "results" / "proxy_overhead.json"
PROMPT = [1, 6, 17, 28, 39, 50, 61, 72]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def run_load(
    client: aiohttp.ClientSession, url: str, concurrency: int, requests: int, max_new: int,
    through_proxy: bool,
) -> dict[str, float]:  # fmt: skip
    """Send `requests` generations with `concurrency` in flight; latency and throughput."""
    latencies: list[float] = []
    queue = iter(range(requests))
    params = {"max_new_tokens": max_new, "ignore_eos": True, "temperature": 1.0}

    async def worker() -> None:
        for _ in queue:
            body: dict[str, Any] = {
                "input_ids": PROMPT, "sampling_params": params, "return_logprob": True,
            }  # fmt: skip
            headers = {"X-Session-Id": uuid.uuid4().hex} if through_proxy else {}
            start = time.perf_counter()
            async with client.post(
                url + "/generate", data=orjson.dumps(body), headers=headers
            ) as response:
                raw = await response.read()
                status = response.status
            latencies.append(time.perf_counter() - start)
            if status != 200:
                raise RuntimeError(f"{url}: HTTP {status}: {raw[:300]!r}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    return {
        "requests": len(latencies),
        "throughput_rps": len(latencies) / wall,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


async def measure(
    args: argparse.Namespace, engine_url: str, proxy_url: str
) -> list[dict[str, Any]]:
    rows = []
    connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0)
    async with aiohttp.ClientSession(
        connector=connector, headers={"content-type": "application/json"}
    ) as client:
        # Warm both paths (connections, engine caches).
        await run_load(client, engine_url, 8, 32, args.max_new_tokens, False)
        await run_load(client, proxy_url, 8, 32, args.max_new_tokens, True)
        for level in args.levels:
            runs: dict[str, list[dict[str, float]]] = {"direct": [], "proxy": []}
            requests = max(args.requests, 4 * level)
            if level == 1:
                requests = min(requests, args.requests_serial)
            for _ in range(args.rounds):
                runs["direct"].append(
                    await run_load(client, engine_url, level, requests, args.max_new_tokens, False)
                )
                runs["proxy"].append(
                    await run_load(client, proxy_url, level, requests, args.max_new_tokens, True)
                )
            med = {
                path: {k: statistics.median(r[k] for r in results) for k in results[0]}
                for path, results in runs.items()
            }
            rows.append(
                {
                    "concurrency": level,
                    "requests": requests,
                    "rounds": args.rounds,
                    "direct": med["direct"],
                    "proxy": med["proxy"],
                    "throughput_ratio": med["proxy"]["throughput_rps"]
                    / med["direct"]["throughput_rps"],
                    "added_p50_ms": med["proxy"]["p50_ms"] - med["direct"]["p50_ms"],
                    "added_p99_ms": med["proxy"]["p99_ms"] - med["direct"]["p99_ms"],
                }
            )
            print_row(rows[-1])
    return rows


def print_row(row: dict[str, Any]) -> None:
    d, p = row["direct"], row["proxy"]
    print(
        f"{row['concurrency']:>5} {d['throughput_rps']:>10.1f} {p['throughput_rps']:>10.1f} "
        f"{row['throughput_ratio']:>7.3f} {d['p50_ms']:>9.2f} {p['p50_ms']:>9.2f} "
        f"{row['added_p50_ms']:>+9.2f} {d['p99_ms']:>9.2f} {p['p99_ms']:>9.2f} "
        f"{row['added_p99_ms']:>+9.2f}",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,16,128", help="concurrency levels")
    parser.add_argument("--requests", type=int, default=256, help="requests per level and path")
    parser.add_argument("--requests-serial", type=int, default=200, help="requests at level 1")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per level")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--engine-batch", type=int, default=128, help="engine max batch size")
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    with tempfile.TemporaryDirectory() as cache, start_engine(
        cache_dir=Path(cache), max_batch_size=args.engine_batch
    ) as engine, start_proxy([engine.base_url], "--max-concurrency", "1024") as proxy:  # fmt: skip
        print(f"engine {engine.base_url}  proxy {proxy.base_url}  "
              f"max_new_tokens={args.max_new_tokens}")  # fmt: skip
        print(f"{'conc':>5} {'direct/s':>10} {'proxy/s':>10} {'ratio':>7} {'d p50':>9} "
              f"{'p p50':>9} {'+p50 ms':>9} {'d p99':>9} {'p p99':>9} {'+p99 ms':>9}")  # fmt: skip
        rows = asyncio.run(measure(args, engine.base_url, proxy.base_url))
    result = {
        "benchmark": "proxy_overhead",
        "machine": {"python": platform.python_version(), "cpus": _cpus(), "shared": True},
        "max_new_tokens": args.max_new_tokens,
        "levels": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


if __name__ == "__main__":
    raise SystemExit(main())

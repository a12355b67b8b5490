"""Proxy overhead: the same /generate load sent directly to an engine and through the proxy.

A run starts one embedded engine (tiny model, CPU, one torch thread) and one proxy in front of
it, then for each concurrency level (default 1, 16 and 128 requests in flight) sends the same
requests directly and through the proxy, alternating rounds, and prints side by side:
throughput (requests/s) and its ratio proxy/direct, p50/p99 latency, the latency the proxy
adds, the proxy's CPU time per request and how busy each core was (medians over the run's
rounds). Each proxied request is its own session (a trajectory), so the proxy does its full
per-request work: session bookkeeping, prefix check, version recording, metrics.

The benchmark makes several runs, each with a fresh engine and proxy, and ends with the median
over runs of each figure and the range of the two targets (throughput ratio and added p50).
At 128 concurrent the engine's batching differs more between runs than between the two paths
of one run: once a run's 128 clients fall into a pattern of batch sizes, they tend to keep it,
so one run can read several milliseconds high or low. Figures are written to
`benchmarks/results/proxy_overhead.json`.

    python benchmarks/proxy_overhead.py [--levels 1,16,128] [--runs 5] [--rounds 5]
                                        [--requests 512]
                                        [--placement engine-alone|proxy-alone|shared]

Each round sends at least 16 requests per client (2048 at 128 concurrent), so the burst of
the round's start is a small part of it.

Proxy CPU per request is the proxy process's CPU time (the sum over its threads of
`/proc/PID/task/TID/schedstat`, nanoseconds) read before and after each proxied round,
divided by the round's requests. It depends much less than throughput and latency on what else
runs on the machine (other work still costs it some cache), so it is the figure to compare
between versions of the proxy. At concurrency 1 it also pays for waking the idle proxy for
every request, so it is higher there than under load.

Latency columns: p50, p99 and mean per request. The load is closed-loop (each of N clients
sends its next request when the last one returns), so mean latency is N / throughput: a path
with higher throughput has the lower mean, even where its p50 is higher, and a change in p50
alone can be a change in the shape of the latency distribution (how evenly the engine's
batches fill) rather than time the proxy adds to each request.

Placement. The engine here is CPU-bound torch: on a small machine every microsecond another
process spends on the engine's core is taken from the engine, and the figures then measure
that process's CPU as much as the latency the proxy adds. In a deployment the engine runs on
its own GPU, and neither the proxy (its own pod) nor the agents take compute from it. Three
placements can be measured:

- `engine-alone` (the default with two cores or more): the engine pinned to the first core,
  the proxy and the load generator to the remaining ones, for the direct and the proxied rounds
  alike. This is the deployment's situation: the ratio and the added latency are what the proxy
  adds in front of an engine that owns its compute.
- `proxy-alone`: the proxy pinned to the last core, the engine and the load generator to the
  others. The load generator then takes part of the engine's core, and how much depends on how
  its wakeups fall: through the proxy they come at a different rhythm than direct, which likely
  costs the engine throughput that is not the proxy's own CPU.
- `shared`: no pinning, all three processes share every core (what a local run on a laptop
  does), so the ratio also pays for the proxy's CPU.

The machine may be shared with other work, so absolute figures are noisy; the ratios of one
run and the proxy's CPU per request are what matter. Pinned processes cannot move away from a
core that other work keeps busy, so on a busy shared machine pinned latencies at low
concurrency can be noisier than shared ones.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import write_result
from dressage_testkit.engine import start_engine
from dressage_testkit.proxy import start_proxy

RESULTS = Path(__file__).resolve().parent / "results" / "proxy_overhead.json"
PROMPT = [1, 6, 17, 28, 39, 50, 61, 72]
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def core_ticks() -> dict[int, tuple[int, int]]:
    """Per core: (idle ticks, all ticks) so far, from /proc/stat."""
    ticks = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *fields = line.split()
                values = [int(x) for x in fields[:8]]
                ticks[int(name[3:])] = (values[3] + values[4], sum(values))
    return ticks


def core_busy(
    before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]
) -> dict[str, float]:
    """Per core: the fraction of time it was busy between two `core_ticks` readings."""
    busy = {}
    for core, (idle, total) in after.items():
        idle0, total0 = before.get(core, (0, 0))
        span = total - total0
        busy[str(core)] = 1.0 - (idle - idle0) / span if span > 0 else 0.0
    return busy


def cpu_seconds(pid: int) -> float:
    """CPU time of process `pid` so far: the sum over its live threads of the kernel's
    nanosecond run time (`schedstat`); utime + stime in clock ticks (10 ms) without it."""
    total_ns = 0
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total_ns += int(f.read().split()[0])
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def split_cores(placement: str) -> tuple[set[int], set[int], set[int]] | None:
    """(engine cores, proxy cores, load generator cores) for a pinned placement, None for
    `shared`."""
    if placement == "shared":
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit(f"--placement {placement} needs at least two cores; use shared")
    if placement == "engine-alone":
        rest = set(cores[1:])
        return {cores[0]}, rest, rest
    others = set(cores[:-1])
    return others, {cores[-1]}, others


@contextlib.contextmanager
def pinned(cores: set[int] | None) -> Iterator[None]:
    """Run the block on `cores` (None: leave the affinity alone); processes started in it
    inherit the affinity, threads included."""
    if cores is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


async def run_load(
    client: aiohttp.ClientSession, url: str, concurrency: int, requests: int, max_new: int,
    through_proxy: bool, cpu_pid: int | None = None,
) -> dict[str, float]:  # fmt: skip
    """Send `requests` generations with `concurrency` in flight; latency and throughput, and
    the CPU time per request of process `cpu_pid` (the proxy) when given."""
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

    cpu_before = cpu_seconds(cpu_pid) if cpu_pid is not None else 0.0
    ticks_before = core_ticks()
    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - start
    busy = core_busy(ticks_before, core_ticks())
    result = {
        "requests": len(latencies),
        "throughput_rps": len(latencies) / wall,
        "mean_ms": statistics.fmean(latencies) * 1000,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        **{f"core{core}_busy": fraction for core, fraction in busy.items()},
    }
    if cpu_pid is not None:
        result["cpu_us_per_request"] = (cpu_seconds(cpu_pid) - cpu_before) / len(latencies) * 1e6
    return result


async def measure(
    args: argparse.Namespace, engine_url: str, proxy_url: str, proxy_pid: int
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
            requests = max(args.requests, 16 * level)
            if level == 1:
                requests = min(requests, args.requests_serial)
            for _ in range(args.rounds):
                runs["direct"].append(
                    await run_load(client, engine_url, level, requests, args.max_new_tokens, False)
                )
                runs["proxy"].append(
                    await run_load(
                        client, proxy_url, level, requests, args.max_new_tokens, True, proxy_pid
                    )
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
                    "added_mean_ms": med["proxy"]["mean_ms"] - med["direct"]["mean_ms"],
                    "added_p50_ms": med["proxy"]["p50_ms"] - med["direct"]["p50_ms"],
                    "added_p99_ms": med["proxy"]["p99_ms"] - med["direct"]["p99_ms"],
                    "proxy_cpu_us_per_request": med["proxy"]["cpu_us_per_request"],
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
        f"{row['added_p99_ms']:>+9.2f} {row['added_mean_ms']:>+9.2f} "
        f"{row['proxy_cpu_us_per_request']:>9.0f}",
        flush=True,
    )

    def busy(side: dict[str, float]) -> str:
        cores = sorted(k for k in side if k.startswith("core") and k.endswith("_busy"))
        return " ".join(f"{k.removesuffix('_busy')} {side[k]:.0%}" for k in cores)

    print(f"{'':>5} cores busy: direct {busy(d)} | proxied {busy(p)}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="1,16,128", help="concurrency levels")
    parser.add_argument(
        "--runs", type=int, default=5, help="runs, each with a fresh engine and proxy"
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="alternating rounds per level and run"
    )
    parser.add_argument(
        "--requests", type=int, default=512,
        help="requests per round (at least 16 per client)",
    )  # fmt: skip
    parser.add_argument("--requests-serial", type=int, default=200, help="requests at level 1")
    parser.add_argument("--max-new-tokens", type=int, default=4)
    parser.add_argument("--engine-batch", type=int, default=128, help="engine max batch size")
    parser.add_argument(
        "--placement",
        choices=("engine-alone", "proxy-alone", "shared"),
        default="engine-alone" if len(os.sched_getaffinity(0)) >= 2 else "shared",
        help="engine-alone: the engine on one core, the proxy and the load generator on the "
        "others; proxy-alone: the proxy on one core, the engine and the load generator on the "
        "others; shared: no pinning (default: engine-alone with two cores or more)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="result JSON file")
    args = parser.parse_args()
    args.levels = [int(x) for x in args.levels.split(",")]
    runs = []
    for index in range(args.runs):
        print(f"run {index + 1}/{args.runs}", flush=True)
        runs.append(one_run(args))
    summary = summarize([run["levels"] for run in runs])
    print(f"median of {args.runs} runs ({args.placement} placement):")
    print(HEADER)
    for row in summary:
        print_row(row)
    print("proxy µs: proxy CPU µs/request (median of the proxied rounds)")
    for row in summary:
        low, high = row["throughput_ratio_range"]
        p50_low, p50_high = row["added_p50_range_ms"]
        print(
            f"{row['concurrency']:>5} concurrent: throughput ratio {row['throughput_ratio']:.3f} "
            f"(runs {low:.3f}..{high:.3f}), added p50 {row['added_p50_ms']:+.2f} ms "
            f"(runs {p50_low:+.2f}..{p50_high:+.2f})"
        )
    result = {
        "benchmark": "proxy_overhead",
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count() or 0,
            "shared": True,
            "load_average": os.getloadavg(),
        },
        "placement": args.placement,
        "max_new_tokens": args.max_new_tokens,
        "summary": summary,
        "runs": runs,
    }
    write_result(args.output, result)
    return 0


HEADER = (
    f"{'conc':>5} {'direct/s':>10} {'proxy/s':>10} {'ratio':>7} {'d p50':>9} {'p p50':>9} "
    f"{'+p50 ms':>9} {'d p99':>9} {'p p99':>9} {'+p99 ms':>9} {'+mean ms':>9} {'proxy µs':>9}"
)


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """Start a fresh engine and proxy (pinned per `--placement`) and measure every level."""
    split = split_cores(args.placement)
    engine_cores, proxy_cores, load_cores = split if split is not None else (None, None, None)
    with contextlib.ExitStack() as stack:
        cache = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        with pinned(engine_cores):
            # One torch thread: the engine stays on its core(s) in either placement.
            engine = stack.enter_context(
                start_engine(cache_dir=cache, max_batch_size=args.engine_batch, threads=1)
            )
        with pinned(proxy_cores):
            proxy = stack.enter_context(start_proxy([engine.base_url], "--max-concurrency", "1024"))
        stack.enter_context(pinned(load_cores))  # the load generator, this process
        affinity = {
            "engine": sorted(os.sched_getaffinity(engine.process.pid)),
            "proxy": sorted(os.sched_getaffinity(proxy.process.pid)),
            "load_generator": sorted(os.sched_getaffinity(0)),
        }
        print(f"  placement {args.placement}: engine on cores {affinity['engine']}, proxy on "
              f"{affinity['proxy']}, load generator on {affinity['load_generator']}; "
              f"max_new_tokens={args.max_new_tokens}")  # fmt: skip
        print(HEADER)
        rows = asyncio.run(measure(args, engine.base_url, proxy.base_url, proxy.process.pid))
    return {"affinity": affinity, "levels": rows}


def summarize(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per level: the median over runs of every figure, and the range over runs of the
    throughput ratio and the added p50."""
    summary = []
    for position, first in enumerate(runs[0]):
        rows = [run[position] for run in runs]

        def median(key: str, side: str | None = None, rows: list[dict[str, Any]] = rows) -> float:
            return float(statistics.median((r[side] if side else r)[key] for r in rows))

        ratios = [row["throughput_ratio"] for row in rows]
        added = [row["added_p50_ms"] for row in rows]
        summary.append(
            {
                "concurrency": first["concurrency"],
                "requests": first["requests"],
                "rounds": first["rounds"],
                "runs": len(rows),
                "direct": {key: median(key, "direct") for key in first["direct"]},
                "proxy": {key: median(key, "proxy") for key in first["proxy"]},
                "throughput_ratio": median("throughput_ratio"),
                "throughput_ratio_range": [min(ratios), max(ratios)],
                "added_mean_ms": median("added_mean_ms"),
                "added_p50_ms": median("added_p50_ms"),
                "added_p50_range_ms": [min(added), max(added)],
                "added_p99_ms": median("added_p99_ms"),
                "proxy_cpu_us_per_request": median("proxy_cpu_us_per_request"),
            }
        )
    return summary


if __name__ == "__main__":
    raise SystemExit(main())

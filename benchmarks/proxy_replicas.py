"""Proxy replicas: trajectories per second through one proxy and through two, side by side.

A run starts one embedded engine (tiny model, CPU) and two proxies in front of it, then in
alternating rounds sends the same closed-loop load through a rollout client over one replica
and over both (`ProxyRolloutClient`, each trajectory its own prompt group, so rendezvous
hashing spreads them over the replicas). A trajectory is what a single-turn group of one does
at the proxy: a `/generate` in a new session, its finalize and the group's segment read, three
requests; generations are one token long, so the proxy's per-request work, not decoding,
bounds the rate where it can. It prints the median trajectories/s of each setup over the
rounds and their ratio, and, per round, the CPU the proxies, the engine and the load generator
used per wall second (`proxy_overhead.cpu_seconds`): a proxy near 1.0 is bound by its one event
loop, the bound a second replica lifts where it has a core of its own. It writes
`benchmarks/results/proxy_replicas.json`.

    python benchmarks/proxy_replicas.py [--quick] [--rounds 5] [--trajectories 400]
                                        [--concurrency 64]

What bounds the ratio: on a machine of few cores the engine, the two proxies and the load
generator share the same cores, so a second proxy only helps as far as one proxy's Python
(one event loop, one core) was the bottleneck and a core is left for the second; the engine's
own step, which every trajectory waits for, is not shared out. On a cluster each replica has
its own pod and core, and the engines their GPUs. Figures from a machine others load are
provisional.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import write_result  # noqa: E402
from dressage_testkit.engine import start_engine  # noqa: E402
from dressage_testkit.proxy import start_proxy  # noqa: E402
from proxy_overhead import cpu_seconds  # noqa: E402

from dressage.proxy.client import ProxyRolloutClient, SamplingSettings  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "proxy_replicas.json"
SAMPLING = SamplingSettings(max_new_tokens=1, ignore_eos=True)


async def one_round(client: ProxyRolloutClient, tag: str, trajectories: int, conc: int) -> float:
    """Trajectories per second of one closed-loop round."""
    queue = iter(range(trajectories))

    async def worker() -> None:
        for i in queue:
            group = f"{tag}-{i}"
            session = f"{group}-t0"
            await client.generate(
                [1, 5 + i % 7, 6], SAMPLING, session_id=session, instance_id=group
            )
            await client.finalize(session, 1.0, instance_id=group)
            await client.segments(group)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return trajectories / (time.perf_counter() - started)


async def measure(
    replicas: list[str], pids: dict[str, int], args: argparse.Namespace
) -> tuple[dict[str, list[float]], dict[str, list[dict[str, float]]]]:
    """Trajectories/s per round of each setup, and the cores each process kept busy then."""
    clients = {n: ProxyRolloutClient(replicas[:n]) for n in (1, 2)}
    rates: dict[str, list[float]] = {"1": [], "2": []}
    busy: dict[str, list[dict[str, float]]] = {"1": [], "2": []}
    try:
        for n, client in clients.items():  # warm-up: connections, the engine's first steps
            await one_round(client, f"warm{n}", max(8, args.concurrency), args.concurrency)
        for r in range(args.rounds):
            order = (1, 2) if r % 2 == 0 else (2, 1)
            for n in order:
                before = {name: cpu_seconds(pid) for name, pid in pids.items()}
                started = time.perf_counter()
                rate = await one_round(clients[n], f"r{r}n{n}", args.trajectories, args.concurrency)
                wall = time.perf_counter() - started
                cores = {
                    name: (cpu_seconds(pid) - before[name]) / wall for name, pid in pids.items()
                }
                rates[str(n)].append(rate)
                busy[str(n)].append(cores)
                shown = ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
                print(
                    f"round {r + 1}: {n} replica(s) {rate:8.1f} trajectories/s "
                    f"(cores busy: {shown})",
                    flush=True,
                )
    finally:
        for client in clients.values():
            await client.aclose()
    return rates, busy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trajectories", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.trajectories, args.concurrency = 2, 64, 16
    out: Path = args.out or (
        RESULTS.with_name("proxy_replicas_quick.json") if args.quick else RESULTS
    )
    with contextlib.ExitStack() as stack:
        engine = stack.enter_context(start_engine(max_batch_size=64))
        proxies = [
            stack.enter_context(start_proxy([engine.base_url], "--max-concurrency", "1024"))
            for _ in range(2)
        ]
        pids = {
            "proxy-0": proxies[0].process.pid,
            "proxy-1": proxies[1].process.pid,
            "engine": engine.process.pid,
            "load": os.getpid(),
        }
        rates, busy = asyncio.run(measure([p.base_url for p in proxies], pids, args))
    medians = {n: statistics.median(values) for n, values in rates.items()}
    busy_medians = {
        n: {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        for n, rounds in busy.items()
    }
    ratio = medians["2"] / medians["1"]
    result: dict[str, Any] = {
        "benchmark": "proxy_replicas",
        "quick": args.quick,
        "rounds": args.rounds,
        "trajectories_per_round": args.trajectories,
        "concurrency": args.concurrency,
        "requests_per_trajectory": 3,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "trajectories_per_s": rates,
        "median_trajectories_per_s": medians,
        "median_requests_per_s": {n: 3 * m for n, m in medians.items()},
        "ratio_2_over_1": ratio,
        "median_cores_busy": busy_medians,
        "provisional": True,
    }
    print(
        f"median trajectories/s: 1 replica {medians['1']:.1f}, 2 replicas {medians['2']:.1f} "
        f"(requests/s {3 * medians['1']:.0f} / {3 * medians['2']:.0f}); ratio {ratio:.2f}x; "
        f"load average {result['load_average']:.1f} on {result['cpus']} cores"
    )
    for n, cores in busy_medians.items():
        shown = ", ".join(f"{k} {v:.2f}" for k, v in cores.items())
        print(f"median cores busy with {n} replica(s): {shown}")
    write_result(out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

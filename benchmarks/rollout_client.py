"""CPU cost of the rollout client (`dressage.proxy.client.ProxyRolloutClient`) per request when
hundreds of generations are in flight at once, as in a long-tail rollout: most answers come
back quickly, a few take many times longer, and every trajectory holds its connection while it
waits.

A stand-in proxy in a process of its own answers `/generate` after 50 ms, one request in
`--slow-every` after `--slow-s` seconds; `--concurrency` trajectories at a time send
`--requests` in all. The figure is the client process's CPU time per request (the server's is
not counted), for the client as it is (aiohttp, connections unbounded) and for the httpx client
it replaced (httpx's default pool of 100 connections, and an unbounded httpx pool).

    python benchmarks/rollout_client.py [--concurrency 256] [--requests 3000] [--quick]

Writes `benchmarks/results/rollout_client.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _runs import ROOT, load_average, write_result

from dressage.proxy.client import ProxyRolloutClient, SamplingSettings

ANSWER = json.dumps({"output_ids": list(range(16)), "meta_info": {}}).encode()


def _serve(port: multiprocessing.Queue, slow_every: int, slow_s: float) -> None:  # type: ignore[type-arg]
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rng = random.Random()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                await asyncio.sleep(slow_s if rng.randrange(slow_every) == 0 else 0.05)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()

    asyncio.run(main())


async def _measure(client: str, url: str, concurrency: int, requests: int) -> dict[str, Any]:
    gate = asyncio.Semaphore(concurrency)
    sampling = SamplingSettings(max_new_tokens=16)
    if client == "aiohttp (ProxyRolloutClient)":
        rollout = ProxyRolloutClient(url)

        async def one(i: int) -> None:
            async with gate:
                await rollout.generate([1] * 10, sampling, session_id=f"s{i}", instance_id="g")

        close = rollout.aclose
    else:
        limits = (
            httpx.Limits()
            if client == "httpx, pool 100"
            else httpx.Limits(max_connections=None, max_keepalive_connections=None)
        )
        http = httpx.AsyncClient(timeout=600, limits=limits)

        async def one(i: int) -> None:
            async with gate:
                body = {"input_ids": [1] * 10, "sampling_params": {"max_new_tokens": 16}}
                headers = {"X-Session-Id": f"s{i}", "X-Instance-Id": "g"}
                (await http.post(url + "/generate", json=body, headers=headers)).json()

        close = http.aclose
    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(one(i) for i in range(requests)))
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    await close()
    return {
        "client": client,
        "cpu_ms_per_request": round(1000 * cpu / requests, 3),
        "wall_s": round(wall, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--slow-every", type=int, default=20)
    parser.add_argument("--slow-s", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="600 requests")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/rollout_client.json")
    args = parser.parse_args()
    requests = 600 if args.quick else args.requests
    port: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    server = multiprocessing.Process(target=_serve, args=(port, args.slow_every, args.slow_s))
    server.start()
    try:
        url = f"http://127.0.0.1:{port.get(timeout=30)}"
        load = load_average()
        rows = [
            asyncio.run(_measure(client, url, args.concurrency, requests))
            for client in ("aiohttp (ProxyRolloutClient)", "httpx, pool 100", "httpx, unbounded")
        ]
    finally:
        server.terminate()
        server.join()
    print(f"{requests} requests, {args.concurrency} in flight, load {load}->{load_average()}")
    for row in rows:
        print(
            f"  {row['client']:<30} {row['cpu_ms_per_request']:>7.3f} ms CPU/request, "
            f"{row['wall_s']:>6.1f} s"
        )
    write_result(
        args.out,
        {
            "benchmark": "rollout_client",
            "concurrency": args.concurrency,
            "requests": requests,
            "slow_every": args.slow_every,
            "slow_s": args.slow_s,
            "machine": {"cpus": os.cpu_count()},
            "load_average": [load, load_average()],
            "results": rows,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

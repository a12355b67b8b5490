"""A job at fleet scale, by simulation: the real proxy, publisher and operator against hundreds
to a thousand simulated SGLang engines, each figure against the engine count.

The engines are `dressage_testkit.sim_fleet` (one process, one event loop, a listening socket
per engine, answering as SGLang's release does: `tests/contract/test_sim_engine.py`); their
arithmetic is simulated (a per-token latency, a load time), their control plane is not. For
each engine count N (16, 64, 256, 1,024; `--quick`: 8 and 16):

- proxy, for 1, 2 and 4 replicas (real `dressage proxy` processes, the engines from a file as
  the operator gives them): closed-loop trajectories (`--trajectories`, at least
  `--per-engine` times the engines) through `ProxyRolloutClient` (a
  `/generate` in a new session, its finalize and the group's segment read: three requests),
  giving requests/s, the proxies' CPU per request, and routing balance (the busiest engine's
  generations over the mean); the latency the proxy adds (p50/p99 of a generation through it
  minus the median straight to an engine, at low concurrency); memory per live session (the
  proxy's resident memory over many open sessions);
- publish fan-out: `DiskPublisher` through the proxy (pause, `/update_weights_from_disk` on
  every engine, continue with the new version) from its call until every engine serves the
  new version, minus the engines' own load time (`--load-ms`), with each process's CPU per
  publish: the proxy replicas loading the checkpoint (a share each, the default), then the
  publisher loading it engine by engine (`disk_direct`: the path behind a proxy without
  `/dressage/weights/update_from_disk`), side by side; and the distributed path's
  control messages (pause, `begin_weight_update`, `--buckets` x
  `update_weights_from_distributed`, `end_weight_update`, continue) with each bucket's tensor
  transfer simulated by `--transfer-ms`, minus the transfer time;
- churn: 5 % of the engines killed while trajectories run and restarted on their start-up
  weights; trajectories that failed (surfaced to the rollout, which regenerates their group),
  lost silently (neither finished nor failed: must be 0), and the pieces the proxy resent;
- operator: one job of N engines on the Kubernetes API emulation (`operator_scale`'s real
  operator process): time until all its children exist, the status object's size, the job's
  status writes per minute once settled, and the Prometheus series the job exports (the
  operator's, one proxy's, and the engines' SGLang series: `SGLANG_SERIES_PER_ENGINE` each).

    python benchmarks/fleet_scale.py [--quick] [--engines 16 64 256 1024] [--replicas 1 2 4]

It writes `benchmarks/results/fleet_scale.json` (`fleet_scale_quick.json` with `--quick`) with
the machine's load average before and after. The machine's cores are shared by the simulated
fleet, the proxies, the load generator and the operator: on a cluster each proxy has a core of
its own, so replica scaling here is a lower bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "testkit"), str(ROOT / "benchmarks")]

from _runs import write_result  # noqa: E402
from dressage_testkit.kube import emulated_cluster  # noqa: E402
from dressage_testkit.processes import free_port, stop_process  # noqa: E402
from dressage_testkit.proxy import start_proxy  # noqa: E402
from operator_scale import CHILDREN_PER_JOB, NAMESPACE, _children_ready, _job, _operator  # noqa: E402
from proxy_overhead import cpu_seconds  # noqa: E402

from dressage import metrics as names  # noqa: E402
from dressage.engine.client import EngineClient  # noqa: E402
from dressage.metrics import sglang  # noqa: E402
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings  # noqa: E402
from dressage.weights.disk import DiskPublisher  # noqa: E402
from dressage.weights.engines import ProxyEngines  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "fleet_scale.json"
SAMPLING = SamplingSettings(max_new_tokens=8, ignore_eos=True)
SGLANG_SERIES_PER_ENGINE = sum(
    3 + len(sglang.LATENCY_BUCKETS) if m.kind == "histogram" else 1 for m in sglang.METRICS
)
"""Series one SGLang engine exports of the declared metrics (a histogram: its buckets, +Inf,
`_sum` and `_count`), the dashboard's; SGLang exports more of its own."""


# --- the simulated fleet, in a process of its own


class Fleet:
    """`python -m dressage_testkit.sim_fleet` as a child process, driven through its stdin."""

    def __init__(self, engines: int, args: argparse.Namespace) -> None:
        cmd = [
            sys.executable, "-m", "dressage_testkit.sim_fleet", "--engines", str(engines),
            "--token-latency-ms", str(args.token_ms), "--mean-tokens", "8", "--max-tokens", "8",
            "--load-time-ms", str(args.load_ms), "--transfer-time-ms", str(args.transfer_ms),
        ]  # fmt: skip
        paths = [str(ROOT), str(ROOT / "operator"), str(ROOT / "testkit")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
        )
        assert self.proc.stdout is not None
        self.urls: list[str] = []
        for line in self.proc.stdout:
            if line.strip() == "ready":
                break
            self.urls.append(line.strip())
        if len(self.urls) != engines:
            raise RuntimeError(f"the simulated fleet started {len(self.urls)} of {engines}")

    def command(self, line: str) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = json.loads(self.command("stats"))
        return stats

    def close(self) -> None:
        stop_process(self.proc, grace_s=5)


# --- proxy figures


async def trajectories(
    client: ProxyRolloutClient, tag: str, count: int, conc: int
) -> tuple[float, int, int]:
    """Closed-loop trajectories: (seconds, finished, failed)."""
    queue = iter(range(count))
    finished = failed = 0

    async def worker() -> None:
        nonlocal finished, failed
        for i in queue:
            group = f"{tag}-{i}"
            try:
                prompt = [1, 5 + i % 7, 6]
                await client.generate(prompt, SAMPLING, session_id=group, instance_id=group)
                await client.finalize(group, 1.0, instance_id=group)
                await client.segments(group)
                finished += 1
            except Exception as exc:  # surfaced to the rollout: it regenerates the group
                if not failed:
                    print(f"    first failure of {tag}: {type(exc).__name__}: {exc}", flush=True)
                failed += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return time.perf_counter() - started, finished, failed


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def added_latency(replica: str, engine_url: str, tag: str, count: int) -> dict[str, float]:
    """p50/p99 of a generation through the proxy minus the median straight to an engine (the
    same simulated engine time), four at a time."""
    params = {"max_new_tokens": 8}
    body = {"input_ids": [1, 2, 3], "sampling_params": params, "return_logprob": True}

    async def timed(http: httpx.AsyncClient, url: str, i: int) -> float:
        started = time.perf_counter()
        headers = {"X-Session-Id": f"{tag}-{i}"}
        (await http.post(url + "/generate", json=body, headers=headers)).raise_for_status()
        return time.perf_counter() - started

    async with httpx.AsyncClient(timeout=60) as http:
        direct: list[float] = []
        through: list[float] = []
        for start in range(0, count, 4):
            direct += await asyncio.gather(*(timed(http, engine_url, start + k) for k in range(4)))
            through += await asyncio.gather(*(timed(http, replica, start + k) for k in range(4)))
    base = statistics.median(direct)
    return {
        "p50_ms": round(1000 * (_percentile(through, 0.5) - base), 2),
        "p99_ms": round(1000 * (_percentile(through, 0.99) - base), 2),
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def session_memory(client: ProxyRolloutClient, pid: int, tag: str, sessions: int) -> float:
    """KiB of the proxy's resident memory per live session (one turn each, not finalized)."""
    before = rss_mib(pid)
    sem = asyncio.Semaphore(64)

    async def open_one(i: int) -> None:
        async with sem:
            await client.generate([1, 2, 3, 4], SAMPLING, session_id=f"{tag}-{i}", instance_id=tag)

    await asyncio.gather(*(open_one(i) for i in range(sessions)))
    return round((rss_mib(pid) - before) * 1024 / sessions, 2)


def series_of(text: str, label: str | None = None) -> int:
    return sum(
        1
        for line in text.splitlines()
        if line and not line.startswith("#") and (label is None or label in line)
    )


async def metric_sum(replicas: list[str], name: str) -> float:
    total = 0.0
    async with httpx.AsyncClient(timeout=30) as http:
        for url in replicas:
            for line in (await http.get(url + "/metrics")).text.splitlines():
                if line.startswith(name) and not line.startswith("#"):
                    total += float(line.rsplit(" ", 1)[1])
    return total


# --- publish figures


async def publish_disk(
    publisher: DiskPublisher, fleet: Fleet, n: int, version: str, load_s: float
) -> tuple[float, int]:
    """Seconds from the publish call until it returned, every engine the proxies route to
    then serving `version`, minus the load; and how many of the first `n` engines do not serve
    it (held out by the proxies as unhealthy: the publisher catches them up later)."""
    started = time.perf_counter()
    await publisher.publish(Path("/sim/checkpoint") / version, version)
    wall = time.perf_counter() - started
    missed = sum(1 for v in fleet.stats()["versions"][:n] if v != version)
    return wall - load_s, missed


async def publishes(
    publisher: DiskPublisher,
    fleet: Fleet,
    n: int,
    tag: str,
    load_s: float,
    processes: dict[str, int],
    args: argparse.Namespace,
) -> tuple[list[float], dict[str, float], int]:
    """`args.publishes` disk publishes: each one's overhead (`publish_disk`), each process's
    CPU per publish (ms), and the most engines one left not serving its version."""
    cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
    published = [
        await publish_disk(publisher, fleet, n, f"{tag}{n}-{i}", load_s)
        for i in range(args.publishes)
    ]
    cpu = {
        name: round(1000 * (cpu_seconds(pid) - cpu_before[name]) / args.publishes, 1)
        for name, pid in processes.items()
    }
    return [seconds for seconds, _ in published], cpu, max(missed for _, missed in published)


async def publish_distributed(
    client: ProxyRolloutClient,
    engines: list[EngineClient],
    group: str,
    version: str,
    args: argparse.Namespace,
) -> float:
    """The distributed path's control messages around simulated transfers, minus them."""
    started = time.perf_counter()
    await client.pause("in_place")

    async def one(engine: EngineClient) -> None:
        opened = await engine.begin_weight_update()
        for b in range(args.buckets):
            await engine.update_weights_from_distributed(
                ["w"], ["bfloat16"], [[1]], group_name=group,
                weight_version=version if b == args.buckets - 1 else None, flush_cache=False,
            )  # fmt: skip
        if opened:
            await engine.end_weight_update()

    await asyncio.gather(*(one(e) for e in engines))
    await client.resume(version)
    transfers_s: float = args.buckets * args.transfer_ms / 1000
    return time.perf_counter() - started - transfers_s


# --- one engine count


async def wait_healthy(replicas: list[str], n: int, timeout_s: float = 120.0) -> None:
    """Until every replica sees all `n` engines healthy (their first health checks)."""
    deadline = time.monotonic() + timeout_s
    for url in replicas:
        client = ProxyRolloutClient([url])
        try:
            while True:
                engines = (await client.engines()).engines
                if len(engines) == n and all(e.healthy for e in engines):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url} does not see {n} healthy engines")
                await asyncio.sleep(0.1)
        finally:
            await client.aclose()


async def measure_fleet(
    n: int, fleet: Fleet, replicas: list[str], pids: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """Every figure but the operator's, for the first `n` engines of `fleet`."""
    out: dict[str, Any] = {"engines": n, "proxy": {}}
    urls = fleet.urls[:n]
    all_replicas = ProxyRolloutClient(replicas[: max(args.replicas)])
    publisher = DiskPublisher(ProxyEngines(all_replicas), catch_up_interval_s=None)
    load_s = args.load_ms / 1000
    # The first publish: every engine on one version (those listed last, or restarted by the
    # churn of a smaller fleet, serve their start-up weights), each engine's release asked.
    first, _ = await publish_disk(publisher, fleet, n, f"d{n}-first", load_s)
    for r in args.replicas:
        client = ProxyRolloutClient(replicas[:r])
        try:
            await trajectories(client, f"warm{n}r{r}", args.conc, args.conc)
            before_requests = fleet.stats()["requests"][:n]
            cpu0 = sum(cpu_seconds(p) for p in pids[:r])
            # Enough that every replica's routing goes round the engines several times:
            # balance is a count per engine, and a replica's 500 over 1,024 engines would
            # leave half of them without one.
            count = max(args.trajectories, args.per_engine * n)
            wall, done, failed = await trajectories(client, f"n{n}r{r}", count, args.conc)
            cpu = sum(cpu_seconds(p) for p in pids[:r]) - cpu0
            after = fleet.stats()["requests"][:n]
            per_engine = [a - b for a, b in zip(after, before_requests, strict=True)]
            mean = statistics.mean(per_engine)
            requests = 3 * done
            out["proxy"][str(r)] = {
                "requests_per_s": round(requests / wall, 1),
                "cpu_ms_per_request": round(1000 * cpu / requests, 3),
                "routing_balance": round(max(per_engine) / mean, 3) if mean else None,
                "failed": failed,
            }
            print(f"  {n} engines, {r} replica(s): {out['proxy'][str(r)]}", flush=True)
        finally:
            await client.aclose()
    base = out["proxy"][str(args.replicas[0])]["requests_per_s"]
    for r in args.replicas:
        out["proxy"][str(r)]["speedup"] = round(out["proxy"][str(r)]["requests_per_s"] / base, 2)
    out["added_latency"] = await added_latency(
        replicas[0], urls[0], f"lat{n}", args.latency_samples
    )
    one = ProxyRolloutClient(replicas[:1])
    engines = [EngineClient(url) for url in urls]
    try:
        out["session_kib"] = await session_memory(one, pids[0], f"mem{n}", args.sessions)
        processes = {"publisher": os.getpid(), "fleet": fleet.proc.pid}
        processes |= {f"proxy-{i}": pid for i, pid in enumerate(pids[: max(args.replicas)])}
        source = publisher.source
        assert isinstance(source, ProxyEngines)
        try:
            # Through the proxies (each replica loads a share), then engine by engine from
            # the publisher (the path behind a proxy without the route), side by side.
            disk, cpu, held_out = await publishes(publisher, fleet, n, "d", load_s, processes, args)
            source.proxy_loads = False
            direct, cpu_direct, _ = await publishes(
                publisher, fleet, n, "e", load_s, processes, args
            )
            out["publish_engines_held_out"] = held_out
        finally:
            await publisher.aclose()
        out["publish_cpu_ms"] = cpu
        out["publish_cpu_ms_direct"] = cpu_direct
        group = f"fleet-{n}"
        await asyncio.gather(
            *(
                e.init_weights_update_group("127.0.0.1", 1, 1, 2, group_name=group, backend="gloo")
                for e in engines
            )
        )
        dist = [
            await publish_distributed(all_replicas, engines, group, f"x{n}-{i}", args)
            for i in range(args.publishes)
        ]
        out["publish_overhead_ms"] = {
            "disk_first": round(1000 * first, 1),
            "disk": round(1000 * statistics.median(disk), 1),
            "disk_direct": round(1000 * statistics.median(direct), 1),
            "distributed_control": round(1000 * statistics.median(dist), 1),
        }
        print(f"  {n} engines: publish overhead {out['publish_overhead_ms']}", flush=True)
        print(f"  {n} engines: CPU per disk publish {out['publish_cpu_ms']}", flush=True)
        out["churn"] = await churn(all_replicas, fleet, replicas[: max(args.replicas)], n, args)
        print(f"  {n} engines: churn {out['churn']}", flush=True)
        async with httpx.AsyncClient(timeout=30) as http:
            text = (await http.get(replicas[0] + "/metrics")).text
        out["proxy_series"] = series_of(text)
    finally:
        await one.aclose()
        await all_replicas.aclose()
        await asyncio.gather(*(e.aclose() for e in engines))
    return out


async def churn(
    client: ProxyRolloutClient,
    fleet: Fleet,
    replicas: list[str],
    n: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """5 % of the engines killed while trajectories run, then restarted on their base weights."""
    victims = list(range(0, n, 20))[: max(1, n // 20)]
    retries0 = await metric_sum(replicas, names.PROXY_ENGINE_RETRIES)
    failed_turns0 = await metric_sum(replicas, names.PROXY_ENGINE_FAILED_TURNS)
    task = asyncio.create_task(trajectories(client, f"churn{n}", args.trajectories, args.conc))
    await asyncio.sleep(0.2)
    for v in victims:
        await asyncio.to_thread(fleet.command, f"kill {v}")
    await asyncio.sleep(0.5)
    for v in victims:
        await asyncio.to_thread(fleet.command, f"restart {v}")
    _, done, failed = await task
    return {
        "killed": len(victims),
        "trajectories": args.trajectories,
        "finished": done,
        "failed_regenerated": failed,
        "lost_silently": args.trajectories - done - failed,
        "pieces_resent": await metric_sum(replicas, names.PROXY_ENGINE_RETRIES) - retries0,
        "turns_hit": await metric_sum(replicas, names.PROXY_ENGINE_FAILED_TURNS) - failed_turns0,
    }


def operator_jobs(counts: list[int], settle_s: float) -> dict[int, dict[str, Any]]:
    """One job of each of `counts` engines, applied one after the other to one operator on the
    API emulation: time to all its children, its status size, its status writes per minute
    once settled, the operator's series for it."""
    metrics_port = free_port()
    out: dict[int, dict[str, Any]] = {}
    with emulated_cluster(NAMESPACE) as c:
        c.http.timeout = httpx.Timeout(120.0)
        limits = json.dumps({"inferenceReplicas": max(counts)})
        with _operator(c, metrics_port=metrics_port, DRESSAGE_OPERATOR_LIMITS=limits):
            for n in counts:
                name = f"fleet-{n}"
                start = time.monotonic()
                created = c.create(_job(name, n))
                want = CHILDREN_PER_JOB - 1 + n
                while _children_ready(c).get(name, 0) < want:
                    if time.monotonic() - start > 300:
                        raise RuntimeError(f"{name}: not every child was created in 300 s")
                    time.sleep(0.05)
                to_children = time.monotonic() - start
                history = (created["apiVersion"], "asyncrljobs", name)
                writes0 = len(c.history(*history))
                time.sleep(settle_s)
                writes = len(c.history(*history)) - writes0
                job = c.get(c.job_path(name)) or {}
                text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).text
                out[n] = {
                    "seconds_to_all_children": round(to_children, 2),
                    "status_bytes": len(json.dumps(job.get("status", {}))),
                    "status_writes_per_minute": round(writes * 60 / settle_s, 1),
                    "operator_series": series_of(text, f'dressage_job="{name}"'),
                }
                print(f"  operator, {n} engines: {out[n]}", flush=True)
    return out


@contextlib.contextmanager
def proxies(listing: Path, count: int, health_interval_s: str) -> Iterator[list[Any]]:
    """`count` proxy processes over the engines listed in `listing` (read again at every
    health check, as the operator's ConfigMap is). Started one after the other from this
    thread: a child started from a thread that then ends is ended with it
    (`dressage_testkit.processes` asks the kernel to end children with their parent)."""
    with contextlib.ExitStack() as stack:
        args = ["--engine-urls-file", str(listing), "--max-concurrency", "4096"]
        args += ["--health-interval-s", health_interval_s]
        yield [stack.enter_context(start_proxy([], *args)) for _ in range(count)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="8 and 16 engines, a few seconds")
    parser.add_argument("--engines", type=int, nargs="+", default=[16, 64, 256, 1024])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--trajectories", type=int, default=2000)
    parser.add_argument("--conc", type=int, default=256, help="trajectories in flight")
    parser.add_argument(
        "--per-engine",
        type=int,
        default=8,
        help="at least this many trajectories per engine in the throughput phase",
    )
    parser.add_argument("--sessions", type=int, default=4000)
    parser.add_argument("--latency-samples", type=int, default=200)
    parser.add_argument("--publishes", type=int, default=3)
    parser.add_argument("--token-ms", type=float, default=2.0)
    parser.add_argument("--load-ms", type=float, default=200.0)
    parser.add_argument("--transfer-ms", type=float, default=50.0)
    parser.add_argument("--buckets", type=int, default=4)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.quick:
        args.engines, args.replicas = [8, 16], [1, 2]
        args.trajectories, args.conc, args.sessions = 96, 32, 200
        args.latency_samples, args.publishes, args.settle_s = 16, 1, 1.0
        args.load_ms, args.transfer_ms, args.buckets = 50.0, 10.0, 2
    out = args.out or (RESULTS.with_name("fleet_scale_quick.json") if args.quick else RESULTS)
    load_before = os.getloadavg()
    started = time.monotonic()
    results = []
    fleet = Fleet(max(args.engines), args)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            listing = Path(tmp) / "engines"
            listing.write_text(fleet.urls[0] + "\n")
            interval = "0.5" if args.quick else "5"
            with proxies(listing, max(args.replicas), interval) as started_proxies:
                replicas = [p.base_url for p in started_proxies]
                pids = [p.process.pid for p in started_proxies]
                for n in args.engines:
                    print(f"{n} engines", flush=True)
                    listing.write_text("\n".join(fleet.urls[:n]) + "\n")
                    asyncio.run(wait_healthy(replicas, n))
                    try:
                        results.append(asyncio.run(measure_fleet(n, fleet, replicas, pids, args)))
                    except Exception as exc:  # the sizes measured so far stand
                        print(f"  {n} engines failed: {type(exc).__name__}: {exc}", flush=True)
                        results.append({"engines": n, "error": f"{type(exc).__name__}: {exc}"})
                        break
                    write_result(
                        out, _result(args, load_before, started, results), announce=False
                    )
    finally:
        fleet.close()
    operator = operator_jobs(args.engines, args.settle_s)
    for figures in results:
        n = figures["engines"]
        figures["operator"] = operator[n]
        if "error" in figures:
            continue
        figures["sglang_series"] = n * SGLANG_SERIES_PER_ENGINE
        figures["series_per_job"] = (
            operator[n]["operator_series"]
            + max(args.replicas) * figures["proxy_series"]
            + figures["sglang_series"]
        )
    write_result(out, _result(args, load_before, started, results))
    return 0


def _result(
    args: argparse.Namespace,
    load_before: tuple[float, ...],
    started: float,
    results: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "benchmark": "fleet_scale",
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_seconds": round(time.monotonic() - started, 1),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "results": results,
        "provisional": True,
    }


if __name__ == "__main__":
    raise SystemExit(main())

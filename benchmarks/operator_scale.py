"""How fast the operator turns applied AsyncRLJobs into children, and what it costs in memory.

For 1 and for 100 jobs: start the operator (`python -m dressage_operator`, a real process)
against the kmock API emulation over loopback HTTP, create the jobs, and measure the time from
each job's creation until all its children exist (ConfigMap, 3 Services, proxy Deployment,
trainer and engine pods), the time until every job's children exist, and the operator's
resident memory (idle and with the jobs). The emulation answers in-process, so the figures are
the operator's own latency plus loopback HTTP, not a real API server's.

Fairness: with the engine limit raised (`DRESSAGE_OPERATOR_LIMITS`), a large job (500 engines)
is applied, and once its first children exist a small job (1 trainer, 1 engine); the figure is
the time from the small job's creation until all its children exist, and how many of the large
job's children existed by then, with the operator's `maxCreatesPerCycle` (50) and without a
bound (every child of a job created in one cycle).

    python benchmarks/operator_scale.py [--jobs 1 100] [--fairness-engines 500] [--timeout 300]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
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
sys.path[:0] = [str(ROOT), str(ROOT / "operator"), str(ROOT / "benchmarks")]

from _runs import write_result  # noqa: E402
from dressage_testkit.kube import EmulatedCluster, emulated_cluster  # noqa: E402
from dressage_testkit.processes import free_port, stop_process  # noqa: E402

NAMESPACE = "bench"
RESULT = ROOT / "benchmarks" / "results" / "operator_scale.json"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _job(name: str, engines: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "trainer": {"nodes": 1, "gpusPerNode": 0},
            "inference": {"replicas": engines},
            "storage": {"persistentVolumeClaim": "shared"},
        },
    }


def _children_ready(c: EmulatedCluster) -> dict[str, int]:
    """Per job: how many of its children exist, read from the emulator's memory (listing them
    over HTTP every poll would load the emulator more than the operator does)."""
    assert c.emulator is not None
    for _attempt in range(10):
        try:
            objects = list(c.emulator.objects.items())
            break
        except RuntimeError:  # the emulator thread changed the dict while we copied it
            time.sleep(0.01)
    else:
        return {}
    counts: dict[str, int] = {}
    for (resource, _ns, _name), obj in objects:
        if obj.deleted or resource.plural not in CHILD_PLURALS:
            continue
        job = (obj.raw.get("metadata", {}).get("labels") or {}).get("dressage.io/job")
        if job:
            counts[job] = counts.get(job, 0) + 1
    return counts


CHILD_PLURALS = {"pods", "services", "configmaps", "deployments"}
CHILDREN_PER_JOB = 7  # ConfigMap, 3 Services, Deployment, 1 trainer pod, 1 engine pod


@contextlib.contextmanager
def _operator(
    c: EmulatedCluster, metrics_port: int = 0, **extra_env: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator as a real process against the emulation, started and healthy (its
    `/metrics` on `metrics_port`; 0: a free port nobody reads)."""
    with tempfile.TemporaryDirectory() as tmp:
        health = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(c.write_kubeconfig(Path(tmp) / "config")),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'operator'}",
            **extra_env,
        }
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dressage_operator",
                "--namespace",
                NAMESPACE,
                "--metrics-port",
                str(metrics_port),
                "--health-port",
                str(health),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            # OPERATOR_LOG=path keeps the operator's log of the last run.
            stderr=open(os.environ["OPERATOR_LOG"], "w")  # noqa: SIM115
            if os.environ.get("OPERATOR_LOG")
            else subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", health), timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise RuntimeError("the operator did not start") from None
                    time.sleep(0.1)
            time.sleep(1.0)  # let kopf finish its initial listing
            yield proc
        finally:
            stop_process(proc, grace_s=30)


def run(n_jobs: int, timeout: float) -> dict[str, Any]:
    with emulated_cluster(NAMESPACE) as c:
        c.http.timeout = httpx.Timeout(120.0)
        with _operator(c) as proc:
            idle_rss = _rss_mib(proc.pid)
            idle_cpu = _cpu_seconds(proc.pid)
            own_cpu = time.process_time()
            created: dict[str, float] = {}
            done: dict[str, float] = {}
            start = time.monotonic()
            for i in range(n_jobs):
                name = f"job-{i:03d}"
                c.create(_job(name))
                created[name] = time.monotonic()
            create_seconds = time.monotonic() - start
            deadline = start + timeout
            while len(done) < n_jobs and time.monotonic() < deadline:
                counts = _children_ready(c)
                now = time.monotonic()
                for name, count in counts.items():
                    if count >= CHILDREN_PER_JOB and name not in done:
                        done[name] = now
                time.sleep(0.05)
            all_done = max(done.values()) - start if len(done) == n_jobs else None
            latencies = [done[n] - created[n] for n in done]
            rss = _rss_mib(proc.pid)
            operator_cpu = _cpu_seconds(proc.pid) - idle_cpu
            emulator_cpu = time.process_time() - own_cpu
    return {
        "jobs": n_jobs,
        "converged": len(done),
        "seconds_to_create_jobs": round(create_seconds, 3),
        "seconds_to_all_children": None if all_done is None else round(all_done, 3),
        "per_job_latency_median_s": round(statistics.median(latencies), 3) if latencies else None,
        "per_job_latency_max_s": round(max(latencies), 3) if latencies else None,
        "operator_cpu_s": round(operator_cpu, 2),
        "emulator_and_client_cpu_s": round(emulator_cpu, 2),
        "operator_rss_idle_mib": round(idle_rss, 1),
        "operator_rss_mib": round(rss, 1),
        "rss_per_job_kib": round((rss - idle_rss) * 1024 / n_jobs, 1),
    }


def fairness(engines: int, creates_per_cycle: int | None, timeout: float) -> dict[str, Any]:
    """A small job applied while a large one (`engines` engines) is being created: how long
    until the small job's children all exist, and how far the large job had got by then.
    `creates_per_cycle` None: no bound (every child of a job created in one cycle)."""
    large_children = CHILDREN_PER_JOB - 1 + engines
    bound = 10**9 if creates_per_cycle is None else creates_per_cycle
    with emulated_cluster(NAMESPACE) as c:
        c.http.timeout = httpx.Timeout(120.0)
        limits = json.dumps({"inferenceReplicas": engines})
        with _operator(
            c,
            DRESSAGE_OPERATOR_LIMITS=limits,
            DRESSAGE_OPERATOR_MAX_CREATES_PER_CYCLE=str(bound),
        ):
            start = time.monotonic()
            c.create(_job("large", engines))
            deadline = start + timeout
            while _children_ready(c).get("large", 0) < CHILDREN_PER_JOB:
                if time.monotonic() > deadline:
                    raise RuntimeError("the large job did not start")
                time.sleep(0.01)
            small_created = time.monotonic()
            large_at_small_creation = _children_ready(c).get("large", 0)
            c.create(_job("small"))
            small_done = large_done = None
            large_at_small_done = 0
            while (small_done is None or large_done is None) and time.monotonic() < deadline:
                counts = _children_ready(c)
                now = time.monotonic()
                if small_done is None and counts.get("small", 0) >= CHILDREN_PER_JOB:
                    small_done, large_at_small_done = now, counts.get("large", 0)
                if large_done is None and counts.get("large", 0) >= large_children:
                    large_done = now
                time.sleep(0.01)
    return {
        "large_job_engines": engines,
        "max_creates_per_cycle": creates_per_cycle,
        "large_children_when_small_applied": large_at_small_creation,
        "small_job_seconds_to_all_children": None
        if small_done is None
        else round(small_done - small_created, 3),
        "large_children_when_small_done": large_at_small_done,
        "large_job_children": large_children,
        "large_job_seconds_to_all_children": None
        if large_done is None
        else round(large_done - start, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 100])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument(
        "--fairness-engines", type=int, default=500, help="engines of the large job; 0 skips"
    )
    args = parser.parse_args()
    results = [run(n, args.timeout) for n in args.jobs]
    fair = []
    if args.fairness_engines:
        fair = [fairness(args.fairness_engines, bound, args.timeout) for bound in (50, None)]
    header = (
        f"{'jobs':>5} {'create (s)':>11} {'all children (s)':>17} "
        f"{'median (s)':>11} {'max (s)':>8} "
        f"{'RSS idle (MiB)':>15} {'RSS (MiB)':>10} {'per job (KiB)':>14}"
    )
    print(header)
    for r in results:
        print(
            f"{r['jobs']:>5} jobs: {r['converged']} converged; CPU seconds: operator "
            f"{r['operator_cpu_s']}, emulator+client {r['emulator_and_client_cpu_s']}"
        )
    for r in results:
        r = {k: "-" if v is None else v for k, v in r.items()}
        print(
            f"{r['jobs']:>5} {r['seconds_to_create_jobs']:>11} {r['seconds_to_all_children']:>17} "
            f"{r['per_job_latency_median_s']:>11} {r['per_job_latency_max_s']:>8} "
            f"{r['operator_rss_idle_mib']:>15} {r['operator_rss_mib']:>10} "
            f"{r['rss_per_job_kib']:>14}"
        )
    if (
        len(results) >= 2
        and results[0]["seconds_to_all_children"]
        and results[-1]["seconds_to_all_children"]
    ):
        ratio = results[-1]["seconds_to_all_children"] / results[0]["seconds_to_all_children"]
        print(f"time ratio {results[-1]['jobs']} jobs / {results[0]['jobs']} job: {ratio:.1f}x")
    for f in fair:
        bound = f["max_creates_per_cycle"] or "unbounded"
        print(
            f"fairness, {f['large_job_engines']} engines, creates per cycle {bound}: small job "
            f"{f['small_job_seconds_to_all_children']} s, large job had "
            f"{f['large_children_when_small_done']}/{f['large_job_children']} children by then "
            f"(all in {f['large_job_seconds_to_all_children']} s)"
        )
    write_result(RESULT, {"results": results, "fairness": fair})
    converged = all(r["converged"] == r["jobs"] for r in results)
    return 0 if converged and all(f["small_job_seconds_to_all_children"] for f in fair) else 1


if __name__ == "__main__":
    sys.exit(main())

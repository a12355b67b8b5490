"""A small real process that serves Dressage's Prometheus metrics for the dashboard tests.

It exports, through `prometheus_client` and with the names from `dressage.metrics`:
- on `--port`, what a job's pods export (trainer, collector and proxy series), with values
  that move every tick the way a short async run's do (versions advance, groups complete, some
  are dropped, spans stay within the limit);
- on `--operator-port`, what the operator exports (per-job series labelled `namespace` and
  `dressage_job`, and its reconcile health);
- on `--engine-port`, what an engine pod exports: SGLang's own metrics
  (`dressage.metrics.sglang`) with the labels of the newest tested release;
- on `--dcgm-port`, what NVIDIA's DCGM exporter serves for that engine pod's GPU (its
  Kubernetes mode: `namespace` and `pod` labels, scraped with honor_labels).

Run: `python -m tests.chart.metrics_target --port 0 --operator-port 0 --seconds 60`; it prints
one JSON line `{"port": ..., "operator_port": ...}` once both servers listen, then ticks until
`--seconds` have passed.

`start_metrics_target()` is the one place the fast Prometheus test gets its scrape targets
from; `test_prometheus_real_run.py` scrapes a short real `dressage run` instead (slow).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dressage_testkit.processes import stop_process
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dressage import metrics as m
from dressage.api.sglang import SGLANG_NEWEST_TESTED
from dressage.metrics import sglang

ROOT = Path(__file__).resolve().parents[2]
JOB_NAMESPACE = "ml"
JOB_NAME = "tiny"
VERSION_SPAN_LIMIT = 3
ENGINE_POD = f"{JOB_NAME}-engine-0"


class RuntimeMetrics:
    """The series of one job's pods."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, labels, registry=registry)

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name.removesuffix("_total"), doc, labels, registry=registry)

        self.span_mean = gauge(m.STALENESS_VERSION_SPAN_MEAN, "Mean version span.")
        self.span_max = gauge(m.STALENESS_VERSION_SPAN_MAX, "Max version span.")
        self.span_min = gauge(m.STALENESS_VERSION_SPAN_MIN, "Min version span.")
        self.lag_mean = gauge(m.STALENESS_VERSION_LAG_MEAN, "Mean version lag.")
        self.lag_token_mean = gauge(m.STALENESS_VERSION_LAG_TOKEN_MEAN, "Token mean lag.")
        self.lag_max = gauge(m.STALENESS_VERSION_LAG_MAX, "Max version lag.")
        self.admission_lag_max = gauge(m.STALENESS_ADMISSION_LAG_MAX, "Max projected lag.")
        self.logprob_diff = gauge(m.TRAIN_ROLLOUT_LOGPROB_ABS_DIFF, "Train-rollout logprob gap.")
        self.reward = gauge(m.REWARD_MEAN, "Mean reward.")
        self.step = gauge(m.TRAIN_STEP, "Train step.")
        self.version = gauge(m.WEIGHT_VERSION, "Weight version ordinal.")
        self.dropped = counter(m.DROPPED_GROUPS, "Dropped groups.", ("reason",))
        self.failures = counter(m.STALENESS_FAILURES, "Staleness failures.")
        self.retries = counter(m.ROLLOUT_RETRIES, "Rollout retries.")
        self.completed = counter(m.ROLLOUT_GROUPS_COMPLETED, "Groups completed.")
        self.trained = counter(m.TRAINED_SAMPLES, "Samples trained.")
        self.requests = counter(m.PROXY_REQUESTS, "Proxy requests.", ("endpoint", "code"))
        self.duration = Histogram(
            m.PROXY_REQUEST_DURATION, "Proxy request duration.", registry=registry
        )
        self.refusals = counter(m.PROXY_REFUSALS, "Proxy refusals.", ("reason",))
        self.preempts = counter(m.PROXY_PREEMPTS, "Proxy preempts.")
        self.sessions = gauge(m.PROXY_ACTIVE_SESSIONS, "Active sessions.")
        self.segment_span = Histogram(
            m.PROXY_VERSION_SPAN,
            "Segment version spans.",
            buckets=(1, 2, 3, 4, 8),
            registry=registry,
        )
        self.engine_healthy = gauge(m.PROXY_ENGINE_HEALTHY, "Engine health.", ("engine",))

    def tick(self, i: int) -> None:
        """Advance one step of a healthy run with some staleness."""
        self.step.set(i)
        self.version.set(i)
        self.span_mean.set(1.0 + (i % 3) / 3)
        self.span_max.set(min(VERSION_SPAN_LIMIT, 1 + i % 4))
        self.span_min.set(1)
        self.lag_mean.set((i % 3) / 2)
        self.lag_token_mean.set((i % 3) / 2)
        self.lag_max.set(i % 3)
        self.admission_lag_max.set(1)
        self.logprob_diff.set(0.05 / (1 + i))
        self.reward.set(min(1.0, 0.1 * i))
        self.completed.inc(8)
        self.trained.inc(64)
        self.dropped.labels("stale_version").inc(1)
        if i % 2:
            self.dropped.labels("retries_exhausted").inc(1)
        self.failures.inc(1)
        self.retries.inc(2)
        self.requests.labels("/generate", "200").inc(64)
        self.requests.labels("/generate", "502").inc(1)
        self.refusals.labels("partial_rollout_staleness_exceeded").inc(1)
        self.preempts.inc(3)
        self.sessions.set(16)
        for seconds in (0.05, 0.2, 0.8):
            self.duration.observe(seconds)
        for span in (1, 2, 3):
            self.segment_span.observe(span)
        self.engine_healthy.labels("engine-0").set(1)


class OperatorMetrics:
    """The operator's series for one job plus its reconcile health."""

    def __init__(self, registry: CollectorRegistry) -> None:
        job = ("namespace", m.JOB_LABEL)
        self.span_mean = Gauge(m.JOB_STALENESS_VERSION_SPAN_MEAN, "Mean.", job, registry=registry)
        self.span_max = Gauge(m.JOB_STALENESS_VERSION_SPAN_MAX, "Max.", job, registry=registry)
        self.span_min = Gauge(m.JOB_STALENESS_VERSION_SPAN_MIN, "Min.", job, registry=registry)
        self.lag_max = Gauge(m.JOB_STALENESS_VERSION_LAG_MAX, "Lag max.", job, registry=registry)
        self.limit = Gauge(m.JOB_MAX_VERSION_SPAN_LIMIT, "Span limit.", job, registry=registry)
        self.step = Gauge(m.JOB_TRAIN_STEP, "Step.", job, registry=registry)
        self.version = Gauge(m.JOB_WEIGHT_VERSION, "Version.", job, registry=registry)
        self.phase = Gauge(m.JOB_PHASE, "Phase.", (*job, "phase"), registry=registry)
        self.dropped = Counter(
            m.JOB_DROPPED_GROUPS.removesuffix("_total"),
            "Drops.",
            (*job, "reason"),
            registry=registry,
        )
        self.failures = Counter(
            m.JOB_STALENESS_FAILURES.removesuffix("_total"), "Failures.", job, registry=registry
        )
        self.restarts = Counter(
            m.JOB_RESTARTS.removesuffix("_total"), "Restarts.", job, registry=registry
        )
        self.reconciles = Counter(
            m.OPERATOR_RECONCILE.removesuffix("_total"),
            "Reconciles.",
            ("result",),
            registry=registry,
        )
        self.errors = Counter(
            m.OPERATOR_RECONCILE_ERRORS.removesuffix("_total"), "Errors.", registry=registry
        )
        self.duration = Histogram(m.OPERATOR_RECONCILE_DURATION, "Duration.", registry=registry)

    def tick(self, i: int) -> None:
        labels = (JOB_NAMESPACE, JOB_NAME)
        self.span_mean.labels(*labels).set(1.5)
        self.span_max.labels(*labels).set(min(VERSION_SPAN_LIMIT, 1 + i % 4))
        self.span_min.labels(*labels).set(1)
        self.lag_max.labels(*labels).set(i % 3)
        self.limit.labels(*labels).set(VERSION_SPAN_LIMIT)
        self.step.labels(*labels).set(i)
        self.version.labels(*labels).set(i)
        for phase in ("Pending", "Running", "Failed"):
            self.phase.labels(*labels, phase).set(1 if phase == "Running" else 0)
        self.dropped.labels(*labels, "stale_version").inc(1)
        self.failures.labels(*labels).inc(1)
        self.restarts.labels(*labels).inc(0)
        self.reconciles.labels("ok").inc(1)
        self.errors.inc(0)
        self.duration.observe(0.02)


class EngineMetrics:
    """SGLang's series of one engine pod, as the newest tested release labels them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.families: dict[str, Gauge | Counter | Histogram] = {}
        for metric in sglang.METRICS:
            labels = sglang.labels_of(metric, SGLANG_NEWEST_TESTED)
            if metric.kind == "gauge":
                family: Gauge | Counter | Histogram = Gauge(
                    metric.name, metric.help, labels, registry=registry
                )
            elif metric.kind == "counter":
                family = Counter(metric.name, metric.help, labels, registry=registry)
            else:
                family = Histogram(metric.name, metric.help, labels, registry=registry)
            self.families[metric.name] = family
        self.values = {
            "model_name": "builtin:tiny",
            "engine_type": "unified",
            "is_streaming": "false",
        }

    def _labels(self, name: str) -> list[str]:
        metric = next(m for m in sglang.METRICS if m.name == name)
        return [self.values.get(k, "0") for k in sglang.labels_of(metric, SGLANG_NEWEST_TESTED)]

    def tick(self, i: int) -> None:
        """Two requests running, one queued, a filling cache; three requests finish."""
        for name, value in (
            (sglang.NUM_RUNNING_REQS, 2),
            (sglang.NUM_QUEUE_REQS, 1),
            (sglang.NUM_USED_TOKENS, 100 + i),
            (sglang.TOKEN_USAGE, min(1.0, 0.1 + i / 100)),
            (sglang.GEN_THROUGHPUT, 250.0),
        ):
            family = self.families[name]
            assert isinstance(family, Gauge)
            family.labels(*self._labels(name)).set(value)
        for name, amount in (
            (sglang.PROMPT_TOKENS, 48),
            (sglang.GENERATION_TOKENS, 96),
            (sglang.NUM_REQUESTS, 3),
        ):
            family = self.families[name]
            assert isinstance(family, Counter)
            family.labels(*self._labels(name)).inc(amount)
        for name, seconds in (
            (sglang.TIME_TO_FIRST_TOKEN, 0.05),
            (sglang.E2E_REQUEST_LATENCY, 0.8),
        ):
            family = self.families[name]
            assert isinstance(family, Histogram)
            family.labels(*self._labels(name)).observe(seconds)


class DcgmMetrics:
    """The DCGM exporter's GPU series of the engine pod's GPU."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ("gpu", "UUID", "namespace", "pod", "container")
        self.util = Gauge(
            "DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", labels, registry=registry
        )
        self.fb_used = Gauge(
            "DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", labels, registry=registry
        )
        self.labels = ("0", "GPU-0", JOB_NAMESPACE, ENGINE_POD, "sglang")

    def tick(self, i: int) -> None:
        self.util.labels(*self.labels).set(60 + i % 30)
        self.fb_used.labels(*self.labels).set(70000)


@dataclass
class MetricsTarget:
    """A running process serving job-pod metrics and operator metrics on loopback."""

    process: subprocess.Popen[str]
    job_pods: str
    """host:port of the job pods' /metrics."""
    operator: str
    """host:port of the operator's /metrics."""
    engine: str
    """host:port of the engine pod's /metrics (SGLang's names)."""
    dcgm: str
    """host:port of the DCGM exporter's /metrics."""

    def stop(self) -> None:
        stop_process(self.process, grace_s=5)
        if self.process.stdout is not None:
            self.process.stdout.close()


def start_metrics_target(seconds: float = 60) -> MetricsTarget:
    """Start the scrape targets of the fast Prometheus test and return their addresses.

    The slow variant (`test_prometheus_real_run.py`) runs `dressage run` on a small copy of
    `examples/local-tiny.yaml` instead and feeds the operator's own metrics code from it.
    """
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.chart.metrics_target",
            "--port",
            "0",
            "--operator-port",
            "0",
            "--engine-port",
            "0",
            "--dcgm-port",
            "0",
            "--seconds",
            str(seconds),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # the process prints it once both servers listen
    if not line:
        process.wait(timeout=5)
        process.stdout.close()
        raise RuntimeError(f"metrics target exited with {process.returncode} before listening")
    ports = json.loads(line)
    return MetricsTarget(
        process=process,
        job_pods=f"127.0.0.1:{ports['port']}",
        operator=f"127.0.0.1:{ports['operator_port']}",
        engine=f"127.0.0.1:{ports['engine_port']}",
        dcgm=f"127.0.0.1:{ports['dcgm_port']}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--operator-port", type=int, default=0)
    parser.add_argument("--engine-port", type=int, default=0)
    parser.add_argument("--dcgm-port", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tick", type=float, default=0.5)
    args = parser.parse_args()

    registries = {
        key: CollectorRegistry() for key in ("port", "operator_port", "engine_port", "dcgm_port")
    }
    sources = [
        RuntimeMetrics(registries["port"]),
        OperatorMetrics(registries["operator_port"]),
        EngineMetrics(registries["engine_port"]),
        DcgmMetrics(registries["dcgm_port"]),
    ]
    for source in sources:
        source.tick(0)
    servers = {
        key: start_http_server(getattr(args, key), "127.0.0.1", registry=registry)[0]
        for key, registry in registries.items()
    }
    print(json.dumps({key: server.server_port for key, server in servers.items()}), flush=True)

    deadline = time.monotonic() + args.seconds
    i = 1
    while time.monotonic() < deadline:
        time.sleep(args.tick)
        for source in sources:
            source.tick(i)
        i += 1
    for server in servers.values():
        server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A small real process that serves Dressage's Prometheus metrics for the dashboard tests.

It exports, through `prometheus_client` and with the names from `dressage.metrics`:
- on `--port`, what a job's pods export (trainer, collector and proxy series), with values
  that move every tick the way a short async run's do (versions advance, groups complete, some
  are dropped, spans stay within the limit);
- on `--operator-port`, what the operator exports (per-job series labelled `namespace` and
  `dressage_job`, and its reconcile health).

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

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from dressage import metrics as m
from dressage.testing import stop_process

ROOT = Path(__file__).resolve().parents[2]
JOB_NAMESPACE = "ml"
JOB_NAME = "tiny"
VERSION_SPAN_LIMIT = 3


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


@dataclass
class MetricsTarget:
    """A running process serving job-pod metrics and operator metrics on loopback."""

    process: subprocess.Popen[str]
    job_pods: str
    """host:port of the job pods' /metrics."""
    operator: str
    """host:port of the operator's /metrics."""

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
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--operator-port", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tick", type=float, default=0.5)
    args = parser.parse_args()

    runtime_registry, operator_registry = CollectorRegistry(), CollectorRegistry()
    runtime, operator = RuntimeMetrics(runtime_registry), OperatorMetrics(operator_registry)
    runtime.tick(0)
    operator.tick(0)
    runtime_server, _ = start_http_server(args.port, "127.0.0.1", registry=runtime_registry)
    operator_server, _ = start_http_server(
        args.operator_port, "127.0.0.1", registry=operator_registry
    )
    ports = {"port": runtime_server.server_port, "operator_port": operator_server.server_port}
    print(json.dumps(ports), flush=True)

    deadline = time.monotonic() + args.seconds
    i = 1
    while time.monotonic() < deadline:
        time.sleep(args.tick)
        runtime.tick(i)
        operator.tick(i)
        i += 1
    runtime_server.shutdown()
    operator_server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

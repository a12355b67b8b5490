"""The dashboard's Staleness panels against a real Prometheus scraping a real `dressage run`.

A short local run of the tiny job (`examples/local-tiny.yaml`, partial async rollout with a
preempt limit, small batches) serves the job's `/metrics` and its proxy serves its own; both
are scraped every 250 ms with the labels the chart's PodMonitor gives trainer and proxy pods
(`namespace`, `pod`, `job_name`, `component`). The operator's series come from the operator's
own code: its `parse_staleness` reads the run's `/metrics` (what its reconcile loop does on a
cluster) into its `OperatorMetrics` registry, served here and scraped with honor_labels like
the chart's ServiceMonitor. Every Staleness query must return series, evaluated at the time
of the run's last step (a finished run's targets go stale).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from dressage_operator.metrics import OperatorMetrics, version_span_limit
from dressage_operator.staleness import parse_staleness
from prometheus_client import start_http_server

from dressage.api import load_job
from dressage.api.status import AsyncRLJobStatus, JobPhase
from tests.chart.prometheus import Prometheus, prometheus_server, staleness_queries
from tests.chart.tools import ROOT, require_tool

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB_NAME = "tiny"
JOB_NAMESPACE = "ml"
STEPS = 100
RUN_TIMEOUT_SECONDS = 240.0
SCRAPE_INTERVAL = "250ms"


def _manifest(tmp: Path) -> Path:
    manifest = yaml.safe_load((ROOT / "examples" / "local-tiny.yaml").read_text())
    manifest["metadata"]["name"] = JOB_NAME
    spec = manifest["spec"]
    spec["rollout"].update(mode="partial_async", batchSize=2, groupSize=2)
    spec["staleness"]["maxPartialRolloutPreempts"] = 2
    spec["local"] = {"metricsPort": 0, "workdir": str(tmp / "runs")}
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


class OperatorFeed:
    """The operator's metrics for the run, refreshed from the run's `/metrics`."""

    def __init__(self, metrics_url: str, max_span: int | None) -> None:
        self.metrics = OperatorMetrics()
        self.server, self._thread = start_http_server(0, "127.0.0.1", self.metrics.registry)
        self.target = f"127.0.0.1:{self.server.server_port}"
        self._url, self._max_span = metrics_url, max_span
        self._stop = threading.Event()
        self._feeder = threading.Thread(target=self._feed, daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        with httpx.Client(timeout=2) as client:
            while not self._stop.wait(0.25):
                try:
                    text = client.get(self._url).text
                except httpx.HTTPError:
                    continue
                status = AsyncRLJobStatus(phase=JobPhase.RUNNING, staleness=parse_staleness(text))
                self.metrics.jobs.update(JOB_NAMESPACE, JOB_NAME, status, self._max_span)

    def stop(self) -> None:
        self._stop.set()
        self._feeder.join(timeout=5)
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)


@dataclass
class ScrapedRun:
    prometheus: Prometheus
    last_step_at: float
    """Wall-clock time of the run's last step line: queries are evaluated there."""


def _job_target(address: str, pod: str, component: str) -> dict[str, Any]:
    labels = {
        "namespace": JOB_NAMESPACE,
        "pod": pod,
        "job_name": JOB_NAME,
        "component": component,
    }
    return {"targets": [address], "labels": labels}


def _scrape_configs(trainer: str, proxy: str, operator: str) -> list[dict[str, Any]]:
    return [
        {
            "job_name": "dressage-job-pods",
            "static_configs": [
                _job_target(trainer, f"{JOB_NAME}-trainer-0", "trainer"),
                _job_target(proxy, f"{JOB_NAME}-proxy-0", "proxy"),
            ],
        },
        {
            "job_name": "dressage-operator-metrics",
            "honor_labels": True,
            "static_configs": [{"targets": [operator]}],
        },
    ]


@pytest.fixture(scope="module")
def scraped_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScrapedRun]:
    """Run the job; once it prints its proxy and metrics URLs, start Prometheus on them (a
    server picks up targets at start at once, but only seconds after a config reload)."""
    require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("real-run")
    manifest = _manifest(tmp)
    max_span = version_span_limit(load_job(manifest).spec)
    assert max_span == 3
    with contextlib.ExitStack() as stack:
        run = subprocess.Popen(
            [sys.executable, "-m", "dressage", "run", str(manifest), "--steps", str(STEPS)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert run.stdout is not None
        stack.callback(_stop, run)
        timer = threading.Timer(RUN_TIMEOUT_SECONDS, run.kill)
        timer.start()
        stack.callback(timer.cancel)
        prometheus: Prometheus | None = None
        lines: list[str] = []
        proxy = ""
        last_step_at = 0.0
        for line in run.stdout:
            lines.append(line)
            if line.startswith("proxy ready: "):
                proxy = line.removeprefix("proxy ready: ").strip().removeprefix("http://")
            elif line.startswith("metrics on "):
                url = line.removeprefix("metrics on ").strip()
                trainer = url.removeprefix("http://").removesuffix("/metrics")
                assert proxy, "the run printed no proxy URL before its metrics URL"
                feed = OperatorFeed(url, max_span)
                stack.callback(feed.stop)
                configs = _scrape_configs(trainer, proxy, feed.target)
                prometheus = stack.enter_context(prometheus_server(tmp, configs, SCRAPE_INTERVAL))
            elif line.lstrip().startswith(f"step {STEPS:4d}/{STEPS}"):
                last_step_at = time.time()
        code = run.wait(timeout=30)
        output = "".join(lines[-30:])
        assert code == 0, output
        assert prometheus is not None, f"the run printed no metrics URL:\n{output}"
        assert last_step_at, f"no line for step {STEPS}:\n{output}"
        # Every scrape up to the last step has been ingested once one more interval passed.
        time.sleep(0.5)
        yield ScrapedRun(prometheus, last_step_at)


def _stop(run: subprocess.Popen[str]) -> None:
    if run.poll() is None:
        run.kill()
        run.wait(timeout=10)
    if run.stdout is not None:
        run.stdout.close()


def test_staleness_panels_return_series_from_a_real_dressage_run(scraped_run: ScrapedRun) -> None:
    queries = staleness_queries()
    assert len(queries) >= 8
    empty = []
    for title, expr in queries:
        result = scraped_run.prometheus.series(expr, at=scraped_run.last_step_at)
        if not result:
            empty.append(f"{title}: {expr}")
        for series in result:
            assert series["metric"].get("job_name", JOB_NAME) == JOB_NAME, title
            assert series["metric"].get("job", JOB_NAME) == JOB_NAME, title
    assert empty == [], "queries without series:\n" + "\n".join(empty)


def test_operator_limit_and_run_figures_agree(scraped_run: ScrapedRun) -> None:
    """The operator's version-span limit is the job's (maxPartialRolloutPreempts + 1) and the
    run's max span stays within it; the run was scraped while training."""
    prom, at = scraped_run.prometheus, scraped_run.last_step_at
    (limit,) = prom.series('dressage_job_staleness_max_version_span{job="tiny"}', at)
    assert float(limit["value"][1]) == 3.0
    (span,) = prom.series('dressage_staleness_version_span_max{job_name="tiny"}', at)
    assert 1.0 <= float(span["value"][1]) <= 3.0
    (step,) = prom.series('dressage_train_step{job_name="tiny"}', at)
    # Scraped during the run's second half (a scrape may trail the last steps).
    assert float(step["value"][1]) >= STEPS // 2

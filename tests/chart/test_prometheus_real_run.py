"""The dashboard's Staleness panels against a real Prometheus scraping a real `dressage run`.

A short local run of the tiny job (`examples/local-tiny.yaml`, partial async rollout with a
preempt limit, small batches) serves the job's `/metrics` and its proxy serves its own; both
are scraped every second with the labels the chart's PodMonitor gives trainer and proxy pods
(`namespace`, `pod`, `dressage_job`, `component`). The operator's series come from the operator's
own code: its `parse_staleness` reads the run's `/metrics` (what its reconcile loop does on a
cluster) into its `OperatorMetrics` registry, served here and scraped with honor_labels like
the chart's ServiceMonitor. Every Staleness query must return series while the run trains,
the version lag's among them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from dressage_operator.metrics import OperatorMetrics, version_span_limit
from dressage_operator.staleness_scrape import parse_staleness
from dressage_testkit.processes import stop_process
from prometheus_client import start_http_server

from dressage import metrics as names
from dressage.api import load_job
from dressage.api.status import AsyncRLJobStatus, JobPhase
from tests.chart import dashboard as dash
from tests.chart.prometheus import (
    Prometheus,
    engine_metric_relabel_configs,
    prometheus_server,
    row_queries,
    staleness_queries,
    wait_until,
)
from tests.chart.tools import ROOT, require_tool

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB_NAME = "tiny"
JOB_NAMESPACE = "ml"
STEPS = 2000
"""More than the tests need: the run is stopped once they are done."""
RUN_START_SECONDS = 120.0
SERIES_DEADLINE_SECONDS = 60.0
SCRAPE_INTERVAL = "1s"
"""Also the scrape timeout: the proxy answers /metrics from its busy event loop."""


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


class RunOutput:
    """The run's stdout lines, read by a thread so the test can poll them with a deadline."""

    def __init__(self, run: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._run = run
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._run.stdout is not None
        for line in self._run.stdout:
            self.lines.append(line)

    def value(self, prefix: str) -> str:
        """The rest of the first line starting with `prefix`, or ''."""
        found = [line for line in list(self.lines) if line.startswith(prefix)]
        return found[0].removeprefix(prefix).strip() if found else ""

    def tail(self) -> str:
        return "".join(self.lines[-30:])

    def join(self) -> None:
        self._reader.join(timeout=10)


def _job_target(address: str, pod: str, component: str) -> dict[str, Any]:
    labels = {
        "namespace": JOB_NAMESPACE,
        "pod": pod,
        names.JOB_LABEL: JOB_NAME,
        "component": component,
    }
    return {"targets": [address], "labels": labels}


def _scrape_configs(
    trainer: str, proxy: str, engines: list[str], operator: str, tmp: Path
) -> list[dict[str, Any]]:
    return [
        {
            "job_name": "dressage-job-pods",
            "static_configs": [
                _job_target(trainer, f"{JOB_NAME}-trainer-0", "trainer"),
                _job_target(proxy, f"{JOB_NAME}-proxy-0", "proxy"),
            ],
        },
        {
            # The embedded engines' /metrics (SGLang's names), as the PodMonitor scrapes them.
            "job_name": "dressage-engine-pods",
            "metric_relabel_configs": engine_metric_relabel_configs(tmp),
            "static_configs": [
                _job_target(engine, f"{JOB_NAME}-engine-{i}", "inference")
                for i, engine in enumerate(engines)
            ],
        },
        {
            "job_name": "dressage-operator-metrics",
            "honor_labels": True,
            "static_configs": [{"targets": [operator]}],
        },
    ]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping a running job. The run is started with more steps than the tests
    need and stopped with SIGTERM (which `dressage run` handles) once they are done; the
    server starts once the run printed its proxy and metrics URLs."""
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
        stack.callback(_stop, run)
        output = RunOutput(run)
        stack.callback(output.join)
        deadline = time.monotonic() + RUN_START_SECONDS
        url = wait_until(
            "the run's metrics URL",
            lambda: run.poll() is None and output.value("metrics on "),
            deadline,
        )
        proxy = output.value("proxy ready: ").removeprefix("http://")
        assert proxy, f"the run printed no proxy URL before its metrics URL:\n{output.tail()}"
        trainer = url.removeprefix("http://").removesuffix("/metrics")
        ready = output.value("engines ready: ").split(" (")[0]
        engines = [e.strip().removeprefix("http://") for e in ready.split(",") if e.strip()]
        assert engines, f"the run printed no engine URLs before its metrics URL:\n{output.tail()}"
        feed = OperatorFeed(url, max_span)
        stack.callback(feed.stop)
        configs = _scrape_configs(trainer, proxy, engines, feed.target, tmp)
        server = stack.enter_context(prometheus_server(tmp, configs, SCRAPE_INTERVAL))
        yield server
        assert run.poll() is None, f"the run ended before the tests did:\n{output.tail()}"


def _stop(run: subprocess.Popen[str]) -> None:
    """SIGTERM (the run stops its children and writes its report), then kill if needed."""
    stop_process(run, grace_s=30)
    if run.stdout is not None:
        run.stdout.close()


def test_staleness_panels_return_series_from_a_real_dressage_run(prometheus: Prometheus) -> None:
    queries = staleness_queries()
    assert len(queries) >= 8
    deadline = time.monotonic() + SERIES_DEADLINE_SECONDS
    for title, expr in queries:
        result = wait_until(
            f"{title}: {expr}", functools.partial(prometheus.series, expr), deadline
        )
        for series in result:
            assert series["metric"].get(names.JOB_LABEL, JOB_NAME) == JOB_NAME, title


def test_operator_limit_and_run_figures_agree(prometheus: Prometheus) -> None:
    """The operator's version-span limit is the job's (maxPartialRolloutPreempts + 1), the
    run's max span stays within it, and its steps advance while it is scraped."""
    deadline = time.monotonic() + SERIES_DEADLINE_SECONDS
    limit = 'dressage_job_staleness_max_version_span{dressage_job="tiny"}'
    (found,) = wait_until(limit, functools.partial(prometheus.series, limit), deadline)
    assert float(found["value"][1]) == 3.0
    span = 'dressage_staleness_version_span_max{dressage_job="tiny"}'
    (found,) = wait_until(span, functools.partial(prometheus.series, span), deadline)
    assert 1.0 <= float(found["value"][1]) <= 3.0
    advancing = 'delta(dressage_train_step{dressage_job="tiny"}[1m]) > 0'
    wait_until(advancing, functools.partial(prometheus.series, advancing), deadline)


def test_version_lag_is_answered_for_the_run_and_by_the_operator(prometheus: Prometheus) -> None:
    """The run's version lag per sample and per token, the lag admission projects, and the
    operator's per-job max lag: all answered, never negative. Rollout runs ahead of the
    trainer here, so some step trains a batch at least one version behind it, while every
    trajectory spans one version."""
    deadline = time.monotonic() + SERIES_DEADLINE_SECONDS
    for metric in (
        names.STALENESS_VERSION_LAG_MEAN,
        names.STALENESS_VERSION_LAG_TOKEN_MEAN,
        names.STALENESS_VERSION_LAG_MAX,
        names.STALENESS_ADMISSION_LAG_MAX,
        names.JOB_STALENESS_VERSION_LAG_MAX,
    ):
        expr = f'{metric}{{{names.JOB_LABEL}="{JOB_NAME}"}}'
        (found,) = wait_until(expr, functools.partial(prometheus.series, expr), deadline)
        assert float(found["value"][1]) >= 0.0, expr
    lag_max = f'{names.STALENESS_VERSION_LAG_MAX}{{{names.JOB_LABEL}="{JOB_NAME}"}}'
    behind = f"max_over_time({lag_max}[10m]) >= 1"
    wait_until(behind, functools.partial(prometheus.series, behind), deadline)


def test_every_step_figure_is_answered_for_the_run(prometheus: Prometheus) -> None:
    """The step's seconds, loss, grad norm, trained and generated tokens and their ratios are
    exported by the run: each series answered, the counters advancing, the ratios in range,
    and no more tokens trained than the engines generated."""
    deadline = time.monotonic() + SERIES_DEADLINE_SECONDS
    job = f'{{{names.JOB_LABEL}="{JOB_NAME}"}}'
    # GRPO's clipped policy-gradient loss takes either sign (advantages are centred per
    # group): it only has to be a number.
    (loss,) = wait_until(
        names.TRAIN_LOSS, functools.partial(prometheus.series, names.TRAIN_LOSS + job), deadline
    )
    assert math.isfinite(float(loss["value"][1])), loss
    for metric in (
        names.TRAIN_GRAD_NORM,
        names.TRAINED_TOKENS_PER_SECOND,
        names.GENERATED_TOKENS_PER_TRAINED_TOKEN,
        names.TRAINER_BATCH_WAIT_FRACTION,
    ):
        (found,) = wait_until(metric, functools.partial(prometheus.series, metric + job), deadline)
        assert float(found["value"][1]) >= 0.0, metric
    for counter in (
        names.TRAINED_TOKENS,
        names.GENERATED_TOKENS,
        names.TRAINER_STEP_SECONDS,
        names.TRAINER_TRAIN_SECONDS,
        names.TRAINER_PUBLISH_SECONDS,
    ):
        rising = f"rate({counter}{job}[1m]) > 0"
        wait_until(rising, functools.partial(prometheus.series, rising), deadline)
    for expr in (
        f"{names.TRAINER_BATCH_WAIT_FRACTION}{job} <= 1",
        # The fraction of the trainer's time spent waiting for batches, as an alert reads it.
        f"rate({names.TRAINER_BATCH_WAIT_SECONDS}{job}[1m])"
        f" / rate({names.TRAINER_STEP_SECONDS}{job}[1m]) <= 1",
        # Every trained token was generated by an engine and counted when its group completed.
        f"{names.GENERATED_TOKENS}{job} - {names.TRAINED_TOKENS}{job} >= 0",
        # Weight sync seconds per step, as the dashboard shows them.
        f"increase({names.TRAINER_PUBLISH_SECONDS}{job}[1m])"
        f" / increase({names.TRAIN_STEP}{job}[1m]) > 0",
    ):
        wait_until(expr, functools.partial(prometheus.series, expr), deadline)


STEP_PANELS = (
    "Step time: batch wait, training, weight sync",
    "Trained and generated tokens / s",
    "Trainer waiting for batches",
)


def test_the_step_time_and_token_panels_return_series(prometheus: Prometheus) -> None:
    """Every query of the Training row's step time, tokens and batch-wait panels answers for
    the run, as Grafana sends it."""
    panels = {p["title"]: p for p in dash.load()["panels"] if p["title"] in STEP_PANELS}
    assert sorted(panels) == sorted(STEP_PANELS)
    deadline = time.monotonic() + SERIES_DEADLINE_SECONDS
    for title, panel in panels.items():
        for target in panel["targets"]:
            expr = dash.substitute(target["expr"])
            result = wait_until(
                f"{title}: {expr}", functools.partial(prometheus.series, expr), deadline
            )
            assert {s["metric"].get(names.JOB_LABEL) for s in result} == {JOB_NAME}, title


def test_the_engine_row_and_job_list_return_series(prometheus: Prometheus) -> None:
    """The embedded engines' SGLang metrics fill every query of the SGLang engines row but the
    DCGM panels (no GPU here), and the job and namespace lists name the run's job."""
    queries = [(t, e) for t, e in row_queries("SGLang engines") if "DCGM_FI_DEV_" not in e]
    assert len(queries) >= 8
    board = dash.load()
    queries += [(f"variable {n}", dash.substitute(s)) for n, s in dash.variable_selectors(board)]
    deadline = time.monotonic() + SERIES_DEADLINE_SECONDS
    for title, expr in queries:
        result = wait_until(
            f"{title}: {expr}", functools.partial(prometheus.series, expr), deadline
        )
        assert {s["metric"].get(names.JOB_LABEL, JOB_NAME) for s in result} == {JOB_NAME}, title

"""The dashboard and alert queries against a real Prometheus (Debian's package) on loopback.

Prometheus scrapes a stand-in process serving Dressage's metrics every second
(`metrics_target.start_metrics_target`): the fast variant. `test_prometheus_real_run.py`
scrapes a short real `dressage run` instead (slow). The job
pods' and the engine pod's targets get the labels the chart's PodMonitor adds (`namespace`,
`pod`, `dressage_job`, `component`); the operator's and the DCGM exporter's targets are scraped
with honor_labels like the chart's ServiceMonitor and the exporter's own. Then:
- every panel query, variable selector and alert expression is accepted by the server's query
  API (a parse error is HTTP 400 `bad_data`);
- every query of the Staleness and SGLang engines rows, the DCGM panels included, and the job
  and namespace lists return series.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dressage import metrics as m
from tests.chart import dashboard as dash
from tests.chart.metrics_target import ENGINE_POD, JOB_NAME, JOB_NAMESPACE, start_metrics_target
from tests.chart.prometheus import (
    DEADLINE_SECONDS,
    Prometheus,
    engine_metric_relabel_configs,
    prometheus_server,
    row_queries,
    staleness_queries,
    wait_until,
)
from tests.chart.tools import ALERTING, one, render, require_tool

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    target = start_metrics_target(seconds=60)
    scrape_configs: list[dict[str, Any]] = [
        {
            "job_name": "dressage-job-pods",
            "static_configs": [
                {
                    "targets": [target.job_pods],
                    # What the chart's PodMonitor relabeling gives a trainer pod.
                    "labels": {
                        "namespace": JOB_NAMESPACE,
                        "pod": f"{JOB_NAME}-trainer-0",
                        m.JOB_LABEL: JOB_NAME,
                        "component": "trainer",
                    },
                }
            ],
        },
        {
            "job_name": "dressage-engine-pods",
            "metric_relabel_configs": engine_metric_relabel_configs(tmp),
            "static_configs": [
                {
                    "targets": [target.engine],
                    "labels": {
                        "namespace": JOB_NAMESPACE,
                        "pod": ENGINE_POD,
                        m.JOB_LABEL: JOB_NAME,
                        "component": "inference",
                    },
                }
            ],
        },
        {
            "job_name": "dressage-operator-metrics",
            "honor_labels": True,
            "static_configs": [{"targets": [target.operator]}],
        },
        {
            "job_name": "dcgm-exporter",
            "honor_labels": True,
            "static_configs": [{"targets": [target.dcgm]}],
        },
    ]
    try:
        with prometheus_server(tmp, scrape_configs) as server:
            yield server
    finally:
        target.stop()


def test_server_reports_a_parse_error_as_bad_data(prometheus: Prometheus) -> None:
    response = prometheus.query("sum by (job_name (rate(x[1m]))")
    assert response.status_code == 400
    assert response.json()["errorType"] == "bad_data"


def test_every_dashboard_query_and_alert_expression_is_accepted(
    prometheus: Prometheus, tmp_path: Path
) -> None:
    queries = dash.all_promql(dash.load())
    rule = one(render(ALERTING, tmp_path), "PrometheusRule")
    queries += [(r["alert"], r["expr"]) for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(queries) > 30
    for where, expr in queries:
        response = prometheus.query(expr)
        assert response.status_code == 200, f"{where}: {expr}\n{response.text}"
        assert response.json()["status"] == "success", where


def test_staleness_panels_return_series_from_the_scraped_run(prometheus: Prometheus) -> None:
    queries = staleness_queries()
    titles = {title for title, _ in queries}
    assert "Version span per job (mean / max / min)" in titles
    assert len(queries) >= 8
    deadline = time.monotonic() + DEADLINE_SECONDS
    for title, expr in queries:
        result = wait_until(
            f"{title}: {expr}", functools.partial(prometheus.series, expr), deadline
        )
        for series in result:
            if m.JOB_LABEL in series["metric"]:
                assert series["metric"][m.JOB_LABEL] == JOB_NAME, title


def test_version_span_panel_reads_the_exported_figures(prometheus: Prometheus) -> None:
    """The min-span query of the version span panel returns the exported value, by job."""
    (panel,) = [p for p in dash.panels(dash.load()) if p["title"].startswith("Version span")]
    (expr,) = [t["expr"] for t in panel["targets"] if m.STALENESS_VERSION_SPAN_MIN in t["expr"]]
    deadline = time.monotonic() + DEADLINE_SECONDS
    result = wait_until(
        "version span min", lambda: prometheus.series(dash.substitute(expr)), deadline
    )
    assert result[0]["metric"] == {m.JOB_LABEL: JOB_NAME}
    assert float(result[0]["value"][1]) == 1.0


def test_engine_row_and_job_list_return_series(prometheus: Prometheus) -> None:
    """Every query of the SGLang engines row (SGLang's own names, and the DCGM panels matched
    to the job's engine pod) and the namespace and job lists answer for the scraped job."""
    queries = row_queries("SGLang engines")
    assert len(queries) >= 10
    board = dash.load()
    queries += [(f"variable {n}", dash.substitute(s)) for n, s in dash.variable_selectors(board)]
    deadline = time.monotonic() + DEADLINE_SECONDS
    for title, expr in queries:
        result = wait_until(
            f"{title}: {expr}", functools.partial(prometheus.series, expr), deadline
        )
        for series in result:
            assert series["metric"].get(m.JOB_LABEL, JOB_NAME) == JOB_NAME, title
            assert series["metric"].get("pod", ENGINE_POD) == ENGINE_POD, title

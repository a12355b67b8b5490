"""The dashboard and alert queries against a real Prometheus (Debian's package) on loopback.

Prometheus scrapes a real process serving Dressage's metrics every second
(`metrics_target.start_metrics_target`, the switch point to a short `dressage run`). The job
pods' target gets the labels the chart's PodMonitor adds (`namespace`, `pod`, `job_name`); the
operator's target is scraped with honor_labels like the chart's ServiceMonitor. Then:
- every panel query, variable selector and alert expression is accepted by the server's query
  API (a parse error is HTTP 400 `bad_data`);
- every query of the Staleness row returns series.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from dressage import metrics as m
from tests.chart import dashboard as dash
from tests.chart.metrics_target import JOB_NAME, JOB_NAMESPACE, start_metrics_target
from tests.chart.tools import one, render, require_tool

pytestmark = pytest.mark.integration

DEADLINE_SECONDS = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_until(what: str, check: Any, deadline: float) -> Any:
    """Poll `check()` until it returns something truthy or the deadline passes."""
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except httpx.TransportError as exc:
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    binary = require_tool("prometheus")
    tmp = tmp_path_factory.mktemp("prometheus")
    target = start_metrics_target(seconds=60)
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "dressage-job-pods",
                "static_configs": [
                    {
                        "targets": [target.job_pods],
                        # What the chart's PodMonitor relabeling gives a trainer pod.
                        "labels": {
                            "namespace": JOB_NAMESPACE,
                            "pod": f"{JOB_NAME}-trainer-0",
                            "job_name": JOB_NAME,
                            "component": "trainer",
                        },
                    }
                ],
            },
            {
                "job_name": "dressage-operator-metrics",
                "honor_labels": True,
                "static_configs": [{"targets": [target.operator]}],
            },
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp / "prometheus.log").open("w")
    server = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        _wait_until("Prometheus ready", lambda: client.get("/-/ready").status_code == 200, deadline)
        yield client
    finally:
        client.close()
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
        log.close()
        target.stop()


def _query(client: httpx.Client, expr: str) -> httpx.Response:
    return client.get("/api/v1/query", params={"query": expr})


def _series(client: httpx.Client, expr: str) -> list[dict[str, Any]]:
    response = _query(client, expr)
    assert response.status_code == 200, f"{expr}: {response.text}"
    result: list[dict[str, Any]] = response.json()["data"]["result"]
    return result


def _staleness_queries() -> list[tuple[str, str]]:
    board = dash.load()
    queries: list[tuple[str, str]] = []
    in_row = False
    for panel in board["panels"]:
        if panel["type"] == "row":
            in_row = panel["title"] == "Staleness"
            continue
        if in_row:
            queries += [(panel["title"], dash.substitute(t["expr"])) for t in panel["targets"]]
    return queries


def test_server_reports_a_parse_error_as_bad_data(prometheus: httpx.Client) -> None:
    response = _query(prometheus, "sum by (job_name (rate(x[1m]))")
    assert response.status_code == 400
    assert response.json()["errorType"] == "bad_data"


def test_every_dashboard_query_and_alert_expression_is_accepted(
    prometheus: httpx.Client, tmp_path: Path
) -> None:
    queries = dash.all_promql(dash.load())
    rule = one(render({"prometheusRule": {"enabled": True}}, tmp_path), "PrometheusRule")
    queries += [(r["alert"], r["expr"]) for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(queries) > 30
    for where, expr in queries:
        response = _query(prometheus, expr)
        assert response.status_code == 200, f"{where}: {expr}\n{response.text}"
        assert response.json()["status"] == "success", where


def test_staleness_panels_return_series_from_the_scraped_run(prometheus: httpx.Client) -> None:
    queries = _staleness_queries()
    titles = {title for title, _ in queries}
    assert "Version span per job (mean / max / min)" in titles
    assert len(queries) >= 8
    deadline = time.monotonic() + DEADLINE_SECONDS
    for title, expr in queries:
        result = _wait_until(f"{title}: {expr}", lambda e=expr: _series(prometheus, e), deadline)
        for series in result:
            if "job_name" in series["metric"]:
                assert series["metric"]["job_name"] == JOB_NAME, title
            if "job" in series["metric"]:
                assert series["metric"]["job"] == JOB_NAME, title


def test_version_span_panel_reads_the_exported_figures(prometheus: httpx.Client) -> None:
    """The min-span query of the version span panel returns the exported value, by job."""
    (panel,) = [p for p in dash.panels(dash.load()) if p["title"].startswith("Version span")]
    (expr,) = [t["expr"] for t in panel["targets"] if m.STALENESS_VERSION_SPAN_MIN in t["expr"]]
    deadline = time.monotonic() + DEADLINE_SECONDS
    result = _wait_until(
        "version span min", lambda: _series(prometheus, dash.substitute(expr)), deadline
    )
    assert result[0]["metric"] == {"job_name": JOB_NAME}
    assert float(result[0]["value"][1]) == 1.0

"""A real Prometheus server (Debian's package) on loopback for the dashboard tests."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from dressage_testkit.processes import free_port, stop_process

from tests.chart import dashboard as dash
from tests.chart.tools import one, render, require_tool

DEADLINE_SECONDS = 20.0


def wait_until(what: str, check: Callable[[], Any], deadline: float) -> Any:
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


def write_config(path: Path, scrape_configs: list[dict[str, Any]], interval: str) -> None:
    config = {
        "global": {
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "scrape_configs": scrape_configs,
    }
    path.write_text(yaml.safe_dump(config))


class Prometheus:
    """A running server: its HTTP API client and its config file (`reload` re-reads it)."""

    def __init__(self, process: subprocess.Popen[bytes], client: httpx.Client, config: Path):
        self.process = process
        self.client = client
        self.config = config

    def configure(self, scrape_configs: list[dict[str, Any]], interval: str = "1s") -> None:
        """Rewrite the config file (takes effect on `reload`)."""
        write_config(self.config, scrape_configs, interval)

    def reload(self) -> None:
        """Re-read the config file (SIGHUP) and wait until the server reports it loaded."""
        before = self._reload_time()
        os.kill(self.process.pid, signal.SIGHUP)
        wait_until(
            "config reload",
            lambda: self._reload_time() > before,
            time.monotonic() + DEADLINE_SECONDS,
        )

    def _reload_time(self) -> str:
        data = self.client.get("/api/v1/status/runtimeinfo").json()["data"]
        return str(data["lastConfigTime"])

    def query(self, expr: str, at: float | None = None) -> httpx.Response:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self.client.get("/api/v1/query", params=params)

    def series(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        response = self.query(expr, at)
        assert response.status_code == 200, f"{expr}: {response.text}"
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result


@contextmanager
def prometheus_server(
    tmp: Path, scrape_configs: list[dict[str, Any]], interval: str = "1s"
) -> Iterator[Prometheus]:
    binary = require_tool("prometheus")
    port = free_port()
    config = tmp / "prometheus.yml"
    write_config(config, scrape_configs, interval)
    log = (tmp / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(
        process, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5), config
    )
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        wait_until(
            "Prometheus ready", lambda: server.client.get("/-/ready").status_code == 200, deadline
        )
        yield server
    finally:
        server.client.close()
        stop_process(server.process, grace_s=10)
        log.close()


def engine_metric_relabel_configs(tmp: Path) -> list[dict[str, Any]]:
    """The chart's PodMonitor `metricRelabelings` of the engine endpoint, as Prometheus'
    `metric_relabel_configs` (what the Prometheus Operator generates from them)."""
    monitor = one(render({"metrics": {"podMonitor": {"enabled": True}}}, tmp), "PodMonitor")
    (engine,) = [
        e
        for e in monitor["spec"]["podMetricsEndpoints"]
        if any(r.get("regex") == "inference" for r in e["relabelings"])
    ]
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return [{keys.get(k, k): v for k, v in r.items()} for r in engine["metricRelabelings"]]


def row_queries(title: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query in the dashboard's row titled `title`."""
    board = dash.load()
    queries: list[tuple[str, str]] = []
    in_row = False
    for panel in board["panels"]:
        if panel["type"] == "row":
            in_row = panel["title"] == title
            continue
        if in_row:
            queries += [(panel["title"], dash.substitute(t["expr"])) for t in panel["targets"]]
    return queries


def staleness_queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query in the dashboard's Staleness row."""
    return row_queries("Staleness")

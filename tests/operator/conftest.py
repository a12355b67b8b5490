"""Fixtures: a Kubernetes API emulation (kmock over real HTTP), the operator running against
it under kopf, a real HTTP server standing in for the job's trainer `/metrics`, and the fork
server the test kubelet starts its `python -m` containers from (`tests/engine_forks.py`)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from dressage_testkit.kube import (
    EmulatedCluster,
    emulated_cluster,
    operator_env,
    restore_env,
    set_env,
)
from dressage_testkit.processes import free_port
from kopf.testing import KopfRunner

from tests.engine_forks import engine_fork_server  # noqa: F401 (containers forked: see there)

NAMESPACE = "e2e"


class MetricsServer:
    """Serves Prometheus text per path, as trainer rank 0 of each job would."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        texts = self.texts

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = texts.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Operator:
    """The operator under kopf in a background thread (KopfRunner)."""

    def __init__(self, cluster: EmulatedCluster, env: dict[str, str]) -> None:
        self.cluster = cluster
        self.env = env
        self.metrics_port = int(env["DRESSAGE_OPERATOR_METRICS_PORT"])
        self.runner: KopfRunner | None = None

    def start(self) -> None:
        self.previous = set_env(self.env)
        args = [
            "run",
            "--standalone",
            "-m",
            "dressage_operator.handlers",
            "--namespace",
            self.cluster.namespace,
        ]
        self.runner = KopfRunner(args, timeout=60)
        self.runner.__enter__()

    def stop(self) -> None:
        assert self.runner is not None
        self.runner.__exit__(None, None, None)
        restore_env(self.previous)
        assert self.runner.exception is None, self.runner.output[-3000:]


@pytest.fixture(scope="module")
def metrics_server() -> Iterator[MetricsServer]:
    server = MetricsServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster(NAMESPACE) as c:
        yield c


@pytest.fixture(scope="module")
def operator_settings() -> dict[str, str]:
    """`DRESSAGE_OPERATOR_*` settings of the module's operator, over `operator_env`'s; a test
    module overrides this fixture to run the operator otherwise."""
    return {"DRESSAGE_OPERATOR_NETWORK_POLICIES": "true"}


@pytest.fixture(scope="module")
def operator(
    cluster: EmulatedCluster,
    metrics_server: MetricsServer,
    operator_settings: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Operator]:
    """The operator under kopf against the module's cluster, scraping `metrics_server`."""
    env = operator_env(
        cluster,
        tmp_path_factory.mktemp("kube") / "config",
        DRESSAGE_OPERATOR_METRICS_PORT=str(free_port()),
        DRESSAGE_OPERATOR_SCRAPE_URL_TEMPLATE=(
            f"http://127.0.0.1:{metrics_server.port}/{{namespace}}/{{job}}/metrics"
        ),
        **operator_settings,
    )
    op = Operator(cluster, env)
    op.start()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def kubeconfig(cluster: EmulatedCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cluster.write_kubeconfig(tmp_path_factory.mktemp("kubectl") / "config")

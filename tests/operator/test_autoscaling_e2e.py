"""The engines' built-in autoscaler end to end: `python -m dressage_operator` as a real process
against the API emulation, scraping a stand-in for trainer rank 0's `/metrics` whose counters
advance at every scrape as a trainer's would.

While the trainer waits for batches the operator adds engines one at a time (the job's
scale-up policy), each only once the previous one is ready, up to `maxReplicas`; once
admission control holds rollout back it removes them again, after its scale-down window, down
to `minReplicas`. Every change is written through the job's scale subresource, posts an
`EnginesScaled` Event naming the signals, and is counted on the operator's `/metrics`.

A job in `staleness.mode: auto` is sized to its staleness budget: its trainer starved with the
version lag at the budget gets no engine (the window, not the fleet, limits it), starved with
the lag under the budget it gets one, with a `StalenessBudgetScaleUp` Event naming the
figures. The test plays the kubelet: every pod of the job is marked running and ready as it
appears."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.kube import EmulatedCluster
from dressage_testkit.processes import free_port, stop_process

from dressage import metrics as names
from dressage.api.figures import figure

from .jobs import delete_jobs, job_manifest, pods_of, set_phase, status_of
from .waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
STEP_SECONDS = 10.0
"""Each scrape sees one more trainer step of this many seconds."""


class Trainer:
    """Trainer rank 0's `/metrics` for one job: each GET is one more completed step, spent
    waiting for its batch (`waiting`), with rollout held back by admission (`held`), or
    neither."""

    def __init__(self) -> None:
        self.mode = "neither"
        self.steps = self.wait = self.held = 0.0
        self.lock = threading.Lock()
        self.budget: dict[str, float] = {}
        """The staleness budget's gauges (by figure name) a job in auto mode exports."""

    def text(self) -> str:
        with self.lock:
            self.steps += STEP_SECONDS
            if self.mode == "waiting":
                self.wait += 0.6 * STEP_SECONDS
            elif self.mode == "held":
                self.held += 0.9 * STEP_SECONDS
            return "\n".join(
                [
                    "# TYPE dressage_trainer_step_seconds counter",
                    f"{names.TRAINER_STEP_SECONDS} {self.steps}",
                    "# TYPE dressage_trainer_batch_wait_seconds counter",
                    f"{names.TRAINER_BATCH_WAIT_SECONDS} {self.wait}",
                    "# TYPE dressage_rollout_admission_wait_seconds counter",
                    f"{names.ROLLOUT_ADMISSION_WAIT_SECONDS} {self.held}",
                    f"{names.TRAIN_STEP} {self.steps / STEP_SECONDS}",
                    *(f"{figure(k).metric} {v}" for k, v in self.budget.items()),
                    "",
                ]
            )


class TrainerMetrics:
    """A real HTTP server serving one `Trainer` per `/<namespace>/<job>/metrics`."""

    def __init__(self) -> None:
        self.trainers: dict[str, Trainer] = {}
        trainers = self.trainers

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                trainer = trainers.get(self.path)
                if trainer is None:
                    self.send_error(404)
                    return
                data = trainer.text().encode()
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


class Kubelet:
    """Marks every pod of one job running and ready as it appears."""

    def __init__(self, cluster: EmulatedCluster, job: str) -> None:
        self.cluster, self.job = cluster, job
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.1):
            for name, pod in pods_of(self.cluster, self.job).items():
                if (pod.get("status") or {}).get("phase") != "Running":
                    set_phase(self.cluster, name, "Running")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


class OperatorProcess:
    def __init__(self, cluster: EmulatedCluster, tmp: Path, metrics: TrainerMetrics) -> None:
        self.log_path = tmp / "operator.log"
        self.health = free_port()
        self.metrics_port = free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.write_kubeconfig(tmp / "config")),
            "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'operator'}",
        }
        self.log = self.log_path.open("w")
        template = f"http://127.0.0.1:{metrics.port}/{{namespace}}/{{job}}/metrics"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dressage_operator",
                "--namespace",
                cluster.namespace,
                "--metrics-port",
                str(self.metrics_port),
                "--health-port",
                str(self.health),
                "--resync-seconds",
                "60",
                "--scrape-seconds",
                "0.5",
                "--scrape-url-template",
                template,
            ],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def listening(self) -> bool:
        assert self.process.poll() is None, self.output()
        try:
            with socket.create_connection(("127.0.0.1", self.health), timeout=1):
                return True
        except OSError:
            return False

    def output(self) -> str:
        return self.log_path.read_text()[-4000:]

    def stop(self) -> None:
        stop_process(self.process, grace_s=30)
        self.log.close()


@pytest.fixture(scope="module")
def trainer_metrics() -> Iterator[TrainerMetrics]:
    server = TrainerMetrics()
    yield server
    server.close()


@pytest.fixture(scope="module")
def operator_process(
    cluster: EmulatedCluster,
    trainer_metrics: TrainerMetrics,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    op = OperatorProcess(cluster, tmp_path_factory.mktemp("operator"), trainer_metrics)
    try:
        wait_until(op.listening, timeout=60, what="the operator's liveness port")
        yield op
    finally:
        op.stop()


def _replicas(c: EmulatedCluster, job: str) -> int:
    replicas: int = (c.get(c.job_path(job)) or {})["spec"]["inference"]["replicas"]
    return replicas


def _scaling_events(c: EmulatedCluster, job: str, reason: str = "EnginesScaled") -> list[str]:
    return [
        str(e.get("message"))
        for e in c.items("v1", "events")
        if e.get("involvedObject", {}).get("name") == job and e.get("reason") == reason
    ]


def _engines(c: EmulatedCluster, job: str) -> int:
    return sum(1 for name in pods_of(c, job) if "-engine-" in name)


def test_the_autoscaler_adds_engines_while_the_trainer_waits_and_removes_them_when_held(
    cluster: EmulatedCluster, operator_process: OperatorProcess, trainer_metrics: TrainerMetrics
) -> None:
    c = cluster
    name = "autoscaled"
    trainer = trainer_metrics.trainers[f"/{c.namespace}/{name}/metrics"] = Trainer()
    behavior = {
        "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}]},
        "scaleDown": {
            "stabilizationWindowSeconds": 4,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}],
        },
    }
    autoscaling = {"minReplicas": 1, "maxReplicas": 3, "behavior": behavior}
    c.create(
        job_manifest(
            name,
            trainer={"nodes": 1, "gpusPerNode": 0},
            inference={"replicas": 1, "autoscaling": autoscaling},
        )
    )
    kubelet = Kubelet(c, name)
    try:
        wait_until(lambda: status_of(c, name).get("phase") == "Running", 60, "Running")
        trainer.mode = "waiting"
        wait_until(lambda: _replicas(c, name) == 3, 90, "three engines asked for")
        wait_until(lambda: _engines(c, name) == 3, 60, "three engine pods")
        events = wait_until(lambda: len(_scaling_events(c, name)) >= 2 and _scaling_events(c, name))
        assert events[0].startswith(
            "engines 1 -> 2 (ScaleUpLimit): the trainer waited for batches 60%"
        )
        assert events[1].startswith("engines 2 -> 3 (")
        auto = wait_until(
            lambda: (
                status_of(c, name).get("autoscaling", {}).get("reason") == "TooManyReplicas"
                and status_of(c, name)["autoscaling"]
            ),
            60,
            "held at maxReplicas",
        )
        assert (auto["scaleUpCount"], auto["desiredReplicas"]) == (2, 3)
        assert _replicas(c, name) == 3

        trainer.mode = "held"
        wait_until(lambda: _replicas(c, name) == 1, 90, "back to one engine")
        wait_until(lambda: _engines(c, name) == 1, 60, "one engine pod")
        events = wait_until(lambda: len(_scaling_events(c, name)) >= 4 and _scaling_events(c, name))
        assert events[2].startswith("engines 3 -> 2 (ScaleDownLimit): ")
        assert "admission control held rollout back 90%" in events[2]
        assert events[3].startswith("engines 2 -> 1 (")
        status = status_of(c, name)
        assert (status["autoscaling"]["scaleDownCount"], status["restarts"]) == (2, 0)
        text = httpx.get(f"http://127.0.0.1:{operator_process.metrics_port}/metrics").text
        labels = f'dressage_job="{name}",namespace="{c.namespace}"'
        assert f'{names.JOB_ENGINE_SCALE_EVENTS}{{direction="up",{labels}}} 2.0' in text
        assert f'{names.JOB_ENGINE_SCALE_EVENTS}{{direction="down",{labels}}} 2.0' in text
    finally:
        kubelet.close()
        delete_jobs(c, (("v1", "pods"), ("apps/v1", "deployments")))


def test_a_job_in_budget_mode_gets_an_engine_only_while_its_lag_is_under_the_budget(
    cluster: EmulatedCluster, trainer_metrics: TrainerMetrics, operator_process: OperatorProcess
) -> None:
    c = cluster
    name = "budgeted"
    trainer = trainer_metrics.trainers[f"/{c.namespace}/{name}/metrics"] = Trainer()
    trainer.mode = "waiting"
    # Starved with the depth at its bound (the job asks for 1.6x the engines), but the lag
    # already at the budget of 2 versions.
    trainer.budget = {"version_lag_max": 2.0, "budget_engine_ratio": 1.6, "budget_max_lag": 2.0}
    scale_up = {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}]}
    autoscaling = {"minReplicas": 1, "maxReplicas": 2, "behavior": {"scaleUp": scale_up}}
    c.create(
        job_manifest(
            name,
            trainer={"nodes": 1, "gpusPerNode": 0},
            inference={"replicas": 1, "autoscaling": autoscaling},
            staleness={"mode": "auto", "budget": {"maxLagVersions": 2}},
        )
    )
    kubelet = Kubelet(c, name)
    try:
        wait_until(lambda: status_of(c, name).get("phase") == "Running", 60, "Running")
        held = wait_until(
            lambda: (
                status_of(c, name).get("autoscaling", {}).get("reason") == "AtStalenessBudget"
                and status_of(c, name)["autoscaling"]
            ),
            60,
            "the scale-up held at the budget",
        )
        assert held["budget"] == {
            "maxLagVersions": 2,
            "lagVersions": 2.0,
            "engineRatio": 1.6,
            "standing": "AtBudget",
        }
        assert "version lag 2 of at most 2" in held["message"]
        met = next(
            cond
            for cond in status_of(c, name)["conditions"]
            if cond["type"] == "StalenessBudgetMet"
        )
        assert (met["status"], met["reason"]) == ("True", "AtBudget")
        # Several more scrapes at the budget: still one engine, no Event.
        first = held["sample"]["stepSeconds"]
        wait_until(
            lambda: status_of(c, name)["autoscaling"]["sample"]["stepSeconds"] >= first + 30,
            60,
            "three more scrapes",
        )
        assert _replicas(c, name) == 1
        assert _scaling_events(c, name, "StalenessBudgetScaleUp") == []

        trainer.budget["version_lag_max"] = 1.0
        wait_until(lambda: _replicas(c, name) == 2, 60, "one more engine")
        wait_until(lambda: _engines(c, name) == 2, 60, "two engine pods")
        events = wait_until(lambda: _scaling_events(c, name, "StalenessBudgetScaleUp"), 30)
        assert events == [
            "engines 1 -> 2 (ScaleUp): the trainer waited for batches 60% of its step time, "
            "admission control held rollout back 0% of it, the job asks for 1.60x the engines; "
            "version lag 1 of at most 2"
        ]
    finally:
        kubelet.close()
        delete_jobs(c, (("v1", "pods"), ("apps/v1", "deployments")))

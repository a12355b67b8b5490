"""Held-out evaluations on the cluster: the operator under kopf against the API emulation reads
them from the job's trainer `/metrics` (a real HTTP server on loopback exporting the series
`dressage.metrics.EVAL_*` as trainer rank 0 does), writes `status.evaluation` (the latest
version and the best), keeps the best once the job's exporter drops it, exports both per job
on its own `/metrics`, and the real `kubectl get arj` prints them in the `Eval` and `Best`
columns (the emulation prints the CRD's printer columns as the API server does:
`dressage_testkit.kube.tables`).

The run with the real evaluator in the trainer pods is the kind example's
(`test_cluster_kind_example.py`: its eval lines and `status.evaluation`); this one stands in
for the trainer's exporter only."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.kube import EmulatedCluster
from dressage_testkit.kube.tables import cell, printer_columns, table_requested, to_table

from dressage import metrics as names

from .conftest import MetricsServer, Operator
from .jobs import delete_jobs, job_manifest, run_all, status_of
from .waiting import wait_until

needs_kubectl = pytest.mark.skipif(
    shutil.which("kubectl") is None,
    reason="kubectl is not on PATH (scripts/install-tools.sh puts it in .tools/bin)",
)


@pytest.fixture(autouse=True)
def _delete_jobs_afterwards(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    delete_jobs(cluster, (("v1", "pods"), ("apps/v1", "deployments")))


def exposition(versions: dict[str, tuple[int, float]], runs: int, step: int) -> str:
    """Trainer rank 0's `/metrics` with these evaluated `version: (step, pass@1)`."""
    lines = [f"# TYPE {names.TRAIN_STEP} gauge", f"{names.TRAIN_STEP} {step}"]
    lines.append(f"# TYPE {names.EVAL_PASS_AT_K} gauge")
    for version, (_, p) in versions.items():
        lines += [
            f'{names.EVAL_PASS_AT_K}{{k="1",version="{version}"}} {p}',
            f'{names.EVAL_PASS_AT_K}{{k="4",version="{version}"}} {min(1.0, 2 * p)}',
        ]
    lines.append(f"# TYPE {names.EVAL_REWARD_MEAN} gauge")
    lines += [f'{names.EVAL_REWARD_MEAN}{{version="{v}"}} {p}' for v, (_, p) in versions.items()]
    lines.append(f"# TYPE {names.EVAL_STEP} gauge")
    lines += [f'{names.EVAL_STEP}{{version="{v}"}} {s}' for v, (s, _) in versions.items()]
    lines.append(f"# TYPE {names.EVAL_PROMPTS} gauge")
    lines += [f'{names.EVAL_PROMPTS}{{version="{v}"}} 64' for v in versions]
    lines += ["# TYPE dressage_eval_runs counter", f"{names.EVAL_RUNS} {runs}", ""]
    return "\n".join(lines)


def _kubectl_get(kubeconfig: Path, *args: str) -> list[dict[str, str]]:
    """`kubectl get arj ...` (the real binary), its table read back by column header."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "arj", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    header, *rows = done.stdout.splitlines()
    # Columns start where their header does (kubectl pads every cell to its column's width).
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    starts = [i for i in starts if i == 0 or header[i - 2 : i] == "  "]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    return [
        {header[a:b].strip(): row[a:b].strip() for a, b in bounds} for row in rows if row.strip()
    ]


def _evaluation(c: EmulatedCluster, job: str) -> dict[str, Any]:
    evaluation: dict[str, Any] = status_of(c, job).get("evaluation") or {}
    return evaluation


@needs_kubectl
def test_status_evaluation_keeps_the_best_and_kubectl_get_shows_it(
    cluster: EmulatedCluster, operator: Operator, metrics_server: MetricsServer, kubeconfig: Path
) -> None:
    c, path = cluster, "/e2e/heldout/metrics"
    metrics_server.texts[path] = exposition(
        {"v0": (0, 0.25), "v40": (40, 0.75), "v50": (50, 0.5)}, runs=3, step=52
    )
    c.create(job_manifest("heldout"))
    run_all(c, "heldout")
    evaluation = wait_until(
        lambda: (_evaluation(c, "heldout").get("latest") or {}).get("version") == "v50"
        and _evaluation(c, "heldout"),
        what="status.evaluation",
    )
    assert evaluation == {
        "latest": {"version": "v50", "step": 50, "passAt1": 0.5, "reward": 0.5},
        "best": {"version": "v40", "step": 40, "passAt1": 0.75, "reward": 0.75},
        "runs": 3,
    }
    (row,) = _kubectl_get(kubeconfig, "heldout")
    assert (row["NAME"], row["PHASE"]) == ("heldout", "Running")
    assert (row["EVAL"], row["BEST"]) == ("0.5", "v40")
    assert "BEST EVAL" not in row
    (wide,) = _kubectl_get(kubeconfig, "-o", "wide")
    assert (wide["EVAL"], wide["BEST"], wide["BEST EVAL"]) == ("0.5", "v40", "0.75")
    text = httpx.get(f"http://127.0.0.1:{operator.metrics_port}/metrics").text
    labels = '{dressage_job="heldout",namespace="e2e"}'
    assert f"{names.JOB_EVAL_LATEST_PASS_AT_1}{labels} 0.5" in text
    assert f"{names.JOB_EVAL_BEST_PASS_AT_1}{labels} 0.75" in text
    assert f"{names.JOB_EVAL_BEST_STEP}{labels} 40.0" in text

    # The job's exporter moves on to its latest versions and no longer lists v40 (a restarted
    # trainer exports only what it evaluated since): the status keeps v40 as the best.
    metrics_server.texts[path] = exposition({"v60": (60, 0.625), "v70": (70, 0.375)}, 5, 71)
    evaluation = wait_until(
        lambda: (e := _evaluation(c, "heldout"))["latest"]["version"] == "v70" and e,
        what="the latest version v70",
    )
    assert evaluation["best"] == {"version": "v40", "step": 40, "passAt1": 0.75, "reward": 0.75}
    assert evaluation["runs"] == 5
    (row,) = _kubectl_get(kubeconfig)
    assert (row["EVAL"], row["BEST"]) == ("0.375", "v40")

    # Only a higher figure replaces the best.
    metrics_server.texts[path] = exposition({"v70": (70, 0.375), "v80": (80, 0.875)}, 6, 81)
    wait_until(
        lambda: _evaluation(c, "heldout")["best"]["version"] == "v80", what="the best version v80"
    )
    (row,) = _kubectl_get(kubeconfig)
    assert (row["EVAL"], row["BEST"]) == ("0.875", "v80")


def test_a_job_that_evaluates_nothing_has_no_evaluation_status(
    cluster: EmulatedCluster, operator: Operator, metrics_server: MetricsServer
) -> None:
    c = cluster
    metrics_server.texts["/e2e/plain/metrics"] = f"{names.TRAIN_STEP} 7\n"
    c.create(job_manifest("plain"))
    run_all(c, "plain")
    wait_until(lambda: status_of(c, "plain").get("staleness", {}).get("step") == 7, what="step 7")
    assert "evaluation" not in status_of(c, "plain")


def test_the_table_is_the_crd_s_printer_columns_as_the_api_server_prints_them() -> None:
    """The emulation's `Table` (`dressage_testkit.kube.tables`): a Name column, then the CRD's
    printer columns with their priorities; cells typed as `cellForJSONValue` types them."""
    now = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
    job = {
        "metadata": {"name": "a", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"phase": "Running", "evaluation": {"latest": {"version": "v3", "passAt1": 1}}},
    }
    table = to_table(printer_columns(), [job], "7", now)
    heads = [(d["name"], d["type"], d["priority"]) for d in table["columnDefinitions"]]
    assert heads[0] == ("Name", "string", 0)
    assert ("Eval", "number", 0) in heads
    assert ("Best", "string", 0) in heads
    assert ("Best Eval", "number", 1) in heads
    cells = dict(zip([h[0] for h in heads], table["rows"][0]["cells"], strict=True))
    assert (cells["Name"], cells["Phase"]) == ("a", "Running")
    assert (cells["Eval"], cells["Best"]) == (1.0, None)
    assert cells["Age"] == "10m"
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    assert cell("integer", 3.7, now) == 3
    assert cell("integer", "3", now) is None
    assert cell("string", 12.0, now) == "12"
    assert cell("date", "yesterday", now) == "<invalid>"
    assert table_requested("application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
    assert not table_requested("application/json")

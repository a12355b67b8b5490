"""The token ledger of a real `dressage run` adds up to what its engine reports generating.

A tiny job (one-layer model) runs on the embedded engine, whose `/metrics` exports SGLang's
own `sglang:generation_tokens_total` (every finished request's output tokens, aborted ones
included, as SGLang 0.5.2 and 0.5.23 count them). The runner reads it as the pipeline ends
and writes it in `report.json` beside the ledger's accounts:

- sync rollout: nothing is in flight when the run stops, so every token the engine generated
  is in an account the collector or the proxy counted, the residue `surplus.in_flight` is 0,
  and the trained account is the sum of the steps' trained ledger entries;
- partial rollout with a span limit of 0 preempts (a turn may never span a publish):
  nothing is counted twice (`overcounted` 0), and what the engine generated beyond the
  accounts (`surplus.in_flight`) is no more than the groups in flight at the stop can hold;
- the same with turns long enough that publishes preempt them, over two proxy replicas: the
  turns the span limit refused, which only the proxies count, are in the steps' records (each
  step reads what each replica counted since the previous one), and the end adds only what
  they counted after the last step's read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_testkit.trainer import small_model

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
JOB = "ledger-run"


def _run(tmp: Path, spec: dict[str, Any], steps: int) -> tuple[dict[str, Any], str]:
    model_dir = small_model(tmp / "model")
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": JOB},
        "spec": {
            "model": {"source": str(model_dir), "dtype": "float32"},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "training": {"steps": steps, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(tmp / "cache")},
            **spec,
        },
    }
    manifest = tmp / "job.yaml"
    manifest.write_text(yaml.safe_dump(job))
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    done = subprocess.run(
        [sys.executable, "-m", "dressage", "run", str(manifest), "--workdir", str(tmp / "runs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((tmp / "runs" / JOB / "report.json").read_text())
    return report, done.stdout


def test_a_sync_runs_ledger_holds_every_token_the_engine_generated(tmp_path: Path) -> None:
    report, out = _run(
        tmp_path,
        {
            "proxy": {"recordTokenVersions": True},
            "rollout": {"mode": "sync", "groupSize": 2, "batchSize": 2, "maxNewTokens": 4},
        },
        steps=3,
    )
    ledger = report["token_ledger"]
    assert ledger["engines_generated"] > 0
    assert ledger["overcounted"] == 0
    assert "surplus.in_flight" not in ledger["entries"], ledger
    assert ledger["total"] == ledger["engines_generated"]
    trained = sum(s.get("ledger_tokens", {}).get("trained", 0) for s in report["steps"])
    assert ledger["accounts"]["trained"] == trained == report["summary"]["trained_tokens"]
    assert "token ledger: " in out
    # Nothing runs after the last step's read: the steps hold whatever the proxy counted.
    assert ledger["proxy_lost"]["at_end"] == 0, ledger


def _steps_lost(steps: list[dict[str, Any]]) -> int:
    """The steps' tokens in the accounts the proxy's lost tokens go to."""
    return sum(
        int(n)
        for s in steps
        for entry, n in s.get("ledger_tokens", {}).items()
        if entry.split(".")[0] in ("refused", "aborted", "evaluation")
    )


def test_a_partial_rollout_runs_ledger_adds_up_to_the_engines_count(tmp_path: Path) -> None:
    report, _ = _run(
        tmp_path,
        {
            "proxy": {"recordTokenVersions": True, "partialRollout": True},
            "staleness": {"keepVersions": 2, "maxPartialRolloutPreempts": 0},
            "rollout": {
                "mode": "partial_async",
                "groupSize": 2,
                "batchSize": 2,
                "maxNewTokens": 8,
                "concurrency": 4,
            },
        },
        steps=4,
    )
    ledger = report["token_ledger"]
    assert ledger["overcounted"] == 0, ledger
    assert ledger["total"] == ledger["engines_generated"] > 0
    # What no account saw is what was in flight at the stop: at most the 4 groups in flight,
    # 2 trajectories of at most 8 tokens each (a resumed turn's pieces share that budget).
    assert ledger["entries"].get("surplus.in_flight", 0) <= 4 * 2 * 8, ledger
    assert sum(ledger["accounts"].values()) == ledger["total"]
    trained = sum(s.get("ledger_tokens", {}).get("trained", 0) for s in report["steps"])
    assert ledger["accounts"]["trained"] == trained > 0
    lost = ledger["proxy_lost"]
    assert lost["in_steps"] + lost["at_end"] == lost["counted"], lost


def test_the_proxys_refused_turns_are_in_the_steps_records(tmp_path: Path) -> None:
    """Turns long enough on a paced engine that publishes preempt some, refused on resume by a
    span limit of 0 preempts; the rollout in a process of its own (the trainer's process reads
    the proxies all the same), over two proxy replicas (each step sums what both counted). The
    proxies' lost tokens are in the steps' records, the end adding only what each counted after
    the last step's read: each token once. Eight steps: whether a publish finds a long turn in
    flight depends on the machine's pace (on an idle machine the first two find none, and each
    of the next finds one or two), and a step reads what the publish before it caused."""
    report, _ = _run(
        tmp_path,
        {
            "task": {
                "name": "long_tail",
                "params": {
                    "maxOperand": 9,
                    "medianTokens": 4,
                    "tailProbability": 0.5,
                    "tailFactor": 10,
                    "maxTokens": 64,
                },
            },
            "proxy": {"recordTokenVersions": True, "partialRollout": True, "replicas": 2},
            "staleness": {"keepVersions": 2, "maxPartialRolloutPreempts": 0},
            "rollout": {
                "mode": "partial_async",
                "groupSize": 2,
                "batchSize": 2,
                "maxNewTokens": 64,
                "concurrency": 4,
                "separateProcess": True,
            },
            "local": {
                "metricsPort": 0,
                "cacheDir": str(tmp_path / "cache"),
                "engineMinStepIntervalMs": 5,
            },
        },
        steps=8,
    )
    ledger = report["token_ledger"]
    assert ledger["overcounted"] == 0, ledger
    assert ledger["total"] == ledger["engines_generated"] > 0
    lost = ledger["proxy_lost"]
    assert lost["in_steps"] > 0, (lost, report["steps"])
    assert lost["in_steps"] + lost["at_end"] == lost["counted"], lost
    assert _steps_lost(report["steps"]) >= lost["in_steps"], (lost, report["steps"])

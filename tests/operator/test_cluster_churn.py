"""Engine churn on the cluster path: the job of `test_cluster_run` with `weightSync:
distributed` and partial rollout, while engines are evicted (a crash), added (a scale-up),
deleted by someone else (a node drain: a graceful delete the operator did not make) and
removed (a scale-down), one after the other as the trainer trains.

The test kubelet runs each engine pod's `preStop` hook on a graceful delete, so the two
graceful stops drain their engine through the proxy before SIGTERM reaches it: the turns in
flight there continue on the other engines with their tokens. The figures the local churn
benchmark reports (`benchmarks/engine_churn.py`) are read from the job itself and printed:
trainer gang restarts (status), the turns and tokens the drains moved (the proxy's
counters), the drained tokens the trained samples hold (the trainer's step lines), turns an
engine failure hit by reason, and the largest version span of a trained batch.

Asserted: no gang restart, every step trained, both hooks ran and drained (HTTP 200 from the
proxy) before their engine stopped, every token the drains moved reached a trained sample,
and every engine pod that ran came to serve a published version.

The emulation deletes a pod at once (no `deletionTimestamp`), so the hook runs after the pod
left the API, with the names it resolved at its start; the operator's engine list, which the
proxy follows, drops the engine one reconcile later, after the drain has begun.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.kube import EmulatedCluster
from prometheus_client.parser import text_string_to_metric_families

from .cluster_job import (
    JOB,
    PROXY_PORT,
    TRAINER,
    cluster,
    healthy_engines,
    held_until,
    job_manifest,
    job_status,
    kubelet,
    one_more_step,
    served_versions,
    start_operator,
    steps_done,
)
from .kubelet import Kubelet
from .waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
__all__ = ["cluster", "kubelet"]  # the fixtures
STEPS = 40
RELEASE = "0.5.23"
_STEP_LINE = re.compile(
    r"^step (\d+) version \S+ reward \S+ .*\bdrops (\d+) .*\bspan_max (\S+) .*"
    r"\bdrained_tokens (\d+)\b",
    re.MULTILINE,
)


def _churn_job() -> dict[str, Any]:
    """Long generations (the `long_tail` task: fixed lengths, a fifth of them 8x the median
    of 16 tokens) resumed across pauses and drains, with the staleness controls off so that
    no drop or refusal hides a drained token."""
    manifest = job_manifest(RELEASE, STEPS)
    spec = manifest["spec"]
    spec["inference"]["weightSync"] = "distributed"
    spec["task"] = {
        "name": "long_tail",
        "params": {
            "maxOperand": 9,
            "medianTokens": 16,
            "tailProbability": 0.2,
            "tailFactor": 8,
            "maxTokens": 128,
        },
    }
    spec["proxy"]["partialRollout"] = True
    spec["proxy"]["recordTokenVersions"] = True
    # Neither staleness control: a window drop or a preempt refusal of the group holding the
    # drained tokens would hide them (spans reach 6 here, so any limit near that bites).
    spec["staleness"] = {"keepVersions": 0}
    spec["rollout"].update(mode="partial_async", concurrency=4, maxNewTokens=128)
    return manifest


def _proxy_figures(kubelet: Kubelet) -> dict[str, Any] | None:
    """The proxy's drain and engine-failure counters (its `/metrics` needs no token)."""
    url = f"http://127.0.0.1:{kubelet.port(f'{JOB}-proxy-0', PROXY_PORT)}/metrics"
    try:
        text = httpx.get(url, timeout=10).text
    except httpx.HTTPError:
        return None
    out: dict[str, Any] = {
        "drained_turns": 0,
        "drained_tokens": 0,
        "drained_tokens_lost": {},
        "engine_failed_turns": {},
    }
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "dressage_proxy_drained_turns_total":
                out["drained_turns"] = int(sample.value)
            elif sample.name == "dressage_proxy_drained_tokens_total":
                out["drained_tokens"] = int(sample.value)
            elif sample.name == "dressage_proxy_engine_failed_turns_total" and sample.value:
                out["engine_failed_turns"][sample.labels["reason"]] = int(sample.value)
            elif sample.name == "dressage_proxy_drained_tokens_lost_total" and sample.value:
                out["drained_tokens_lost"][sample.labels["reason"]] = int(sample.value)
    return out


def _pod_uid(c: EmulatedCluster, name: str) -> str | None:
    pod = c.get(c.path("v1", "pods", name))
    return None if pod is None else str(pod["metadata"]["uid"])


def _recreated(c: EmulatedCluster, kubelet: Kubelet, name: str, old_uid: str | None) -> bool:
    uid = _pod_uid(c, name)
    return uid is not None and uid != old_uid and kubelet.ready(name)


def test_engines_evicted_added_drained_and_removed_cost_no_restart_and_no_drained_token(
    cluster: EmulatedCluster, kubelet: Kubelet, tmp_path: Path
) -> None:
    c = cluster
    operator = start_operator(c, kubelet, tmp_path)
    figures: dict[str, Any] = {}
    try:
        kubelet.start()
        c.create(_churn_job())
        wait_until(lambda: steps_done(kubelet) >= 1, 240, "a first trainer step")

        # 1. A crash: engine 1 evicted, replaced by the operator.
        old = _pod_uid(c, f"{JOB}-engine-1")
        kubelet.evict(f"{JOB}-engine-1")
        one_more_step(kubelet, "a trainer step after the eviction")
        held_until(
            kubelet,
            lambda: (
                _recreated(c, kubelet, f"{JOB}-engine-1", old)
                and len(healthy_engines(kubelet)) == 2
            ),
            "engine 1 replaced and taken in by the proxy",
        )
        one_more_step(kubelet, "a publish to the replacement")

        # 2. A scale-up to 3.
        c.patch(c.job_path(JOB), {"spec": {"inference": {"replicas": 3}}})
        held_until(
            kubelet,
            lambda: kubelet.ready(f"{JOB}-engine-2") and len(healthy_engines(kubelet)) == 3,
            "the added engine taken in by the proxy",
        )
        one_more_step(kubelet, "a publish to the added engine")

        # 3. A graceful delete the operator did not make (a node drain): engine 0's hook
        # drains it while the trainer trains, and the operator recreates it.
        old = _pod_uid(c, f"{JOB}-engine-0")
        c.delete(c.path("v1", "pods", f"{JOB}-engine-0"))
        wait_until(lambda: len(kubelet.hooks) >= 1, 120, "engine 0's preStop hook")
        held_until(
            kubelet,
            lambda: (
                _recreated(c, kubelet, f"{JOB}-engine-0", old)
                and len(healthy_engines(kubelet)) == 3
            ),
            "engine 0 recreated and taken in by the proxy",
        )
        one_more_step(kubelet, "a publish to the recreated engine")

        # 4. A scale-down to 2: engine 2's hook drains it.
        c.patch(c.job_path(JOB), {"spec": {"inference": {"replicas": 2}}})
        wait_until(lambda: len(kubelet.hooks) >= 2, 120, "engine 2's preStop hook")
        # The churn's hooks (the job's end deletes the remaining pods, whose hooks run too).
        hooks = list(kubelet.hooks[:2])
        moved = wait_until(lambda: _proxy_figures(kubelet), 60, "the proxy's counters")
        held_at = steps_done(kubelet)
        # The turns the last drain moved finish and reach a batch within a few steps (three
        # at most in the runs measured); the job has to last that long.
        assert held_at <= STEPS - 8, f"the job ran too far before the last drain ({held_at})"
        status = wait_until(
            lambda: job_status(c).get("phase") in ("Succeeded", "Failed") and job_status(c),
            400,
            "the job to finish",
        )
    finally:
        operator.stop()
    trainer_log = kubelet.log_text(TRAINER, "trainer")
    lines = _STEP_LINE.findall(trainer_log)
    spans = [int(span) for _, _, span, _ in lines if span != "-"]
    figures = {
        "trainer_gang_restarts": status["restarts"],
        "engine_replacements": status["inference"]["restarts"],
        "steps_trained": len(lines),
        "drained_turns": moved["drained_turns"],
        "drained_tokens_moved": moved["drained_tokens"],
        "drained_tokens_trained": sum(int(d) for *_, d in lines),
        "drained_tokens_lost": moved["drained_tokens_lost"],
        "steps_training_drained_tokens": [int(step) for step, *_, d in lines if int(d)],
        "steps_before_the_last_drain": held_at,
        "groups_dropped": sum(int(drops) for _, drops, _, _ in lines),
        "engine_failed_turns": moved["engine_failed_turns"],
        "max_version_span": max(spans) if spans else None,
        "hooks": [(h.pod, h.exit_code, round(h.seconds, 2)) for h in hooks],
    }
    print("cluster churn figures:", json.dumps(figures))
    assert status["phase"] == "Succeeded", f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert f"step {STEPS} version v{STEPS}" in trainer_log, trainer_log[-3000:]
    assert status["restarts"] == 0, f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert status["inference"]["restarts"] >= 1  # the evicted engine's replacement
    assert [(h.pod, h.kind, h.exit_code) for h in hooks] == [
        (f"{JOB}-engine-0", "preStop", 0),
        (f"{JOB}-engine-2", "preStop", 0),
    ]
    for hook in hooks:
        assert '"drained":true' in hook.output, hook.output  # the proxy's 200 answer
    # Every token a drained engine had generated reached a trained sample: none was lost with
    # a failed turn, no group was dropped, and none was left untrained.
    assert figures["drained_tokens_lost"] == {}, figures
    assert figures["groups_dropped"] == 0, figures
    assert figures["drained_tokens_trained"] == figures["drained_tokens_moved"], figures
    for pod in (f"{JOB}-engine-0", f"{JOB}-engine-1"):
        served = served_versions(
            [p for p in kubelet.probes if p.pod == pod and p.kind == "livenessProbe"]
        )
        assert served, pod
        assert served[-1] != "v0", (pod, served)

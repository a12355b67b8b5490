"""Draining engines the operator stops: the pods' preStop hook and grace period, and a
scale-down that keeps the proxy listing an engine until its pod is gone (pure)."""

from __future__ import annotations

import ast

from dressage_operator import children, naming
from dressage_operator.children.engine import (
    DRAIN_HOOK,
    ENGINE_DRAIN_TIMEOUT_SECONDS,
    ENGINE_GRACE_PERIOD_SECONDS,
)
from dressage_operator.decide import decide
from dressage_operator.observe import PodInfo
from dressage_operator.plan import Applied, ChildResult, Observed
from dressage_operator.settle import settle

from dressage.api.job import SecretKeySelector
from dressage.api.status import AsyncRLJobStatus, JobPhase
from dressage.proxy.drain import DEFAULT_DRAIN_TIMEOUT_S

from .support import CONFIG, NOW, OWNER, make_job, make_pod, running_pods


def _env(pod: children.Obj) -> dict[str, object]:
    return {
        e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]
    }


def test_every_engine_pod_drains_itself_through_the_proxy_before_it_stops() -> None:
    job = make_job(proxy={"tokenSecret": {"name": "proxy-auth", "key": "token"}})
    assert job.spec.proxy.token_secret == SecretKeySelector(name="proxy-auth", key="token")
    listed = children.build_config_map(job, OWNER)["data"][naming.ENGINES_KEY].split()
    for index, pod in enumerate(children.build_engine_pods(job, OWNER, CONFIG)):
        (container,) = pod["spec"]["containers"]
        assert container["lifecycle"] == {
            "preStop": {"exec": {"command": ["python", "-c", DRAIN_HOOK]}}
        }
        env = _env(pod)
        # The engine drains itself under the URL the proxy lists it by, at the job's proxy.
        assert env["DRESSAGE_ENGINE_URL"] == listed[index]
        assert env["DRESSAGE_PROXY_URL"] == naming.proxy_url(OWNER.name, OWNER.namespace)
        assert env["DRESSAGE_PROXY_TOKEN"] == {
            "secretKeyRef": {"name": "proxy-auth", "key": "token"}
        }
        assert pod["spec"]["terminationGracePeriodSeconds"] == ENGINE_GRACE_PERIOD_SECONDS
    ast.parse(DRAIN_HOOK)  # a program any image's Python runs: the standard library only
    imported = {
        alias.name
        for node in ast.walk(ast.parse(DRAIN_HOOK))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported == {"json", "os", "socket", "sys", "threading", "urllib.request"}


def test_the_grace_period_outlasts_the_drain_and_the_hooks_own_bound() -> None:
    # The hook asks for at most the drain bound and waits 5 s more for the answer; SGLang
    # needs the rest of the grace period to end after SIGTERM.
    assert ENGINE_DRAIN_TIMEOUT_SECONDS <= DEFAULT_DRAIN_TIMEOUT_S
    assert f'"timeout_s": {ENGINE_DRAIN_TIMEOUT_SECONDS}' in DRAIN_HOOK
    assert f"every(drain, {ENGINE_DRAIN_TIMEOUT_SECONDS + 5})" in DRAIN_HOOK
    assert ENGINE_GRACE_PERIOD_SECONDS >= ENGINE_DRAIN_TIMEOUT_SECONDS + 5 + 15


def _observed(pods: tuple[PodInfo, ...], generation: int = 2) -> Observed:
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    return Observed(generation=generation, status=status, now=NOW, pods=pods)


def test_a_scale_down_deletes_the_engine_and_keeps_it_listed_until_its_pod_is_gone() -> None:
    job = make_job(inference={"replicas": 1})
    pods = running_pods()
    obs = _observed(pods)
    plan = decide(job, OWNER, CONFIG, obs)
    assert plan.delete_pods == ["job-a-engine-1"]
    assert plan.engines_leaving == (1,)
    assert plan.ensure_infrastructure
    (config_map, *_) = children.build_infrastructure(job, OWNER, CONFIG, plan.engines_leaving)
    assert config_map["data"][naming.ENGINES_KEY].split() == [
        naming.engine_url(OWNER.name, OWNER.namespace, i) for i in (0, 1)
    ]
    # The list was written with the engine in it: the check is not done yet, so the next
    # cycle writes the list again.
    written = [ChildResult("ConfigMap", "job-a-config", "patch", Applied.UNCHANGED)]
    assert settle(plan, obs, CONFIG, written).infrastructure_checked == (-1, None)

    # Terminating (its preStop hook draining it): still listed, not deleted again.
    terminating = (*pods[:3], make_pod("inference", 1, terminating=True))
    plan = decide(job, OWNER, CONFIG, _observed(terminating))
    assert plan.delete_pods == []
    assert plan.engines_leaving == (1,)

    # Gone: the list is written without it, and the check is done.
    gone = _observed(pods[:3])
    plan = decide(job, OWNER, CONFIG, gone)
    assert plan.engines_leaving == ()
    assert plan.ensure_infrastructure  # the check of generation 2 is still due
    (config_map, *_) = children.build_infrastructure(job, OWNER, CONFIG, plan.engines_leaving)
    assert config_map["data"][naming.ENGINES_KEY].split() == [
        naming.engine_url(OWNER.name, OWNER.namespace, 0)
    ]
    assert settle(plan, gone, CONFIG, written).infrastructure_checked == (2, NOW)

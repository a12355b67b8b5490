"""Draining engines the operator stops: the pods' preStop hook and grace period, and a
scale-down that keeps the proxy listing an engine until its pod is gone (pure)."""

from __future__ import annotations

import ast
import io
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from dressage_operator import children, naming
from dressage_operator.children import drain_hook
from dressage_operator.children.engine import (
    DRAIN_HOOK,
    ENGINE_DRAIN_TIMEOUT_SECONDS,
    ENGINE_GRACE_PERIOD_SECONDS,
)
from dressage_operator.children.pods import PROXY_TOKEN_ENV
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
    # A program any image's Python runs: the standard library only.
    imported = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).partition(".")[0]
        for node in ast.walk(ast.parse(DRAIN_HOOK))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert imported - {"__future__"} <= set(sys.stdlib_module_names), imported


def test_the_hook_is_the_drain_hook_modules_source_and_reads_the_pods_env_names() -> None:
    assert Path(drain_hook.__file__).read_text() == DRAIN_HOOK
    assert drain_hook.PROXY_TOKEN_ENV == PROXY_TOKEN_ENV  # the env `proxy_token_env` sets


def test_the_grace_period_outlasts_the_drain_and_the_hooks_own_bound() -> None:
    # The hook asks for at most the drain bound and waits 5 s more for the answer; SGLang
    # needs the rest of the grace period to end after SIGTERM.
    assert ENGINE_DRAIN_TIMEOUT_SECONDS <= DEFAULT_DRAIN_TIMEOUT_S
    assert drain_hook.ANSWER_MARGIN_SECONDS == 5
    assert ENGINE_GRACE_PERIOD_SECONDS >= ENGINE_DRAIN_TIMEOUT_SECONDS + 5 + 15


class _Proxies:
    """The proxies' side of the hook's requests: records each, fails those of `down`."""

    def __init__(self, down: tuple[str, ...] = ()) -> None:
        self.down = down
        self.calls: list[tuple[str, dict[str, Any], float]] = []
        self._lock = threading.Lock()

    def post(self, proxy: str, body: dict[str, Any], timeout: float) -> str:
        with self._lock:
            self.calls.append((proxy, body, timeout))
        if proxy in self.down:
            raise OSError("connection refused")
        return '{"drained": true}'


def test_one_proxy_is_asked_to_drain_the_engine_within_the_bound() -> None:
    proxies = _Proxies()
    out, err = io.StringIO(), io.StringIO()
    drain_hook.drain("http://e0:30000", ["http://p:8000"], proxies.post, out, err)
    assert proxies.calls == [
        (
            "http://p:8000",
            {"url": "http://e0:30000", "timeout_s": ENGINE_DRAIN_TIMEOUT_SECONDS},
            ENGINE_DRAIN_TIMEOUT_SECONDS + 5,
        )
    ]
    assert out.getvalue() == 'http://p:8000 drained: {"drained": true}\n'
    assert err.getvalue() == ""


def test_several_replicas_all_mark_the_engine_draining_before_any_drains_it() -> None:
    replicas = ["http://p0:8000", "http://p1:8000"]
    proxies = _Proxies(down=("http://p1:8000",))
    out, err = io.StringIO(), io.StringIO()
    drain_hook.drain("http://e0:30000", replicas, proxies.post, out, err)
    marks, drains = proxies.calls[:2], proxies.calls[2:]
    assert sorted(p for p, _, _ in marks) == replicas
    assert all(body == {"url": "http://e0:30000", "abort": False} for _, body, _ in marks)
    assert all(timeout == 5 for _, _, timeout in marks)
    assert sorted(p for p, _, _ in drains) == replicas
    assert all(body["timeout_s"] == ENGINE_DRAIN_TIMEOUT_SECONDS for _, body, _ in drains)
    # A replica that fails is reported and the hook goes on: the pod stops anyway.
    assert out.getvalue().count("http://p0:8000") == 2
    assert err.getvalue().count("http://p1:8000 drain failed: connection refused") == 2


def test_the_proxy_urls_are_a_comma_list_or_a_services_resolved_replicas() -> None:
    assert drain_hook.proxy_urls(" http://a:1/, ,http://b:2") == ["http://a:1", "http://b:2"]

    def resolve(host: str, port: int) -> set[str]:
        assert (host, port) == ("p.ns.svc", 8000)
        return {"10.0.0.2", "fd00::1", "10.0.0.1"}

    assert drain_hook.proxy_urls("dns+http://p.ns.svc:8000", resolve) == [
        "http://10.0.0.1:8000",
        "http://10.0.0.2:8000",
        "http://[fd00::1]:8000",
    ]

    def unresolved(host: str, port: int) -> set[str]:
        raise socket.gaierror("Name or service not known")

    err = io.StringIO()
    assert drain_hook.proxy_urls("dns+http://p.ns.svc:8000", unresolved, err) == []
    assert err.getvalue().startswith("cannot resolve the proxy replicas:")


def test_the_token_goes_as_a_bearer_header_only_when_set() -> None:
    assert drain_hook.request_headers(None) == {"content-type": "application/json"}
    assert drain_hook.request_headers("") == {"content-type": "application/json"}
    assert drain_hook.request_headers("s3cret")["authorization"] == "Bearer s3cret"


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

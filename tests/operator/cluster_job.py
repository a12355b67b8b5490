"""What the cluster-shaped tests share (`test_cluster_run`, `test_cluster_weight_sync`,
`test_cluster_churn`): one job, `cl`, run by the real operator against an API emulation of its
own, its pods run as local processes by the test kubelet (`kubelet.py`), the model a hub id
staged offline from a Hugging Face cache on the job's shared storage, the proxy's bearer token
from a Secret; and the reads and holds the tests play the job with.

The fixtures `cluster` and `kubelet` live here; a test file imports them by name.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dressage_testkit.kube import EmulatedCluster, emulated_cluster, operator_env
from dressage_testkit.processes import free_port

from dressage.model import build_tiny_model
from tests.hub_cache import write_hub_cache

from .conftest import NAMESPACE, Operator
from .kubelet import Kubelet
from .kubelet_probes import ProbeResult
from .waiting import wait_until

JOB = "cl"
TOKEN = "s3cret-token"
TRAINER = f"{JOB}-trainer-0"
PROXY_PORT = 8000


def job_manifest(release: str, steps: int) -> dict[str, Any]:
    """The job: a hub model staged offline, two engines playing SGLang `release`, fully async
    rollout of tiny batches, `steps` trainer steps (a publish after each)."""
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": JOB},
        "spec": {
            "model": {"source": "acme/tiny", "dtype": "float32", "hubOffline": True},
            "task": {"name": "arithmetic", "params": {"maxOperand": 9}},
            "trainer": {"nodes": 1, "gpusPerNode": 0},
            "inference": {"replicas": 2, "sglangVersion": release},
            "proxy": {"tokenSecret": {"name": "proxy-token", "key": "token"}},
            "rollout": {
                "mode": "fully_async",
                "groupSize": 2,
                "batchSize": 2,
                "concurrency": 2,
                "maxNewTokens": 3,
            },
            "training": {"steps": steps, "learningRate": 1e-3},
            "storage": {"persistentVolumeClaim": "shared"},
        },
    }


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    """An API emulation of its own for each run: every run creates the same job."""
    with emulated_cluster(NAMESPACE) as c:
        yield c


@pytest.fixture
def kubelet(cluster: EmulatedCluster, tmp_path: Path) -> Iterator[Kubelet]:
    node = Kubelet(cluster, tmp_path / "node")
    yield node
    node.stop()


def start_operator(c: EmulatedCluster, kubelet: Kubelet, tmp_path: Path, **env: str) -> Operator:
    """Put the model in the claim's hub cache and the proxy token in its Secret, and start the
    operator (network policies on, its metrics on a free port, plus `env`); the caller stops
    it."""
    claim = kubelet.root / "claims" / "shared"
    write_hub_cache(claim / "models" / ".hf-home", "acme/tiny", build_tiny_model(tmp_path / "m"))
    encoded = base64.b64encode(TOKEN.encode()).decode()
    c.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "proxy-token"},
            "data": {"token": encoded},
        }
    )
    settings = operator_env(
        c,
        tmp_path / "kubeconfig",
        DRESSAGE_OPERATOR_METRICS_PORT=str(free_port()),
        DRESSAGE_OPERATOR_NETWORK_POLICIES="true",
        **env,
    )
    operator = Operator(c, settings)
    operator.start()
    return operator


CHILD_KINDS = (("v1", "pods"), ("v1", "services"), ("v1", "configmaps"), ("apps/v1", "deployments"))
"""The API versions and plurals of a job's children that `job_children` lists by default."""


def job_children(
    c: EmulatedCluster, job: str, kinds: tuple[tuple[str, str], ...] = CHILD_KINDS
) -> list[dict[str, Any]]:
    """`job`'s children of `kinds` as the operator wrote them (the kubelet's pod status left
    out), each with its `apiVersion`."""
    out = []
    for api_version, plural in kinds:
        for obj in c.items(api_version, plural):
            if obj["metadata"].get("labels", {}).get("dressage.io/job") == job:
                obj = {k: v for k, v in obj.items() if k != "status" or plural != "pods"}
                out.append({"apiVersion": api_version, **obj})
    return out


def job_status(c: EmulatedCluster) -> dict[str, Any]:
    body = c.get(c.job_path(JOB)) or {}
    status: dict[str, Any] = body.get("status") or {}
    return status


def steps_done(kubelet: Kubelet) -> int:
    """How many steps the trainer has logged."""
    log = kubelet.log_text(TRAINER, "trainer")
    return len(re.findall(r"^step \d+ version", log, flags=re.MULTILINE))


def proxy_health(kubelet: Kubelet) -> dict[str, Any] | None:
    """The proxy's `/health` (its engines, and whether generation is paused), None when it
    does not answer."""
    url = f"http://127.0.0.1:{kubelet.port(f'{JOB}-proxy-0', PROXY_PORT)}/health"
    try:
        body: dict[str, Any] = httpx.get(url, timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return None
    return body


def healthy_engines(kubelet: Kubelet) -> list[str]:
    health = proxy_health(kubelet) or {}
    return sorted(e["url"] for e in health.get("engines", []) if e["healthy"])


def served_versions(results: list[ProbeResult]) -> list[str]:
    """The weight versions probes saw, in order, each run of one version once."""
    seen: list[str] = []
    for r in results:
        # The kubelet keeps the start of a probe's body; the version comes early in it.
        found = re.search(r'"weight_version":\s*"([^"]*)"', r.body) if r.ok else None
        if found is not None and (not seen or seen[-1] != found[1]):
            seen.append(found[1])
    return seen


def held_until(kubelet: Kubelet, condition: Callable[[], Any], what: str) -> None:
    """Hold the trainer between steps until `condition` holds (letting a publish it was
    stopped inside finish first), so the next publish sees the changed engine set."""
    kubelet.freeze(TRAINER)
    try:

        def settled() -> bool:
            health = proxy_health(kubelet)
            if health is not None and health["paused"]:
                kubelet.thaw(TRAINER)
                wait_until(
                    lambda: (proxy_health(kubelet) or {}).get("paused") is False,
                    60,
                    "the publish to finish",
                )
                kubelet.freeze(TRAINER)
                return False
            return bool(condition())

        try:
            wait_until(settled, 180, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{situation(kubelet)}") from None
    finally:
        kubelet.thaw(TRAINER)


def situation(kubelet: Kubelet, log_lines: int = 12) -> str:
    """What a failed hold prints: the proxy's `/health`, each pod's phase and readiness with
    its latest probe of each kind, and the log tail of every container that is not ready."""
    out = [f"proxy /health: {json.dumps(proxy_health(kubelet))}"]
    pods = dict(kubelet.pods)  # copies of the kubelet's own (it mutates them as it syncs)
    probes = list(kubelet.probes)
    for name, pod in sorted(pods.items()):
        ready = {c.name: c.ready for c in pod.containers.values()}
        out.append(f"{name}: {pod.phase}, ready {ready}")
        latest: dict[tuple[str, str], ProbeResult] = {}
        for probe in probes:
            if probe.pod == name and probe.uid == pod.uid:
                latest[(probe.container, probe.kind)] = probe
        for (container_name, kind), probe in sorted(latest.items()):
            verdict = "ok" if probe.ok else f"failed: {probe.detail[:160]}"
            out.append(f"  {container_name} {kind}: {verdict}")
        for container in pod.containers.values():
            if not container.ready:
                tail = kubelet.log_text(name, container.name).splitlines()[-log_lines:]
                out.append(f"  {container.name} log tail:")
                out.extend(f"    {line}" for line in tail)
    return "\n".join(out)


def one_more_step(kubelet: Kubelet, what: str) -> None:
    done = steps_done(kubelet)
    wait_until(lambda: steps_done(kubelet) > done, 180, what)

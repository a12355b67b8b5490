"""Helpers of the decision's tests: a fixed clock, an owner, jobs, pods and one-call decisions."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from dressage_operator import children
from dressage_operator.children import Owner
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import decide
from dressage_operator.observe import PodInfo, pod_info
from dressage_operator.plan import Observed, Plan

from dressage.api import AsyncRLJob, validate_job
from dressage.api.status import AsyncRLJobStatus, JobPhase

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
OWNER = Owner(name="job-a", namespace="ns", uid="u")
CONFIG = OperatorConfig()


def make_job(**spec: object) -> AsyncRLJob:
    """A job of two trainer nodes and two engines, `spec` on top (no shared storage claim)."""
    base: dict[str, object] = {
        "model": {"source": "builtin:tiny"},
        "trainer": {"nodes": 2},
        "inference": {"replicas": 2},
    }
    base.update(spec)
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "job-a"},
            "spec": base,
        }
    )


def make_pod(role: str, index: int, phase: str = "Running", gang: int = 0, **kw: object) -> PodInfo:
    """What the pod index holds for one of the job's pods."""
    name = f"job-a-{'trainer' if role == 'trainer' else 'engine'}-{index}"
    fields: dict[str, object] = {
        "name": name,
        "uid": f"{name}-{gang}",
        "role": role,
        "index": index,
        "gang": gang,
        "phase": phase,
        "ready": phase == "Running",
        "terminating": False,
        "owner_uid": OWNER.uid,
    }
    fields.update(kw)
    return PodInfo(**fields)  # type: ignore[arg-type]


def running_pods(gang: int = 0) -> tuple[PodInfo, ...]:
    """`make_job()`'s four pods, running and ready."""
    return (
        make_pod("trainer", 0, gang=gang),
        make_pod("trainer", 1, gang=gang),
        make_pod("inference", 0),
        make_pod("inference", 1),
    )


def decide_for(job: AsyncRLJob, status: AsyncRLJobStatus | None = None, **obs: object) -> Plan:
    """`decide` at `NOW`, generation 1, with `obs` as the rest of what was observed."""
    observed = Observed(generation=1, status=status or AsyncRLJobStatus(), now=NOW, **obs)  # type: ignore[arg-type]
    return decide(job, OWNER, CONFIG, observed)


def condition(plan: Plan | AsyncRLJobStatus, ctype: str) -> tuple[str, str, str]:
    """(status, reason, message) of one condition."""
    status = plan.status if isinstance(plan, Plan) else plan
    c = next(c for c in status.conditions if c.type == ctype)
    return c.status, c.reason, c.message


def cluster_job(**spec: Any) -> AsyncRLJob:
    """A CPU job of two trainer nodes and two engines on a shared claim, `spec` on top."""
    base: dict[str, Any] = {
        "model": {"source": "builtin:tiny"},
        "trainer": {"nodes": 2, "gpusPerNode": 0},
        "inference": {"replicas": 2},
        "storage": {"persistentVolumeClaim": "shared"},
    }
    base.update(spec)
    body = {"apiVersion": "dressage.io/v1alpha1", "kind": "AsyncRLJob"}
    return validate_job({**body, "metadata": {"name": "job-a"}, "spec": base})


def built_pods(job: AsyncRLJob, gang: int = 0, ready: bool = True) -> tuple[PodInfo, ...]:
    """The pods the builders make for `job`, as the pod index would summarise them."""
    bodies = children.build_trainer_pods(job, OWNER, CONFIG, gang)
    bodies += children.build_engine_pods(job, OWNER, CONFIG)
    pods = []
    for body in bodies:
        body = copy.deepcopy(body)
        body["metadata"]["uid"] = body["metadata"]["name"] + "-uid"
        ready_condition = {"type": "Ready", "status": "True" if ready else "False"}
        body["status"] = {"phase": "Running", "conditions": [ready_condition]}
        info = pod_info(body)
        assert info is not None
        pods.append(info)
    return tuple(pods)


def decide_running(
    job: AsyncRLJob, pods: tuple[PodInfo, ...], status: AsyncRLJobStatus | None = None
) -> Plan:
    """`decide` for a running job (generation 2) that has `pods`."""
    status = status or AsyncRLJobStatus(phase=JobPhase.RUNNING)
    obs = Observed(generation=2, status=status, now=NOW, pods=pods)
    return decide(job, OWNER, CONFIG, obs)

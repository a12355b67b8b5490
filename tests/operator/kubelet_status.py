"""The pod status the test kubelet writes: phase, the `PodScheduled` and `Ready` conditions, and
each container's state, last termination and readiness, as the kubelet and the scheduler
write them (what they say of a pod that does not start or keeps failing: `kubelet_failures`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

Obj = dict[str, Any]


@dataclass
class ContainerReport:
    """What the status says of one container besides its process: why it waits, how it
    ended, and its restart back-off (`kubelet_failures`)."""

    waiting: tuple[str, str] | None = None
    """(reason, message) while the container waits (a pull, its config, a back-off)."""
    last: Obj | None = None
    """`lastState.terminated` of its previous run."""
    terminated: Obj | None = None
    """`state.terminated` of a run that ended and is not restarted (yet)."""
    recorded: int | None = None
    """The pid whose end `terminated` records."""
    restarted: int | None = None
    """The pid whose end the restart back-off counted."""
    backoff_s: float = 0.0
    restart_at: float = 0.0


@dataclass
class PodReport:
    """The parts of a pod's status that the scheduler and the node's failures write."""

    scheduled: tuple[bool, str] | None = None
    """(placed, the scheduler's message when not); None before the scheduler looked."""
    containers: dict[str, ContainerReport] = field(default_factory=dict)

    def container(self, name: str) -> ContainerReport:
        return self.containers.setdefault(name, ContainerReport())


class ContainerState(Protocol):
    name: str
    ready: bool
    restarts: int
    started: bool
    process: Any


def container_status(spec: Obj, state: ContainerState | None, report: PodReport) -> Obj:
    """One entry of `containerStatuses` (or `initContainerStatuses`): `waiting` while the
    container waits to be created, pulled or restarted, `terminated` once its run ended and is
    not restarted, else `running`; its previous run's end in `lastState`."""
    name = spec["name"]
    seen = report.containers.get(name) or ContainerReport()
    out: Obj = {
        "name": name,
        "image": spec.get("image", ""),
        "imageID": "",
        "ready": bool(state and state.ready),
        "restartCount": state.restarts if state else 0,
        "started": bool(state and state.started),
    }
    if seen.waiting is not None:
        out["state"] = {"waiting": {"reason": seen.waiting[0], "message": seen.waiting[1]}}
    elif state is None:
        out["state"] = {"waiting": {"reason": "ContainerCreating"}}
    elif seen.terminated is not None and seen.recorded == getattr(state.process, "pid", None):
        out["state"] = {"terminated": dict(seen.terminated)}
    else:
        out["state"] = {"running": {}}
    if seen.last is not None:
        out["lastState"] = {"terminated": dict(seen.last)}
    return out


def pod_status(
    manifest: Obj,
    phase: str,
    ready: bool,
    containers: Sequence[ContainerState],
    reason: str | None = None,
    message: str | None = None,
    report: PodReport | None = None,
) -> Obj:
    """The `status` of a pod in `phase`, as a kubelet reports it; a pod the scheduler has not
    placed has only its `PodScheduled` condition, as the scheduler writes it."""
    spec = manifest["spec"]
    report = report or PodReport()
    conditions: list[Obj] = []
    if report.scheduled is not None:
        placed, why = report.scheduled
        scheduled: Obj = {"type": "PodScheduled", "status": "True" if placed else "False"}
        if not placed:
            scheduled.update(reason="Unschedulable", message=why)
        conditions.append(scheduled)
    conditions.append({"type": "Ready", "status": "True" if ready else "False"})
    status: Obj = {"phase": phase, "conditions": conditions}
    if report.scheduled is None or report.scheduled[0]:
        running = {s.name: s for s in containers}
        status["containerStatuses"] = [
            container_status(c, running.get(c["name"]), report) for c in spec["containers"]
        ]
        init = [
            container_status(c, running.get(c["name"]), report)
            for c in spec.get("initContainers") or []
            if c["name"] in running or report.container(c["name"]).waiting is not None
        ]
        if init:
            status["initContainerStatuses"] = init
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return status

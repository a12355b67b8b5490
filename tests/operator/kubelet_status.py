"""The pod status the test kubelet writes: phase, the Ready condition, container statuses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

Obj = dict[str, Any]


class ContainerState(Protocol):
    name: str
    ready: bool
    restarts: int
    started: bool


def pod_status(
    manifest: Obj,
    phase: str,
    ready: bool,
    containers: Sequence[ContainerState],
    reason: str | None = None,
    message: str | None = None,
) -> Obj:
    """The `status` of a pod in `phase`, as a kubelet reports it."""
    spec = manifest["spec"]
    images = {
        c["name"]: c.get("image", "")
        for c in [*spec.get("initContainers", []), *spec["containers"]]
    }
    status: Obj = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [
            {
                "name": s.name,
                "image": images.get(s.name, ""),
                "imageID": "",
                "ready": s.ready,
                "restartCount": s.restarts,
                "started": s.started,
            }
            for s in containers
        ],
    }
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return status

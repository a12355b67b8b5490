"""What the operator needs to know about a child pod, read from its body (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dressage_operator import naming


@dataclass(frozen=True)
class PodProblem:
    """Why a pod does not start or keeps failing, in the words of whoever said it."""

    reason: str
    """The Kubernetes reason: `Unschedulable`, `ErrImagePull`, `ImagePullBackOff`,
    `CreateContainerConfigError`, `CrashLoopBackOff`, `OOMKilled`, ... (`PROBLEM_REASONS`)."""
    message: str
    """What it means for this pod: the container, its image or exit code, and the scheduler's
    or the kubelet's own message."""

    @property
    def kind(self) -> str:
        """The reason with the kubelet's alternations folded (`PROBLEM_KINDS`): a pull that
        fails goes ErrImagePull, ImagePullBackOff, ErrImagePull, ... at each retry, and a
        crash-looping container between CrashLoopBackOff and running again; each is one
        problem, reported once."""
        return PROBLEM_KINDS.get(self.reason, self.reason)


@dataclass(frozen=True)
class PodInfo:
    """A summary of one pod of a job, as kept in the operator's in-memory index."""

    name: str
    uid: str
    role: str
    index: int
    gang: int
    phase: str
    """Kubernetes pod phase: Pending, Running, Succeeded, Failed or Unknown."""
    ready: bool
    terminating: bool
    reason: str = ""
    """Why the pod failed, when it did (pod reason or container termination reason)."""
    owner_uid: str = ""
    """uid of the job in the pod's controller owner reference: a pod left by an earlier job
    of the same name carries that job's uid."""
    role_spec: str = ""
    """The pod's `naming.ANNOTATION_ROLE_SPEC`: what part of the spec it runs ("" if none)."""
    disruption: str = ""
    """Why someone else than the operator is terminating the pod (`disruption`): a
    preemption or an eviction, "" when nothing says so."""
    problem: PodProblem | None = None
    """What keeps the pod from starting or running, as the scheduler or the kubelet says it
    (`pod_problem`); None when nothing does."""

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"


def _int(value: object, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def failure_reason(status: Mapping[str, Any]) -> str:
    """The most specific reason a pod failed: a container's termination, else the pod's."""
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated") or {}
        if terminated and terminated.get("exitCode", 0) != 0:
            reason = terminated.get("reason") or "Error"
            return f"{cs.get('name', 'container')}: {reason} (exit code {terminated['exitCode']})"
    return str(status.get("reason") or status.get("message") or "")


# What the scheduler and the kubelet write when a pod does not start or keeps failing, as
# kubernetes/kubernetes (v1.33) writes it:
# - the scheduler: condition `PodScheduled` False, reason `Unschedulable`
#   (`v1.PodReasonUnschedulable`, pkg/scheduler/schedule_one.go), the message `FitError.Error()`
#   (pkg/scheduler/framework/types.go: `0/1 nodes are available: 1 Insufficient
#   nvidia.com/gpu. preemption: ...`, `... persistentvolumeclaim "x" not found. ...`, `... pod
#   has unbound immediate PersistentVolumeClaims. ...`);
# - the kubelet, a container's `state.waiting.reason`: pkg/kubelet/images/types.go
#   (`ErrImagePull` with the runtime's error, `ImagePullBackOff` with `Back-off pulling image
#   "x"`, `InvalidImageName`, `ErrImageNeverPull`), pkg/kubelet/kuberuntime/kuberuntime_container.go
#   (`CreateContainerConfigError` with `secret "x" not found` or `couldn't find key k in Secret
#   ns/x`, `CreateContainerError`, ...), pkg/kubelet/container/sync_result.go
#   (`CrashLoopBackOff`, message `back-off 10s restarting failed container=c pod=p_ns(uid)`
#   from kuberuntime_manager.go `doBackOff`);
# - the runtime, a container's `state.terminated` / `lastState.terminated`: reason `OOMKilled`,
#   exit code 137 (128 + SIGKILL).
IMAGE_REASONS = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CONFIG_REASONS = (
    "CreateContainerConfigError",
    "CreateContainerError",
    "PreStartHookError",
    "PostStartHookError",
    "RunContainerError",
)
CRASH_LOOP = "CrashLoopBackOff"
OOM_KILLED = "OOMKilled"
UNSCHEDULABLE = "Unschedulable"
PROBLEM_REASONS = (UNSCHEDULABLE, *IMAGE_REASONS, *CONFIG_REASONS, CRASH_LOOP, OOM_KILLED)
"""Every `PodProblem.reason`."""
PROBLEM_KINDS = {"ErrImagePull": "ImagePullBackOff"}
"""Reasons that are phases of another's problem (`PodProblem.kind`)."""
MESSAGE_CHARS = 240
"""The longest quoted termination message: one line of `kubectl get arj`."""


def _one_line(text: str) -> str:
    """The last non-empty line of a (termination) message, at most `MESSAGE_CHARS` long: a
    log tail's last line is where a traceback names its exception."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    return last if len(last) <= MESSAGE_CHARS else last[: MESSAGE_CHARS - 3] + "..."


def _exit(terminated: Mapping[str, Any]) -> str:
    """`exited with code 1 (Error): <its message's last line>` of a terminated state."""
    code = terminated.get("exitCode", "?")
    text = f"exited with code {code} ({terminated.get('reason') or 'Error'})"
    message = _one_line(str(terminated.get("message") or ""))
    return f"{text}: {message}" if message else text


def container_problem(cs: Mapping[str, Any]) -> PodProblem | None:
    """What a container status says keeps the container from running: an image that cannot
    be pulled, a configuration the kubelet cannot make, a crash loop, the OOM killer."""
    name = cs.get("name", "container")
    state = cs.get("state") or {}
    waiting = state.get("waiting") or {}
    last = (cs.get("lastState") or {}).get("terminated") or {}
    reason = str(waiting.get("reason") or "")
    said = str(waiting.get("message") or "")
    if reason in IMAGE_REASONS:
        image = cs.get("image") or "?"
        return PodProblem(reason, f'container {name} image "{image}": {said or reason}')
    if reason in CONFIG_REASONS:
        return PodProblem(reason, f"container {name}: {said or reason}")
    terminated = state.get("terminated") or {}
    if terminated.get("reason") == OOM_KILLED:
        return PodProblem(OOM_KILLED, f"container {name} {_exit(terminated)}")
    if cs.get("ready") or not last or last.get("exitCode", 0) == 0:
        return None
    restarts = int(cs.get("restartCount") or 0)
    again = f"restarted {restarts} times" + (f"; {said}" if reason == CRASH_LOOP and said else "")
    if last.get("reason") == OOM_KILLED:
        return PodProblem(OOM_KILLED, f"container {name} {_exit(last)}; {again}")
    if reason == CRASH_LOOP or restarts >= 2:
        # The kubelet restarts a failed container at once the first time, then backs off: a
        # second failure is a crash loop, also while its container runs again between two.
        return PodProblem(CRASH_LOOP, f"container {name} {_exit(last)}; {again}")
    return None


def pod_problem(status: Mapping[str, Any]) -> PodProblem | None:
    """The first thing that keeps a pod from starting or running (`PROBLEM_REASONS`): the
    scheduler's `Unschedulable`, else the first init container's problem, else the first
    container's (`container_problem`); None when nothing does."""
    for condition in status.get("conditions") or []:
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == UNSCHEDULABLE
        ):
            said = str(condition.get("message") or "no message from the scheduler")
            return PodProblem(UNSCHEDULABLE, said)
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in status.get(key) or []:
            found = container_problem(cs)
            if found is not None:
                return found
    return None


PREEMPTION_CONDITIONS = ("DisruptionTarget", "TerminationTarget")
"""Pod conditions that say why a pod is being terminated: Kubernetes' `DisruptionTarget`
(preemption by the scheduler, an eviction, a taint, the kubelet) and Kueue's
`TerminationTarget` (Kueue stopping the pod's Workload: preempted or evicted)."""


def disruption(conditions: list[Mapping[str, Any]]) -> str:
    """`<type>: <reason>` of a true `PREEMPTION_CONDITIONS` condition (for example
    `TerminationTarget: Preempted` when Kueue preempts the pod's Workload), "" when none says
    so. The seam for draining a preempted pod instead of counting it as lost (the operator
    names it in the gang restart's message for now)."""
    for condition in conditions:
        kind = condition.get("type")
        if kind in PREEMPTION_CONDITIONS and condition.get("status") == "True":
            return f"{kind}: {condition.get('reason') or 'no reason given'}"
    return ""


def pod_info(body: Mapping[str, Any]) -> PodInfo | None:
    """Summarise a pod body; None when it is not a Dressage child."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    role = labels.get(naming.LABEL_ROLE)
    if not labels.get(naming.LABEL_JOB) or role not in (
        naming.ROLE_TRAINER,
        naming.ROLE_INFERENCE,
    ):
        return None
    status = body.get("status") or {}
    phase = str(status.get("phase") or "Pending")
    conditions = status.get("conditions") or []
    ready = phase == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    return PodInfo(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        role=str(role),
        index=_int(labels.get(naming.LABEL_INDEX)),
        gang=_int(labels.get(naming.LABEL_GANG)),
        phase=phase,
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        reason=failure_reason(status) if phase == "Failed" else "",
        owner_uid=controller_uid(meta),
        role_spec=str((meta.get("annotations") or {}).get(naming.ANNOTATION_ROLE_SPEC, "")),
        disruption=disruption(conditions),
        problem=pod_problem(status),
    )


def controller_uid(meta: Mapping[str, Any]) -> str:
    """The uid of an object's controller owner reference, "" when it has none."""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""

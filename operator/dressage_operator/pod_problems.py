"""The first failure named at the top line: pods that do not start or keep failing (pure).

What the scheduler or the kubelet says keeps a pod of the job from starting or running
(`observe.pod_problem`: Unschedulable, ErrImagePull/ImagePullBackOff, CreateContainerConfigError,
CrashLoopBackOff, OOMKilled, ...) reaches the job in the cycle that sees the pod's status:
- the top line (`status.message`, which `kubectl get arj` prints) names the first `SHOWN` pods
  and what keeps each, after `PROBLEMS_MARK`, in whatever phase the job is: a Pending job stays
  Pending and a Running one Running, since each of these heals once its cause is fixed (a
  failed trainer pod, OOM-killed or not, is the gang restart's business, `decide`);
- condition `PodsHealthy` is False, its reason the first pod's problem and its message every
  pod's;
- a Warning Event, reason the problem's, is posted when a pod's problem begins, and a Normal
  `PodRecovered` one when it ends while the pod lives on: once per transition, never per
  cycle. A pull that goes ErrImagePull, ImagePullBackOff, ErrImagePull as the kubelet retries
  is one problem (`PodProblem.kind`).
Which pods had which problem is read back from the previous condition's message, so the
decision needs nothing but the status, and a restarted operator posts nothing twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from dressage.api.status import Condition
from dressage_operator import naming
from dressage_operator.observe import PROBLEM_KINDS, PROBLEM_REASONS, PodInfo

PROBLEMS_MARK = "; stuck: "
"""Separates the phase's own message from the pods' problems on the top line."""
SHOWN = 2
"""Pods named on the top line; the condition's message names every one."""
REASON_HEALTHY = "NoPodProblems"
REASON_RECOVERED = "PodRecovered"
_ENTRY = re.compile(rf"(?:^|; )([a-z0-9][-a-z0-9.]*) ({'|'.join(PROBLEM_REASONS)}): ")


@dataclass
class PodsReport:
    """The top line, the `PodsHealthy` condition and the Events of this cycle."""

    message: str
    healthy: bool
    reason: str
    condition_message: str = ""
    events: list[tuple[str, str, str]] = field(default_factory=list)
    """(type, reason, message) of each Event to post."""


def entry(pod: PodInfo) -> str:
    """`<pod> <reason>: <what the scheduler or kubelet says>` of a pod with a problem."""
    assert pod.problem is not None
    return f"{pod.name} {pod.problem.reason}: {pod.problem.message}"


def named_before(condition: Condition | None) -> set[tuple[str, str]]:
    """(pod, problem kind) pairs the previous `PodsHealthy` condition named."""
    if condition is None or condition.status != "False":
        return set()
    return {(m[1], PROBLEM_KINDS.get(m[2], m[2])) for m in _ENTRY.finditer(condition.message)}


def _order(pod: PodInfo) -> tuple[int, int, str]:
    return (0 if pod.role == naming.ROLE_TRAINER else 1, pod.index, pod.name)


def strip(message: str) -> str:
    """The phase's own message, without the pods' problems an earlier cycle appended."""
    return message.split(PROBLEMS_MARK)[0]


def report(pods: Iterable[PodInfo], previous: Condition | None, message: str) -> PodsReport:
    """The job's top line with its pods' problems, the `PodsHealthy` condition and the Events
    of the problems that began or ended since `previous` (see the module docstring). `pods`
    are the job's own; those being deleted are left out."""
    live = sorted((p for p in pods if not p.terminating), key=_order)
    stuck = [p for p in live if p.problem is not None]
    before = named_before(previous)
    now = {(p.name, p.problem.kind) for p in stuck if p.problem is not None}
    events = [
        ("Warning", p.problem.reason, f"pod {entry(p)}")
        for p in stuck
        if p.problem is not None and (p.name, p.problem.kind) not in before
    ]
    names = {p.name for p in live}
    events += [
        ("Normal", REASON_RECOVERED, f"pod {name} recovered from {kind}")
        for name, kind in sorted(before - now)
        if name in names
    ]
    base = strip(message)
    if not stuck:
        return PodsReport(base, True, REASON_HEALTHY, events=events)
    entries = [entry(p) for p in stuck]
    top = "; ".join(entries[:SHOWN])
    if len(entries) > SHOWN:
        top += f"; {len(entries) - SHOWN} more in condition PodsHealthy"
    first = stuck[0].problem
    assert first is not None
    return PodsReport(base + PROBLEMS_MARK + top, False, first.reason, "; ".join(entries), events)

"""The end of a cycle: the status to write, the Events to post and the next delay (pure).

The handler applies `decide`'s plan and reports one `ChildResult` per write; `settle` turns
plan and results into the status written once, the Events to post and the delay until the next
cycle. A child the API server refuses shows at once as `ChildrenApplied=False` with the
server's message, and a Warning Event; the cycle is retried with backoff.
"""

from __future__ import annotations

from collections.abc import Sequence

from dressage.api.status import ConditionType, JobPhase
from dressage_operator.conditions import Conditions
from dressage_operator.config import OperatorConfig
from dressage_operator.plan import Applied, ChildResult, Event, Observed, Outcome, Plan

REASON_DRIFT_CORRECTED = "DriftCorrected"
CONFLICT_RETRY_SECONDS = 1.0
"""Requeue delay after a create conflicted (the pod index lagged, or an old pod terminates)."""
BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Requeue delays after consecutive cycles that failed: a child refused, or the cycle raised."""
MIN_DELAY_SECONDS = 0.05


def backoff(failed_cycles: int) -> float:
    """The delay after `failed_cycles` + 1 consecutive failed cycles."""
    return BACKOFF_SECONDS[min(failed_cycles, len(BACKOFF_SECONDS) - 1)]


VERB_OF_EVENT = {"create": "FailedCreate", "patch": "FailedUpdate", "delete": "FailedDelete"}
REASON_NOT_OWNED = "ChildNotOwned"


def _event_reason(result: ChildResult) -> str:
    if result.applied is Applied.NOT_OWNED:
        return REASON_NOT_OWNED
    return VERB_OF_EVENT[result.verb]


def settle(
    plan: Plan, obs: Observed, config: OperatorConfig, results: Sequence[ChildResult]
) -> Outcome:
    """The status to write, the Events to post and the next delay, from the plan and what the
    API server answered to each of its writes.

    `ChildrenApplied` is False while a child is refused, its reason naming the kind
    (`PodRefused`) and its message each refused child, the API server's message and field; a
    Warning Event per refused write is posted when the refusal is new or says something else.
    A refusal backs off (`BACKOFF_SECONDS`); a conflict retries soon."""
    status = plan.status.model_copy(deep=True)
    events = list(plan.events)
    if plan.invalid:
        return Outcome(
            status=status,
            events=events,
            delay=plan.requeue_after,
            result="invalid",
            infrastructure_checked=obs.infrastructure_checked,
            refused_cycles=0,
        )
    conds = Conditions(status, obs.now, obs.generation)
    refused = [r for r in results if r.applied in (Applied.REFUSED, Applied.NOT_OWNED)]
    conflicted = any(r.applied is Applied.CONFLICT for r in results)
    if refused:
        message = "; ".join(r.describe() for r in refused)
        previous = conds.get(ConditionType.CHILDREN_APPLIED)
        if previous is None or previous.status != "False" or previous.message != message:
            events += [Event("Warning", _event_reason(r), r.describe()) for r in refused]
        how = "NotOwned" if refused[0].applied is Applied.NOT_OWNED else "Refused"
        conds.set(ConditionType.CHILDREN_APPLIED, False, f"{refused[0].kind}{how}", message)
    else:
        conds.set(ConditionType.CHILDREN_APPLIED, True, "Applied")
    events += [
        Event(
            "Warning",
            REASON_DRIFT_CORRECTED,
            f"{r.kind} {r.name} differed from what the job says ({r.message}): set back",
        )
        for r in results
        if r.applied is Applied.CORRECTED
    ]

    checked = obs.infrastructure_checked
    if plan.ensure_infrastructure:
        infra = {"ConfigMap", "Service", "NetworkPolicy"}
        failed = any(
            r.kind in infra and r.applied in (Applied.REFUSED, Applied.CONFLICT, Applied.NOT_OWNED)
            for r in results
        )
        checked = (-1, None) if failed else (obs.generation, obs.now)

    delay: float | None = None
    if not plan.delete_job:
        delay = config.resync_seconds
        if status.phase is JobPhase.RUNNING:
            delay = min(delay, config.scrape_seconds)
        if plan.requeue_after is not None:
            delay = min(delay, plan.requeue_after)
        if conflicted:
            delay = min(delay, CONFLICT_RETRY_SECONDS)
        if refused:
            delay = min(delay, backoff(obs.refused_cycles))
        delay = max(delay, MIN_DELAY_SECONDS)
    return Outcome(
        status=status,
        events=events,
        delay=delay,
        result="refused" if refused else "retry" if conflicted else "ok",
        infrastructure_checked=checked,
        refused_cycles=obs.refused_cycles + 1 if refused else 0,
    )

"""The end of a cycle: the status to write, the Events to post and the next delay (pure).

The handler applies `decide`'s plan and reports one `ChildResult` per write; `settle` turns
plan and results into the status written once, the Events to post and the delay until the next
cycle. A child the API server refuses shows at once as `ChildrenApplied=False` with the
server's message, a Warning Event, and on the top line (the phase and `status.message` that
`kubectl get arj` prints):
- refused permanently (`ChildResult.permanent`: 400, 422, a 403 of an admission check), the
  write is not repeated for this spec generation (the handler holds it, `Outcome.blocked`). A
  job that was not running yet is `Failed` (reason `ChildRefused`, the child and the server's
  message), so its other children are torn down; it starts over when its spec changes. A
  running job keeps running, its message naming the refused child;
- failed temporarily (a 5xx, 429, 409 on a patch, a full quota, a timeout), the write is
  retried with backoff (`BACKOFF_SECONDS`) and the message says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from dressage.api.status import AsyncRLJobStatus, ConditionType, JobPhase
from dressage_operator.conditions import Conditions, timestamp
from dressage_operator.config import OperatorConfig
from dressage_operator.plan import (
    REASON_CHILD_REFUSED,
    Applied,
    ChildResult,
    Event,
    Observed,
    Outcome,
    Plan,
)

REASON_DRIFT_CORRECTED = "DriftCorrected"
CONFLICT_RETRY_SECONDS = 1.0
"""Requeue delay after a create conflicted (the pod index lagged, or an old pod terminates)."""
BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Requeue delays after consecutive cycles that failed: a child refused, or the cycle raised."""
MIN_DELAY_SECONDS = 0.05
LISTED_CHILDREN = 3
"""Refused children named one by one in the status and as Events; beyond them a count
(`listed`), so a refusal of a thousand engine pods keeps the status object small."""


def listed(descriptions: Sequence[str], shown: int = LISTED_CHILDREN) -> str:
    """The first `shown` descriptions joined by "; ", then how many more there are."""
    text = "; ".join(descriptions[:shown])
    more = len(descriptions) - shown
    return f"{text}; and {more} more like them" if more > 0 else text


def backoff(failed_cycles: int) -> float:
    """The delay after `failed_cycles` + 1 consecutive failed cycles."""
    return BACKOFF_SECONDS[min(failed_cycles, len(BACKOFF_SECONDS) - 1)]


VERB_OF_EVENT = {"create": "FailedCreate", "patch": "FailedUpdate", "delete": "FailedDelete"}
REASON_NOT_OWNED = "ChildNotOwned"


def _event_reason(result: ChildResult) -> str:
    if result.applied is Applied.NOT_OWNED:
        return REASON_NOT_OWNED
    return VERB_OF_EVENT[result.verb]


def _held(status: AsyncRLJobStatus) -> bool:
    """Whether the job stands Failed because a child was refused permanently."""
    failed = next((c for c in status.conditions if c.type == ConditionType.FAILED.value), None)
    return (
        status.phase is JobPhase.FAILED
        and failed is not None
        and failed.status == "True"
        and failed.reason == REASON_CHILD_REFUSED
    )


def _fail_on_refusal(
    status: AsyncRLJobStatus, conds: Conditions, obs: Observed, refused: list[ChildResult]
) -> Event:
    """A job that had not run yet and cannot be created as its spec says: Failed."""
    first = refused[0]
    more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
    message = f"{first.describe()}{more}; the operator tries again when the spec changes"
    conds.set(ConditionType.FAILED, True, REASON_CHILD_REFUSED, message)
    status.phase = JobPhase.FAILED
    status.message = f"refused by the API server: {message}"
    status.completion_time = timestamp(obs.now)
    return Event("Warning", JobPhase.FAILED.value, status.message)


def settle(
    plan: Plan, obs: Observed, config: OperatorConfig, results: Sequence[ChildResult]
) -> Outcome:
    """The status to write, the Events to post and the next delay, from the plan and what the
    API server answered to each of its writes (see the module docstring).

    `ChildrenApplied` is False while a child is refused, its reason naming the kind
    (`PodRefused`) and its message each refused child, the API server's message and field; a
    Warning Event per refused write is posted when the refusal is new or says something else.
    A temporary failure backs off (`BACKOFF_SECONDS`); a conflict retries soon."""
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
    permanent = [r for r in refused if r.permanent]
    temporary = [r for r in refused if not r.permanent]
    conflicted = any(r.applied is Applied.CONFLICT for r in results)
    held = _held(status)
    if refused:
        message = listed([r.describe() for r in refused])
        previous = conds.get(ConditionType.CHILDREN_APPLIED)
        if previous is None or previous.status != "False" or previous.message != message:
            events += [
                Event("Warning", _event_reason(r), r.describe())
                for r in refused
                if r not in obs.blocked
            ][:LISTED_CHILDREN]
        how = "NotOwned" if refused[0].applied is Applied.NOT_OWNED else "Refused"
        conds.set(ConditionType.CHILDREN_APPLIED, False, f"{refused[0].kind}{how}", message)
    elif not held:
        conds.set(ConditionType.CHILDREN_APPLIED, True, "Applied")
    failing = bool(permanent) and status.phase in (JobPhase.PENDING, JobPhase.RESTARTING)
    if failing:
        events.append(_fail_on_refusal(status, conds, obs, permanent))
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
        # While engines are leaving, the list written keeps them: check again next cycle, so
        # the list is written without them once they are gone.
        done = not failed and not plan.engines_leaving
        checked = (obs.generation, obs.now) if done else (-1, None)

    delay: float | None = None
    if not plan.delete_job:
        delay = config.resync_seconds
        if status.phase is JobPhase.RUNNING:
            delay = min(delay, config.scrape_seconds)
        if plan.requeue_after is not None:
            delay = min(delay, plan.requeue_after)
        if conflicted:
            delay = min(delay, CONFLICT_RETRY_SECONDS)
        if temporary:
            delay = min(delay, backoff(obs.refused_cycles))
        if failing:
            delay = 0.0  # tear the other children down next
        delay = max(delay, MIN_DELAY_SECONDS)
    if not failing:
        status.message = _top_line(status.message, permanent, temporary, delay)
    return Outcome(
        status=status,
        events=events,
        delay=delay,
        result="refused" if refused else "retry" if conflicted else "ok",
        infrastructure_checked=checked,
        refused_cycles=obs.refused_cycles + 1 if temporary else 0,
        blocked=tuple(permanent),
    )


REFUSAL_MARK = "; API server: "
"""Separates the phase's own message from what the API server refused or failed."""


def _top_line(
    message: str,
    permanent: list[ChildResult],
    temporary: list[ChildResult],
    delay: float | None,
) -> str:
    """The phase's message, with what the API server refused this cycle (permanently, for a
    running job; or temporarily) after `REFUSAL_MARK`, so `kubectl get arj` shows it. A
    phase keeps its message over cycles, so an earlier cycle's refusal is taken off first."""
    base = message.split(REFUSAL_MARK)[0]
    parts = []
    if permanent:
        named = listed([r.describe() for r in permanent])
        parts.append(f"{named} (not retried until the spec changes)")
    if temporary:
        named = listed([r.describe() for r in temporary])
        again = f" (retrying in {delay:g}s)" if delay is not None else ""
        parts.append(f"{named}{again}")
    if not parts:
        return base
    return base + REFUSAL_MARK + "; ".join(parts)

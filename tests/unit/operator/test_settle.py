"""Settling a cycle: refusals, conflicts and drift corrections become conditions, Events and
the next delay."""

from __future__ import annotations

from datetime import datetime, timedelta

from dressage_operator.conditions import timestamp
from dressage_operator.decide import decide
from dressage_operator.plan import Applied, ChildResult, Observed
from dressage_operator.settle import BACKOFF_SECONDS, settle

from dressage.api.status import AsyncRLJobStatus, JobPhase

from .support import CONFIG, NOW, OWNER, cluster_job, condition, make_job

REFUSAL = ChildResult(
    kind="Pod",
    name="job-a-trainer-0",
    verb="create",
    applied=Applied.REFUSED,
    code=422,
    message='Pod "job-a-trainer-0" is invalid: spec.containers[0].env[0].name: Invalid value',
    field="spec.containers[0].env[0].name",
)


def test_a_refused_child_is_a_condition_and_an_event_from_the_first_failure() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    created = ChildResult("Pod", "job-a-engine-0", "create", Applied.CREATED)
    out = settle(plan, obs, CONFIG, [created, REFUSAL])
    status, reason, message = condition(out.status, "ChildrenApplied")
    assert (status, reason) == ("False", "PodRefused")
    assert "job-a-trainer-0" in message
    assert "HTTP 422" in message
    assert "spec.containers[0].env[0].name" in message
    assert [(e.type, e.reason) for e in out.events if e.reason == "FailedCreate"] == [
        ("Warning", "FailedCreate")
    ]
    assert "spec.containers[0].env[0].name" in out.events[-1].message
    assert out.status.phase is JobPhase.PENDING  # retried, not failed
    assert (out.result, out.delay, out.refused_cycles) == ("refused", BACKOFF_SECONDS[0], 1)

    # The same refusal again: no second Event, a longer backoff.
    again_obs = Observed(generation=1, status=out.status, now=NOW, refused_cycles=1)
    again = settle(decide(make_job(), OWNER, CONFIG, again_obs), again_obs, CONFIG, [REFUSAL])
    assert not [e for e in again.events if e.reason == "FailedCreate"]
    assert again.delay == BACKOFF_SECONDS[1]
    assert again.status.conditions == out.status.conditions

    # Accepted at last: the condition clears and the backoff resets.
    ok_obs = Observed(generation=1, status=again.status, now=NOW, refused_cycles=2)
    ok = settle(decide(make_job(), OWNER, CONFIG, ok_obs), ok_obs, CONFIG, [created])
    assert condition(ok.status, "ChildrenApplied")[:2] == ("True", "Applied")
    assert (ok.result, ok.refused_cycles) == ("ok", 0)
    assert ok.delay == CONFIG.resync_seconds


def test_a_refusal_backs_off_but_keeps_an_earlier_deadline() -> None:
    start = timestamp(NOW - timedelta(seconds=100))
    status = AsyncRLJobStatus(phase=JobPhase.PENDING, start_time=start)
    obs = Observed(generation=1, status=status, now=NOW, refused_cycles=4)
    plan = decide(make_job(activeDeadlineSeconds=103), OWNER, CONFIG, obs)
    assert settle(plan, obs, CONFIG, [REFUSAL]).delay == 3
    later = Observed(generation=1, status=status, now=NOW, refused_cycles=4)
    plan = decide(make_job(), OWNER, CONFIG, later)
    assert settle(plan, later, CONFIG, [REFUSAL]).delay == BACKOFF_SECONDS[-1]


def test_a_conflict_retries_soon_without_a_condition() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    conflict = ChildResult("Pod", "job-a-trainer-0", "create", Applied.CONFLICT, 409, "exists")
    out = settle(decide(make_job(), OWNER, CONFIG, obs), obs, CONFIG, [conflict])
    assert condition(out.status, "ChildrenApplied")[0] == "True"
    assert (out.result, out.delay) == ("retry", 1.0)


def test_infrastructure_is_checked_on_change_after_failure_and_per_resync() -> None:
    def due(checked: tuple[int, datetime | None], generation: int = 1, seconds: int = 0) -> bool:
        obs = Observed(
            generation=generation,
            status=AsyncRLJobStatus(),
            now=NOW + timedelta(seconds=seconds),
            infrastructure_checked=checked,
        )
        return decide(make_job(), OWNER, CONFIG, obs).ensure_infrastructure

    assert due((-1, None))
    assert not due((1, NOW), seconds=1)
    assert due((1, NOW), generation=2, seconds=1)
    assert due((1, NOW), seconds=int(CONFIG.resync_seconds))

    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    passed = settle(plan, obs, CONFIG, [])
    assert passed.infrastructure_checked == (1, NOW)
    service = ChildResult("Service", "job-a-engine", "create", Applied.REFUSED, 403, "quota")
    failed = settle(plan, obs, CONFIG, [service])
    assert failed.infrastructure_checked == (-1, None)
    assert condition(failed.status, "ChildrenApplied")[1] == "ServiceRefused"


def test_a_child_owned_by_someone_else_blocks_like_a_refusal() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    foreign = ChildResult(
        "ConfigMap", "job-a-config", "create", Applied.NOT_OWNED, message="owned by uid old"
    )
    out = settle(plan, obs, CONFIG, [foreign])
    status, reason, message = condition(out.status, "ChildrenApplied")
    assert (status, reason) == ("False", "ConfigMapNotOwned")
    assert "job-a-config exists and is not this job's: owned by uid old" in message
    assert out.infrastructure_checked == (-1, None)
    assert out.result == "refused"
    assert [e.reason for e in out.events] == ["ChildNotOwned"]


def test_a_corrected_child_posts_a_drift_event_and_still_counts_as_applied() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(cluster_job(), OWNER, CONFIG, obs)
    result = ChildResult(
        "Deployment", "job-a-proxy", "patch", Applied.CORRECTED, message="spec.replicas"
    )
    out = settle(plan, obs, CONFIG, [result])
    (event,) = [e for e in out.events if e.reason == "DriftCorrected"]
    assert event.type == "Warning"
    assert "Deployment job-a-proxy" in event.message
    assert "spec.replicas" in event.message
    applied = next(c for c in out.status.conditions if c.type == "ChildrenApplied")
    assert applied.status == "True"

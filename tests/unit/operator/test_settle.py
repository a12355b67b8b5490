"""Settling a cycle: refusals, conflicts and drift corrections become conditions, Events, the
top line (phase and message) and the next delay; a permanent refusal is held, not retried."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from dressage_operator.conditions import timestamp
from dressage_operator.decide import decide
from dressage_operator.plan import Applied, ChildResult, Observed, permanent_refusal
from dressage_operator.settle import BACKOFF_SECONDS, MIN_DELAY_SECONDS, settle

from dressage.api.status import AsyncRLJobStatus, JobPhase

from .support import CONFIG, NOW, OWNER, cluster_job, condition, make_job, running_pods

REFUSAL = ChildResult(
    kind="Pod",
    name="job-a-trainer-0",
    verb="create",
    applied=Applied.REFUSED,
    code=422,
    message='Pod "job-a-trainer-0" is invalid: spec.containers[0].env[0].name: Invalid value',
    field="spec.containers[0].env[0].name",
)
UNAVAILABLE = ChildResult(
    kind="Pod",
    name="job-a-trainer-0",
    verb="create",
    applied=Applied.REFUSED,
    code=503,
    message="the server is currently unable to handle the request",
)


@pytest.mark.parametrize(
    ("code", "message", "permanent"),
    [
        (422, "is invalid", True),
        (400, "cannot be handled as a Pod", True),
        (403, 'pods "p" is forbidden: violates PodSecurity "restricted:latest"', True),
        (403, "no PriorityClass with name high was found", True),
        (403, 'pods "p" is forbidden: exceeded quota: gpus, requested: ...', False),
        (409, "already exists", False),
        (429, "too many requests", False),
        (500, "Internal error occurred: failed calling webhook", False),
        (503, "unavailable", False),
        (None, "ReadTimeout: timed out", False),
    ],
)
def test_a_refusal_is_permanent_by_what_the_api_server_answered(
    code: int | None, message: str, permanent: bool
) -> None:
    assert permanent_refusal(code, message) is permanent
    result = ChildResult("Pod", "p", "create", Applied.REFUSED, code, message)
    assert result.permanent is permanent
    assert ("create refused" if permanent else "create failed") in result.describe()


def test_a_temporary_failure_is_a_condition_an_event_and_the_top_line_with_backoff() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    created = ChildResult("Pod", "job-a-engine-0", "create", Applied.CREATED)
    out = settle(plan, obs, CONFIG, [created, UNAVAILABLE])
    status, reason, message = condition(out.status, "ChildrenApplied")
    assert (status, reason) == ("False", "PodRefused")
    assert "job-a-trainer-0: create failed (HTTP 503)" in message
    assert [(e.type, e.reason) for e in out.events if e.reason == "FailedCreate"] == [
        ("Warning", "FailedCreate")
    ]
    assert out.status.phase is JobPhase.PENDING  # retried, not failed
    assert out.status.message == (
        "0/2 trainer pods ready; API server: Pod job-a-trainer-0: create failed (HTTP 503): "
        "the server is currently unable to handle the request (retrying in 1s)"
    )
    assert (out.result, out.delay, out.refused_cycles, out.blocked) == (
        "refused",
        BACKOFF_SECONDS[0],
        1,
        (),
    )

    # The same failure again: no second Event, a longer backoff, the top line not repeated.
    again_obs = Observed(generation=1, status=out.status, now=NOW, refused_cycles=1)
    again = settle(decide(make_job(), OWNER, CONFIG, again_obs), again_obs, CONFIG, [UNAVAILABLE])
    assert not [e for e in again.events if e.reason == "FailedCreate"]
    assert again.delay == BACKOFF_SECONDS[1]
    assert again.status.conditions == out.status.conditions
    assert again.status.message.count("API server:") == 1
    assert again.status.message.endswith("(retrying in 2s)")

    # Accepted at last: the condition clears, the backoff resets, the top line is the phase's.
    ok_obs = Observed(generation=1, status=again.status, now=NOW, refused_cycles=2)
    ok = settle(decide(make_job(), OWNER, CONFIG, ok_obs), ok_obs, CONFIG, [created])
    assert condition(ok.status, "ChildrenApplied")[:2] == ("True", "Applied")
    assert (ok.result, ok.refused_cycles) == ("ok", 0)
    assert ok.delay == CONFIG.resync_seconds
    assert ok.status.message == "0/2 trainer pods ready"


def test_a_permanent_refusal_fails_a_job_that_has_not_run_and_is_not_retried() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    created = ChildResult("Pod", "job-a-engine-0", "create", Applied.CREATED)
    out = settle(plan, obs, CONFIG, [created, REFUSAL])
    assert out.status.phase is JobPhase.FAILED
    assert out.status.message.startswith(
        "refused by the API server: Pod job-a-trainer-0: create refused (HTTP 422): "
        'Pod "job-a-trainer-0" is invalid: spec.containers[0].env[0].name'
    )
    assert out.status.message.endswith("the operator tries again when the spec changes")
    assert condition(out.status, "Failed")[:2] == ("True", "ChildRefused")
    assert condition(out.status, "ChildrenApplied")[:2] == ("False", "PodRefused")
    assert condition(out.status, "SpecValid")[0] == "True"
    assert out.status.completion_time == timestamp(NOW)
    assert [(e.type, e.reason) for e in out.events] == [
        ("Warning", "FailedCreate"),
        ("Warning", "Failed"),
    ]
    # Not retried: the refusal is held for this generation, no backoff loop.
    assert (out.blocked, out.refused_cycles, out.delay) == ((REFUSAL,), 0, MIN_DELAY_SECONDS)

    # Next cycle the job stands Failed: its other children go, nothing is created, the
    # refusal stays on the condition although no write repeats it.
    failed_obs = Observed(generation=1, status=out.status, now=NOW, pods=running_pods())
    teardown = decide(make_job(), OWNER, CONFIG, failed_obs)
    assert (teardown.create_pods, teardown.ensure_proxy) == ([], False)
    assert sorted(teardown.delete_pods) == sorted(p.name for p in running_pods())
    deleted = [ChildResult("Pod", n, "delete", Applied.DELETED) for n in teardown.delete_pods]
    after = settle(teardown, failed_obs, CONFIG, deleted)
    assert after.status.phase is JobPhase.FAILED
    assert after.status.message == out.status.message
    assert condition(after.status, "ChildrenApplied") == condition(out.status, "ChildrenApplied")
    assert not after.events

    # A changed spec (a new generation) starts over.
    fixed = Observed(generation=2, status=after.status, now=NOW)
    again = decide(make_job(), OWNER, CONFIG, fixed)
    assert again.status.phase is JobPhase.PENDING
    assert condition(again, "Failed")[:2] == ("False", "SpecCorrected")
    assert len(again.create_pods) == 4


def test_a_permanent_refusal_of_a_running_jobs_child_keeps_it_running_and_says_so() -> None:
    engine = ChildResult(
        "Pod",
        "job-a-engine-1",
        "create",
        Applied.REFUSED,
        403,
        'pods "job-a-engine-1" is forbidden: violates PodSecurity "restricted:latest": ...',
    )
    pods = running_pods()[:3]  # engine 1 is gone and must be recreated
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    obs = Observed(generation=1, status=status, now=NOW, pods=pods, proxy_present=True)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["job-a-engine-1"]
    out = settle(plan, obs, CONFIG, [engine])
    assert out.status.phase is JobPhase.RUNNING
    assert out.status.message == (
        "2/2 trainer pods running; API server: Pod job-a-engine-1: create refused (HTTP 403): "
        'pods "job-a-engine-1" is forbidden: violates PodSecurity "restricted:latest": ... '
        "(not retried until the spec changes)"
    )
    assert out.blocked == (engine,)
    assert out.delay == CONFIG.scrape_seconds  # no backoff loop
    assert [e.reason for e in out.events] == ["FailedCreate"]

    # The handler holds the write and reports the refusal again: no new Event.
    held = Observed(
        generation=1, status=out.status, now=NOW, pods=pods, proxy_present=True, blocked=(engine,)
    )
    again = settle(decide(make_job(), OWNER, CONFIG, held), held, CONFIG, [engine])
    assert not again.events
    assert again.status.message == out.status.message
    assert again.blocked == (engine,)


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


def test_a_thousand_refused_engine_pods_are_summarised_not_listed() -> None:
    """The status names the first few refused children and counts the rest, and posts a few
    Events: a refusal of a 1,024-engine job keeps its status object small."""
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(make_job(), OWNER, CONFIG, obs)
    refused = [
        ChildResult("Pod", f"job-a-engine-{i}", "create", Applied.REFUSED, 503, "unavailable")
        for i in range(1024)
    ]
    out = settle(plan, obs, CONFIG, refused)
    _, _, message = condition(out.status, "ChildrenApplied")
    assert "job-a-engine-2:" in message
    assert "job-a-engine-3:" not in message
    assert "and 1021 more like them" in message
    assert "and 1021 more like them" in out.status.message
    assert len([e for e in out.events if e.reason == "FailedCreate"]) == 3
    assert len(out.status.model_dump_json()) < 4096

"""The reconcile decision as a pure function: lifecycle transitions, gang restarts, engine
replacement, suspend, deadline, TTL; plus reading staleness from Prometheus text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from dressage_operator.children import Owner
from dressage_operator.conditions import timestamp
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import decide, invalid_spec_status
from dressage_operator.metrics import OperatorMetrics, version_span_limit
from dressage_operator.observe import PodInfo, pod_info
from dressage_operator.plan import Applied, ChildResult, Observed, Plan
from dressage_operator.settle import BACKOFF_SECONDS, settle
from dressage_operator.staleness import ScrapeResult, parse_staleness
from dressage_operator.validation import spec_errors
from prometheus_client import generate_latest

from dressage import metrics as names
from dressage.api import AsyncRLJob, load_job, validate_job
from dressage.api.crd import render_crd
from dressage.api.status import AsyncRLJobStatus, JobPhase

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
OWNER = Owner(name="job-a", namespace="ns", uid="u")
CONFIG = OperatorConfig()


def _job(**spec: object) -> AsyncRLJob:
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


def _pod(role: str, index: int, phase: str = "Running", gang: int = 0, **kw: object) -> PodInfo:
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


def _running_pods(gang: int = 0) -> tuple[PodInfo, ...]:
    return (
        _pod("trainer", 0, gang=gang),
        _pod("trainer", 1, gang=gang),
        _pod("inference", 0),
        _pod("inference", 1),
    )


def _decide(job: AsyncRLJob, status: AsyncRLJobStatus | None = None, **obs: object) -> Plan:
    observed = Observed(generation=1, status=status or AsyncRLJobStatus(), now=NOW, **obs)  # type: ignore[arg-type]
    return decide(job, OWNER, CONFIG, observed)


def _cond(plan: Plan | AsyncRLJobStatus, ctype: str) -> tuple[str, str, str]:
    status = plan.status if isinstance(plan, Plan) else plan
    c = next(c for c in status.conditions if c.type == ctype)
    return c.status, c.reason, c.message


def test_new_job_creates_gang_and_engines_and_is_pending() -> None:
    plan = _decide(_job())
    names_ = [p["metadata"]["name"] for p in plan.create_pods]
    assert names_ == ["job-a-trainer-0", "job-a-trainer-1", "job-a-engine-0", "job-a-engine-1"]
    assert plan.ensure_infrastructure
    assert plan.ensure_proxy
    assert plan.status.phase is JobPhase.PENDING
    assert plan.status.start_time == timestamp(NOW)
    assert plan.status.trainer.desired == 2


def test_running_when_the_gang_is_ready_and_nothing_is_recreated() -> None:
    plan = _decide(_job(), pods=_running_pods(), proxy_present=True, proxy_ready=1)
    assert plan.status.phase is JobPhase.RUNNING
    assert plan.create_pods == []
    assert plan.delete_pods == []
    assert (plan.status.trainer.ready, plan.status.inference.ready, plan.status.proxy.ready) == (
        2,
        2,
        1,
    )
    assert _cond(plan, "TrainerReady")[0] == "True"


def test_failed_trainer_restarts_the_whole_gang_and_counts_it() -> None:
    pods = (
        _pod("trainer", 0),
        _pod("trainer", 1, "Failed", reason="trainer: OOMKilled"),
        _pod("inference", 0),
        _pod("inference", 1),
    )
    plan = _decide(_job(), pods=pods)
    # The restart is counted first; no pod goes before the count is written.
    assert plan.delete_pods == []
    assert plan.requeue_after == 0
    assert plan.status.restarts == 1
    assert plan.status.trainer.failed == 1
    assert plan.status.phase is JobPhase.RESTARTING
    assert "OOMKilled" in plan.status.message
    assert "1/3" in plan.status.message
    # Next cycle, with the count written: the old gang goes, counted once.
    deleting = _decide(_job(), status=plan.status, pods=pods)
    assert sorted(deleting.delete_pods) == ["job-a-trainer-0", "job-a-trainer-1"]
    assert (deleting.status.restarts, deleting.status.trainer.failed) == (1, 1)
    assert deleting.status.phase is JobPhase.RESTARTING
    # Old gang still visible (terminating) -> wait, then new gang with gang=1.
    old = tuple(
        p if p.role != "trainer" else _pod("trainer", p.index, terminating=True) for p in pods
    )
    waiting = _decide(_job(), status=plan.status, pods=old)
    assert waiting.create_pods == []
    assert waiting.status.restarts == 1
    assert waiting.requeue_after is not None
    fresh = _decide(_job(), status=plan.status, pods=pods[2:])
    created = [p for p in fresh.create_pods if "trainer" in p["metadata"]["name"]]
    assert [p["metadata"]["labels"]["dressage.io/gang"] for p in created] == ["1", "1"]
    assert fresh.status.restarts == 1


def test_gang_restarts_are_bounded_by_max_restarts() -> None:
    status = AsyncRLJobStatus(restarts=1, phase=JobPhase.RUNNING)
    pods = (
        _pod("trainer", 0, "Failed", gang=1),
        _pod("trainer", 1, gang=1),
        _pod("inference", 0),
        _pod("inference", 1),
    )
    plan = _decide(
        _job(failurePolicy={"maxRestarts": 1}), status=status, pods=pods, proxy_present=True
    )
    assert plan.status.phase is JobPhase.FAILED
    assert _cond(plan, "Failed")[1] == "MaxRestartsExceeded"
    assert "job-a-trainer-1" in plan.delete_pods
    assert "job-a-trainer-0" not in plan.delete_pods
    assert {"job-a-engine-0", "job-a-engine-1"} <= set(plan.delete_pods)
    assert plan.delete_proxy


def test_failed_engine_is_replaced_alone_and_counted_once() -> None:
    pods = (*_running_pods()[:3], _pod("inference", 1, "Failed"))
    plan = _decide(_job(), pods=pods)
    assert plan.delete_pods == ["job-a-engine-1"]
    assert plan.create_pods == []
    assert plan.status.inference.failed == 1
    assert plan.status.restarts == 0
    assert plan.status.phase is JobPhase.RUNNING
    again = _decide(_job(), status=plan.status, pods=pods, handled_failures=plan.handled_failures)
    assert again.status.inference.failed == 1
    gone = _decide(_job(), status=plan.status, pods=pods[:3])
    assert [p["metadata"]["name"] for p in gone.create_pods] == ["job-a-engine-1"]


def test_success_tears_down_serving_and_ttl_deletes_later() -> None:
    pods = (_pod("trainer", 0, "Succeeded"), _pod("trainer", 1, "Succeeded"), *_running_pods()[2:])
    job = _job(ttlSecondsAfterFinished=60)
    plan = _decide(job, pods=pods, proxy_present=True)
    assert plan.status.phase is JobPhase.SUCCEEDED
    assert plan.status.completion_time == timestamp(NOW)
    assert set(plan.delete_pods) == {"job-a-engine-0", "job-a-engine-1"}
    assert plan.delete_proxy
    assert plan.requeue_after == 60
    assert not plan.delete_job
    later = decide(
        job,
        OWNER,
        CONFIG,
        Observed(generation=1, status=plan.status, now=NOW + timedelta(seconds=61)),
    )
    assert later.delete_job


def test_suspend_deletes_pods_and_resume_recreates() -> None:
    plan = _decide(_job(suspend=True), pods=_running_pods(), proxy_present=True)
    assert plan.status.phase is JobPhase.SUSPENDED
    assert len(plan.delete_pods) == 4
    assert plan.delete_proxy
    assert _cond(plan, "Suspended")[0] == "True"
    resumed = _decide(_job(), status=plan.status)
    assert resumed.status.phase is JobPhase.PENDING
    assert len(resumed.create_pods) == 4
    assert _cond(resumed, "Suspended")[:2] == ("False", "JobResumed")


def test_active_deadline_fails_the_job() -> None:
    start = timestamp(NOW - timedelta(seconds=100))
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING, start_time=start)
    plan = _decide(_job(activeDeadlineSeconds=50), status=status, pods=_running_pods())
    assert plan.status.phase is JobPhase.FAILED
    assert _cond(plan, "Failed")[1] == "DeadlineExceeded"
    assert len(plan.delete_pods) == 4


def test_invalid_spec_status_names_the_field_and_recovers() -> None:
    status = invalid_spec_status(
        AsyncRLJobStatus(), [("spec.staleness.keepVersions", "must be >= 0")], 3, NOW
    )
    assert status.phase is JobPhase.FAILED
    assert status.observed_generation == 3
    spec_valid = next(c for c in status.conditions if c.type == "SpecValid")
    assert (spec_valid.status, spec_valid.reason) == ("False", "InvalidSpec")
    assert "spec.staleness.keepVersions" in spec_valid.message
    fixed = _decide(_job(), status=status)
    assert fixed.status.phase is JobPhase.PENDING
    assert fixed.create_pods


def test_condition_transition_time_is_kept_when_unchanged() -> None:
    first = _decide(_job(), pods=_running_pods())
    later = decide(
        _job(),
        OWNER,
        CONFIG,
        Observed(
            generation=1, status=first.status, now=NOW + timedelta(minutes=5), pods=_running_pods()
        ),
    )
    assert later.status.conditions == first.status.conditions


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
    plan = decide(_job(), OWNER, CONFIG, obs)
    created = ChildResult("Pod", "job-a-engine-0", "create", Applied.CREATED)
    out = settle(plan, obs, CONFIG, [created, REFUSAL])
    status, reason, message = _cond(out.status, "ChildrenApplied")
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
    again = settle(decide(_job(), OWNER, CONFIG, again_obs), again_obs, CONFIG, [REFUSAL])
    assert not [e for e in again.events if e.reason == "FailedCreate"]
    assert again.delay == BACKOFF_SECONDS[1]
    assert again.status.conditions == out.status.conditions

    # Accepted at last: the condition clears and the backoff resets.
    ok_obs = Observed(generation=1, status=again.status, now=NOW, refused_cycles=2)
    ok = settle(decide(_job(), OWNER, CONFIG, ok_obs), ok_obs, CONFIG, [created])
    assert _cond(ok.status, "ChildrenApplied")[:2] == ("True", "Applied")
    assert (ok.result, ok.refused_cycles) == ("ok", 0)
    assert ok.delay == CONFIG.resync_seconds


def test_a_refusal_backs_off_but_keeps_an_earlier_deadline() -> None:
    start = timestamp(NOW - timedelta(seconds=100))
    status = AsyncRLJobStatus(phase=JobPhase.PENDING, start_time=start)
    obs = Observed(generation=1, status=status, now=NOW, refused_cycles=4)
    plan = decide(_job(activeDeadlineSeconds=103), OWNER, CONFIG, obs)
    assert settle(plan, obs, CONFIG, [REFUSAL]).delay == 3
    later = Observed(generation=1, status=status, now=NOW, refused_cycles=4)
    plan = decide(_job(), OWNER, CONFIG, later)
    assert settle(plan, later, CONFIG, [REFUSAL]).delay == BACKOFF_SECONDS[-1]


def test_a_conflict_retries_soon_without_a_condition() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    conflict = ChildResult("Pod", "job-a-trainer-0", "create", Applied.CONFLICT, 409, "exists")
    out = settle(decide(_job(), OWNER, CONFIG, obs), obs, CONFIG, [conflict])
    assert _cond(out.status, "ChildrenApplied")[0] == "True"
    assert (out.result, out.delay) == ("retry", 1.0)


def test_infrastructure_is_checked_on_change_after_failure_and_per_resync() -> None:
    def due(checked: tuple[int, datetime | None], generation: int = 1, seconds: int = 0) -> bool:
        obs = Observed(
            generation=generation,
            status=AsyncRLJobStatus(),
            now=NOW + timedelta(seconds=seconds),
            infrastructure_checked=checked,
        )
        return decide(_job(), OWNER, CONFIG, obs).ensure_infrastructure

    assert due((-1, None))
    assert not due((1, NOW), seconds=1)
    assert due((1, NOW), generation=2, seconds=1)
    assert due((1, NOW), seconds=int(CONFIG.resync_seconds))

    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(_job(), OWNER, CONFIG, obs)
    passed = settle(plan, obs, CONFIG, [])
    assert passed.infrastructure_checked == (1, NOW)
    service = ChildResult("Service", "job-a-engine", "create", Applied.REFUSED, 403, "quota")
    failed = settle(plan, obs, CONFIG, [service])
    assert failed.infrastructure_checked == (-1, None)
    assert _cond(failed.status, "ChildrenApplied")[1] == "ServiceRefused"


def test_an_invalid_spec_plans_no_writes_and_waits_for_the_resync() -> None:
    errors = (("spec.trainer.nodes", "must be >= 1"),)
    obs = Observed(generation=2, status=AsyncRLJobStatus(), now=NOW, spec_errors=errors)
    plan = decide(None, OWNER, CONFIG, obs)
    assert plan.invalid
    assert (plan.create_pods, plan.ensure_infrastructure, plan.ensure_proxy) == ([], False, False)
    out = settle(plan, obs, CONFIG, [])
    assert (out.result, out.delay) == ("invalid", CONFIG.resync_seconds)
    assert out.status.phase is JobPhase.FAILED
    assert "spec.trainer.nodes: must be >= 1" in _cond(out.status, "SpecValid")[2]
    # A valid job with a cluster-only error (from `spec_errors`) is refused the same way.
    assert decide(_job(), OWNER, CONFIG, obs).invalid


def _body(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "model": {"source": "Qwen/Qwen2.5-1.5B-Instruct"},
        "storage": {"persistentVolumeClaim": "shared"},
    }
    base.update(spec)
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": base,
    }


def test_a_hub_id_tokenizer_is_refused_because_the_proxy_needs_a_local_one() -> None:
    body = _body(model={"source": "Qwen/Qwen2.5-1.5B-Instruct", "tokenizer": "Qwen/Other"})
    job, errors = spec_errors(body, "ns/job-a")
    assert job is not None
    assert [f for f, _ in errors] == ["spec.model.tokenizer"]
    assert "Qwen/Other" in errors[0][1]


RUNTIME_METRICS = f"""
# TYPE {names.STALENESS_VERSION_SPAN_MEAN} gauge
{names.STALENESS_VERSION_SPAN_MEAN} 1.5
# TYPE {names.STALENESS_VERSION_SPAN_MAX} gauge
{names.STALENESS_VERSION_SPAN_MAX} 3
# TYPE {names.STALENESS_VERSION_SPAN_MIN} gauge
{names.STALENESS_VERSION_SPAN_MIN} 1
# TYPE dressage_dropped_groups counter
{names.DROPPED_GROUPS}{{reason="stale_version"}} 4
{names.DROPPED_GROUPS}{{reason="retries_exhausted"}} 1
# TYPE dressage_staleness_failures counter
{names.STALENESS_FAILURES} 2
# TYPE {names.TRAIN_STEP} gauge
{names.TRAIN_STEP} 17
# TYPE {names.WEIGHT_VERSION} gauge
{names.WEIGHT_VERSION} 17
# TYPE {names.WEIGHT_VERSION_INFO} gauge
{names.WEIGHT_VERSION_INFO}{{version="v17"}} 1
"""


def test_parse_staleness_and_export_per_job() -> None:
    s = parse_staleness(RUNTIME_METRICS, "t")
    assert (s.version_span_mean, s.version_span_max, s.version_span_min) == (1.5, 3.0, 1.0)
    assert s.dropped_groups == 5
    assert s.dropped_groups_by_reason["stale_version"] == 4
    assert (s.staleness_failures, s.step, s.weight_version) == (2, 17, "v17")
    plan = _decide(
        _job(),
        status=AsyncRLJobStatus(phase=JobPhase.RUNNING),
        pods=_running_pods(),
        scrape=ScrapeResult(url="http://x/metrics", staleness=s),
    )
    assert plan.status.staleness == s
    assert _cond(plan, "MetricsAvailable")[0] == "True"
    metrics = OperatorMetrics()
    metrics.jobs.update("ns", "job-a", plan.status)
    text = generate_latest(metrics.registry).decode()
    assert f'{names.JOB_STALENESS_VERSION_SPAN_MAX}{{job="job-a",namespace="ns"}} 3.0' in text
    assert (
        f'{names.JOB_DROPPED_GROUPS}{{job="job-a",namespace="ns",reason="stale_version"}} 4.0'
        in text
    )
    assert f'{names.JOB_STALENESS_FAILURES}{{job="job-a",namespace="ns"}} 2.0' in text
    metrics.jobs.remove("ns", "job-a")
    assert "job-a" not in generate_latest(metrics.registry).decode()


def test_version_span_limit_is_exported_per_job_only_when_set() -> None:
    """`dressage_job_staleness_max_version_span` (the chart's version-span alert compares the
    max span with it) is maxPartialRolloutPreempts + 1, and absent for a job without a limit."""
    limited = load_job(EXAMPLES / "multi-node-partial-rollout.yaml")
    preempts = limited.spec.staleness.max_partial_rollout_preempts
    assert preempts is not None
    unlimited = limited.model_copy(deep=True)
    unlimited.spec.staleness.max_partial_rollout_preempts = None
    metrics = OperatorMetrics()
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    metrics.jobs.update("ns", "job-a", status, version_span_limit(limited.spec))
    metrics.jobs.update("ns", "job-b", status, version_span_limit(unlimited.spec))
    text = generate_latest(metrics.registry).decode()
    limit = names.JOB_MAX_VERSION_SPAN_LIMIT
    assert f'{limit}{{job="job-a",namespace="ns"}} {preempts + 1:.1f}' in text
    assert f'{limit}{{job="job-b"' not in text
    assert version_span_limit(unlimited.spec) is None


def test_failed_scrape_keeps_figures_and_says_why() -> None:
    status = AsyncRLJobStatus(phase=JobPhase.RUNNING)
    status.staleness.step = 3
    plan = _decide(
        _job(),
        status=status,
        pods=_running_pods(),
        scrape=ScrapeResult(url="http://x/metrics", error="ConnectError: refused"),
    )
    assert plan.status.staleness.step == 3
    assert _cond(plan, "MetricsAvailable")[:2] == ("False", "ScrapeFailed")


def test_pod_info_reads_phase_readiness_and_failure_reason() -> None:
    body = {
        "metadata": {
            "name": "job-a-trainer-1",
            "uid": "x",
            "labels": {
                "dressage.io/job": "job-a",
                "dressage.io/role": "trainer",
                "dressage.io/index": "1",
                "dressage.io/gang": "2",
            },
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        },
    }
    info = pod_info(body)
    assert info is not None
    assert (info.index, info.gang, info.failed) == (1, 2, True)
    assert info.reason == "trainer: OOMKilled (exit code 137)"
    assert pod_info({"metadata": {"labels": {}}}) is None


def test_a_job_without_shared_storage_is_refused_naming_the_claim() -> None:
    job, errors = spec_errors(_body(storage={"mountPath": "/data"}), "ns/job-a")
    assert job is not None
    assert [f for f, _ in errors] == ["spec.storage.persistentVolumeClaim"]
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW, spec_errors=errors)
    out = settle(decide(job, OWNER, CONFIG, obs), obs, CONFIG, [])
    status, reason, message = _cond(out.status, "SpecValid")
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith("spec.storage.persistentVolumeClaim: required on a cluster")
    assert spec_errors(_body(), "ns/job-a")[1] == ()


@pytest.mark.parametrize(
    ("nodes", "refused"), [(1, False), (2, True)], ids=["one-node", "two-nodes"]
)
def test_distributed_sync_needs_shared_storage_only_for_a_trainer_of_several_nodes(
    nodes: int, refused: bool
) -> None:
    """The weights go over the network; the storage then holds only the staged model and the
    checkpoints, which a one-node trainer keeps on its own pod."""
    body = _body(
        storage={"mountPath": "/data"},
        inference={"weightSync": "distributed"},
        trainer={"nodes": nodes, "gpusPerNode": 1},
    )
    job, errors = spec_errors(body, "ns/job-a")
    assert job is not None
    assert [f for f, _ in errors] == (["spec.storage.persistentVolumeClaim"] if refused else [])
    if refused:
        assert "spec.trainer.nodes" in errors[0][1]
        assert "model cache and the checkpoint directory" in errors[0][1]


def test_disk_sync_without_storage_names_the_distributed_alternative() -> None:
    _, errors = spec_errors(_body(storage={"mountPath": "/data"}), "ns/job-a")
    ((field, message),) = errors
    assert field == "spec.storage.persistentVolumeClaim"
    assert "spec.inference.weightSync 'disk'" in message
    assert "'distributed'" in message


def test_more_than_one_proxy_is_refused_because_sessions_live_in_one_replica() -> None:
    job, errors = spec_errors(_body(proxy={"replicas": 2}), "ns/job-a")
    assert job is None
    (field, message), *_ = errors
    assert field == "spec.proxy.replicas"
    assert "a session lives in one proxy's memory" in message
    crd = yaml.safe_load(render_crd())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    proxy = schema["properties"]["proxy"]
    assert proxy["properties"]["replicas"]["maximum"] == 1
    (rule,) = [r for r in proxy["x-kubernetes-validations"] if r["fieldPath"] == ".replicas"]
    assert "one proxy's memory" in rule["message"]


def test_a_lost_trainer_pod_restarts_the_gang_and_is_counted_like_a_failed_one() -> None:
    # The gang was seen created and running...
    seen = _decide(_job(), pods=_running_pods())
    assert seen.status.gang_pods == ["job-a-trainer-0", "job-a-trainer-1"]
    # ...then trainer 1 vanished without failing (force-deleted, node lost).
    pods = (_pod("trainer", 0), _pod("inference", 0), _pod("inference", 1))
    plan = _decide(_job(), status=seen.status, pods=pods)
    assert plan.create_pods == []  # not silently recreated into a half-old gang
    assert (plan.status.restarts, plan.status.trainer.failed) == (1, 1)
    assert plan.status.phase is JobPhase.RESTARTING
    assert "job-a-trainer-1 was lost" in plan.status.message
    assert [e.reason for e in plan.events] == ["TrainerPodLost", "Restarting"]
    assert plan.status.gang_pods == []
    # Next cycle: the old gang's survivor goes; the new gang is not counted as lost.
    nxt = _decide(_job(), status=plan.status, pods=pods)
    assert nxt.delete_pods == ["job-a-trainer-0"]
    assert nxt.status.restarts == 1
    # A pod being deleted by someone else, not failed, is lost as well.
    terminating = (_pod("trainer", 0), _pod("trainer", 1, terminating=True))
    again = _decide(_job(), status=seen.status, pods=terminating)
    assert again.status.restarts == 1


def test_pods_not_yet_created_or_deleted_by_suspend_are_not_lost() -> None:
    fresh = _decide(_job(), pods=(_pod("trainer", 0),))
    assert fresh.status.restarts == 0
    assert fresh.status.gang_pods == ["job-a-trainer-0"]
    seen = _decide(_job(), pods=_running_pods())
    suspended = _decide(_job(suspend=True), status=seen.status, pods=_running_pods())
    assert suspended.status.gang_pods == []
    resumed = _decide(_job(), status=suspended.status, pods=())
    assert resumed.status.restarts == 0
    assert len(resumed.create_pods) == 4


def test_pods_of_an_earlier_job_with_the_same_name_are_never_adopted() -> None:
    """A job deleted and recreated under the same name: the old job's pods (another uid in
    their owner reference) carry the same labels and names until the garbage collector
    deletes them. They are not counted (old Succeeded trainers do not finish the new job) and
    their names are not created over; the job waits."""
    old = tuple(
        _pod(role, i, phase, owner_uid="old-uid")
        for role, i, phase in (
            ("trainer", 0, "Succeeded"),
            ("trainer", 1, "Succeeded"),
            ("inference", 0, "Running"),
        )
    )
    plan = _decide(_job(), pods=old)
    assert plan.status.phase is JobPhase.PENDING
    assert "earlier job of this name" in plan.status.message
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["job-a-engine-1"]
    assert plan.delete_pods == []
    assert plan.requeue_after is not None
    assert plan.requeue_after <= 2
    assert (plan.status.trainer.ready, plan.status.inference.ready) == (0, 0)
    # Once they are gone the job creates its own.
    assert len(_decide(_job(), status=plan.status, pods=()).create_pods) == 4
    info = pod_info(
        {
            "metadata": {
                "name": "job-a-trainer-0",
                "labels": {"dressage.io/job": "job-a", "dressage.io/role": "trainer"},
                "ownerReferences": [{"uid": "old-uid", "controller": True}],
            }
        }
    )
    assert info is not None
    assert info.owner_uid == "old-uid"


def test_a_child_owned_by_someone_else_blocks_like_a_refusal() -> None:
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW)
    plan = decide(_job(), OWNER, CONFIG, obs)
    foreign = ChildResult(
        "ConfigMap", "job-a-config", "create", Applied.NOT_OWNED, message="owned by uid old"
    )
    out = settle(plan, obs, CONFIG, [foreign])
    status, reason, message = _cond(out.status, "ChildrenApplied")
    assert (status, reason) == ("False", "ConfigMapNotOwned")
    assert "job-a-config exists and is not this job's: owned by uid old" in message
    assert out.infrastructure_checked == (-1, None)
    assert out.result == "refused"
    assert [e.reason for e in out.events] == ["ChildNotOwned"]

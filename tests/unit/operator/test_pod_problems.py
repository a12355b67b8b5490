"""The first failure named at the top line, as a pure decision: what keeps a pod from starting
or running reaches the job's phase and message (what `kubectl get arj` prints), condition
`PodsHealthy` naming the pod and a Warning Event posted once per transition, and all of it
clears when the pod recovers (`dressage_operator.pod_problems`)."""

from __future__ import annotations

import pytest
from dressage_operator.observe import PodInfo, PodProblem
from dressage_operator.plan import Event, Plan
from dressage_operator.pod_problems import PROBLEMS_MARK

from dressage.api.status import AsyncRLJobStatus, JobPhase

from .support import condition, decide_for, make_job, make_pod, running_pods

GPUS = PodProblem(
    "Unschedulable",
    "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
    "available: 1 No preemption victims found for incoming pod.",
)
PULL = PodProblem("ErrImagePull", 'container engine image "img:1": not found')
BACKOFF = PodProblem("ImagePullBackOff", 'container engine image "img:1": Back-off pulling image')
SECRET = PodProblem("CreateContainerConfigError", 'container trainer: secret "tok" not found')
CRASH = PodProblem("CrashLoopBackOff", "container engine exited with code 1 (Error); restarted 2")
OOM = PodProblem("OOMKilled", "container engine exited with code 137 (OOMKilled)")


def _pending(problem: PodProblem | None, role: str = "trainer", index: int = 0) -> PodInfo:
    return make_pod(role, index, "Pending", ready=False, problem=problem)


def _cycles(*observed: tuple[PodInfo, ...]) -> list[Plan]:
    """`decide` over consecutive cycles, each reading the status the previous one wrote."""
    status, plans = AsyncRLJobStatus(), []
    for pods in observed:
        plan = decide_for(make_job(), status, pods=pods, proxy_present=True)
        plans.append(plan)
        status = plan.status
    return plans


def _warnings(plan: Plan) -> list[Event]:
    return [e for e in plan.events if e.type == "Warning"]


PENDING = [
    # (the trainer pod's problem, the top line's end after the mark)
    pytest.param(GPUS, f"job-a-trainer-0 Unschedulable: {GPUS.message}", id="Unschedulable"),
    pytest.param(PULL, f"job-a-trainer-0 ErrImagePull: {PULL.message}", id="ErrImagePull"),
    pytest.param(SECRET, f"job-a-trainer-0 {SECRET.reason}: {SECRET.message}", id="config"),
    pytest.param(OOM, f"job-a-trainer-0 OOMKilled: {OOM.message}", id="OOMKilled"),
]


@pytest.mark.parametrize(("problem", "named"), PENDING)
def test_a_pending_pods_problem_is_named_on_the_top_line_in_a_condition_and_an_event(
    problem: PodProblem, named: str
) -> None:
    """The job stays Pending (each of these heals once its cause is fixed) and says why."""
    pods = (_pending(problem), make_pod("trainer", 1), *running_pods()[2:])
    (plan,) = _cycles(pods)
    assert plan.status.phase is JobPhase.PENDING
    assert plan.status.message == f"1/2 trainer pods ready{PROBLEMS_MARK}{named}"
    assert condition(plan, "PodsHealthy") == ("False", problem.reason, named)
    assert _warnings(plan) == [Event("Warning", problem.reason, f"pod {named}")]


def test_a_running_job_stays_running_and_names_its_crash_looping_engine() -> None:
    pods = (*running_pods()[:3], make_pod("inference", 1, ready=False, problem=CRASH))
    (plan,) = _cycles(pods)
    assert plan.status.phase is JobPhase.RUNNING
    named = f"job-a-engine-1 CrashLoopBackOff: {CRASH.message}"
    assert plan.status.message == f"2/2 trainer pods running{PROBLEMS_MARK}{named}"
    assert condition(plan, "PodsHealthy") == ("False", "CrashLoopBackOff", named)


def test_an_event_is_posted_once_per_problem_not_per_cycle_and_the_recovery_clears_all() -> None:
    """A pull's retries (ErrImagePull, ImagePullBackOff, ErrImagePull) are one problem; a new
    problem of the same pod is a new Event; recovery posts a Normal Event and clears the top
    line and the condition."""
    engine = running_pods()[3]
    rest = running_pods()[:3]
    plans = _cycles(
        (*rest, _pending(PULL, "inference", 1)),
        (*rest, _pending(BACKOFF, "inference", 1)),
        (*rest, _pending(PULL, "inference", 1)),
        (*rest, _pending(CRASH, "inference", 1)),
        (*rest, _pending(CRASH, "inference", 1)),
        (*rest, engine),
        (*rest, engine),
    )
    warned = [[e.reason for e in _warnings(p)] for p in plans]
    assert warned == [["ErrImagePull"], [], [], ["CrashLoopBackOff"], [], [], []]
    recovered = [e for e in plans[5].events if e.reason == "PodRecovered"]
    assert recovered == [
        Event("Normal", "PodRecovered", "pod job-a-engine-1 recovered from CrashLoopBackOff")
    ]
    assert condition(plans[1], "PodsHealthy")[1] == "ImagePullBackOff"
    for plan in plans[5:]:
        assert PROBLEMS_MARK not in plan.status.message
        assert condition(plan, "PodsHealthy") == ("True", "NoPodProblems", "")


def test_the_trainers_come_first_and_the_top_line_stays_one_short_line() -> None:
    """Two pods are named on the top line; the condition names every one."""
    pods = (
        _pending(PULL, "inference", 0),
        _pending(PULL, "inference", 1),
        _pending(GPUS, "trainer", 1),
        _pending(SECRET, "trainer", 0),
    )
    (plan,) = _cycles(pods)
    first, second = f"job-a-trainer-0 {SECRET.reason}: ", f"job-a-trainer-1 {GPUS.reason}: "
    top = plan.status.message.split(PROBLEMS_MARK)[1]
    assert top.startswith(first)
    assert f"; {second}" in top
    assert top.endswith("; 2 more in condition PodsHealthy")
    status, reason, message = condition(plan, "PodsHealthy")
    assert (status, reason) == ("False", SECRET.reason)
    assert message.count("job-a-engine-") == 2
    assert len(_warnings(plan)) == 4


def test_a_restarting_job_keeps_its_restart_message_and_names_the_problem_once() -> None:
    """A gang restart's message stays over cycles; the pods' problems are replaced, not
    appended again."""
    failed = (make_pod("trainer", 0, "Failed"), *running_pods()[1:])
    restarted = make_pod("trainer", 0, "Pending", gang=1, ready=False, problem=GPUS)
    plans = _cycles(failed, (restarted,), (restarted,))
    message = plans[-1].status.message
    assert plans[-1].status.phase is JobPhase.RESTARTING
    assert message.startswith("trainer pod job-a-trainer-0 failed")
    assert message.count(PROBLEMS_MARK) == 1


def test_a_finished_or_suspended_job_names_no_pod() -> None:
    pods = (_pending(GPUS), *running_pods()[1:])
    plan = decide_for(make_job(suspend=True), pods=pods, proxy_present=True)
    assert plan.status.phase is JobPhase.SUSPENDED
    assert condition(plan, "PodsHealthy") == ("True", "NotActive", "")
    assert PROBLEMS_MARK not in plan.status.message

"""What the operator reads from a pod's body: phase, readiness, why it failed, and what keeps
it from starting or running."""

from __future__ import annotations

import pytest
from dressage_operator.observe import pod_info, pod_problem


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


def test_who_terminates_a_pod_is_read_from_its_disruption_conditions() -> None:
    """Kubernetes' `DisruptionTarget` (preemption by the scheduler, an eviction) and Kueue's
    `TerminationTarget` (Kueue stopping the pod's Workload) say why a pod goes."""
    labels = {"dressage.io/job": "job-a", "dressage.io/role": "trainer"}

    def info(*conditions: dict[str, str]) -> str:
        body = {
            "metadata": {"name": "job-a-trainer-0", "labels": labels},
            "status": {"phase": "Running", "conditions": list(conditions)},
        }
        found = pod_info(body)
        assert found is not None
        return found.disruption

    assert info({"type": "Ready", "status": "True"}) == ""
    kueue = {"type": "TerminationTarget", "status": "True", "reason": "Preempted"}
    assert info(kueue) == "TerminationTarget: Preempted"
    evicted = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    assert info(evicted) == "DisruptionTarget: EvictionByEvictionAPI"
    assert info({**evicted, "status": "False"}) == ""


UID = "0d1f8c7e-6d7a-4a39-9d43-2f1b6c0e5a11"
_SCHEDULER_GPU = (
    "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/1 nodes are "
    "available: 1 No preemption victims found for incoming pod."
)
_SCHEDULER_CLAIM = (
    '0/1 nodes are available: persistentvolumeclaim "shared" not found. preemption: 0/1 '
    "nodes are available: 1 Preemption is not helpful for scheduling."
)
_CRASH_LOOP = f"back-off 20s restarting failed container=engine pod=job-a-engine-0_ns({UID})"


def _scheduled(message: str) -> dict[str, object]:
    """The pod status the scheduler writes for a pod it cannot place (schedule_one.go)."""
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    return {"phase": "Pending", "conditions": [{**condition, "message": message}]}


def _container(**status: object) -> dict[str, object]:
    """A pod with one container `engine` of image `img:1` in `status`."""
    base = {"name": "engine", "image": "img:1", "ready": False, "restartCount": 0}
    return {"phase": "Pending", "containerStatuses": [{**base, **status}]}


def _waiting(reason: str, message: str) -> dict[str, object]:
    return {"waiting": {"reason": reason, "message": message}}


def _terminated(code: int, reason: str, message: str = "") -> dict[str, object]:
    return {"terminated": {"exitCode": code, "reason": reason, "message": message}}


# The statuses as kubernetes/kubernetes v1.33 writes them: the scheduler's FitError
# (pkg/scheduler/framework/types.go), the kubelet's waiting reasons and messages
# (pkg/kubelet/images/image_manager.go, kuberuntime_container.go, kuberuntime_manager.go
# doBackOff) and the runtime's OOMKilled termination (exit code 137).
PROBLEMS = [
    ("unschedulable for GPUs", _scheduled(_SCHEDULER_GPU), "Unschedulable", _SCHEDULER_GPU),
    ("a claim not found", _scheduled(_SCHEDULER_CLAIM), "Unschedulable", _SCHEDULER_CLAIM),
    (
        "a pull that failed",
        _container(state=_waiting("ErrImagePull", 'rpc error: code = NotFound desc = "img:1"')),
        "ErrImagePull",
        'container engine image "img:1": rpc error: code = NotFound desc = "img:1"',
    ),
    (
        "a pull backing off",
        _container(state=_waiting("ImagePullBackOff", 'Back-off pulling image "img:1"')),
        "ImagePullBackOff",
        'container engine image "img:1": Back-off pulling image "img:1"',
    ),
    (
        "a missing Secret",
        _container(state=_waiting("CreateContainerConfigError", 'secret "token" not found')),
        "CreateContainerConfigError",
        'container engine: secret "token" not found',
    ),
    (
        "a missing key",
        _container(
            state=_waiting(
                "CreateContainerConfigError", "couldn't find key token in Secret ns/proxy-token"
            )
        ),
        "CreateContainerConfigError",
        "container engine: couldn't find key token in Secret ns/proxy-token",
    ),
    (
        "a crash loop",
        _container(
            state=_waiting("CrashLoopBackOff", _CRASH_LOOP),
            lastState=_terminated(1, "Error", "Traceback ...\nFileNotFoundError: /models/x\n"),
            restartCount=2,
        ),
        "CrashLoopBackOff",
        "container engine exited with code 1 (Error): FileNotFoundError: /models/x; "
        f"restarted 2 times; {_CRASH_LOOP}",
    ),
    (
        "a crash loop between two back-offs",
        _container(
            state={"running": {}}, lastState=_terminated(1, "Error"), restartCount=3, ready=False
        ),
        "CrashLoopBackOff",
        "container engine exited with code 1 (Error); restarted 3 times",
    ),
    (
        "an OOM kill, restarted",
        _container(state={"running": {}}, lastState=_terminated(137, "OOMKilled"), restartCount=1),
        "OOMKilled",
        "container engine exited with code 137 (OOMKilled); restarted 1 times",
    ),
    (
        "an OOM kill in a Never pod",
        {**_container(state=_terminated(137, "OOMKilled")), "phase": "Failed"},
        "OOMKilled",
        "container engine exited with code 137 (OOMKilled)",
    ),
]


@pytest.mark.parametrize(
    ("status", "reason", "message"), [p[1:] for p in PROBLEMS], ids=[p[0] for p in PROBLEMS]
)
def test_what_keeps_a_pod_from_running_is_read_as_kubernetes_writes_it(
    status: dict[str, object], reason: str, message: str
) -> None:
    problem = pod_problem(status)
    assert problem is not None
    assert (problem.reason, problem.message) == (reason, message)


HEALTHY = [
    ("pending, not yet scheduled", {"phase": "Pending"}),
    ("creating its container", _container(state=_waiting("ContainerCreating", ""))),
    ("running", _container(state={"running": {}}, ready=True)),
    (
        "running again after one failure (the kubelet restarts it at once)",
        _container(state={"running": {}}, lastState=_terminated(1, "Error"), restartCount=1),
    ),
    (
        "ready again after crash loops",
        _container(
            state={"running": {}}, lastState=_terminated(1, "Error"), restartCount=5, ready=True
        ),
    ),
    ("scheduled", {"conditions": [{"type": "PodScheduled", "status": "True"}]}),
]


@pytest.mark.parametrize("status", [h[1] for h in HEALTHY], ids=[h[0] for h in HEALTHY])
def test_a_pod_starting_or_running_as_it_should_has_no_problem(status: dict[str, object]) -> None:
    assert pod_problem(status) is None


def test_an_init_containers_problem_comes_first_and_reaches_the_pod_summary() -> None:
    body = {
        "metadata": {"name": "job-a-engine-0", "labels": {"dressage.io/job": "job-a"}},
        "status": {
            "initContainerStatuses": [
                {"name": "stage-model", "image": "rt:1", "state": _waiting("ErrImagePull", "x")}
            ],
            **_container(state=_waiting("PodInitializing", "")),
        },
    }
    body["metadata"]["labels"]["dressage.io/role"] = "inference"  # type: ignore[index]
    info = pod_info(body)
    assert info is not None
    assert info.problem is not None
    assert info.problem.message == 'container stage-model image "rt:1": x'
    assert info.problem.kind == "ImagePullBackOff"  # a pull's retries are one problem

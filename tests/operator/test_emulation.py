"""The API emulation refuses invalid Pods and Deployments the way a real API server does, for
the subset of rules `dressage_testkit.kube` lists: 422 with a `Status` naming each field,
or 400 for a quantity the decoder cannot read."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster, parse_quantity

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p"},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "env": [{"name": "MY_ENV.NAME-1", "value": "x"}],
                "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
        "volumes": [{"name": "data", "emptyDir": {}}],
    },
}
MOUNT = {"name": "data", "mountPath": "/d"}


@pytest.fixture(autouse=True)
def _delete_pods(cluster: EmulatedCluster) -> Iterator[None]:
    yield
    for obj in cluster.items("v1", "pods"):
        cluster.delete(cluster.path("v1", "pods", obj["metadata"]["name"]))


def _post(c: EmulatedCluster, obj: dict[str, Any], plural: str = "pods") -> tuple[int, Any]:
    api_version = obj["apiVersion"]
    response = c.http.post(c.path(api_version, plural), json=obj)
    return response.status_code, response.json()


def _pod(**container: Any) -> dict[str, Any]:
    pod = copy.deepcopy(POD)
    pod["spec"]["containers"][0].update(container)
    return pod


def test_a_valid_pod_is_created(cluster: EmulatedCluster) -> None:
    code, body = _post(cluster, _pod())
    assert code == 201
    assert body["metadata"]["uid"]


@pytest.mark.parametrize(
    ("container", "volumes", "field", "detail"),
    [
        ({"env": [{"name": "1ABC", "value": "x"}]}, None, "spec.containers[0].env[0].name",
         "valid environment variable name"),
        ({"env": [{"name": "A B", "value": "x"}]}, None, "spec.containers[0].env[0].name",
         "valid environment variable name"),
        ({"image": " busybox"}, None, "spec.containers[0].image", "leading or trailing whitespace"),
        ({"resources": {"requests": {"cpu": "-1"}}}, None,
         "spec.containers[0].resources.requests[cpu]", "greater than or equal to 0"),
        ({"resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}}, None,
         "spec.containers[0].resources.requests", "less than or equal to cpu limit of 1500m"),
        ({"volumeMounts": [MOUNT, MOUNT]}, None,
         "spec.containers[0].volumeMounts[1].mountPath", "must be unique"),
        ({"volumeMounts": [{"name": "nope", "mountPath": "/d"}]}, None,
         "spec.containers[0].volumeMounts[0].name", 'Not found: "nope"'),
        ({}, [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}],
         "spec.volumes[1].name", 'Duplicate value: "data"'),
    ],
)  # fmt: skip
def test_an_invalid_pod_is_refused_with_a_status_naming_the_field(
    cluster: EmulatedCluster,
    container: dict[str, Any],
    volumes: list[dict[str, Any]] | None,
    field: str,
    detail: str,
) -> None:
    pod = _pod(**container)
    if volumes is not None:
        pod["spec"]["volumes"] = volumes
    code, body = _post(cluster, pod)
    assert code == 422
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Invalid", 422)
    assert body["message"].startswith(f'Pod "p" is invalid: {field}: ')
    assert detail in body["message"]
    (cause,) = body["details"]["causes"]
    assert cause["field"] == field
    assert detail in cause["message"]
    assert (body["details"]["name"], body["details"]["kind"]) == ("p", "pod")
    assert cluster.get(cluster.path("v1", "pods", "p")) is None


def test_every_problem_is_a_cause_and_a_deployment_template_is_checked(
    cluster: EmulatedCluster,
) -> None:
    pod = _pod(image="", env=[{"name": "=", "value": ""}])
    code, body = _post(cluster, pod)
    assert code == 422
    fields = [c["field"] for c in body["details"]["causes"]]
    assert fields == ["spec.containers[0].image", "spec.containers[0].env[0].name"]
    assert body["message"].startswith('Pod "p" is invalid: [spec.containers[0].image: Required')
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"selector": {}, "template": {"spec": _pod(image="x ")["spec"]}},
    }
    code, body = _post(cluster, deployment, "deployments")
    assert code == 422
    assert body["details"]["group"] == "apps"
    assert body["details"]["causes"][0]["field"] == "spec.template.spec.containers[0].image"


def test_a_patch_that_makes_a_deployment_invalid_is_refused(cluster: EmulatedCluster) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "patched"},
        "spec": {"selector": {}, "template": {"spec": _pod()["spec"]}},
    }
    assert _post(cluster, deployment, "deployments")[0] == 201
    path = cluster.path("apps/v1", "deployments", "patched")
    bad = {"spec": {"template": {"spec": {"volumes": [{"name": "x"}, {"name": "x"}]}}}}
    response = cluster.http.patch(
        path, json=bad, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert response.status_code == 422
    stored = cluster.get(path)
    assert stored is not None
    assert stored["spec"]["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    cluster.delete(path)


def test_a_quantity_outside_the_grammar_is_a_bad_request(cluster: EmulatedCluster) -> None:
    code, body = _post(cluster, _pod(resources={"limits": {"memory": "1 Gi"}}))
    assert code == 400
    assert body["reason"] == "BadRequest"
    assert "quantities must match the regular expression" in body["message"]


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", "1"), ("1.5", "1.5"), ("100m", "0.1"), ("64Gi", str(64 * 2**30)), ("1e3", "1000"),
     (".5", "0.5"), ("5.", "5"), ("+2E-2", "0.02"), ("2k", "2000"), ("-1", "-1")],
)  # fmt: skip
def test_quantities_follow_the_kubernetes_grammar(text: str, value: str) -> None:
    parsed = parse_quantity(text)
    assert parsed is not None
    assert parsed == type(parsed)(value)


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1 Gi", "1gi", "Gi", "1e", "0x10"])
def test_non_quantities_are_recognised(text: str) -> None:
    assert parse_quantity(text) is None


@contextmanager
def _enforcing(c: EmulatedCluster, level: str) -> Iterator[None]:
    """The test namespace labelled to enforce a Pod Security level, unlabelled afterwards."""
    c.label_namespace({ENFORCE_LABEL: level})
    try:
        yield
    finally:
        c.label_namespace({ENFORCE_LABEL: None})


RESTRICTED_CONTAINER = {
    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
}
RESTRICTED_POD = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def test_a_restricted_namespace_forbids_pods_that_break_the_standard(
    cluster: EmulatedCluster,
) -> None:
    c = cluster
    with _enforcing(c, "restricted"):
        code, body = _post(c, _pod())
        assert code == 403
        assert body["reason"] == "Forbidden"
        assert 'violates PodSecurity "restricted:latest"' in body["message"]
        for rule in ("allowPrivilegeEscalation", "capabilities", "runAsNonRoot", "seccomp"):
            assert rule in body["message"]
        good = _pod(**RESTRICTED_CONTAINER)
        good["spec"]["securityContext"] = RESTRICTED_POD
        assert _post(c, good)[0] == 201
        host = copy.deepcopy(good)
        host["metadata"]["name"] = "host"
        host["spec"]["volumes"].append({"name": "node", "hostPath": {"path": "/"}})
        code, body = _post(c, host)
        assert code == 403
        assert 'hostPath volumes (volumes "node")' in body["message"]
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {"template": {"spec": _pod()["spec"]}},
        }
        assert _post(c, deployment, "deployments")[0] == 201  # only warned, as for real
        c.delete(c.path("apps/v1", "deployments", "d"))
    # Outside an enforcing namespace the same pod is admitted.
    loose = _pod()
    loose["metadata"]["name"] = "loose"
    assert _post(c, loose)[0] == 201


def test_a_baseline_namespace_admits_root_but_not_host_paths(cluster: EmulatedCluster) -> None:
    c = cluster
    with _enforcing(c, "baseline"):
        assert _post(c, _pod())[0] == 201
        host = _pod()
        host["metadata"]["name"] = "host"
        host["spec"]["volumes"].append({"name": "node", "hostPath": {"path": "/"}})
        code, body = _post(c, host)
        assert (code, 'violates PodSecurity "baseline:latest"' in body["message"]) == (403, True)


def test_a_compute_quota_forbids_a_pod_whose_containers_do_not_declare_what_it_tracks(
    cluster: EmulatedCluster,
) -> None:
    """The ResourceQuota admission (`pods.go` `Constraints`): each container and init
    container must declare what the quota tracks; a limit stands for the request it defaults."""
    c = cluster
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "compute"},
        "spec": {"hard": {"requests.cpu": "8", "requests.memory": "16Gi", "limits.memory": "32Gi"}},
    }
    assert _post(c, quota, "resourcequotas")[0] == 201
    try:
        pod = _pod()  # requests cpu; limits cpu and memory: memory's request defaults to it
        pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
        code, body = _post(c, pod)
        assert (code, body["reason"]) == (403, "Forbidden")
        assert body["message"] == (
            'pods "p" is forbidden: failed quota: compute: must specify limits.memory for: init; '
            "requests.cpu for: init; requests.memory for: init"
        )
        pod["spec"]["initContainers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
        assert _post(c, pod)[0] == 201
    finally:
        c.delete(c.path("v1", "resourcequotas", "compute"))
    bare = _pod(resources={})
    bare["metadata"]["name"] = "bare"
    assert _post(c, bare)[0] == 201  # without the quota, admitted

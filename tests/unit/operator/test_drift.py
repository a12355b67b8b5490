"""Drift: what counts as drift of a live child (and what, set by the API server, does not),
and how a correction sets it back."""

from __future__ import annotations

import copy
from typing import Any

from dressage_operator import children, drift, naming

from .support import CONFIG, OWNER, cluster_job

NORMALISED = {"0.5": "500m", "1024Mi": "1Gi"}
"""Quantities as the API server stores them."""


def _defaulted_deployment(desired: dict[str, Any]) -> dict[str, Any]:
    """The proxy Deployment as a real API server returns it: defaults filled in, quantities
    normalised, metadata and status added by the server and the Deployment controller."""
    live = copy.deepcopy(desired)
    live["metadata"].update(uid="x", resourceVersion="7", generation=1)
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "1"
    live["spec"].update(progressDeadlineSeconds=600, revisionHistoryLimit=10)
    pod = live["spec"]["template"]["spec"]
    pod.update(dnsPolicy="ClusterFirst", schedulerName="default-scheduler")
    for container in pod["containers"]:
        container.update(
            imagePullPolicy="IfNotPresent", terminationMessagePath="/dev/termination-log"
        )
        for port in container["ports"]:
            port["protocol"] = "TCP"
        container["readinessProbe"].update(timeoutSeconds=1, successThreshold=1)
        requests = container["resources"]["requests"]
        container["resources"]["requests"] = {k: NORMALISED.get(v, v) for k, v in requests.items()}
    for volume in pod["volumes"]:
        if "configMap" in volume:
            volume["configMap"]["defaultMode"] = 420
    live["status"] = {"replicas": 1, "readyReplicas": 1}
    return live


def test_what_the_api_server_defaults_or_normalises_is_not_drift() -> None:
    job = cluster_job(proxy={"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}})
    desired = children.build_proxy_deployment(job, OWNER, CONFIG)
    live = _defaulted_deployment(desired)
    assert drift.drift(desired, live) == []
    service = children.build_engine_service(job, OWNER)
    live_service = copy.deepcopy(service)
    live_service["spec"].update(type="ClusterIP", sessionAffinity="None", ipFamilies=["IPv4"])
    live_service["spec"]["ports"][0]["protocol"] = "TCP"
    live_service["metadata"]["labels"]["added-by-someone"] = "yes"
    assert drift.drift(service, live_service) == []


def test_a_hand_scaled_or_edited_child_is_drift_and_the_correction_sets_it_back() -> None:
    job = cluster_job()
    desired = children.build_proxy_deployment(job, OWNER, CONFIG)
    live = _defaulted_deployment(desired)
    live["spec"]["replicas"] = 3
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:1"
    assert drift.drift(desired, live) == [
        "spec.replicas",
        "spec.template.spec.containers[proxy].image",
    ]
    # A sidecar or an env var injected by a mutating webhook is not drift; a removed one is.
    injected = _defaulted_deployment(desired)
    pod = injected["spec"]["template"]["spec"]
    pod["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2"})
    pod["containers"][0]["env"].insert(0, {"name": "INJECTED", "value": "1"})
    assert drift.drift(desired, injected) == []
    del pod["containers"][0]["env"][1]
    assert drift.drift(desired, injected) == [
        "spec.template.spec.containers[proxy].env[DRESSAGE_JOB_CONFIG]"
    ]
    config_map = children.build_config_map(job, OWNER)
    edited = copy.deepcopy(config_map)
    edited["data"] = {**config_map["data"], naming.CONFIG_KEY: "edited: true\n", "extra": "x"}
    del edited["metadata"]["labels"][naming.LABEL_ROLE]
    assert drift.drift(config_map, edited) == [
        f"metadata.labels.{naming.LABEL_ROLE}",
        f"data.{naming.CONFIG_KEY}",
        "data.extra",
    ]
    patch = drift.correction(config_map, edited)
    assert patch["data"] == {**config_map["data"], "extra": None}

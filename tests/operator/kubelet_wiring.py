"""How the test kubelet makes a pod's manifest run on this machine (pure but for the API reads).

`$(VAR)` expansion as Kubernetes does it, env sources (`value`, `valueFrom`, `envFrom`), field
references, and the rewriting that points DNS names and ports at loopback and mount paths at
the pod's directories. `tests/operator/kubelet.py` says what is emulated and what is not.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from dressage_testkit.kube import EmulatedCluster

Obj = dict[str, Any]
KUBELET_VAR = re.compile(r"\$\((\w+)\)|\$\$")
DNS_WITH_PORT = re.compile(r"\b([a-z0-9][-a-z0-9.]*\.svc(?:\.cluster\.local)?):(\d+)\b")
DNS_NAME = re.compile(r"\b([a-z0-9][-a-z0-9.]*\.svc(?:\.cluster\.local)?)\b")
Loopback = Callable[[str, int], int]
"""`(pod name, container port) -> loopback port`, stable per pod name."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """`$(VAR)` -> its value when defined (else left as is), `$$` -> `$`, as Kubernetes does."""
    return KUBELET_VAR.sub(lambda m: "$" if m[0] == "$$" else env.get(m[1], m[0]), text)


def b64(value: str) -> str:
    return base64.b64decode(value).decode()


def replace_file(path: Path, text: str) -> None:
    """Write `path` whole: a reader sees its old text or the new, never part of it."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text)
    os.replace(staged, path)


def mount_map(container: Obj, mounts: Mapping[str, Path]) -> list[tuple[str, Path]]:
    """The container's mount paths and their host directories, longest path first."""
    pairs = [(m["mountPath"], mounts[m["name"]]) for m in container.get("volumeMounts") or []]
    return sorted(pairs, key=lambda p: -len(p[0]))


def rewrite(text: str, mounts: list[tuple[str, Path]], dns: Mapping[str, Any]) -> str:
    """`text` with DNS names (and their ports) on loopback and mount paths on the host."""

    def with_port(m: re.Match[str]) -> str:
        host = m[1].removesuffix(".cluster.local")
        ports = dns.get(host)
        if ports is None or int(m[2]) not in ports:
            return m[0]
        return f"127.0.0.1:{ports[int(m[2])]}"

    text = DNS_WITH_PORT.sub(with_port, text)
    text = DNS_NAME.sub(
        lambda m: "127.0.0.1" if m[1].removesuffix(".cluster.local") in dns else m[0], text
    )
    for mount_path, host in mounts:
        pattern = re.compile(rf"(?<![\w.-]){re.escape(mount_path)}(?=/|$|[\s\"',:])", re.MULTILINE)
        text = pattern.sub(str(host).replace("\\", "\\\\"), text)
    return text


def dns_table(
    cluster: EmulatedCluster, desired: Mapping[str, tuple[str, Obj, str | None]], port: Loopback
) -> dict[str, dict[int, int]]:
    """DNS name -> {port -> loopback port}, from the pods (`desired`: name -> (uid, manifest,
    deployment)) and the Services now in the API."""
    c = cluster
    ns = c.namespace
    out: dict[str, dict[int, int]] = {}
    for name, (_, pod, _) in desired.items():
        spec = pod["spec"]
        ports = {
            p["containerPort"]: port(name, p["containerPort"])
            for ctr in spec["containers"]
            for p in ctr.get("ports") or []
        }
        if spec.get("hostname") and spec.get("subdomain"):
            out[f"{spec['hostname']}.{spec['subdomain']}.{ns}.svc"] = ports
    for service in c.items("v1", "services"):
        selector = service["spec"].get("selector") or {}
        matched = [
            (name, pod)
            for name, (_, pod, _) in desired.items()
            if selector
            and all(pod["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
        ]
        if not matched:
            continue
        name, pod = matched[0]
        named = {
            p.get("name"): p["containerPort"]
            for ctr in pod["spec"]["containers"]
            for p in ctr.get("ports") or []
        }
        ports = {}
        for service_port in service["spec"].get("ports") or []:
            target = service_port.get("targetPort", service_port["port"])
            target = named.get(target, target) if isinstance(target, str) else target
            ports[service_port["port"]] = port(name, int(target))
        out[f"{service['metadata']['name']}.{ns}.svc"] = ports
    return out


def field_value(manifest: Obj, name: str, uid: str, namespace: str, path: str) -> str:
    """The value of a `fieldRef` of pod `name`."""
    meta = manifest["metadata"]
    values = {
        "metadata.name": name,
        "metadata.namespace": namespace,
        "metadata.uid": uid,
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
        "spec.nodeName": "test-kubelet",
    }
    label = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if label:
        return str(meta.get(label[1], {}).get(label[2], ""))
    assert path in values, f"{name}: unemulated fieldRef {path}"
    return values[path]


def resolve_env(
    cluster: EmulatedCluster, manifest: Obj, name: str, uid: str, container: Obj
) -> dict[str, str]:
    """A container's environment, its sources read from the API as a kubelet does."""
    c = cluster
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        if "configMapRef" in source:
            obj = c.get(c.path("v1", "configmaps", source["configMapRef"]["name"])) or {}
            env.update(obj.get("data") or {})
        if "secretRef" in source:
            obj = c.get(c.path("v1", "secrets", source["secretRef"]["name"])) or {}
            env.update({k: b64(v) for k, v in (obj.get("data") or {}).items()})
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = expand(item["value"], env)
            continue
        ref = item["valueFrom"]
        if "fieldRef" in ref:
            path = ref["fieldRef"]["fieldPath"]
            env[item["name"]] = field_value(manifest, name, uid, c.namespace, path)
        elif "secretKeyRef" in ref:
            key = ref["secretKeyRef"]
            secret = c.get(c.path("v1", "secrets", key["name"]))
            assert secret is not None, f"{name}: Secret {key['name']} does not exist"
            env[item["name"]] = b64(secret["data"][key["key"]])
        elif "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            cm = c.get(c.path("v1", "configmaps", key["name"]))
            assert cm is not None, f"{name}: ConfigMap {key['name']} does not exist"
            env[item["name"]] = cm["data"][key["key"]]
        else:
            raise AssertionError(f"{name}: unemulated env source {ref}")
    return env


def desired_pods(
    cluster: EmulatedCluster, known: Collection[str]
) -> dict[str, tuple[str, Obj, str | None]]:
    """Pod name -> (uid, manifest, deployment) of what should run: the namespace's Pods (a
    finished one only while it is `known`, running here) and one pod `<deployment>-0` per
    Deployment, from its template (the emulation has no ReplicaSet controller)."""
    c = cluster
    out: dict[str, tuple[str, Obj, str | None]] = {}
    for pod in c.items("v1", "pods"):
        meta = pod["metadata"]
        finished = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if finished and meta["name"] not in known:
            continue
        out[meta["name"]] = (meta["uid"], pod, None)
    for deployment in c.items("apps/v1", "deployments"):
        meta = deployment["metadata"]
        template = deployment["spec"]["template"]
        name = f"{meta['name']}-0"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {**template.get("metadata", {}), "name": name, "uid": meta["uid"]},
            "spec": template["spec"],
        }
        out[name] = (meta["uid"], pod, meta["name"])
    return out

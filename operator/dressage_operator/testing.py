"""A Kubernetes API emulation for the operator's tests and benchmarks (needs the `dev` extra).

`EmulatedCluster` runs kmock (the emulator kopf's author made for testing kopf operators) on a
real loopback HTTP port in its own thread and event loop, so kopf, httpx and the real `kubectl`
talk to it exactly as to an API server. kmock 0.8 is a plain object store; `DressageKube` adds
what the operator relies on: `uid`, increasing `resourceVersion`, `creationTimestamp` and
`generation` (bumped only when `.spec` changes), 201 on create, namespace defaulting, and a name
from `generateName` (kopf's Events are posted so, and tests read them).
What it still does not do (schema validation beyond the rules below, garbage collection,
label selectors, `/status` separation) is tested elsewhere with real schemas, or stated in the
tests.

Like a real API server, it refuses invalid Pods and Deployments (their pod template) on create
and on patch, for this subset of the API server's validation (`refusals`):

- env var names: `[-._a-zA-Z][-._a-zA-Z0-9]*` (Kubernetes `IsEnvVarName`) -> 422 `Invalid`,
  field `spec.containers[i].env[j].name`;
- resource quantities in `resources.requests`/`limits`: a value outside the Kubernetes quantity
  grammar (`1`, `1.5`, `100m`, `64Gi`, `1e3`, ...) -> 400 `BadRequest`, as the real server's
  decoder answers (its message names the rule, not the field); a negative one -> 422,
  field `...resources.requests[cpu]`; a request above its limit -> 422;
- duplicate volume names -> 422, field `spec.volumes[i].name`; a mount of an undeclared
  volume -> 422, field `spec.containers[i].volumeMounts[j].name`;
- duplicate mount paths in one container -> 422, field `...volumeMounts[j].mountPath`;
- a container image with leading or trailing whitespace, or none -> 422, field
  `spec.containers[i].image` (the real server accepts inner spaces; the kubelet then fails
  the pod with `InvalidImageName`, which is not emulated).

In a namespace labelled `pod-security.kubernetes.io/enforce: restricted`
(`EmulatedCluster.label_namespace`: kmock cannot serve Namespace objects, so the emulation keeps
namespace labels itself) it also refuses a Pod
that breaks the Restricted Pod Security Standard (`restricted_violations`: volume types,
privileged, privilege escalation, capabilities, runAsNonRoot, runAsUser 0, seccomp, host
namespaces) with 403 `Forbidden`, as the PodSecurity admission does; `baseline` refuses
hostPath volumes, privileged containers and host namespaces. Deployments are admitted (the
real admission only warns for them; their pods are the ones refused).

A 422 answer is a `Status` as the API server writes it: `reason: Invalid`, the message
`<Kind> "<name>" is invalid: <field>: <detail>[, ...]` and one `details.causes[]` entry
(`reason`, `field`, `message`) per problem.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs
import httpx
import kmock
import yaml
from kmock._internal import dicts, enums, rendering

from dressage.api.job import API_GROUP, API_VERSION, KIND, PLURAL
from dressage_operator.kube import resource_path
from dressage_operator.quantity import parse_quantity

Obj = dict[str, Any]

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "v1/namespaces": kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"get", "list", "watch", "create"}
    ),
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", namespaced=True),
    "v1/secrets": kmock.ResourceInfo(kind="Secret", namespaced=True),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "apps/v1/deployments": kmock.ResourceInfo(kind="Deployment", namespaced=True),
    "networking.k8s.io/v1/networkpolicies": kmock.ResourceInfo(
        kind="NetworkPolicy", namespaced=True
    ),
    f"{API_GROUP}/{API_VERSION}/{PLURAL}": kmock.ResourceInfo(
        kind=KIND,
        namespaced=True,
        singular=KIND.lower(),
        shortnames={"arj"},
        subresources={"status"},
    ),
}
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}


ENV_VAR_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
ENV_VAR_NAME_MESSAGE = (
    "a valid environment variable name must consist of alphabetic characters, digits, '_', "
    "'-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or "
    "'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"
)
QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@dataclass(frozen=True)
class Cause:
    """One problem the emulated API server finds in an object, as in `details.causes[]`."""

    field: str
    reason: str
    """`FieldValueInvalid`, `FieldValueDuplicate`, `FieldValueNotFound`, `FieldValueRequired`."""
    message: str


class BadRequest(Exception):
    """The object cannot be decoded (a quantity outside the grammar): a 400, no field."""


def _invalid(field: str, value: object, detail: str) -> Cause:
    return Cause(field, "FieldValueInvalid", f"Invalid value: {_quote(value)}: {detail}")


def _quote(value: object) -> str:
    return '"' + str(value).replace('"', '\\"') + '"'


def _container_refusals(path: str, container: Obj, volumes: set[str]) -> list[Cause]:
    causes: list[Cause] = []
    image = container.get("image")
    if not image:
        causes.append(Cause(f"{path}.image", "FieldValueRequired", "Required value"))
    elif str(image).strip() != image:
        causes.append(
            _invalid(f"{path}.image", image, "must not have leading or trailing whitespace")
        )
    for j, env in enumerate(container.get("env") or ()):
        name = str(env.get("name", ""))
        if not ENV_VAR_NAME.match(name):
            causes.append(_invalid(f"{path}.env[{j}].name", name, ENV_VAR_NAME_MESSAGE))
    resources = container.get("resources") or {}
    values: dict[str, dict[str, Decimal]] = {}
    for kind in ("requests", "limits"):
        for resource, raw in (resources.get(kind) or {}).items():
            value = parse_quantity(str(raw))
            if value is None:
                raise BadRequest(QUANTITY_MESSAGE)
            field = f"{path}.resources.{kind}[{resource}]"
            if value < 0:
                causes.append(_invalid(field, raw, "must be greater than or equal to 0"))
            values.setdefault(kind, {})[resource] = value
    for resource, request in values.get("requests", {}).items():
        limit = values.get("limits", {}).get(resource)
        if limit is not None and request > limit:
            raw = resources["requests"][resource]
            causes.append(
                _invalid(
                    f"{path}.resources.requests",
                    raw,
                    f"must be less than or equal to {resource} limit of "
                    f"{resources['limits'][resource]}",
                )
            )
    paths: set[str] = set()
    for j, mount in enumerate(container.get("volumeMounts") or ()):
        name, mount_path = mount.get("name"), mount.get("mountPath")
        if name not in volumes:
            causes.append(
                Cause(
                    f"{path}.volumeMounts[{j}].name",
                    "FieldValueNotFound",
                    f"Not found: {_quote(name)}",
                )
            )
        if mount_path in paths:
            causes.append(
                _invalid(f"{path}.volumeMounts[{j}].mountPath", mount_path, "must be unique")
            )
        paths.add(mount_path)
    return causes


def pod_spec_refusals(spec: Obj, path: str = "spec") -> list[Cause]:
    """What the emulated API server refuses in a pod spec (see the module docstring).
    Raises `BadRequest` for a quantity outside the grammar."""
    causes: list[Cause] = []
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or ()):
        name = volume.get("name")
        if name in volumes:
            causes.append(
                Cause(
                    f"{path}.volumes[{i}].name",
                    "FieldValueDuplicate",
                    f"Duplicate value: {_quote(name)}",
                )
            )
        volumes.add(name)
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or ()):
            causes += _container_refusals(f"{path}.{key}[{i}]", container, volumes)
    return causes


ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
RESTRICTED_VOLUME_TYPES = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)


def restricted_violations(spec: Obj, level: str = "restricted") -> list[str]:
    """What the PodSecurity admission at `level` (`baseline` or `restricted`) finds wrong with
    a pod spec, worded as it words it; empty when the pod is admitted."""
    problems: list[str] = []
    containers = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    pod_ctx = spec.get("securityContext") or {}

    def ctx(c: Obj) -> Obj:
        return c.get("securityContext") or {}

    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            problems.append(f"host namespaces ({key}=true)")
    host_path = [v["name"] for v in spec.get("volumes") or () if "hostPath" in v]
    if host_path:
        problems.append(f"hostPath volumes (volumes {', '.join(map(_quote, host_path))})")
    privileged = [c["name"] for c in containers if ctx(c).get("privileged")]
    if privileged:
        names = ", ".join(map(_quote, privileged))
        problems.append(f"privileged (containers {names} must not set privileged=true)")
    if level != "restricted":
        return problems
    kinds = [
        v["name"]
        for v in spec.get("volumes") or ()
        if not (set(v) - {"name"}) <= RESTRICTED_VOLUME_TYPES and "hostPath" not in v
    ]
    if kinds:
        problems.append(f"restricted volume types (volumes {', '.join(map(_quote, kinds))})")
    escalating = [
        c["name"] for c in containers if ctx(c).get("allowPrivilegeEscalation") is not False
    ]
    if escalating:
        problems.append(
            f"allowPrivilegeEscalation != false (containers {', '.join(map(_quote, escalating))}"
            " must set securityContext.allowPrivilegeEscalation=false)"
        )
    undropped = [
        c["name"]
        for c in containers
        if "ALL" not in ((ctx(c).get("capabilities") or {}).get("drop") or ())
    ]
    if undropped:
        problems.append(
            f"unrestricted capabilities (containers {', '.join(map(_quote, undropped))} must "
            'set securityContext.capabilities.drop=["ALL"])'
        )
    added = [
        c["name"]
        for c in containers
        if set((ctx(c).get("capabilities") or {}).get("add") or ()) - {"NET_BIND_SERVICE"}
    ]
    if added:
        problems.append(
            f"unrestricted capabilities (containers {', '.join(map(_quote, added))} must not "
            "include capabilities other than NET_BIND_SERVICE in securityContext.capabilities.add)"
        )
    root_ok = pod_ctx.get("runAsNonRoot") is True
    as_root = [
        c["name"]
        for c in containers
        if ctx(c).get("runAsNonRoot") is False or not (root_ok or ctx(c).get("runAsNonRoot"))
    ]
    if as_root:
        problems.append(
            "runAsNonRoot != true (pod or containers "
            f"{', '.join(map(_quote, as_root))} must set securityContext.runAsNonRoot=true)"
        )
    if pod_ctx.get("runAsUser") == 0 or any(ctx(c).get("runAsUser") == 0 for c in containers):
        problems.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    no_seccomp = [
        c["name"]
        for c in containers
        if ((ctx(c).get("seccompProfile") or {}).get("type") or pod_seccomp)
        not in ("RuntimeDefault", "Localhost")
    ]
    if no_seccomp:
        problems.append(
            "seccompProfile (pod or containers "
            f"{', '.join(map(_quote, no_seccomp))} must set securityContext.seccompProfile.type "
            'to "RuntimeDefault" or "Localhost")'
        )
    return problems


def refusals(obj: Obj) -> list[Cause]:
    """What the emulated API server refuses in a Pod or a Deployment; nothing for other kinds."""
    kind = obj.get("kind")
    if kind == "Pod":
        return pod_spec_refusals(obj.get("spec") or {})
    if kind == "Deployment":
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        return pod_spec_refusals(template, "spec.template.spec")
    return []


def _refuse(obj: Mapping[str, Any], resource: Any) -> None:
    """Raise the API server's answer to an invalid object, if it is one."""
    kind = str(obj.get("kind") or getattr(resource, "kind", "") or "")
    name = str((obj.get("metadata") or {}).get("name") or "")
    try:
        causes = refusals({**obj, "kind": kind})
    except BadRequest as exc:
        raise kmock.KubernetesError(
            status=400,
            reason="BadRequest",
            message=f'{kind} in version "v1" cannot be handled as a {kind}: {exc}',
            details={},
        ) from None
    if not causes:
        return
    errors = [f"{c.field}: {c.message}" for c in causes]
    listed = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind.lower(),
        "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
    }
    group = getattr(resource, "group", "")
    if group:
        details["group"] = group
    raise kmock.KubernetesError(
        status=422,
        reason="Invalid",
        message=f'{kind} "{name}" is invalid: {listed}',
        details=details,
    )


@attrs.define(kw_only=True)
class DressageKube(kmock.KubernetesEmulator):
    """kmock with the object metadata an API server fills in."""

    _versions: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _inflight: set[int] = attrs.field(factory=set, init=False)
    namespace_labels: dict[str, dict[str, str]] = attrs.field(factory=dict, init=False)
    """Labels of each namespace (the Pod Security admission reads the enforce level)."""

    async def _handle(self, request: rendering.Request) -> Any:
        # kmock records every request for assertions and matches each new one by scanning that
        # record, so a long run slows down quadratically. These tests assert on objects, not on
        # requests: keep only the requests in flight.
        self._inflight.add(id(request))
        self._requests[:] = [r for r in self._requests if id(r) in self._inflight]
        try:
            return await self._handle_object(request)
        finally:
            self._inflight.discard(id(request))

    async def _handle_object(self, request: rendering.Request) -> Any:
        if request.resource is not None and isinstance(request.data, dict):
            if request.action == enums.action.CREATE:
                self._on_create(request)
            elif request.action == enums.action.UPDATE and request.name is not None:
                self._on_patch(request)
        elif request.action == enums.action.UPDATE and isinstance(request.data, list):
            self._on_json_patch(request)
        return await super()._handle(request)

    def _on_json_patch(self, request: rendering.Request) -> None:
        """JSON patches: a failed `test` op is 422 (kopf's optimistic concurrency relies on
        it to re-read and retry), and a successful patch bumps the resourceVersion."""
        if request.resource is None or request.name is None:
            return
        key = (request.resource, request.namespace, request.name)
        if key not in self.objects or self.objects[key].deleted:
            return
        current = self.objects[key].raw
        for op in request.data:
            if op.get("op") != "test":
                continue
            node: Any = current
            for part in str(op["path"]).strip("/").split("/"):
                node = node.get(part) if isinstance(node, dict) else None
            if node != op.get("value"):
                raise kmock.KubernetesError(
                    status=422, reason="Invalid", message=f"test of {op['path']} failed"
                )
        request.data.append(
            {"op": "add", "path": "/metadata/resourceVersion", "value": str(next(self._versions))}
        )

    def _enforced_level(self, namespace: str | None) -> str | None:
        level = self.namespace_labels.get(namespace or "", {}).get(ENFORCE_LABEL)
        return level if level in ("baseline", "restricted") else None

    def _admit(self, request: rendering.Request) -> None:
        """The PodSecurity admission of a Pod in an enforcing namespace: 403 Forbidden."""
        data = request.data
        kind = str(data.get("kind") or getattr(request.resource, "kind", "") or "")
        if kind != "Pod":
            return
        level = self._enforced_level(request.namespace)
        if level is None:
            return
        problems = restricted_violations(data.get("spec") or {}, level)
        if problems:
            name = (data.get("metadata") or {}).get("name", "")
            raise kmock.KubernetesError(
                status=403,
                reason="Forbidden",
                message=f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": '
                + ", ".join(problems),
                details={"name": name, "kind": "pods"},
            )

    def _on_create(self, request: rendering.Request) -> None:
        _refuse(request.data, request.resource)
        self._admit(request)
        meta = request.data.setdefault("metadata", {})
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        if not meta.get("name") and meta.get("generateName"):
            # As the API server does (kopf names its Events so).
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        meta.update(
            uid=str(uuid.uuid4()),
            resourceVersion=str(next(self._versions)),
            creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            generation=1,
        )

    def _on_patch(self, request: rendering.Request) -> None:
        if request.resource is None or request.name is None:
            return
        key = (request.resource, request.namespace, request.name)
        meta = request.data.setdefault("metadata", {})
        if meta is None:
            meta = request.data["metadata"] = {}
        meta["resourceVersion"] = str(next(self._versions))
        if key not in self.objects or self.objects[key].deleted:
            return
        current = copy.deepcopy(self.objects[key].raw)
        if request.subresource != "status" and "spec" in request.data:
            patched = dicts.merge_patch_dict(copy.deepcopy(current), request.data)
            _refuse(patched, request.resource)
            if patched.get("spec") != current.get("spec"):
                meta["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1

    # kmock finds the object of a fetch, create, patch or delete by scanning every stored
    # object; these look it up by key instead, so the emulation keeps up with 100 jobs.
    def _lookup(self, request: rendering.Request, name: str | None = None) -> Any:
        data = request.data if isinstance(request.data, dict) else {}
        meta = data.get("metadata") or {}
        key = (
            request.resource,
            request.namespace or meta.get("namespace"),
            name or request.name or meta.get("name"),
        )
        if request.resource is None or key[2] is None or key not in self.objects:  # type: ignore[operator]
            raise kmock.KubernetesObjectNotFoundError()
        return self.objects[key]  # type: ignore[index]

    async def _serve_fetch(self, request: rendering.Request) -> Any:
        obj = self._lookup(request)
        if obj.deleted:
            raise kmock.KubernetesObjectNotFoundError()
        return obj.raw

    async def _serve_create(self, request: rendering.Request) -> Any:
        return rendering.Response(status=201, payload=self._lookup(request).raw)

    async def _serve_update(self, request: rendering.Request) -> Any:
        return self._lookup(request).last.raw

    async def _serve_delete(self, request: rendering.Request) -> Any:
        return self._lookup(request).last.raw


class EmulatedCluster:
    """kmock in a background thread; helpers to act on it over real HTTP like a user would."""

    def __init__(self, namespace: str = "default") -> None:
        self.namespace = namespace
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._stop: asyncio.Event | None = None
        self._done: Future[None] | None = None
        self.url = ""
        self.emulator: DressageKube | None = None
        self.http = httpx.Client(timeout=10)

    def start(self) -> EmulatedCluster:
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
        self._thread.start()
        ready: Future[str] = Future()
        self._done = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
        self.url = ready.result(timeout=30)
        self.http = httpx.Client(base_url=self.url, timeout=10)
        return self

    async def _serve(self, ready: Future[str]) -> None:
        self._stop = asyncio.Event()
        async with DressageKube() as emulator, kmock.Server(emulator) as server:
            for name, info in RESOURCES.items():
                info.verbs = set(info.verbs or VERBS)
                emulator.resources[name] = info
            self.emulator = emulator
            ready.set_result(str(server.url).rstrip("/"))
            await self._stop.wait()

    def stop(self) -> None:
        self.http.close()
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._done is not None:
            self._done.result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    def write_kubeconfig(self, path: Path) -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "emulated"}}],
            "contexts": [
                {
                    "name": "emulated",
                    "context": {
                        "cluster": "emulated",
                        "user": "tester",
                        "namespace": self.namespace,
                    },
                }
            ],
            "current-context": "emulated",
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def label_namespace(self, labels: Mapping[str, str | None], namespace: str = "") -> None:
        """Set (or, with None, remove) labels of a namespace, as `kubectl label ns` would."""
        assert self.emulator is not None
        current = self.emulator.namespace_labels.setdefault(namespace or self.namespace, {})
        for key, value in labels.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value

    # --- user-side verbs over HTTP ---------------------------------------------------------
    def path(self, api_version: str, plural: str, name: str = "") -> str:
        return resource_path(api_version, plural, self.namespace, name)

    def job_path(self, name: str = "") -> str:
        return self.path(f"{API_GROUP}/{API_VERSION}", PLURAL, name)

    def create(self, obj: Obj) -> Obj:
        api_version, kind = obj["apiVersion"], obj["kind"]
        plural = {"Namespace": "namespaces", KIND: PLURAL}.get(kind, kind.lower() + "s")
        namespace = None if kind == "Namespace" else self.namespace
        response = self.http.post(resource_path(api_version, plural, namespace), json=obj)
        response.raise_for_status()
        body: Obj = response.json()
        return body

    def get(self, path: str) -> Obj | None:
        response = self.http.get(path)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        body: Obj = response.json()
        return body

    def items(self, api_version: str, plural: str) -> list[Obj]:
        body = self.get(self.path(api_version, plural)) or {}
        items: list[Obj] = body.get("items", [])
        return items

    def patch(self, path: str, patch: Obj) -> Obj:
        response = self.http.patch(
            path, json=patch, headers={"Content-Type": "application/merge-patch+json"}
        )
        response.raise_for_status()
        body: Obj = response.json()
        return body

    def delete(self, path: str) -> None:
        response = self.http.delete(path)
        if response.status_code != 404:
            response.raise_for_status()


@contextmanager
def emulated_cluster(namespace: str = "default") -> Iterator[EmulatedCluster]:
    cluster = EmulatedCluster(namespace).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def operator_env(cluster: EmulatedCluster, kubeconfig: Path, **overrides: str) -> dict[str, str]:
    """Environment for an operator run against the emulation. The resync is long on purpose:
    tests then show that events, not periodic resyncs, drive the reconciles."""
    env = {
        "KUBECONFIG": str(cluster.write_kubeconfig(kubeconfig)),
        "DRESSAGE_OPERATOR_RESYNC_SECONDS": "60",
        "DRESSAGE_OPERATOR_SCRAPE_SECONDS": "0.5",
        "DRESSAGE_OPERATOR_METRICS_PORT": "0",
    }
    env.update(overrides)
    return env


def set_env(env: dict[str, str]) -> dict[str, str | None]:
    """Apply env vars; returns the previous values for `restore_env`."""
    previous = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return previous


def restore_env(previous: dict[str, str | None]) -> None:
    for key, value in previous.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value

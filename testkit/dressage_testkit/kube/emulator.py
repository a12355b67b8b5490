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

Like a real API server, it refuses invalid objects (the metadata of any, the pod spec of Pods
and Deployments) on create and on patch, with the API server's rules for the fields a job
sets (`dressage_operator.apirules`), and in a namespace labelled
`pod-security.kubernetes.io/enforce` the Pods that break its Pod Security level, and in a
namespace with a ResourceQuota on cpu or memory the Pods with a container that does not
declare it: the rules are listed in `dressage_testkit.kube.refusals`. It counts the writes it
refuses (`EmulatedCluster.refusals`), so a test sees whether the operator repeats one.

A 422 answer is a `Status` as the API server writes it: `reason: Invalid`, the message
`<Kind> "<name>" is invalid: <field>: <detail>[, ...]` and one `details.causes[]` entry
(`reason`, `field`, `message`) per problem.

`kubectl get arj` gets the jobs as a `Table` of the CRD's printer columns, as the API server
prints a custom resource (`dressage_testkit.kube.tables`).

The jobs' scale subresource is served as the API server serves a CRD's (`testing.scale`):
`GET`, `PUT` and `PATCH` of `.../asyncrljobs/NAME/scale` read and write
`spec.inference.replicas` through an `autoscaling/v1` `Scale`, refusing what the CRD's schema
and CEL rules refuse, and discovery lists it as the API server does, so `kubectl scale
arj/NAME --replicas=N` works against the emulation.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import httpx
import kmock
import yaml
from dressage_operator.kube import resource_path
from kmock._internal import dicts, enums, rendering

from dressage.api.job import API_GROUP, API_VERSION, KIND, PLURAL
from dressage_testkit.kube.refusals import (
    ENFORCE_LABEL,
    BadRequest,
    quota_refusal,
    refusals,
    restricted_violations,
)
from dressage_testkit.kube.scale import (
    ScaleError,
    ScaleSubresource,
    discovery_entries,
    for_jobs,
)
from dressage_testkit.kube.tables import printer_columns, table_requested, to_table

Obj = dict[str, Any]

RESOURCES: dict[str, kmock.ResourceInfo] = {
    "v1/namespaces": kmock.ResourceInfo(
        kind="Namespace", namespaced=False, verbs={"get", "list", "watch", "create"}
    ),
    "v1/pods": kmock.ResourceInfo(kind="Pod", namespaced=True),
    "v1/services": kmock.ResourceInfo(kind="Service", namespaced=True),
    "v1/configmaps": kmock.ResourceInfo(kind="ConfigMap", namespaced=True),
    "v1/secrets": kmock.ResourceInfo(kind="Secret", namespaced=True),
    "v1/persistentvolumeclaims": kmock.ResourceInfo(kind="PersistentVolumeClaim", namespaced=True),
    "v1/events": kmock.ResourceInfo(kind="Event", namespaced=True),
    "v1/resourcequotas": kmock.ResourceInfo(kind="ResourceQuota", namespaced=True),
    "apps/v1/deployments": kmock.ResourceInfo(kind="Deployment", namespaced=True),
    "networking.k8s.io/v1/networkpolicies": kmock.ResourceInfo(
        kind="NetworkPolicy", namespaced=True
    ),
    f"{API_GROUP}/{API_VERSION}/{PLURAL}": kmock.ResourceInfo(
        kind=KIND,
        namespaced=True,
        singular=KIND.lower(),
        shortnames={"arj"},
        subresources={"status", "scale"},
    ),
}
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}


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
    refused: Counter[str] = attrs.field(factory=Counter, init=False)
    """Writes refused (400, 422, 403), by `Kind/name`: a test sees whether one is retried."""
    scale: ScaleSubresource = attrs.field(factory=for_jobs, init=False)
    """The jobs' scale subresource, from the CRD this project generates."""

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
        if request.subresource == "scale" and request.resource is not None and request.name:
            return await self._serve_scale(request)
        if (
            request.action in (enums.action.LIST, enums.action.FETCH)
            and request.resource is not None
            and request.resource.plural == PLURAL
            and not request.subresource
            and table_requested(_header(request.headers, "Accept"))
        ):
            return self._serve_table(request)
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

    def _quotas(self, namespace: str | None) -> list[Mapping[str, Any]]:
        """The namespace's ResourceQuota objects, by name."""
        found = [
            obj.raw
            for (resource, ns, _), obj in self.objects.items()
            if getattr(resource, "plural", "") == "resourcequotas"
            and ns == namespace
            and not obj.deleted
        ]
        return sorted(found, key=lambda q: str((q.get("metadata") or {}).get("name", "")))

    def _admit(self, request: rendering.Request) -> None:
        """The admission of a Pod: PodSecurity in an enforcing namespace, then ResourceQuota
        in a namespace with quotas (`refusals.quota_refusal`), each a 403 Forbidden."""
        data = request.data
        kind = str(data.get("kind") or getattr(request.resource, "kind", "") or "")
        if kind != "Pod":
            return
        name = (data.get("metadata") or {}).get("name", "")
        spec = data.get("spec") or {}
        level = self._enforced_level(request.namespace)
        problems = restricted_violations(spec, level) if level is not None else []
        message = None
        if problems:
            message = f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": '
            message += ", ".join(problems)
        else:
            message = quota_refusal(name, spec, self._quotas(request.namespace))
        if message is not None:
            raise kmock.KubernetesError(
                status=403,
                reason="Forbidden",
                message=message,
                details={"name": name, "kind": "pods"},
            )

    def _count_refusal(self, request: rendering.Request, data: Mapping[str, Any]) -> None:
        kind = str(data.get("kind") or getattr(request.resource, "kind", "") or "")
        self.refused[f"{kind}/{(data.get('metadata') or {}).get('name') or request.name}"] += 1

    def _on_create(self, request: rendering.Request) -> None:
        try:
            _refuse(request.data, request.resource)
            self._admit(request)
        except kmock.KubernetesError:
            self._count_refusal(request, request.data)
            raise
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
            try:
                _refuse(patched, request.resource)
            except kmock.KubernetesError:
                self._count_refusal(request, patched)
                raise
            if patched.get("spec") != current.get("spec"):
                meta["generation"] = int(current.get("metadata", {}).get("generation", 1)) + 1

    async def _serve_scale(self, request: rendering.Request) -> Any:
        """`GET`, `PUT` or `PATCH` of a job's scale subresource (`testing.scale`)."""
        assert request.resource is not None
        assert request.name is not None
        scale = self.scale
        if request.resource.plural != scale.plural:
            raise kmock.KubernetesError(status=404, reason="NotFound", message="no scale here")
        key = (request.resource, request.namespace, request.name)
        try:
            async with self._lock:
                if key not in self.objects or self.objects[key].deleted:
                    raise ScaleError(
                        404,
                        "NotFound",
                        f'{scale.plural}.{scale.group} "{request.name}" not found',
                        {"name": request.name, "group": scale.group, "kind": scale.plural},
                    )
                current = copy.deepcopy(self.objects[key].raw)
                if request.method == enums.method.GET:
                    return aiohttp.web.json_response(scale.read(current))
                if request.method == enums.method.PUT:
                    wanted = request.data
                elif request.method == enums.method.PATCH:
                    content_type = request.headers.get("Content-Type", "")
                    wanted = scale.patched(scale.read(current), request.data, content_type)
                else:
                    raise ScaleError(405, "MethodNotAllowed", f"{request.method} is not allowed")
                try:
                    new = scale.update(current, wanted, request.name)
                except ScaleError:
                    self._count_refusal(request, current)
                    raise
                meta = new["metadata"]
                meta["resourceVersion"] = str(next(self._versions))
                if new.get("spec") != current.get("spec"):
                    meta["generation"] = int(meta.get("generation", 1)) + 1
                self.objects[key].patch(new)
                raw = self.objects[key].raw
                await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
                return aiohttp.web.json_response(scale.read(raw))
        except ScaleError as exc:
            raise kmock.KubernetesError(
                status=exc.status, reason=exc.reason, message=exc.message, details=exc.details
            ) from None

    def _serve_table(self, request: rendering.Request) -> Any:
        """`kubectl get arj [NAME]`: the jobs as a `Table` of the CRD's printer columns
        (`dressage_testkit.kube.tables`), as the API server prints them."""
        if request.name:
            found = self._lookup(request)
            if found.deleted:
                raise kmock.KubernetesObjectNotFoundError()
            objects = [found.raw]
        else:
            objects = [
                obj.raw
                for (resource, namespace, _), obj in sorted(
                    self.objects.items(), key=lambda item: str(item[0][2])
                )
                if resource == request.resource
                and (request.namespace is None or namespace == request.namespace)
                and not obj.deleted
            ]
        table = to_table(printer_columns(), objects, "", datetime.now(UTC))
        return aiohttp.web.json_response(table)

    async def _serve_version(self, request: rendering.Request) -> Any:
        """Discovery of a group version, with the jobs' `status` and `scale` subresources
        listed as the API server lists a CRD's (`testing.scale.discovery_entries`)."""
        payload: Any = await super()._serve_version(request)
        scale = self.scale
        if payload.get("groupVersion") == f"{API_GROUP}/{API_VERSION}":
            sub = {f"{scale.plural}/status", f"{scale.plural}/scale"}
            kept = [r for r in payload["resources"] if r["name"] not in sub]
            payload["resources"] = kept + discovery_entries(scale.plural, scale.kind)
        return payload

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


def _header(headers: Mapping[str, str], name: str) -> str:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


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

    def refusals(self, kind: str, name: str) -> int:
        """How many writes of one object the emulated API server refused."""
        assert self.emulator is not None
        return self.emulator.refused[f"{kind}/{name}"]

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

    def history(self, api_version: str, plural: str, name: str) -> list[Obj]:
        """Every version of one object the API server stored, oldest first: what a watch
        started before its creation streams (ADDED, then a MODIFIED per write, status writes
        included), so a test sees a state that lasted shorter than any poll. Read on the
        server's loop, between its writes."""
        assert self.emulator is not None
        objects = self.emulator.objects
        key = (f"{api_version}/{plural}", self.namespace, name)

        async def read() -> list[Obj]:
            try:
                versions = objects[key].history
            except KeyError:  # never created
                return []
            return [copy.deepcopy(v.raw) for v in versions if v is not None]

        return asyncio.run_coroutine_threadsafe(read(), self._loop).result(timeout=10)

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

"""kopf handlers: thin glue between Kubernetes events and `decide`.

One daemon per `AsyncRLJob` runs the reconcile loop: read the job, check it (the model, the
cluster's limits, and its children as the API server would: `preflight`, once per spec), look
at its pods (an in-memory kopf index fed by the pod watch) and proxy, read its metrics when
due, `decide`, apply the plan (collecting the API server's answer to each write, and not
repeating a write it refused permanently for this spec generation), `settle` the status from
both, write it (once, only when it changed) and post the Events. Pod, Deployment and job events
only wake the loop, so each job has exactly one writer and reconciles are level-triggered: a
restarted operator converges from whatever it finds, without duplicate children.

The operator's configuration travels in kopf's memo: `main` passes `kopf.Memo(config=...)` to
`kopf.run`; without one (`kopf run -m dressage_operator.handlers`) it is read from the
`DRESSAGE_OPERATOR_*` environment at startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import httpx
import kopf
from prometheus_client import start_http_server
from pydantic import ValidationError

from dressage.api.job import API_GROUP, API_VERSION, PLURAL, AsyncRLJob
from dressage.api.status import AsyncRLJobStatus
from dressage_operator import children, children_check, drift, naming, schemas
from dressage_operator.conditions import timestamp
from dressage_operator.config import OperatorConfig
from dressage_operator.decide import decide, scrape_due
from dressage_operator.kube import (
    Conflict,
    Kube,
    KubeError,
    client_from_connection,
    object_path,
    resource_path,
)
from dressage_operator.limits import limit_errors
from dressage_operator.metrics import OperatorMetrics, version_span_limit
from dressage_operator.observe import PodInfo, pod_info
from dressage_operator.plan import Applied, ChildResult, Observed, Plan
from dressage_operator.scrape import scrape
from dressage_operator.settle import CONFLICT_RETRY_SECONDS, backoff, settle
from dressage_operator.staleness_scrape import ScrapeResult
from dressage_operator.validation import spec_errors

Logger = logging.Logger | logging.LoggerAdapter[Any]
FINALIZER = "dressage.io/finalizer"
SETTLE_SECONDS = 0.1


def configure_settings(settings: kopf.OperatorSettings) -> None:
    """kopf settings, each chosen on purpose."""
    # Progress and diff-base annotations under our own prefix, not kopf's defaults.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="dressage.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="dressage.io", key="last-handled-configuration"
    )
    # The daemon needs a finalizer so it is stopped before the job disappears.
    settings.persistence.finalizer = FINALIZER
    # Server-side watch timeout below the client one: the server ends streams cleanly and kopf
    # reconnects; the client timeout only catches a stalled connection.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    settings.networking.request_timeout = 60
    # Only warnings and errors of handlers become Kubernetes Events; phase transitions are
    # posted explicitly. Normal chatter stays in the operator's log.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "dressage-operator"
    # A single replica (the chart runs one, with a Recreate strategy): no peering objects.
    settings.peering.standalone = True
    # The operator serves the namespaces it is told; it never lists all namespaces or CRDs.
    settings.scanning.disabled = True


@dataclass
class JobState:
    """In-memory state of one job's reconcile loop."""

    wake: asyncio.Event = field(default_factory=asyncio.Event)
    handled_failures: frozenset[str] = frozenset()
    next_scrape: datetime | None = None
    errors: int = 0
    """Consecutive cycles that raised (the API server unreachable, say): the error backoff."""
    refused_cycles: int = 0
    infrastructure_checked: tuple[int, datetime | None] = (-1, None)
    """(generation, time) of the last ConfigMap/Service check that every write passed."""
    children_checked: tuple[str, tuple[tuple[str, str], ...]] = ("", ())
    """(the checked job, as JSON; what `preflight` found in its children): checked once."""
    blocked: dict[tuple[str, str], ChildResult] = field(default_factory=dict)
    """Writes the API server refused permanently, by (kind, name), for `blocked_for`."""
    blocked_for: tuple[str, int] = ("", -1)
    """(uid, generation) of the job object whose spec those refusals hold for."""


@dataclass
class Runtime:
    """Operator-wide resources, created at startup and shared through kopf's memo."""

    config: OperatorConfig
    kube: Kube
    scraper: httpx.AsyncClient
    metrics: OperatorMetrics
    jobs: dict[tuple[str, str], JobState] = field(default_factory=dict)
    metrics_server: Any = None
    schema_release: str = children_check.DEFAULT_SCHEMA_RELEASE
    """The Kubernetes release whose schemas check the children: the API server's own."""

    def wake(self, namespace: str | None, job: str | None) -> None:
        state = self.jobs.get((namespace or "", job or ""))
        if state is not None:
            state.wake.set()


def connection(settings: kopf.OperatorSettings) -> kopf.ConnectionInfo:
    info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(
        settings=settings
    )
    if info is None:
        raise kopf.PermanentError("no service account and no kubeconfig to log in with")
    return info


@kopf.on.login(id="dressage-login")
def login(settings: kopf.OperatorSettings, **_: Any) -> kopf.ConnectionInfo:
    """Log in from the pod's service account, else from KUBECONFIG (read at call time)."""
    return connection(settings)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    configure_settings(settings)
    # One line per HTTP request to the API server or a scrape target is noise, not a log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    # The CLI passes its configuration in the memo; `kopf run -m` leaves it to the env.
    config = getattr(memo, "config", None) or OperatorConfig.from_env()
    metrics = OperatorMetrics()
    server = None
    if config.metrics_port:
        server, _thread = start_http_server(config.metrics_port, registry=metrics.registry)
    kube = Kube(client_from_connection(connection(settings)))
    version = await kube.server_version()
    memo.runtime = Runtime(
        config=config,
        kube=kube,
        scraper=httpx.AsyncClient(),
        metrics=metrics,
        metrics_server=server,
        schema_release=schemas.schema_release(version, children_check.DEFAULT_SCHEMA_RELEASE),
    )


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = getattr(memo, "runtime", None)
    if runtime is None:
        return
    await runtime.kube.client.aclose()
    await runtime.scraper.aclose()
    if runtime.metrics_server is not None:
        runtime.metrics_server.shutdown()
        runtime.metrics_server.server_close()


@kopf.on.probe(id="jobs")
def probe_jobs(memo: kopf.Memo, **_: Any) -> int:
    """Liveness detail: how many job loops are running."""
    runtime: Runtime | None = getattr(memo, "runtime", None)
    return 0 if runtime is None else len(runtime.jobs)


@kopf.index("pods", labels={naming.LABEL_JOB: kopf.PRESENT})
def pods_by_job(
    namespace: str | None, labels: Mapping[str, str], body: kopf.Body, **_: Any
) -> dict[tuple[str, str], PodInfo] | None:
    info = pod_info(body)
    return None if info is None else {(namespace or "", labels[naming.LABEL_JOB]): info}


@kopf.on.event("pods", labels={naming.LABEL_JOB: kopf.PRESENT})
def pod_event(namespace: str | None, labels: Mapping[str, str], memo: Any, **_: Any) -> None:
    memo.runtime.wake(namespace, labels.get(naming.LABEL_JOB))


@kopf.on.event("apps", "v1", "deployments", labels={naming.LABEL_JOB: kopf.PRESENT})
def deployment_event(namespace: str | None, labels: Mapping[str, str], memo: Any, **_: Any) -> None:
    memo.runtime.wake(namespace, labels.get(naming.LABEL_JOB))


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
def job_event(namespace: str | None, name: str, memo: Any, **_: Any) -> None:
    memo.runtime.wake(namespace, name)


@kopf.daemon(API_GROUP, API_VERSION, PLURAL, id="reconcile", cancellation_timeout=10.0)
async def reconcile_loop(
    name: str,
    namespace: str | None,
    memo: Any,
    logger: Logger,
    **kwargs: Any,
) -> None:
    """The job's reconcile loop; ends when the job is deleted (kopf cancels it)."""
    pods_by_job: kopf.Index[tuple[str, str], PodInfo] = kwargs["pods_by_job"]
    runtime: Runtime = memo.runtime
    namespace = namespace or ""
    key = (namespace, name)
    state = runtime.jobs.setdefault(key, JobState())
    try:
        while True:
            state.wake.clear()
            delay = await _cycle(runtime, state, namespace, name, pods_by_job, logger)
            if delay is None:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), timeout=delay)
            # Creating children sends a burst of events; one cycle answers the whole burst.
            await asyncio.sleep(SETTLE_SECONDS)
    finally:
        runtime.jobs.pop(key, None)
        runtime.metrics.jobs.remove(namespace, name)


async def _cycle(
    runtime: Runtime,
    state: JobState,
    namespace: str,
    name: str,
    pods: kopf.Index[tuple[str, str], PodInfo],
    logger: Logger,
) -> float | None:
    """One timed, counted reconcile; returns the delay until the next or None to stop."""
    started = time.perf_counter()
    try:
        delay, result = await reconcile(runtime, state, namespace, name, pods, logger)
        state.errors = 0
    except Exception as exc:
        runtime.metrics.errors.inc()
        result = "error"
        delay = backoff(state.errors)
        state.errors += 1
        logger.exception(f"reconcile of {namespace}/{name} failed, retrying in {delay}s: {exc}")
    runtime.metrics.reconciles.labels(result=result).inc()
    runtime.metrics.duration.observe(time.perf_counter() - started)
    return delay


def _status_of(body: Mapping[str, Any]) -> AsyncRLJobStatus:
    try:
        return AsyncRLJobStatus.model_validate(body.get("status") or {})
    except ValidationError:
        return AsyncRLJobStatus()


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch turning `old` into `new` (None deletes a key)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = value
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


async def reconcile(
    runtime: Runtime,
    state: JobState,
    namespace: str,
    name: str,
    pods: kopf.Index[tuple[str, str], PodInfo],
    logger: Logger,
) -> tuple[float | None, str]:
    """Read, decide, apply, settle, write: one cycle. Returns (delay or None, result)."""
    kube, config = runtime.kube, runtime.config
    job_path = resource_path(f"{API_GROUP}/{API_VERSION}", PLURAL, namespace, name)
    body = await kube.get(job_path)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return None, "ok"
    now = datetime.now(UTC)
    previous = _status_of(body)
    job, errors = spec_errors(body, f"{namespace}/{name}")
    over = () if job is None or errors else tuple(limit_errors(job.spec, config.limits))
    if job is not None and not errors and not over and config.check_children:
        errors = _children_checked(runtime, state, job, name, namespace, body)
    generation = int(body["metadata"].get("generation") or 1)
    if state.blocked_for != (body["metadata"]["uid"], generation):
        state.blocked, state.blocked_for = {}, (body["metadata"]["uid"], generation)
    owner = children.Owner(name=name, namespace=namespace, uid=body["metadata"]["uid"])
    proxy: children.Obj | None = None
    foreign_proxy = False
    scrape_result: ScrapeResult | None = None
    if job is not None and not errors and not over:
        proxy = await kube.get(
            resource_path("apps/v1", "deployments", namespace, naming.proxy(name))
        )
        foreign_proxy = proxy is not None and not _owned(proxy, owner)
        if scrape_due(previous, now, state.next_scrape):
            state.next_scrape = now + timedelta(seconds=config.scrape_seconds)
            url = config.scrape_url(namespace, name)
            scrape_result = await scrape(
                runtime.scraper, url, config.scrape_timeout_seconds, timestamp(now)
            )
    observed = Observed(
        generation=generation,
        status=previous,
        now=now,
        pods=tuple(pods.get((namespace, name), ())),
        proxy_present=proxy is not None and not foreign_proxy,
        proxy_ready=0
        if foreign_proxy
        else int(((proxy or {}).get("status") or {}).get("readyReplicas") or 0),
        handled_failures=state.handled_failures,
        scrape=scrape_result,
        spec_errors=errors,
        limit_errors=over,
        infrastructure_checked=state.infrastructure_checked,
        refused_cycles=state.refused_cycles,
        blocked=tuple(state.blocked.values()),
    )
    plan = decide(job, owner, config, observed)
    scale_to = None if job is None or plan.invalid else plan.scale_to
    if scale_to is not None and not await _write_scale(kube, job_path, body, scale_to):
        # The job changed since it was read (`kubectl scale`, an edit): decide again on what
        # it says now; nothing of this cycle is written.
        return CONFLICT_RETRY_SECONDS, "retry"
    results: list[ChildResult] = []
    if job is not None and not plan.invalid:
        results = await _apply(kube, job, owner, config, plan, proxy, state.blocked)
    outcome = settle(plan, observed, config, results)
    state.handled_failures = plan.handled_failures
    state.infrastructure_checked = outcome.infrastructure_checked
    state.refused_cycles = outcome.refused_cycles
    state.blocked = {(r.kind, r.name): r for r in outcome.blocked}

    written = await _write_status(kube, job_path, body, outcome.status)
    if written and plan.invalid:
        logger.error(outcome.status.message)
    for result in results:
        if result.applied is Applied.REFUSED:
            logger.warning(result.describe())
        elif result.applied is Applied.NOT_OWNED:
            logger.warning(f"{namespace}/{result.describe()}")
    limit = None if job is None else version_span_limit(job.spec)
    mode = None if job is None else job.spec.rollout.mode.value
    runtime.metrics.jobs.update(namespace, name, outcome.status, limit, mode)
    for event in outcome.events:
        kopf.event(
            kopf.Body(cast(kopf.RawBody, body)),
            type=event.type,
            reason=event.reason,
            message=event.message,
        )
    if plan.delete_job:
        await kube.delete(job_path)
        logger.info(f"deleted {namespace}/{name}: ttlSecondsAfterFinished passed")
    return outcome.delay, outcome.result


def _children_checked(
    runtime: Runtime,
    state: JobState,
    job: AsyncRLJob,
    name: str,
    namespace: str,
    body: Mapping[str, Any],
) -> tuple[tuple[str, str], ...]:
    """What the API server would refuse in the job's children (`preflight`), checked once per
    job content (spec, labels, annotations)."""
    key = job.model_dump_json()
    if state.children_checked[0] != key:
        owner = children.Owner(name=name, namespace=namespace, uid=body["metadata"]["uid"])
        found = children_check.child_errors(job, owner, runtime.config, runtime.schema_release)
        state.children_checked = (key, tuple(found))
    return state.children_checked[1]


async def _write_scale(kube: Kube, job_path: str, body: Mapping[str, Any], replicas: int) -> bool:
    """Write the autoscaler's engine count through the job's scale subresource, as `kubectl
    scale` does, on the condition that the job is still the one the decision read (its
    resourceVersion); False when it changed meanwhile (409)."""
    version = body["metadata"].get("resourceVersion")
    patch = {"metadata": {"resourceVersion": version}, "spec": {"replicas": replicas}}
    try:
        await kube.patch(job_path + "/scale", patch)
    except Conflict:
        return False
    return True


async def _write_status(
    kube: Kube, job_path: str, body: Mapping[str, Any], status: AsyncRLJobStatus
) -> bool:
    old = body.get("status") or {}
    new = status.to_wire()
    if old == new:
        return False
    await kube.patch(job_path + "/status", {"status": merge_patch(old, new)})
    return True


def _refused(kind: str, name: str, verb: str, exc: KubeError | httpx.HTTPError) -> ChildResult:
    """The API server's refusal of a write; or no answer (a timeout, a lost connection),
    which is a temporary failure without an HTTP code."""
    if isinstance(exc, httpx.HTTPError):
        message = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return ChildResult(kind, name, verb, Applied.REFUSED, None, message)
    field = next((f for f, _ in exc.causes if f), "")
    applied = Applied.CONFLICT if isinstance(exc, Conflict) else Applied.REFUSED
    return ChildResult(kind, name, verb, applied, exc.status, exc.message, field)


def _owned(live: children.Obj, owner: children.Owner) -> bool:
    """Whether an existing object is this job's child (its uid, not just its name)."""
    refs = live.get("metadata", {}).get("ownerReferences") or []
    return any(ref.get("uid") == owner.uid for ref in refs)


async def _ensure(
    kube: Kube,
    desired: children.Obj,
    owner: children.Owner,
    live: children.Obj | None = None,
    fetched: bool = False,
) -> ChildResult:
    """Get-or-create, then patch on drift; objects owned by someone else are left alone."""
    kind, name = desired["kind"], desired["metadata"]["name"]
    path = object_path(desired)
    verb = "create"
    try:
        if not fetched:
            live = await kube.get(path)
        if live is None:
            await kube.create(desired)
            return ChildResult(kind, name, verb, Applied.CREATED)
        if not _owned(live, owner):
            refs = live.get("metadata", {}).get("ownerReferences") or []
            owners = ", ".join(f"{r.get('kind')} uid {r.get('uid')}" for r in refs) or "none"
            message = f"owned by {owners}, not by uid {owner.uid}; left alone until it is deleted"
            return ChildResult(kind, name, verb, Applied.NOT_OWNED, message=message)
        want = desired["metadata"]["annotations"][naming.ANNOTATION_HASH]
        have = (live["metadata"].get("annotations") or {}).get(naming.ANNOTATION_HASH)
        verb = "patch"
        if have == want:
            # Written from this spec; changed by hand since? Set back what the operator renders.
            drifted = drift.drift(desired, live)
            if not drifted:
                return ChildResult(kind, name, verb, Applied.UNCHANGED)
            await kube.patch(path, drift.correction(desired, live))
            return ChildResult(kind, name, verb, Applied.CORRECTED, message=", ".join(drifted))
        await kube.patch(path, drift.correction(desired, live))
        return ChildResult(kind, name, verb, Applied.UPDATED)
    except (KubeError, httpx.HTTPError) as exc:
        return _refused(kind, name, verb, exc)


async def _delete(kube: Kube, kind: str, path: str, name: str) -> ChildResult:
    try:
        await kube.delete(path)
    except (KubeError, httpx.HTTPError) as exc:
        return _refused(kind, name, "delete", exc)
    return ChildResult(kind, name, "delete", Applied.DELETED)


async def _apply(
    kube: Kube,
    job: AsyncRLJob,
    owner: children.Owner,
    config: OperatorConfig,
    plan: Plan,
    proxy: children.Obj | None,
    blocked: Mapping[tuple[str, str], ChildResult],
) -> list[ChildResult]:
    """Make the plan's writes; each answer, refusals included, becomes a `ChildResult`. A
    write to a child the API server refused permanently for this spec generation (`blocked`)
    is not made again: its refusal is reported instead."""

    async def ensure(desired: children.Obj, **kw: Any) -> ChildResult:
        held = blocked.get((desired["kind"], desired["metadata"]["name"]))
        return held if held is not None else await _ensure(kube, desired, owner, **kw)

    async def delete(kind: str, path: str, name: str) -> ChildResult:
        held = blocked.get((kind, name))
        return held if held is not None else await _delete(kube, kind, path, name)

    results: list[ChildResult] = []
    if plan.ensure_infrastructure:
        for obj in children.build_infrastructure(job, owner, config, plan.engines_leaving):
            results.append(await ensure(obj))
    if any(r.applied is Applied.NOT_OWNED for r in results):
        # An earlier job's ConfigMap or Services: pods started now would mount its config.
        return results
    if plan.ensure_proxy:
        desired = children.build_proxy_deployment(job, owner, config)
        results.append(await ensure(desired, live=proxy, fetched=True))
    if plan.delete_proxy:
        proxy_name = naming.proxy(owner.name)
        path = resource_path("apps/v1", "deployments", owner.namespace, proxy_name)
        results.append(await delete("Deployment", path, proxy_name))
    ns = owner.namespace
    results += await asyncio.gather(
        *(delete("Pod", resource_path("v1", "pods", ns, n), n) for n in plan.delete_pods)
    )
    results += await asyncio.gather(
        *(ensure(pod, live=None, fetched=True) for pod in plan.create_pods)
    )
    return results

"""The reconcile decision: observed state in, actions and the next status out (pure).

`decide` is the whole lifecycle of a job in one function without I/O: given the job, what the
operator observes of its pods and proxy, the previous status and the time, it returns which
children to create or delete and what the status becomes. The handlers apply the result.

Lifecycle:
- Pending -> Running when every trainer pod of the current gang is ready.
- A failed trainer pod fails the whole gang: its pods are deleted and recreated with the next
  gang number (`status.restarts`), up to `spec.failurePolicy.maxRestarts`; then Failed. A
  lost trainer pod (one of `status.gangPods` gone, or being deleted, without having failed:
  force-deleted, its node lost) counts the same.
- A failed engine pod is deleted and recreated alone; the trainer is not touched.
- Every trainer pod Succeeded -> Succeeded; engines and proxy are torn down.
- `spec.suspend` deletes all pods and the proxy (Suspended); clearing it recreates them.
- `activeDeadlineSeconds` past `status.startTime` -> Failed (DeadlineExceeded).
- Finished jobs are deleted `ttlSecondsAfterFinished` after `status.completionTime`.

A cycle has two pure steps around the handler's writes: `decide` turns what was observed into a
`Plan` (children to create or delete and a provisional status), the handler applies the plan
and reports one `ChildResult` per write, and `settle` turns plan and results into the status
written once, the Events to post and the delay until the next cycle. A child the API server
refuses shows at once as `ChildrenApplied=False` with the server's message, and a Warning
Event; the cycle is retried with backoff.

Counters are recorded before the pods they count go: a gang restart is counted in one cycle
(status written, no pod deleted) and the old gang is deleted in the next, which sees the new
gang number in the status it reads. A crash or failed status write in between repeats the
count's cycle instead of losing it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from dressage.api.crd import MAX_JOB_NAME_LENGTH
from dressage.api.job import AsyncRLJob
from dressage.api.loader import JobValidationError, validate_job
from dressage.api.status import (
    AsyncRLJobStatus,
    Condition,
    ConditionType,
    JobPhase,
    RoleStatus,
)
from dressage_operator import children, naming, sglang_release
from dressage_operator.children import Obj, Owner
from dressage_operator.config import OperatorConfig
from dressage_operator.observe import PodInfo
from dressage_operator.staleness import ScrapeResult

REASON_INVALID_SPEC = "InvalidSpec"
REASON_LIMIT_EXCEEDED = "LimitExceeded"
"""A valid spec that asks more than this cluster's limits (`dressage_operator.limits`)."""
REASON_DRIFT_CORRECTED = "DriftCorrected"
WAIT_FOR_TERMINATION_SECONDS = 2.0
"""Requeue delay while old pods with the names we need are still terminating."""
CONFLICT_RETRY_SECONDS = 1.0
"""Requeue delay after a create conflicted (the pod index lagged, or an old pod terminates)."""
BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0)
"""Requeue delays after consecutive cycles that failed: a child refused, or the cycle raised."""
MIN_DELAY_SECONDS = 0.05


def backoff(failed_cycles: int) -> float:
    """The delay after `failed_cycles` + 1 consecutive failed cycles."""
    return BACKOFF_SECONDS[min(failed_cycles, len(BACKOFF_SECONDS) - 1)]


def timestamp(now: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes it."""
    return now.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def cluster_errors(job: AsyncRLJob) -> list[tuple[str, str]]:
    """What a valid job model still cannot do on a cluster, where the trainer, the engines and
    the proxy are separate pods (`dressage run` has none of these limits)."""
    errors: list[tuple[str, str]] = []
    errors += storage_errors(job)
    model = job.spec.model
    tokenizer = model.tokenizer
    if tokenizer and type(model)(source=tokenizer).is_hub_id:
        errors.append(
            (
                "spec.model.tokenizer",
                f"{tokenizer!r} is a Hugging Face id; only spec.model.source is staged onto "
                "the job's storage and the proxy needs a local tokenizer.json: leave it unset "
                "to use the model's own tokenizer, or give a path on the job's storage",
            )
        )
    return errors


def storage_errors(job: AsyncRLJob) -> list[tuple[str, str]]:
    """What the job needs shared storage for. With disk weight sync the engines load every
    version from it; with distributed sync the weights go over the network and storage holds
    only the staged model and the checkpoints, which a one-node trainer may keep on its own
    pod (they then last as long as the pod). A trainer of several nodes shares its model cache
    and checkpoint directory between its pods, so it needs the claim either way."""
    spec = job.spec
    if spec.storage.persistent_volume_claim:
        return []
    field = "spec.storage.persistentVolumeClaim"
    if spec.inference.weight_sync == "disk":
        return [
            (
                field,
                "required on a cluster with spec.inference.weightSync 'disk': the trainer, the "
                "engines and the proxy are separate pods that share the model, the weights the "
                "trainer publishes and the checkpoints through it; name a ReadWriteMany "
                "PersistentVolumeClaim, or set spec.inference.weightSync to 'distributed' "
                "(then a one-node trainer may run without one, its checkpoints lasting only "
                "as long as its pod)",
            )
        ]
    if spec.trainer.nodes > 1:
        return [
            (
                field,
                f"required for a trainer of {spec.trainer.nodes} nodes (spec.trainer.nodes), "
                "even with spec.inference.weightSync 'distributed': its pods share the model "
                "cache and the checkpoint directory through it; name a ReadWriteMany "
                "PersistentVolumeClaim",
            )
        ]
    return []


def spec_errors(
    body: Mapping[str, Any], source: str
) -> tuple[AsyncRLJob | None, tuple[tuple[str, str], ...]]:
    """Validate a job object as read from the API server: the job model, the checks the CRD
    makes with CEL (for API servers that skipped them) and what a cluster cannot run
    (`cluster_errors`). Returns the job (None when the model refuses it) and every
    `(field, message)` at fault."""
    errors: list[tuple[str, str]] = []
    job = None
    try:
        job = validate_job(dict(body), source)
    except JobValidationError as exc:
        errors += exc.errors
    if job is not None:
        errors += cluster_errors(job)
    name = str((body.get("metadata") or {}).get("name", ""))
    if len(name) > MAX_JOB_NAME_LENGTH or not name[:1].isalpha():
        errors.append(
            (
                "metadata.name",
                f"must start with a letter and be at most {MAX_JOB_NAME_LENGTH} characters",
            )
        )
    return job, tuple(errors)


def scrape_due(previous: AsyncRLJobStatus, now: datetime, next_scrape: datetime | None) -> bool:
    """Whether this cycle reads the job's metrics: only a running job, at most once per
    scrape interval (the caller keeps `next_scrape`)."""
    return previous.phase is JobPhase.RUNNING and (next_scrape is None or now >= next_scrape)


@dataclass(frozen=True)
class Observed:
    """Everything `decide` and `settle` look at besides the spec."""

    generation: int
    status: AsyncRLJobStatus
    now: datetime
    pods: tuple[PodInfo, ...] = ()
    proxy_present: bool = False
    proxy_ready: int = 0
    handled_failures: frozenset[str] = frozenset()
    """uids of failed engine pods already counted (the pod index may lag a deletion)."""
    scrape: ScrapeResult | None = None
    spec_errors: tuple[tuple[str, str], ...] = ()
    """`(field, message)` pairs the spec fails on (`spec_errors`); any makes the job Failed."""
    limit_errors: tuple[tuple[str, str], ...] = ()
    """`(field, message)` pairs of fields above this cluster's limits (`limits.limit_errors`):
    refused like an invalid spec, with reason `LimitExceeded`."""
    infrastructure_checked: tuple[int, datetime | None] = (-1, None)
    """(generation, time) of the last ConfigMap/Service check that every write passed."""
    refused_cycles: int = 0
    """Consecutive previous cycles in which the API server refused a child (the backoff)."""


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass
class Plan:
    """What to do this cycle."""

    status: AsyncRLJobStatus
    """The status before the writes' results are known (`settle` completes it)."""
    create_pods: list[Obj] = field(default_factory=list)
    delete_pods: list[str] = field(default_factory=list)
    ensure_infrastructure: bool = False
    """Get-or-create-or-patch the ConfigMap and Services: when the generation changed, after
    a check that did not pass, and once per resync interval (to undo manual drift)."""
    ensure_proxy: bool = False
    delete_proxy: bool = False
    delete_job: bool = False
    requeue_after: float | None = None
    events: list[Event] = field(default_factory=list)
    handled_failures: frozenset[str] = frozenset()
    invalid: bool = False
    """The spec is invalid: nothing is written but the status."""


class Applied(StrEnum):
    """How one write of the plan went."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    DELETED = "deleted"
    CONFLICT = "conflict"
    """409 on create: the name is still taken (an old pod terminating, or the index lagged)."""
    NOT_OWNED = "not-owned"
    """An object with the child's name exists and is another owner's (an earlier job of the
    same name, whose children the garbage collector has yet to delete): left alone, and shown
    like a refusal until it is gone."""
    REFUSED = "refused"
    """The API server answered with an error (422 Invalid, 403 Forbidden, ...)."""
    CORRECTED = "corrected"
    """The child was written from the job's current spec but had drifted (edited or scaled by
    hand): set back; `ChildResult.message` names the fields."""


VERB_OF_EVENT = {"create": "FailedCreate", "patch": "FailedUpdate", "delete": "FailedDelete"}
REASON_NOT_OWNED = "ChildNotOwned"


def _event_reason(result: ChildResult) -> str:
    if result.applied is Applied.NOT_OWNED:
        return REASON_NOT_OWNED
    return VERB_OF_EVENT[result.verb]


@dataclass(frozen=True)
class ChildResult:
    """One write of the plan (create, patch or delete of a child) and the API server's answer."""

    kind: str
    name: str
    verb: str
    """`create`, `patch` or `delete`."""
    applied: Applied
    code: int | None = None
    """HTTP status of a refusal or conflict."""
    message: str = ""
    """The API server's message."""
    field: str = ""
    """The first field the API server names (`details.causes[].field`), if any."""

    def describe(self) -> str:
        if self.applied is Applied.NOT_OWNED:
            return f"{self.kind} {self.name} exists and is not this job's: {self.message}"
        text = f"{self.kind} {self.name}: {self.verb} refused (HTTP {self.code}): {self.message}"
        if self.field and self.field not in self.message:
            text += f" (field {self.field})"
        return text


@dataclass(frozen=True)
class Outcome:
    """The end of a cycle: what to write, post and remember, and when to run again."""

    status: AsyncRLJobStatus
    events: list[Event]
    delay: float | None
    """Seconds until the next cycle; None ends the job's loop (the job is being deleted)."""
    result: str
    """`ok`, `retry` (a conflict), `refused` or `invalid`: the reconcile counter's label."""
    infrastructure_checked: tuple[int, datetime | None]
    refused_cycles: int


class _Conditions:
    """Sets conditions, keeping `lastTransitionTime` when the status does not change."""

    def __init__(self, status: AsyncRLJobStatus, now: datetime, generation: int) -> None:
        self.status = status
        self.now = timestamp(now)
        self.generation = generation

    def get(self, ctype: ConditionType) -> Condition | None:
        return next((c for c in self.status.conditions if c.type == ctype.value), None)

    def set(self, ctype: ConditionType, value: bool, reason: str, message: str = "") -> None:
        text = "True" if value else "False"
        old = self.get(ctype)
        changed = old is None or old.status != text
        new = Condition(
            type=ctype.value,
            status=text,
            reason=reason,
            message=message,
            last_transition_time=self.now if changed or old is None else old.last_transition_time,
            observed_generation=self.generation,
        )
        others = [c for c in self.status.conditions if c.type != ctype.value]
        self.status.conditions = sorted([*others, new], key=lambda c: c.type)


def invalid_spec_status(
    previous: AsyncRLJobStatus,
    errors: list[tuple[str, str]],
    generation: int,
    now: datetime,
    reason: str = REASON_INVALID_SPEC,
) -> AsyncRLJobStatus:
    """The status of a job whose spec fails validation (or asks more than the cluster's
    limits, `reason` `LimitExceeded`): Failed, and a SpecValid=False condition whose message
    names each field at fault."""
    status = previous.model_copy(deep=True)
    message = "; ".join(f"{path}: {msg}" for path, msg in errors)
    conds = _Conditions(status, now, generation)
    conds.set(ConditionType.SPEC_VALID, False, reason, message)
    conds.set(ConditionType.FAILED, True, reason, message)
    status.phase = JobPhase.FAILED
    status.observed_generation = generation
    status.message = f"invalid spec: {message}"
    return status


def _role(desired: int, ready: int, previous: RoleStatus) -> RoleStatus:
    return RoleStatus(
        desired=desired, ready=ready, failed=previous.failed, restarts=previous.restarts
    )


class _Decider:
    """The decision for a valid spec, as a few small steps sharing the plan being built."""

    def __init__(
        self, job: AsyncRLJob, owner: Owner, config: OperatorConfig, obs: Observed
    ) -> None:
        self.job = job
        self.spec = job.spec
        self.owner = owner
        self.config = config
        self.obs = obs
        status = obs.status.model_copy(deep=True)
        status.observed_generation = obs.generation
        self.plan = Plan(status=status, handled_failures=obs.handled_failures)
        self.st = status
        self.conds = _Conditions(status, obs.now, obs.generation)
        # Pods with the job's labels but another job's uid are left by an earlier job of the
        # same name (the garbage collector is deleting them): never adopted, never counted;
        # their names are not taken over until they are gone.
        own = [p for p in obs.pods if p.owner_uid == owner.uid]
        self.foreign = {p.name for p in obs.pods if p.owner_uid != owner.uid}
        self.trainers = [p for p in own if p.role == naming.ROLE_TRAINER]
        self.engines = [p for p in own if p.role == naming.ROLE_INFERENCE]

    # --- helpers -------------------------------------------------------------------------
    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def set_phase(self, phase: JobPhase, message: str) -> None:
        if self.st.phase is not phase:
            warn = phase in (JobPhase.FAILED, JobPhase.RESTARTING)
            self.event("Warning" if warn else "Normal", phase.value, message)
        self.st.phase = phase
        self.st.message = message

    def create(self, pod: Obj) -> None:
        if pod["metadata"]["name"] in self.foreign:
            self.requeue(WAIT_FOR_TERMINATION_SECONDS)
        else:
            self.plan.create_pods.append(pod)

    def delete(self, pods: list[PodInfo]) -> None:
        for pod in pods:
            if not pod.terminating and pod.name not in self.plan.delete_pods:
                self.plan.delete_pods.append(pod.name)

    def teardown_serving(self) -> None:
        self.delete(self.engines)
        if self.obs.proxy_present:
            self.plan.delete_proxy = True

    def finish(self, succeeded: bool, reason: str, message: str) -> None:
        self.st.completion_time = timestamp(self.obs.now)
        ctype = ConditionType.SUCCEEDED if succeeded else ConditionType.FAILED
        self.conds.set(ctype, True, reason, message)
        self.set_phase(JobPhase.SUCCEEDED if succeeded else JobPhase.FAILED, message)
        self.teardown_serving()
        if not succeeded:
            self.delete([p for p in self.trainers if not (p.failed or p.succeeded)])
        self.schedule_ttl()

    def schedule_ttl(self) -> None:
        ttl = self.spec.ttl_seconds_after_finished
        done = parse_timestamp(self.st.completion_time)
        if ttl is None or done is None:
            return
        remaining = (done + timedelta(seconds=ttl) - self.obs.now).total_seconds()
        if remaining <= 0:
            self.plan.delete_job = True
        else:
            self.plan.requeue_after = remaining

    def requeue(self, seconds: float) -> None:
        current = self.plan.requeue_after
        self.plan.requeue_after = seconds if current is None else min(current, seconds)

    # --- the decision --------------------------------------------------------------------
    def run(self) -> Plan:
        self.conds.set(ConditionType.SPEC_VALID, True, "Valid", "")
        release = sglang_release.check(
            self.spec.inference.sglang_version, self.conds.get(sglang_release.CONDITION)
        )
        self.conds.set(sglang_release.CONDITION, release.untested, release.reason, release.message)
        if release.warn:
            self.event("Warning", release.reason, release.message)
        self.apply_scrape()
        failed = self.conds.get(ConditionType.FAILED)
        refused = (REASON_INVALID_SPEC, REASON_LIMIT_EXCEEDED)
        if self.st.phase is JobPhase.FAILED and failed and failed.reason in refused:
            # The spec was fixed: start over.
            self.conds.set(ConditionType.FAILED, False, "SpecCorrected", "")
            self.st.completion_time = None
            self.set_phase(JobPhase.PENDING, "spec corrected")
        if self.st.phase.finished:
            self.teardown_serving()
            if self.st.phase is JobPhase.FAILED:
                self.delete([p for p in self.trainers if not (p.failed or p.succeeded)])
            self.schedule_ttl()
        elif self.spec.suspend:
            self.suspend()
        else:
            self.run_active()
        self.count()
        return self.plan

    def apply_scrape(self) -> None:
        scrape = self.obs.scrape
        if scrape is None:
            return
        if scrape.staleness is not None:
            previous = self.st.staleness
            unchanged = scrape.staleness.model_copy(
                update={"last_scrape_time": previous.last_scrape_time}
            )
            # Unchanged figures keep their timestamp: an idle job's status is not rewritten.
            self.st.staleness = previous if unchanged == previous else scrape.staleness
            self.conds.set(ConditionType.METRICS_AVAILABLE, True, "Scraped", scrape.url)
        else:
            message = f"{scrape.url}: {scrape.error}"
            self.conds.set(ConditionType.METRICS_AVAILABLE, False, "ScrapeFailed", message)

    def suspend(self) -> None:
        self.delete(self.trainers)
        self.st.gang_pods = []
        self.teardown_serving()
        self.st.start_time = None
        self.conds.set(ConditionType.SUSPENDED, True, "JobSuspended", "spec.suspend is true")
        self.set_phase(JobPhase.SUSPENDED, "suspended: pods deleted, job kept")

    def infrastructure_due(self) -> bool:
        generation, checked_at = self.obs.infrastructure_checked
        if generation != self.obs.generation or checked_at is None:
            return True
        return (self.obs.now - checked_at).total_seconds() >= self.config.resync_seconds

    def run_active(self) -> None:
        spec = self.spec
        self.plan.ensure_infrastructure = self.infrastructure_due()
        suspended = self.conds.get(ConditionType.SUSPENDED)
        if suspended and suspended.status == "True":
            self.conds.set(ConditionType.SUSPENDED, False, "JobResumed", "spec.suspend is false")
            self.set_phase(JobPhase.PENDING, "resumed")
        elif suspended is None:
            self.conds.set(ConditionType.SUSPENDED, False, "NotSuspended")

        start = parse_timestamp(self.st.start_time)
        deadline = spec.active_deadline_seconds
        if deadline is not None and start is not None:
            elapsed = (self.obs.now - start).total_seconds()
            if elapsed >= deadline:
                self.finish(
                    False,
                    "DeadlineExceeded",
                    f"job ran {int(elapsed)}s, longer than spec.activeDeadlineSeconds={deadline}",
                )
                self.delete(self.trainers)
                return
            self.requeue(deadline - elapsed)

        gang = self.st.restarts
        current = {p.index: p for p in self.trainers if p.gang == gang}
        self.delete([p for p in self.trainers if p.gang != gang])
        failed = sorted((p for p in current.values() if p.failed), key=lambda p: p.index)
        lost = self.lost_trainers(current)
        if failed or lost:
            self.trainer_failed(failed, lost)
            return
        outdated = self.outdated_trainers(current)
        if outdated:
            self.roll_out_trainer(outdated)
            return
        self.st.gang_pods = sorted(
            set(self.st.gang_pods)
            | {p.name for i, p in current.items() if i < spec.trainer.nodes and not p.terminating}
        )
        nodes = spec.trainer.nodes
        if all(i in current and current[i].succeeded for i in range(nodes)):
            self.finish(True, "TrainerCompleted", f"all {nodes} trainer pods completed")
            return

        present = {p.name for p in self.trainers}
        for pod in children.build_trainer_pods(self.job, self.owner, self.config, gang):
            name = pod["metadata"]["name"]
            if name not in present:
                self.create(pod)
            elif current.get(int(pod["metadata"]["labels"][naming.LABEL_INDEX])) is None:
                self.requeue(WAIT_FOR_TERMINATION_SECONDS)  # an old gang's pod is going away
        if self.st.start_time is None:
            self.st.start_time = timestamp(self.obs.now)

        self.reconcile_engines()
        self.roll_out_engines()
        self.plan.ensure_proxy = True

        ready = sum(1 for p in current.values() if p.ready)
        if ready >= nodes:
            self.set_phase(JobPhase.RUNNING, f"{nodes}/{nodes} trainer pods running")
        elif self.st.phase is not JobPhase.RESTARTING:
            message = f"{ready}/{nodes} trainer pods ready"
            if self.foreign:
                message += (
                    f"; waiting for {len(self.foreign)} pods of an earlier job of this name "
                    "to be deleted"
                )
            self.set_phase(JobPhase.PENDING, message)

    def lost_trainers(self, current: dict[int, PodInfo]) -> list[str]:
        """Pods of the current gang seen created and now gone, or being deleted, without
        having failed or succeeded: someone force-deleted them or their node was lost. The
        operator deletes current-gang pods only when the job suspends or finishes."""
        by_name = {p.name: p for p in current.values()}
        lost = []
        for name in self.st.gang_pods:
            pod = by_name.get(name)
            if pod is None or (pod.terminating and not (pod.failed or pod.succeeded)):
                lost.append(name)
        return lost

    def outdated_trainers(self, current: dict[int, PodInfo]) -> list[PodInfo]:
        """Pods of the current gang that run something else than the job says
        (`children.trainer_inputs`: `spec.trainer` and what the trainer reads from `job.yaml`),
        or a rank the job no longer has. Pods without the annotation (written by an older
        operator) are left to run."""
        want = children.trainer_spec_hash(self.job)
        nodes = self.spec.trainer.nodes
        return sorted(
            (
                p
                for p in current.values()
                if not p.terminating
                and not p.succeeded
                and (p.index >= nodes or (p.role_spec and p.role_spec != want))
            ),
            key=lambda p: p.index,
        )

    def roll_out_trainer(self, outdated: list[PodInfo]) -> None:
        """A gang restart from the checkpoint that starts what the job now says: counted
        in `status.restarts` (the new gang's number) and `status.specRestarts`, never against
        `maxRestarts`. As for a failure, the count is written first and the old gang deleted
        next cycle."""
        self.st.gang_pods = []
        self.st.restarts += 1
        self.st.spec_restarts += 1
        self.st.trainer.restarts = self.st.restarts
        names = ", ".join(p.name for p in outdated)
        nodes = self.spec.trainer.nodes
        message = (
            f"what the trainer runs changed ({names} run the previous spec); gang restart "
            f"{self.st.restarts} with {nodes} trainer pods from the last checkpoint"
        )
        self.event("Normal", "TrainerRollout", message)
        self.requeue(0.0)
        self.set_phase(JobPhase.RESTARTING, message)
        self.reconcile_engines()
        self.plan.ensure_proxy = True

    def trainer_failed(self, failed: list[PodInfo], lost: list[str]) -> None:
        limit = self.spec.failure_policy.max_restarts
        if failed:
            first = failed[0]
            why = f"trainer pod {first.name} failed" + (f": {first.reason}" if first.reason else "")
        else:
            why = f"trainer pod {lost[0]} was lost (deleted without failing, or its node lost)"
            self.event("Warning", "TrainerPodLost", why)
        self.st.trainer.failed += len(failed) + len(lost)
        self.st.gang_pods = []
        spent = self.st.restarts - self.st.spec_restarts
        if spent < limit:
            # Counted now, deleted next cycle (as an old gang): the count is written first.
            self.st.restarts += 1
            self.st.trainer.restarts = self.st.restarts
            self.requeue(0.0)
            self.set_phase(JobPhase.RESTARTING, f"{why}; gang restart {spent + 1}/{limit}")
            self.reconcile_engines()
            self.plan.ensure_proxy = True
        else:
            self.finish(
                False,
                "MaxRestartsExceeded",
                f"{why}; spec.failurePolicy.maxRestarts={limit} gang restarts exhausted",
            )

    def reconcile_engines(self) -> None:
        replicas = self.spec.inference.replicas
        by_name = {p.name: p for p in self.engines}
        handled = set(self.plan.handled_failures)
        for pod in children.build_engine_pods(self.job, self.owner, self.config):
            name = pod["metadata"]["name"]
            seen = by_name.get(name)
            if seen is None:
                self.create(pod)
            elif (seen.failed or seen.succeeded) and not seen.terminating:
                if seen.uid not in handled:
                    handled.add(seen.uid)
                    self.st.inference.failed += 1
                    self.st.inference.restarts += 1
                    self.event(
                        "Warning",
                        "EngineReplaced",
                        f"engine pod {name} {seen.phase.lower()}"
                        + (f": {seen.reason}" if seen.reason else "")
                        + "; replacing it alone",
                    )
                self.delete([seen])
        self.delete([p for p in self.engines if p.index >= replicas])
        self.plan.handled_failures = frozenset(handled)

    def roll_out_engines(self) -> None:
        """Replace engines that run something else than the job says
        (`children.engine_inputs`: image, resources, arguments, template, dtype, ...), one at
        a time: an outdated engine that is not ready goes at once; a ready one only while every
        other engine is ready and none is being replaced, so at most one engine is out of
        service for the rollout."""
        want = children.engine_spec_hash(self.job)
        replicas = self.spec.inference.replicas
        live = [p for p in self.engines if p.index < replicas and not p.terminating]
        outdated = sorted(
            (
                p
                for p in live
                if p.role_spec and p.role_spec != want and p.name not in self.plan.delete_pods
            ),
            key=lambda p: p.index,
        )
        if not outdated:
            return
        victim = next((p for p in outdated if not p.ready), None)
        if victim is None:
            busy = any(p.terminating for p in self.engines) or any(
                pod["metadata"]["labels"].get(naming.LABEL_ROLE) == naming.ROLE_INFERENCE
                for pod in self.plan.create_pods
            )
            if busy or len(live) < replicas or not all(p.ready for p in live):
                return
            victim = outdated[0]
        self.delete([victim])
        self.event(
            "Normal",
            "EngineRollout",
            f"engine pod {victim.name} replaced to apply the changed spec "
            f"({len(outdated) - 1} more to go)",
        )

    def count(self) -> None:
        spec = self.spec
        gang = self.st.restarts
        active = not self.st.phase.finished and self.st.phase is not JobPhase.SUSPENDED
        trainer_ready = sum(1 for p in self.trainers if p.gang == gang and p.ready)
        engine_ready = sum(1 for p in self.engines if p.ready and not p.terminating)
        proxy_ready = self.obs.proxy_ready if self.obs.proxy_present else 0
        st = self.st
        st.trainer = _role(spec.trainer.nodes if active else 0, trainer_ready, st.trainer)
        st.inference = _role(spec.inference.replicas if active else 0, engine_ready, st.inference)
        st.proxy = _role(spec.proxy.replicas if active else 0, proxy_ready, st.proxy)
        for ctype, role in (
            (ConditionType.TRAINER_READY, st.trainer),
            (ConditionType.INFERENCE_READY, st.inference),
            (ConditionType.PROXY_READY, st.proxy),
        ):
            ok = active and role.ready >= role.desired
            reason = "AllReady" if ok else ("NotActive" if not active else "Waiting")
            self.conds.set(ctype, ok, reason, f"{role.ready}/{role.desired} ready")


def decide(job: AsyncRLJob | None, owner: Owner, config: OperatorConfig, obs: Observed) -> Plan:
    """Compute this cycle's actions and the job's provisional status. `job` is None, or
    `obs.spec_errors` is not empty, when the spec is invalid: then the plan writes nothing but
    a Failed status naming each field, and is not retried before the resync (or a change)."""
    if job is None or obs.spec_errors or obs.limit_errors:
        reason = REASON_INVALID_SPEC if job is None or obs.spec_errors else REASON_LIMIT_EXCEEDED
        errors = [*obs.spec_errors, *obs.limit_errors]
        status = invalid_spec_status(obs.status, errors, obs.generation, obs.now, reason)
        return Plan(
            status=status,
            requeue_after=config.resync_seconds,
            handled_failures=obs.handled_failures,
            invalid=True,
        )
    plan = _Decider(job, owner, config, obs).run()
    if len(plan.create_pods) > config.max_creates_per_cycle:
        # Fairness: the rest next cycle, after the other jobs' loops had their turn.
        plan.create_pods = plan.create_pods[: config.max_creates_per_cycle]
        plan.requeue_after = 0.0
    return plan


def settle(
    plan: Plan, obs: Observed, config: OperatorConfig, results: Sequence[ChildResult]
) -> Outcome:
    """The status to write, the Events to post and the next delay, from the plan and what the
    API server answered to each of its writes.

    `ChildrenApplied` is False while a child is refused, its reason naming the kind
    (`PodRefused`) and its message each refused child, the API server's message and field; a
    Warning Event per refused write is posted when the refusal is new or says something else.
    A refusal backs off (`BACKOFF_SECONDS`); a conflict retries soon."""
    status = plan.status.model_copy(deep=True)
    events = list(plan.events)
    if plan.invalid:
        return Outcome(
            status=status,
            events=events,
            delay=plan.requeue_after,
            result="invalid",
            infrastructure_checked=obs.infrastructure_checked,
            refused_cycles=0,
        )
    conds = _Conditions(status, obs.now, obs.generation)
    refused = [r for r in results if r.applied in (Applied.REFUSED, Applied.NOT_OWNED)]
    conflicted = any(r.applied is Applied.CONFLICT for r in results)
    if refused:
        message = "; ".join(r.describe() for r in refused)
        previous = conds.get(ConditionType.CHILDREN_APPLIED)
        if previous is None or previous.status != "False" or previous.message != message:
            events += [Event("Warning", _event_reason(r), r.describe()) for r in refused]
        how = "NotOwned" if refused[0].applied is Applied.NOT_OWNED else "Refused"
        conds.set(ConditionType.CHILDREN_APPLIED, False, f"{refused[0].kind}{how}", message)
    else:
        conds.set(ConditionType.CHILDREN_APPLIED, True, "Applied")
    events += [
        Event(
            "Warning",
            REASON_DRIFT_CORRECTED,
            f"{r.kind} {r.name} differed from what the job says ({r.message}): set back",
        )
        for r in results
        if r.applied is Applied.CORRECTED
    ]

    checked = obs.infrastructure_checked
    if plan.ensure_infrastructure:
        infra = {"ConfigMap", "Service", "NetworkPolicy"}
        failed = any(
            r.kind in infra and r.applied in (Applied.REFUSED, Applied.CONFLICT, Applied.NOT_OWNED)
            for r in results
        )
        checked = (-1, None) if failed else (obs.generation, obs.now)

    delay: float | None = None
    if not plan.delete_job:
        delay = config.resync_seconds
        if status.phase is JobPhase.RUNNING:
            delay = min(delay, config.scrape_seconds)
        if plan.requeue_after is not None:
            delay = min(delay, plan.requeue_after)
        if conflicted:
            delay = min(delay, CONFLICT_RETRY_SECONDS)
        if refused:
            delay = min(delay, backoff(obs.refused_cycles))
        delay = max(delay, MIN_DELAY_SECONDS)
    return Outcome(
        status=status,
        events=events,
        delay=delay,
        result="refused" if refused else "retry" if conflicted else "ok",
        infrastructure_checked=checked,
        refused_cycles=obs.refused_cycles + 1 if refused else 0,
    )

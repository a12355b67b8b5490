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
- A pod that does not start or keeps failing (Unschedulable, ImagePullBackOff,
  CreateContainerConfigError, CrashLoopBackOff, OOMKilled) is named on the top line, in
  condition `PodsHealthy` and by a Warning Event (`pod_problems`); the phase stays.
- Every trainer pod Succeeded -> Succeeded; engines and proxy are torn down.
- `spec.suspend` deletes all pods and the proxy (Suspended); clearing it recreates them.
- `activeDeadlineSeconds` past `status.startTime` -> Failed (DeadlineExceeded).
- Finished jobs are deleted `ttlSecondsAfterFinished` after `status.completionTime`.

A cycle has two pure steps around the handler's writes: `decide` turns what was observed into a
`Plan` (children to create or delete and a provisional status), the handler applies the plan
and reports one `ChildResult` per write (the messages are in `plan`), and `settle` turns plan
and results into the status written once, the Events to post and the delay until the next
cycle. A spec that fails validation (`validation`, `limits`, `preflight`) gets a Failed status
naming each field and no writes; a job failed because the API server refused a child
(`settle`, reason `ChildRefused`) starts over when its spec changes.

Counters are recorded before the pods they count go: a gang restart is counted in one cycle
(status written, no pod deleted) and the old gang is deleted in the next, which sees the new
gang number in the status it reads. A crash or failed status write in between repeats the
count's cycle instead of losing it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from dressage.api.job import AsyncRLJob
from dressage.api.status import (
    AdapterStatus,
    AsyncRLJobStatus,
    ConditionType,
    InferenceStatus,
    JobPhase,
    RoleStatus,
)
from dressage_operator import (
    autoscale,
    budget_scale,
    children,
    eval_scrape,
    naming,
    pod_problems,
    sglang_release,
)
from dressage_operator.children import Obj, Owner
from dressage_operator.conditions import Conditions, parse_timestamp, timestamp
from dressage_operator.config import OperatorConfig
from dressage_operator.observe import PodInfo
from dressage_operator.plan import REASON_CHILD_REFUSED, Event, Observed, Plan

REASON_INVALID_SPEC = "InvalidSpec"
REASON_LIMIT_EXCEEDED = "LimitExceeded"
"""A valid spec that asks more than this cluster's limits (`dressage_operator.limits`)."""
WAIT_FOR_TERMINATION_SECONDS = 2.0
"""Requeue delay while old pods with the names we need are still terminating."""


def scrape_due(previous: AsyncRLJobStatus, now: datetime, next_scrape: datetime | None) -> bool:
    """Whether this cycle reads the job's metrics: only a running job, at most once per
    scrape interval (the caller keeps `next_scrape`)."""
    return previous.phase is JobPhase.RUNNING and (next_scrape is None or now >= next_scrape)


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
    conds = Conditions(status, now, generation)
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
        self.conds = Conditions(status, obs.now, obs.generation)
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
        self.describe_adapter()
        failed = self.conds.get(ConditionType.FAILED)
        refused = (REASON_INVALID_SPEC, REASON_LIMIT_EXCEEDED)
        # A child the API server refused fails its spec generation only (`settle`).
        fixed = failed is not None and (
            failed.reason in refused
            or (
                failed.reason == REASON_CHILD_REFUSED
                and failed.observed_generation != self.obs.generation
            )
        )
        if self.st.phase is JobPhase.FAILED and fixed:
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
        self.name_pod_problems()
        self.autoscale()
        return self.plan

    def describe_adapter(self) -> None:
        """`status.adapter`: the LoRA adapter the spec trains (None for full weights); the
        status write patches it only when it changed."""
        lora = self.spec.model.lora
        self.st.adapter = None if lora is None else AdapterStatus(
            rank=lora.rank, alpha=lora.alpha, target_modules=list(lora.target_modules)
        )

    def name_pod_problems(self) -> None:
        """What keeps the job's pods from starting or running, on the top line, in condition
        `PodsHealthy` and as Events (`pod_problems`); nothing of a finished or suspended job,
        whose pods are going."""
        if self.st.phase.finished or self.st.phase is JobPhase.SUSPENDED:
            self.conds.set(ConditionType.PODS_HEALTHY, True, "NotActive")
            return
        previous = self.conds.get(ConditionType.PODS_HEALTHY)
        found = pod_problems.report([*self.trainers, *self.engines], previous, self.st.message)
        self.st.message = found.message
        self.conds.set(
            ConditionType.PODS_HEALTHY, found.healthy, found.reason, found.condition_message
        )
        self.plan.events += [Event(*e) for e in found.events]

    def apply_scrape(self) -> None:
        budget = budget_scale.Budget.of(self.spec)
        if budget is None:
            self.st.conditions = budget_scale.without_budget_condition(self.st.conditions)
        scrape = self.obs.scrape
        if scrape is None:
            return
        found = scrape.budget
        cond = None if budget is None or found is None else budget_scale.condition(budget, found)
        if cond is not None:
            self.conds.set(*cond)
        if scrape.staleness is not None:
            previous = self.st.staleness
            unchanged = scrape.staleness.model_copy(
                update={"last_scrape_time": previous.last_scrape_time}
            )
            # Unchanged figures keep their timestamp: an idle job's status is not rewritten.
            self.st.staleness = previous if unchanged == previous else scrape.staleness
            # The best evaluated version is the status's memory (`eval_scrape`).
            self.st.evaluation = eval_scrape.merge_evaluation(self.st.evaluation, scrape.evaluation)
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
        by_name = {p.name: p for p in self.trainers}
        first: PodInfo | None
        if failed:
            first = failed[0]
            why = f"trainer pod {first.name} failed" + (f": {first.reason}" if first.reason else "")
        else:
            first = by_name.get(lost[0])
            why = f"trainer pod {lost[0]} was lost (deleted without failing, or its node lost)"
        if first is not None and first.disruption:
            # Preempted or evicted (Kueue, the scheduler, a drain): said, and for now counted
            # as a failure; draining such a gang is the seam `observe.disruption` leaves.
            why += f" ({first.disruption})"
        if not failed:
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
        # Scale-down: a graceful delete, whose preStop hook drains the engine through the
        # proxy before SGLang stops; the proxy keeps listing it until the pod is gone.
        leaving = [p for p in self.engines if p.index >= replicas]
        self.delete(leaving)
        self.plan.engines_leaving = tuple(sorted({p.index for p in leaving}))
        if leaving:
            self.plan.ensure_infrastructure = True
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

    def autoscale(self) -> None:
        """The engines' autoscaler (`autoscale.decide_scale`): its record in the status, and
        a new engine count for the handler to write, with an Event saying why."""
        spec = self.spec.inference.autoscaling
        if spec is None:
            self.st.autoscaling = None
            return
        if self.st.phase.finished or self.st.phase is JobPhase.SUSPENDED:
            return
        replicas = self.spec.inference.replicas
        live = [p for p in self.engines if not p.terminating]
        names = {p.name for p in self.engines}
        changing = any(n in names for n in self.plan.delete_pods) or any(
            pod["metadata"]["labels"].get(naming.LABEL_ROLE) == naming.ROLE_INFERENCE
            for pod in self.plan.create_pods
        )
        settled = (
            self.st.phase is JobPhase.RUNNING
            and not changing
            and len(live) == replicas
            and all(p.ready and p.index < replicas for p in live)
        )
        ready = sum(1 for p in live if p.ready)
        scrape = self.obs.scrape
        decision = autoscale.decide_scale(
            spec,
            autoscale.FleetState(replicas=replicas, ready=ready, settled=settled),
            self.st.autoscaling,
            scrape.counters if scrape is not None else None,
            self.obs.now,
            budget_scale.Budget.of(self.spec),
            scrape.budget if scrape is not None else None,
        )
        self.st.autoscaling = decision.status
        if decision.replicas != replicas and decision.event is not None:
            self.plan.scale_to = decision.replicas
            self.event("Normal", decision.event_reason, decision.event)

    def count(self) -> None:
        spec = self.spec
        gang = self.st.restarts
        active = not self.st.phase.finished and self.st.phase is not JobPhase.SUSPENDED
        trainer_ready = sum(1 for p in self.trainers if p.gang == gang and p.ready)
        engine_ready = sum(1 for p in self.engines if p.ready and not p.terminating)
        proxy_ready = self.obs.proxy_ready if self.obs.proxy_present else 0
        st = self.st
        st.trainer = _role(spec.trainer.nodes if active else 0, trainer_ready, st.trainer)
        inference = _role(spec.inference.replicas if active else 0, engine_ready, st.inference)
        st.inference = InferenceStatus(
            **inference.model_dump(),
            # What the scale subresource reads: the engine pods that exist, and how to find
            # them (an HPA on pod metrics selects them so).
            replicas=sum(1 for p in self.engines if not p.terminating),
            selector=naming.selector_string(self.owner.name, naming.ROLE_INFERENCE),
        )
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

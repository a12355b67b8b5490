"""The agent and the collector a job's spec asks for.

All three rollout modes roll out the same prompt groups through the proxy (`group_rollout`:
one answer per trajectory for a single-turn task, our multi-turn agent loop for an environment,
or the job's blackbox program); they differ only in scheduling: `sync` collects a batch and
waits for training, `fully_async` and `partial_async` keep a background worker generating
while the trainer trains, with batch-level staleness control at the batch sink. Both follow the
job's retry policy (`spec.rollout.maxRetries`).
"""

from __future__ import annotations

from collections.abc import Callable

from dressage.agents.blackbox import BlackboxRollout
from dressage.agents.single_turn import PromptSource, SingleTurnRollout
from dressage.agents.whitebox import WhiteboxAgentRollout
from dressage.api.job import AsyncRLJobSpec, RolloutMode
from dressage.api.rl import SpanLimitPolicy
from dressage.data.groups import GroupRollout
from dressage.proxy.client import ProxyRolloutClient, SamplingSettings
from dressage.rollout.budget import BudgetSettings
from dressage.rollout.collector import AsyncRolloutCollector, Collector
from dressage.rollout.retry import RetryPolicy
from dressage.rollout.staleness import StalenessConfig
from dressage.rollout.sync_rollout import SyncCollector
from dressage.tasks.base import FixedLengthTask, has_fixed_lengths, is_environment
from dressage.tasks.codec import TaskPrompts
from dressage.tasks.dataset import use_faults
from dressage.tasks.faults import UserCodeFaults


def sampling_of(spec: AsyncRLJobSpec) -> SamplingSettings:
    return SamplingSettings(
        max_new_tokens=spec.rollout.max_new_tokens,
        temperature=spec.rollout.temperature,
        top_p=spec.rollout.top_p,
    )


def retry_policy_of(spec: AsyncRLJobSpec) -> RetryPolicy:
    """Whole-group retries per `spec.rollout.maxRetries`; the breaker opens when four batches'
    worth of prompt groups in a row were dropped after their last retry."""
    return RetryPolicy(
        max_retries=spec.rollout.max_retries, breaker_after=4 * spec.rollout.batch_size
    )


def weight_update_pause_mode(spec: AsyncRLJobSpec) -> str:
    """How generation pauses around a weight update.

    Synchronous rollout has nothing in flight during a publish (`in_place`). The async modes
    abort in-flight generations at the proxy: with partial rollout they resume from their
    partial output under the new weights, without it the turn is generated again, so a
    trajectory never silently mixes versions.
    """
    return "in_place" if spec.rollout.mode is RolloutMode.SYNC else "abort"


def make_collector(
    spec: AsyncRLJobSpec,
    *,
    source: PromptSource,
    proxy: ProxyRolloutClient,
    run_tag: str,
    faults: UserCodeFaults | None = None,
) -> Collector:
    """The collector for `spec.rollout.mode`, rolling out the job's agent through the proxy;
    `faults`: the run's registry of user-code faults, handed to the agent (and to the task's
    reward function, `use_faults`)."""
    faults = UserCodeFaults() if faults is None else faults
    if isinstance(source, TaskPrompts):
        use_faults(source.task, faults)
    rollout = group_rollout(spec, source=source, proxy=proxy, run_tag=run_tag, faults=faults)
    if spec.rollout.mode is RolloutMode.SYNC:
        return SyncCollector(
            rollout,
            batch_size=spec.rollout.batch_size,
            concurrency=spec.rollout.concurrency,
            retry=retry_policy_of(spec),
        )
    if spec.staleness.auto:  # the controller's first settings; it steers them after each step
        budget = budget_settings(spec)
        return AsyncRolloutCollector(
            rollout,
            batch_size=spec.rollout.batch_size,
            concurrency=budget.start,
            retry=retry_policy_of(spec),
            staleness=StalenessConfig(keep_versions=budget.max_keep),
            queue_size=max(spec.rollout.batch_size, spec.rollout.concurrency),
            admission=True,
            window_on_published=True,  # the budget counts lag from the trainer's version
            mask_keep_versions=mask_keep_versions(spec),
        )
    return AsyncRolloutCollector(
        rollout,
        batch_size=spec.rollout.batch_size,
        concurrency=spec.rollout.concurrency,
        retry=retry_policy_of(spec),
        staleness=StalenessConfig(keep_versions=spec.staleness.keep_versions),
        admission=spec.staleness.admission,
        mask_keep_versions=mask_keep_versions(spec),
    )


RETRY_REFUSED_TRAJECTORY = 2
"""`spanLimitPolicy: retry_trajectory`: runs of a refused trajectory alone before its group
fails (and the retry policy retries the group)."""


def retry_refused_of(spec: AsyncRLJobSpec) -> int:
    """How often a trajectory the span limit refused runs again alone (0: its group fails)."""
    policy = spec.staleness.span_limit_policy
    return RETRY_REFUSED_TRAJECTORY if policy is SpanLimitPolicy.RETRY_TRAJECTORY else 0


def mask_keep_versions(spec: AsyncRLJobSpec) -> int | None:
    """`spanLimitPolicy: mask_old_tokens`: the newest versions of a trajectory trained, the
    span limit's (`maxPartialRolloutPreempts + 1`); None under the other policies."""
    preempts = spec.staleness.span_limit
    if spec.staleness.span_limit_policy is not SpanLimitPolicy.MASK_OLD_TOKENS or preempts is None:
        return None
    return preempts + 1


def budget_settings(spec: AsyncRLJobSpec) -> BudgetSettings:
    """The staleness budget's controller settings of a job in `staleness.mode: auto`: its
    budget, with `rollout.concurrency` as the depth's upper bound."""
    return BudgetSettings.of(
        spec.staleness.effective_budget,
        batch_size=spec.rollout.batch_size,
        max_concurrency=spec.rollout.concurrency,
    )


def group_rollout(
    spec: AsyncRLJobSpec,
    *,
    source: PromptSource,
    proxy: ProxyRolloutClient,
    run_tag: str,
    faults: UserCodeFaults,
) -> GroupRollout:
    """How one prompt group is produced: the whitebox loop, the job's blackbox program, or one
    answer per trajectory."""
    if isinstance(source, TaskPrompts) and is_environment(source.task):
        if spec.task.agent == "blackbox":
            raise ValueError(
                f"spec.task.agent: {source.task.name} is a multi-turn environment that only "
                "the whitebox agent plays; blackbox agents need a single-turn task"
            )
        return WhiteboxAgentRollout(
            environment=source.task,
            codec=source.codec,
            client=proxy,
            group_size=spec.rollout.group_size,
            sampling=sampling_of(spec),
            seed=spec.training.seed,
            run_tag=run_tag,
            faults=faults,
            drop_infrastructure_errors=spec.task.on_reward_error == "drop",
            retry_refused=retry_refused_of(spec),
        )
    lengths = None
    if isinstance(source, TaskPrompts) and has_fixed_lengths(source.task):
        lengths = fixed_lengths(spec, source.task)
    if spec.task.agent == "blackbox":
        if not isinstance(source, TaskPrompts) or is_environment(source.task):
            raise ValueError("a blackbox agent needs a task prompt source")
        if lengths is not None:
            raise ValueError(
                f"spec.task.agent: the {source.task.name} task fixes each response's length, "
                "which only the whitebox agent applies; a blackbox program chooses its own"
            )
        return BlackboxRollout(
            command=spec.task.agent_command or [],
            task=source.task,
            client=proxy,
            group_size=spec.rollout.group_size,
            sampling=sampling_of(spec),
            run_tag=run_tag,
            faults=faults,
            retry_refused=retry_refused_of(spec),
        )
    return SingleTurnRollout(
        source=source,
        client=proxy,
        group_size=spec.rollout.group_size,
        sampling=sampling_of(spec),
        seed=spec.training.seed,
        run_tag=run_tag,
        lengths=lengths,
        retry_refused=retry_refused_of(spec),
    )


def fixed_lengths(spec: AsyncRLJobSpec, task: FixedLengthTask) -> Callable[[int, int], int]:
    """The response length of each trajectory of a task that fixes them, refused when the
    job's generation budget could cut one."""
    if task.max_response_tokens > spec.rollout.max_new_tokens:
        raise ValueError(
            f"spec.rollout.maxNewTokens ({spec.rollout.max_new_tokens}) is below the longest "
            f"response the {task.name} task asks for ({task.max_response_tokens}, its "
            f"maxTokens): raise maxNewTokens to at least {task.max_response_tokens}"
        )
    return task.response_tokens

"""The job's evaluator, wired as its rollouts are: the job's agent over the evaluation prompts.

`spec.evaluation` says what (its dataset, or the built-in task's held-out split), how many
prompts, samples and in flight, and how to sample; the agent is the one training rolls out
(`group_rollout`: single-turn, the whitebox loop, the blackbox program) with the evaluation's
sampling and `samplesPerPrompt` trajectories per group, each version's groups tagged apart
(`evaluation_tag`). Used by the training pipeline and by `dressage eval`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dressage.api.evaluation import EvaluationSpec
from dressage.api.job import AsyncRLJob, AsyncRLJobSpec
from dressage.data.groups import GroupRollout
from dressage.evaluation.evaluator import EvaluationSettings, Evaluator, evaluation_tag
from dressage.evaluation.figures import Evaluation
from dressage.evaluation.schedule import Evaluations, EvaluationSchedule
from dressage.orchestrator.collectors import group_rollout
from dressage.proxy.client import ProxyRolloutClient
from dressage.tasks.base import Environment, Task
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.tasks.dataset import use_faults
from dressage.tasks.faults import UserCodeFaults
from dressage.tasks.registry import held_out_task


def evaluation_of(spec: AsyncRLJobSpec) -> EvaluationSpec:
    """The job's evaluation settings (`dressage eval` on a job without them: the defaults)."""
    return spec.evaluation if spec.evaluation is not None else EvaluationSpec()


def evaluation_rollout_spec(spec: AsyncRLJobSpec) -> AsyncRLJobSpec:
    """`spec` with the evaluation's sampling in place of training's: `samplesPerPrompt`
    trajectories per group, its temperature, top-p and token budget."""
    evaluation = evaluation_of(spec)
    rollout = spec.rollout.model_copy(
        update={
            "group_size": evaluation.samples_per_prompt,
            "temperature": evaluation.temperature,
            "top_p": evaluation.top_p,
            "max_new_tokens": evaluation.max_new_tokens or spec.rollout.max_new_tokens,
        }
    )
    return spec.model_copy(update={"rollout": rollout})


def evaluation_task(spec: AsyncRLJobSpec) -> Task | Environment:
    """The evaluation prompts: `spec.evaluation.dataset`, else the task's held-out split."""
    return held_out_task(spec.task, evaluation_of(spec).dataset)


def build_evaluator(
    job: AsyncRLJob,
    *,
    proxy: ProxyRolloutClient,
    codec: PromptCodec,
    faults: UserCodeFaults,
    task: Task | Environment | None = None,
    clock: Callable[[], float] = time.monotonic,
    started_at: float | None = None,
    generated: Callable[[int], None] = lambda tokens: None,
) -> Evaluator:
    """The job's evaluator through `proxy` (`task`: the evaluation prompts when built)."""
    spec = evaluation_rollout_spec(job.spec)
    evaluation = evaluation_of(job.spec)
    task = evaluation_task(job.spec) if task is None else task
    use_faults(task, faults)
    source = TaskPrompts(task, codec)

    def agent_for(version: str) -> GroupRollout:
        agent = group_rollout(
            spec,
            source=source,
            proxy=proxy,
            run_tag=evaluation_tag(job.metadata.name, version),
            faults=faults,
        )
        agent.refresh_share = 0.0  # type: ignore[attr-defined]  # every GroupAgent has it
        return agent

    return Evaluator(
        agent_for,
        EvaluationSettings(
            prompts=evaluation.prompts,
            ks=evaluation.ks(),
            pass_threshold=evaluation.pass_threshold,
            max_concurrency=evaluation.max_concurrency,
            max_regenerations=evaluation.max_regenerations,
        ),
        clock=clock,
        started_at=started_at,
        generated=generated,
    )


def build_evaluations(
    job: AsyncRLJob,
    *,
    proxy: ProxyRolloutClient,
    codec: PromptCodec,
    faults: UserCodeFaults,
    final_step: int,
    on_result: Callable[[Evaluation], None],
    log: Callable[[str], None],
    generated: Callable[[int], None] = lambda tokens: None,
) -> Evaluations | None:
    """The run's evaluations during training (None without `spec.evaluation`); `generated`
    is called with the tokens of every evaluation attempt (the token ledger)."""
    if job.spec.evaluation is None:
        return None
    evaluator = build_evaluator(job, proxy=proxy, codec=codec, faults=faults, generated=generated)
    schedule = EvaluationSchedule(job.spec.evaluation.every_steps, final_step)
    return Evaluations(evaluator, schedule, on_result=on_result, log=log)

"""One job's run, wired in order and torn down in reverse: the same for `dressage run` and for
every rank of `dressage train`.

Rank 0 (the only rank under `dressage run`):

1. the proxy's client (`ProxyRolloutClient`) for the job's proxy;
2. the prompts: the job's task with the model's tokenizer (`TaskPrompts`);
3. the collector for `spec.rollout.mode`, rolling out the job's agent: in this process, or
   with `spec.rollout.separateProcess` in a rollout process of its own
   (`dressage.orchestrator.rollout_process`);
4. resume: the collector's data position from the trainer session's checkpoint;
5. the weight publisher for the job's engines;
6. engine sync: engines that serve another version than the session's get its weights;
7. the training loop, each step's record exported on the job's `/metrics` and handed to the
   entry point's sink;
8. close: collector, publisher and proxy client, whatever ended the loop.

The other ranks train on rank 0's batches (`train_loop` without collector and publisher).
Starting engines and proxies is the entry points' business: local child processes under
`dressage run`, pods of the operator on a cluster.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dressage.api.job import AsyncRLJob
from dressage.orchestrator.collectors import make_collector, weight_update_pause_mode
from dressage.orchestrator.loop import StepRecord, StepSink, sync_engines, train_loop
from dressage.orchestrator.metrics import RunMetrics
from dressage.orchestrator.publish import WeightPublisher
from dressage.orchestrator.rollout_process import RolloutProcessCollector, RolloutRecipe
from dressage.proxy.client import ProxyRolloutClient
from dressage.rollout.collector import Collector
from dressage.tasks import get_task
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.tasks.rewards import reward_report
from dressage.trainer.session import TrainerSession


@dataclass(frozen=True)
class Endpoints:
    """Where rank 0 finds the job's proxy and engines."""

    proxy_url: str
    engine_urls: Sequence[str]
    proxy_token: str | None = None
    """Bearer token of the proxy, when it requires one."""


async def run_pipeline(
    job: AsyncRLJob,
    session: TrainerSession,
    *,
    endpoints: Endpoints | None,
    steps: int,
    metrics: RunMetrics | None = None,
    sink: StepSink = lambda record: None,
    log: Callable[[str], None] = lambda line: None,
    engines_have_initial_weights: bool = True,
    rollout_cpus: Sequence[int] | None = None,
) -> None:
    """Train `session` until step `steps`; rank 0 needs `endpoints`.

    `engines_have_initial_weights`: whether the engines were started from the trainer's initial
    model (`dressage run` starts them so; on a cluster they start from the staged base model,
    which a warm start changes). `rollout_cpus`: the cores of the rollout process when
    `spec.rollout.separateProcess` is on."""
    if not session.env.is_main:
        await train_loop(session, steps=steps, collector=None, publisher=None, sink=sink)
        return
    if endpoints is None:
        raise ValueError("rank 0 needs the proxy and engine endpoints")
    spec = job.spec
    if metrics is not None:
        metrics.set_version(session.state.version_index, session.state.version)
        metrics.step.set(session.state.step)

    task = get_task(spec.task)

    # Where the step's reward report comes from: this process's task, or the rollout process.
    rewards_of: Callable[[], tuple[dict[str, float], dict[str, int]]]
    rewards_of = functools.partial(reward_report, task)

    def record_step(record: StepRecord) -> None:
        # A user's reward function reports its named parts and its failures once per step.
        parts, failures = rewards_of()
        record.metrics.update(parts)
        for reason, count in failures.items():
            record.failure_reasons[reason] = record.failure_reasons.get(reason, 0) + count
        if metrics is not None:
            metrics.observe(record, session.state.version_index)
        sink(record)

    async with contextlib.AsyncExitStack() as opened:  # closed in reverse order, always
        proxy = ProxyRolloutClient(endpoints.proxy_url, token=endpoints.proxy_token)
        opened.push_async_callback(proxy.aclose)
        codec = PromptCodec.from_pretrained(session.initial_model_dir)
        source = TaskPrompts(task, codec)
        collector: Collector
        if spec.rollout.separate_process:
            remote = RolloutProcessCollector(
                RolloutRecipe(
                    job=job.model_dump(mode="json", by_alias=True),
                    model_dir=str(session.initial_model_dir),
                    proxy_url=endpoints.proxy_url,
                    proxy_token=endpoints.proxy_token,
                    cpus=rollout_cpus,
                )
            )
            collector = remote
            log(f"rollout in process {remote.pid}")
            rewards_of = remote.drain_reward_report
        else:
            collector = make_collector(spec, source=source, proxy=proxy, run_tag=job.metadata.name)
        collector.load_state_dict(session.state.collector)
        publisher = WeightPublisher(
            endpoints.engine_urls,
            proxy=proxy,
            pause_mode=weight_update_pause_mode(spec),
            update_timeout_s=spec.inference.weight_update_timeout_seconds,
        )
        opened.push_async_callback(publisher.aclose)
        opened.push_async_callback(collector.aclose)
        await sync_engines(
            session, publisher, engines_have_initial_weights=engines_have_initial_weights
        )
        log(
            f"training {job.metadata.name}: steps {session.state.step + 1}..{steps}, "
            f"{spec.rollout.batch_size} groups x {spec.rollout.group_size} samples per step, "
            f"mode {spec.rollout.mode.value}"
        )
        await train_loop(
            session, steps=steps, collector=collector, publisher=publisher, sink=record_step
        )

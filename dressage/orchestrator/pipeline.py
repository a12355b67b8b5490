"""One job's run, wired in order and torn down in reverse: the same for `dressage run` and for
every rank of `dressage train`.

Rank 0 (the only rank under `dressage run`):

1. the proxy's client (`ProxyRolloutClient`) for the job's proxy;
2. the prompts: the job's task with the model's tokenizer (`TaskPrompts`);
3. the collector for `spec.rollout.mode`, rolling out the job's agent: in this process, or
   with `spec.rollout.separateProcess` in a rollout process of its own
   (`dressage.orchestrator.rollout_process`);
4. resume: the collector's data position from the trainer session's checkpoint;
5. the weight publisher for the job's engines and `spec.inference.weightSync`: `disk`
   (`DiskPublisher`, engines load each version's checkpoint) or `distributed`
   (`CollectivePublisher`: a weight-update group per engine, formed here with the engines
   up now and at each publish with those that joined since; each step's weights are
   broadcast to the engines);
6. engine sync: engines that serve another version than the session's get its weights;
7. the training loop, each step's record exported on the job's `/metrics` and handed to the
   entry point's sink, its token ledger with the proxies' lost tokens since the previous step
   (`ProxyLostTokens`: read from every replica's `/metrics` while the step trains); beside it,
   with `spec.evaluation`, the held-out evaluations of the starting version, of every
   `everySteps`-th and of the final one (each publish waits for those in flight, so each names
   one version: `dressage.evaluation`);
8. close: collector, publisher and proxy client, whatever ended the loop; then what the
   collector counted that no step's record carries (the failed attempts and drops of groups
   not trained, a run stopped by the breaker before its first step) goes to `unrecorded`.

The other ranks train on rank 0's batches (`train_loop` without collector); with distributed
sync they also take part in every publish (`CollectiveFollower`: each parameter is gathered over
the gang while rank 0 sends it).
Starting engines and proxies is the entry points' business: local child processes under
`dressage run`, pods of the operator on a cluster.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dressage.api.figures import StepFigures
from dressage.api.job import AsyncRLJob, AsyncRLJobSpec
from dressage.evaluation.figures import Evaluation, best
from dressage.orchestrator.collectors import (
    budget_settings,
    make_collector,
    weight_update_pause_mode,
)
from dressage.orchestrator.evaluations import build_evaluations
from dressage.orchestrator.loop import StepRecord, StepSink, sync_engines, train_loop
from dressage.orchestrator.metrics import RunMetrics
from dressage.orchestrator.rollout_process import RolloutProcessCollector, RolloutRecipe
from dressage.proxy.client import ProxyRolloutClient
from dressage.rollout.budget import BudgetController, BudgetSteering
from dressage.rollout.collector import AsyncRolloutCollector, Collector
from dressage.rollout.ledger import Account
from dressage.rollout.ledger import count as count_tokens
from dressage.rollout.proxy_ledger import ProxyLostTokens
from dressage.tasks import Environment, Task, get_task
from dressage.tasks.codec import PromptCodec, TaskPrompts
from dressage.tasks.dataset import DatasetTask, bad_row_counts
from dressage.tasks.faults import UserCodeFaults
from dressage.trainer.session import TrainerSession
from dressage.weights.collective import CollectiveFollower, CollectivePublisher
from dressage.weights.disk import DiskPublisher
from dressage.weights.engines import ProxyEngines
from dressage.weights.lora import LoraPublisher

ENGINE_WAIT_SECONDS = 300.0
"""How long rank 0 waits for a first engine before forming the weight-update groups of a fresh
run (`CollectivePublisher.wait_for_an_engine`): below the default timeouts of the trainer
gang's own collectives, which its other ranks wait in meanwhile."""


@dataclass(frozen=True)
class Endpoints:
    """Where rank 0 finds the job's proxy and engines."""

    proxy_url: str
    engine_urls: Sequence[str]
    proxy_token: str | None = None
    """Bearer token of the proxy, when it requires one."""
    weight_sync: WeightSyncWiring | None = None
    """Where the weight-update group meets (`spec.inference.weightSync: distributed`)."""


@dataclass(frozen=True)
class WeightSyncWiring:
    """The rendezvous of the weight-update group between trainer rank 0 and the engines."""

    master_address: str
    """Trainer rank 0's address as the engines reach it."""
    master_port: int
    """Port of the group's store on trainer rank 0 (0: a free one, engines on this host)."""
    backend: str
    """`nccl` between GPUs (SGLang engines), `gloo` on CPU (embedded engines)."""
    ranks_per_engine: int = 1
    """Ranks each engine takes in the group: its tensor-parallel size."""


def weight_sync_wiring(
    spec: AsyncRLJobSpec, address: str | None, port: int | None, device: torch.device
) -> WeightSyncWiring | None:
    """The weight-update group's rendezvous for a trainer on `device` whose rank 0 the engines
    reach at `address` (None with `weightSync: disk`): NCCL from a GPU trainer to SGLang
    engines, gloo from a CPU one; each engine takes its tensor-parallel size in ranks."""
    if spec.inference.weight_sync != "distributed":
        return None
    if not address:
        raise ValueError(
            "spec.inference.weightSync is 'distributed': trainer rank 0 needs the address the "
            "engines reach it by ($DRESSAGE_WEIGHT_SYNC_ADDRESS or $MASTER_ADDR)"
        )
    return WeightSyncWiring(
        master_address=address,
        master_port=spec.inference.weight_sync_port if port is None else port,
        backend="nccl" if device.type == "cuda" else "gloo",
        ranks_per_engine=spec.inference.tensor_parallel_size,
    )


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
    task: Task | Environment | None = None,
    unrecorded: Callable[[StepFigures], None] = lambda figures: None,
    faults: UserCodeFaults | None = None,
    evaluated: Callable[[Evaluation], None] = lambda evaluation: None,
    earlier_evaluations: Sequence[Evaluation] = (),
    proxy_lost: ProxyLostTokens | None = None,
) -> None:
    """Train `session` until step `steps`; rank 0 needs `endpoints`.

    `engines_have_initial_weights`: whether the engines were started from the trainer's initial
    model (`dressage run` starts them so; on a cluster they start from the staged base model,
    which a warm start changes). `rollout_cpus`: the cores of the rollout process when
    `spec.rollout.separateProcess` is on. `task`: the job's task when the caller built it
    already (its pre-flight checks did), else it is built here. `unrecorded`: called at close
    with the rollout figures the collector counted beyond the steps' records. `faults`: the
    run's registry of user-code faults (the caller reads it for the report), handed to the
    reward function, the agents and the rollout process; None: one of the pipeline's own.
    `evaluated`: called with each held-out evaluation (`spec.evaluation`) as it completes: the
    starting version's, every `everySteps` steps', the final version's.
    `earlier_evaluations`: those of the run before it resumed, so that the best version's
    weights stay pinned across restarts. `proxy_lost`: the reader of the proxies' lost tokens
    for the steps' token ledgers, which the caller keeps to read the rest at the run's end
    (`dressage.runner.ledger_report`); None: one of the pipeline's own."""
    spec = job.spec
    # A LoRA job's versions are adapters, loaded from the directory the trainer writes
    # whatever the transport (`dressage.weights.lora`): megabytes, no weight-update group.
    distributed = spec.inference.weight_sync == "distributed" and spec.model.lora is None
    if not session.env.is_main:
        follower = CollectiveFollower(session.trainer.iter_publishable) if distributed else None
        if follower is not None:
            await sync_engines(
                session, follower, engines_have_initial_weights=engines_have_initial_weights
            )
        await train_loop(session, steps=steps, collector=None, publisher=follower, sink=sink)
        return
    if endpoints is None:
        raise ValueError("rank 0 needs the proxy and engine endpoints")
    if distributed and endpoints.weight_sync is None:
        raise ValueError(
            "spec.inference.weightSync is 'distributed': rank 0 needs the weight-update "
            "group's address and port"
        )
    if metrics is not None:
        metrics.set_version(session.state.version_index, session.state.version)
        metrics.step.set(session.state.step)

    if task is None:
        task = get_task(spec.task)
    faults = UserCodeFaults() if faults is None else faults
    if metrics is not None:
        metrics.set_dataset_bad_rows(bad_row_counts(task))

    recorded = StepFigures()
    """The collector's figures the steps' records carry so far."""
    lost_reader = ProxyLostTokens() if proxy_lost is None else proxy_lost

    def record_step(record: StepRecord) -> None:
        nonlocal recorded
        recorded = recorded.plus(record.collected())  # the proxies' lost tokens left out
        if metrics is not None:
            metrics.observe(record, session.state.version_index)
        sink(record)

    async with contextlib.AsyncExitStack() as opened:  # closed in reverse order, always
        proxy = ProxyRolloutClient(endpoints.proxy_url, token=endpoints.proxy_token)
        opened.push_async_callback(proxy.aclose)
        await lost_reader.start(proxy)  # a restarted trainer's steps recorded the rest
        codec = PromptCodec.from_pretrained(session.initial_model_dir)
        source = TaskPrompts(task, codec)
        collector: Collector | None = None

        def report_unrecorded() -> None:  # after the collector closed (the stack unwinds)
            if collector is not None:
                unrecorded(collector.stats.totals.since(recorded))

        opened.callback(report_unrecorded)
        if spec.rollout.separate_process:
            remote = RolloutProcessCollector(
                RolloutRecipe(
                    job=job.model_dump(mode="json", by_alias=True),
                    model_dir=str(session.initial_model_dir),
                    proxy_url=endpoints.proxy_url,
                    proxy_token=endpoints.proxy_token,
                    cpus=rollout_cpus,
                    task=task if isinstance(task, DatasetTask) else None,
                ),
                faults=faults,
            )
            collector = remote
            log(f"rollout in process {remote.pid}")
        else:
            collector = make_collector(
                spec, source=source, proxy=proxy, run_tag=job.metadata.name, faults=faults
            )
        assert collector is not None
        collector.load_state_dict(session.state.collector)
        publisher: DiskPublisher
        engines = ProxyEngines(proxy)  # the engines the proxy lists, as the rollouts see them
        if endpoints.weight_sync is not None and distributed:
            wiring = endpoints.weight_sync
            publisher = CollectivePublisher(
                engines,
                weights=session.trainer.iter_publishable,
                master_address=wiring.master_address,
                master_port=wiring.master_port,
                backend=wiring.backend,
                ranks_per_engine=wiring.ranks_per_engine,
                bucket_bytes=spec.inference.weight_sync_bucket_megabytes * 1024 * 1024,
                pause_mode=weight_update_pause_mode(spec),
                update_timeout_s=spec.inference.weight_update_timeout_seconds,
            )
        else:
            publisher = (LoraPublisher if spec.model.lora is not None else DiskPublisher)(
                engines,
                pause_mode=weight_update_pause_mode(spec),
                update_timeout_s=spec.inference.weight_update_timeout_seconds,
            )
        opened.push_async_callback(publisher.aclose)
        opened.push_async_callback(collector.aclose)
        if isinstance(publisher, CollectivePublisher):
            if session.state.version_index == 0 and not engines_have_initial_weights:
                await publisher.wait_for_an_engine(ENGINE_WAIT_SECONDS)
            await publisher.start()
            log(
                f"weight-update groups formed with {len(publisher.sender.members)} engines "
                f"({publisher.sender.world_size} ranks each, {publisher.sender.backend})"
            )
        await sync_engines(
            session, publisher, engines_have_initial_weights=engines_have_initial_weights
        )
        log(
            f"training {job.metadata.name}: steps {session.state.step + 1}..{steps}, "
            f"{spec.rollout.batch_size} groups x {spec.rollout.group_size} samples per step, "
            f"mode {spec.rollout.mode.value}"
            + (
                ""
                if spec.model.lora is None
                else f", training a rank-{spec.model.lora.rank} LoRA adapter (base frozen)"
            )
        )
        steering = None
        if spec.staleness.auto:
            assert isinstance(collector, AsyncRolloutCollector | RolloutProcessCollector)
            settings = budget_settings(spec)
            steering = BudgetSteering(BudgetController(settings), collector, log)
            log(
                f"staleness budget: version lag at most {settings.max_lag}"
                + ("" if settings.max_kl is None else f", mismatch KL at most {settings.max_kl}")
                + f"; depth {settings.start} of at most {settings.max_concurrency} groups, "
                f"keepVersions {settings.max_keep}"
            )
        done: list[Evaluation] = list(earlier_evaluations)

        def pin_best() -> None:  # weight pruning never deletes the best-evaluated version
            top = best(done)
            if top is not None:
                session.pinned_versions = {top.version}

        pin_best()

        def record_evaluation(evaluation: Evaluation) -> None:
            done.append(evaluation)
            pin_best()
            if metrics is not None:
                metrics.observe_evaluation(evaluation)
            evaluated(evaluation)

        evaluations = build_evaluations(
            job,
            proxy=proxy,
            codec=codec,
            faults=faults,
            final_step=steps,
            on_result=record_evaluation,
            log=log,
            generated=lambda tokens: count_tokens(
                collector.stats.totals.ledger_tokens, Account.EVALUATION, tokens
            ),
        )
        if evaluations is not None:
            opened.push_async_callback(evaluations.aclose)
            evaluations.start(session.state.version, session.state.step)
        await train_loop(
            session,
            steps=steps,
            collector=collector,
            publisher=publisher,
            sink=record_step,
            steering=steering,
            watcher=evaluations,
            lost_tokens=lambda: lost_reader.read(proxy),
        )
        if evaluations is not None:
            await evaluations.finish(session.state.version, session.state.step)

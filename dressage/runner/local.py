"""`dressage run`: execute an AsyncRLJob on one machine.

In order: the initial model (built and warm-started when the job asks, cached), the trainer
session (resumed from `<workdir>/<job>/` when a checkpoint exists), engine processes serving
the session's current weights and version and playing the job's SGLang release
(`spec.inference.sglangVersion`, or the tested release that stands in for it; with
`weightSync: distributed` they join the trainer's weight-update group over gloo on loopback),
the proxy in front of them (reading the engines' URLs from a file the run keeps, as a cluster's
proxy reads the job's ConfigMap: `dressage.runner.fleet`), the `/metrics` endpoint, then the
job's pipeline (`dressage.orchestrator.pipeline`, the same as every trainer rank's on a
cluster). The trainer runs in this process (world size 1). With a churn schedule (`--churn`,
`dressage.runner.churn`) engines are killed, added and drained while it trains, and
`churn.json` in the run directory says what each change did. On the way out, whatever the
reason, children are stopped, a summary of the run's failures by reason is printed (with what
was counted but not logged), and the run report is written, with every distinct error the
job's own code raised (`user_code_errors`) and the dataset's skipped rows by reason
(`dataset`), unless the run ended on a configuration error.

A run that trained samples of which not one got a real reward (every reward call failed, so
every sample was trained with 0 under `onRewardError: zero`) learned nothing: `run` raises
`NoRealReward` after its last step, and `dressage run` exits 1 with the failure summary, so a
script or CI job does not take it for a good run.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dressage.api.figures import StepFigures, line_parts
from dressage.api.job import AsyncRLJob, AsyncRLJobSpec, RolloutMode
from dressage.engine.embedded.release_profiles import stand_in_release
from dressage.evaluation.figures import Evaluation, best
from dressage.evaluation.log import EvaluationLog
from dressage.model import default_cache_dir
from dressage.model.warmstart import initial_model_dir
from dressage.orchestrator.loop import StepRecord
from dressage.orchestrator.metrics import RunMetrics
from dressage.orchestrator.pipeline import Endpoints, WeightSyncWiring, run_pipeline
from dressage.rollout.proxy_ledger import ProxyLostTokens
from dressage.runner.churn import ChurnEvent
from dressage.runner.fleet import ChurnDriver, LocalFleet
from dressage.runner.ledger_report import ledger_line, read_run_ledger
from dressage.runner.processes import ChildProcess, pin_this_process, python_module, stop_together
from dressage.runner.report import (
    EVAL_PLOTS,
    PLOTS,
    REPORT,
    History,
    no_real_reward,
    run_summary,
    summarize,
    with_unrecorded,
    write_report,
)
from dressage.runner.startup_checks import check_cpus
from dressage.tasks import get_task
from dressage.tasks.base import Environment, Task
from dressage.tasks.dataset import LOGGED_BAD_ROWS, DatasetTask, bad_row_counts
from dressage.tasks.faults import UserCodeFaults, merge_reports
from dressage.tracking import RunContext, Trackers
from dressage.trainer import grpo
from dressage.trainer.checkpoint import RunDir
from dressage.trainer.session import TrainerSession

ENGINE_READY = "engine ready on "
PROXY_READY = "proxy ready on "
STARTUP_DEADLINE_S = 300.0


class NoRealReward(RuntimeError):
    """The run trained samples, and every one of them without a real reward."""


@dataclass(frozen=True)
class LocalRunOptions:
    manifest: Path
    workdir: Path
    steps: int
    fresh: bool = False
    metrics_port: int | None = None
    device: str = "cpu"
    """Torch device of the trainer and of every embedded engine (`cpu`, `cuda`, `cuda:N`)."""
    churn: tuple[ChurnEvent, ...] = ()
    """Engines to kill, add and drain while the run trains (`dressage.runner.churn`)."""


class LocalRun:
    """One `dressage run` invocation."""

    def __init__(
        self,
        job: AsyncRLJob,
        options: LocalRunOptions,
        out: Callable[[str], None] = print,
        *,
        task: Task | Environment | None = None,
    ) -> None:
        """`task`: the job's task as the pre-flight checks built it (None: built again)."""
        self.job = job
        self.task = task
        self.spec = job.spec
        self.options = options
        self.out = out
        self.root = options.workdir / job.metadata.name
        self.children: list[ChildProcess] = []
        """The proxy (the engines are the fleet's)."""
        self.fleet: LocalFleet | None = None
        self.churn: ChurnDriver | None = None
        self.metrics = RunMetrics(job.metadata.name)
        self.history = History(self.root)
        self.evaluations = EvaluationLog(self.root)
        self.rewards: list[float] = []
        self.faults = UserCodeFaults()
        """The run's user-code faults: recorded during rollout, listed in the report."""
        self.unrecorded: StepFigures | None = None
        """What the collector counted beyond the steps' records, once it closed."""
        self.trackers: Trackers | None = None
        """The experiment trackers of `spec.tracking`, open from before the first step."""
        self.last_step = 0
        self.ledger_tokens: Counter[str] = Counter()
        """This invocation's token ledger as its steps' records carry it."""
        self.token_ledger: dict[str, Any] | None = None
        """The ledger against the engines' own count, read as the pipeline ended."""
        self.proxy_lost = ProxyLostTokens()
        """The reader of the proxy's lost tokens that the steps' records hold."""

    async def run(self) -> None:
        spec = self.spec
        if self.options.fresh and self.root.exists():
            shutil.rmtree(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        check_cpus(spec.local.engine_cpus, "spec.local.engineCpus")
        check_cpus(spec.local.trainer_cpus, "spec.local.trainerCpus")
        check_cpus(spec.local.rollout_cpus, "spec.local.rolloutCpus")
        if spec.local.trainer_cpus is not None:
            pin_this_process(spec.local.trainer_cpus)
        torch.set_num_threads(spec.local.trainer_threads)
        grpo.quiet_transformers()
        cache_dir = Path(spec.local.cache_dir) if spec.local.cache_dir else default_cache_dir()

        if self.task is None:  # built once, here, for the warm start, the pipeline and the report
            self.task = await asyncio.to_thread(get_task, spec.task)
        model_dir = await asyncio.to_thread(
            initial_model_dir, spec, cache_dir, log=self.out, task=self.task
        )
        session = await asyncio.to_thread(
            TrainerSession.open,
            spec,
            model_dir=model_dir,
            run_dir=RunDir(self.root),
            device=torch.device(self.options.device),
        )
        self.history.resume(session.state.step, session.state.record)
        self.evaluations.truncate(session.state.step)
        self.rewards = [float(r["reward"]) for r in self.history.read() if "reward" in r]
        if session.state.step >= self.options.steps:
            self.out(finished_message(session.state.step, self.options.steps, self.root))
            return
        if session.resumed:
            self.out(
                f"resuming at step {session.state.step + 1} from the checkpoint of step "
                f"{session.state.step} (weight version {session.state.version})"
            )
        self.last_step = session.state.step
        # Before any engine starts: a tracker that cannot start stops the run here
        # (`onError: fail`, a configuration error naming its field).
        self.trackers = await asyncio.to_thread(
            Trackers.open, RunContext(self.job, self.root), warn=self.out
        )
        if self.trackers.names:
            self.out(f"tracking: {', '.join(self.trackers.names)}")

        engine_urls = await self._start_engines(session, cache_dir)
        proxy_url = await self._start_proxy(model_dir)
        fleet = self.fleet
        assert fleet is not None
        fleet.proxy_urls = proxy_url.split(",")
        if self.options.churn:
            self.churn = ChurnDriver(fleet, self.options.churn, model=model_dir, out=self.out)
            self.out(f"churn: {', '.join(str(e) for e in self.options.churn)}")
        port = self.options.metrics_port
        bound = self.metrics.serve(spec.local.metrics_port if port is None else port)
        self.out(f"metrics on http://127.0.0.1:{bound}/metrics")
        try:
            await self._run_pipeline(session, proxy_url, engine_urls)
            collected = self.ledger_tokens.copy()
            if self.unrecorded is not None:
                collected.update(self.unrecorded.ledger_tokens)
            self.token_ledger = await read_run_ledger(
                collected, fleet.proxy_urls, fleet.urls.values(), steps_read=self.proxy_lost
            )
        finally:
            if self.churn is not None:
                await self.churn.aclose()
                self.out(f"churn: {self.churn.path}")
        if no_real_reward(summarize(self.history.read())):
            raise NoRealReward(
                "no sample of the run got a real reward: every reward call failed, so every "
                "sample was trained with reward 0 (see the run summary and user_code_errors "
                "in the report)"
            )

    async def _run_pipeline(
        self, session: TrainerSession, proxy_url: str, engine_urls: list[str]
    ) -> None:
        spec = self.spec
        await run_pipeline(
            self.job,
            session,
            endpoints=Endpoints(
                proxy_url=proxy_url,
                engine_urls=engine_urls,
                # The embedded engines join the trainer's weight-update group over gloo on
                # loopback, at a free port.
                weight_sync=(
                    WeightSyncWiring(master_address="127.0.0.1", master_port=0, backend="gloo")
                    if spec.inference.weight_sync == "distributed"
                    else None
                ),
            ),
            steps=self.options.steps,
            metrics=self.metrics,
            sink=self._on_step,
            log=self.out,
            rollout_cpus=rollout_process_cpus(spec),
            task=self.task,
            unrecorded=self._set_unrecorded,
            faults=self.faults,
            evaluated=self._on_evaluation,
            earlier_evaluations=self.evaluations.evaluations(),
            proxy_lost=self.proxy_lost,
        )

    def _best_weights(self) -> dict[str, str]:
        """Where the best-evaluated version's weights are (kept by pruning): `weights/<v>`
        in the run directory, or the starting model for `v0`."""
        top = best(Evaluation.from_dict(r) for r in self.evaluations.read())
        if top is None:
            return {}
        path = self.root / "weights" / top.version
        if path.is_dir():
            return {"best_weights": str(path)}
        return {"best_weights": "the starting model"} if top.step == 0 else {}

    def _on_evaluation(self, evaluation: Evaluation) -> None:
        self.evaluations.append(evaluation.to_dict())
        if self.trackers is not None:
            self.trackers.log_evaluation(evaluation.step, evaluation.tracker_figures())
        self.out(evaluation.line())

    def _set_unrecorded(self, figures: StepFigures) -> None:
        self.unrecorded = figures

    def _on_step(self, record: StepRecord) -> None:
        self.history.append(record.to_dict())
        self.ledger_tokens.update(record.figures.ledger_tokens)
        self.last_step = record.step
        if self.trackers is not None:
            self.trackers.log_step(record.figures, record.to_dict())
        self.rewards.append(record.figures.reward or 0.0)
        self.out(progress_line(record, self.options.steps, self.rewards))
        if self.churn is not None:
            self.churn.on_step(record.step)
        figures = record.figures
        if figures.failed_attempts:
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(figures.failed_attempts.items()))
            groups = int(figures.total("failed_groups"))
            self.out(
                f"  step {record.step}: failed attempts (each retry counts one): {reasons}; "
                f"in {groups} prompt group{'s' if groups != 1 else ''}"
            )
        if figures.reward_failed_samples:
            failed = int(figures.total("reward_failed_samples"))
            reasons = ", ".join(
                f"{k} {v}" for k, v in sorted(figures.reward_failed_samples.items())
            )
            self.out(
                f"  step {record.step}: {failed} of {figures.samples} samples trained with "
                f"reward 0, their reward call failed: {reasons}"
            )

    async def _start_engines(self, session: TrainerSession, cache_dir: Path) -> list[str]:
        spec = self.spec
        release = stand_in_release(spec.inference.sglang_version)

        def argv(index: int, model: Path, version: str) -> list[str]:
            return python_module(
                "engine", "serve", "--host", "127.0.0.1", "--port", "0",
                "--model", str(model),
                "--weight-version", version,
                "--seed", str(spec.training.seed + index),
                "--threads", str(spec.local.engine_threads),
                "--max-batch-size", str(spec.local.engine_max_batch_size),
                "--cache-dir", str(cache_dir),
                "--device", self.options.device,
                "--min-step-interval-ms", str(spec.local.engine_min_step_interval_ms),
                "--sglang-release", release,
                *([] if spec.model.lora is None else spec.model.lora.server_args()),
            )  # fmt: skip

        self.fleet = LocalFleet(
            self.root, argv, cpus=spec.local.engine_cpus, startup_deadline_s=STARTUP_DEADLINE_S
        )
        self.out(f"engines serve SGLang {release}'s HTTP API")
        model, version = session.engine_start
        urls = await self.fleet.start(spec.inference.replicas, model, version)
        self.out(f"engines ready: {', '.join(urls)} (weight version {version})")
        return urls

    async def _start_proxy(self, model_dir: Path) -> str:
        """Start `spec.proxy.replicas` proxies (one by default), each reading the fleet's
        engine URLs file; their URLs, comma-separated, as the rollout client takes them (it
        hashes each prompt group onto one replica)."""
        assert self.fleet is not None
        urls = []
        for replica in range(self.spec.proxy.replicas):
            argv = python_module(
                "proxy", "--config", str(self.options.manifest),
                "--engine-urls-file", str(self.fleet.urls_file),
                "--host", "127.0.0.1", "--port", "0",
                "--model", str(model_dir),
            )  # fmt: skip
            name = "proxy" if replica == 0 else f"proxy-{replica}"
            child = ChildProcess(
                name,
                argv,
                log_path=self.root / "logs" / f"{name}.log",
                cpus=self.spec.local.engine_cpus,
            )
            self.children.append(child)
            child.start()
            url = await child.wait_for(PROXY_READY, STARTUP_DEADLINE_S)
            self.out(f"{name} ready: {url}")
            urls.append(url)
        return ",".join(urls)

    def shutdown(self, *, report: bool = True) -> None:
        """Stop children (the proxies together, then the engines together), the metrics server;
        write the report (unless `report` is False: a run refused for its configuration leaves
        none)."""
        stop_together(list(reversed(self.children)))
        self.children.clear()
        if self.fleet is not None:
            self.fleet.stop_all()
        self.metrics.close()
        if self.options.device.startswith("cuda") and torch.cuda.is_available():
            peak = torch.cuda.max_memory_allocated(torch.device(self.options.device))
            self.out(f"trainer peak GPU memory: {peak / 2**30:.2f} GiB")
        faults = self.faults.entries()
        calls = sum(f.count for f in faults)
        if faults:
            errors = f"{len(faults)} distinct error{'s' if len(faults) != 1 else ''}"
            self.out(
                f"user code: {errors} in {calls} failed call{'s' if calls != 1 else ''}, each "
                "error logged once above; see user_code_errors in the report"
            )
        bad_rows = bad_row_counts(self.task)
        not_logged = {
            "user_code_failures": calls - len(faults),
            "bad_rows": max(0, sum(bad_rows.values()) - LOGGED_BAD_ROWS),
        }
        suppressed = {
            "repeated user-code failures (each distinct error was logged once)": not_logged[
                "user_code_failures"
            ],
            f"bad dataset rows (only the first {LOGGED_BAD_ROWS} were logged)": not_logged[
                "bad_rows"
            ],
        }
        if self.history.path.is_file():
            summary = with_unrecorded(summarize(self.history.read()), self.unrecorded)
            for line in run_summary(summary, bad_rows=bad_rows, suppressed=suppressed):
                self.out(line)
        if self.token_ledger is not None:
            self.out(ledger_line(self.token_ledger))
        if report and self.history.path.is_file():
            earlier = _earlier_user_code_errors(self.root / REPORT)
            path = write_report(
                self.root,
                {
                    "name": self.job.metadata.name,
                    "model": self.spec.model.source,
                    "task": self.spec.task.name,
                    "mode": self.spec.rollout.mode.value,
                    "groupSize": self.spec.rollout.group_size,
                    "batchSize": self.spec.rollout.batch_size,
                    "learningRate": self.spec.training.learning_rate,
                },
                {
                    "user_code_errors": merge_reports(earlier, [f.to_dict() for f in faults]),
                    "dataset": _dataset_report(self.task, bad_rows),
                    "not_logged": not_logged,
                    **({"token_ledger": self.token_ledger} if self.token_ledger else {}),
                    **self._best_weights(),
                },
            )
            self.out(f"report: {path} (plots in {self.root})")
            if self.trackers is not None:
                plots = [*sorted(PLOTS), *EVAL_PLOTS]
                self.trackers.log_plots(self.last_step, [self.root / p for p in plots])
        if self.trackers is not None:
            self.trackers.close()


def _dataset_report(task: object, bad_rows: dict[str, int]) -> dict[str, Any] | None:
    """The dataset part of `report.json`: its source, usable rows and skipped rows by reason
    (None for a task without a dataset)."""
    if not isinstance(task, DatasetTask):
        return None
    return {
        "source": task.source,
        "usable_rows": len(task),
        "bad_rows": sum(bad_rows.values()),
        "bad_rows_by_reason": bad_rows,
    }


def rollout_process_cpus(spec: AsyncRLJobSpec) -> list[int] | None:
    """The cores of the rollout process (`spec.rollout.separateProcess`): `rolloutCpus`, else
    the cores idle while it works. In `sync` mode the trainer waits for every batch, so
    rollout takes the trainer's cores (unpinned when the trainer is); in the async modes the
    trainer trains meanwhile, so rollout shares the engines' cores. Pinned to the engines' in
    sync mode instead, its Python (about 0.6 CPU seconds a step on the balanced benchmark job)
    would slow the engines and the proxy while the trainer's core sat idle."""
    local = spec.local
    if local.rollout_cpus is not None:
        return local.rollout_cpus
    if spec.rollout.mode is RolloutMode.SYNC:
        return local.trainer_cpus
    return local.engine_cpus


def _earlier_user_code_errors(report: Path) -> list[dict[str, Any]]:
    """The user-code errors an earlier invocation of this run reported (none when it wrote
    no report, or one without them)."""
    try:
        errors = json.loads(report.read_text(encoding="utf-8")).get("user_code_errors", [])
    except (OSError, ValueError, AttributeError):
        return []
    kept: list[dict[str, Any]] = []
    for entry in errors if isinstance(errors, list) else []:
        try:
            merge_reports([entry])
        except (KeyError, TypeError, ValueError, AttributeError):
            continue  # not an entry this version wrote
        kept.append(entry)
    return kept


def finished_message(done: int, steps: int, root: Path) -> str:
    """What a rerun of a run that has done all of its `steps` says: that nothing is left, and
    how to train on or start over."""
    return (
        f"nothing to do: {done} of {steps} steps done (checkpoints in {root}); "
        f"`--steps N` with N > {done} trains on to step N, `--fresh` starts over from step 1"
    )


def progress_line(record: StepRecord, total: int, rewards: list[float]) -> str:
    """One line per step: step, reward (and its recent mean), version, then every figure the
    declaration gives a `line` label (`figures.line_parts`), and seconds."""
    recent = rewards[-10:]
    seconds = record.rollout_seconds + record.train_seconds + record.publish_seconds
    parts = [
        f"step {record.step:>4}/{total}",
        f"reward {record.figures.reward or 0.0:.3f} "
        f"(last {len(recent)}: {sum(recent) / max(len(recent), 1):.3f})",
        f"version {record.version}",
    ]
    parts += line_parts(record.figures)
    parts.append(f"{seconds:.1f}s")
    return "  ".join(parts)
